"""Three fake model servers as the candidates of one route, through the real
``stateway serve``: the weighted split, failover when the first byte is late, and a
candidate's circuit opening and closing again.

The fakes count every request by the model it asked for (their request logs keep only
the last 200), so each candidate gets its own upstream model name. Two gateways serve the
same fakes: one whose circuits stay open for a minute (nothing about an open circuit then
depends on how fast the machine is) and one with a half-second cool-down, polled until
its probe gets through.
"""

from __future__ import annotations

import asyncio
import time
import uuid
from collections.abc import Iterator

import httpx2
import pytest
from openai import OpenAI

from stateway.fake_upstream.launch import start_fake_upstream
from tests.e2e.configured import RunningGateway
from tests.e2e.routing import fake_count, fake_requests, routed_gateway

THRESHOLD = 2
"""``[health] failure_threshold`` of both gateways."""
SPLIT_REQUESTS = 2000
SPLIT_TOLERANCE = 0.05
"""Each candidate's share of the split may stray this far (in absolute terms) from its
weight's share: about 4.5 standard deviations for the largest share over 2,000 requests,
so a fair split fails once in ~10^5 runs and a skewed one (0.30 where 0.25 is due) fails."""
SPLIT_CONCURRENCY = 16
FIRST_BYTE_WAIT = 0.5
"""``read_timeout`` of backend ``a-strict``: the longest wait for its first byte."""


def trio_config(upstreams: tuple[str, str, str], *, cooldown: float, prefix: str) -> str:
    """Routes over fakes ``a``, ``b`` (Responses wire) and ``c``; each candidate's upstream
    model is named ``{prefix}{route}-{fake}`` (``a-strict`` is fake ``a``)."""
    a, b, c = upstreams

    def candidates(route: str, *fields: tuple[str, str]) -> str:
        return "".join(
            f'[[routes.candidates]]\nbackend = "{backend}"\n'
            f'model = "{prefix}{route}-{backend[0]}"\n{extra}\n'
            for backend, extra in fields
        )

    def late(kind: str) -> str:
        """A route whose first candidate waits at most ``FIRST_BYTE_WAIT`` (one per kind of
        lateness: each fails there, and a circuit opens after ``THRESHOLD`` failures)."""
        tiers = (("a-strict", ""), ("b", "priority = 1"), ("c", "priority = 2"))
        return f'[[routes]]\nname = "late-{kind}"\n{candidates(f"late-{kind}", *tiers)}'

    return f"""
[health]
failure_threshold = {THRESHOLD}
cooldown = {cooldown}
jitter = 0.0

[[backends]]
name = "a"
url = "{a}"
[[backends]]
name = "b"
url = "{b}"
api = "responses"
[[backends]]
name = "c"
url = "{c}"
[[backends]]
name = "a-strict"
url = "{a}"
read_timeout = {FIRST_BYTE_WAIT}

[[routes]]
name = "weighted"
{candidates("weighted", ("a", "weight = 1"), ("b", "weight = 1"), ("c", "weight = 2"))}
{late("slow")}
{late("silence")}
[[routes]]
name = "flaky"
{candidates("flaky", ("a", ""), ("b", ""), ("c", ""))}
"""


@pytest.fixture(scope="module")
def trio() -> Iterator[tuple[str, str, str]]:
    with (
        start_fake_upstream() as a,
        start_fake_upstream() as b,
        start_fake_upstream() as c,
    ):
        yield a, b, c


@pytest.fixture(scope="module")
def steady(
    trio: tuple[str, str, str], tmp_path_factory: pytest.TempPathFactory
) -> Iterator[RunningGateway]:
    """Circuits open for a minute once opened."""
    text = trio_config(trio, cooldown=60.0, prefix="")
    with routed_gateway(tmp_path_factory.mktemp("steady"), text) as gateway:
        yield gateway


@pytest.fixture(scope="module")
def healing(
    trio: tuple[str, str, str], tmp_path_factory: pytest.TempPathFactory
) -> Iterator[RunningGateway]:
    """Circuits let a probe through half a second after they opened."""
    text = trio_config(trio, cooldown=0.5, prefix="heal-")
    with routed_gateway(tmp_path_factory.mktemp("healing"), text) as gateway:
        yield gateway


def sdk(gateway: RunningGateway) -> OpenAI:
    return OpenAI(base_url=gateway.url + "/v1", api_key="x", max_retries=0)


def marker() -> str:
    return uuid.uuid4().hex[:12]


def served_by(gateway: RunningGateway, response_id: str) -> str:
    attempts = gateway.stored(response_id)["attempts"]
    return str(next(x["backend"] for x in attempts if x["outcome"] == "ok"))


