"""An earlier answer's output tokens (``logprobs``, kept for the client) are not part of a
later turn: neither of the model's view of the context nor of its estimated size."""

from __future__ import annotations

from stateway.core.items import Item
from stateway.core.logprobs import without_tokens
from stateway.core.token_estimate import estimate_context, item_tokens
from stateway.core.tools.history import model_items

TOKEN = {"token": "Hi", "bytes": [72, 105], "logprob": -0.1, "top_logprobs": []}


def answer(tokens: list[Item]) -> Item:
    part = {"type": "output_text", "text": "Hi", "annotations": [], "logprobs": tokens}
    return {"type": "message", "role": "assistant", "id": "msg_1", "content": [part]}


def question() -> Item:
    return {"type": "message", "role": "user", "content": [{"type": "input_text", "text": "q"}]}


def test_the_model_sees_the_text_without_its_tokens() -> None:
    with_tokens = answer([TOKEN] * 50)
    [user, assistant] = model_items([question(), with_tokens])
    assert user == question()
    assert assistant == {
        **with_tokens,
        "content": [{k: v for k, v in with_tokens["content"][0].items() if k != "logprobs"}],
    }
    assert with_tokens["content"][0]["logprobs"] == [TOKEN] * 50  # the stored item is kept


def test_an_item_without_tokens_is_not_copied() -> None:
    plain = answer([])
    assert without_tokens(plain) is plain
    call = {"type": "function_call", "call_id": "c", "name": "f", "arguments": "{}"}
    assert without_tokens(call) is call


def test_the_estimate_does_not_count_the_tokens() -> None:
    plain, tokened = [question(), answer([])], [question(), answer([TOKEN] * 500)]
    # At most what the text's empty list counts ("logprobs": [] is left as the assembler
    # writes it; a list of tokens goes whole).
    assert estimate_context("be brief", tokened, []) <= estimate_context("be brief", plain, [])
    assert item_tokens(answer([TOKEN] * 500)) <= item_tokens(answer([]))
