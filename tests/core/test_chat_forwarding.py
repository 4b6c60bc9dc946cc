"""``ForwardChat`` in the core: forwarded untouched to a Chat Completions upstream without
gateway tools, translated otherwise; a route's ``gateway_tools`` offered in hidden rounds
to clients that cannot declare them, and only to those; a relayed answer's failures and
successes on its candidate's circuit, as a translated request's."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Mapping
from typing import Any

import orjson
import pytest

from stateway.core.commands import CreateResponse, ForwardChat
from stateway.core.errors import (
    GatewayError,
    InvalidRequest,
    Overloaded,
    ServerShuttingDown,
    UpstreamError,
    UpstreamRejected,
    UpstreamTimeout,
    UpstreamUnavailable,
)
from stateway.core.forwarding import takes_tools
from stateway.core.gateway import Gateway
from stateway.core.generation_settings import GenerationSettings
from stateway.core.generations import HeldRelay
from stateway.core.inference import Delta, Finish, TextDelta, ToolCallDelta, UsageReport
from stateway.core.loop import Loop
from stateway.core.principal import Principal
from stateway.core.routing import BackendEntry, Router
from stateway.core.routing.health import HealthBoard
from stateway.core.run_registry import RunRegistry
from stateway.core.runs import CancelReason, Run
from stateway.core.tools.ports import McpTool
from stateway.core.tools.toolset import GatewayTools
from stateway.core.usage import Usage
from stateway.protocols.chat.encode import encode_completion
from tests.core.fakes import FakeMcp, MemoryStore, RoundsBackend, ScriptedBackend
from tests.core.routing_fakes import Named, candidate, route

ADD = McpTool("add", {"type": "object"}, "Add", {"readOnlyHint": True})
CALC = {
    "type": "mcp",
    "server_label": "calc",
    "server_url": "http://calc.test/mcp",
    "require_approval": "never",
}
ANSWER: list[Delta] = [TextDelta("done"), UsageReport(Usage(5, 1)), Finish("stop")]


class Relayed:
    status = 200
    headers: Mapping[str, str] = {}
    whole = False

    async def chunks(self) -> AsyncIterator[bytes]:
        yield b"{}"

    def usage(self) -> Usage | None:
        return None

    def output_estimate(self) -> int:
        return 0

    def failure(self) -> None:
        return None

    async def aclose(self) -> None:
        pass


class Forwarding(ScriptedBackend):
    def __init__(self) -> None:
        super().__init__(ANSWER)
        self.forwarded: list[bytes] = []

    async def forward_chat(self, body: bytes, fields: Mapping[str, Any]) -> Relayed:
        self.forwarded.append(body)
        return Relayed()


async def add(arguments: Mapping[str, Any]) -> str:
    return "5"


def gateway(backend: Any, *, models: dict[str, str] | None = None, calc: bool = False) -> Gateway:
    store = MemoryStore()
    tools = GatewayTools(mcp=FakeMcp({"calc": [ADD]}, {"add": add}))
    offered = tools.resolve([CALC], trusted=True) if calc else None
    entry = BackendEntry(backend, models or {}, catch_all=models is None, gateway_tools=offered)
    return Gateway(store, Router([entry]), Loop(store, tools=tools), RunRegistry())


def command(model: str = "m", *, hidden: bool = True) -> CreateResponse:
    user = {"type": "message", "role": "user", "content": [{"type": "input_text", "text": "hi"}]}
    return CreateResponse(
        model, [user], store=False, settings=GenerationSettings(), hidden_rounds=hidden
    )


def forward(fields: dict[str, Any], translated: CreateResponse | None = None) -> ForwardChat:
    async def translate() -> CreateResponse:
        if translated is None:
            raise InvalidRequest("not translatable here")
        return translated

    return ForwardChat(fields["model"], orjson.dumps(fields), fields, translate)


async def test_a_chat_upstream_gets_the_body_untouched() -> None:
    backend = Forwarding()
    fields = {"model": "m", "messages": [], "chat_template_kwargs": {"a": 1}}
    sent = forward(fields)
    served = gateway(backend)
    result = await served.execute(Principal(), sent)
    assert isinstance(result, HeldRelay)  # the relay holds its generation until closed
    assert [chunk async for chunk in result.chunks()] == [b"{}"]
    assert backend.forwarded == [sent.body]
    assert backend.requests == []
    assert served.generations.current.leases == 1
    await result.aclose()
    await result.aclose()  # a second close gives nothing back twice
    assert served.generations.current.leases == 0


async def test_a_renamed_model_is_replaced_in_the_forwarded_body() -> None:
    backend = Forwarding()
    fields = {"model": "public", "messages": [{"role": "user", "content": "x"}], "top_k": 3}
    await gateway(backend, models={"public": "upstream"}).execute(Principal(), forward(fields))
    assert orjson.loads(backend.forwarded[0]) == {**fields, "model": "upstream"}


NAMED = {"type": "function", "function": {"name": "get_time"}}


ALLOWED = {"type": "allowed_tools", "allowed_tools": {"mode": "auto", "tools": []}}
CUSTOM_TOOL = {"type": "custom", "custom": {"name": "run_sql"}}
FUNCTION_TOOL = {"type": "function", "function": {"name": "get_time"}}


@pytest.mark.parametrize("choice", ["auto", "required", None])
async def test_a_choice_naming_no_function_is_forwarded_whatever_the_server(choice: Any) -> None:
    backend = Forwarding()
    backend.takes_named_choice = False
    fields = {"model": "m", "messages": [], "tool_choice": choice}
    result = await gateway(backend).execute(Principal(), forward(fields))
    assert isinstance(result, HeldRelay)
    assert len(backend.forwarded) == 1
    await result.aclose()


async def test_a_named_choice_is_forwarded_to_a_server_known_to_force_it() -> None:
    backend = Forwarding()
    fields = {"model": "m", "messages": [], "tool_choice": NAMED}
    result = await gateway(backend).execute(Principal(), forward(fields, command()))
    assert isinstance(result, HeldRelay)
    assert backend.forwarded == [orjson.dumps(fields)]
    await result.aclose()


async def test_a_named_choice_is_translated_for_any_other_server() -> None:
    """The backend then sends the choice in a form its server forces (llama.cpp reads a
    named one as ``auto``): :mod:`stateway.backends.named_choice`."""
    backend = Forwarding()
    backend.takes_named_choice = False
    fields = {"model": "m", "messages": [], "tool_choice": NAMED}
    result = await gateway(backend).execute(Principal(), forward(fields, command()))
    assert isinstance(result, Run)
    await result.wait()
    assert backend.forwarded == []
    assert len(backend.requests) == 1


@pytest.mark.parametrize(
    "fields",
    [
        {"tools": [FUNCTION_TOOL, CUSTOM_TOOL]},
        {"tools": [CUSTOM_TOOL], "tool_choice": {"type": "custom", "custom": {"name": "run_sql"}}},
        {"tools": [FUNCTION_TOOL], "tool_choice": ALLOWED},
    ],
)
async def test_custom_tools_are_translated_for_a_server_taking_functions_alone(
    fields: dict[str, Any],
) -> None:
    """vLLM and llama.cpp refuse a custom tool: translated, it is offered as a function."""
    backend = Forwarding()
    backend.takes_custom_tools = False
    sent = {"model": "m", "messages": [], **fields}
    result = await gateway(backend).execute(Principal(), forward(sent, command()))
    assert isinstance(result, Run)
    await result.wait()
    assert backend.forwarded == []
    backend.takes_custom_tools = True  # hosted OpenAI's, its listing read
    relayed = await gateway(backend).execute(Principal(), forward(sent, command()))
    assert isinstance(relayed, HeldRelay)
    assert backend.forwarded == [orjson.dumps(sent)]
    await relayed.aclose()


@pytest.mark.parametrize(
    "tools", [[FUNCTION_TOOL], [], None, "junk", [None, {"type": 1}], [{"function": {}}]]
)
async def test_a_request_without_custom_tools_is_forwarded_whatever_the_server(
    tools: Any,
) -> None:
    """Its tools as vLLM takes them, or malformed: the server's to judge."""
    backend = Forwarding()
    backend.takes_custom_tools = backend.takes_named_choice = False
    fields = {"model": "m", "messages": [], "tools": tools, "tool_choice": {"type": ["x"]}}
    result = await gateway(backend).execute(Principal(), forward(fields))
    assert isinstance(result, HeldRelay)
    await result.aclose()


