"""A request as its route's stages leave it: the request-side points run on it, and
what they withheld.

A run (:meth:`~stateway.core.starting.RunStarter.admit`) and a count of its input
(:meth:`~stateway.core.starting.RunStarter.count`, ``/v1/responses/input_tokens`` and
Messages' ``count_tokens``) take a request through here alike (planned by
:meth:`~stateway.core.planning.Planner.plan`), so that a count counts
what a run would send: the instructions and input the stages left, without the tools
they withheld, whether declared or offered by the context's items.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from stateway.core.commands import CreateResponse
from stateway.core.conversations.ports import ConversationItems
from stateway.core.items import Item
from stateway.core.routing import Route
from stateway.core.stages.chain import before_planning
from stateway.core.tools.context_offers import context_added
from stateway.core.tools.withheld import withheld_names


@dataclass(slots=True, frozen=True)
class Shaped:
    """What the stages said of a request besides the changes they made to it."""

    hints: frozenset[str] = frozenset()
    """Backend names to try first (``route_hinting``)."""
    withheld: frozenset[str] = field(default_factory=frozenset)
    """The model-visible names of the client's tools they withheld
    (:mod:`stateway.core.tools.withheld`)."""


async def shaped(
    route: Route,
    command: CreateResponse,
    prior: list[Item],
    conversation: ConversationItems | None = None,
    *,
    counting: bool = False,
) -> Shaped:
    """Run ``route``'s request-side stages on ``command`` (changed in place), whose
    context holds the ``prior`` items (a conversation's, when it continues one) before
    its input. The stages are shown every tool the model would be offered: the declared
    ones, and those of the context's items (:func:`before_planning`); ``counting``: the
    request is only counted (:attr:`~stateway.core.stages.context.StageContext.counting`)."""
    if not route.stages:
        return Shaped()
    first = command.previous_response_id is None and (
        conversation is None or conversation.next_position == 0
    )
    declared = command.settings.tools  # as sent
    earlier = context_added(declared, prior + command.input)
    context = await before_planning(
        route.stages, route.name, command, first_turn=first, earlier=earlier, counting=counting
    )
    return Shaped(frozenset(context.hints), withheld_names(declared + earlier, context.tools))
