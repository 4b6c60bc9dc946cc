"""A stored run's in-progress row, and the announcement that waits for it.

A stream's ``response.created`` hands its client an id: the row must exist by then. The
row's write runs while the first round's upstream request starts (:class:`Row`), and the
run is announced once it is committed, or at the first output or the end, whichever
comes first, each of them waiting for the row.
"""

from __future__ import annotations

import asyncio

from stateway.core import events as ev
from stateway.core.runs import Run

Row = asyncio.Future[None]
"""The write of a stored run's in-progress row (with its input), under way while the first
round's upstream request starts; ``response.created`` waits for it."""


async def durable(row: Row | None) -> None:
    """Wait for the in-progress row (shielded: a cancelled run still needs it written)."""
    if row is not None:
        await asyncio.shield(row)


def written(row: Row | None) -> bool:
    """Whether the in-progress row is in the store (its write done and committed)."""
    return row is not None and row.done() and not row.cancelled() and row.exception() is None


def announce(run: Run) -> None:
    """Emit ``response.created`` and ``response.in_progress``, once."""
    if not run.events:
        run.emit(ev.ResponseCreated(run.state))
        run.emit(ev.ResponseInProgress(run.state))


def announce_once_durable(run: Run, row: Row) -> None:
    """Announce the run as soon as its row is committed, while the upstream works; the
    first output or the end announces it instead if they come first."""
    if not row.cancelled() and row.exception() is None:
        announce(run)
