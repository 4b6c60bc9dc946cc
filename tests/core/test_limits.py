"""Rate limits per principal through ``Gateway.execute``: model requests take from their
principal's buckets, other commands do not; a refusal is a 429 with whole-second
``Retry-After``; a run's tokens are taken out when it ends."""

from __future__ import annotations

import asyncio
import gc
import weakref
from collections.abc import AsyncGenerator, AsyncIterator, Mapping
from typing import Any

import orjson
import pytest

from stateway.coordination.token_buckets import MemoryTokenBuckets
from stateway.core.commands import (
    CompactResponse,
    CreateResponse,
    ForwardChat,
    GetResponse,
    ListModels,
)
from stateway.core.errors import RateLimited
from stateway.core.gateway import Gateway
from stateway.core.generation_settings import GenerationSettings
from stateway.core.inference import Delta, Finish, InferenceRequest, TextDelta, UsageReport
from stateway.core.limits import RateLimits, charged_tokens
from stateway.core.loop import Loop
from stateway.core.principal import Credential, Principal
from stateway.core.response import ResponseState
from stateway.core.routing import BackendEntry, Router
from stateway.core.run_registry import RunRegistry
from stateway.core.runs import Run
from stateway.core.token_estimate import item_tokens
from stateway.core.tools.toolset import ConfiguredServer, GatewayTools, ToolPolicy
from stateway.core.usage import Usage
from tests.core.compaction.test_service import SEALER, SUMMARY
from tests.core.fakes import MemoryStore, RoundsBackend, ScriptedBackend
from tests.core.test_background import ended, until_output, user
from tests.core.tools.test_tool_loop import DOCS, MCP_TOOL, call, fake_mcp, tools_round

ALICE = Principal("acme", "alice")
BOB = Principal("acme", "bob")


class Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def gateway_with(limits: RateLimits, backend: ScriptedBackend | None = None) -> Gateway:
    store = MemoryStore()
    backend = backend or ScriptedBackend([TextDelta("hi"), Finish("stop")])
    router = Router([BackendEntry(backend, {}, catch_all=True)])
    loop = Loop(store, sealer=SEALER)
    return Gateway(store, router, loop, RunRegistry(), limits=limits, sealer=SEALER)


def create() -> CreateResponse:
    return CreateResponse(model="m", input=[user("hi")], store=False)


async def test_requests_past_the_allowance_are_refused_with_whole_seconds() -> None:
    clock = Clock()
    gateway = gateway_with(RateLimits(MemoryTokenBuckets(clock), requests_per_minute=2))
    for _ in range(2):
        await ended(await gateway.execute(ALICE, create()))
    clock.now += 10.0  # a third of a request back: 20 s more for a whole one

    with pytest.raises(RateLimited) as caught:
        await gateway.execute(ALICE, create())

    error = caught.value
    assert (error.status, error.type, error.code) == (429, "requests", "rate_limit_exceeded")
    assert error.headers == {"Retry-After": "20"}
    assert "per minute (limit 2)" in error.message
    await ended(await gateway.execute(BOB, create()))  # another principal's bucket


async def test_a_token_whose_sub_is_a_keys_id_has_buckets_of_its_own() -> None:
    key = Principal("acme", "key_1", Credential.API_KEY)
    token = Principal("acme", "key_1", Credential.TOKEN)
    gateway = gateway_with(RateLimits(MemoryTokenBuckets(Clock()), requests_per_minute=1))
    await ended(await gateway.execute(key, create()))

    await ended(await gateway.execute(token, create()))
    with pytest.raises(RateLimited):
        await gateway.execute(key, create())


async def test_each_tenant_has_buckets_of_its_own() -> None:
    """The same subject (a key's id, a token's ``sub``) in two tenants is two principals."""
    gateway = gateway_with(RateLimits(MemoryTokenBuckets(Clock()), requests_per_minute=1))
    await ended(await gateway.execute(ALICE, create()))

    await ended(await gateway.execute(Principal("other", "alice"), create()))
    with pytest.raises(RateLimited):
        await gateway.execute(ALICE, create())


