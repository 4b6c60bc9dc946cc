"""OpenAI's prompt caching over an Anthropic upstream, through the real gateway and SDKs:
what the upstream is sent (the fake's log of each request's body), and that the fake,
which refuses what Anthropic refuses (more than four marks, an hour's mark after a
shorter one), takes it."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from anthropic import Anthropic
from openai import OpenAI

from tests.e2e.configured import RunningGateway, configured_gateway
from tests.e2e.routing import fake_requests

MODEL = "fake-model"
AUTOMATIC = {"type": "ephemeral"}
HOUR = {"type": "ephemeral", "ttl": "1h"}
BREAKPOINT = {"mode": "explicit"}
TOOL = {"type": "function", "name": "f", "parameters": {"type": "object", "properties": {}}}


def sent(upstream: str, marker: str) -> dict[str, Any]:
    """The body of the one request to ``upstream`` that mentions ``marker``."""
    [request] = fake_requests(upstream, marker)
    body: dict[str, Any] = request["body"]
    return body


def block_marks(body: dict[str, Any]) -> list[tuple[str, Any]]:
    """Each marked block's text (or type) and mark, in Anthropic's order."""
    system = body.get("system")
    blocks = [*(system if isinstance(system, list) else ())]
    for message in body["messages"]:
        for block in message["content"]:
            blocks.append(block)
            if block["type"] == "tool_result" and isinstance(block.get("content"), list):
                blocks += block["content"]
    return [
        (block.get("text") or block["type"], block["cache_control"])
        for block in blocks
        if "cache_control" in block
    ]


def test_a_responses_client_is_cached_as_hosted_openai_caches_it(
    anthropic_gateway: RunningGateway, fake_upstream: str
) -> None:
    """The implicit breakpoint is Anthropic's automatic mark, each breakpoint its block's
    mark, a lifetime asked an hour; the tool loop's next request and a compaction's
    summary are cached alike."""
    with (
        OpenAI(base_url=anthropic_gateway.url + "/v1", api_key="k", max_retries=0) as sdk,
    ):
        rules = {"type": "input_text", "text": "rules r1", "prompt_cache_breakpoint": BREAKPOINT}
        asked = {
            "type": "input_text",
            "text": "[[tool:f:{}]] marked r1",
            "prompt_cache_breakpoint": {"mode": "explicit", "ttl": "12h"},
        }
        first = sdk.responses.create(
            model=MODEL,
            input=[
                {"role": "developer", "content": [rules]},
                {"role": "user", "content": [asked]},
            ],
            tools=[TOOL],  # type: ignore[list-item]
        )
        body = sent(fake_upstream, "marked r1")
        assert body["cache_control"] == AUTOMATIC
        # the developer's mark lasts the hour too: Anthropic refuses it shorter before one
        assert block_marks(body) == [("rules r1", HOUR), ("[[tool:f:{}]] marked r1", HOUR)]

        [call] = [item for item in first.output if item.type == "function_call"]
        result = {"type": "input_text", "text": "result r2", "prompt_cache_breakpoint": BREAKPOINT}
        sdk.responses.create(
            model=MODEL,
            previous_response_id=first.id,
            input=[{"type": "function_call_output", "call_id": call.call_id, "output": [result]}],
            tools=[TOOL],  # type: ignore[list-item]
            prompt_cache_options={"ttl": "30m"},
        )
        body = sent(fake_upstream, "result r2")
        assert body["cache_control"] == HOUR  # the request's lifetime
        assert block_marks(body)[-1] == ("result r2", HOUR)

        sdk.responses.compact(model=MODEL, input="compact me r3")
        assert sent(fake_upstream, "compact me r3")["cache_control"] == AUTOMATIC

        sdk.responses.create(
            model=MODEL, input="explicit r4", prompt_cache_options={"mode": "explicit"}
        )
        assert "cache_control" not in sent(fake_upstream, "explicit r4")


def test_a_chat_client_is_cached_as_hosted_openai_caches_it(
    anthropic_gateway: RunningGateway, fake_upstream: str
) -> None:
    """A Chat Completions client's breakpoints (a tool message's too) and its
    ``prompt_cache_retention``; past four marks the latest are kept."""
    with (
        OpenAI(base_url=anthropic_gateway.url + "/v1", api_key="k", max_retries=0) as sdk,
    ):
        marked: Any = [
            {"type": "text", "text": f"part {n} c1", "prompt_cache_breakpoint": BREAKPOINT}
            for n in range(5)
        ]
        call = {"id": "c1", "type": "function", "function": {"name": "f", "arguments": "{}"}}
        output: Any = [{"type": "text", "text": "out c1", "prompt_cache_breakpoint": BREAKPOINT}]
        sdk.chat.completions.create(
            model=MODEL,
            messages=[
                {"role": "system", "content": "be brief"},
                {"role": "user", "content": marked},
                {"role": "assistant", "tool_calls": [call]},  # type: ignore[list-item]
                {"role": "tool", "tool_call_id": "c1", "content": output},
            ],
            tools=[{"type": "function", "function": {"name": "f"}}],
            prompt_cache_retention="24h",
        )
        body = sent(fake_upstream, "out c1")
        assert body["cache_control"] == HOUR
        assert block_marks(body) == [("part 3 c1", HOUR), ("part 4 c1", HOUR), ("out c1", HOUR)]

        sdk.chat.completions.create(
            model=MODEL,
            messages=[{"role": "user", "content": "explicit c2"}],
            prompt_cache_options={"mode": "explicit"},
        )
        assert "cache_control" not in sent(fake_upstream, "explicit c2")


def test_a_backend_may_cache_only_what_is_asked(fake_upstream: str, tmp_path: Path) -> None:
    """``prompt_cache_mode = "explicit"``: no mark unasked; a request's mode wins."""
    backend = {"url": fake_upstream, "api": "anthropic", "prompt_cache_mode": "explicit"}
    with (
        configured_gateway(tmp_path, backend) as gateway,
        OpenAI(base_url=gateway.url + "/v1", api_key="k", max_retries=0) as sdk,
    ):
        sdk.responses.create(model=MODEL, input="unasked b1")
        assert "cache_control" not in sent(fake_upstream, "unasked b1")
        sdk.chat.completions.create(
            model=MODEL,
            messages=[{"role": "user", "content": "asked b2"}],
            prompt_cache_options={"mode": "implicit"},
        )
        assert sent(fake_upstream, "asked b2")["cache_control"] == AUTOMATIC


