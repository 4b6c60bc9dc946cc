"""``Gateway.execute``: the one command handler every surface calls."""

from __future__ import annotations

import asyncio
import logging
import time
from contextlib import AbstractAsyncContextManager
from dataclasses import replace
from functools import partial
from typing import overload

from stateway.core import background
from stateway.core import events as ev
from stateway.core.commands import (
    AddConversationItems,
    CancelResponse,
    CheckReadiness,
    Command,
    CompactResponse,
    CountTokens,
    CreateConversation,
    CreateResponse,
    DeleteConversation,
    DeleteConversationItem,
    DeleteResponse,
    ForwardChat,
    GetConfigStatus,
    GetConversation,
    GetConversationItem,
    GetResponse,
    ListConversationItems,
    ListInputItems,
    ListModels,
    Principal,
    ReloadConfig,
    UpdateConversation,
    WatchResponse,
)
from stateway.core.compaction.service import (
    Compacted,
    Compaction,
    CompactionStep,
    context_window,
)
from stateway.core.context import check_call_outputs, load_prior
from stateway.core.conversations.ports import Conversation, ConversationItems, ConversationStore
from stateway.core.conversations.service import (
    ConversationDeleted,
    Conversations,
)
from stateway.core.coordination import CancelSignals, CommandKey, CommandResults
from stateway.core.errors import (
    GatewayError,
    InternalError,
    InvalidRequest,
    NotFound,
    ServerShuttingDown,
    StorageError,
)
from stateway.core.exactly_once import Attempt, attempt
from stateway.core.generations import ConfigStatus, Generation, Generations, HeldRelay, Reloads
from stateway.core.ids import new_id
from stateway.core.inference import InferenceRequest
from stateway.core.items import Item
from stateway.core.journal import EventEncoder, RunJournal
from stateway.core.loop import Loop
from stateway.core.ports import (
    Backend,
    ItemPage,
    Relay,
    ResponseStore,
    Sealer,
    TokenCounter,
)
from stateway.core.response import UNFINISHED, ResponseState, load_state
from stateway.core.results import Deleted, ModelList, Readiness, Result, TokenCount
from stateway.core.routing import Needs, Plan, Route, Router
from stateway.core.routing.affinity import chain_names
from stateway.core.runs import CancelReason, Run, RunRegistry
from stateway.core.stages.chain import before_planning
from stateway.core.token_estimate import estimate_tokens
from stateway.core.tools.catalog import Catalog
from stateway.core.tools.toolset import Toolset
from stateway.core.watch import Watch

log = logging.getLogger(__name__)

MAX_COMMAND_ID = 255
"""The longest command id (``Idempotency-Key``, ``command_id``) accepted."""