async def test_a_fraction_of_a_second_is_rounded_up() -> None:
    clock = Clock()
    gateway = gateway_with(RateLimits(MemoryTokenBuckets(clock), requests_per_minute=60))
    for _ in range(60):
        await ended(await gateway.execute(ALICE, create()))
    clock.now += 0.75
    with pytest.raises(RateLimited) as caught:
        await gateway.execute(ALICE, create())
    assert caught.value.headers["Retry-After"] == "1"


async def test_reads_and_listings_are_not_counted() -> None:
    gateway = gateway_with(RateLimits(MemoryTokenBuckets(Clock()), requests_per_minute=1))
    for _ in range(3):
        await gateway.execute(ALICE, ListModels())
        with pytest.raises(Exception, match="not found"):
            await gateway.execute(ALICE, GetResponse("resp_missing"))
    await ended(await gateway.execute(ALICE, create()))
    with pytest.raises(RateLimited):
        await gateway.execute(ALICE, create())


async def test_a_prewarm_asks_no_model_and_is_not_counted() -> None:
    gateway = gateway_with(RateLimits(MemoryTokenBuckets(Clock()), requests_per_minute=1))
    for _ in range(3):  # WebSocket mode's ``generate: false``: the context checked, no model
        prewarm = CreateResponse(model="m", input=[user("hi")], store=False, generate=False)
        await ended(await gateway.execute(ALICE, prewarm))
    await ended(await gateway.execute(ALICE, create()))
    with pytest.raises(RateLimited):
        await gateway.execute(ALICE, create())


async def after_one_run(clock: Clock, backend: ScriptedBackend) -> Gateway:
    """A gateway allowing 600 tokens a minute, once ALICE's run of ``backend`` is charged."""
    limits = RateLimits(MemoryTokenBuckets(clock), requests_per_minute=100, tokens_per_minute=600)
    gateway = gateway_with(limits, backend)
    await ended(await gateway.execute(ALICE, create()))
    await limits.settled()
    return gateway


async def test_a_runs_tokens_are_taken_when_it_ends_and_waited_off() -> None:
    clock = Clock()
    used = Usage(input_tokens=700, output_tokens=500)
    backend = ScriptedBackend([TextDelta("hi"), UsageReport(used), Finish("stop")])
    gateway = await after_one_run(clock, backend)

    with pytest.raises(RateLimited) as caught:
        await gateway.execute(ALICE, create())
    # 600 - 1200 = -600: back to one token after 601 tokens at 10 a second
    assert (caught.value.type, caught.value.headers["Retry-After"]) == ("tokens", "61")
    clock.now += 61.0
    await ended(await gateway.execute(ALICE, create()))


async def test_a_debt_longer_than_the_sdks_wait_is_refused_as_final_saying_when() -> None:
    """A run that used far more than a minute's tokens: the wait (the ``anthropic`` SDK
    would sleep it through, twice) is told, and the answer says not to retry."""
    clock = Clock()
    used = Usage(input_tokens=2000, output_tokens=40)  # over two minutes' worth at 10 a second
    backend = ScriptedBackend([TextDelta("hi"), UsageReport(used), Finish("stop")])
    gateway = await after_one_run(clock, backend)

    with pytest.raises(RateLimited) as caught:
        await gateway.execute(ALICE, create())
    assert caught.value.headers == {"Retry-After": "145", "x-should-retry": "false"}
    clock.now += 25.0  # 120 s left: retried
    with pytest.raises(RateLimited) as caught:
        await gateway.execute(ALICE, create())
    assert caught.value.headers == {"Retry-After": "120"}


