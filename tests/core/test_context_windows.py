"""Context windows learned from the model servers: asked until the server answers, read
by the candidates whose window is not configured (at each use: learned later, applied to
the next request), a configured one always winning."""

from __future__ import annotations

import asyncio
import logging

import pytest

from stateway.core.backend import AdvertisedWindows
from stateway.core.errors import (
    GatewayError,
    UpstreamError,
    UpstreamRejected,
    UpstreamUnavailable,
)
from stateway.core.routing import BackendEntry, Candidate, Capabilities, Route, Router, windows
from stateway.core.routing.windows import LearnedWindows, ServerWindows, WindowDiscovery
from tests.core.fakes import ScriptedBackend


class Advertising(ScriptedBackend):
    """A backend whose server fails as ``failures`` says, once each, then advertises."""

    def __init__(self, advertised: AdvertisedWindows, failures: list[GatewayError]) -> None:
        super().__init__([])
        self.advertised = advertised
        self.failures = failures
        self.asked = 0

    async def advertised_windows(self) -> AdvertisedWindows:
        self.asked += 1
        if self.failures:
            raise self.failures.pop(0)
        return self.advertised

    async def list_models(self) -> list[str]:
        return list(self.advertised.models)


async def learn(backend: Advertising, record: ServerWindows) -> None:
    discovery = WindowDiscovery([(backend, record)], retry=0.01)
    await asyncio.wait_for(discovery.run(), 5)


async def test_a_server_down_at_first_is_asked_again_until_it_answers() -> None:
    down = [UpstreamUnavailable("down"), UpstreamUnavailable("still down")]
    limited = UpstreamRejected("slow down", status=429)
    backend = Advertising(AdvertisedWindows({"m": 8192}), [*down, limited])
    record = ServerWindows()
    candidate = Candidate(backend, "m", learned=record)
    assert candidate.context_window is None  # not known yet: nothing is checked
    await learn(backend, record)
    assert backend.asked == 4
    assert candidate.context_window == 8192  # the same candidate, read again
    assert Candidate(backend, "other", learned=record).context_window is None


async def test_a_refusal_ends_the_asking_with_nothing_learned() -> None:
    record = ServerWindows()
    record.learn(AdvertisedWindows({"m": 100}))  # what an earlier generation learned
    backend = Advertising(AdvertisedWindows({"m": 8192}), [UpstreamRejected("no", status=404)])
    await learn(backend, record)
    assert backend.asked == 1
    assert record.window("m") is None


async def test_a_configured_window_wins_over_the_advertised_one() -> None:
    record = ServerWindows()
    record.learn(AdvertisedWindows({"m": 8192}))
    backend = ScriptedBackend([])
    configured = Candidate(backend, "m", capabilities=Capabilities(context_window=100))
    assert (
        Candidate(backend, "m", capabilities=configured.capabilities, learned=record).context_window
        == 100
    )
    assert Candidate(backend, "m").context_window is None  # not asked: not learned


async def test_a_server_of_one_model_gives_its_window_to_any_name() -> None:
    record = ServerWindows()
    record.learn(AdvertisedWindows(server=4096))
    assert Candidate(ScriptedBackend([]), "whatever", learned=record).context_window == 4096


def test_a_route_knows_its_window_once_every_candidate_does() -> None:
    learned, unknown = ServerWindows(), ServerWindows()
    learned.learn(AdvertisedWindows({"m": 8192}))
    backend = ScriptedBackend([])
    route = Route(
        "r",
        (
            Candidate(backend, "m", learned=learned),
            Candidate(backend, "m", capabilities=Capabilities(context_window=16384)),
        ),
    )
    assert route.context_window == 16384
    assert (
        Route("r", (*route.candidates, Candidate(backend, "m", learned=unknown))).context_window
        is None
    )


