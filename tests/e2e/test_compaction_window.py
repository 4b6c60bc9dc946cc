"""A compaction whose context holds one item larger than the model's whole window, through
the real gateway in front of the real fake keeping a window as vLLM does
(``--max-model-len``, words counted as tokens), on each upstream API shape: Codex's remote
compaction (a ``compaction_trigger`` after a tool's output of a whole log),
``/v1/responses/compact`` of one pasted log, and a Messages compaction of a tool result.
Each succeeds, its summary call shown the item's head and tail with the marker between
them, and the server takes it; what the client keeps is whole."""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from anthropic import Anthropic
from openai import OpenAI

from stateway.core.compaction.prompt import STANDALONE_SUMMARY_PROMPT, SUMMARY_PROMPT
from stateway.fake_upstream.launch import start_fake_upstream
from stateway.launch import start_gateway
from tests.e2e.test_messages_sdk import clear, upstream_log

MODEL = "fake-model"
WINDOW = 4000
"""The server's window in words, configured as the backend's ``context_window`` too."""
LOG = "HEAD-OF-LOG " + " ".join(f"line{n:05}" for n in range(20_000)) + " TAIL-OF-LOG"
"""About 200 KB, 20,002 words: five times the window."""
MARKER = re.compile(r"\[\.\.\. [0-9,]+ characters omitted \.\.\.\]")


@pytest.fixture(scope="module")
def upstream() -> Iterator[str]:
    with start_fake_upstream(max_model_len=WINDOW) as url:
        yield url


@pytest.fixture(scope="module", params=["chat", "responses", "anthropic"])
def gateway(
    request: pytest.FixtureRequest, upstream: str, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[str]:
    directory = tmp_path_factory.mktemp("compaction-window")
    config = Path(directory) / "stateway.toml"
    config.write_text(
        f'[[backends]]\nname = "small"\nurl = "{upstream}"\napi = "{request.param}"\n'
        f"models = []\ncontext_window = {WINDOW}\n"
    )
    database = f"sqlite:///{directory / 'stateway.db'}"
    with start_gateway(["--config", str(config), "--database", database]) as url:
        yield url


@pytest.fixture
def client(gateway: str) -> Iterator[OpenAI]:
    with OpenAI(base_url=gateway + "/v1", api_key="sk-test", max_retries=0) as sdk:
        yield sdk


def summary_call(upstream: str, prompt: str) -> str:
    """The one summary call the fake got (its whole body, as JSON), which it answered."""
    [sent] = upstream_log(upstream)
    body = json.dumps(sent["body"])
    assert prompt.splitlines()[0] in body
    return body


def assert_cut(body: str) -> None:
    """The log's head and tail reached the model, with the marker between them, and not
    its middle."""
    head, tail = body.index("HEAD-OF-LOG"), body.index("TAIL-OF-LOG")
    [marker] = MARKER.finditer(body)
    assert head < marker.start() < tail
    assert "line10000" not in body


def test_a_remote_compaction_after_a_tool_output_over_the_window_is_shown_its_cut(
    client: OpenAI, upstream: str
) -> None:
    clear(upstream)
    history: list[Any] = [
        {"role": "user", "content": "why does the build fail?"},
        {"type": "function_call", "call_id": "c1", "name": "sh", "arguments": '{"cmd": "make"}'},
        {"type": "function_call_output", "call_id": "c1", "output": LOG},
        {"type": "compaction_trigger"},
    ]
    response = client.responses.create(model=MODEL, input=history, store=False)
    assert [item.type for item in response.output] == ["compaction"]
    assert_cut(summary_call(upstream, SUMMARY_PROMPT))


def test_compact_of_one_pasted_log_over_the_window_is_shown_its_cut(
    client: OpenAI, upstream: str
) -> None:
    clear(upstream)
    compacted = client.responses.compact(model=MODEL, input=[{"role": "user", "content": LOG}])
    kept, summary = compacted.output
    assert kept.content[0].text == LOG  # type: ignore[union-attr]
    assert summary.type == "compaction"
    assert_cut(summary_call(upstream, SUMMARY_PROMPT))


def test_a_messages_compaction_of_a_tool_result_over_the_window_is_shown_its_cut(
    gateway: str, upstream: str
) -> None:
    clear(upstream)
    messages: list[Any] = [
        {"role": "user", "content": "why does the build fail?"},
        {
            "role": "assistant",
            "content": [{"type": "tool_use", "id": "t1", "name": "sh", "input": {"cmd": "make"}}],
        },
        {
            "role": "user",
            "content": [
                {
                    "type": "tool_result",
                    "tool_use_id": "t1",
                    "content": [{"type": "text", "text": LOG}],
                }
            ],
        },
    ]
    with Anthropic(base_url=gateway, api_key="client-key", max_retries=0) as claude:
        message = claude.beta.messages.create(
            model=MODEL, max_tokens=1000, messages=messages, compaction={"type": "summarize"}
        )
    assert message.stop_reason == "compaction"
    assert_cut(summary_call(upstream, STANDALONE_SUMMARY_PROMPT))
