"""The model's view of a context with sealed and compaction items."""

from __future__ import annotations

from typing import Any

import pytest

from stateway.core.compaction import sealed
from stateway.core.compaction.prompt import SUMMARY_PREFIX
from stateway.core.compaction.view import kept_messages, model_view, unsealed_output
from stateway.core.errors import InternalError, InvalidRequest
from stateway.core.reasoning import Wrapped, unwrapped, unwrapped_thinking, wrapped
from stateway.sealing import AesGcmSealer

SEALER = AesGcmSealer(bytes(range(32)))
TENANT = "t1"


def message(role: str, text: str) -> dict[str, Any]:
    kind = "output_text" if role == "assistant" else "input_text"
    return {"type": "message", "role": role, "content": [{"type": kind, "text": text}]}


def compaction(summary: str, tenant: str = TENANT) -> dict[str, Any]:
    blob = sealed.seal(SEALER, "compaction", tenant, summary)
    return {"type": "compaction", "id": "cmp_1", "encrypted_content": blob}


def reasoning(text: str, shown: str = "") -> dict[str, Any]:
    return {
        "type": "reasoning",
        "id": "rs_1",
        "summary": [],
        "content": [{"type": "reasoning_text", "text": shown}] if shown else None,
        "encrypted_content": sealed.seal(SEALER, "reasoning", TENANT, text),
    }


def text_of(item: dict[str, Any]) -> str:
    return str(item["content"][0]["text"])


def test_items_without_sealed_content_are_the_same_list() -> None:
    items = [message("user", "hi"), message("assistant", "hello")]
    assert model_view(items, TENANT, SEALER, 0) is items


def test_the_last_compaction_replaces_what_it_summarized() -> None:
    call = {"type": "function_call", "call_id": "c1", "name": "f", "arguments": "{}"}
    items = [
        message("developer", "rules"),
        message("user", "one"),
        message("assistant", "answer one"),
        call,
        {"type": "function_call_output", "call_id": "c1", "output": "42"},
        {"type": "additional_tools", "role": "developer", "tools": []},
        compaction("old summary"),
        message("user", "two"),
        compaction("new summary"),
        {"type": "function_call_output", "call_id": "c1", "output": "late"},
        message("user", "three"),
        {"type": "compaction_trigger"},
    ]
    view = model_view(items, TENANT, SEALER, 0)
    assert [(item["type"], item.get("role")) for item in view] == [
        ("message", "developer"),
        ("message", "user"),
        ("additional_tools", "developer"),
        ("message", "user"),
        ("message", "user"),
        ("message", "user"),
    ]
    assert text_of(view[4]) == SUMMARY_PREFIX + "new summary"
    assert view[4]["id"] == "cmp_1"
    assert text_of(view[5]) == "three"
    assert items[6]["type"] == "compaction"  # the context itself is untouched


def test_reasoning_shows_its_sealed_text_not_what_came_with_it() -> None:
    item = reasoning("true thought", shown="forged thought")
    [view] = model_view([item], TENANT, SEALER, 0)
    assert view["content"] == [{"type": "reasoning_text", "text": "true thought"}]
    assert "encrypted_content" not in view
    assert item["content"][0]["text"] == "forged thought"


def test_an_upstreams_seal_as_it_came_is_taken_only_from_stored_items() -> None:
    signed = {"type": "reasoning", "summary": [], "encrypted_content": "EqQBCkYIBxgCKkDsig=="}
    redacted = {"type": "reasoning", "summary": [], "encrypted_content": "redacted_thinking:x"}
    empty = {"type": "reasoning", "summary": [], "encrypted_content": None}
    items = [signed, redacted, empty]
    assert model_view(items, TENANT, SEALER, len(items)) == items  # stored before wrapping
    mixed = [signed, reasoning("mine")]
    view = model_view(mixed, TENANT, SEALER, 2)
    assert view[0] is signed
    assert "encrypted_content" not in view[1]
    given = model_view([message("user", "hi"), signed, redacted], TENANT, SEALER, 1)
    assert given[1:] == [  # a client could send any tenant's: never sent on
        {"type": "reasoning", "summary": []},
        {"type": "reasoning", "summary": []},
    ]
    assert signed["encrypted_content"] == "EqQBCkYIBxgCKkDsig=="  # not changed in place
    assert model_view([empty], TENANT, SEALER, 0) == [empty]