async def test_a_catch_all_lists_each_model_with_its_own_window() -> None:
    record = ServerWindows()
    backend = Advertising(AdvertisedWindows({"small": 4096, "big": 131072}), [])
    router = Router([BackendEntry(backend, {}, catch_all=True, learned=record)])
    assert {m.name: m.context_window for m in await router.list_models()} == {
        "small": None,
        "big": None,
    }
    await learn(backend, record)
    assert {m.name: m.context_window for m in await router.list_models()} == {
        "small": 4096,
        "big": 131072,
    }
    assert router.resolve("big").candidates[0].context_window == 131072


def test_one_record_per_server_for_the_whole_process() -> None:
    learned = LearnedWindows()
    assert learned.server("http://a/v1") is learned.server("http://a/v1")
    assert learned.server("http://a/v1") is not learned.server("http://b/v1")


async def test_a_server_not_up_is_asked_again_after_waits_doubling_up_to_the_retry(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """1 s, then twice as long each time, never longer apart than ``retry`` (the health
    probe interval): a model server loading its weights is not hammered, nor forgotten."""
    waits: list[float] = []

    async def sleep(seconds: float) -> None:
        waits.append(seconds)

    monkeypatch.setattr(windows.asyncio, "sleep", sleep)
    down = [UpstreamUnavailable(f"down {n}") for n in range(6)]
    backend = Advertising(AdvertisedWindows({"m": 8192}), down)
    await WindowDiscovery([(backend, ServerWindows())], retry=10).run()
    assert waits == [1, 2, 4, 8, 10, 10]


async def test_what_was_learned_is_logged_for_the_operator(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """The INFO line an operator reads to see what the gateway now checks against, and
    why nothing was learned of a server that refused the asking."""
    caplog.set_level(logging.INFO, logger=windows.__name__)
    listed = Advertising(AdvertisedWindows({"m": 8192, "n": 4096}), [])
    await learn(listed, ServerWindows())
    single = Advertising(AdvertisedWindows(server=2048), [])
    single.name = "llama"
    await learn(single, ServerWindows())
    refusing = Advertising(AdvertisedWindows(), [UpstreamRejected("no listing", status=404)])
    refusing.name = "closed"
    await learn(refusing, ServerWindows())
    assert [r.getMessage() for r in caplog.records if r.levelno == logging.INFO] == [
        f"backend {listed.name}: context windows learned (m: 8192, n: 4096)",
        "backend llama: context window 2048 learned",
        "backend closed: no context window learned: no listing",
    ]


class Crashing(Advertising):
    async def advertised_windows(self) -> AdvertisedWindows:
        raise RuntimeError("an unforeseen failure")


async def test_an_asking_that_crashes_ends_the_others_with_it() -> None:
    """The discovery is one task to the reloader, which cancels it when its generation is
    superseded: one server's asking failing unexpectedly ends the others' too, rather
    than leaving them asking on, out of any cancel's reach, through backends closed."""
    down = Advertising(AdvertisedWindows(), [UpstreamUnavailable("down")] * 1000)
    crashing = Crashing(AdvertisedWindows(), [])
    discovery = WindowDiscovery([(down, ServerWindows()), (crashing, ServerWindows())], 0.01)
    with pytest.raises((RuntimeError, ExceptionGroup)):
        await discovery.run()
    assert asyncio.all_tasks() == {asyncio.current_task()}


async def test_a_server_not_answering_is_told_once_at_info(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """Why nothing is learned yet (a server starting, or one whose listing cannot be
    read, asked again for ever) reaches an operator at INFO once, not at each ask."""
    caplog.set_level(logging.DEBUG, logger=windows.__name__)
    down = [UpstreamUnavailable("connection refused"), UpstreamUnavailable("still refused")]
    backend = Advertising(AdvertisedWindows({"m": 8192}), [*down, UpstreamError("malformed")])
    await learn(backend, ServerWindows())
    told = [
        (r.levelno, r.getMessage()) for r in caplog.records if "not learned yet" in r.getMessage()
    ]
    assert told == [
        (logging.INFO, f"backend {backend.name}: its windows not learned yet: connection refused"),
        (logging.DEBUG, f"backend {backend.name}: its windows not learned yet: still refused"),
        (logging.DEBUG, f"backend {backend.name}: its windows not learned yet: malformed"),
    ]
