"""Candidate health: a passive circuit per candidate, fed by its attempts.

=========  =============================================================================
closed     serving; each failure of the server counts (:func:`.attempts.unhealthy`: not
           a model it lacks), a success resets the count
open       ``failure_threshold`` consecutive failures (or a ``Retry-After`` from the
           upstream) opened it: skipped while any healthy candidate remains, until the
           cool-down is over (``cooldown`` plus up to ``jitter`` of it, at random; a
           ``Retry-After`` longer than that is honoured as given, up to
           ``max_retry_after``)
half-open  the cool-down is over: the next attempt is the probe (one at a time); its
           first output closes the circuit (a long stream does not keep every other
           request off a server that is back until it ends), its failure before that
           opens it again
=========  =============================================================================

An attempt's first output (:meth:`HealthBoard.answered`) closes an open or half-open
circuit but keeps its failure count for the attempt's end to settle: a success resets
it, a failure (a cut part-way too) counts on from it, so a probe cut part-way opens the
circuit again at once when failures had opened it.

A candidate without a circuit is closed: a success drops its circuit. A catch-all's
candidate keys are the model names its clients send, so the board keeps at most
:data:`MAX_CIRCUITS` besides those of the configured candidates (``kept``, never dropped):
past it the oldest of the others is dropped, closed again.

The clock and the random source are injected, so tests step time by hand.
"""

from __future__ import annotations

import random
from collections.abc import Callable, Collection
from dataclasses import dataclass, replace
from typing import Final, Literal

State = Literal["closed", "open", "half_open"]

MAX_CIRCUITS: Final = 1024
"""Circuits kept besides the configured candidates'; past it the oldest goes. A
catch-all's candidate keys are the model names clients send, and a name failing during an
outage keeps its circuit until a success on it: without a bound, made-up names would pile
up for good."""


@dataclass(frozen=True, slots=True)
class HealthPolicy:
    failure_threshold: int = 3
    cooldown: float = 5.0
    jitter: float = 0.1
    max_retry_after: float = 60.0
    """The longest ``Retry-After`` honoured, in seconds (the SDKs' own bound): a longer
    one (a proxy's maintenance page asking a day) is taken as this."""


@dataclass(slots=True)
class Circuit:
    failures: int = 0
    open_until: float | None = None
    """None while closed."""
    probing: bool = False
    asked_until: float = 0.0
    """Until when the upstream asked not to be called (its ``Retry-After``)."""

    def state(self, now: float) -> State:
        if self.open_until is None:
            return "closed"
        return "open" if now < self.open_until else "half_open"


class HealthBoard:
    """Every candidate's circuit, by candidate key."""

    def __init__(
        self,
        policy: HealthPolicy | None = None,
        *,
        clock: Callable[[], float],
        rng: random.Random | None = None,
        max_circuits: int = MAX_CIRCUITS,
        kept: Collection[str] = (),
    ) -> None:
        """``kept``: the configured candidates' keys, whose circuits are never dropped (an
        open one closed again would send requests back to a server that failed, however
        many made-up names failed after it)."""
        self.policy = policy or HealthPolicy()
        self._max = max_circuits
        self._kept = frozenset(kept)
        self._clock = clock
        self._rng = rng or random.Random()
        self._circuits: dict[str, Circuit] = {}

    def __len__(self) -> int:
        return len(self._circuits)

    def state(self, key: str) -> State:
        circuit = self._circuits.get(key)
        return "closed" if circuit is None else circuit.state(self._clock())

    def available(self, key: str) -> bool:
        """Closed, or half-open with no probe under way."""
        circuit = self._circuits.get(key)
        if circuit is None:
            return True
        state = circuit.state(self._clock())
        return state == "closed" or (state == "half_open" and not circuit.probing)

    def reopens_at(self, key: str) -> float:
        """When an open circuit lets a probe through (0 for a closed one)."""
        circuit = self._circuits.get(key)
        return 0.0 if circuit is None or circuit.open_until is None else circuit.open_until

    def opening(self, key: str) -> None:
        """An attempt on ``key`` starts: a half-open circuit's is the probe."""
        circuit = self._circuits.get(key)
        if circuit is not None and circuit.state(self._clock()) == "half_open":
            circuit.probing = True

    def answered(self, key: str) -> None:
        """An attempt on ``key`` gave its first output: the server is up. An open or
        half-open circuit closes (a probe's wait is over); the count stays until the
        attempt ends."""
        circuit = self._circuits.get(key)
        if circuit is not None and circuit.open_until is not None:
            circuit.open_until = None
            circuit.probing = False

    def succeeded(self, key: str) -> None:
        self._circuits.pop(key, None)

    def probe_answered(self, key: str) -> None:
        """The active prober reached the backend: the circuit closes, unless the upstream
        asked for a pause that is not over (a rate limit is not lifted by a model list)."""
        circuit = self._circuits.get(key)
        if circuit is not None and self._clock() < circuit.asked_until:
            return
        self._circuits.pop(key, None)

    def failed(self, key: str, retry_after: float | None = None) -> None:
        circuit = self._circuits.get(key)
        if circuit is None:
            circuit = self._circuits[key] = Circuit()
            if len(self._circuits) > self._max + len(self._kept):  # the oldest other, closed
                del self._circuits[next(k for k in self._circuits if k not in self._kept)]
        now = self._clock()
        if retry_after is not None:
            retry_after = min(retry_after, self.policy.max_retry_after)
        circuit.failures += 1
        probe_failed = circuit.probing
        circuit.probing = False
        if probe_failed or circuit.failures >= self.policy.failure_threshold or retry_after:
            policy = self.policy
            cooldown = policy.cooldown * (1 + policy.jitter * self._rng.random())
            if probe_failed or circuit.failures >= policy.failure_threshold:
                wait = max(cooldown, retry_after or 0.0)
            else:  # below the threshold: the upstream's own word only
                wait = retry_after or 0.0
            circuit.open_until = now + wait
            if retry_after:
                circuit.asked_until = now + retry_after

    def adopt(self, previous: HealthBoard, keep: Callable[[str], bool]) -> None:
        """Take over ``previous``'s circuits whose key ``keep`` accepts (a reload's new
        board, from the superseded generation's), none of them probing: a probe under
        way reports to the board it started on."""
        for key, circuit in previous._circuits.items():
            if keep(key):
                self._circuits[key] = replace(circuit, probing=False)

    def released(self, key: str) -> None:
        """An attempt ended neither way (cancelled): a probe may be tried again."""
        circuit = self._circuits.get(key)
        if circuit is not None:
            circuit.probing = False
