"""What actually reaches the model server, read back from the fake upstream's request log."""

from __future__ import annotations

import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import openai
import orjson
import pytest
from anthropic import Anthropic
from openai import OpenAI

from stateway.fake_upstream.launch import start_fake_upstream
from tests.e2e.configured import configured_gateway

MODEL = "fake-model"


def upstream_requests(fake_upstream: str) -> list[dict[str, Any]]:
    root = fake_upstream.removesuffix("/v1")
    with urllib.request.urlopen(root + "/_fake/requests") as response:
        data: list[dict[str, Any]] = orjson.loads(response.read())["data"]
    return data


def clear(fake_upstream: str) -> None:
    root = fake_upstream.removesuffix("/v1")
    urllib.request.urlopen(
        urllib.request.Request(root + "/_fake/requests", method="DELETE")
    ).close()


def test_request_settings_are_mapped_upstream(client: OpenAI, fake_upstream: str) -> None:
    first = client.responses.create(model=MODEL, input="first", instructions="old rules")
    clear(fake_upstream)
    client.responses.create(
        model=MODEL,
        previous_response_id=first.id,
        instructions="be brief",
        input=[
            {"role": "developer", "content": "dev note"},
            {
                "role": "user",
                "content": [
                    {"type": "input_text", "text": "look"},
                    {"type": "input_image", "image_url": "data:image/png;base64,AAAA"},
                ],
            },
        ],
        tools=[{"type": "function", "name": "f", "parameters": {"type": "object"}, "strict": True}],
        tool_choice="required",
        parallel_tool_calls=False,
        temperature=0.3,
        top_p=0.8,
        max_output_tokens=100,
        text={"format": {"type": "json_schema", "name": "n", "schema": {"type": "object"}}},
        reasoning={"effort": "high"},
        metadata={"trace": "1"},
        safety_identifier="sid",
        prompt_cache_key="pck",
        user="u1",
    )
    [sent] = upstream_requests(fake_upstream)
    body = sent["body"]
    if sent["path"].endswith("/chat/completions"):
        messages = body["messages"]
        assert messages[0] == {"role": "system", "content": "be brief"}
        # A developer message after the first turn leads the next user message, as a
        # reminder: chat templates take a system message only first.
        assert [m["role"] for m in messages] == ["system", "user", "assistant", "user"]
        assert messages[-1]["content"][0] == {
            "type": "text",
            "text": "<system-reminder>\ndev note\n</system-reminder>",
        }
        assert "old rules" not in orjson.dumps(messages).decode()
        assert messages[-1]["content"][2] == {
            "type": "image_url",
            "image_url": {"url": "data:image/png;base64,AAAA", "detail": "auto"},
        }  # the API's default, stated
        assert body["tools"][0]["function"]["name"] == "f"
        assert body["tool_choice"] == "required"
        assert body["max_tokens"] == 100
        assert body["response_format"]["type"] == "json_schema"
        assert body["reasoning_effort"] == "high"
        assert "metadata" not in body  # the stored object's: OpenAI refuses it unless it stores
    else:
        assert sent["path"].endswith("/responses")
        assert body["store"] is False
        assert body["instructions"] == "be brief"
        assert [i.get("role") for i in body["input"]] == ["user", "assistant", "developer", "user"]
        assert "previous_response_id" not in body
        assert body["tools"][0]["name"] == "f"
        assert body["max_output_tokens"] == 100
        assert body["text"]["format"]["type"] == "json_schema"
        assert body["reasoning"] == {"effort": "high"}
        assert body["metadata"] == {"trace": "1"}
    assert body["parallel_tool_calls"] is False
    assert (body["temperature"], body["top_p"]) == (0.3, 0.8)
    assert (body["safety_identifier"], body["prompt_cache_key"], body["user"]) == (
        "sid",
        "pck",
        "u1",
    )


def test_a_backend_whose_template_wants_alternating_roles_gets_one_user_turn(
    fake_upstream: str, tmp_path: Path
) -> None:
    """``alternate_roles``: Codex's three user messages in a row reach the model as one,
    and so do a Chat Completions client's on the fast path, their parts in order."""
    backend = {"url": fake_upstream, "alternate_roles": True}
    with (
        configured_gateway(tmp_path, backend) as gateway,
        OpenAI(base_url=gateway.url + "/v1", api_key="k", max_retries=0) as sdk,
    ):
        clear(fake_upstream)
        items: Any = [
            {"role": "user", "content": "rules"},
            {"role": "user", "content": "env"},
            {"role": "user", "content": "say hi"},
        ]
        answer = sdk.responses.create(model="fake-model", input=items, store=False)
        assert answer.status == "completed"
        [sent] = upstream_requests(fake_upstream)
        assert [m["role"] for m in sent["body"]["messages"]] == ["user"]

        clear(fake_upstream)  # the fast path
        messages: Any = [
            {"role": "system", "content": "be brief"},
            {"role": "user", "content": "env"},
            {"role": "user", "content": [{"type": "text", "text": "say hi"}]},
        ]
        chat = sdk.chat.completions.create(model="fake-model", messages=messages)
        assert chat.choices[0].message.content
        [sent] = upstream_requests(fake_upstream)
        assert sent["body"]["messages"] == [
            {"role": "system", "content": "be brief"},
            {
                "role": "user",
                "content": [{"type": "text", "text": "env"}, {"type": "text", "text": "say hi"}],
            },
        ]


