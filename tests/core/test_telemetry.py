"""What the core tells its Telemetry: each run's end (tenant, requested model, summed
usage, attempts, time to first output), each gateway tool call's kind and outcome, a
relayed answer's usage, and spans around rounds, attempts and tool calls."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Iterator, Mapping
from contextlib import AbstractContextManager, contextmanager
from typing import Any

import orjson
import pytest

from stateway.core.backend import Backend
from stateway.core.commands import CompactResponse, CreateResponse, ForwardChat
from stateway.core.errors import UpstreamError, UpstreamUnavailable
from stateway.core.gateway import Gateway
from stateway.core.generation_settings import GenerationSettings
from stateway.core.inference import Answered, Finish, InferenceRequest, TextDelta, UsageReport
from stateway.core.loop import Loop
from stateway.core.principal import Principal
from stateway.core.routing import BackendEntry, Router
from stateway.core.run_registry import RunRegistry
from stateway.core.telemetry import AttemptSpan, Attribute, RunReport, Span, ToolCall, ToolOutcome
from stateway.core.tools.ports import SearchHit
from stateway.core.tools.toolset import ConfiguredServer, GatewayTools, ToolPolicy
from stateway.core.usage import Usage
from tests.core.compaction.test_service import ANSWER, SEALER, SUMMARY, user
from tests.core.fakes import FakeSearch, MemoryStore, RoundsBackend, ScriptedBackend
from tests.core.tools.test_tool_loop import DOCS, MCP_TOOL, answer, call, fake_mcp, tools_round


class Recorded:
    recording = True

    def __init__(self, name: str, attributes: Mapping[str, Any]) -> None:
        self.name = name
        self.attributes = dict(attributes)
        self.answers: list[tuple[str, Usage | None, Answered | None]] = []
        self.error: str | None = None
        """The class of the exception that left the span's block, if any."""

    def set(self, key: str, value: Attribute) -> None:
        self.attributes[key] = value

    def failed(self, error_type: str) -> None:
        self.attributes["error.type"] = error_type

    def answered(self, reason: str, usage: Usage | None, noted: Answered | None) -> None:
        self.answers.append((reason, usage, noted))


class Recording:
    """A Telemetry that keeps everything it is told."""

    def __init__(self) -> None:
        self.reports: list[RunReport] = []
        self.tools: list[tuple[str, ToolOutcome]] = []
        self.spans: list[Recorded] = []

    @contextmanager
    def _span(self, name: str, attributes: Mapping[str, Any]) -> Iterator[Recorded]:
        recorded = Recorded(name, attributes)
        self.spans.append(recorded)
        try:
            yield recorded
        except BaseException as exc:
            recorded.error = type(exc).__name__
            raise

    def round(self, number: int) -> AbstractContextManager[Span]:
        return self._span("round", {"number": number})

    def attempt(
        self, backend: Backend, request: InferenceRequest
    ) -> AbstractContextManager[AttemptSpan]:
        return self._span("attempt", {"backend": backend.name, "model": request.model})

    def tool_call(self, call: ToolCall) -> AbstractContextManager[Span]:
        fields = {"kind": call.kind, "label": call.label, "name": call.name, "id": call.call_id}
        return self._span("tool_call", fields)

    def tool_called(self, tool: str, outcome: ToolOutcome) -> None:
        self.tools.append((tool, outcome))

    def run_ended(self, report: RunReport) -> None:
        self.reports.append(report)


def gateway(backend: Any, telemetry: Recording, tools: GatewayTools | None = None) -> Gateway:
    store = MemoryStore()
    router = Router([BackendEntry(backend, {}, catch_all=True)])
    loop = Loop(store, tools=tools, telemetry=telemetry)
    return Gateway(store, router, loop, RunRegistry(), telemetry=telemetry)


async def _create(gw: Gateway, model: str, tools: list[dict[str, Any]] | None) -> Any:
    user = {"type": "message", "role": "user", "content": [{"type": "input_text", "text": "hi"}]}
    command = CreateResponse(model, [user], settings=GenerationSettings(tools=tools or []))
    run = await gw.execute(Principal(tenant_id="acme"), command)
    await run.wait()
    return run