async def test_the_weighted_split_over_three_candidates(
    steady: RunningGateway, trio: tuple[str, str, str]
) -> None:
    """2,000 requests (store:false, non-stream) split 1:1:2, counted by the fakes. Sent as
    plain HTTP: the SDK's own work per request took most of the test's time, and the split
    is the gateway's, whoever the client."""
    models = ["weighted-a", "weighted-b", "weighted-c"]
    before = [fake_count(url, model) for url, model in zip(trio, models, strict=True)]
    client = httpx2.AsyncClient(base_url=steady.url, timeout=30)
    gate = asyncio.Semaphore(SPLIT_CONCURRENCY)

    async def one(index: int) -> str | None:
        body = {"model": "weighted", "input": f"split {index}", "store": False}
        async with gate:
            answer = await client.post("/v1/responses", json=body)
        status: str | None = answer.json().get("status")
        return status

    async with client:
        statuses = await asyncio.gather(*(one(i) for i in range(SPLIT_REQUESTS)))
    assert statuses == ["completed"] * SPLIT_REQUESTS
    after = [fake_count(url, model) for url, model in zip(trio, models, strict=True)]
    served = [later - earlier for later, earlier in zip(after, before, strict=True)]
    assert sum(served) == SPLIT_REQUESTS  # no request went anywhere twice
    for count, due in zip(served, [0.25, 0.25, 0.5], strict=True):
        assert abs(count / SPLIT_REQUESTS - due) <= SPLIT_TOLERANCE, served


@pytest.mark.parametrize("lateness", ["slow", "silence"])
def test_a_first_byte_later_than_read_timeout_fails_over_in_one_stream(
    steady: RunningGateway, trio: tuple[str, str, str], lateness: str
) -> None:
    """``[[slow]]``: the headers come, the first event does not; ``[[silence]]``: not
    even the headers. Either way the next candidate answers, in the same stream."""
    a, b, c = trio
    mark = marker()
    route = f"late-{lateness}"
    text = f"{mark} [[{lateness}:10000]] [[only:{route}-a]]"
    with sdk(steady) as client, client.responses.stream(model=route, input=text) as stream:
        kinds = [event.type for event in stream]
        final = stream.get_final_response()
    assert kinds.count("response.created") == 1
    assert kinds[-1] == "response.completed"
    assert final.output_text == f"Hello! You said: {mark}"
    assert [r["body"]["model"] for r in fake_requests(a, mark)] == [f"{route}-a"]
    assert [r["body"]["model"] for r in fake_requests(b, mark)] == [f"{route}-b"]
    assert fake_requests(c, mark) == []
    late, answered = steady.stored(final.id)["attempts"]
    assert (late["backend"], late["outcome"], late["detail"]) == (
        "a-strict",
        "failed",
        "upstream_timeout",
    )
    assert late["first_byte_ms"] is None
    assert (answered["backend"], answered["outcome"]) == ("b", "ok")


def open_circuit(client: OpenAI, upstream: str, model: str) -> None:
    """Send requests that fail on ``model`` (and succeed elsewhere) until it has failed
    ``THRESHOLD`` times in a row: its circuit is then open."""
    failing = f"{marker()} [[error:500]] [[only:{model}]]"
    for _ in range(300):  # each request tries the failing candidate first one time in three
        if fake_count(upstream, model) >= THRESHOLD:
            break
        assert client.responses.create(model="flaky", input=failing).status == "completed"
    assert fake_count(upstream, model) == THRESHOLD


def test_a_failing_candidate_opens_its_circuit_and_gets_no_requests(
    steady: RunningGateway, trio: tuple[str, str, str]
) -> None:
    with sdk(steady) as client:
        open_circuit(client, trio[2], "flaky-c")
        backends = set()
        # Were the circuit closed, c would come first in one request of three.
        for _ in range(30):
            answer = client.responses.create(model="flaky", input="plain")
            assert answer.status == "completed"
            attempts = steady.stored(answer.id)["attempts"]
            outcomes = [(x["backend"], x["outcome"], x["detail"]) for x in attempts]
            assert ("c", "skipped", "circuit_open") in outcomes
            backends.add(served_by(steady, answer.id))
    assert fake_count(trio[2], "flaky-c") == THRESHOLD
    assert backends == {"a", "b"}


def test_an_open_circuit_lets_a_probe_through_after_the_cooldown_and_closes(
    healing: RunningGateway, trio: tuple[str, str, str]
) -> None:
    upstream, model = trio[2], "heal-flaky-c"
    with sdk(healing) as client:
        open_circuit(client, upstream, model)
        probe = None
        for _ in range(1000):  # bounded: the cool-down is half a second
            answer = client.responses.create(model="flaky", input="plain")
            assert answer.status == "completed"
            if fake_count(upstream, model) > THRESHOLD:
                probe = answer
                break
            time.sleep(0.01)
        assert probe is not None, "no probe reached the candidate after its cool-down"
        [attempt] = healing.stored(probe.id)["attempts"]
        assert (attempt["backend"], attempt["outcome"]) == ("c", "ok")
        # Closed again: c keeps getting its share, nothing skips it.
        for _ in range(300):
            if fake_count(upstream, model) >= THRESHOLD + 4:
                break
            answer = client.responses.create(model="flaky", input="plain")
            attempts = healing.stored(answer.id)["attempts"]
            assert [x["outcome"] for x in attempts] == ["ok"]
        assert fake_count(upstream, model) == THRESHOLD + 4