VLLM_EFFORTS = ("low", "medium", "high")
"""What vLLM's Chat request model took before the OpenAI SDK's wider set of efforts."""


@pytest.fixture(scope="module")
def narrow_upstream() -> Iterator[str]:
    """A Chat upstream refusing (400) a ``reasoning_effort`` other than ``VLLM_EFFORTS``."""
    with start_fake_upstream(reasoning_efforts=VLLM_EFFORTS) as url:
        yield url


def test_an_effort_the_server_refuses_fails_unless_the_backend_lists_what_it_takes(
    narrow_upstream: str, tmp_path: Path
) -> None:
    with (
        configured_gateway(tmp_path, {"url": narrow_upstream}) as gateway,
        OpenAI(base_url=gateway.url + "/v1", api_key="k", max_retries=0) as sdk,
    ):
        with pytest.raises(openai.BadRequestError) as refused:
            sdk.responses.create(model=MODEL, input="hi", reasoning={"effort": "xhigh"})
        assert "reasoning_effort" in refused.value.message
        assert upstream_requests(narrow_upstream)[-1]["body"]["reasoning_effort"] == "xhigh"


def test_reasoning_efforts_send_each_effort_at_a_level_the_server_takes(
    narrow_upstream: str, tmp_path: Path
) -> None:
    """Codex's ``xhigh``, Claude Code's ``max``, ``minimal`` and ``none`` reach a server
    taking ``low``, ``medium`` and ``high`` at the nearest of them, from every frontend and
    on the Chat fast path; an effort it takes is forwarded in the very bytes sent."""
    backend = {"url": narrow_upstream, "reasoning_efforts": list(VLLM_EFFORTS)}
    with configured_gateway(tmp_path, backend) as gateway:
        with OpenAI(base_url=gateway.url + "/v1", api_key="k", max_retries=0) as sdk:
            for asked, sent in (("xhigh", "high"), ("minimal", "low"), ("none", "low")):
                clear(narrow_upstream)
                answer = sdk.responses.create(model=MODEL, input="hi", reasoning={"effort": asked})
                assert answer.status == "completed"
                assert answer.reasoning is not None
                assert answer.reasoning.effort == asked
                [sent_request] = upstream_requests(narrow_upstream)
                assert sent_request["body"]["reasoning_effort"] == sent
            for asked, sent in (("max", "high"), ("medium", "medium")):
                clear(narrow_upstream)  # the fast path
                raw = sdk.chat.completions.with_raw_response.create(
                    model=MODEL,
                    messages=[{"role": "user", "content": "hi"}],
                    reasoning_effort=asked,  # type: ignore[arg-type]
                    extra_body={"top_k": 3},
                )
                assert raw.parse().choices[0].message.content
                [sent_request] = upstream_requests(narrow_upstream)
                assert sent_request["body"]["reasoning_effort"] == sent
                assert sent_request["body"]["top_k"] == 3
        with Anthropic(base_url=gateway.url, api_key="k", max_retries=0) as claude:
            clear(narrow_upstream)
            claude.messages.create(
                model=MODEL,
                max_tokens=50,
                messages=[{"role": "user", "content": "hi"}],
                thinking={"type": "adaptive"},
                output_config={"effort": "max"},
            )
            [sent_request] = upstream_requests(narrow_upstream)
            assert sent_request["body"]["reasoning_effort"] == "high"


EXTRA_BODY = {"chat_template_kwargs": {"enable_thinking": False}, "top_k": 20, "temperature": 0.9}