async def test_an_answer_its_upstream_never_counted_is_charged_its_output_estimated() -> None:
    """A client leaving just before the usage chunk (or a cut answer) still pays for what
    it got: about a token per four bytes of the output."""
    backend = ScriptedBackend([TextDelta("x" * 2400), Finish("stop")])  # no usage report
    gateway = await after_one_run(Clock(), backend)

    with pytest.raises(RateLimited) as caught:
        await gateway.execute(ALICE, create())
    assert caught.value.type == "tokens"
    await ended(await gateway.execute(BOB, create()))  # another principal's bucket


@pytest.mark.parametrize(
    ("words", "counted"),
    [
        (800, None),  # estimated: about a token per word here
        (1, Usage(input_tokens=900, output_tokens=1)),  # a short prompt the upstream counted
    ],
)
async def test_a_client_leaving_after_the_output_began_pays_for_its_prompt_too(
    words: int, counted: Usage | None
) -> None:
    """The model read the prompt before it wrote a word: a client that leaves once the
    answer began (before the usage chunk) is charged its prompt as well as its output,
    the upstream's own count of it when it sent one ahead (an Anthropic upstream's
    ``message_start``), else estimated; else every answer left after its first token
    would cost one token, however long its prompt."""
    gate = asyncio.Event()
    ahead = [] if counted is None else [UsageReport(counted)]
    backend = ScriptedBackend([*ahead, TextDelta("hi")], gate=gate)
    limits = RateLimits(MemoryTokenBuckets(Clock()), requests_per_minute=100, tokens_per_minute=600)
    gateway = gateway_with(limits, backend)
    prompt = CreateResponse(model="m", input=[user("word " * words)], store=False, stream=True)
    run = await gateway.execute(ALICE, prompt)
    assert isinstance(run, Run)
    await until_output(run)
    run.cancel()  # the client went away
    await ended(run)
    await limits.settled()
    gate.set()  # the next answers are whole

    with pytest.raises(RateLimited) as caught:
        await gateway.execute(ALICE, create())
    assert caught.value.type == "tokens"
    await ended(await gateway.execute(BOB, create()))  # another principal's bucket


class AnswerLeft(RoundsBackend):
    """Its rounds as scripted, the last one's answer then never ending (its client leaves
    before the usage chunk)."""

    async def infer(self, request: InferenceRequest) -> AsyncGenerator[Delta, None]:
        last = len(self.requests) == len(self.rounds) - 1
        async for delta in super().infer(request):
            yield delta
        if last:
            await asyncio.Event().wait()


async def test_an_answer_left_after_a_counted_tool_round_is_charged_its_output_estimated() -> None:
    """A gateway tool's round its upstream counted, then the answer's round, left by its
    client before its usage came: that answer's output, which no upstream counted, is
    charged estimated as a single round's is, else any answer after a tool call would be
    free to a client leaving just before its end."""
    backend = AnswerLeft(
        [tools_round(call("docs__add", {"a": 1, "b": 2})), [TextDelta("x" * 2400)]]
    )
    store = MemoryStore()
    tools = GatewayTools(
        mcp=fake_mcp(), servers={"docs": ConfiguredServer(DOCS)}, policy=ToolPolicy(timeout=0.5)
    )
    router = Router([BackendEntry(backend, {}, catch_all=True)])
    loop = Loop(store, tools=tools, sealer=SEALER)
    limits = RateLimits(MemoryTokenBuckets(Clock()), requests_per_minute=100, tokens_per_minute=600)
    gateway = Gateway(store, router, loop, RunRegistry(), limits=limits, sealer=SEALER)
    settings = GenerationSettings(tools=[MCP_TOOL])
    command = CreateResponse(
        model="m", input=[user("hi")], settings=settings, store=False, stream=True
    )
    run = await gateway.execute(ALICE, command)
    assert isinstance(run, Run)
    await until_output(run)
    run.cancel()  # the client went away
    await ended(run)
    await limits.settled()

    with pytest.raises(RateLimited) as caught:
        await gateway.execute(ALICE, create())
    assert caught.value.type == "tokens"


