"""The real Codex CLI and Claude Code, offline, through the gateway to llama.cpp's real
``llama-server`` (a Chat Completions backend, as users run it) serving the tiny model of
``tests/llama_server/``, which answers every prompt with ``Thinking`` as its reasoning and
``Hello from llama``.

The clients' prompts are large (instructions and dozens of tools: ~20,000 to 30,000 of
the tiny model's tokens), so the server's window is wide and a prompt takes it seconds to
read; what it has read stays in its one slot's cache, and a request whose prompt begins as
the last one did is read only past what they share. The clients report that share as
cached tokens, which shows the gateway keeps a conversation's prompt as it was from one
request to the next, and a client's instructions and tools as they were from one session
to the next (Claude Code's per-session billing header kept the server from reusing any of
them, on every new session). The model calls no tool unasked, so the tool round trips are
the fake's (``test_codex.py``, ``test_claude_code.py``).
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.clients.claude_code import ClaudeRun, run_claude
from tests.clients.codex import CodexRun, run_codex
from tests.clients.offline import OfflineGateway, gateway_over, inside
from tests.llama_server.server import MODEL, built_llama_server, llama_server
from tests.llama_server.tiny_model import REASONING, REPLY, write_tiny_model

pytestmark = [pytest.mark.clients, pytest.mark.llama_server]

WINDOW = 65536
"""The server's one slot (``--parallel 1``: each request finds the last one's prompt)."""


@pytest.fixture(scope="module")
def llama(namespace: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[OfflineGateway]:
    """llama-server inside the namespace, the gateway in front of it as its one Chat
    Completions backend, and the recording hop."""
    directory = tmp_path_factory.mktemp("gateway-llama")
    model = write_tiny_model(directory / "tiny.gguf")
    options = ("--ctx-size", str(WINDOW), "--parallel", "1")
    options += ("--log-file", str(directory / "llama-server.log"))
    binary = built_llama_server()
    with (
        llama_server(binary, model, options, prefix=inside(namespace, [])) as url,
        gateway_over(namespace, url + "/v1", "chat", directory) as gateway,
    ):
        yield gateway


def _logs(gateway: OfflineGateway) -> str:
    """The gateway's log and the end of llama-server's, for a failure's message."""
    server_log = gateway.gateway_log.with_name("llama-server.log").read_text()
    tail = "\n".join(server_log.splitlines()[-20:])
    return f"gateway log:\n{gateway.gateway_log.read_text()}\nllama-server log:\n{tail}"


def _codex(
    codex_binary: Path,
    llama: OfflineGateway,
    prompt: str,
    tmp_path: Path,
    model: str = MODEL,
    **options: Any,
) -> CodexRun:
    run = run_codex(codex_binary, llama, prompt, model, tmp_path, **options)
    assert run.returncode == 0, f"{run.describe()}\n{_logs(llama)}"
    assert run.events[-1]["type"] == "turn.completed", run.describe()
    assert all(request["status"] in (101, 200) for request in run.requests), run.describe()
    return run


@pytest.mark.parametrize("websockets", [False, True], ids=["sse", "websocket"])
def test_codex_answers_and_its_resumed_session_is_read_from_the_servers_cache(
    codex_binary: Path, llama: OfflineGateway, tmp_path: Path, websockets: bool
) -> None:
    """A turn, then ``codex exec resume``: the reasoning shows (Codex asks a model it does
    not know for summaries) and the answer; the second prompt, the first one's history
    sent back (its reasoning sealed), is read from the cache up to the first one's end."""
    first = _codex(codex_binary, llama, "Say hi", tmp_path, websockets=websockets, keep=True)
    again = _codex(
        codex_binary, llama, "Again", tmp_path, websockets=websockets, resume=first.thread_id
    )

    for run in (first, again):
        assert bool(run.bodies()) is not websockets, run.requests  # no HTTP fallback
        assert [item["text"] for item in run.items("reasoning")] == [REASONING], run.describe()
        assert [item["text"] for item in run.items("agent_message")] == [REPLY], run.describe()
    before, after = first.events[-1]["usage"], again.events[-1]["usage"]  # the session's sums
    assert after["cached_input_tokens"] - before["cached_input_tokens"] >= before["input_tokens"]