async def test_a_run_reports_its_tenant_model_usage_attempts_and_first_output() -> None:
    telemetry = Recording()
    rounds = [tools_round(call("web_search", {"query": "q"})), answer()]
    tools = GatewayTools(search=FakeSearch([SearchHit("t", "https://x.test", "s")]))
    run = await _create(
        gateway(RoundsBackend(rounds), telemetry, tools), "alias", [{"type": "web_search"}]
    )
    assert run.state.status == "completed"
    [report] = telemetry.reports
    assert (report.tenant_id, report.model) == ("acme", "alias")
    assert report.usage == Usage(8, 3)  # both rounds, summed
    assert [(a["backend"], a["outcome"]) for a in report.attempts] == [
        ("scripted", "ok"),
        ("scripted", "ok"),
    ]
    assert report.first_output is not None
    assert report.first_output >= 0
    assert telemetry.tools == [("web_search", "ok")]
    assert [s.name for s in telemetry.spans] == [
        "round",
        "attempt",
        "tool_call",
        "round",
        "attempt",
    ]
    assert [s.attributes.get("number") for s in telemetry.spans[::3]] == [1, 2]
    tool_call = telemetry.spans[2].attributes
    assert str(tool_call.pop("id")).startswith("ws_")  # the web_search_call item's
    assert tool_call == {
        "kind": "web_search",
        "label": "web search",
        "name": "",
        "stateway.outcome": "ok",
    }
    first, second = telemetry.spans[1], telemetry.spans[4]
    assert first.attributes == {"backend": "scripted", "model": "alias"}
    [(reason, usage, answered)] = first.answers
    assert reason == "tool_calls"
    assert usage == Usage(3, 2)
    assert answered == Answered()  # the scripted backend notes nothing
    assert [(reason, usage) for reason, usage, _ in second.answers] == [("stop", Usage(5, 1))]


async def test_a_run_that_failed_before_output_reports_no_first_output() -> None:
    telemetry = Recording()
    backend = ScriptedBackend([UpstreamUnavailable("down")])
    run = await _create(gateway(backend, telemetry), "m", None)
    assert run.state.status == "failed"
    [report] = telemetry.reports
    assert report.first_output is None
    assert [(a["backend"], a["outcome"]) for a in report.attempts] == [("scripted", "failed")]
    [attempt] = [s for s in telemetry.spans if s.name == "attempt"]
    assert attempt.answers == []  # no answer ended: nothing told


async def test_tool_calls_are_told_by_kind_and_outcome() -> None:
    telemetry = Recording()
    rounds = [
        tools_round(
            call("docs__add", {"a": 1, "b": 2}, 0),
            call("docs__boom", {}, 1),
            call("docs__slow", {"seconds": 30}, 2),
        ),
        answer(),
    ]
    tools = GatewayTools(
        mcp=fake_mcp(), servers={"docs": ConfiguredServer(DOCS)}, policy=ToolPolicy(timeout=0.5)
    )
    await _create(gateway(RoundsBackend(rounds), telemetry, tools), "m", [MCP_TOOL])
    assert sorted(telemetry.tools) == [
        ("mcp", "error"),
        ("mcp", "ok"),
        ("mcp", "timeout"),
        ("mcp_list_tools", "ok"),
    ]
    calls = [s.attributes for s in telemetry.spans if s.name == "tool_call"]
    told = sorted((c["kind"], c["name"], c["stateway.outcome"], c.get("error.type")) for c in calls)
    assert told == [
        ("mcp", "add", "ok", None),
        ("mcp", "boom", "error", "execution"),
        ("mcp", "slow", "timeout", "timeout"),
        ("mcp_list_tools", "", "ok", None),
    ]
    assert sorted(str(c["id"]).split("_")[0] for c in calls) == ["mcp", "mcp", "mcp", "mcpl"]


async def test_a_refused_call_and_a_tool_search_are_told_by_what_they_called() -> None:
    """A call of a declared server's tool the request does not offer fails without running,
    and a gateway tool search runs in the gateway: each span still names its tool (the
    server's tool by its own name) and its item, and each is counted by its kind."""
    telemetry = Recording()
    rounds = [
        tools_round(call("docs__boom", {}, 0), call("tool_search", {"query": "weather"}, 1)),
        answer(),
    ]
    tools = GatewayTools(mcp=fake_mcp(), servers={"docs": ConfiguredServer(DOCS)})
    weather = {"type": "function", "name": "get_weather", "defer_loading": True}
    narrowed = {**MCP_TOOL, "allowed_tools": ["add"]}
    run = await _create(
        gateway(RoundsBackend(rounds), telemetry, tools),
        "m",
        [narrowed, weather, {"type": "tool_search"}],
    )
    refused = next(i for i in run.state.output if i["type"] == "mcp_call")
    searched = next(i for i in run.state.output if i["type"] == "tool_search_call")
    assert refused["error"]["code"] == -32602
    assert sorted(telemetry.tools) == [
        ("mcp", "error"),
        ("mcp_list_tools", "ok"),
        ("tool_search", "ok"),
    ]
    calls = {s.attributes["kind"]: s.attributes for s in telemetry.spans if s.name == "tool_call"}
    assert calls["mcp"] == {
        "kind": "mcp",
        "label": "docs.boom",
        "name": "boom",
        "id": refused["id"],
        "stateway.outcome": "error",
        "error.type": "protocol",
    }
    assert calls["tool_search"] == {
        "kind": "tool_search",
        "label": "tool search",
        "name": "",
        "id": searched["id"],
        "stateway.outcome": "ok",
    }