async def test_a_client_leaving_before_the_output_began_pays_nothing() -> None:
    """Nothing was had: the upstream's work on it was abandoned with it."""
    gate = asyncio.Event()
    backend = ScriptedBackend([], gate=gate)
    limits = RateLimits(MemoryTokenBuckets(Clock()), requests_per_minute=100, tokens_per_minute=600)
    gateway = gateway_with(limits, backend)
    long_prompt = CreateResponse(model="m", input=[user("word " * 800)], store=False, stream=True)
    run = await gateway.execute(ALICE, long_prompt)
    assert isinstance(run, Run)
    await backend.started.wait()
    run.cancel()
    await ended(run)
    await limits.settled()
    gate.set()

    await ended(await gateway.execute(ALICE, create()))


async def test_a_compactions_tokens_are_taken_too() -> None:
    clock = Clock()
    limits = RateLimits(MemoryTokenBuckets(clock), requests_per_minute=100, tokens_per_minute=12)
    gateway = gateway_with(limits, ScriptedBackend(SUMMARY))

    compacted = await gateway.execute(ALICE, CompactResponse("m", [user("hi")]))

    assert compacted.usage is not None
    assert compacted.usage.total_tokens == 13  # 12 - 13: one token in debt
    with pytest.raises(RateLimited) as caught:
        await gateway.execute(ALICE, CompactResponse("m", [user("hi")]))
    assert (caught.value.type, caught.value.headers["Retry-After"]) == ("tokens", "10")


class ReportingRelay:
    status = 200
    headers: dict[str, str] = {}
    whole = False

    async def chunks(self) -> AsyncIterator[bytes]:
        yield b'{"usage": {"prompt_tokens": 700, "completion_tokens": 500}}'

    def usage(self) -> Usage | None:
        return Usage(input_tokens=700, output_tokens=500)

    def output_estimate(self) -> int:
        return 0

    def failure(self) -> None:
        return None

    async def aclose(self) -> None:
        pass


class Forwarding(ScriptedBackend):
    async def forward_chat(self, body: bytes, fields: Mapping[str, Any]) -> ReportingRelay:
        return ReportingRelay()


async def next_refused(gateway: Gateway) -> bool:
    """Whether Alice's next forwarded request is refused for its tokens (else its relay is
    closed unread)."""
    try:
        relay = await gateway.execute(ALICE, forwarded())
    except RateLimited:
        return True
    assert not isinstance(relay, Run)
    await relay.aclose()
    return False


def forwarded(fields: dict[str, Any] | None = None) -> ForwardChat:
    """A Chat request of ``fields`` (a user's "hi" to ``fast``) its route forwards
    untouched (translating it fails the test)."""
    fields = fields or {"model": "fast", "messages": [{"role": "user", "content": "hi"}]}

    async def translate() -> CreateResponse:
        raise AssertionError("forwarded, not translated")

    return ForwardChat("fast", orjson.dumps(fields), fields, translate)


async def relayed_and_left(gateway: Gateway, limits: RateLimits, command: ForwardChat) -> None:
    """Alice's ``command`` relayed, its relay closed at once (what it read so far), and
    its charge settled."""
    relay = await gateway.execute(ALICE, command)
    assert not isinstance(relay, Run)
    await relay.aclose()
    await limits.settled()


async def test_a_relayed_answers_reported_tokens_are_taken_once_relayed() -> None:
    clock = Clock()
    limits = RateLimits(MemoryTokenBuckets(clock), requests_per_minute=100, tokens_per_minute=600)
    gateway = gateway_with(limits, Forwarding([]))
    relay = await gateway.execute(ALICE, forwarded())
    assert not isinstance(relay, Run)
    async for _ in relay.chunks():
        pass
    await relay.aclose()
    await limits.settled()

    with pytest.raises(RateLimited) as caught:
        await gateway.execute(ALICE, forwarded())
    assert (caught.value.type, caught.value.headers["Retry-After"]) == ("tokens", "61")


