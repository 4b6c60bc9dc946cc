"""Which Chat Completions requests declaring tools the fast path forwards untouched: only
those the server takes as sent. vLLM and llama.cpp take function tools alone (the fake
playing each refuses a ``custom`` tool as it does: ``fake_upstream/chat_tools.py``), so a
request declaring a custom tool, or naming one in its ``tool_choice``, is translated for
them and served: the tool offered as a function, its call answered as the custom call
the client declared. A request declaring functions alone is still forwarded."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import orjson
import pytest
from openai import OpenAI

from stateway.fake_upstream.launch import start_fake_upstream
from stateway.launch import start_gateway
from tests.e2e.routing import fake_requests

PARAMETERS = {"type": "object", "properties": {"city": {"type": "string"}}}
WEATHER: Any = {"type": "function", "function": {"name": "get_weather", "parameters": PARAMETERS}}
RUN_SQL: Any = {"type": "custom", "custom": {"name": "run_sql", "description": "SQL."}}
QUERY = 'SELECT "x" FROM t'


@pytest.fixture(scope="module")
def upstreams() -> Iterator[dict[str, str]]:
    with (
        start_fake_upstream(ctx_size=8192, parallel=1) as llama,
        start_fake_upstream(max_model_len=8192) as vllm,
    ):
        yield {"llama": llama, "vllm": vllm}


@pytest.fixture(scope="module")
def client(upstreams: dict[str, str], tmp_path_factory: pytest.TempPathFactory) -> Iterator[OpenAI]:
    directory: Path = tmp_path_factory.mktemp("fast-path-tools")
    config = directory / "stateway.toml"
    config.write_text(
        "".join(
            f'[[backends]]\nname = "{name}"\nurl = "{url}"\napi = "chat"\n'
            f'models = {{ "{name}-model" = "fake-model" }}\n'
            for name, url in upstreams.items()
        )
    )
    database = f"sqlite:///{directory / 'stateway.db'}"
    with (
        start_gateway(["--config", str(config), "--database", database]) as url,
        OpenAI(base_url=url + "/v1", api_key="sk-test", max_retries=0) as sdk,
    ):
        yield sdk


def sent(upstream: str, marker: str) -> dict[str, Any]:
    [logged] = fake_requests(upstream, marker)
    body: dict[str, Any] = logged["body"]
    return body


@pytest.mark.parametrize("server", ["llama", "vllm"])
@pytest.mark.parametrize("choice", [None, {"type": "custom", "custom": {"name": "run_sql"}}])
def test_a_custom_tool_is_translated_for_a_server_taking_functions_alone(
    client: OpenAI, upstreams: dict[str, str], server: str, choice: Any
) -> None:
    marker = uuid.uuid4().hex
    call = orjson.dumps({"input": QUERY}).decode()
    fields: dict[str, Any] = {} if choice is None else {"tool_choice": choice}
    completion = client.chat.completions.create(
        model=f"{server}-model",
        messages=[{"role": "user", "content": f"{marker} [[tool:run_sql:{call}]]"}],
        tools=[WEATHER, RUN_SQL],
        **fields,
    )
    [answered] = completion.choices[0].message.tool_calls or []
    assert answered.type == "custom"
    assert (answered.custom.name, answered.custom.input) == ("run_sql", QUERY)
    body = sent(upstreams[server], marker)
    assert {tool["type"] for tool in body["tools"]} == {"function"}  # offered as a function
    assert "run_sql" in [tool["function"]["name"] for tool in body["tools"]]


@pytest.mark.parametrize("server", ["llama", "vllm"])
def test_a_request_declaring_functions_alone_is_forwarded(
    client: OpenAI, upstreams: dict[str, str], server: str
) -> None:
    marker = uuid.uuid4().hex
    client.chat.completions.create(
        model=f"{server}-model", messages=[{"role": "user", "content": marker}], tools=[WEATHER]
    )
    body = sent(upstreams[server], marker)
    assert body["tools"] == [WEATHER]
    assert "parallel_tool_calls" not in body  # as it came: the fast path


@pytest.mark.parametrize("server", ["llama", "vllm"])
@pytest.mark.parametrize("mode", ["auto", "required"])
def test_an_allowed_tools_choice_is_translated_as_its_mode_over_the_tools_it_lists(
    client: OpenAI, upstreams: dict[str, str], server: str, mode: str
) -> None:
    """vLLM refuses the choice, llama.cpp reads it as ``auto`` over every tool: each is
    sent its ``mode`` with only the tools it allows offered."""
    marker = uuid.uuid4().hex
    allowed = {"mode": mode, "tools": [{"type": "custom", "custom": {"name": "run_sql"}}]}
    call = orjson.dumps({"input": QUERY}).decode()
    completion = client.chat.completions.create(
        model=f"{server}-model",
        messages=[{"role": "user", "content": f"{marker} [[tool:run_sql:{call}]]"}],
        tools=[WEATHER, RUN_SQL],
        tool_choice={"type": "allowed_tools", "allowed_tools": allowed},  # type: ignore[typeddict-item]
    )
    [answered] = completion.choices[0].message.tool_calls or []
    assert answered.type == "custom"
    body = sent(upstreams[server], marker)
    assert body["tool_choice"] == mode
    assert [tool["function"]["name"] for tool in body["tools"]] == ["run_sql"]
