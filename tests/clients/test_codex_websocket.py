"""The real Codex CLI in WebSocket mode (``supports_websockets = true``) through the
gateway, offline: a plain turn and a shell tool round trip go over the WebSocket (the
recording hop relays the upgrade), with no ``POST /v1/responses`` (no HTTP fallback).
Codex prewarms with ``"generate": false`` and continues every later frame by
``previous_response_id`` with ``store: false``, so the tool round trip only works if the
gateway keeps the socket's last response. A prompt with a large image attached goes in one
frame larger than the bound of the frames a socket may have waiting."""

from __future__ import annotations

import json
import os
import struct
import zlib
from pathlib import Path

import pytest

from stateway.core.compaction.prompt import SUMMARY_PREFIX
from stateway.fake_upstream.plan import SUMMARY_HEADING
from tests.clients.codex import CodexRun, run_codex
from tests.clients.offline import OfflineGateway
from tests.clients.test_codex import COMMAND, OUTPUT

pytestmark = pytest.mark.clients

MODEL = "fake-model"


def _codex(
    codex_binary: Path,
    gateway: OfflineGateway,
    prompt: str,
    tmp_path: Path,
    images: tuple[Path, ...] = (),
) -> CodexRun:
    run = run_codex(codex_binary, gateway, prompt, MODEL, tmp_path, websockets=True, images=images)
    assert run.returncode == 0, f"{run.describe()}\ngateway log:\n{gateway.gateway_log.read_text()}"
    failures = [e for e in run.events if e.get("type") in ("error", "turn.failed")]
    assert not failures, run.describe()
    upgrades = [r for r in run.requests if r["method"] == "GET" and r["path"] == "/v1/responses"]
    assert upgrades, run.requests
    assert {r["status"] for r in upgrades} == {101}
    assert run.bodies() == [], "Codex fell back to HTTP"
    return run


def test_a_plain_turn_over_the_websocket(
    codex_binary: Path, gateway: OfflineGateway, tmp_path: Path
) -> None:
    run = _codex(codex_binary, gateway, "Say hi", tmp_path)
    assert [item["text"] for item in run.items("agent_message")] == ["Hello! You said: Say hi"]


def test_the_default_models_prewarm_is_answered_on_the_socket_it_opened(
    codex_binary: Path, gateway: OfflineGateway, tmp_path: Path
) -> None:
    """With its built-in default model Codex prewarms with nothing but ``generate: false``
    (``input: []``, no instructions, no tools: they come as input items later). That is no
    request for an answer, so nothing is missing: refused, it made Codex warn ("startup
    websocket prewarm setup failed") and open a second socket for the turn."""
    run = run_codex(codex_binary, gateway, "Say hi", None, tmp_path, websockets=True)
    assert run.returncode == 0, f"{run.describe()}\ngateway log:\n{gateway.gateway_log.read_text()}"
    assert "prewarm setup failed" not in run.stderr, run.stderr
    upgrades = [r for r in run.requests if r["method"] == "GET" and r["path"] == "/v1/responses"]
    assert [r["status"] for r in upgrades] == [101], run.requests
    assert run.bodies() == [], "Codex fell back to HTTP"
    assert [item["text"] for item in run.items("agent_message")] == ["Hello! You said: Say hi"]


def test_a_shell_tool_round_trip_over_the_websocket(
    codex_binary: Path, gateway: OfflineGateway, tmp_path: Path
) -> None:
    arguments = json.dumps({"cmd": COMMAND})
    run = _codex(codex_binary, gateway, f"Run it [[tool:exec_command:{arguments}]]", tmp_path)
    [command] = run.items("command_execution")
    assert command["aggregated_output"] == OUTPUT + "\n"
    [message] = run.items("agent_message")
    assert message["text"].startswith("Tool said: ")
    assert OUTPUT in message["text"]


def test_a_remote_compaction_over_the_websocket(
    codex_binary: Path, gateway: OfflineGateway, tmp_path: Path
) -> None:
    """Codex's remote compaction (a provider named ``OpenAI``, a low
    ``model_auto_compact_token_limit``) in WebSocket mode: its ``compaction_trigger`` frame
    continues the socket's last response, the gateway answers with the one ``compaction``
    item, and the turn goes on from it: the model sees the summary, the tool's output
    included."""
    prompt = "Run it [[tool:exec_command:" + json.dumps({"cmd": COMMAND}) + "]]"
    run = run_codex(
        codex_binary,
        gateway,
        prompt,
        MODEL,
        tmp_path,
        websockets=True,
        provider_name="OpenAI",
        config=("model_auto_compact_token_limit=2000",),
    )
    assert run.returncode == 0, f"{run.describe()}\ngateway log:\n{gateway.gateway_log.read_text()}"
    assert run.bodies() == [], "Codex fell back to HTTP"
    [command] = run.items("command_execution")
    assert command["aggregated_output"] == OUTPUT + "\n"
    [message] = run.items("agent_message")
    assert message["text"].startswith(f"Hello! You said: {SUMMARY_PREFIX}{SUMMARY_HEADING}")
    assert OUTPUT in message["text"]


def test_a_frame_larger_than_the_queue_bound_is_answered_on_an_idle_socket(
    codex_binary: Path, gateway: OfflineGateway, tmp_path: Path
) -> None:
    """Codex sends a whole context in one frame: with a large image attached (a 2048x2048
    PNG of noise, ~17 MB once in base64) that frame is over ``max_queued_bytes`` (12 MiB by
    default), which bounds the frames waiting behind others, and under ``max_frame_bytes``
    (32 MiB). Nothing runs on the socket, so it is answered (a 429
    ``websocket_limit_exceeded`` failed Codex's turn, though HTTP took the same body)."""
    picture = tmp_path / "noise.png"
    picture.write_bytes(_noise_png(2048, 2048))
    run = _codex(codex_binary, gateway, "Look [[tail:1]]", tmp_path, images=(picture,))
    [message] = run.items("agent_message")
    assert "<image>" in message["text"]  # the fake saw an image part


def _noise_png(width: int, height: int) -> bytes:
    """An RGB PNG of random pixels: it does not compress, so its size is its pixels'."""
    rows = b"".join(b"\x00" + os.urandom(width * 3) for _ in range(height))
    header = struct.pack(">IIBBBBB", width, height, 8, 2, 0, 0, 0)
    chunks = [(b"IHDR", header), (b"IDAT", zlib.compress(rows, 0)), (b"IEND", b"")]
    return b"\x89PNG\r\n\x1a\n" + b"".join(_png_chunk(kind, data) for kind, data in chunks)


def _png_chunk(kind: bytes, data: bytes) -> bytes:
    checksum = zlib.crc32(kind + data) & 0xFFFFFFFF
    return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", checksum)