def test_a_messages_client_is_cached_where_it_marks(
    anthropic_gateway: RunningGateway, fake_upstream: str
) -> None:
    """Anthropic's way: nothing added, whether it marked anything or not."""
    with (
        Anthropic(base_url=anthropic_gateway.url, api_key="k", max_retries=0) as claude,
    ):
        claude.messages.create(
            model=MODEL, max_tokens=100, messages=[{"role": "user", "content": "plain m1"}]
        )
        body = sent(fake_upstream, "plain m1")
        assert "cache_control" not in body
        assert block_marks(body) == []
        own: Any = [{"type": "text", "text": "own m2", "cache_control": HOUR}]
        claude.messages.create(
            model=MODEL, max_tokens=100, messages=[{"role": "user", "content": own}]
        )
        body = sent(fake_upstream, "own m2")
        assert "cache_control" not in body
        assert block_marks(body) == [("own m2", HOUR)]


def test_a_messages_clients_marks_on_its_tools_reach_the_upstream(
    anthropic_gateway: RunningGateway, fake_upstream: str
) -> None:
    """A mark on a tool of Anthropic's (the memory tool, offered with its schema) stays on
    it as on a custom tool, and one on a ``tool_reference`` on the text it becomes."""
    with (
        Anthropic(base_url=anthropic_gateway.url, api_key="k", max_retries=0) as claude,
    ):
        tools: Any = [
            {"name": "f", "input_schema": {"type": "object"}, "cache_control": HOUR},
            {"type": "memory_20250818", "name": "memory", "cache_control": HOUR},
        ]
        loaded = {"type": "tool_reference", "tool_name": "f", "cache_control": AUTOMATIC}
        use = {"type": "tool_use", "id": "toolu_1", "name": "f", "input": {}}
        messages: Any = [
            {"role": "user", "content": "tools t1"},
            {"role": "assistant", "content": [use]},
            {
                "role": "user",
                "content": [{"type": "tool_result", "tool_use_id": "toolu_1", "content": [loaded]}],
            },
        ]
        claude.messages.create(model=MODEL, max_tokens=100, messages=messages, tools=tools)
        body = sent(fake_upstream, "tools t1")
        assert [(tool["name"], tool.get("cache_control")) for tool in body["tools"]] == [
            ("f", HOUR),
            ("memory", HOUR),
        ]
        assert block_marks(body) == [("Tool loaded: f", AUTOMATIC)]


def test_a_messages_clients_marks_are_kept_within_anthropics_rules(
    anthropic_gateway: RunningGateway, fake_upstream: str
) -> None:
    """A Messages client's own marks go on as they came, but within the rules Anthropic
    refuses a request for breaking (as the gateway keeps a thread's, whose earlier turns'
    marks add up): past four, the earliest message marks are dropped; a shorter mark
    before an hour's lasts the hour too. The fake refuses what Anthropic refuses."""
    with (
        Anthropic(base_url=anthropic_gateway.url, api_key="k", max_retries=0) as claude,
    ):
        texts = ["rules k1", "a k1", "b k1", "c k1"]
        marked: Any = [{"type": "text", "text": t, "cache_control": AUTOMATIC} for t in texts]
        marked[-1]["cache_control"] = HOUR
        claude.messages.create(
            model=MODEL,
            max_tokens=100,
            system=[{"type": "text", "text": "system k1", "cache_control": AUTOMATIC}],
            messages=[{"role": "user", "content": marked}],
        )
        body = sent(fake_upstream, "system k1")
        assert block_marks(body) == [
            ("system k1", HOUR),
            ("a k1", HOUR),
            ("b k1", HOUR),
            ("c k1", HOUR),
        ]