class UsageRelay:
    status = 200
    headers: Mapping[str, str] = {}
    whole = False

    def __init__(self, cut: bool = False) -> None:
        self._cut = cut

    async def chunks(self) -> AsyncIterator[bytes]:
        yield b"{}"
        if self._cut:
            raise UpstreamError("The model server 'scripted' closed the stream before finishing.")

    def usage(self) -> Usage | None:
        return Usage(7, 4)

    def output_estimate(self) -> int:
        return 0

    def failure(self) -> None:
        return None

    async def aclose(self) -> None:
        pass


class Forwarding(ScriptedBackend):
    def __init__(self, *args: Any, relay: UsageRelay | None = None, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.relay = relay or UsageRelay()

    async def forward_chat(self, body: bytes, fields: Mapping[str, Any]) -> UsageRelay:
        return self.relay


class Unreachable(ScriptedBackend):
    async def forward_chat(self, body: bytes, fields: Mapping[str, Any]) -> UsageRelay:
        raise UpstreamUnavailable("The model server 'scripted' is unreachable.")


async def _forward(gw: Gateway) -> Any:
    fields = {"model": "fast", "messages": [{"role": "user", "content": "hi"}]}

    async def translate() -> Any:
        raise AssertionError("forwarded, not translated")

    return await gw.execute(
        Principal(tenant_id="acme"), ForwardChat("fast", orjson.dumps(fields), fields, translate)
    )


async def test_a_relayed_answer_reports_its_usage_once_closed() -> None:
    telemetry = Recording()
    gw = gateway(Forwarding([TextDelta("x"), Finish("stop"), UsageReport(Usage(1, 1))]), telemetry)
    relay = await _forward(gw)
    assert [chunk async for chunk in relay.chunks()] == [b"{}"]
    assert telemetry.reports == []
    await relay.aclose()
    await relay.aclose()  # told once
    [report] = telemetry.reports
    assert (report.tenant_id, report.model, report.usage) == ("acme", "fast", Usage(7, 4))
    assert [(a["backend"], a["outcome"]) for a in report.attempts] == [("scripted", "ok")]


async def test_a_relayed_answer_cut_part_way_reports_a_cut_attempt() -> None:
    telemetry = Recording()
    gw = gateway(Forwarding([], relay=UsageRelay(cut=True)), telemetry)
    relay = await _forward(gw)
    chunks = relay.chunks()
    assert await anext(chunks) == b"{}"
    with pytest.raises(UpstreamError):
        await anext(chunks)
    await relay.aclose()
    [report] = telemetry.reports
    assert [(a["backend"], a["outcome"]) for a in report.attempts] == [("scripted", "cut")]


async def test_a_relayed_answer_closed_before_its_end_reports_a_cancelled_attempt() -> None:
    telemetry = Recording()  # the client left: the route closes the relay unread
    gw = gateway(Forwarding([]), telemetry)
    relay = await _forward(gw)
    await relay.aclose()
    [report] = telemetry.reports
    assert [(a["backend"], a["outcome"]) for a in report.attempts] == [("scripted", "cancelled")]


async def test_a_forward_that_got_no_answer_reports_a_failed_attempt() -> None:
    telemetry = Recording()
    gw = gateway(Unreachable([]), telemetry)
    with pytest.raises(UpstreamUnavailable):
        await _forward(gw)
    [report] = telemetry.reports
    assert (report.tenant_id, report.model, report.usage) == ("acme", "fast", None)
    assert [(a["backend"], a["outcome"]) for a in report.attempts] == [("scripted", "failed")]


class Unanswering(ScriptedBackend):
    """Sends no status line until the client has left."""

    async def forward_chat(self, body: bytes, fields: Mapping[str, Any]) -> UsageRelay:
        self.started.set()
        await asyncio.Event().wait()
        raise AssertionError("never answered")


async def test_a_forward_left_before_its_answer_reports_a_cancelled_attempt() -> None:
    telemetry = Recording()
    backend = Unanswering([])
    gw = gateway(backend, telemetry)
    caller = asyncio.create_task(_forward(gw))
    await backend.started.wait()
    caller.cancel()
    with pytest.raises(asyncio.CancelledError):
        await caller
    [report] = telemetry.reports
    assert (report.tenant_id, report.model, report.usage) == ("acme", "fast", None)
    assert [(a["backend"], a["outcome"]) for a in report.attempts] == [("scripted", "cancelled")]
    assert gw.generations.current.leases == 0


async def test_a_compaction_reports_the_summary_tokens() -> None:
    telemetry = Recording()
    store = MemoryStore()
    router = Router([BackendEntry(ScriptedBackend(SUMMARY), {}, catch_all=True)])
    loop = Loop(store, sealer=SEALER)
    gw = Gateway(store, router, loop, RunRegistry(), sealer=SEALER, telemetry=telemetry)
    await gw.execute(Principal(tenant_id="acme"), CompactResponse("m", [user("one")]))
    [report] = telemetry.reports
    assert (report.tenant_id, report.model, report.usage) == ("acme", "m", Usage(10, 3))


async def test_a_compactions_summary_call_is_an_attempt_span() -> None:
    """The summary call is a model call like a round's: a trace shows it, its tokens told,
    whether the compaction is asked of ``/responses/compact`` or made by a run."""
    telemetry = Recording()
    store = MemoryStore()
    backend = RoundsBackend([SUMMARY, ANSWER])
    router = Router([BackendEntry(backend, {}, catch_all=True)])
    loop = Loop(store, sealer=SEALER, telemetry=telemetry)
    gw = Gateway(store, router, loop, RunRegistry(), sealer=SEALER, telemetry=telemetry)
    await gw.execute(Principal(tenant_id="acme"), CompactResponse("m", [user("one")]))
    [summary] = telemetry.spans
    assert (summary.name, summary.attributes) == ("attempt", {"backend": "scripted", "model": "m"})
    assert [(reason, usage) for reason, usage, _ in summary.answers] == [("stop", Usage(10, 3))]
    telemetry.spans.clear()
    backend.requests.clear()
    trigger = [user("one"), {"type": "compaction_trigger"}]  # a run compacting, alone
    run = await gw.execute(Principal(tenant_id="acme"), CreateResponse("m", trigger))
    await run.wait()
    assert [i["type"] for i in run.state.output] == ["compaction"]
    [summary] = telemetry.spans
    assert summary.name == "attempt"
    assert [(reason, usage) for reason, usage, _ in summary.answers] == [("stop", Usage(10, 3))]


async def test_a_failed_summary_call_is_a_span_the_error_leaves() -> None:
    telemetry = Recording()
    store = MemoryStore()
    failing = ScriptedBackend([UpstreamUnavailable("down")])
    router = Router([BackendEntry(failing, {}, catch_all=True)])
    loop = Loop(store, sealer=SEALER, telemetry=telemetry)
    gw = Gateway(store, router, loop, RunRegistry(), sealer=SEALER, telemetry=telemetry)
    with pytest.raises(UpstreamUnavailable):
        await gw.execute(Principal(tenant_id="acme"), CompactResponse("m", [user("one")]))
    assert [(s.name, s.error) for s in telemetry.spans] == [("attempt", "UpstreamUnavailable")]
    assert telemetry.spans[0].answers == []


class NotingBackend(ScriptedBackend):
    """Notes the upstream's id and model of its answer, as a real backend does, where a
    span asks for them."""

    async def infer(self, request: InferenceRequest) -> AsyncIterator[Any]:
        if request.answered is not None:
            request.answered.note("resp_summary", "m-2026")
        async for delta in super().infer(request):
            yield delta


async def test_a_summary_calls_span_is_told_its_answers_id_model_and_ending() -> None:
    telemetry = Recording()
    store = MemoryStore()
    cut_short = [TextDelta("the summary"), UsageReport(Usage(10, 3)), Finish("length")]
    router = Router([BackendEntry(NotingBackend(cut_short), {}, catch_all=True)])
    gw = Gateway(store, router, Loop(store), RunRegistry(), sealer=SEALER, telemetry=telemetry)

    await gw.execute(Principal(tenant_id="acme"), CompactResponse("m", [user("one")]))

    [summary] = telemetry.spans
    assert summary.answers == [("length", Usage(10, 3), Answered("resp_summary", "m-2026"))]


async def test_without_a_recording_span_a_summary_call_asks_for_no_answer_notes() -> None:
    store = MemoryStore()
    backend = ScriptedBackend(SUMMARY)
    router = Router([BackendEntry(backend, {}, catch_all=True)])
    gw = Gateway(store, router, Loop(store), RunRegistry(), sealer=SEALER)

    await gw.execute(Principal(tenant_id="acme"), CompactResponse("m", [user("one")]))

    [request] = backend.requests
    assert request.answered is None


async def test_an_empty_summary_is_an_upstream_error_naming_the_server() -> None:
    store = MemoryStore()
    router = Router(
        [BackendEntry(ScriptedBackend([TextDelta("  "), Finish("stop")]), {}, catch_all=True)]
    )
    gw = Gateway(store, router, Loop(store), RunRegistry(), sealer=SEALER)

    with pytest.raises(UpstreamError) as raised:
        await gw.execute(Principal(tenant_id="acme"), CompactResponse("m", [user("one")]))

    assert (raised.value.code, raised.value.message) == (
        "empty_summary",
        "The model server 'scripted' answered the compaction request without a summary.",
    )
