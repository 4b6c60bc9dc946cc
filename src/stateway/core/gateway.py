"""``Gateway.execute``: the one command handler every surface calls."""

from __future__ import annotations

import logging
from collections.abc import Callable
from contextlib import AbstractAsyncContextManager
from functools import partial
from typing import overload

from stateway.core import background, cancel_signals, owner_position, steering
from stateway.core.accounting import UsageBucket, UsageLedger
from stateway.core.backend import Relay
from stateway.core.commands import (
    CancelResponse,
    CheckReadiness,
    Command,
    CompactResponse,
    CountTokens,
    CreateResponse,
    DeleteResponse,
    ForwardChat,
    GetConfigStatus,
    GetResponse,
    GetUsage,
    InterruptResponse,
    ListInputItems,
    ListModels,
    ReloadConfig,
    SteerResponse,
    WatchResponse,
)
from stateway.core.compaction.service import Compacted, Compaction
from stateway.core.concurrency import Slot
from stateway.core.conversations.commands import (
    AddConversationItems,
    CreateConversation,
    DeleteConversation,
    DeleteConversationItem,
    GetConversation,
    GetConversationItem,
    ListConversationItems,
    UpdateConversation,
)
from stateway.core.conversations.ports import Conversation, ConversationStore
from stateway.core.conversations.service import ConversationDeleted, Conversations
from stateway.core.coordination import (
    MAX_COMMAND_ID,
    CancelSignals,
    CommandKey,
    CommandResults,
    EventFanout,
)
from stateway.core.errors import InvalidRequest, NotFound, ServerShuttingDown
from stateway.core.exactly_once import Attempt, attempt
from stateway.core.forwarding import ChatForwarding
from stateway.core.generations import ConfigStatus, Generations, HeldRelay, Reloads
from stateway.core.included import included
from stateway.core.items import Item
from stateway.core.journal import EventEncoder
from stateway.core.limits import RateLimits, charged_tokens
from stateway.core.loop import Loop
from stateway.core.ports import CacheSalts, ItemPage, NoCacheSalts, ResponseStore, Sealer
from stateway.core.principal import Principal
from stateway.core.readiness import ReadinessProbe
from stateway.core.references import resolved, resolved_items
from stateway.core.response import ResponseState
from stateway.core.results import Deleted, ModelList, Noted, Readiness, Result, TokenCount
from stateway.core.routing import Router
from stateway.core.run_registry import RunRegistry
from stateway.core.runs import Run
from stateway.core.settling import Settler
from stateway.core.starting import RunStarter
from stateway.core.stored_responses import StoredResponses
from stateway.core.telemetry import NoTelemetry, RunReport, Telemetry
from stateway.core.threads import Threads
from stateway.core.watch import Watch

log = logging.getLogger(__name__)

_MODEL_REQUESTS = (CreateResponse, ForwardChat, CompactResponse)
"""The commands that ask a model for something: what ``[rate_limits]`` counts (but a
prewarm, a create with ``generate`` false, asks none: :func:`_asks_model`)."""


