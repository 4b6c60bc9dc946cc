"""A ``context_management`` threshold crossed by a response's own tool loop: checked again
before each later round, the response compacts there, once, its ``compaction`` item where
it was made (after the tool's output, before the round that goes on from the summary).
A scripted backend, an in-memory MCP client and the in-memory store."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncGenerator, Mapping
from typing import Any

import orjson
import pytest

from stateway.core import events as ev
from stateway.core.commands import CreateResponse, GenerationSettings
from stateway.core.compaction.prompt import SUMMARY_PREFIX, SUMMARY_PROMPT
from stateway.core.gateway import Gateway
from stateway.core.inference import (
    Delta,
    Finish,
    InferenceRequest,
    TextDelta,
    ToolCallDelta,
    UsageReport,
)
from stateway.core.loop import Loop
from stateway.core.principal import Principal
from stateway.core.routing import BackendEntry, Router
from stateway.core.runs import CancelReason, Run, RunRegistry
from stateway.core.tools.ports import McpServer, McpTool
from stateway.core.tools.toolset import ConfiguredServer, GatewayTools
from stateway.core.usage import Usage
from stateway.sealing import AesGcmSealer
from tests.core.fakes import FakeMcp, MemoryStore, RoundsBackend

SEALER = AesGcmSealer(bytes(range(32)))
READ = McpTool("read", {"type": "object"}, "Read a file", {"readOnlyHint": True})
DOCS: Any = {"type": "mcp", "server_label": "docs", "require_approval": "never"}
BIG = "x" * 8000
"""What the tool answers: some 2,000 estimated tokens, past the threshold."""
THRESHOLD = 1000


def calling(index: int = 0) -> list[Delta]:
    return [
        ToolCallDelta(0, f"up_{index}", "docs__read", orjson.dumps({"path": "a"}).decode()),
        UsageReport(Usage(20, 2)),
        Finish("tool_calls"),
    ]


SUMMARY: list[Delta] = [TextDelta("the summary"), UsageReport(Usage(30, 3)), Finish("stop")]
ANSWER: list[Delta] = [TextDelta("answered"), UsageReport(Usage(5, 1)), Finish("stop")]


def user(text: str) -> dict[str, Any]:
    return {"type": "message", "role": "user", "content": [{"type": "input_text", "text": text}]}


async def read(arguments: Mapping[str, Any]) -> str:
    return BIG


def build(backend: RoundsBackend, store: MemoryStore | None = None) -> Gateway:
    store = store or MemoryStore()
    tools = GatewayTools(
        mcp=FakeMcp({"docs": [READ]}, {"read": read}),
        servers={"docs": ConfiguredServer(McpServer("docs", "http://docs.test/mcp"))},
    )
    router = Router([BackendEntry(backend, {}, catch_all=True)])
    loop = Loop(store, tools=tools, sealer=SEALER)
    return Gateway(store, router, loop, RunRegistry(), sealer=SEALER)


def command(
    threshold: int | None = THRESHOLD, *, stream: bool = False, store: bool = True, **fields: Any
) -> CreateResponse:
    entries = [{"type": "compaction", "compact_threshold": threshold}]
    settings = GenerationSettings(tools=[DOCS], context_management=entries, **fields)
    return CreateResponse("m", [user("read a")], stream=stream, store=store, settings=settings)


def is_summary_call(request: InferenceRequest) -> bool:
    last = request.items[-1]
    return last.get("role") == "user" and last["content"][0]["text"] == SUMMARY_PROMPT


async def executed(backend: RoundsBackend, **fields: Any) -> Run:
    run = await build(backend).execute(Principal(), command(**fields))
    await run.wait()
    return run


@pytest.mark.parametrize("stream", [False, True])
@pytest.mark.parametrize("store", [True, False])
async def test_a_later_round_past_the_threshold_compacts_first(stream: bool, store: bool) -> None:
    backend = RoundsBackend([calling(), SUMMARY, ANSWER])
    run = await executed(backend, stream=stream, store=store)
    state = run.state
    assert state.status == "completed", state.error
    types = [item["type"] for item in state.output]
    assert types == ["mcp_list_tools", "mcp_call", "compaction", "message"]
    first, summarized, answered = backend.requests
    assert not is_summary_call(first)
    assert is_summary_call(summarized)
    # the summary is of what the round would have been sent: the call and its output too
    assert BIG in str(summarized.items)
    # the round after it goes on from the summary alone: the user's message, the summary
    texts = [item["content"][0]["text"] for item in answered.items if item["type"] == "message"]
    assert texts == ["read a", SUMMARY_PREFIX + "the summary"]
    assert BIG not in str(answered.items)
    assert state.usage == Usage(55, 6)  # every call's, the summary's too


async def test_its_item_is_announced_where_it_is_made() -> None:
    """After the tool's call is done, before the next round's output: added (whole, with
    its seal), compacting, done, at its output index."""
    backend = RoundsBackend([calling(), SUMMARY, ANSWER])
    run = await executed(backend, stream=True)
    item = run.state.output[2]
    kinds = [type(event).__name__ for event in run.events]
    at = kinds.index("Compacting")
    assert run.events[at - 1] == ev.ItemAdded(2, item)
    assert run.events[at] == ev.Compacting(2, item["id"])
    assert run.events[at + 1] == ev.ItemDone(2, item)
    done_before = [e for e in run.events[: at - 1] if isinstance(e, ev.ItemDone)]
    assert [e.output_index for e in done_before] == [0, 1]  # the list and the call, done
    added_after = [e for e in run.events[at + 2 :] if isinstance(e, ev.ItemAdded)]
    assert [e.output_index for e in added_after] == [3]


async def test_below_the_threshold_the_loop_goes_on_uncompacted() -> None:
    backend = RoundsBackend([calling(), ANSWER])
    run = await executed(backend, threshold=100_000)
    assert [item["type"] for item in run.state.output] == ["mcp_list_tools", "mcp_call", "message"]
    assert not any(is_summary_call(r) for r in backend.requests)


async def test_a_response_compacts_once_however_often_its_loop_crosses_again() -> None:
    """The first crossing compacts; the rounds after it grow past the threshold again
    without another compaction (one ``compaction`` item per response)."""
    backend = RoundsBackend([calling(0), SUMMARY, calling(1), calling(2), ANSWER])
    run = await executed(backend)
    types = [item["type"] for item in run.state.output]
    assert types == [
        "mcp_list_tools",
        "mcp_call",
        "compaction",
        "mcp_call",
        "mcp_call",
        "message",
    ]
    assert sum(is_summary_call(r) for r in backend.requests) == 1
    last = backend.requests[-1]
    # the rounds after the compaction send what followed it: both later calls' outputs
    assert str(last.items).count(BIG) == 2


async def test_a_response_compacted_as_it_started_does_not_compact_again() -> None:
    backend = RoundsBackend([SUMMARY, calling(), ANSWER])
    run = await executed(backend, threshold=1)
    types = [item["type"] for item in run.state.output]
    assert types == ["mcp_list_tools", "compaction", "mcp_call", "message"]
    assert sum(is_summary_call(r) for r in backend.requests) == 1


async def test_the_summary_does_not_count_against_max_output_tokens() -> None:
    backend = RoundsBackend([calling(), SUMMARY, ANSWER])
    run = await executed(backend, max_output_tokens=100)
    assert run.state.status == "completed"
    assert backend.requests[-1].settings.max_output_tokens == 98  # less the first round's 2


async def test_a_summary_that_fails_fails_the_response_after_its_tools() -> None:
    """As a compaction that fails as the response starts fails it: the summary's error is
    the response's, the tools' items kept, no round asked after it."""
    empty = [TextDelta("  "), Finish("stop")]
    backend = RoundsBackend([calling(), empty, ANSWER])
    store = MemoryStore()
    run = await build(backend, store).execute(Principal(), command())
    await run.wait()
    state = run.state
    assert state.status == "failed"
    assert state.error is not None
    assert state.error["code"] == "empty_summary"
    assert [item["type"] for item in state.output] == ["mcp_list_tools", "mcp_call"]
    assert len(backend.requests) == 2
    stored = await store.get("default", state.id)
    assert stored is not None
    assert stored.status == "failed"


async def test_messages_autocompact_checks_only_as_the_response_starts() -> None:
    """A Messages client sends a ``compaction`` block back as its conversation's first
    block: one amid the content of an answer would be refused on the next turn."""
    backend = RoundsBackend([calling(), ANSWER])
    entries = [{"type": "compaction", "compact_threshold": THRESHOLD}]
    entries[0]["pause_after_compaction"] = False
    settings = GenerationSettings(tools=[DOCS], context_management=entries)
    run = await build(backend).execute(
        Principal(), CreateResponse("m", [user("hi")], settings=settings)
    )
    await run.wait()
    assert [item["type"] for item in run.state.output] == ["mcp_list_tools", "mcp_call", "message"]


class HeldSummary(RoundsBackend):
    """Holds the summary call until cancelled (a slow summarizer)."""

    def __init__(self) -> None:
        super().__init__([calling(), SUMMARY, ANSWER])
        self.summarizing = asyncio.Event()
        self.summary_closed = False

    async def infer(self, request: InferenceRequest) -> AsyncGenerator[Delta, None]:
        if not is_summary_call(request):
            async for delta in super().infer(request):
                yield delta
            return
        self.requests.append(request)
        self.summarizing.set()
        try:
            await asyncio.Event().wait()
        finally:
            self.summary_closed = True
        yield TextDelta("never")  # pragma: no cover


@pytest.mark.parametrize(
    ("reason", "status"),
    [
        (CancelReason.CLIENT_GONE, "incomplete"),
        (CancelReason.CANCELLED, "cancelled"),
        (CancelReason.INTERRUPTED, "incomplete"),
        (CancelReason.SHUTTING_DOWN, "failed"),
    ],
)
async def test_cancelled_while_compacting_ends_without_its_item(
    reason: CancelReason, status: str
) -> None:
    """A cancel (or a client going away) during the mid-loop summary closes its upstream
    call and ends the response as any cancel does, with what it had made: no compaction
    item, and stored so."""
    backend = HeldSummary()
    store = MemoryStore()
    gateway = build(backend, store)
    run = await gateway.execute(Principal(), command(stream=True))
    await asyncio.wait_for(backend.summarizing.wait(), 5)
    run.cancel(reason)
    await asyncio.wait_for(run.wait(), 5)
    assert backend.summary_closed
    state = run.state
    assert state.status == status
    assert "compaction" not in [item["type"] for item in state.output]
    assert not any(isinstance(e, ev.Compacting) for e in run.events)
    stored = await store.get("default", state.id)
    assert stored is not None
    assert stored.status == state.status
    assert [item["type"] for item in stored.output_items] == ["mcp_list_tools", "mcp_call"]