class UncountedRelay(ReportingRelay):
    """An answer whose usage never came (its client left, or it was cut short)."""

    def __init__(self, status: int, output: int = 700) -> None:
        self.status = status
        self.output = output

    def usage(self) -> Usage | None:
        return None

    def output_estimate(self) -> int:
        return self.output

    def failure(self) -> None:
        return None


class Uncounted(ScriptedBackend):
    def __init__(self, status: int, output: int = 700) -> None:
        super().__init__([])
        self.status = status
        self.output = output

    async def forward_chat(self, body: bytes, fields: Mapping[str, Any]) -> UncountedRelay:
        return UncountedRelay(self.status, self.output)


@pytest.mark.parametrize(("status", "charged"), [(200, True), (500, False)])
async def test_a_relayed_answer_that_reported_no_tokens_is_charged_its_output_estimated(
    status: int, charged: bool
) -> None:
    """Leaving before the usage came must not make an answer free, as for a translated
    run; an upstream's refusal (an error status) is charged nothing."""
    limits = RateLimits(MemoryTokenBuckets(Clock()), tokens_per_minute=600)
    gateway = gateway_with(limits, Uncounted(status))
    relay = await gateway.execute(ALICE, forwarded())
    assert not isinstance(relay, Run)
    await relay.aclose()
    await limits.settled()
    assert await next_refused(gateway) is charged


async def test_a_request_refused_for_tokens_takes_no_request() -> None:
    buckets = MemoryTokenBuckets(Clock())
    limits = RateLimits(buckets, requests_per_minute=1, tokens_per_minute=10)
    await limits.charge(ALICE, 100)
    with pytest.raises(RateLimited):
        await limits.admit(ALICE)
    assert await buckets.take("requests\x1facme\x1falice", 1, 1, 0) == 0.0


async def test_a_stream_that_would_not_report_its_usage_is_translated_where_tokens_count() -> None:
    """Relayed as it is, a stream without ``include_usage`` says nothing of what it used:
    where tokens are counted it runs translated, and is charged."""
    backend = Forwarding([TextDelta("hi"), UsageReport(Usage(700, 500)), Finish("stop")])
    fields: dict[str, object] = {"model": "m", "messages": [], "stream": True}
    translated: list[bool] = []

    async def translate() -> CreateResponse:
        translated.append(True)
        return CreateResponse(model="m", input=[user("hi")], store=False, stream=True)

    def forward(**more: object) -> ForwardChat:
        body = {**fields, **more}
        return ForwardChat("m", orjson.dumps(body), body, translate)

    counting = RateLimits(MemoryTokenBuckets(Clock()), tokens_per_minute=600)
    gateway = gateway_with(counting, backend)
    reporting = await gateway.execute(ALICE, forward(stream_options={"include_usage": True}))
    assert not isinstance(reporting, Run)
    assert translated == []
    await reporting.aclose()
    run = await gateway.execute(ALICE, forward())
    assert isinstance(run, Run)
    assert translated == [True]
    await ended(run)
    await counting.settled()
    with pytest.raises(RateLimited):
        await gateway.execute(ALICE, forward(stream_options={"include_usage": True}))

    requests_only = RateLimits(MemoryTokenBuckets(Clock()), requests_per_minute=9)
    relay = await gateway_with(requests_only, Forwarding([])).execute(ALICE, forward())
    assert not isinstance(relay, Run)
    await relay.aclose()


async def test_a_translated_chat_requests_run_is_charged_to_its_principal() -> None:
    used = Usage(input_tokens=700, output_tokens=500)
    backend = ScriptedBackend([TextDelta("hi"), UsageReport(used), Finish("stop")])  # no relay
    limits = RateLimits(MemoryTokenBuckets(Clock()), requests_per_minute=100, tokens_per_minute=600)
    gateway = gateway_with(limits, backend)
    fields: dict[str, object] = {"model": "m", "messages": [{"role": "user", "content": "hi"}]}

    async def translate() -> CreateResponse:
        return create()

    run = await gateway.execute(ALICE, ForwardChat("m", orjson.dumps(fields), fields, translate))
    assert isinstance(run, Run)
    await ended(run)
    await limits.settled()
    with pytest.raises(RateLimited) as caught:
        await gateway.execute(ALICE, create())
    assert caught.value.type == "tokens"
    await ended(await gateway.execute(BOB, create()))  # another principal's bucket


