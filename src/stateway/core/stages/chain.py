"""A route's stages, run in order at each point under their ``on_error`` policy.

``open``: a failing stage is logged and skipped (a mutation it left invalid is undone).
``closed``: the call fails: a :class:`~stateway.core.errors.GatewayError` the stage
raised is answered as it is (a deliberate 4xx), anything else as 500 ``stage_failed``
naming the stage. Nothing a stage raises crashes a run. After each mutating point the
command is re-validated (:func:`check_command`); an invalid result is the stage's error.
"""

from __future__ import annotations

import copy
import inspect
import logging
from dataclasses import dataclass, replace
from typing import Any, Literal

from stateway.core.commands import CreateResponse
from stateway.core.errors import GatewayError
from stateway.core.items import Item
from stateway.core.stages.context import MUTATING, StageContext

log = logging.getLogger(__name__)


class StageFailed(GatewayError):
    status = 500
    type = "server_error"
    code = "stage_failed"


@dataclass(frozen=True, slots=True)
class Stage:
    name: str
    impl: Any
    """The object the entry point's factory built."""
    on_error: Literal["open", "closed"] = "closed"

    def handles(self, point: str) -> bool:
        """Whether the stage has a method for ``point``."""
        return callable(getattr(self.impl, point, None))


class StageChain:
    def __init__(self, stages: list[Stage]) -> None:
        self.stages = stages

    def __bool__(self) -> bool:
        return bool(self.stages)

    async def run(self, context: StageContext) -> None:
        """Run every stage handling ``context.point``, in order."""
        for stage in self.stages:
            if stage.handles(context.point):
                await self._one(stage, context)

    async def _one(self, stage: Stage, context: StageContext) -> None:
        command = context.command if context.point in MUTATING else None
        saved = None if command is None else _snapshot(command, context)
        try:
            result = getattr(stage.impl, context.point)(context)
            if inspect.isawaitable(result):
                await result
            if command is not None:
                check_command(command, context.tools)
        except Exception as exc:  # noqa: BLE001 - foreign code: its policy decides
            if command is not None and saved is not None:
                _restore(command, context, saved)
            self._failed(stage, context.point, exc)

    def _failed(self, stage: Stage, point: str, exc: Exception) -> None:
        if stage.on_error == "open":
            log.warning("stage %s failed at %s (fail-open, skipped): %r", stage.name, point, exc)
            return
        log.warning("stage %s failed at %s (fail-closed): %r", stage.name, point, exc)
        if isinstance(exc, GatewayError):
            raise exc
        raise StageFailed(f"Stage '{stage.name}' failed at {point}.") from exc


def check_command(command: CreateResponse, tools: list[Any]) -> None:
    """Raise :class:`ValueError` when a stage left the command unusable."""
    settings = command.settings
    if not isinstance(command.input, list) or not all(
        isinstance(i, dict) and isinstance(i.get("type"), str) for i in command.input
    ):
        raise ValueError("input must stay a list of items with a type")
    if command.instructions is not None and not isinstance(command.instructions, str):
        raise ValueError("instructions must stay text")
    limit = settings.max_output_tokens
    if limit is not None and (not isinstance(limit, int) or isinstance(limit, bool) or limit < 1):
        raise ValueError("max_output_tokens must stay a positive integer")
    if not all(isinstance(t, dict) and isinstance(t.get("type"), str) for t in tools):
        raise ValueError("tools must stay a list of tools with a type")
    metadata = settings.metadata
    if not isinstance(metadata, dict) or not all(
        isinstance(k, str) and isinstance(v, str) for k, v in metadata.items()
    ):
        raise ValueError("metadata must stay a map of strings")


def _snapshot(command: CreateResponse, context: StageContext) -> tuple[Any, ...]:
    return (
        command.instructions,
        list(command.input),
        copy.copy(command.settings),
        list(context.tools),
        dict(command.settings.metadata),
    )


def _restore(command: CreateResponse, context: StageContext, saved: tuple[Any, ...]) -> None:
    command.instructions, command.input, command.settings, context.tools, metadata = saved
    command.settings.metadata = metadata


async def before_planning(
    chain: StageChain,
    route: str,
    command: CreateResponse,
    *,
    first_turn: bool,
    earlier: list[Item] | None = None,
    counting: bool = False,
) -> StageContext:
    """Run the request-side points on ``command`` (mutated in place); the context, whose
    ``hints`` the plan takes and whose ``tools`` are all the stages left. The stages are
    shown the declared tools, then the ``earlier`` ones, those the context's items offer
    (:func:`~stateway.core.tools.context_offers.context_added`). The tools they leave become the
    command's, but for the earlier ones left as they were (equal, though a stage may
    hand back copies): no declaration of this request's (to echo or store), the context's
    items go on offering them. ``counting``: for a count of its input
    (:attr:`StageContext.counting`)."""
    earlier = earlier or []
    shown = [*command.settings.tools, *earlier]
    context = StageContext("submit_request", route, command, tools=list(shown), counting=counting)
    points = ["session_open"] if first_turn else []
    points += ["submit_request", "tool_catalog_filter", "request_shaping", "route_hinting"]
    for point in points:
        context.point = point
        await chain.run(context)
    if context.tools != shown:
        tools = [tool for tool in context.tools if tool not in earlier]
        command.settings = replace(command.settings, tools=tools)
    return context
