"""The circuit state machine, with a hand-stepped clock, and health in route plans."""

from __future__ import annotations

import random

from stateway.core.errors import UpstreamError, UpstreamRejected, UpstreamUnavailable
from stateway.core.routing import BackendEntry, Router
from stateway.core.routing.attempts import Attempt, retry_after
from stateway.core.routing.health import MAX_CIRCUITS, HealthBoard, HealthPolicy
from stateway.core.routing.plan import Plan
from stateway.core.routing.probe import HealthProber
from stateway.core.routing.route import Candidate
from tests.core.routing_fakes import Named, candidate, needs, route, router
from tests.core.test_route_planning import TEXT, ask


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def board(clock: Clock, threshold: int = 3, jitter: float = 0.0) -> HealthBoard:
    return HealthBoard(HealthPolicy(threshold, 5.0, jitter), clock=clock, rng=random.Random(1))


def test_consecutive_failures_open_the_circuit_and_a_success_resets_the_count() -> None:
    clock = Clock()
    health = board(clock)
    health.failed("a/m")
    health.failed("a/m")
    health.succeeded("a/m")
    health.failed("a/m")
    health.failed("a/m")
    assert health.state("a/m") == "closed"
    health.failed("a/m")
    assert health.state("a/m") == "open"
    assert not health.available("a/m")


def test_after_the_cooldown_one_probe_goes_through_and_its_success_closes() -> None:
    clock = Clock()
    health = board(clock, threshold=1)
    health.failed("a/m")
    clock.now += 4.9
    assert health.state("a/m") == "open"
    clock.now += 0.2
    assert health.state("a/m") == "half_open"
    assert health.available("a/m")
    health.opening("a/m")  # the probe
    assert not health.available("a/m")  # one probe at a time
    health.succeeded("a/m")
    assert health.state("a/m") == "closed"


def test_a_probes_first_output_closes_the_circuit_before_the_probe_ends() -> None:
    """A restarted server answering its probe is back: a long stream must not keep every
    other request off it until the stream ends. Its failure count waits for the end."""
    clock = Clock()
    health = board(clock, threshold=2)
    health.failed("a/m")
    health.failed("a/m")
    clock.now += 5.0
    health.opening("a/m")  # the probe
    assert not health.available("a/m")
    health.answered("a/m")  # its first output
    assert health.state("a/m") == "closed"
    assert health.available("a/m")
    health.failed("a/m")  # cut after its output: still the failures in a row it was
    assert health.state("a/m") == "open"


def test_an_answer_leaves_a_closed_circuits_failure_count_alone() -> None:
    """Streams cut part-way each count: output before the cut resets nothing."""
    clock = Clock()
    health = board(clock, threshold=2)
    health.failed("a/m")
    health.answered("a/m")
    health.failed("a/m")
    assert health.state("a/m") == "open"


def test_a_failed_probe_opens_the_circuit_again_and_a_cancelled_one_frees_it() -> None:
    clock = Clock()
    health = board(clock, threshold=1)
    health.failed("a/m")
    clock.now += 5.0
    health.opening("a/m")
    health.released("a/m")
    assert health.available("a/m")
    health.opening("a/m")
    health.failed("a/m")
    assert health.state("a/m") == "open"
    assert health.reopens_at("a/m") == clock.now + 5.0


def probing_after_a_retry_after(clock: Clock) -> HealthBoard:
    """A board (threshold 3) whose ``a/m`` circuit one failure with a ``Retry-After``
    opened, its probe now under way."""
    health = board(clock, threshold=3)
    health.failed("a/m", retry_after=2.0)
    clock.now += 2.0
    health.opening("a/m")  # the probe
    return health


def test_a_probe_answered_then_cut_counts_on_from_the_failures_it_follows() -> None:
    """Opened by a Retry-After below the threshold, a probe that answered and was then
    cut is one more failure in a row, not a failed probe: the circuit stays closed."""
    clock = Clock()
    health = probing_after_a_retry_after(clock)
    health.answered("a/m")
    health.failed("a/m")  # cut part-way: 2 failures in a row, of 3
    assert health.state("a/m") == "closed"
    health.failed("a/m")
    assert health.state("a/m") == "open"


def test_a_failed_probe_reopens_a_circuit_a_retry_after_opened() -> None:
    """Below the failure threshold too: the probe found the server still refusing."""
    clock = Clock()
    health = probing_after_a_retry_after(clock)
    health.failed("a/m")
    assert health.state("a/m") == "open"
    assert health.reopens_at("a/m") == clock.now + 5.0