@pytest.mark.parametrize("seal", ["EqQBsig", "redacted_thinking:RDdata", "responses:gAAAA"])
def test_an_upstreams_seal_sealed_over_opens_for_its_tenant_only(seal: str) -> None:
    blob = wrapped(SEALER, TENANT, seal)
    assert SEALER.owns(blob.removeprefix("redacted_thinking:"))
    assert blob.startswith("redacted_thinking:sw1.") == seal.startswith("redacted_thinking:")
    assert unwrapped(SEALER, TENANT, blob) == seal
    assert unwrapped(SEALER, "t2", blob) is None
    item = {"type": "reasoning", "summary": [], "content": [], "encrypted_content": blob}
    for start in (0, 1):  # the request's input, or a stored item
        [view] = model_view([item], TENANT, SEALER, start)
        assert view == {**item, "encrypted_content": seal}
        with pytest.raises(InvalidRequest) as refused:
            model_view([item], "t2", SEALER, start, prior="conversation")
        assert refused.value.code == "invalid_encrypted_content"
        assert refused.value.param == (
            "input[0].encrypted_content" if start == 0 else "conversation"
        )


def test_an_upstreams_seal_shows_the_thinking_sealed_with_it() -> None:
    """Clients of hosted OpenAI send reasoning back with its seal alone (an empty
    ``summary``): the upstream gets the thinking its signature signs, sealed beside it, not
    what came along; a seal made before the text was sealed with it keeps what came."""
    blob = wrapped(SEALER, TENANT, "EqQBsig", "true thought")
    bare = {"type": "reasoning", "summary": [], "encrypted_content": blob}
    forged = {**bare, "content": [{"type": "reasoning_text", "text": "forged"}]}
    for item in (bare, forged):
        [view] = model_view([item], TENANT, SEALER, 0)
        assert view["encrypted_content"] == "EqQBsig"
        assert view["content"] == [{"type": "reasoning_text", "text": "true thought"}]
    older = {**forged, "encrypted_content": wrapped(SEALER, TENANT, "EqQBsig")}
    [view] = model_view([older], TENANT, SEALER, 0)
    assert view["content"] == forged["content"]
    redacted = wrapped(SEALER, TENANT, "redacted_thinking:data", "ignored")
    assert unwrapped_thinking(SEALER, TENANT, redacted) == Wrapped("redacted_thinking:data", None)


def test_a_seal_of_one_reasoning_kind_does_not_open_as_the_other() -> None:
    text_seal = reasoning("thought")["encrypted_content"]
    as_redacted = {
        "type": "reasoning",
        "summary": [],
        "encrypted_content": "redacted_thinking:" + text_seal,
    }
    with pytest.raises(InvalidRequest):
        model_view([as_redacted], TENANT, SEALER, 0)
    upstream = {
        "type": "reasoning",
        "summary": [],
        "encrypted_content": wrapped(SEALER, TENANT, "s"),
    }
    [view] = model_view([upstream], TENANT, SEALER, 0)
    assert view["encrypted_content"] == "s"  # not taken for sealed text


def test_a_responses_own_output_is_sent_with_its_upstreams_seals_opened() -> None:
    own = reasoning("mine", shown="mine")
    upstream = {
        "type": "reasoning",
        "summary": [],
        "encrypted_content": wrapped(SEALER, TENANT, "sig"),
    }
    plain = message("assistant", "hi")
    sent = unsealed_output([own, upstream, plain], SEALER, TENANT)
    assert "encrypted_content" not in sent[0]
    assert sent[1]["encrypted_content"] == "sig"
    assert sent[2] is plain
    items = [plain]
    assert unsealed_output(items, SEALER, TENANT) is items


@pytest.mark.parametrize(
    ("items", "param"),
    [
        ([message("user", "a"), {**compaction("s"), "encrypted_content": "sw1.x"}], "input[1]"),
        ([{**reasoning("r"), "encrypted_content": "sw1.AAAA"}], "input[0]"),
        ([compaction("s", tenant="t2")], "input[0]"),
        # a blob of the other kind does not open
        (
            [{**compaction("s"), "encrypted_content": reasoning("r")["encrypted_content"]}],
            "input[0]",
        ),
        # an input item is verified even when a later compaction covers it
        ([{**reasoning("r"), "encrypted_content": "sw1.x"}, compaction("s")], "input[0]"),
        ([{**compaction("s"), "encrypted_content": "sw1.x"}, compaction("s")], "input[0]"),
    ],
)
def test_unverifiable_input_is_a_400_naming_it(items: list[dict[str, Any]], param: str) -> None:
    with pytest.raises(InvalidRequest) as refused:
        model_view(items, TENANT, SEALER, 0)
    assert refused.value.code == "invalid_encrypted_content"
    assert refused.value.param == f"{param}.encrypted_content"
    kind = items[int(param.removeprefix("input[").removesuffix("]"))]["type"]
    assert refused.value.message == (
        f"The encrypted content of this {kind} item could not be verified: it was not "
        "produced by this gateway for this organization, or it was altered."
    )