def _asks_model(command: Command) -> bool:
    if isinstance(command, CreateResponse):
        return command.generate
    return isinstance(command, _MODEL_REQUESTS)


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
        fanout: EventFanout | None = None,
        limits: RateLimits | None = None,
        telemetry: Telemetry | None = None,
        usage: UsageLedger | None = None,
        settler: Settler | None = None,
        salts: CacheSalts | None = None,
    ) -> None:
        """``router`` and ``loop`` are config generation 1 (:mod:`.generations`).
        Without ``conversations`` no conversation exists: each one named is a 404.
        Without ``encoder`` (the wire of background runs' event logs) background responses
        are refused. Without ``results`` command ids are refused; without shared
        ``signals`` another process's background run cannot be cancelled from here.
        ``sealer`` seals and opens ``encrypted_content`` (the composition root always
        gives one; without it compaction fails and sealed input items are refused).
        ``fanout`` carries background runs' committed events to other processes (Redis);
        ``limits`` admits each model request of a principal (``[rate_limits]``).
        ``telemetry`` observes runs and relayed answers; without ``usage`` (the stored
        responses' token accounting) ``GetUsage`` is a 404. ``settler`` holds the ends of
        runs whose final save failed until they are stored: the one every generation's
        loop is given (default: ``loop``'s own). ``salts`` give each tenant's upstream
        calls its ``cache_salt``, which backends with ``cache_salt = "tenant"`` send (the
        composition root always gives them; without them no call carries one)."""
        self._store = store
        self.generations = Generations(router, loop)
        """Each admission reads the current generation and holds it to its end."""
        self.reloads: Reloads | None = None
        """Set by the composition root: reloading serves the admin commands."""
        self.runs = runs
        self.signalled = cancel_signals.SignalledCancels(runs, store)
        """The cancels other processes send for runs of this one (closed at shutdown)."""
        self.deletes = None
        if signals is not None and signals.shared:
            self.deletes = cancel_signals.DeleteSignals(signals)
        """The signals of this process's ``DELETE``s to other processes' runs (closed at
        shutdown)."""
        self._conversations = (
            None if conversations is None else Conversations(conversations, sealer)
        )
        self._encoder = encoder
        self._results = results
        self._signals = signals
        self._sealer = sealer
        self._compaction = Compaction(store, sealer)
        self._salts = salts or NoCacheSalts()
        self._fanout = fanout
        self._limits = limits
        self._telemetry = telemetry or NoTelemetry()
        self._usage = usage
        self._readiness = ReadinessProbe(store, self.generations, results)
        self._starter = RunStarter(
            store,
            runs,
            self.generations,
            self._compaction,
            self._served_conversations,
            encoder,
            fanout,
            self._telemetry,
            salts=self._salts,
        )
        self._threads = Threads(store, self._served_conversations)
        self._settler = settler or loop.settler
        self._ended = None if encoder is None else background.EndedHere(self._settler, encoder)
        self._stored = StoredResponses(store, runs, sealer, self.deletes, self._settler)
        self._forwarding = ChatForwarding(
            self.generations, runs, self._starter, limits, self._telemetry, salts=self._salts
        )

    def once(
        self,
        principal: Principal,
        command_id: str,
        digest: str,
        *,
        param: str,
        waiting: Callable[[], None] | None = None,
    ) -> AbstractAsyncContextManager[Attempt]:
        """Run a command sent with ``command_id`` at most once (see
        :mod:`stateway.core.exactly_once`); ``digest`` fingerprints its request,
        ``param`` names the id in errors, ``waiting`` is told when it begins to wait for
        another attempt running the command."""
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
        key = CommandKey(principal.tenant_id, principal.scope, command_id)
        return attempt(self._results, key, digest, param=param, waiting=waiting)

    def cancel_signalled(self, tenant_id: str, response_id: str) -> None:
        """A cancel (or a ``DELETE``) that another process sent for a run of this one."""
        self.signalled.received(tenant_id, response_id)

    def position_asked(self, tenant_id: str, response_id: str, question: str | None) -> None:
        """Another process asked how far the log of ``response_id`` is (a watch from past
        what is stored of it): answered with a mark when it runs here."""
        if self._fanout is not None:
            owner_position.answer(self.runs, self._fanout, tenant_id, response_id, question)

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
    async def execute(self, principal: Principal, command: InterruptResponse) -> None: ...
    @overload
    async def execute(self, principal: Principal, command: SteerResponse) -> Noted: ...
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
    @overload
    async def execute(self, principal: Principal, command: GetUsage) -> list[UsageBucket]: ...

    async def execute(self, principal: Principal, command: Command) -> Result:
        """Run one command for ``principal``. Raises :class:`GatewayError` subclasses."""
        if self._limits is not None and _asks_model(command):
            slot = await self._limits.admit(principal)
            if slot is not None:
                return await self._holding(self._limits, slot, principal, command)
        return await self._served(principal, command)

    async def _holding(
        self, limits: RateLimits, slot: Slot, principal: Principal, command: Command
    ) -> Result:
        """Serve a model request holding ``slot``, one of its principal's concurrent
        requests (:mod:`stateway.core.concurrency`), and hand the slot over to what it
        started: a run gives it back as it ends, a relayed answer as its relay closes;
        anything else (a compaction, an attached run already over), and any failure on the
        way (a refusal, an upstream error), gives it back now. Each end waits for the slot
        to be free on every replica before it is told (:meth:`Slot.given_back`); a caller
        cancelled, told nothing, gives it back without waiting. The one place a slot is
        held."""
        try:
            result = await self._served(principal, command)
        except Exception:
            await slot.given_back()
            raise
        except BaseException:
            slot.release()
            raise
        if isinstance(result, Run) and not result.closed:  # an attached run is over here
            result.before_end = slot.given_back
            limits.release_after(slot, result.wait)  # a run closed without finishing
        elif isinstance(result, HeldRelay):
            result.also_ended(slot.release, slot.given_back)
        else:
            await slot.given_back()
        return result

    async def _served(self, principal: Principal, command: Command) -> Result:
        match command:
            case CreateResponse():
                return await self._create(principal, command)
            case GetResponse(response_id=response_id, include=include):
                state = await self._stored.get(principal, response_id)
                return included(state, include, self._sealer)
            case DeleteResponse(response_id=response_id):
                return await self._stored.delete(principal, response_id)
            case ListInputItems():
                return await self._stored.input_items(principal, command)
            case ListModels(model=model):
                with self.generations.lease() as generation:
                    if model is not None:
                        return ModelList([await generation.router.find_model(model)])
                    return ModelList(await generation.router.list_models())
            case CheckReadiness():
                return await self._readiness.check()
            case CountTokens(request=request):
                request = await resolved(self._store, principal.tenant_id, request, self._sealer)
                with self.generations.lease() as generation:
                    count = partial(self._starter.count, principal, request, generation)
                    if request.thread is None:
                        return await count()
                    return await self._threads.count(principal.tenant_id, request, count)
            case CancelResponse(response_id=response_id):
                return await background.cancel(
                    self._store, self.runs, principal, response_id, self._signals, self._settler
                )
            case InterruptResponse():
                steering.interrupt(self.runs, principal, command)
                return None
            case SteerResponse():
                return steering.steer(self.runs, principal, command)
            case WatchResponse():
                return await background.watch(
                    self._store, self.runs, principal, command, self._fanout, self._ended
                )
            case ForwardChat():
                answer = await self._forwarding.start(principal, command)
                if isinstance(answer, Run):  # translated
                    return await self._admitted(principal, answer)
                return answer
            case ReloadConfig():
                return await self._served_reloads().reload()
            case GetConfigStatus():
                return self._served_reloads().status()
            case CompactResponse():
                command = await resolved(self._store, principal.tenant_id, command, self._sealer)
                with self.generations.lease() as generation:
                    salt = self._salts.salt(principal.tenant_id)
                    compacted = await self._compaction.compact(
                        principal.tenant_id, command, generation.router, salt, self._telemetry
                    )
                report = RunReport(principal.tenant_id, command.model, compacted.usage)
                self._telemetry.run_ended(report)  # the summary's tokens
                if self._limits is not None and compacted.usage is not None:
                    await self._limits.charge(principal, compacted.usage.total_tokens)
                return compacted
            case GetUsage():
                if self._usage is None:
                    raise NotFound("Usage is not served by this gateway.")
                return await self._usage.usage(command)
            case ListConversationItems() | AddConversationItems() | GetConversationItem():
                conversations = self._served_conversations()
                if isinstance(command, AddConversationItems):
                    command = await resolved_items(
                        self._store, principal.tenant_id, command, self._sealer
                    )
                found = await conversations.execute(principal.tenant_id, command)
                assert isinstance(found, ItemPage | dict)  # what these commands answer
                return self._stored.included(found, command.include, principal)
            case CreateConversation():
                conversations = self._served_conversations()
                command = await resolved_items(
                    self._store, principal.tenant_id, command, self._sealer
                )
                return await conversations.execute(principal.tenant_id, command)
            case _:
                return await self._served_conversations().execute(principal.tenant_id, command)

    async def _create(self, principal: Principal, command: CreateResponse) -> Run:
        if self.runs.closing:
            raise ServerShuttingDown()
        command = await resolved(self._store, principal.tenant_id, command, self._sealer)
        if command.thread is None:  # the plain path
            run = await self._admit(principal, command)
        else:
            admit = partial(self._admit, principal, command)
            run = await self._threads.turn(principal.tenant_id, command, admit)
        return await self._admitted(principal, run)

    async def _admit(self, principal: Principal, command: CreateResponse) -> Run:
        generation = self.generations.acquire()  # the run's from here to its end
        try:
            return await self._starter.admit(principal, command, generation)
        except BaseException:
            self.generations.release(generation)
            raise

    async def _admitted(self, principal: Principal, run: Run) -> Run:
        """``run``, just admitted: its tokens taken out of its principal's bucket once it
        ends, and driven to its end here when it is attached."""
        if self._limits is not None:
            self._limits.charge_after(principal, run.wait, lambda: charged_tokens(run.state))
        await self._starter.drive_attached(run)
        return run

    def _served_reloads(self) -> Reloads:
        if self.reloads is None:
            raise NotFound("Configuration reloads are not served by this gateway.")
        return self.reloads

    def _served_conversations(self, param: str = "conversation_id") -> Conversations:
        if self._conversations is None:
            raise NotFound("Conversations are not served by this gateway.", param=param)
        return self._conversations
