"""Planning a create: what a run and a count of its input share before either begins.

:meth:`Planner.plan` reads the context a request continues (a conversation's items, its
``previous_response_id`` chain's, a Messages thread's since its last compaction), runs
the route's request-side stages, resolves its tools, plans its routing over the
candidates able to serve it (the cache affinity of its chain first) and checks its
context against the upstream. :class:`~stateway.core.starting.RunStarter` then starts a
run on that plan, or counts the tokens its first round would send.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import Any

from stateway.core.backend import Backend
from stateway.core.commands import CreateResponse
from stateway.core.configuration_updates import updated_settings
from stateway.core.context import Prior, checked_context, load_prior, shown, unshown_types
from stateway.core.conversations.item_ids import check_not_held
from stateway.core.conversations.ports import ConversationItems
from stateway.core.conversations.service import Conversations
from stateway.core.errors import InvalidRequest
from stateway.core.generations import Generation
from stateway.core.items import Item
from stateway.core.ports import ResponseStore
from stateway.core.principal import Principal
from stateway.core.routing import Needs, Plan, Route
from stateway.core.routing.affinity import chain_names
from stateway.core.stages.shaped import shaped
from stateway.core.threads import check_continued, thread_items
from stateway.core.tools.choice import check_tool_choice, context_tools, names_tools
from stateway.core.tools.toolset import GatewayTools, Toolset
from stateway.core.tools.withheld import unoffered

log = logging.getLogger(__name__)


@dataclass(slots=True)
class Planned:
    """A request as planned: its routing plan (the stages' hints on it) and tools (routed
    to its first candidate), the items before its input, and its context."""

    plan: Plan
    toolset: Toolset
    prior: Prior
    """The items before its input (a thread's, as it continues)."""
    checked: list[Item]
    """Its context, checked against the upstream: as it is stored."""
    context: list[Item]
    """Its context as the model is sent it: no item offers what the stages withheld, and
    none is of a type its upstream has no place for (:func:`.context.shown`)."""
    conversation: ConversationItems | None


class Planner:
    """Plans the creates of one gateway (its store and conversations) on any generation."""

    def __init__(self, store: ResponseStore, conversations: Callable[[str], Conversations]) -> None:
        """``conversations(param)``: the conversations served, or a 404 naming ``param``."""
        self._store = store
        self._conversations = conversations

    async def plan(
        self,
        principal: Principal,
        command: CreateResponse,
        generation: Generation,
        *,
        counting: bool = False,
    ) -> Planned:
        """``command`` planned on ``generation`` (changed in place: its settings as the
        stages and its context's configuration updates leave them; a run's tools as
        echoed and stored, without secrets). ``counting``: for a count of its input,
        which no context window refuses, and which nothing echoes or stores."""
        router = generation.router
        route = router.resolve(command.model)
        choice, declared = command.settings.tool_choice, command.settings.tools  # as sent
        conversation = await self._conversation(principal, command)
        items = None if conversation is None else conversation.items
        prior = await load_prior(self._store, principal.tenant_id, command, items)
        staged = await shaped(route, command, prior.items, conversation, counting=counting)
        toolset = _toolset(generation.loop.tools, route, command)
        # offered by no item; a call of one is answered here, never the client's
        toolset.withheld = staged.withheld
        if not counting and toolset.public != command.settings.tools:  # echoed, stored
            command.settings = replace(command.settings, tools=toolset.public)
        prior = _threaded(command, prior)
        chain = chain_names(
            principal.tenant_id,
            command.previous_response_id,
            command.conversation_id,
            command.settings.prompt_cache_key,
            command.session,
        )
        stored = prior.served_by if conversation is None else conversation.served_by
        # the context's configuration updates hold over the request's own settings
        command.settings = updated_settings(command.settings, prior.items, command.input)
        needs = Needs.of(command, prior, toolset, counting=counting)
        plan = router.plan(route, needs, chain, stored)
        backend = plan.first.backend  # its candidates all carry unmodelled types, or none
        unsent = toolset.route(backend)
        plan.hints = staged.hints
        context = checked = checked_context(prior, command.input)
        _check_continued_choice(command, choice, declared, context)
        unread = unshown_types(context, backend) if needs.unmodelled_items else []
        if unread:  # the model's view: no item its upstream API has no place for
            context = shown(context, backend)
            if not (context or command.instructions or counting or not command.generate):
                raise _nothing_shown(backend, unread)
        if unsent or unread:
            _log_unshown(backend, unsent, unread)
        if toolset.withheld:  # the model's view: no item offers what the stages withheld
            context = unoffered(context, toolset.withheld)
        return Planned(plan, toolset, prior, checked, context, conversation)

    async def _conversation(
        self, principal: Principal, command: CreateResponse
    ) -> ConversationItems | None:
        """The context of the conversation ``command`` continues, if it continues one (a
        Messages thread's turn refused here as it would be run)."""
        if command.conversation_id is None:
            return None
        conversations = self._conversations("conversation")
        conversation = await conversations.context(principal.tenant_id, command.conversation_id)
        if command.thread is not None:
            check_continued(command.thread, conversation)
        else:  # a Messages turn names no items by id: one repeated is renamed when stored
            check_not_held(conversation.items, command.input, "input")
        return conversation


def _log_unshown(backend: Backend, tools: list[Item], types: list[str]) -> None:
    """Say once per request what ``backend``'s model is not shown, so that an operator can
    tell why a tool went unused: the tools, and the input items, of types the gateway
    does not model (:meth:`.Toolset.route`, :func:`.context.shown`)."""
    named = [f"tool type '{kind}'" for kind in dict.fromkeys(str(t.get("type")) for t in tools)]
    named += [f"input item type '{kind}'" for kind in types]
    log.info(
        "backend %s: not shown to its model (its upstream API carries no such type): %s",
        backend.name,
        ", ".join(named),
    )


def _nothing_shown(backend: Backend, types: list[str]) -> InvalidRequest:
    """The 400 of a request ``backend``'s model would be sent nothing of: its context
    only items of types the gateway does not model, and no instructions (as the decoder
    refuses a request with nothing to respond to, naming what it holds instead of sending
    the upstream no message)."""
    named = ", ".join(f"'{kind}'" for kind in types)
    return InvalidRequest(
        f"There is nothing to respond to: the model of backend '{backend.name}' is not "
        f"shown items of types the gateway does not model ({named}; its upstream API "
        "carries no such type), and the input holds no other.",
        param="input",
        code="missing_required_parameter",
    )


def _threaded(command: CreateResponse, prior: Prior) -> Prior:
    """The items before a Messages thread's turn: its system first, then its items since
    its last compaction; any other request's ``prior`` as it is."""
    thread = command.thread
    if thread is None:
        return prior
    items = (thread.system or []) + thread_items(prior.items, command.input)
    return Prior(items, prior.source, prior.served_by)


def _toolset(tools: GatewayTools, route: Route, command: CreateResponse) -> Toolset:
    """The request's tools, resolved; with the route's ``gateway_tools`` for a client that
    cannot declare them (``hidden_rounds``: Chat Completions, Messages)."""
    toolset = tools.resolve(command.settings.tools)
    if command.hidden_rounds and route.gateway_tools is not None:
        toolset = toolset.joined(route.gateway_tools)
    return toolset


def _check_continued_choice(
    command: CreateResponse,
    choice: str | dict[str, Any],
    declared: list[Item],
    context: list[Item],
) -> None:
    """A request continuing earlier turns has its tool choice judged here, against its
    declared tools and those the items of its whole context offer (earlier turns'
    ``additional_tools`` and ``tool_search_output`` among them); a first turn's was judged
    as it was decoded (:mod:`stateway.core.tools.choice`)."""
    continued = command.previous_response_id is not None or command.conversation_id is not None
    if continued and names_tools(choice):
        check_tool_choice(choice, declared + context_tools(context))
