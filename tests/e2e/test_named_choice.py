"""A named ``tool_choice`` end to end: the real gateway in front of the fake listing
itself as llama.cpp does (``--ctx-size``), as vLLM does (``--max-model-len``) and as a
server it does not know (no window told). llama-server reads a named choice as ``auto``
(``tests/llama_server/test_tools.py``), so it, and a server not known to force a named
choice, is sent ``required`` with only the named function offered; vLLM gets it named,
with every tool. Whatever the client: Responses, Chat Completions (whose request naming a
tool is translated for llama.cpp, forwarded untouched elsewhere), Messages. A backend
whose window is configured (no window discovery reading its listing) asks the listing
itself."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from anthropic import Anthropic
from openai import OpenAI

from stateway.fake_upstream.launch import start_fake_upstream
from stateway.launch import start_gateway
from tests.e2e.routing import fake_requests

PARAMETERS = {"type": "object", "properties": {"city": {"type": "string"}}}
WEATHER = {"type": "function", "name": "get_weather", "parameters": PARAMETERS}
TIME = {"type": "function", "name": "get_time", "parameters": PARAMETERS}
CHAT_TOOLS: Any = [
    {"type": "function", "function": {"name": t["name"], "parameters": PARAMETERS}}
    for t in (WEATHER, TIME)
]
NAMED_CHAT = {"type": "function", "function": {"name": "get_time"}}


@pytest.fixture(scope="module")
def llama() -> Iterator[str]:
    with start_fake_upstream(ctx_size=8192, parallel=1) as url:
        yield url


@pytest.fixture(scope="module")
def vllm() -> Iterator[str]:
    with start_fake_upstream(max_model_len=8192) as url:
        yield url


@pytest.fixture(scope="module")
def unknown() -> Iterator[str]:
    with start_fake_upstream() as url:
        yield url


def backend(name: str, url: str, settings: str = "") -> str:
    models = f'{{ "{name}-model" = "fake-model" }}'
    return f'[[backends]]\nname = "{name}"\nurl = "{url}"\nmodels = {models}\n{settings}'


@pytest.fixture(scope="module")
def gateway(
    llama: str, vllm: str, unknown: str, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[str]:
    directory: Path = tmp_path_factory.mktemp("named-choice")
    config = directory / "stateway.toml"
    config.write_text(
        backend("llama", llama)
        + backend("configured", llama, "context_window = 8192\n")
        + backend("vllm", vllm)
        + backend("unknown", unknown)
    )
    database = f"sqlite:///{directory / 'stateway.db'}"
    with start_gateway(["--config", str(config), "--database", database]) as url:
        yield url


@pytest.fixture
def client(gateway: str) -> Iterator[OpenAI]:
    with OpenAI(base_url=gateway + "/v1", api_key="sk-test", max_retries=0) as sdk:
        yield sdk


def sent(upstream: str, marker: str) -> dict[str, Any]:
    """The body of the one generation request ``upstream`` received mentioning ``marker``."""
    [logged] = fake_requests(upstream, marker)
    body: dict[str, Any] = logged["body"]
    return body


def offered(body: dict[str, Any]) -> list[str]:
    return [tool["function"]["name"] for tool in body["tools"]]


def ask(client: OpenAI, model: str, choice: Any, tools: Any = (WEATHER, TIME)) -> str:
    """A Responses request with ``choice``; the marker its input holds."""
    marker = uuid.uuid4().hex
    client.responses.create(model=model, input=marker, tools=list(tools), tool_choice=choice)
    return marker


@pytest.mark.parametrize("model", ["llama-model", "configured-model"])
def test_llama_cpp_is_sent_required_with_the_named_function_alone(
    client: OpenAI, llama: str, model: str
) -> None:
    body = sent(llama, ask(client, model, {"type": "function", "name": "get_time"}))
    assert (body["tool_choice"], offered(body)) == ("required", ["get_time"])


def test_a_named_custom_tool_alike(client: OpenAI, llama: str) -> None:
    custom = {"type": "custom", "name": "run_sql", "description": "SQL."}
    marker = ask(client, "llama-model", {"type": "custom", "name": "run_sql"}, (WEATHER, custom))
    body = sent(llama, marker)
    assert (body["tool_choice"], offered(body)) == ("required", ["run_sql"])


def test_vllm_gets_the_choice_named_and_every_tool(client: OpenAI, vllm: str) -> None:
    body = sent(vllm, ask(client, "vllm-model", {"type": "function", "name": "get_time"}))
    assert (body["tool_choice"], offered(body)) == (NAMED_CHAT, ["get_weather", "get_time"])


def test_a_server_not_known_to_force_it_is_sent_required(client: OpenAI, unknown: str) -> None:
    body = sent(unknown, ask(client, "unknown-model", {"type": "function", "name": "get_time"}))
    assert (body["tool_choice"], offered(body)) == ("required", ["get_time"])


def test_a_choice_naming_no_tool_is_sent_as_it_is(client: OpenAI, llama: str) -> None:
    body = sent(llama, ask(client, "llama-model", "required"))
    assert (body["tool_choice"], offered(body)) == ("required", ["get_weather", "get_time"])


def chat(client: OpenAI, model: str, choice: Any) -> str:
    marker = uuid.uuid4().hex
    client.chat.completions.create(
        model=model,
        messages=[{"role": "user", "content": marker}],
        tools=CHAT_TOOLS,
        tool_choice=choice,
    )
    return marker


def test_a_chat_client_s_named_choice_is_translated_for_llama_cpp(
    client: OpenAI, llama: str
) -> None:
    body = sent(llama, chat(client, "llama-model", NAMED_CHAT))
    assert (body["tool_choice"], offered(body)) == ("required", ["get_time"])
    auto = sent(llama, chat(client, "llama-model", "auto"))
    assert "parallel_tool_calls" not in auto  # forwarded as it came: the fast path


def test_a_chat_client_s_named_choice_is_forwarded_elsewhere(client: OpenAI, vllm: str) -> None:
    ask(client, "vllm-model", {"type": "function", "name": "get_time"})  # its listing read
    body = sent(vllm, chat(client, "vllm-model", NAMED_CHAT))
    assert (body["tool_choice"], body["tools"]) == (NAMED_CHAT, CHAT_TOOLS)
    assert "parallel_tool_calls" not in body  # forwarded as it came


def test_a_messages_client_s_named_tool_alike(gateway: str, llama: str) -> None:
    marker = uuid.uuid4().hex
    tools: Any = [{"name": t["name"], "input_schema": PARAMETERS} for t in (WEATHER, TIME)]
    with Anthropic(base_url=gateway, api_key="sk-test", max_retries=0) as claude:
        claude.messages.create(
            model="llama-model",
            max_tokens=100,
            tools=tools,
            tool_choice={"type": "tool", "name": "get_time"},
            messages=[{"role": "user", "content": marker}],
        )
    body = sent(llama, marker)
    assert (body["tool_choice"], offered(body)) == ("required", ["get_time"])
