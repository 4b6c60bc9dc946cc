"""Claude Code's auto mode over an Anthropic backend: its ``safeguards`` (Anthropic's check of
risky tool calls, run by the API beside the answer) reach a backend that runs them, and the
``safeguard_results`` come back as Anthropic sends them; a backend that does not run them is
sent none (an Anthropic-compatible server may refuse the field)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from anthropic import Anthropic

from stateway.fake_upstream.messages import NOT_FLAGGED
from tests.e2e.configured import configured_gateway
from tests.e2e.routing import fake_requests

MODEL = "fake-model"
SAFEGUARDS = [
    {"type": "dangerous_tool_use", "classifier_context": {"v": 1, "permission_mode": "auto"}}
]


@pytest.mark.parametrize("runs", [True, False], ids=["runs-them", "does-not"])
def test_safeguards_reach_a_backend_that_runs_them_and_their_results_come_back(
    fake_upstream: str, tmp_path: Path, runs: bool
) -> None:
    backend: dict[str, Any] = {"url": fake_upstream, "api": "anthropic", "safeguards": runs}
    marker = f"safeguarded-{runs}"
    asked: dict[str, Any] = {
        "model": MODEL,
        "max_tokens": 100,
        "messages": [{"role": "user", "content": f"{marker} [[tool:f:{{}}]]"}],
        "tools": [{"name": "f", "input_schema": {"type": "object"}}],
    }
    with (
        configured_gateway(tmp_path, backend) as gateway,
        Anthropic(base_url=gateway.url, api_key="k", max_retries=0) as claude,
    ):
        message = claude.messages.create(**asked, extra_body={"safeguards": SAFEGUARDS})
        events = claude.messages.create(**asked, stream=True, extra_body={"safeguards": SAFEGUARDS})
        frames = list(events)
        [ending] = [event for event in frames if event.type == "message_delta"]
        streamed = [e.content_block for e in frames if e.type == "content_block_start"]

    sent = [request["body"].get("safeguards") for request in fake_requests(fake_upstream, marker)]
    assert sent == ([SAFEGUARDS] * 2 if runs else [None] * 2)
    for answer, results in (
        (message.content, (message.model_extra or {}).get("safeguard_results")),
        (streamed, (ending.delta.model_extra or {}).get("safeguard_results")),
    ):
        if not runs:
            assert results is None
            continue
        [call] = [block for block in answer if block.type == "tool_use"]
        status = {"type": "available", "tool_uses": {call.id: NOT_FLAGGED}}
        assert results == [{"type": "dangerous_tool_use", "status": status}]


def test_a_keyed_retry_gets_the_first_answer_with_its_safeguard_results(
    fake_upstream: str, tmp_path: Path
) -> None:
    """A retry with the same ``Idempotency-Key`` is not asked of the model again: it gets
    the first answer byte for byte, the results of its checks included, never an answer
    without them."""
    backend: dict[str, Any] = {"url": fake_upstream, "api": "anthropic", "safeguards": True}
    asked: dict[str, Any] = {
        "model": MODEL,
        "max_tokens": 100,
        "messages": [{"role": "user", "content": "keyed-safeguards [[tool:f:{}]]"}],
        "tools": [{"name": "f", "input_schema": {"type": "object"}}],
        "extra_body": {"safeguards": SAFEGUARDS},
        "extra_headers": {"Idempotency-Key": "retry-1"},
    }
    with (
        configured_gateway(tmp_path, backend) as gateway,
        Anthropic(base_url=gateway.url, api_key="k", max_retries=0) as claude,
    ):
        first = claude.messages.create(**asked)
        retry = claude.messages.create(**asked)

    assert len(fake_requests(fake_upstream, "keyed-safeguards")) == 1
    assert first == retry
    for message in (first, retry):
        [call] = [block for block in message.content if block.type == "tool_use"]
        status = {"type": "available", "tool_uses": {call.id: NOT_FLAGGED}}
        results = (message.model_extra or {}).get("safeguard_results")
        assert results == [{"type": "dangerous_tool_use", "status": status}]