@pytest.mark.parametrize(
    ("fields", "taken"),
    [
        ({"tool_choice": {"type": "custom", "custom": {"name": "run_sql"}}}, False),
        ({"tools": [FUNCTION_TOOL], "tool_choice": ALLOWED}, False),
        ({"tools": 5}, True),
        ({"tools": {"type": "custom"}}, True),
    ],
    ids=["custom-choice-alone", "allowed-tools", "tools-a-number", "tools-an-object"],
)
def test_takes_tools_reads_the_choice_alone_and_leaves_malformed_tools_to_the_server(
    fields: dict[str, Any], taken: bool
) -> None:
    """A ``custom`` choice is judged by itself, without a custom tool beside it (one
    naming a tool not declared is the server's to refuse, as any); ``tools`` that are no
    list are never iterated."""
    backend = Forwarding()
    backend.takes_custom_tools = False
    assert takes_tools(fields, backend) is taken


async def test_an_upstream_that_cannot_forward_runs_the_translation() -> None:
    backend = ScriptedBackend(ANSWER)
    result = await gateway(backend).execute(Principal(), forward({"model": "m"}, command()))
    assert isinstance(result, Run)
    await result.wait()
    assert result.state.status == "completed"


async def test_a_translation_error_is_raised() -> None:
    with pytest.raises(InvalidRequest):
        await gateway(ScriptedBackend(ANSWER)).execute(Principal(), forward({"model": "m"}))


