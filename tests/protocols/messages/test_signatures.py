"""A thinking block whose signature does not open, named by its block's path as Anthropic
names it (:mod:`stateway.protocols.messages.signatures`)."""

from __future__ import annotations

from typing import Any

import orjson

from stateway.core.compaction.sealed import INVALID_CODE
from stateway.core.errors import InvalidRequest, NotFound
from stateway.core.items import Item
from stateway.protocols.messages.signatures import signed_block


def raw(*assistant: list[dict[str, Any]]) -> bytes:
    messages: list[dict[str, Any]] = []
    for content in assistant:
        messages += [{"role": "user", "content": "q"}, {"role": "assistant", "content": content}]
    return orjson.dumps({"model": "m", "max_tokens": 8, "messages": messages})


def unopened(param: str) -> InvalidRequest:
    return InvalidRequest("core words", param=param, code=INVALID_CODE)


def reasoning(seal: str) -> Item:
    return {"type": "reasoning", "summary": [], "encrypted_content": seal}


USER: Item = {"type": "message", "role": "user", "content": []}


def test_the_block_whose_signature_the_item_holds_is_named() -> None:
    first = {"type": "thinking", "thinking": "a", "signature": "sw1.good"}
    second = {"type": "thinking", "thinking": "b", "signature": "sw1.forged"}
    text = {"type": "text", "text": "t"}
    items = [USER, reasoning("sw1.good"), USER, reasoning("sw1.forged")]

    named = signed_block(
        unopened("input[3].encrypted_content"), items, raw([first], [text, second])
    )
    assert isinstance(named, InvalidRequest)
    assert (named.param, named.code, named.message) == (
        "messages.3.content.1",
        INVALID_CODE,
        "core words",
    )


def test_a_redacted_block_is_named_by_its_data() -> None:
    redacted = {"type": "redacted_thinking", "data": "sw1.forged"}
    items = [USER, reasoning("redacted_thinking:sw1.forged")]
    named = signed_block(unopened("input[1].encrypted_content"), items, raw([redacted]))
    assert named.param == "messages.1.content.0"


def test_what_names_no_block_of_the_request_is_left_as_it_is() -> None:
    block = {"type": "thinking", "thinking": "a", "signature": "sw1.forged"}
    items = [USER, reasoning("sw1.forged")]
    for error in (
        unopened("previous_response_id"),  # a thread's earlier turn
        unopened("input[9].encrypted_content"),
        unopened("input[0].encrypted_content"),  # no seal there
        InvalidRequest("other", param="input[1].encrypted_content", code="invalid_value"),
        NotFound("gone"),
    ):
        assert signed_block(error, items, raw([block])) is error
    error = unopened("input[1].encrypted_content")
    assert signed_block(error, items, b"not json") is error