def test_a_codex_remote_compaction_is_summarized_by_the_server(
    codex_binary: Path, llama: OfflineGateway, tmp_path: Path
) -> None:
    """A provider named ``OpenAI`` and a low ``model_auto_compact_token_limit``: resuming,
    Codex first compacts its history (a ``compaction_trigger`` item), which the gateway
    summarizes with the model and answers with one sealed ``compaction`` item, then asks
    with its user messages and that item only."""
    options: dict[str, Any] = {"model": "gpt-5.5", "provider_name": "OpenAI"}
    options["config"] = ("model_auto_compact_token_limit=2000",)
    first = _codex(codex_binary, llama, "Say hi", tmp_path, keep=True, **options)
    again = _codex(codex_binary, llama, "Again", tmp_path, resume=first.thread_id, **options)

    trigger, after = again.bodies()
    assert trigger["input"][-1] == {"type": "compaction_trigger"}
    [compaction] = [item for item in after["input"] if item.get("type") == "compaction"]
    assert compaction["encrypted_content"].startswith("sw1.")
    assert [item["text"] for item in again.items("agent_message")] == [REPLY]


def _claude(
    claude_binary: Path, llama: OfflineGateway, prompt: str, workdir: Path, *options: str
) -> ClaudeRun:
    run = run_claude(claude_binary, llama, prompt, workdir, extra_args=options)
    assert run.returncode == 0, f"{run.describe()}\n{_logs(llama)}"
    assert all(request["status"] == 200 for request in run.requests), run.describe()
    assert run.result is not None, run.describe()
    assert (run.result["is_error"], run.result["result"]) == (False, REPLY), run.describe()
    return run


def _prompt_tokens(run: ClaudeRun) -> int:
    assert run.result is not None
    usage = run.result["usage"]
    return int(usage["input_tokens"] + usage["cache_read_input_tokens"])


def test_a_claude_code_session_continued_is_read_from_the_servers_cache(
    claude_binary: Path, llama: OfflineGateway, tmp_path: Path
) -> None:
    """``claude -p``, then ``--continue``: the second prompt (the first one's thinking sent
    back, signed) is read from the cache up to the first one's end."""
    first = _claude(claude_binary, llama, "Say hi", tmp_path)
    again = _claude(claude_binary, llama, "Again", tmp_path, "--continue")

    assert again.result is not None
    assert again.result["usage"]["cache_read_input_tokens"] >= _prompt_tokens(first)
    [body] = again.bodies()
    assert [message["role"] for message in body["messages"]][-2:] == ["assistant", "user"]


def test_a_new_claude_code_session_reads_its_instructions_and_tools_from_the_cache(
    claude_binary: Path, llama: OfflineGateway, tmp_path: Path
) -> None:
    """Claude Code leads its system prompt with a block of its own, an
    ``x-anthropic-billing-header`` whose ``cc_version`` changes with the first message
    (Anthropic takes it as attribution, not as the model's prompt): forwarded, it made the
    prompts of a user's two sessions in one project differ from their ~30th token on, and
    the server read again all of the next one's 20,000 tokens of instructions and tools."""
    first = _claude(claude_binary, llama, "Write a haiku about the sea", tmp_path)
    second = _claude(claude_binary, llama, "List three colors, please", tmp_path)

    headers = [run.bodies()[0]["system"][0]["text"] for run in (first, second)]
    assert headers[0].startswith("x-anthropic-billing-header: cc_version=")
    assert headers[0] != headers[1]  # each session's own
    assert second.result is not None
    # all before the user's prompt (instructions, tools, a reminder): some four fifths
    assert second.result["usage"]["cache_read_input_tokens"] > _prompt_tokens(first) // 2