class Gateway:
    def __init__(
        self,
        store: ResponseStore,
        router: Router,
        loop: Loop,
        runs: RunRegistry,
        *,
        conversations: ConversationStore | None = None,
        encoder: EventEncoder | None = None,
        results: CommandResults | None = None,
        signals: CancelSignals | None = None,
        sealer: Sealer | None = None,
    ) -> None:
        """``router`` and ``loop`` are config generation 1 (:mod:`.generations`).
        Without ``conversations`` no conversation exists: each one named is a 404.
        Without ``encoder`` (the wire of background runs' event logs) background responses
        are refused. Without ``results`` command ids are refused; without shared
        ``signals`` another process's background run cannot be cancelled from here.
        ``sealer`` seals and opens ``encrypted_content`` (the composition root always
        gives one; without it compaction fails and sealed input items are refused)."""
        self._store = store
        self.generations = Generations(router, loop)
        """Each admission reads the current generation and holds it to its end."""
        self.reloads: Reloads | None = None
        """Set by the composition root: reloading serves the admin commands."""
        self.runs = runs
        self._conversations = None if conversations is None else Conversations(conversations)
        self._encoder = encoder
        self._results = results
        self._signals = signals
        self._compaction = Compaction(store, sealer)

    def once(
        self, principal: Principal, command_id: str, digest: str, *, param: str
    ) -> AbstractAsyncContextManager[Attempt]:
        """Run a command sent with ``command_id`` at most once (see
        :mod:`stateway.core.exactly_once`); ``digest`` fingerprints its request and
        ``param`` names the id in errors."""
        if self._results is None:
            raise InvalidRequest(
                "Command ids are not served by this gateway.", param=param, code="unsupported"
            )
        if not command_id or len(command_id) > MAX_COMMAND_ID:
            raise InvalidRequest(
                f"'{param}' must be 1 to {MAX_COMMAND_ID} characters.",
                param=param,
                code="invalid_value",
            )
        key = CommandKey(principal.tenant_id, principal.subject, command_id)
        return attempt(self._results, key, digest, param=param)

    def cancel_signalled(self, tenant_id: str, response_id: str) -> None:
        """A cancel that another process sent for a background run (of this process)."""
        background.cancel_signalled(self.runs, tenant_id, response_id)

    @overload
    async def execute(self, principal: Principal, command: CreateResponse) -> Run: ...
    @overload
    async def execute(self, principal: Principal, command: GetResponse) -> ResponseState: ...
    @overload
    async def execute(self, principal: Principal, command: DeleteResponse) -> Deleted: ...
    @overload
    async def execute(self, principal: Principal, command: ListInputItems) -> ItemPage: ...
    @overload
    async def execute(self, principal: Principal, command: ListModels) -> ModelList: ...
    @overload
    async def execute(self, principal: Principal, command: CheckReadiness) -> Readiness: ...
    @overload
    async def execute(
        self,
        principal: Principal,
        command: CreateConversation | GetConversation | UpdateConversation | DeleteConversationItem,
    ) -> Conversation: ...
    @overload
    async def execute(
        self, principal: Principal, command: DeleteConversation
    ) -> ConversationDeleted: ...
    @overload
    async def execute(
        self, principal: Principal, command: AddConversationItems | ListConversationItems
    ) -> ItemPage: ...
    @overload
    async def execute(self, principal: Principal, command: GetConversationItem) -> Item: ...
    @overload
    async def execute(self, principal: Principal, command: CountTokens) -> TokenCount: ...
    @overload
    async def execute(self, principal: Principal, command: CancelResponse) -> ResponseState: ...
    @overload
    async def execute(self, principal: Principal, command: WatchResponse) -> Watch: ...
    @overload
    async def execute(self, principal: Principal, command: ForwardChat) -> Relay | Run: ...
    @overload
    async def execute(
        self, principal: Principal, command: ReloadConfig | GetConfigStatus
    ) -> ConfigStatus: ...
    @overload
    async def execute(self, principal: Principal, command: CompactResponse) -> Compacted: ...

    async def execute(self, principal: Principal, command: Command) -> Result:
        """Run one command for ``principal``. Raises :class:`GatewayError` subclasses."""
        match command:
            case CreateResponse():
                return await self._create(principal, command)
            case GetResponse(response_id=response_id):
                return await self._get(principal, response_id)
            case DeleteResponse(response_id=response_id):
                return await self._delete(principal, response_id)
            case ListInputItems():
                page = await self._store.list_input_items(
                    principal.tenant_id,
                    command.response_id,
                    after=command.after,
                    limit=command.limit,
                    order=command.order,
                )
                if page is None:
                    raise _response_not_found(command.response_id)
                return page
            case ListModels():
                with self.generations.lease() as generation:
                    return ModelList(await generation.router.list_models())
            case CheckReadiness():
                return await self._readiness()
            case CountTokens(request=request):
                with self.generations.lease() as generation:
                    return await self._count(principal, request, generation)
            case CancelResponse(response_id=response_id):
                return await background.cancel(
                    self._store, self.runs, principal, response_id, self._signals
                )
            case WatchResponse():
                return await background.watch(self._store, self.runs, principal, command)
            case ForwardChat():
                return await self._chat(principal, command)
            case ReloadConfig():
                return await self._served_reloads().reload()
            case GetConfigStatus():
                return self._served_reloads().status()
            case CompactResponse():
                with self.generations.lease() as generation:
                    return await self._compaction.compact(
                        principal.tenant_id, command, generation.router
                    )
            case _:
                return await self._served_conversations().execute(principal.tenant_id, command)

    async def _create(self, principal: Principal, command: CreateResponse) -> Run:
        if self.runs.closing:
            raise ServerShuttingDown()
        generation = self.generations.acquire()  # the run's from here to its end
        try:
            return await self._admit(principal, command, generation)
        except BaseException:
            self.generations.release(generation)
            raise

    async def _admit(
        self, principal: Principal, command: CreateResponse, generation: Generation
    ) -> Run:
        """Start ``command``'s run on ``generation``, whose lease the run then holds."""
        if command.background:
            background.check_background(command, self._encoder)
        router, loop = generation.router, generation.loop
        route = router.resolve(command.model)
        conversation: ConversationItems | None = None
        if command.conversation_id is not None:
            conversations = self._served_conversations(param="conversation")
            conversation = await conversations.context(principal.tenant_id, command.conversation_id)
        hints: list[str] = []
        if route.stages:
            first = command.previous_response_id is None and (
                conversation is None or conversation.next_position == 0
            )
            shaped = await before_planning(route.stages, route.name, command, first_turn=first)
            hints = shaped.hints
        toolset = loop.tools.resolve(command.settings.tools)
        if command.hidden_rounds and route.gateway_tools is not None:
            toolset = toolset.joined(route.gateway_tools)
        if toolset.public != command.settings.tools:  # echoed and stored without secrets
            command.settings = replace(command.settings, tools=toolset.public)
        plan, context = await self._plan(principal, command, router, route, toolset, conversation)
        plan.hints = frozenset(hints)
        context, compaction = self._compaction.prepare(
            principal.tenant_id, command, context_window(plan.capable), context
        )
        state = ResponseState.start(new_id("resp"), principal.tenant_id, time.time(), command)
        state.attempts = plan.records
        plan.remember = chain_names(
            state.id, state.conversation_id, state.settings.prompt_cache_key
        )
        run = Run(state, command.input)
        if conversation is not None:  # refused here (409, 404) while nothing has started
            begun = asyncio.ensure_future(loop.begin_turn(run, conversation.next_position))
            try:
                await asyncio.shield(begun)
            except asyncio.CancelledError:
                # The caller left while the turn's row was being written. Once it is, the
                # run starts already cancelled and ends at once, letting the conversation go.
                self.generations.retain(generation)  # for that run: the caller's goes back
                start = partial(
                    self._start_abandoned, run, plan, context, toolset, generation, compaction
                )
                begun.add_done_callback(start)
                raise
        self._start(
            run, plan, context, command.stream, toolset, generation, command.replayable, compaction
        )
        return run

    async def _plan(
        self,
        principal: Principal,
        command: CreateResponse,
        router: Router,
        route: Route,
        toolset: Toolset,
        conversation: ConversationItems | None = None,
    ) -> tuple[Plan, list[Item]]:
        """The run's routing plan over the candidates able to serve it (``toolset``
        routed to the first), and its context, checked."""
        items = None if conversation is None else conversation.items
        prior = await load_prior(self._store, principal.tenant_id, command, items)
        chain = chain_names(
            command.previous_response_id,
            command.conversation_id,
            command.settings.prompt_cache_key,
        )
        plan = router.plan(route, Needs.of(command, prior, toolset), chain)
        toolset.route(plan.first.backend)
        check_call_outputs(prior.items, command.input)
        return plan, prior.joined(command.input)

    async def _chat(self, principal: Principal, command: ForwardChat) -> Relay | Run:
        """Forward a Chat Completions request untouched when its route allows (see
        :class:`ForwardChat`), else run it translated."""
        if self.runs.closing:
            raise ServerShuttingDown()
        generation = self.generations.acquire()  # the relay's, or the run's, to its end
        try:
            route = generation.router.resolve(command.model)
            if route.forwarder is not None:
                body = command.body_for(route.upstream_model)
                relay = await route.forwarder.forward_chat(body)
                return HeldRelay(relay, self.generations, generation)
            return await self._admit(principal, await command.translate(), generation)
        except BaseException:
            self.generations.release(generation)
            raise

    def _start(
        self,
        run: Run,
        plan: Plan,
        context: list[Item],
        stream: bool,
        toolset: Toolset,
        generation: Generation,
        replayable: bool = False,
        compaction: CompactionStep | None = None,
    ) -> None:
        if run.state.background and self._encoder is not None:
            run.journal = RunJournal(run, self._store, self._encoder)
            stream = True  # its row is written first, and it logs events as they come
        elif replayable and stream and self._encoder is not None:  # a retry may replay it
            run.journal = RunJournal(run, self._store if run.state.store else None, self._encoder)
        self.runs.add(run)
        drive = self._drive(run, plan, context, stream, toolset, generation, compaction)
        run.task = asyncio.create_task(drive)

    def _start_abandoned(
        self,
        run: Run,
        plan: Plan,
        context: list[Item],
        toolset: Toolset,
        generation: Generation,
        compaction: CompactionStep | None,
        begun: asyncio.Future[None],
    ) -> None:
        if begun.cancelled() or begun.exception() is not None:
            self.generations.release(generation)
            return  # nothing was written: nothing to end
        if not run.state.background:  # a background run goes on without its client
            run.cancel(CancelReason.CLIENT_GONE)
        self._start(run, plan, context, False, toolset, generation, compaction=compaction)

    async def _count(
        self, principal: Principal, command: CreateResponse, generation: Generation
    ) -> TokenCount:
        """The input tokens of ``command``'s first round, counted by the upstream when it
        can, else estimated; checked as a run would be, but nothing runs or is stored."""
        router = generation.router
        route = router.resolve(command.model)
        toolset = generation.loop.tools.resolve(command.settings.tools)
        plan, context = await self._plan(principal, command, router, route, toolset)
        candidate = plan.order()[0]
        context = self._compaction.fitted(
            principal.tenant_id, command, context_window(plan.capable), context
        )
        catalog = Catalog(toolset.client)
        request = InferenceRequest(
            model=candidate.model,
            instructions=command.instructions,
            items=context,
            settings=command.settings,
            stream=False,
            tools=catalog.model_tools(),
            tool_choice=catalog.model_choice(command.settings.tool_choice),
            native_tools=toolset.native,
        )
        if isinstance(candidate.backend, TokenCounter):
            counted = await candidate.backend.count_tokens(request)
            if counted is not None:
                return TokenCount(counted, estimated=False)
        return TokenCount(estimate_tokens(request), estimated=True)

    async def _drive(
        self,
        run: Run,
        plan: Plan,
        context: list[Item],
        stream: bool,
        toolset: Toolset,
        generation: Generation,
        compaction: CompactionStep | None = None,
    ) -> None:
        try:
            await generation.loop.execute(run, plan, context, stream, toolset, compaction)
        except Exception:  # the top of a run's task: nothing may leave a run open
            log.exception("run %s crashed while finishing", run.id)
            if not run.closed:
                error = InternalError()
                run.state.fail(error)
                run.error = run.error or error
                run.emit(ev.ResponseFinished(run.state))
                run.close()
        finally:
            if run.journal is not None:
                await run.journal.stop()
            self.runs.discard(run)
            self.generations.release(generation)
            run.task = None  # a cancelled task keeps its CancelledError, whose frames hold the run
            if not run.closed:
                run.close()

    async def _delete(self, principal: Principal, response_id: str) -> Deleted:
        if not await self._store.delete(principal.tenant_id, response_id):
            raise _response_not_found(response_id)
        run = self.runs.get(response_id)
        if run is not None and run.state.tenant_id == principal.tenant_id:
            run.cancel(CancelReason.DELETED)  # its final save leaves the row deleted
        return Deleted(response_id)

    async def _readiness(self) -> Readiness:
        storage_error = None
        try:
            await self._store.ping()
        except StorageError as exc:
            storage_error = exc.message
        with self.generations.lease() as generation:
            backends = generation.router.backends
            answers = await asyncio.gather(*(_answers(b) for b in backends))
        return Readiness(
            storage_error, {b.name: ok for b, ok in zip(backends, answers, strict=True)}
        )

    async def _get(self, principal: Principal, response_id: str) -> ResponseState:
        run = self.runs.get(response_id)
        if run is not None and not (run.state.store and run.state.tenant_id == principal.tenant_id):
            run = None
        if run is not None and not run.has_row:
            return run.state  # generating here; stored when it ends
        record = await self._store.get(principal.tenant_id, response_id)  # deleted: None
        if record is None:
            raise _response_not_found(response_id)
        if run is not None and record.status in UNFINISHED:
            return run.state  # generating here: fresher than its in-progress row
        return load_state(record.tenant_id, record.body, record.output_items)

    def _served_reloads(self) -> Reloads:
        if self.reloads is None:
            raise NotFound("Configuration reloads are not served by this gateway.")
        return self.reloads

    def _served_conversations(self, param: str = "conversation_id") -> Conversations:
        if self._conversations is None:
            raise NotFound("Conversations are not served by this gateway.", param=param)
        return self._conversations


async def _answers(backend: Backend) -> bool:
    try:
        await backend.list_models()
    except GatewayError:
        return False
    return True


def _response_not_found(response_id: str) -> NotFound:
    return NotFound(f"Response with id '{response_id}' not found.", param="response_id")