async def test_gateway_tools_turn_the_fast_path_off_and_run_in_hidden_rounds() -> None:
    backend = RoundsBackend(
        [
            [
                ToolCallDelta(0, "up_0", "calc__add", "{}"),
                Finish("tool_calls"),
                UsageReport(Usage(3, 2)),
            ],
            ANSWER,
        ]
    )
    chat = gateway(backend, calc=True)
    result = await chat.execute(Principal(), forward({"model": "m"}, command()))
    assert isinstance(result, Run)
    await result.wait()
    state = result.state
    assert [i["type"] for i in state.output] == ["mcp_list_tools", "mcp_call", "message"]
    assert [t["name"] for t in backend.requests[0].tools] == ["calc__add"]
    wire = encode_completion(state)
    assert wire["choices"][0]["message"] == {
        "role": "assistant",
        "content": "done",
        "refusal": None,
    }
    assert wire["choices"][0]["finish_reason"] == "stop"
    assert wire["usage"]["prompt_tokens"] == 8  # both rounds
    assert state.settings.tools == []  # offered, not echoed


async def test_a_failure_after_only_hidden_rounds_is_the_clients_error() -> None:
    """A client shown nothing yet (the gateway's items are hidden from it) is answered the
    failure itself, as an HTTP error, not a 200 whose output it cannot see."""
    backend = RoundsBackend(
        [[ToolCallDelta(0, "up_0", "calc__add", "{}"), Finish("tool_calls")], [UpstreamError("x")]]
    )
    run = await gateway(backend, calc=True).execute(Principal(), command())
    await run.wait()
    assert [i["type"] for i in run.state.output] == ["mcp_list_tools", "mcp_call"]
    assert run.state.status == "failed"
    assert isinstance(run.error, UpstreamError)
    assert run.error.status == 502


async def test_a_responses_client_is_not_offered_the_gateway_tools() -> None:
    backend = ScriptedBackend(ANSWER)
    run = await gateway(backend, calc=True).execute(Principal(), command(hidden=False))
    await run.wait()
    assert backend.requests[0].tools == []
    assert [i["type"] for i in run.state.output] == ["message"]


async def test_nothing_is_forwarded_while_shutting_down() -> None:
    chat = gateway(Forwarding())
    chat.runs.closing = True
    with pytest.raises(ServerShuttingDown):
        await chat.execute(Principal(), forward({"model": "m"}))


class Unending:
    """A relay whose body is one chunk, then nothing until it is closed: the read under
    way then fails as the upstream client's does."""

    status = 200
    headers: Mapping[str, str] = {"content-type": "text/event-stream"}
    whole = False

    def __init__(self) -> None:
        self.closed = asyncio.get_running_loop().create_future()

    async def chunks(self) -> AsyncIterator[bytes]:
        yield b"data: {}\n\n"
        await self.closed
        raise UpstreamError("connection closed")

    def usage(self) -> Usage | None:
        return None

    def output_estimate(self) -> int:
        return 0

    def failure(self) -> None:
        return None

    async def aclose(self) -> None:
        if not self.closed.done():
            self.closed.set_result(None)