async def test_a_streamed_runs_tokens_are_taken_once_it_ends_not_when_it_starts() -> None:
    """A streamed run is admitted before it has used anything: its charge waits for its
    end (at its start it would be nothing)."""
    gate = asyncio.Event()
    used = Usage(input_tokens=700, output_tokens=500)
    backend = ScriptedBackend([TextDelta("hi"), UsageReport(used), Finish("stop")], gate=gate)
    limits = RateLimits(MemoryTokenBuckets(Clock()), requests_per_minute=100, tokens_per_minute=600)
    gateway = gateway_with(limits, backend)
    streamed = CreateResponse(model="m", input=[user("hi")], store=False, stream=True)
    run = await gateway.execute(ALICE, streamed)
    await backend.started.wait()
    for _ in range(5):
        await asyncio.sleep(0)  # a charge taken at once would be taken by now
    gate.set()
    await ended(run)
    await limits.settled()
    with pytest.raises(RateLimited) as caught:
        await gateway.execute(ALICE, create())
    assert caught.value.type == "tokens"


@pytest.mark.parametrize(("output", "charged"), [(1, True), (0, False)])
async def test_a_relayed_answer_left_after_its_output_began_is_charged_its_prompt_too(
    output: int, charged: bool
) -> None:
    """As a translated run: a client that leaves once the answer began (one event in)
    pays for the prompt the model read, about a token per four bytes of the body; one
    that leaves before any output, nothing."""
    limits = RateLimits(MemoryTokenBuckets(Clock()), tokens_per_minute=600)
    gateway = gateway_with(limits, Uncounted(200, output))
    fields = {"model": "fast", "messages": [{"role": "user", "content": "word " * 800}]}
    await relayed_and_left(gateway, limits, forwarded(fields))
    assert await next_refused(gateway) is charged


async def test_a_relayed_answer_left_after_its_output_began_counts_an_image_as_one() -> None:
    """As a translated run's estimate counts it (:mod:`stateway.core.token_estimate`): an
    image's base64 is no text the model read, so it is charged as one image, not a token
    per four of its bytes (a screenshot would put the bucket in debt for minutes)."""
    limits = RateLimits(MemoryTokenBuckets(Clock()), tokens_per_minute=4000)
    gateway = gateway_with(limits, Uncounted(200, 1))
    image = {"type": "image_url", "image_url": {"url": "data:image/png;base64," + "A" * 100_000}}
    content = [{"type": "text", "text": "What is this?"}, image]
    fields = {"model": "fast", "messages": [{"role": "user", "content": content}]}
    await relayed_and_left(gateway, limits, forwarded(fields))

    relay = await gateway.execute(ALICE, forwarded())  # about 1,600 tokens taken, not 25,000
    assert not isinstance(relay, Run)
    await relay.aclose()


class Debits(MemoryTokenBuckets):
    """Memory buckets that note each charge taken out of a token bucket."""

    def __init__(self) -> None:
        super().__init__(Clock())
        self.charged: list[float] = []

    async def take(self, key: str, per_minute: int, need: float, debit: float) -> float:
        if key.startswith("tokens") and debit:
            self.charged.append(debit)
        return await super().take(key, per_minute, need, debit)


async def charged_for(
    relay: UncountedRelay | ReportingRelay, fields: dict[str, Any]
) -> list[float]:
    """What one forwarded request of ``fields`` answered by ``relay`` is charged."""
    debits = Debits()
    limits = RateLimits(debits, tokens_per_minute=100_000)

    class Relaying(ScriptedBackend):
        async def forward_chat(
            self, body: bytes, fields: Mapping[str, Any]
        ) -> UncountedRelay | ReportingRelay:
            return relay

    await relayed_and_left(gateway_with(limits, Relaying([])), limits, forwarded(fields))
    return debits.charged