def test_a_closed_candidate_reopens_at_zero() -> None:
    """Plans order candidates whose circuits are all open by when they reopen: a closed
    one (never failed, or closed again) sorts first."""
    clock = Clock()
    health = board(clock, threshold=1)
    assert health.reopens_at("a/m") == 0.0
    health.failed("a/m")
    assert health.reopens_at("a/m") == clock.now + 5.0
    clock.now += 5.0
    health.opening("a/m")
    health.answered("a/m")  # closed, its count kept until the probe ends
    assert health.reopens_at("a/m") == 0.0


def test_an_answered_probe_of_a_healthy_candidate_changes_nothing() -> None:
    """The active prober reports every candidate of a backend that answered, most of
    them closed already."""
    health = board(Clock())
    health.probe_answered("a/m")
    assert health.state("a/m") == "closed"


def test_a_cooldown_shorter_than_a_second_is_kept() -> None:
    clock = Clock()
    health = HealthBoard(HealthPolicy(1, 0.25, 0.0), clock=clock)
    health.failed("a/m")
    assert health.reopens_at("a/m") == clock.now + 0.25


class Draw(random.Random):
    def random(self) -> float:
        return 0.5


def test_the_jitter_is_drawn_from_the_boards_random_source() -> None:
    """The router's source (seeded in tests); a board given none draws its own."""
    clock = Clock()
    given = HealthBoard(HealthPolicy(1, 4.0, 0.5), clock=clock, rng=Draw())
    given.failed("a/m")
    assert given.reopens_at("a/m") == clock.now + 5.0
    own = HealthBoard(HealthPolicy(1, 4.0, 0.5), clock=clock)
    own.failed("a/m")
    assert clock.now + 4.0 <= own.reopens_at("a/m") <= clock.now + 6.0


def test_jitter_only_lengthens_the_cooldown_a_little() -> None:
    clock = Clock()
    health = board(clock, threshold=1, jitter=0.1)
    health.failed("a/m")
    assert clock.now + 5.0 <= health.reopens_at("a/m") <= clock.now + 5.5


def test_retry_after_opens_the_circuit_for_as_long_as_asked() -> None:
    clock = Clock()
    health = board(clock)
    health.failed("a/m", retry_after=30.0)
    assert health.state("a/m") == "open"
    clock.now += 29.0
    assert health.state("a/m") == "open"
    clock.now += 1.0
    assert health.state("a/m") == "half_open"


def test_a_retry_after_past_max_retry_after_is_honoured_up_to_it() -> None:
    """A proxy's maintenance page asking a day (``Retry-After: 86400``) would take the
    candidate out of its route until a reload: it is taken at most ``max_retry_after``."""
    clock = Clock()
    health = HealthBoard(
        HealthPolicy(3, 5.0, 0.0, max_retry_after=60.0), clock=clock, rng=random.Random(1)
    )
    health.failed("a/m", retry_after=86400.0)
    clock.now += 59.0
    assert health.state("a/m") == "open"
    clock.now += 1.0
    assert health.state("a/m") == "half_open"
    health.probe_answered("a/m")  # not before the cap is over, but then at once
    assert health.state("a/m") == "closed"


def test_max_retry_after_defaults_to_what_the_sdks_honour() -> None:
    assert HealthPolicy().max_retry_after == 60.0


def test_an_answered_probe_closes_the_circuit_but_not_before_retry_after_is_over() -> None:
    """A model list answering says the server is up, not that its rate limit is lifted."""
    clock = Clock()
    health = board(clock, threshold=1)
    health.failed("a/m", retry_after=30.0)
    health.probe_answered("a/m")
    assert health.state("a/m") == "open"
    clock.now += 30.0
    health.probe_answered("a/m")
    assert health.state("a/m") == "closed"
    health.failed("a/m")  # opened by failures alone: an answered probe closes it at once
    assert health.state("a/m") == "open"
    health.probe_answered("a/m")
    assert health.state("a/m") == "closed"


def test_retry_after_as_an_http_date_is_honoured_too() -> None:
    """Retry-After is delta-seconds or an HTTP-date (RFC 9110); proxies send the date."""
    now = 1_800_000_000.0  # 2027-01-15T08:00:00Z
    dated = UpstreamUnavailable(
        "busy", status=503, headers={"Retry-After": "Fri, 15 Jan 2027 08:00:45 GMT"}
    )
    assert retry_after(dated, lambda: now) == 45.0
    assert retry_after(dated, lambda: now + 60) is None  # already past
    seconds = UpstreamUnavailable("busy", status=503, headers={"Retry-After": "7"})
    assert retry_after(seconds, lambda: now) == 7.0
    garbled = UpstreamUnavailable("busy", status=503, headers={"Retry-After": "soon"})
    assert retry_after(garbled, lambda: now) is None


