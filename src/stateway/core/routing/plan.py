"""A run's routing plan: the candidates able to serve it, their order each round, and the
record of every attempt.

Each inference round (the tool loop's included) orders the capable candidates afresh:
``priority`` tiers first to last, and within a tier a weighted random order (the first
place goes to each candidate in proportion to its ``weight``). The round opens them in
that order, at most ``max_attempts``; a recoverable failure before the round's first
delta moves on to the next (:func:`.attempts.recoverable`), anything else ends the
round. Once a delta has reached the run nothing is sent again, to any candidate.
"""

from __future__ import annotations

import random
from collections.abc import Callable
from typing import Any

from stateway.core.errors import GatewayError
from stateway.core.routing.attempts import Attempt, recoverable
from stateway.core.routing.route import Candidate, Route


class Plan:
    def __init__(
        self,
        route: Route,
        capable: list[Candidate],
        *,
        rng: random.Random,
        clock: Callable[[], float],
        skipped: list[Attempt] | None = None,
    ) -> None:
        self.route = route
        self.capable = capable
        """Never empty: a request no candidate can serve is refused before it runs."""
        self.records: list[dict[str, Any]] = [a.record() for a in skipped or []]
        """Every attempt so far, as stored; the run's state holds this list."""
        self._rng = rng
        self._clock = clock
        self._round = 0
        self._current: Attempt | None = None
        self.served: Candidate | None = None
        """The candidate that served the last round."""

    @property
    def first(self) -> Candidate:
        return self.capable[0]

    def order(self) -> list[Candidate]:
        """This round's candidates, in the order they are tried (all of them)."""
        tiers: dict[int, list[Candidate]] = {}
        for candidate in self.capable:
            tiers.setdefault(candidate.priority, []).append(candidate)
        ordered: list[Candidate] = []
        for priority in sorted(tiers):
            ordered += weighted_order(tiers[priority], self._rng)
        return ordered

    def begin_round(self) -> list[Candidate]:
        """The candidates the next round may open, at most ``max_attempts``."""
        self._round += 1
        return self.order()[: self.route.max_attempts]

    def open(self, candidate: Candidate) -> Attempt:
        self._current = Attempt(self.route.name, candidate.key, self._round, self._clock())
        return self._current

    @property
    def output_started(self) -> bool:
        """Whether a delta of the attempt under way reached the run."""
        return self._current is not None and self._current.first_byte_ms is not None

    def output(self) -> None:
        """The attempt's first delta reached the run: from here it cannot be retried."""
        attempt = self._current
        assert attempt is not None
        attempt.first_byte_ms = round((self._clock() - attempt.started) * 1000, 3)

    def succeeded(self, attempt: Attempt, candidate: Candidate) -> None:
        attempt.end(self._clock(), "ok")
        self.records.append(attempt.record())
        self.served = candidate

    def failed(self, attempt: Attempt, candidate: Candidate, error: GatewayError) -> bool:
        """Record the failure; whether the round may go on to the next candidate."""
        after_output = attempt.first_byte_ms is not None
        attempt.end(self._clock(), "cut" if after_output else "failed", error.code or error.type)
        self.records.append(attempt.record())
        return not after_output and recoverable(error)

    def abandoned(self, attempt: Attempt) -> None:
        """The run was cancelled (or broke) during the attempt."""
        attempt.end(self._clock(), "cancelled")
        self.records.append(attempt.record())


def weighted_order(candidates: list[Candidate], rng: random.Random) -> list[Candidate]:
    """A random order in which each candidate comes first in proportion to its weight
    (Efraimidis-Spirakis: sort by ``u ** (1 / weight)``)."""
    if len(candidates) < 2:
        return list(candidates)
    keyed = [(rng.random() ** (1.0 / c.weight), i) for i, c in enumerate(candidates)]
    keyed.sort(reverse=True)
    return [candidates[i] for _, i in keyed]
