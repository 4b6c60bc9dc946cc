"""A run's routing plan: the candidates able to serve it, their order each round, and the
record of every attempt.

Each inference round (the tool loop's included) orders the capable candidates afresh:
``priority`` tiers first to last, and within a tier a weighted random order (the first
place goes to each candidate in proportion to its ``weight``). Candidates whose circuit
is open (:mod:`.health`) are left out while any other remains (with none left, all are
tried, the soonest to reopen first); one left in whose circuit lets nothing through by the
time the round reaches it (another run took its half-open probe meanwhile, or failures
opened it) is passed over then (:meth:`Plan.passed_over`). With ``affinity`` a
continuation's first choice is the candidate that served its chain last (:mod:`.affinity`),
while it is healthy, in the first tier, and its share of the tier's runs in flight stays within
``affinity_tolerance`` above its weight share. The candidate comes from this process's
table, else from the store (``stored``: the one that served the parent response or the
conversation's last turn, read with the context at no extra query), under the same rules.
The round's first attempt records ``affinity``: ``hit`` (the table's candidate comes
first), ``stored`` (the store's does), ``miss`` (the hint was passed over: down, in a later
tier, over its share, or not a candidate of the route). The round opens candidates in that order,
at most ``max_attempts``; a recoverable failure before the round's first delta (a usage
report ahead of output aside: :mod:`stateway.core.rounds`) moves on to the next
(:func:`.attempts.recoverable`), anything else ends the round. Once a delta has reached
the run nothing is sent again, to any candidate.
"""

from __future__ import annotations

import random
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Literal

from stateway.core.errors import GatewayError
from stateway.core.routing.affinity import AffinityTable
from stateway.core.routing.attempts import Attempt, recoverable, retry_after, unhealthy
from stateway.core.routing.health import HealthBoard
from stateway.core.routing.route import Candidate, Route

LIGHT_LOAD = 2
"""Below this many runs in flight per candidate of a tier, shares are not judged."""


@dataclass(slots=True)
class RoutingState:
    """What every plan of a router shares: its random source and clock, the candidates'
    health, the affinity table and the attempts in flight per candidate."""

    rng: random.Random
    clock: Callable[[], float]
    health: HealthBoard
    affinity: AffinityTable = field(default_factory=AffinityTable)
    in_flight: Counter[str] = field(default_factory=Counter)
    """Attempts under way per candidate key; a key leaves with its last attempt."""