def test_an_open_candidate_is_skipped_while_a_healthy_one_remains() -> None:
    a, b = Named("a"), Named("b")
    assistant = route(candidate(a), candidate(b, priority=1))
    routing = router(assistant)
    for _ in range(3):
        routing.state.health.failed("a/a-model")
    plan = routing.plan(assistant, needs(ask(TEXT)))
    assert [c.backend.name for c in plan.begin_round()] == ["b"]
    [skip] = plan.records
    assert (skip["backend"], skip["outcome"], skip["detail"]) == ("a", "skipped", "circuit_open")
    routing.state.health.failed("b/b-model", retry_after=60.0)
    for _ in range(2):
        routing.state.health.failed("b/b-model")
    every = routing.plan(assistant, needs(ask(TEXT))).begin_round()
    assert [c.backend.name for c in every] == ["a", "b"]  # none healthy: soonest first


def test_a_probe_that_starts_answering_lets_other_runs_back_in() -> None:
    a, b = Named("a"), Named("b")
    assistant = route(candidate(a), candidate(b, priority=1))
    clock = Clock()
    policy = HealthPolicy(failure_threshold=1, cooldown=5.0, jitter=0.0)
    routing = router(assistant, health=policy, clock=clock)
    routing.state.health.failed("a/a-model")
    clock.now += 5.0
    probe = routing.plan(assistant, needs(ask(TEXT)))
    [first, _] = probe.begin_round()
    probe.open(first)
    waiting = routing.plan(assistant, needs(ask(TEXT)))
    assert [c.backend.name for c in waiting.begin_round()] == ["b"]  # one probe at a time
    probe.output()  # the probe's first output reached its run
    later = routing.plan(assistant, needs(ask(TEXT)))
    assert [c.backend.name for c in later.begin_round()] == ["a", "b"]


def test_attempts_feed_the_circuit_and_a_request_error_does_not() -> None:
    rejected = UpstreamRejected("bad", status=400)
    a, b = Named("a"), Named("b")
    assistant = route(candidate(a), candidate(b, priority=1))
    routing = router(assistant, health=HealthPolicy(failure_threshold=2))
    plan = routing.plan(assistant, needs(ask(TEXT)))
    [first, _] = plan.begin_round()
    attempt = plan.open(first)
    assert not plan.failed(attempt, first, rejected)
    assert routing.state.health.state("a/a-model") == "closed"
    attempt = plan.open(first)
    assert plan.failed(attempt, first, UpstreamError("x"))
    assert routing.state.health.state("a/a-model") == "closed"  # the 400 did not count
    attempt = plan.open(first)
    assert plan.failed(attempt, first, UpstreamError("x"))
    assert routing.state.health.state("a/a-model") == "open"
    assert routing.state.in_flight["a/a-model"] == 0


def test_a_plans_attempts_tell_the_board_how_each_ended() -> None:
    """A success resets the failures of its candidate's circuit; a ``Retry-After`` opens it
    for as long as asked, below the threshold; a probe cancelled, or ended by an error of
    the request's, frees the circuit for the next probe."""
    a = Named("a")
    assistant = route(candidate(a))
    clock = Clock()
    routing = router(assistant, health=HealthPolicy(2, 5.0, 0.0), clock=clock)
    health = routing.state.health

    def attempt() -> tuple[Plan, Attempt, Candidate]:
        plan = routing.plan(assistant, needs(ask(TEXT)))
        [first] = plan.begin_round()
        return plan, plan.open(first), first

    plan, opened, first = attempt()
    plan.failed(opened, first, UpstreamError("x"))
    plan, opened, first = attempt()
    plan.succeeded(opened, first)
    plan, opened, first = attempt()
    plan.failed(opened, first, UpstreamError("x"))
    assert health.state("a/a-model") == "closed"  # the success reset the count

    plan, opened, first = attempt()
    limited = UpstreamUnavailable("busy", headers={"Retry-After": "30"})
    plan.failed(opened, first, limited)
    assert health.reopens_at("a/a-model") == clock.now + 30.0

    clock.now += 30.0
    plan, opened, first = attempt()  # the probe
    plan.abandoned(opened, first)
    assert health.available("a/a-model")
    plan, opened, first = attempt()  # the next probe
    plan.failed(opened, first, UpstreamRejected("bad", status=400))
    assert health.available("a/a-model")