def test_a_backends_extra_body_fills_what_a_call_does_not_set(
    fake_upstream: str, tmp_path: Path
) -> None:
    """``extra_body`` reaches the model server on every frontend, the call's own fields
    winning; on the Chat fast path a client's field wins whole."""
    backend = {"url": fake_upstream, "extra_body": EXTRA_BODY}
    with configured_gateway(tmp_path, backend) as gateway:
        base = gateway.url + "/v1"
        with OpenAI(base_url=base, api_key="k", max_retries=0) as sdk:
            clear(fake_upstream)
            sdk.responses.create(model=MODEL, input="hi", temperature=0.1, store=False)
            [sent] = upstream_requests(fake_upstream)
            assert sent["body"]["chat_template_kwargs"] == {"enable_thinking": False}
            assert (sent["body"]["top_k"], sent["body"]["temperature"]) == (20, 0.1)

            clear(fake_upstream)  # forwarded untouched but for the fields it lacks
            sdk.chat.completions.create(
                model=MODEL,
                messages=[{"role": "user", "content": "hi"}],
                extra_body={"chat_template_kwargs": {"thinking": True}},
            )
            [sent] = upstream_requests(fake_upstream)
            assert sent["body"]["chat_template_kwargs"] == {"thinking": True}
            assert (sent["body"]["top_k"], sent["body"]["temperature"]) == (20, 0.9)
            assert sent["body"]["messages"] == [{"role": "user", "content": "hi"}]
        with Anthropic(base_url=gateway.url, api_key="k", max_retries=0) as claude:
            clear(fake_upstream)
            claude.messages.create(
                model=MODEL, max_tokens=50, messages=[{"role": "user", "content": "hi"}]
            )
            [sent] = upstream_requests(fake_upstream)
            assert sent["body"]["chat_template_kwargs"] == {"enable_thinking": False}


@pytest.mark.parametrize(("api", "extra"), [("responses", EXTRA_BODY), ("anthropic", {"top_k": 7})])
def test_extra_body_reaches_responses_and_anthropic_upstreams(
    fake_upstream: str, tmp_path: Path, api: str, extra: dict[str, Any]
) -> None:
    backend = {"url": fake_upstream, "api": api, "extra_body": extra}
    with (
        configured_gateway(tmp_path, backend) as gateway,
        OpenAI(base_url=gateway.url + "/v1", api_key="k", max_retries=0) as sdk,
    ):
        clear(fake_upstream)
        answer = sdk.responses.create(model=MODEL, input="hi", store=False)
        assert answer.status == "completed"
        [sent] = upstream_requests(fake_upstream)
        assert {k: sent["body"][k] for k in extra} == extra


def test_a_responses_input_ending_with_an_assistant_message_is_not_continued(
    client: OpenAI, fake_upstream: str
) -> None:
    """The Responses API answers such an input in a new message, as hosted (only a
    Messages prefill is continued)."""
    clear(fake_upstream)
    items: Any = [{"role": "user", "content": "hi"}, {"role": "assistant", "content": "Hello"}]
    client.responses.create(model=MODEL, input=items, store=False)
    [sent] = upstream_requests(fake_upstream)
    assert "continue_final_message" not in sent["body"]


@pytest.mark.parametrize("api", ["chat", "responses"])
def test_a_translated_chat_request_carries_vendor_fields_to_a_chat_upstream(
    fake_upstream: str, tmp_path: Path, api: str
) -> None:
    """A declared context window means translation (no fast path): a Chat client's vendor
    fields still reach a Chat upstream, the backend's ``extra_body`` filling the rest;
    a Responses upstream gets neither."""
    backend = {"url": fake_upstream, "api": api, "context_window": 100_000}
    backend["extra_body"] = {"min_p": 0.1, "top_k": 5}
    with (
        configured_gateway(tmp_path, backend) as gateway,
        OpenAI(base_url=gateway.url + "/v1", api_key="k", max_retries=0) as sdk,
    ):
        clear(fake_upstream)
        sdk.chat.completions.create(
            model=MODEL,
            messages=[{"role": "user", "content": "hi"}],
            extra_body={"chat_template_kwargs": {"enable_thinking": False}, "min_p": 0.05},
        )
        [sent] = upstream_requests(fake_upstream)
        body = sent["body"]
        if api == "chat":
            assert body["messages"][0]["content"] == [{"type": "text", "text": "hi"}]  # translated
            assert body["chat_template_kwargs"] == {"enable_thinking": False}
            assert (body["min_p"], body["top_k"]) == (0.05, 5)
        else:
            assert "chat_template_kwargs" not in body
            assert body["min_p"] == 0.1  # the backend's own extra_body