class Waiting(ScriptedBackend):
    """Forwards to an upstream whose status line never comes (or ``relay``'s, when set)."""

    def __init__(self, relay: Unending | None = None) -> None:
        super().__init__(ANSWER)
        self.relay = relay
        self.asked = asyncio.Event()
        self.cancelled = False

    async def forward_chat(self, body: bytes, fields: Mapping[str, Any]) -> Unending:
        self.asked.set()
        if self.relay is not None:
            return self.relay
        try:
            await asyncio.Future()
        except asyncio.CancelledError:
            self.cancelled = True
            raise
        raise AssertionError("unreachable")


async def test_shutting_down_ends_a_relay_waiting_for_its_status_line() -> None:
    backend = Waiting()
    chat = gateway(backend)
    sent = asyncio.create_task(chat.execute(Principal(), forward({"model": "m"})))
    await backend.asked.wait()
    await chat.runs.end_all(CancelReason.SHUTTING_DOWN)
    assert sent.cancelling() == 1  # its wait for the status line is being cancelled
    with pytest.raises(ServerShuttingDown):
        await sent
    assert backend.cancelled  # the upstream request was given up
    assert not sent.cancelled()
    assert sent.cancelling() == 0
    assert chat.generations.current.leases == 0


async def test_shutting_down_ends_a_relay_part_way_closing_its_upstream() -> None:
    relay = Unending()
    chat = gateway(Waiting(relay))
    held = await chat.execute(Principal(), forward({"model": "m"}))
    assert isinstance(held, HeldRelay)
    chunks = held.chunks()
    assert await anext(chunks) == b"data: {}\n\n"
    reading = asyncio.create_task(anext(chunks))
    await asyncio.sleep(0)  # the read is under way
    await chat.runs.end_all(CancelReason.SHUTTING_DOWN)
    assert relay.closed.done()
    with pytest.raises(ServerShuttingDown):
        await reading
    await held.aclose()
    assert chat.generations.current.leases == 0


async def test_a_relay_closed_before_shutdown_is_not_ended() -> None:
    relay = Unending()
    chat = gateway(Waiting(relay))
    held = await chat.execute(Principal(), forward({"model": "m"}))
    assert isinstance(held, HeldRelay)
    await held.aclose()
    relay.closed = asyncio.get_running_loop().create_future()
    await chat.runs.end_all(CancelReason.SHUTTING_DOWN)
    assert not relay.closed.done()  # forgotten once closed


class Answer:
    """A relayed answer of ``status`` whose body is ``chunks`` (an error among them raised
    there), and the error its status means (``failure``)."""

    headers: Mapping[str, str] = {"content-type": "text/event-stream"}
    whole = False

    def __init__(
        self,
        status: int = 200,
        chunks: tuple[bytes | GatewayError, ...] = (b"data: {}\n\n",),
        failure: GatewayError | None = None,
    ) -> None:
        self.status = status
        self._chunks = chunks
        self._failure = failure

    async def chunks(self) -> AsyncIterator[bytes]:
        for chunk in self._chunks:
            if isinstance(chunk, GatewayError):
                raise chunk
            yield chunk

    def failure(self) -> GatewayError | None:
        return self._failure

    def usage(self) -> Usage | None:
        return None

    def output_estimate(self) -> int:
        return 0

    async def aclose(self) -> None:
        pass


class Answering(Named):
    """Forwards to an upstream answering ``answer`` each time (or failing with it)."""

    def __init__(self, answer: Answer | GatewayError) -> None:
        super().__init__("up")
        self.answer = answer

    async def forward_chat(self, body: bytes, fields: Mapping[str, Any]) -> Answer:
        if isinstance(self.answer, GatewayError):
            raise self.answer
        return self.answer


async def relay_once(chat: Gateway, model: str = "m") -> None:
    """One forwarded request, its answer read to its end (or its error), then closed."""
    try:
        held = await chat.execute(Principal(), forward({"model": model}))
    except GatewayError:
        return
    assert isinstance(held, HeldRelay)
    try:
        async for _ in held.chunks():
            pass
    except GatewayError:
        pass
    finally:
        await held.aclose()


def board_of(chat: Gateway) -> HealthBoard:
    return chat.generations.current.router.state.health


SERVERS_FAULT = [
    pytest.param(UpstreamUnavailable("unreachable"), id="unreachable"),
    pytest.param(UpstreamTimeout("no headers"), id="timed-out"),
    pytest.param(Answer(503, (b"busy",), UpstreamUnavailable("busy", status=503)), id="503"),
    pytest.param(Answer(500, (b"boom",), UpstreamError("boom")), id="500"),
    pytest.param(Answer(chunks=(UpstreamTimeout("no output"),)), id="no-output"),
    pytest.param(Answer(chunks=(UpstreamError("[DONE] alone"),)), id="no-answer"),
    pytest.param(Answer(chunks=(b"data: {}\n\n", UpstreamError("cut"))), id="cut"),
]


