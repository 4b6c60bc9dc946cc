"""What a stateless Codex keeps across its requests, through the gateway: its model's
reasoning (``include: ["reasoning.encrypted_content"]`` with ``store: false``; shown as
summaries when it asks for them) and its remote compaction (the ``compaction_trigger``
item, with a provider named ``OpenAI``).
Codex resends everything it keeps each time, sealed by the gateway (also to resume a
session), or continues its socket's last response in WebSocket mode."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from stateway.core.compaction.prompt import SUMMARY_PREFIX
from stateway.fake_upstream.plan import SUMMARY_HEADING
from tests.clients.codex import CodexRun, run_codex
from tests.clients.offline import GatewayPool, OfflineGateway

pytestmark = pytest.mark.clients

COMMAND = "echo stateway-$((6*7))"
OUTPUT = "stateway-42"
"""Appears nowhere in a prompt: only running :data:`COMMAND` gives it."""


@pytest.mark.parametrize("hidden", ["", " [[hidden]]"])
def test_the_models_reasoning_comes_back_sealed_and_reaches_the_model_again(
    codex_binary: Path, gateway: OfflineGateway, tmp_path: Path, hidden: str
) -> None:
    """The fake reasons, then calls Codex's shell tool. Codex sends the reasoning item
    back with the tool's output, ``encrypted_content`` as the gateway sealed it, and the
    model's next context (``[[echo]]``) holds the reasoning before the call. Hidden (a
    Responses upstream's own ``encrypted_content``, no text), the seal is the upstream's
    sealed over for the tenant, and the upstream gets its own back."""
    call = json.dumps({"cmd": COMMAND})
    # the context's last lines only: Codex's instructions would make the answer thousands
    # of words, streamed slowly through the recording hop
    prompt = f"Run it [[reason:plan-xyz]]{hidden} [[tail:4]] [[tool:exec_command:{call}]]"
    run = run_codex(codex_binary, gateway, prompt, "gpt-5.5", tmp_path)
    assert run.returncode == 0, f"{run.describe()}\ngateway log:\n{gateway.gateway_log.read_text()}"

    first, second = run.bodies()
    assert (first["store"], first["include"]) == (False, ["reasoning.encrypted_content"])
    reasoning, function_call, output = second["input"][len(first["input"]) :]
    assert reasoning["type"] == "reasoning"
    assert reasoning["encrypted_content"].startswith("sw1.")
    assert "plan-xyz" not in reasoning["encrypted_content"]
    assert function_call["type"] == "function_call"
    assert OUTPUT in output["output"]
    messages = run.items("agent_message")
    assert len(messages) == 1, run.describe()
    seen = messages[0]["text"].splitlines()
    prompt_line = seen.index(f"user: {prompt}")
    assert seen[prompt_line + 1 : prompt_line + 3] == [
        "reasoning: plan-xyz",
        f"assistant->exec_command({call})",
    ]


@pytest.mark.parametrize("websockets", [False, True], ids=["sse", "websocket"])
def test_a_vllm_models_reasoning_reaches_it_again_in_the_next_round_and_a_resumed_session(
    codex_binary: Path, vllm_gateway: OfflineGateway, tmp_path: Path, websockets: bool
) -> None:
    """Over current vLLM's wire (reasoning written as ``reasoning``, read back from that
    field only) the model thinks, runs Codex's shell tool, thinks again and answers; then
    ``codex exec resume`` asks again. Codex shows each thought (its summary), its effort
    reaches vLLM as ``reasoning_effort``, and the model (``[[tail]]``) is shown each
    earlier thought once, before what followed it: in the next round (over the socket,
    from its last response) and in the resumed session (from the sealed items Codex sends
    back)."""
    call = json.dumps({"cmd": COMMAND})
    first = f"Run it [[reason:plan-xyz]] [[tail:3]] [[tool:exec_command:{call}]]"
    then = "Again [[reason:plan-two]] [[tail:6]]"
    config = ('model_reasoning_summary="auto"', 'model_reasoning_effort="high"')
    call_round = f"reasoning: plan-xyz\nassistant->exec_command({call})\n"
    vllm_gateway.take_upstream_requests()  # forget an earlier test's

    def codex(prompt: str, resume: str | None = None) -> CodexRun:
        run = run_codex(
            codex_binary,
            vllm_gateway,
            prompt,
            "gpt-5.5",
            tmp_path,
            websockets=websockets,
            config=config,
            keep=True,
            resume=resume,
        )
        assert run.returncode == 0, f"{run.describe()}\n{vllm_gateway.gateway_log.read_text()}"
        assert bool(run.bodies()) is not websockets, run.requests  # no HTTP fallback
        return run

    ran = codex(first)
    assert [item["text"] for item in ran.items("reasoning")] == ["plan-xyz", "plan-xyz"]
    [answer] = ran.items("agent_message")
    assert answer["text"].startswith(call_round), answer
    assert OUTPUT in answer["text"]

    resumed = codex(then, ran.thread_id)
    assert [item["text"] for item in resumed.items("reasoning")] == ["plan-two"]
    [again] = resumed.items("agent_message")
    seen = again["text"]  # the call's round, the answer's (which quotes the first), the ask
    assert seen.startswith(call_round), seen
    assert "\nreasoning: plan-xyz\nassistant: reasoning: plan-xyz\n" in seen, seen
    assert seen.count("reasoning: plan-xyz") == 3, seen
    assert seen.endswith(f"\nuser: {then}"), seen
    sent = vllm_gateway.take_upstream_requests()
    assert [(r["path"], r["body"]["reasoning_effort"]) for r in sent] == [
        ("/v1/chat/completions", "high")
    ] * 3


def test_codex_shows_the_models_reasoning_when_it_asks_for_summaries(
    codex_binary: Path, gateway: OfflineGateway, tmp_path: Path
) -> None:
    """Codex shows only reasoning summaries; with ``model_reasoning_summary="auto"`` it
    asks for them, and the gateway offers an open model's reasoning text as the summary."""
    config = ('model_reasoning_summary="auto"',)
    run = run_codex(
        codex_binary, gateway, "Think [[reason:plan-xyz]]", "gpt-5.5", tmp_path, config=config
    )
    assert run.returncode == 0, run.describe()

    [body] = run.bodies()
    assert body["reasoning"]["summary"] == "auto"
    assert [item["text"] for item in run.items("reasoning")] == ["plan-xyz"]
    assert [item["text"] for item in run.items("agent_message")] == ["Hello! You said: Think"]


