"""An item too large for a summary call, shown as its head and tail: within the tokens
asked, its longest texts cut to one length, a call's JSON arguments still JSON, what holds
no text to cut (or a signed reasoning) never cut, the item itself never changed."""

from __future__ import annotations

import copy
import json
from typing import Any

from stateway.core.compaction.excerpt import MARKER, SHORTEST, excerpt, least_tokens
from stateway.core.token_estimate import IMAGE_TOKENS, item_tokens


def text(size: int, letter: str = "x") -> str:
    return "<" + letter * size + ">"


def omitted(shown: str) -> int:
    """How many characters the marker in ``shown`` says were left out."""
    before, _, after = shown.partition("[... ")
    count, _, _ = after.partition(" characters omitted ...]")
    assert before.endswith("\n")
    return int(count.replace(",", ""))


def test_an_item_within_the_tokens_is_itself() -> None:
    item = {"type": "message", "role": "user", "content": "short"}
    assert excerpt(item, item_tokens(item)) is item


def test_a_text_keeps_its_head_and_tail_and_says_how_much_it_lost() -> None:
    whole = text(183_204)
    item = {"type": "function_call_output", "call_id": "c", "output": whole}
    shown = excerpt(item, 500)

    assert shown is not None
    assert 499 <= item_tokens(shown) <= 500  # as much of it as fits
    cut = shown["output"]
    head, _, tail = cut.partition(MARKER.format(omitted(cut)))
    assert whole.startswith(head)
    assert whole.endswith(tail)
    assert abs(len(head) - len(tail)) <= 1
    assert len(head) + len(tail) + omitted(cut) == len(whole)
    assert MARKER.format(len(whole) - len(head) - len(tail)) in cut
    assert item["output"] == whole


def test_the_longest_texts_are_cut_to_one_length_and_the_short_ones_kept() -> None:
    image = {"type": "input_image", "image_url": "data:image/png;base64,AAAA"}
    parts: list[Any] = [
        {"type": "input_text", "text": text(50_000, "a")},
        image,
        {"type": "input_text", "text": "keep me"},
        {"type": "input_text", "text": text(30_000, "b")},
    ]
    item = {"type": "message", "role": "user", "content": parts}
    before = copy.deepcopy(item)
    shown = excerpt(item, IMAGE_TOKENS + 1000)

    assert shown is not None
    assert item == before
    first, kept_image, short, last = shown["content"]
    assert (kept_image, short) == (image, parts[2])
    for cut, whole in ((first["text"], parts[0]["text"]), (last["text"], parts[3]["text"])):
        assert len(cut) - len(MARKER.format(omitted(cut))) == len(whole) - omitted(cut)
    kept = [len(part["text"]) - len(MARKER.format(omitted(part["text"]))) for part in (first, last)]
    assert kept[0] == kept[1] >= SHORTEST


def test_a_calls_arguments_stay_json_their_strings_cut() -> None:
    arguments = {"path": "a.txt", "lines": [text(20_000), "short"], "mode": 420, "x": None}
    item = {"type": "function_call", "call_id": "c", "arguments": json.dumps(arguments)}
    shown = excerpt(item, 800)

    assert shown is not None
    parsed = json.loads(shown["arguments"])
    assert {key: parsed[key] for key in ("path", "mode", "x")} == {
        "path": "a.txt",
        "mode": 420,
        "x": None,
    }
    assert parsed["lines"][1] == "short"
    assert omitted(parsed["lines"][0]) > 0


def test_what_cannot_be_cut_has_no_excerpt() -> None:
    """Arguments that are not JSON (cut, they could pass for broken JSON), a signed
    reasoning, an item without text, or a room less than the shortest excerpt."""
    not_json = {"type": "function_call", "call_id": "c", "arguments": "{" + text(9000)}
    reasoning = {
        "type": "reasoning",
        "summary": [],
        "content": [{"type": "reasoning_text", "text": text(9000)}],
        "encrypted_content": "signature",
    }
    image = {"type": "message", "role": "user", "content": [{"type": "input_image"}]}
    for item in (not_json, reasoning, image):
        assert excerpt(item, 100) is None
        assert least_tokens(item) is None

    message = {"type": "message", "role": "user", "content": text(9000)}
    least = least_tokens(message)
    assert least is not None
    assert excerpt(message, least - 1) is None
    assert excerpt(message, least) is not None


def test_tool_outputs_of_every_kind_are_cut() -> None:
    outputs: list[dict[str, Any]] = [
        {"type": "custom_tool_call_output", "call_id": "c", "output": text(9000)},
        {"type": "mcp_call", "id": "m", "arguments": "{}", "output": text(9000)},
        {"type": "local_shell_call_output", "id": "l", "output": text(9000)},
        {"type": "apply_patch_call_output", "call_id": "c", "output": text(9000)},
        {"type": "custom_tool_call", "call_id": "c", "input": text(9000)},
        {
            "type": "shell_call_output",
            "call_id": "c",
            "output": [{"stdout": text(9000), "stderr": "", "outcome": {"type": "exit"}}],
        },
    ]
    for item in outputs:
        shown = excerpt(item, 300)
        assert shown is not None, item["type"]
        assert item_tokens(shown) <= 300