def image(url: str, **more: str) -> dict[str, Any]:
    return {"type": "image_url", "image_url": {"url": url, **more}}


BASE64 = "data:image/png;base64," + "A" * 999


@pytest.mark.parametrize(
    ("content", "urls", "images"),
    [
        ("abcdefg", "", 0),  # no image: the whole body, rounded up
        ([{"type": "text", "text": "What?"}, image(BASE64)], BASE64, 1600),
        (
            [image("data:1"), image("data:22", detail="low"), {"type": "text"}],
            "data:1data:22",
            1685,
        ),
        ([image("data:1"), {"image_url": "data:2"}, "text", {"image_url": {}}], "data:1", 1600),
        ([image("https://example.test/éééé.png")], "https://example.test/éééé.png", 1600),
    ],
)
async def test_a_relayed_answers_estimate_is_its_output_and_its_prompts_bytes_and_images(
    content: Any, urls: str, images: int
) -> None:
    """Exactly: the output's estimate, a token per four bytes of the body (rounded up)
    without its images' URLs, and each image at its detail's tokens."""
    fields = {"model": "fast", "messages": [{"role": "user", "content": content}]}
    size = len(orjson.dumps(fields)) - len(urls.encode())
    assert await charged_for(UncountedRelay(200, 7), fields) == [7 + -(-size // 4) + images]


async def test_a_relayed_answers_estimate_reads_only_image_parts_of_listed_messages() -> None:
    """Messages or parts that are not objects, and content that is no list, hold no image
    (the body is counted as sent)."""
    for messages in (
        "hi",
        None,
        ["hi", {"content": "hi"}, {"content": ["x", {"image_url": None}]}],
    ):
        fields = {"model": "fast", "messages": messages}
        size = len(orjson.dumps(fields))
        assert await charged_for(UncountedRelay(200, 1), fields) == [1 + -(-size // 4)]


@pytest.mark.parametrize(("status", "charged"), [(200, [13]), (399, [13]), (400, []), (503, [])])
async def test_a_relayed_answer_is_charged_unless_its_upstream_refused_it(
    status: int, charged: list[int]
) -> None:
    """An error status (400 and up) is the upstream's refusal: nothing is charged."""
    fields = {"model": "fast", "messages": "abcdefghijklmnopq"}  # 47 bytes: 12 tokens, and 1
    assert await charged_for(UncountedRelay(status, 1), fields) == charged


async def test_a_relayed_answer_that_reported_its_usage_is_charged_that_alone() -> None:
    fields = {"model": "fast", "messages": [{"role": "user", "content": "hi"}]}
    assert await charged_for(ReportingRelay(), fields) == [1200]
    assert await charged_for(UncountedRelay(200, 0), fields) == []


async def test_a_token_bucket_short_of_one_token_refuses_even_for_under_a_second() -> None:
    clock = Clock()
    limits = RateLimits(MemoryTokenBuckets(clock), None, 60)  # a token a second
    await limits.charge(ALICE, 60)
    clock.now += 0.5  # half a token back
    with pytest.raises(RateLimited) as caught:
        await limits.admit(ALICE)
    assert (caught.value.type, caught.value.headers["Retry-After"]) == ("tokens", "1")
    assert caught.value.message == "Rate limit reached on tokens per minute (limit 60). " + (
        "Please try again in 1s."
    )


async def test_charging_one_token_takes_it() -> None:
    clock = Clock()
    limits = RateLimits(MemoryTokenBuckets(clock), None, 1)
    await limits.charge(ALICE, 1)
    with pytest.raises(RateLimited):
        await limits.admit(ALICE)


def test_a_run_is_charged_its_usage_and_the_prompts_its_upstream_did_not_count() -> None:
    state = ResponseState.start("resp_1", "acme", 0.0, create())
    state.usage = Usage(input_tokens=30, output_tokens=12)
    state.uncounted_input = 5
    assert charged_tokens(state) == 47


def test_a_run_whose_output_no_upstream_counted_is_charged_it_estimated() -> None:
    """A round cut after its upstream counted the prompt (an Anthropic ``message_start``):
    the usage has its input tokens alone, and the output it wrote is charged estimated,
    else leaving just before the end would make the answer free."""
    state = ResponseState.start("resp_1", "acme", 0.0, create())
    state.output.append({"type": "message", "role": "assistant", "content": "x" * 400})
    state.usage = Usage(input_tokens=30)
    assert charged_tokens(state) == 30 + item_tokens(state.output[0])
    state.usage = None
    state.uncounted_input = 30
    assert charged_tokens(state) == 30 + item_tokens(state.output[0])


def test_a_cut_rounds_output_is_charged_estimated_beside_the_counted_rounds() -> None:
    """A run whose earlier rounds were counted and whose last was cut before its usage
    came: the usage, and the cut round's items (from the index it began at), estimated."""
    state = ResponseState.start("resp_1", "acme", 0.0, create())
    counted_call = {"type": "function_call", "call_id": "c", "name": "f", "arguments": "{}"}
    cut = {"type": "message", "role": "assistant", "content": "x" * 400}
    state.output += [counted_call, cut]
    state.usage = Usage(input_tokens=30, output_tokens=12)
    state.uncounted_output_from = 1
    assert charged_tokens(state) == 30 + 12 + item_tokens(cut)


class Recording:
    """Buckets that answer each take after ``delay`` seconds, keeping what was taken and
    whether they were closed first."""

    def __init__(self, delay: float) -> None:
        self.delay = delay
        self.taken: list[tuple[str, float]] = []
        self.closed = False

    async def take(self, key: str, per_minute: int, need: float, debit: float) -> float:
        await asyncio.sleep(self.delay)
        self.taken.append((key, debit))
        return 0.0

    async def aclose(self) -> None:
        self.closed = True


async def test_closing_waits_for_the_charges_under_way() -> None:
    """At shutdown the runs have ended and their charges are on their way (a Redis round
    trip): closing first would lose them."""
    buckets = Recording(0.05)
    limits = RateLimits(buckets, None, 100)
    limits.charge_after(ALICE, None, lambda: 42)
    await limits.aclose()
    assert buckets.taken == [("tokens\x1facme\x1falice", 42)]
    assert buckets.closed


class Fields(dict[str, Any]):
    """A parsed body whose release a weak reference tells."""


@pytest.mark.parametrize("counting", [True, False])
@pytest.mark.usefixtures("young_heap")
async def test_a_relay_holds_nothing_of_its_request_while_its_answer_goes_out(
    counting: bool,
) -> None:
    """The parsed body (megabytes, as the bytes it was parsed from) is let go once the
    relay opens, tokens counted or not: what its estimate needs is taken before; the
    charge is what it would have been."""
    debits = Debits()
    limits = RateLimits(debits, tokens_per_minute=100_000 if counting else None)
    relay = UncountedRelay(200, 7)

    class Relaying(ScriptedBackend):
        async def forward_chat(self, body: bytes, fields: Mapping[str, Any]) -> UncountedRelay:
            return relay

    content = [{"type": "text", "text": "x" * 100}, image(BASE64)]
    fields = Fields(model="fast", messages=[{"role": "user", "content": content}])
    size = len(orjson.dumps(fields)) - len(BASE64)
    command = forwarded(fields)
    held = await gateway_with(limits, Relaying([])).execute(ALICE, command)
    assert not isinstance(held, Run)
    released = weakref.ref(fields)
    del fields, command
    gc.collect()
    assert released() is None
    await held.aclose()
    await limits.settled()
    assert debits.charged == ([7 + -(-size // 4) + 1600] if counting else [])