class Plan:
    def __init__(
        self,
        route: Route,
        capable: list[Candidate],
        state: RoutingState,
        *,
        skipped: list[Attempt] | None = None,
        chain: list[str] | None = None,
        stored: str | None = None,
    ) -> None:
        """``chain``: the names the request's chain is known by (its continuation's
        parent, conversation, prompt cache key); ``stored``: the candidate key the store
        says served the chain last, the hint when the table knows none of the names."""
        self.route = route
        self.capable = capable
        """Never empty: a request no candidate can serve is refused before it runs."""
        self.records: list[dict[str, Any]] = [a.record() for a in skipped or []]
        """Every attempt so far, as stored; the run's state holds this list."""
        self.hints: frozenset[str] = frozenset()
        """Backend names stages prefer (``route_hinting``): first within their tier."""
        self.remember: list[str] = []
        """The names this run's chain will be known by, once a round succeeds."""
        self._state = state
        self._round = 0
        self._every_open = False
        """The round was planned with every circuit open (all tried, none passed over)."""
        self._current: Attempt | None = None
        self._affine: str | None = None
        self._source: Literal["hit", "stored"] = "hit"
        """Where ``_affine`` came from: the table (or this run's own rounds), or the store."""
        if route.affinity:
            self._affine = state.affinity.lookup(chain) if chain else None
            if self._affine is None and stored is not None:
                self._affine, self._source = stored, "stored"
        self._affinity: Literal["hit", "stored", "miss"] | None = None
        self.served: Candidate | None = None
        """The candidate that served the last round."""
        self.made = state.clock()
        self.first_output: float | None = None
        """When the run's first delta arrived (the routing clock), once one has."""

    @property
    def first(self) -> Candidate:
        return self.capable[0]

    @property
    def min_output_tokens(self) -> int:
        """The least ``max_output_tokens`` a round may be sent: what every capable
        candidate's upstream takes (the largest of their least), since any of them may
        answer the round."""
        return max(c.backend.min_output_tokens for c in self.capable)

    def order(self) -> list[Candidate]:
        """Every capable candidate by tier, weighted within a tier (health aside)."""
        tiers: dict[int, list[Candidate]] = {}
        for candidate in self.capable:
            tiers.setdefault(candidate.priority, []).append(candidate)
        ordered: list[Candidate] = []
        for priority in sorted(tiers):
            tier = weighted_order(tiers[priority], self._state.rng)
            if self.hints:  # stable: the weighted order holds within each group
                tier.sort(key=lambda c: c.backend.name not in self.hints)
            ordered += tier
        return ordered

    def begin_round(self) -> list[Candidate]:
        """The candidates the next round may open, in order, at most ``max_attempts``."""
        self._round += 1
        ordered = self.order()
        health = self._state.health
        healthy = [c for c in ordered if health.available(c.key)]
        self._every_open = not healthy
        if healthy:
            for candidate in ordered:
                if candidate not in healthy:
                    self._skip(candidate, "circuit_open")
            chosen = healthy
        else:  # every circuit is open: the soonest to reopen first
            chosen = sorted(ordered, key=lambda c: health.reopens_at(c.key))
        return self._affine_first(chosen)[: self.route.max_attempts]

    def passed_over(self, candidate: Candidate) -> bool:
        """Whether the round, having tried a candidate before ``candidate``, passes it
        over: planned among the healthy, its circuit now lets nothing through (another
        run took its half-open probe meanwhile, or failures opened it). Concurrent runs
        plan their rounds together, so without this every one of them whose earlier
        candidates failed would probe a recovering server at once. Recorded as a skip."""
        if self._every_open or self._state.health.available(candidate.key):
            return False
        self._skip(candidate, "circuit_open")
        return True

    def _affine_first(self, chosen: list[Candidate]) -> list[Candidate]:
        self._affinity = None
        if self._affine is None:
            return chosen
        tier = [c for c in chosen if c.priority == chosen[0].priority]
        target = next((c for c in tier if c.key == self._affine), None)
        if target is None or not self._within_share(target, tier):
            self._affinity = "miss"
            return chosen
        self._affinity = self._source
        return [target, *(c for c in chosen if c is not target)]

    def _within_share(self, target: Candidate, tier: list[Candidate]) -> bool:
        in_flight = self._state.in_flight
        total = sum(in_flight[c.key] for c in tier)
        if total < LIGHT_LOAD * len(tier):
            return True
        share = target.weight / sum(c.weight for c in tier)
        return in_flight[target.key] / total <= share * (1 + self.route.affinity_tolerance)

    def open(self, candidate: Candidate) -> Attempt:
        attempt = Attempt(self.route.name, candidate.key, self._round, self._state.clock())
        attempt.affinity, self._affinity = self._affinity, None  # the round's first only
        self._state.health.opening(candidate.key)
        self._state.in_flight[candidate.key] += 1
        self._current = attempt
        return attempt

    @property
    def output_started(self) -> bool:
        """Whether a delta of the attempt under way reached the run."""
        return self._current is not None and self._current.first_byte_ms is not None

    def output(self) -> None:
        """The attempt's first delta reached the run: from here it cannot be retried, and
        its candidate's server answers (a probe's circuit closes now, not at its end)."""
        attempt = self._current
        assert attempt is not None
        now = self._state.clock()
        attempt.first_byte_ms = round((now - attempt.started) * 1000, 3)
        if self.first_output is None:
            self.first_output = now
        self._state.health.answered(attempt.candidate)

    @property
    def time_to_first_output(self) -> float | None:
        """Seconds from the plan's making (the run admitted) to the run's first delta."""
        return None if self.first_output is None else self.first_output - self.made

    def succeeded(self, attempt: Attempt, candidate: Candidate) -> None:
        self._end(attempt, candidate, "ok")
        self._state.health.succeeded(candidate.key)
        self._state.affinity.remember(self.remember, candidate.key)
        self._affine, self._source = candidate.key, "hit"  # the run's later rounds too
        self.served = candidate

    def failed(self, attempt: Attempt, candidate: Candidate, error: GatewayError) -> bool:
        """Record the failure; whether the round may go on to the next candidate."""
        after_output = attempt.first_byte_ms is not None
        self._end(attempt, candidate, "cut" if after_output else "failed", error.code or error.type)
        if unhealthy(error):  # the server's fault, not the request's
            self._state.health.failed(candidate.key, retry_after(error))
        else:
            self._state.health.released(candidate.key)
        return not after_output and recoverable(error)

    def abandoned(self, attempt: Attempt, candidate: Candidate) -> None:
        """The run was cancelled (or broke) during the attempt."""
        self._end(attempt, candidate, "cancelled")
        self._state.health.released(candidate.key)

    def _end(
        self,
        attempt: Attempt,
        candidate: Candidate,
        outcome: Literal["ok", "failed", "cut", "cancelled"],
        detail: str | None = None,
    ) -> None:
        in_flight = self._state.in_flight
        left = in_flight[candidate.key] - 1
        if left:
            in_flight[candidate.key] = left
        else:  # a catch-all's keys are the names clients send: none is kept at zero
            del in_flight[candidate.key]
        attempt.end(self._state.clock(), outcome, detail)
        self.records.append(attempt.record())

    def _skip(self, candidate: Candidate, reason: str) -> None:
        now = self._state.clock()
        attempt = Attempt(self.route.name, candidate.key, self._round, now, "skipped", reason)
        attempt.latency_ms = 0.0
        self.records.append(attempt.record())


def weighted_order(candidates: list[Candidate], rng: random.Random) -> list[Candidate]:
    """A random order in which each candidate comes first in proportion to its weight
    (Efraimidis-Spirakis: sort by ``u ** (1 / weight)``)."""
    if len(candidates) < 2:
        return list(candidates)
    keyed = [(rng.random() ** (1.0 / c.weight), i) for i, c in enumerate(candidates)]
    keyed.sort(reverse=True)
    return [candidates[i] for _, i in keyed]
