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
from stateway.core.commands import CreateResponse, GetResponse
from stateway.core.compaction.prompt import SUMMARY_PREFIX, SUMMARY_PROMPT
from stateway.core.gateway import Gateway
from stateway.core.generation_settings import GenerationSettings
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
from stateway.core.routing import BackendEntry, Candidate, Capabilities, Route, Router
from stateway.core.run_registry import RunRegistry
from stateway.core.runs import CancelReason, Run
from stateway.core.token_estimate import estimate_context
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


def build(
    backend: RoundsBackend, store: MemoryStore | None = None, router: Router | None = None
) -> Gateway:
    store = store or MemoryStore()
    tools = GatewayTools(
        mcp=FakeMcp({"docs": [READ]}, {"read": read}),
        servers={"docs": ConfiguredServer(McpServer("docs", "http://docs.test/mcp"))},
    )
    router = router or Router([BackendEntry(backend, {}, catch_all=True)])
    loop = Loop(store, tools=tools, sealer=SEALER)
    return Gateway(store, router, loop, RunRegistry(), sealer=SEALER)


def command(
    threshold: int | None = THRESHOLD,
    *,
    stream: bool = False,
    store: bool = True,
    instructions: str | None = None,
    **fields: Any,
) -> CreateResponse:
    entries = [{"type": "compaction", "compact_threshold": threshold}]
    settings = GenerationSettings(tools=[DOCS], context_management=entries, **fields)
    return CreateResponse(
        "m",
        [user("read a")],
        instructions=instructions,
        stream=stream,
        store=store,
        settings=settings,
    )


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


INSTRUCTIONS = "Answer from the files you read. " * 40
"""Instructions of some 300 estimated tokens: what a round sends, counted as its context is."""


@pytest.mark.parametrize(("above", "compacted"), [(0, True), (1, False)])
async def test_the_threshold_is_reached_by_all_a_round_sends(above: int, compacted: bool) -> None:
    """The threshold is met (at least it) by what the later round would send as a whole:
    its context and the output so far, with the response's instructions and declared
    tools, as the check before the first round counts them."""
    measured = RoundsBackend([calling(), ANSWER])
    await executed(measured, threshold=100_000, instructions=INSTRUCTIONS)
    sent = measured.requests[1]
    assert sent.instructions == INSTRUCTIONS
    size = estimate_context(INSTRUCTIONS, sent.items, [DOCS])
    backend = RoundsBackend([calling(), SUMMARY, ANSWER])
    run = await executed(backend, threshold=size + above, instructions=INSTRUCTIONS)
    assert run.state.status == "completed", run.state.error
    types = [item["type"] for item in run.state.output]
    assert ("compaction" in types) is compacted
    assert sum(is_summary_call(r) for r in backend.requests) == int(compacted)


def windowed(backend: RoundsBackend, windows: tuple[int, ...]) -> Router:
    """A route ``m`` of one candidate per window, all on ``backend``, tried in order."""
    candidates = tuple(
        Candidate(backend, f"m{at}", priority=at, capabilities=Capabilities(context_window=w))
        for at, w in enumerate(windows)
    )
    return Router(routes=[Route("m", candidates)])


@pytest.mark.parametrize("windows", [(100_000,), (100_000, 50_000)], ids=["one", "two"])
async def test_a_fitted_context_still_compacts_between_rounds(windows: tuple[int, ...]) -> None:
    """``truncation: "auto"`` fits each round to the window (of the candidate tried, when
    they differ) and the threshold is still checked between the rounds."""
    backend = RoundsBackend([calling(), SUMMARY, ANSWER])
    gateway = build(backend, router=windowed(backend, windows))
    run = await gateway.execute(Principal(), command(truncation="auto"))
    await run.wait()
    assert run.state.status == "completed", run.state.error
    types = [item["type"] for item in run.state.output]
    assert types == ["mcp_list_tools", "mcp_call", "compaction", "message"]
    assert BIG not in str(backend.requests[-1].items)


async def test_the_summary_does_not_count_against_max_output_tokens_in_later_rounds() -> None:
    """Every round after the compaction is asked for what the answer's rounds left: the
    first round's 2 tokens and the next one's 2, not the summary's 3."""
    backend = RoundsBackend([calling(0), SUMMARY, calling(1), ANSWER])
    run = await executed(backend, max_output_tokens=100)
    assert run.state.status == "completed"
    asked = [r.settings.max_output_tokens for r in backend.requests if not is_summary_call(r)]
    assert asked == [100, 98, 96]


async def test_the_rounds_after_the_compaction_send_only_what_followed_it() -> None:
    """The compaction follows a round of two calls: both are in the summary, and the
    rounds after it send neither again, only the later call's output."""
    both = [
        ToolCallDelta(0, "up_0", "docs__read", '{"path": "a"}'),
        ToolCallDelta(1, "up_1", "docs__read", '{"path": "b"}'),
        UsageReport(Usage(20, 2)),
        Finish("tool_calls"),
    ]
    backend = RoundsBackend([both, SUMMARY, calling(2), ANSWER])
    run = await executed(backend)
    types = [item["type"] for item in run.state.output]
    assert types == ["mcp_list_tools", "mcp_call", "mcp_call", "compaction", "mcp_call", "message"]
    last = backend.requests[-1].items
    assert str(last).count(BIG) == 1
    # the summary stands for the compaction item: it is not sent again among the output
    assert [item["type"] for item in last] == ["message", "message", "mcp_call"]


class HeldAfterSummary(RoundsBackend):
    """Holds the round after the summary until released."""

    def __init__(self) -> None:
        super().__init__([calling(), SUMMARY, ANSWER])
        self.held = asyncio.Event()
        self.release = asyncio.Event()

    async def infer(self, request: InferenceRequest) -> AsyncGenerator[Delta, None]:
        if len(self.requests) == 2:  # the round after the summary
            self.held.set()
            await self.release.wait()
        async for delta in super().infer(request):
            yield delta


async def test_a_response_read_while_it_goes_on_from_the_summary_shows_its_usage() -> None:
    """Read (a stream stored as it runs) between the compaction and the next round's end,
    the response's usage is what it used so far, the summary's included."""
    backend = HeldAfterSummary()
    gateway = build(backend)
    run = await gateway.execute(Principal(), command(stream=True))
    await asyncio.wait_for(backend.held.wait(), 5)
    polled = await gateway.execute(Principal(), GetResponse(run.id))
    assert polled.status == "in_progress"
    assert [item["type"] for item in polled.output][-1] == "compaction"
    assert polled.usage == Usage(50, 5)
    backend.release.set()
    await asyncio.wait_for(run.wait(), 5)
    assert run.state.usage == Usage(55, 6)
