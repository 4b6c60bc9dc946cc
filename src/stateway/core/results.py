"""What the gateway's commands answer (besides runs, responses and item pages)."""

from __future__ import annotations

from dataclasses import dataclass

from stateway.core.accounting import UsageBucket
from stateway.core.backend import Relay
from stateway.core.compaction.service import Compacted
from stateway.core.conversations.service import ConversationResult
from stateway.core.generations import ConfigStatus
from stateway.core.ports import ItemPage
from stateway.core.response import ResponseState
from stateway.core.routing.route import ListedModel
from stateway.core.runs import Run
from stateway.core.watch import Watch


@dataclass(slots=True, frozen=True)
class Deleted:
    id: str


@dataclass(slots=True, frozen=True)
class ModelList:
    models: list[ListedModel]


@dataclass(slots=True, frozen=True)
class Readiness:
    storage_error: str | None
    """None when storage answers and takes writes; else why not (the cause named)."""
    upstreams: dict[str, bool]
    """Backend name → whether its model server answered."""
    coordination_error: str | None = None
    """None when the shared coordination store (Redis) answers, or there is none."""
    shared_coordination: bool = False
    """Whether there is one (``[coordination] redis_url``)."""

    @property
    def ready(self) -> bool:
        """Ready to serve stored state; an upstream may be down and come back, and a
        Redis that is down fails only keyed requests and cross-process cancels (every
        replica shares it: failing readiness on all at once would take the whole service
        out of its load balancer)."""
        return self.storage_error is None


@dataclass(slots=True, frozen=True)
class TokenCount:
    input_tokens: int
    estimated: bool
    """True when the gateway estimated it (the upstream cannot count)."""
    cleared: int = 0
    """The estimated tokens the request's clearing edits took out of what was counted
    (:mod:`stateway.core.compaction.clearing`): added back, the count before them."""


@dataclass(slots=True, frozen=True)
class Noted:
    """What a :class:`~stateway.core.commands.SteerResponse` answers."""

    logged: bool
    """Whether its notice is in the run's log. False: the run has not announced itself
    yet, is finishing, or runs no more here (its caller numbers the notice on from the
    run's end)."""


Result = (
    Run
    | ResponseState
    | Deleted
    | ItemPage
    | ModelList
    | Readiness
    | ConversationResult
    | TokenCount
    | Compacted
    | Watch
    | Relay
    | ConfigStatus
    | list[UsageBucket]
    | Noted
    | None
)
