"""Attempts: one candidate opened for one inference round, and how it ended.

Every attempt is recorded on the response's stored record (``attempts``: admin-visible,
never in the public Response object) and logged. A candidate skipped before it was
opened (incapable, or its circuit open) is recorded too, with the reason.

Which failures move on to the next candidate is decided here, by error class, status
and code only: a recoverable failure is one where another model server may well answer
(connect errors, timeouts before the first byte and an upstream's 408, its refusal of
the gateway's credential (401 to 403), 404, 413, 429, 5xx, a context too long
for the server's window, the gateway's own full queue for that server, an upstream error
event before any output). A request the upstream refused as such (another 4xx) or an
answer too large would fail the same way anywhere. A 404 is the candidate's model
missing from a server that is up (a served model name that does not match, a URL without
its ``/v1``), a 413 a body over that server's own size limit (often a proxy's in front of
it: nginx refuses bodies over 1 MB by default), and ``context_length_exceeded`` a window
smaller than the request (one not declared as the backend's ``context_window``): each
moves on without counting against the candidate's circuit (:func:`unhealthy`), and so
does the gateway's own full queue.
When every candidate refuses a context too long, the client gets the last refusal
(``context_length_exceeded``, which Codex acts on by compacting); a 404 or 413 after
another candidate's server failed gives way to that failure (:func:`told`).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC
from email.utils import parsedate_to_datetime
from typing import Any, Literal

from stateway.core.errors import (
    CONTEXT_LENGTH_EXCEEDED,
    IMAGE_INPUT_UNSUPPORTED,
    MAX_RETRY_WAIT,
    GatewayError,
    Overloaded,
    UpstreamError,
    UpstreamRejected,
    UpstreamResponseTooLarge,
)

log = logging.getLogger("stateway.routing")

Outcome = Literal["ok", "failed", "cut", "cancelled", "skipped"]
_LEVELS = {"ok": logging.DEBUG, "cancelled": logging.INFO}
"""How an attempt's end is logged; other outcomes (a failure, a cut) are WARNINGs. An
answered attempt is the hot path: DEBUG (a formatted INFO record per request cost about
6% of the gateway's CPU at c=32). A cancelled one is normal operation, INFO: its run's
client left, or it was deleted, cancelled or shut down (a crash is logged by the run)."""
MODEL_NOT_SERVED = 404
"""An upstream's status for a model it does not serve (:func:`recoverable`)."""
BODY_TOO_LARGE = 413
"""An upstream's status for a body over its size limit, which another server's may not be."""
_UP_BUT_REFUSING = frozenset({MODEL_NOT_SERVED, BODY_TOO_LARGE})


def recoverable(error: BaseException) -> bool:
    """Whether another candidate may serve the round ``error`` ended before any output: an
    upstream's refusal of a context too long is one, since the next candidate may have a
    larger window (one not declared as ``context_window``, which the gateway would have
    checked before asking), and so is a text-only model's refusal of an image (the next
    may see: one whose ``images`` capability is declared false is never asked)."""
    if isinstance(error, UpstreamRejected):
        return error.status in (*_UP_BUT_REFUSING, 429) or _model_limit(error)
    if isinstance(error, UpstreamResponseTooLarge):
        return False
    return isinstance(error, UpstreamError | Overloaded)


def unhealthy(error: BaseException) -> bool:
    """Whether ``error`` counts against its candidate's circuit: a recoverable failure of
    the server, not a model the server (which answered) does not have or a context too
    long for its window or a body over its size limit, nor the gateway's own queue for
    it being full (the server is busy with the calls it has, not failing)."""
    if isinstance(error, UpstreamRejected) and (
        error.status in _UP_BUT_REFUSING or _model_limit(error)
    ):
        return False
    return not isinstance(error, Overloaded) and recoverable(error)


def told(earlier: GatewayError | None, latest: GatewayError) -> GatewayError:
    """The error a round answers with when its candidates so far failed, ``earlier``
    the one it would have answered with before ``latest``: the last, unless that is a
    refusal of a server that is up saying nothing of the route (a model it lacks, a body
    over its own size limit) after a failure of another's server. Told a 404, a client
    would take its model for one that does not exist, and not retry. A refusal the
    client acts on (a context too long, which Codex compacts; an image refused) is
    still told. It is :attr:`~stateway.core.errors.GatewayError.retryable` when any of
    them may pass: the same request may find that candidate's server back."""
    if earlier is None:
        return latest
    chosen = earlier if _server_specific(latest) and not _server_specific(earlier) else latest
    if _may_pass(earlier) or _may_pass(latest):
        chosen.told_retryable(True)
        if waits_past_retries(chosen):  # its server's wait: another may pass sooner
            del chosen.headers["Retry-After"]
    return chosen


def _may_pass(error: GatewayError) -> bool:
    """Whether the same request may be answered otherwise later: a failure the SDKs
    retry (408, 409, 429, 5xx) that is :attr:`~stateway.core.errors.GatewayError.retryable`
    (not a 404 or a 400, which the same server gives again)."""
    return error.retryable and (error.status >= 500 or error.status in (408, 409, 429))


def _server_specific(error: GatewayError) -> bool:
    return (
        isinstance(error, UpstreamRejected)
        and error.status in _UP_BUT_REFUSING
        and not _model_limit(error)
    )


def _model_limit(error: UpstreamRejected) -> bool:
    """A refusal of what the model cannot take, which another model may: a context too
    long for its window, or an image a text-only model refuses."""
    return error.code in _MODEL_LIMITS


_MODEL_LIMITS = frozenset({CONTEXT_LENGTH_EXCEEDED, IMAGE_INPUT_UNSUPPORTED})


def waits_past_retries(error: GatewayError) -> bool:
    """Whether ``error`` asks a client to wait longer than the SDKs retry after
    (:data:`~stateway.core.errors.MAX_RETRY_WAIT`): an upstream's asking so
    is passed on as an answer not to retry."""
    wait = retry_after(error)
    return wait is not None and wait > MAX_RETRY_WAIT


def retry_after(error: BaseException, now: Callable[[], float] = time.time) -> float | None:
    """Seconds an upstream asked to be left alone: ``Retry-After`` in delta-seconds, or an
    HTTP-date (the seconds from ``now``, wall-clock time, until it; none once it is past)."""
    if not isinstance(error, GatewayError):
        return None
    value = error.headers.get("Retry-After", "")
    if value.isdigit():
        return float(value)
    try:
        when = parsedate_to_datetime(value)
    except (TypeError, ValueError, IndexError):
        return None
    if when.tzinfo is None:  # an HTTP-date is GMT
        when = when.replace(tzinfo=UTC)
    seconds = when.timestamp() - now()
    return seconds if seconds > 0 else None


@dataclass(slots=True)
class Attempt:
    route: str
    candidate: str
    """``backend/model``."""
    round: int
    started: float
    outcome: Outcome = "failed"
    detail: str | None = None
    """The error code of a failure, or why a candidate was skipped."""
    latency_ms: float | None = None
    first_byte_ms: float | None = None
    """Until the first delta reached the run; None when none did."""
    affinity: Literal["hit", "stored", "miss"] | None = None
    """How the round's first attempt met the chain's affinity hint (:mod:`.plan`)."""

    def record(self) -> dict[str, Any]:
        backend, _, model = self.candidate.partition("/")
        record: dict[str, Any] = {
            "backend": backend,
            "model": model,
            "round": self.round,
            "outcome": self.outcome,
            "detail": self.detail,
            "latency_ms": self.latency_ms,
            "first_byte_ms": self.first_byte_ms,
        }
        if self.affinity is not None:
            record["affinity"] = self.affinity
        return record

    def end(self, now: float, outcome: Outcome, detail: str | None = None) -> None:
        self.outcome, self.detail = outcome, detail
        self.latency_ms = round((now - self.started) * 1000, 3)
        level = _LEVELS.get(outcome, logging.WARNING)
        if not log.isEnabledFor(level):
            return
        log.log(
            level,
            "route %s round %d attempt %s: %s%s latency_ms=%s first_byte_ms=%s affinity=%s",
            self.route,
            self.round,
            self.candidate,
            outcome,
            f" ({detail})" if detail else "",
            self.latency_ms,
            self.first_byte_ms,
            self.affinity or "-",
        )


def log_relayed(
    route: str, candidate: str, outcome: Outcome, detail: str | None, status: int | None
) -> None:
    """Log how a relayed answer's one attempt (a Chat Completions request forwarded
    untouched) ended, at an attempt's levels: its upstream's ``status`` (None when it never
    answered) stands for the timings a relay does not take."""
    level = _LEVELS.get(outcome, logging.WARNING)
    if not log.isEnabledFor(level):
        return
    log.log(
        level,
        "route %s relayed attempt %s: %s%s status=%s",
        route,
        candidate,
        outcome,
        f" ({detail})" if detail else "",
        status if status is not None else "-",
    )