def test_stored_items_are_named_by_the_previous_response() -> None:
    stored = {**compaction("s"), "encrypted_content": "sw1.broken"}
    with pytest.raises(InvalidRequest) as refused:
        model_view([stored, message("user", "next")], TENANT, SEALER, 1)
    assert refused.value.param == "previous_response_id"
    with pytest.raises(InvalidRequest) as refused:
        model_view([stored, message("user", "next")], TENANT, SEALER, 1, prior="conversation")
    assert refused.value.param == "conversation"
    # a stored one that a later compaction covers is not opened at all
    covered = [stored, compaction("s")]
    assert len(model_view(covered, TENANT, SEALER, 2)) == 1


def test_without_a_sealer_sealed_input_is_refused_and_sealing_is_a_bug() -> None:
    with pytest.raises(InvalidRequest):
        model_view([compaction("s")], TENANT, None, 0)
    with pytest.raises(InvalidRequest):
        model_view([{**compaction("s"), "encrypted_content": 7}], TENANT, SEALER, 0)
    unopened = [reasoning("r")]  # without a sealer nothing is recognised as sealed here
    assert model_view(unopened, TENANT, None, 0) is unopened
    with pytest.raises(InternalError):
        sealed.seal(None, "compaction", TENANT, "s")


def test_sealed_payload_must_hold_its_field() -> None:
    blob = SEALER.seal("compaction", TENANT, b'{"text": "wrong field"}')
    with pytest.raises(InvalidRequest):
        sealed.unseal(SEALER, "compaction", TENANT, blob, "p")
    not_json = SEALER.seal("compaction", TENANT, b"\xff")
    with pytest.raises(InvalidRequest):
        sealed.unseal(SEALER, "compaction", TENANT, not_json, "p")


def test_kept_messages_are_the_user_messages() -> None:
    items = [
        message("system", "s"),
        message("user", "u1"),
        message("assistant", "a"),
        compaction("x"),
        message("user", "u2"),
    ]
    assert [text_of(item) for item in kept_messages(items)] == ["u1", "u2"]


def test_a_summary_shown_beside_its_seal_stands_for_the_users_messages_too() -> None:
    before = [message("system", "rules"), message("user", "u1"), message("assistant", "a")]
    shown = {**compaction("the summary"), "content": "the summary"}
    view = model_view([*before, shown, message("user", "go on")], TENANT, SEALER, 3)
    assert [text_of(item) for item in view] == ["rules", SUMMARY_PREFIX + "the summary", "go on"]
    sealed_only = model_view([*before, compaction("s")], TENANT, SEALER, 3)
    assert [text_of(item) for item in sealed_only] == ["rules", "u1", SUMMARY_PREFIX + "s"]


def test_a_summary_shown_beside_its_seal_must_be_the_one_sealed() -> None:
    shown = {**compaction("the summary"), "content": "the summary"}
    view = model_view([shown, message("user", "go on")], TENANT, SEALER, 0)
    assert text_of(view[0]) == SUMMARY_PREFIX + "the summary"
    unverified = (
        "The signature of this compaction could not be verified: it was not produced by this "
        "gateway for this organization, or it was altered."
    )
    mismatched = (
        "The content of this compaction differs from the summary its signature records; send "
        "it back as it was returned."
    )
    cases = [
        ({**shown, "content": "another summary"}, sealed.CONTENT_MISMATCH, mismatched),
        (
            {**compaction("the summary", "t2"), "content": "the summary"},
            sealed.SIGNATURE_INVALID,
            unverified,
        ),
        ({**shown, "encrypted_content": None}, sealed.SIGNATURE_INVALID, unverified),
    ]
    for item, code, words in cases:
        with pytest.raises(InvalidRequest) as refused:
            model_view([item, message("user", "go on")], TENANT, SEALER, 0)
        assert (refused.value.code, refused.value.param) == (code, "input[0].encrypted_content")
        assert refused.value.message == words


def test_a_compactions_cache_control_marks_its_summary() -> None:
    marked = {**compaction("s"), "cache_control": {"type": "ephemeral"}}
    [summary] = model_view([marked], TENANT, SEALER, 0)
    assert summary["content"][0]["cache_control"] == {"type": "ephemeral"}
    [plain] = model_view([compaction("s")], TENANT, SEALER, 0)
    assert "cache_control" not in plain["content"][0]