def compacting_run(codex_binary: Path, gateway: OfflineGateway, tmp_path: Path) -> CodexRun:
    """Codex running a tool, with a provider named ``OpenAI`` and a token limit low
    enough that it compacts its turn after the tool's output."""
    prompt = "Run it [[tool:exec_command:" + json.dumps({"cmd": COMMAND}) + "]]"
    return run_codex(
        codex_binary,
        gateway,
        prompt,
        "gpt-5.5",
        tmp_path,
        provider_name="OpenAI",
        config=("model_auto_compact_token_limit=2000",),
    )


def test_a_remote_compaction_replaces_the_history_with_one_item_the_model_can_read(
    codex_binary: Path, gateway: OfflineGateway, tmp_path: Path
) -> None:
    """With a provider named ``OpenAI`` and a low ``model_auto_compact_token_limit``,
    Codex compacts mid-turn: after running the tool it sends its history with a
    ``compaction_trigger`` item and takes the one ``compaction`` item the gateway answers
    with; its next request carries the user messages and that item only, and the model
    sees the summary in its place, the tool's output included."""
    run = compacting_run(codex_binary, gateway, tmp_path)
    assert run.returncode == 0, f"{run.describe()}\ngateway log:\n{gateway.gateway_log.read_text()}"

    first, trigger, after = run.bodies()
    assert trigger["input"][-1] == {"type": "compaction_trigger"}
    assert [item["type"] for item in trigger["input"][len(first["input"]) : -1]] == [
        "function_call",
        "function_call_output",
    ]
    kept = [(item["role"], item["content"]) for item in after["input"][: len(first["input"])]]
    assert kept == [(item["role"], item["content"]) for item in first["input"]]
    [compaction] = after["input"][len(first["input"]) :]
    assert compaction["type"] == "compaction"
    assert compaction["encrypted_content"].startswith("sw1.")
    assert OUTPUT not in compaction["encrypted_content"]
    [message] = run.items("agent_message")
    # The summary is the model's last user message; the fake answers it with a greeting.
    assert message["text"].startswith(f"Hello! You said: {SUMMARY_PREFIX}{SUMMARY_HEADING}")
    assert OUTPUT in message["text"]  # the tool's output reached the model in the summary


def test_a_remote_compaction_of_a_tool_call_on_an_anthropic_upstream(
    codex_binary: Path, gateways: GatewayPool, tmp_path: Path
) -> None:
    """Anthropic refuses a request holding tool calls and results that declares no tools,
    as a summary call is asked: the gateway declares the tools the history calls, none
    to be called, and Codex's compaction of its turn goes on to the answer."""
    gateway = gateways.get("anthropic")
    gateway.take_upstream_requests()  # forget an earlier test's
    run = compacting_run(codex_binary, gateway, tmp_path)
    assert run.returncode == 0, f"{run.describe()}\ngateway log:\n{gateway.gateway_log.read_text()}"
    assert run.bodies()[1]["input"][-1] == {"type": "compaction_trigger"}
    [message] = run.items("agent_message")
    assert OUTPUT in message["text"]  # the tool's output reached the model in the summary
    summary = next(
        r["body"]
        for r in gateway.take_upstream_requests()
        if "tool_choice" in r["body"] and r["body"]["tool_choice"] == {"type": "none"}
    )
    assert [tool["name"] for tool in summary["tools"]] == ["exec_command"]


def test_a_provider_named_openai_sends_its_effort_as_configuration_updates(
    codex_binary: Path, gateway: OfflineGateway, tmp_path: Path
) -> None:
    """With a provider named ``OpenAI`` and its default model, Codex records its reasoning
    effort as a ``configuration_update`` input item (a change of effort as another); the
    gateway applies it and sends it to no upstream (a Chat upstream's request was a 400)."""
    config = ('model_reasoning_effort="high"',)
    run = run_codex(
        codex_binary, gateway, "Say hi", None, tmp_path, provider_name="OpenAI", config=config
    )
    assert run.returncode == 0, f"{run.describe()}\ngateway log:\n{gateway.gateway_log.read_text()}"

    [body] = run.bodies()
    updates = [item for item in body["input"] if item.get("type") == "configuration_update"]
    assert updates == [{"type": "configuration_update", "reasoning": {"effort": "high"}}]
    assert [item["text"] for item in run.items("agent_message")] == ["Hello! You said: Say hi"]
