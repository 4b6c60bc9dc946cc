"""Token accounting: usage by tenant, model and day, from stored responses.

What ``GET /v1/usage`` answers. Every stored response counts, whatever its status and
whether it was deleted since (its tokens were spent all the same); ``store: false``
responses were never stored and do not. Days are UTC; ``model`` is the name the client
asked for. The :class:`UsageLedger` port runs it as one aggregate query; the
:class:`UsageBackfill` port fills in what it reads of the responses stored before it read
columns, which every sweep asks it to (:mod:`stateway.core.retention`).
"""

from __future__ import annotations

import datetime
from dataclasses import dataclass
from typing import Protocol

from stateway.core.commands import GetUsage


@dataclass(slots=True, frozen=True)
class UsageBucket:
    tenant_id: str
    model: str
    day: datetime.date
    """The UTC day the responses were created on."""
    responses: int
    input_tokens: int
    output_tokens: int

    @property
    def total_tokens(self) -> int:
        return self.input_tokens + self.output_tokens


class UsageLedger(Protocol):
    async def usage(self, query: GetUsage) -> list[UsageBucket]:
        """Stored responses' usage summed by tenant, model and day, ordered by day,
        tenant, model. Raises :class:`~stateway.core.errors.StorageError`."""
        ...


class UsageBackfill(Protocol):
    async def fill(self, limit: int) -> int:
        """In one transaction, fill in what the usage query reads of at most ``limit``
        finished responses stored without it (by an earlier release); how many were. Raises
        :class:`~stateway.core.errors.StorageError`."""
        ...