@pytest.mark.parametrize("api", ["chat", "anthropic"])
def test_a_backends_headers_go_with_every_call(
    fake_upstream: str, tmp_path: Path, api: str
) -> None:
    """``headers``: a proxy's own, or an Anthropic upstream's betas, which a Messages
    client's join."""
    headers = {"X-Proxy-Token": "p1", "anthropic-beta": "own-beta"}
    backend = {"url": fake_upstream, "api": api, "headers": headers}
    with configured_gateway(tmp_path, backend) as gateway:
        with OpenAI(base_url=gateway.url + "/v1", api_key="k", max_retries=0) as sdk:
            clear(fake_upstream)
            sdk.responses.create(model=MODEL, input="hi", store=False)
            [sent] = upstream_requests(fake_upstream)
            assert sent["headers"]["x-proxy-token"] == "p1"
            assert sent["headers"]["anthropic-beta"] == "own-beta"
        with Anthropic(base_url=gateway.url, api_key="k", max_retries=0) as claude:
            clear(fake_upstream)
            claude.messages.create(
                model=MODEL,
                max_tokens=50,
                messages=[{"role": "user", "content": "hi"}],
                extra_headers={"anthropic-beta": "own-beta, context-1m-2025-08-07"},
            )
            [sent] = upstream_requests(fake_upstream)
            expected = "own-beta,context-1m-2025-08-07" if api == "anthropic" else "own-beta"
            assert sent["headers"]["anthropic-beta"] == expected


@pytest.fixture(scope="module")
def current_vllm() -> Iterator[str]:
    """A Chat upstream naming reasoning as vLLM does now: ``reasoning`` out, and only
    ``reasoning`` read back from an assistant message."""
    with start_fake_upstream(reasoning_field="reasoning") as url:
        yield url


def test_a_thought_reaches_a_vllm_that_reads_only_reasoning_in_the_next_round(
    current_vllm: str, tmp_path: Path
) -> None:
    """A model that thinks between its tool calls is shown its earlier thoughts: read from
    vLLM's ``reasoning``, they go back where vLLM reads them (and where llama.cpp does)."""
    with (
        configured_gateway(tmp_path, {"url": current_vllm}) as gateway,
        OpenAI(base_url=gateway.url + "/v1", api_key="k", max_retries=0) as sdk,
    ):
        first = sdk.responses.create(model=MODEL, input="[[reason:cloudy skies]] [[tool:look:{}]]")
        reasoning, call = first.output
        assert reasoning.type == "reasoning"
        assert call.type == "function_call"
        output = {"type": "function_call_output", "call_id": call.call_id, "output": "rain"}
        items: Any = [output, {"role": "user", "content": "[[echo]]"}]
        echoed = sdk.responses.create(model=MODEL, input=items, previous_response_id=first.id)
    assert "reasoning: cloudy skies" in echoed.output_text


def test_a_thinking_switch_follows_what_each_client_asked(
    fake_upstream: str, tmp_path: Path
) -> None:
    """``thinking_switch``: a chat template's own flag (Qwen3's ``enable_thinking``) in
    ``chat_template_kwargs``, false for no reasoning, true for an effort, absent when the
    client asked nothing, from every frontend and on the Chat fast path, beside the
    backend's other template flags."""
    flags = {"chat_template_kwargs": {"preserve_thinking": True}}
    backend = {"url": fake_upstream, "thinking_switch": "enable_thinking", "extra_body": flags}

    def sent_flags() -> Any:
        [sent] = upstream_requests(fake_upstream)
        return sent["body"].get("chat_template_kwargs")

    def flagged(on: bool) -> dict[str, bool]:
        return {"preserve_thinking": True, "enable_thinking": on}

    hi: Any = [{"role": "user", "content": "hi"}]
    with configured_gateway(tmp_path, backend) as gateway:
        with OpenAI(base_url=gateway.url + "/v1", api_key="k", max_retries=0) as sdk:
            for reasoning, expected in (
                ({"effort": "none"}, flagged(False)),
                ({"effort": "low"}, flagged(True)),
                (None, {"preserve_thinking": True}),
            ):
                clear(fake_upstream)
                sdk.responses.create(model=MODEL, input="hi", reasoning=reasoning)
                assert sent_flags() == expected, reasoning
            for effort, expected in (("none", flagged(False)), ("high", flagged(True))):
                clear(fake_upstream)  # the fast path
                sdk.chat.completions.create(model=MODEL, messages=hi, reasoning_effort=effort)
                assert sent_flags() == expected, effort
            clear(fake_upstream)  # the client's own flags, and its own switch, kept
            sdk.chat.completions.create(
                model=MODEL,
                messages=hi,
                reasoning_effort="none",
                extra_body={"chat_template_kwargs": {"enable_thinking": True}},
            )
            assert sent_flags() == {"enable_thinking": True}
        with Anthropic(base_url=gateway.url, api_key="k", max_retries=0) as claude:
            for thinking, expected in (
                ({"type": "disabled"}, flagged(False)),
                ({"type": "adaptive"}, flagged(True)),
            ):
                clear(fake_upstream)
                claude.messages.create(model=MODEL, max_tokens=50, messages=hi, thinking=thinking)
                assert sent_flags() == expected, thinking
