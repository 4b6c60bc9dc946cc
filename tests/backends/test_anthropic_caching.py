"""OpenAI's prompt caching on an Anthropic upstream: the implicit breakpoint as Anthropic's
automatic mark (unless the request, or its backend, says ``explicit``, or the client marks
its own), each ``prompt_cache_breakpoint`` as its block's mark, and OpenAI's lifetimes as
Anthropic's hour."""

from __future__ import annotations

from typing import Any

import pytest

from stateway.backends.anthropic_names import ToolNames
from stateway.backends.anthropic_request import AnthropicOptions, to_upstream
from stateway.core.generation_settings import GenerationSettings
from stateway.core.inference import InferenceRequest
from stateway.core.items import Item
from stateway.fake_upstream.messages_checks import check_messages_request

AUTOMATIC = {"type": "ephemeral"}
HOUR = {"type": "ephemeral", "ttl": "1h"}
BREAKPOINT = {"mode": "explicit"}
HELD = {"cache_control": HOUR}


def body(
    items: list[Item],
    options: AnthropicOptions | None = None,
    tools: list[Item] | None = None,
    **settings: Any,
) -> dict[str, Any]:
    request = InferenceRequest(
        model="claude",
        instructions=None,
        items=items,
        settings=GenerationSettings(**settings),
        stream=False,
        tools=tools or [],
    )
    sent = to_upstream(request, options or AnthropicOptions(), ToolNames())
    check_messages_request(sent, lambda *_: None)  # what Anthropic would take
    return sent


def message(role: str, *parts: Item) -> Item:
    return {"type": "message", "role": role, "content": list(parts)}


def text(said: str, **marks: Any) -> Item:
    return {"type": "input_text", "text": said, **marks}


def user(said: str, **marks: Any) -> Item:
    return message("user", text(said, **marks))


def marks(sent: dict[str, Any]) -> list[tuple[str, Any]]:
    """Every block's mark in Anthropic's order (system, messages, a tool result's own
    blocks after it), by the block's text (or tool-use id)."""
    system = sent.get("system")
    blocks = [*(system if isinstance(system, list) else ())]
    for entry in sent["messages"]:
        for block in entry["content"]:
            blocks.append(block)
            if block["type"] == "tool_result" and isinstance(block.get("content"), list):
                blocks += block["content"]
    return [
        (block.get("text") or block.get("tool_use_id") or block["type"], block["cache_control"])
        for block in blocks
        if "cache_control" in block
    ]


def test_an_openai_request_is_cached_implicitly_as_hosted_openai_caches_it() -> None:
    sent = body([user("q")])
    assert sent["cache_control"] == AUTOMATIC  # Anthropic's default lifetime, 5m
    assert marks(sent) == []
    implicit = body([user("q")], prompt_cache_options={"mode": "implicit"})
    assert implicit["cache_control"] == AUTOMATIC


def test_explicit_mode_sends_only_the_explicit_breakpoints() -> None:
    options = {"mode": "explicit"}
    assert "cache_control" not in body([user("q")], prompt_cache_options=options)
    sent = body([user("q", prompt_cache_breakpoint=BREAKPOINT)], prompt_cache_options=options)
    assert "cache_control" not in sent
    assert marks(sent) == [("q", AUTOMATIC)]


def test_a_backend_opts_out_of_the_implicit_mark_and_a_request_opts_back_in() -> None:
    explicit = AnthropicOptions(prompt_cache_mode="explicit")
    assert "cache_control" not in body([user("q")], explicit)
    asked = body([user("q")], explicit, prompt_cache_options={"mode": "implicit"})
    assert asked["cache_control"] == AUTOMATIC
    unknown = body([user("q")], explicit, prompt_cache_options={"mode": "later"})
    assert "cache_control" not in unknown  # not a mode: the backend's
    assert body([user("q")], prompt_cache_options={"mode": 3})["cache_control"] == AUTOMATIC


def test_a_messages_client_keeps_its_own_marks_and_gets_none_added() -> None:
    """Anthropic's way: what the client marks is cached, and nothing else."""
    assert "cache_control" not in body([user("q")], client_cache_marks=True)
    own = body([user("q")], client_cache_marks=True, cache_control=HOUR)
    assert own["cache_control"] == HOUR
    marked = body([user("q", cache_control=HOUR)], client_cache_marks=True)
    assert "cache_control" not in marked
    assert marks(marked) == [("q", HOUR)]


@pytest.mark.parametrize(
    "items",
    [
        [user("q", cache_control=AUTOMATIC)],
        [
            {"type": "function_call", "call_id": "c1", "name": "f", "arguments": "{}"},
            {"type": "function_call_output", "call_id": "c1", "output": "1", "cache_control": HOUR},
        ],
        [
            {"type": "function_call", "call_id": "c1", "name": "f", "arguments": "{}"},
            {"type": "function_call_output", "call_id": "c1", "output": [text("1", **HELD)]},
        ],
    ],
    ids=["part", "tool result", "tool result part"],
)
def test_no_mark_is_added_beside_marks_the_context_holds(items: list[Item]) -> None:
    """A Messages turn continued by an OpenAI-shaped request keeps its own marks."""
    assert "cache_control" not in body([*items, user("next")])