@pytest.mark.parametrize("answer", SERVERS_FAULT)
async def test_a_relays_failures_open_its_candidates_circuit(
    answer: Answer | GatewayError,
) -> None:
    """Counted as a translated request's failures are (:func:`.attempts.unhealthy`): a
    server unreachable or silent, an error status of its own, a stream failing before its
    output or part-way. A route of several candidates sharing this one then skips it."""
    chat = gateway(Answering(answer), models={"m": "up-model"})
    for _ in range(3):  # the default failure_threshold
        await relay_once(chat)
    assert board_of(chat).state("up/up-model") == "open"


async def test_a_relayed_success_closes_the_circuit_its_failures_opened() -> None:
    backend = Answering(UpstreamUnavailable("unreachable"))
    chat = gateway(backend, models={"m": "up-model"})
    for _ in range(3):
        await relay_once(chat)
    assert board_of(chat).state("up/up-model") == "open"
    backend.answer = Answer()
    await relay_once(chat)
    assert board_of(chat).state("up/up-model") == "closed"
    assert len(board_of(chat)) == 0


@pytest.mark.parametrize(
    "answer",
    [
        pytest.param(Overloaded("the gateway's queue is full"), id="gateway-queue-full"),
        pytest.param(Answer(400, (b"bad",), UpstreamRejected("bad")), id="400"),
        pytest.param(
            Answer(404, (b"no",), UpstreamRejected("no", status=404, code="model_not_found")),
            id="404",
        ),
        pytest.param(Answer(chunks=(UpstreamRejected("refused mid-stream"),)), id="refused"),
    ],
)
async def test_what_is_not_the_servers_fault_leaves_its_circuit_alone(
    answer: Answer | GatewayError,
) -> None:
    """The request's fault, the model missing from a server that is up, the gateway's own
    queue being full: none counts, as none counts for a translated request."""
    chat = gateway(Answering(answer), models={"m": "up-model"})
    for _ in range(3):
        await relay_once(chat)
    assert len(board_of(chat)) == 0


async def test_a_relay_whose_client_leaves_counts_neither_way() -> None:
    """A client leaving part-way says nothing of the server: the failures before it still
    count, and it adds none."""
    backend = Answering(UpstreamUnavailable("unreachable"))
    chat = gateway(backend, models={"m": "up-model"})
    await relay_once(chat)
    await relay_once(chat)
    backend.answer = Answer(chunks=(b"data: {}\n\n", b"data: {}\n\n"))
    held = await chat.execute(Principal(), forward({"model": "m"}))
    assert isinstance(held, HeldRelay)
    chunks = held.chunks()
    await anext(chunks)
    await chunks.aclose()  # the client left part-way
    await held.aclose()
    assert board_of(chat).state("up/up-model") == "closed"
    backend.answer = UpstreamUnavailable("unreachable")
    await relay_once(chat)
    assert board_of(chat).state("up/up-model") == "open"


async def test_an_upstreams_retry_after_opens_the_circuit_for_as_long_as_asked() -> None:
    limited = UpstreamRejected("slow down", status=429, headers={"Retry-After": "60"})
    chat = gateway(Answering(Answer(429, (b"slow down",), limited)), models={"m": "up-model"})
    await relay_once(chat)
    health = board_of(chat)
    assert health.state("up/up-model") == "open"
    clock = chat.generations.current.router.state.clock
    assert health.reopens_at("up/up-model") - clock() > 55


async def test_a_route_sharing_a_relayed_candidate_skips_it_once_its_circuit_opened() -> None:
    """The fast path's own route is its one candidate, tried whatever its circuit; the
    circuit tells a route of several candidates that shares it to go elsewhere."""
    relayed = Answering(UpstreamUnavailable("unreachable"))
    other = Named("other", ANSWER)
    store = MemoryStore()
    both = route(candidate(relayed), candidate(other), name="pair")
    routing = Router([BackendEntry(relayed, {"m": "up-model"})], routes=[both])
    chat = Gateway(store, routing, Loop(store), RunRegistry())
    for _ in range(3):
        await relay_once(chat)
    run = await chat.execute(Principal(), command("pair"))
    assert isinstance(run, Run)
    await run.wait()
    assert run.state.status == "completed"
    assert relayed.requests == []
    assert len(other.requests) == 1