async def test_the_active_probe_opens_and_closes_circuits() -> None:
    class Down(Named):
        up = False

        async def list_models(self) -> list[str]:
            if not self.up:
                raise UpstreamUnavailable("down")
            return ["m"]

    a = Down("a")
    a.up = True
    assistant = route(candidate(a))
    routing = router(assistant, health=HealthPolicy(failure_threshold=2))
    prober = HealthProber(routing, 1.0)
    await prober.probe_once()  # a healthy candidate: nothing to close
    assert routing.state.health.state("a/a-model") == "closed"
    a.up = False
    await prober.probe_once()
    await prober.probe_once()
    assert routing.state.health.state("a/a-model") == "open"
    a.up = True
    await prober.probe_once()
    assert routing.state.health.state("a/a-model") == "closed"


def test_a_catch_all_leaves_no_load_count_behind_for_each_name_a_client_asks_for() -> None:
    """A catch-all serves any name a client sends, each its own candidate key: a count of
    the attempts in flight kept at zero for every name ever asked would grow for good."""
    backend = Named("up")
    routing = Router([BackendEntry(backend, {}, catch_all=True)])
    for n in range(50):
        served = routing.resolve(f"model-{n}")
        plan = routing.plan(served, needs(ask(TEXT)))
        [first] = plan.begin_round()
        attempt = plan.open(first)
        if n % 2:
            plan.succeeded(attempt, first)
        else:
            plan.failed(attempt, first, UpstreamRejected("no such model", status=404))
    assert len(routing.state.in_flight) == 0


def test_an_attempt_ending_leaves_the_others_of_its_candidate_counted() -> None:
    """Only the last attempt of a key takes it out of the load count: the affinity share
    reads the attempts still under way."""
    a = Named("a")
    assistant = route(candidate(a))
    routing = router(assistant)
    plans = [routing.plan(assistant, needs(ask(TEXT))) for _ in range(3)]
    attempts = []
    for plan in plans:
        [first] = plan.begin_round()
        attempts.append((plan, plan.open(first), first))
    assert routing.state.in_flight["a/a-model"] == 3
    plan, attempt, first = attempts.pop()
    plan.succeeded(attempt, first)
    assert routing.state.in_flight["a/a-model"] == 2
    plan, attempt, first = attempts.pop()
    plan.abandoned(attempt, first)
    assert routing.state.in_flight["a/a-model"] == 1
    plan, attempt, first = attempts.pop()
    plan.failed(attempt, first, UpstreamError("x"))
    assert "a/a-model" not in routing.state.in_flight


def test_the_circuits_of_names_a_client_made_up_are_bounded() -> None:
    """During an outage every name a client sends to a catch-all fails, each opening a
    circuit of its own that no success will close: past ``max_circuits`` the oldest goes
    (a dropped circuit is a closed one)."""
    clock = Clock()
    health = HealthBoard(HealthPolicy(1, 5.0, 0.0), clock=clock, max_circuits=3)
    health.failed("up/first")
    for n in range(10):
        health.failed(f"up/made-up-{n}")
    assert len(health) == 3
    assert health.state("up/first") == "closed"  # the oldest went first
    assert health.state("up/made-up-9") == "open"


def test_a_catch_all_outage_keeps_at_most_max_circuits() -> None:
    backend = Named("down")
    routing = Router([BackendEntry(backend, {}, catch_all=True)])
    for n in range(MAX_CIRCUITS + 10):
        served = routing.resolve(f"model-{n}")
        plan = routing.plan(served, needs(ask(TEXT)))
        [first] = plan.begin_round()
        plan.failed(plan.open(first), first, UpstreamError("connection refused"))
    assert len(routing.state.health) == MAX_CIRCUITS


def test_a_catch_all_outage_drops_no_circuit_of_a_configured_candidate() -> None:
    """The bound is on the names clients send a catch-all: a configured candidate's open
    circuit, the oldest, stays open however many of those names fail after it (dropped, it
    was closed again, and the server that had failed asked at once)."""
    fixed, down = Named("fixed"), Named("down")
    routing = Router(
        [BackendEntry(fixed, {"fixed-model": "m"}), BackendEntry(down, {}, catch_all=True)],
        clock=Clock(),
    )
    served = routing.resolve("fixed-model")
    for _ in range(routing.state.health.policy.failure_threshold):
        plan = routing.plan(served, needs(ask(TEXT)))
        [failing] = plan.begin_round()
        plan.failed(plan.open(failing), failing, UpstreamError("connection refused"))
    assert routing.state.health.state(failing.key) == "open"
    for n in range(MAX_CIRCUITS + 10):
        plan = routing.plan(routing.resolve(f"model-{n}"), needs(ask(TEXT)))
        [first] = plan.begin_round()
        plan.failed(plan.open(first), first, UpstreamError("connection refused"))
    assert routing.state.health.state(failing.key) == "open"
    assert len(routing.state.health) == MAX_CIRCUITS + 1