def test_no_mark_is_added_beside_a_marked_tool() -> None:
    tool = {"type": "function", "name": "f", "parameters": {"type": "object"}}
    sent = body([user("q")], tools=[{**tool, "cache_control": AUTOMATIC}])
    assert "cache_control" not in sent


def test_each_breakpoint_marks_its_block() -> None:
    """On a system message's part, an image, a file, and a tool output's parts."""
    image = {"type": "input_image", "image_url": "https://x/i.png"}
    document = {"type": "input_file", "file_url": "https://x/d.pdf"}
    output = [text("out", prompt_cache_breakpoint=BREAKPOINT)]
    items = [
        message("developer", text("rules", prompt_cache_breakpoint=BREAKPOINT)),
        message(
            "user",
            {**image, "prompt_cache_breakpoint": BREAKPOINT},
            {**document, "prompt_cache_breakpoint": BREAKPOINT},
        ),
        {"type": "function_call", "call_id": "c1", "name": "f", "arguments": "{}"},
        {"type": "function_call_output", "call_id": "c1", "output": output},
        user("plain"),
    ]
    sent = body(items, prompt_cache_options={"mode": "explicit"})
    assert marks(sent) == [
        ("rules", AUTOMATIC),
        ("image", AUTOMATIC),
        ("document", AUTOMATIC),
        ("out", AUTOMATIC),
    ]
    assert items[0]["content"][0] == text("rules", prompt_cache_breakpoint=BREAKPOINT)


@pytest.mark.parametrize(
    ("settings", "breakpoint", "mark"),
    [
        ({}, BREAKPOINT, AUTOMATIC),
        ({}, {"mode": "explicit", "ttl": "30m"}, HOUR),
        ({}, {"mode": "explicit", "ttl": "12h"}, HOUR),
        ({"prompt_cache_options": {"ttl": "30m"}}, BREAKPOINT, HOUR),
        ({"prompt_cache_options": {"ttl": "12h"}}, BREAKPOINT, HOUR),
        ({"prompt_cache_retention": "24h"}, BREAKPOINT, HOUR),
        ({"prompt_cache_retention": "in_memory"}, BREAKPOINT, AUTOMATIC),
        ({"prompt_cache_options": {"ttl": "5y"}}, BREAKPOINT, AUTOMATIC),
    ],
)
def test_a_lifetime_asked_is_anthropics_hour_and_none_its_default(
    settings: dict[str, Any], breakpoint: dict[str, Any], mark: dict[str, Any]
) -> None:
    """OpenAI's ``ttl`` is a minimum lifetime: any asked (the request's, which a breakpoint
    without its own inherits, or ``prompt_cache_retention: "24h"``) is Anthropic's
    longest; none asked is Anthropic's cheaper default."""
    sent = body([user("q", prompt_cache_breakpoint=breakpoint), user("next")], **settings)
    assert marks(sent) == [("q", mark)]
    request_asked = settings and mark == HOUR and breakpoint == BREAKPOINT
    assert sent["cache_control"] == (HOUR if request_asked else AUTOMATIC)


def test_a_mark_before_an_hours_one_lasts_an_hour_too() -> None:
    """Anthropic refuses a 1h mark after a 5m one (tools, system, messages in order): an
    earlier default one is raised to the hour; a later one may stay shorter."""
    long = {"mode": "explicit", "ttl": "12h"}
    sent = body(
        [
            user("a", prompt_cache_breakpoint=BREAKPOINT),
            user("b", prompt_cache_breakpoint=long),
            user("c", prompt_cache_breakpoint=BREAKPOINT),
        ]
    )
    assert marks(sent) == [("a", HOUR), ("b", HOUR), ("c", AUTOMATIC)]
    assert sent["cache_control"] == AUTOMATIC  # the last block's: after them all


def test_the_latest_breakpoints_are_kept_within_anthropics_four() -> None:
    """As hosted OpenAI writes the latest three explicit breakpoints beside its implicit
    one (the latest four in explicit mode); Anthropic counts its automatic mark too."""
    items = [user(str(n), prompt_cache_breakpoint=BREAKPOINT) for n in range(6)]
    implicit = body(items)
    assert [name for name, _ in marks(implicit)] == ["3", "4", "5"]
    assert implicit["cache_control"] == AUTOMATIC
    explicit = body(items, prompt_cache_options={"mode": "explicit"})
    assert [name for name, _ in marks(explicit)] == ["2", "3", "4", "5"]
