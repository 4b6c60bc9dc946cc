"""Starting a run: from an admitted ``CreateResponse`` to its task.

``RunStarter.admit`` is the create path of :meth:`Gateway.execute
<stateway.core.gateway.Gateway.execute>`: feature stages, tools, the routing plan and the
checked context, compaction, a conversation turn's claim, then the run's task, which holds
its config generation to its end. A request whose every candidate's queue is full (the
runs started but not yet driven counted as in it) is refused here (503 ``overloaded``),
before it costs a run, a stored row or a task: its first upstream call would be refused
the same way. ``RunStarter.count`` checks a request the same way and counts its input
tokens without running it.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable
from functools import partial
from typing import Literal

from stateway.core import background
from stateway.core import events as ev
from stateway.core.backend import TokenCounter
from stateway.core.commands import CreateResponse
from stateway.core.compaction.between_rounds import Threshold
from stateway.core.compaction.service import Compaction, CompactionStep, Prepared
from stateway.core.compaction.view import taken_input
from stateway.core.conversations.service import Conversations
from stateway.core.coordination import EventFanout
from stateway.core.errors import InternalError, Overloaded
from stateway.core.generations import Generation, Generations
from stateway.core.ids import new_id
from stateway.core.inference import InferenceRequest
from stateway.core.items import Item
from stateway.core.journal import EventEncoder, RunJournal
from stateway.core.planning import Planner
from stateway.core.ports import CacheSalts, ResponseStore
from stateway.core.principal import Principal
from stateway.core.response import ResponseState
from stateway.core.results import TokenCount
from stateway.core.routing import Plan
from stateway.core.routing.affinity import chain_names
from stateway.core.run_registry import RunRegistry
from stateway.core.runs import CancelReason, Run
from stateway.core.telemetry import NoTelemetry, RunReport, Telemetry
from stateway.core.token_estimate import estimate_tokens
from stateway.core.tools.session import counted_catalog, round_choice
from stateway.core.tools.toolset import Toolset

log = logging.getLogger(__name__)

_FULL = (
    "The gateway is at capacity: every connection to the model servers for '{model}' is "
    "in use and as many requests as its queue holds already wait. Retry shortly."
)


class RunStarter:
    def __init__(
        self,
        store: ResponseStore,
        runs: RunRegistry,
        generations: Generations,
        compaction: Compaction,
        conversations: Callable[[str], Conversations],
        encoder: EventEncoder | None,
        fanout: EventFanout | None = None,
        telemetry: Telemetry | None = None,
        *,
        salts: CacheSalts,
    ) -> None:
        """``conversations(param)``: the conversations served, or a 404 naming ``param``
        (:class:`~stateway.core.planning.Planner`). ``fanout``: where stored journals
        publish their committed batches (Redis); ``telemetry`` is told each run's end;
        ``salts`` give each run its tenant's ``cache_salt`` (none from
        :class:`~stateway.core.ports.NoCacheSalts`)."""
        self._store = store
        self.runs = runs
        self.generations = generations
        self._compaction = compaction
        self._planner = Planner(store, conversations)
        self._encoder = encoder
        self._fanout = fanout
        self._telemetry = telemetry or NoTelemetry()
        self._salts = salts
        self._pending = 0
        """Runs started whose driving has not begun: in their first steps they ask for a
        connection slot, so admission counts them as asking already (a burst admitted
        in one turn of the event loop would otherwise see nobody waiting yet)."""

    async def admit(
        self, principal: Principal, command: CreateResponse, generation: Generation
    ) -> Run:
        """Start ``command``'s run on ``generation``, whose lease the run then holds."""
        command.input = taken_input(command.input, self._compaction.sealer)
        if command.background:
            background.check_background(command, self._encoder)
        loop = generation.loop
        planned = await self._planner.plan(principal, command, generation)
        plan, toolset, prior = planned.plan, planned.toolset, planned.prior
        context, checked, conversation = planned.context, planned.checked, planned.conversation
        pending = self._pending
        if command.generate and all(c.backend.full(pending) for c in plan.capable):
            raise Overloaded(_FULL.format(model=command.model))
        if command.generate:  # a prewarm asks no model, for a summary either
            prepared = self._compaction.prepare(principal.tenant_id, command, plan.capable, context)
        else:  # but stores its input: a seal that does not open is refused as a run's
            self._compaction.verify(principal.tenant_id, command, context)
            prepared = Prepared(context)
        started_from = context
        context, compaction, fitted = prepared.context, prepared.compaction, prepared.fitted
        state = ResponseState.start(new_id("resp"), principal.tenant_id, time.time(), command)
        state.applied_edits = prepared.applied
        state.attempts = plan.records
        plan.remember = chain_names(
            principal.tenant_id,
            state.id,
            state.conversation_id,
            state.settings.prompt_cache_key,
            command.session,
        )
        run = Run(
            state, command.input, generate=command.generate, hidden_rounds=command.hidden_rounds
        )
        # as a stored chain gives them: the checked context itself when it left nothing out
        whole = len(checked) == len(prior.items) + len(command.input)
        run.context = checked if whole else prior.joined(command.input)
        run.fitted = fitted
        if prepared.threshold is not None:
            sealer, tenant_id = self._compaction.sealer, principal.tenant_id
            threshold = Threshold(sealer, tenant_id, started_from, prepared.threshold)
            run.compaction_threshold = threshold
        run.cache_salt = self._salts.salt(principal.tenant_id)
        if command.prior is not None and not command.prior_stored:
            run.stored_input = command.prior + command.input
        if conversation is not None and command.store:  # refused here (409, 404) while
            # nothing has started; an unstored request (a thread's prewarm) holds no turn
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
        journal = _journal_of(command)
        attach = None if command.background else command.attach
        if attach is not None:  # before the run is registered: nothing to undo if it fails
            run.task = asyncio.current_task()
            attach(run)
        self._start(
            run,
            plan,
            context,
            command.stream,
            toolset,
            generation,
            journal,
            compaction,
            attached=attach is not None,
        )
        return run

    @staticmethod
    async def drive_attached(run: Run) -> None:
        """Drive an attached run (:attr:`Run.driver`) to its end in this task; nothing
        for a run with a task of its own. A cancel that :meth:`Run.cancel` asked for
        (interrupting the task, or before the run began) ends the run and is absorbed
        here; any other cancel of the task goes on."""
        driver, run.driver = run.driver, None
        if driver is None:
            return
        task = asyncio.current_task()
        assert task is not None
        try:
            await driver
        except asyncio.CancelledError:
            if run.cancel_reason is None:
                raise
            if run.interrupted:
                task.uncancel()  # the run's own cancel, taken back
            if task.cancelling() > 0:  # someone else's too
                raise

    def _start(
        self,
        run: Run,
        plan: Plan,
        context: list[Item],
        stream: bool,
        toolset: Toolset,
        generation: Generation,
        journal: Journal = None,
        compaction: CompactionStep | None = None,
        *,
        attached: bool = False,
    ) -> None:
        """Start ``run``: in a task of its own, or ``attached``: left for its caller to
        drive (:meth:`drive_attached`)."""
        if run.state.background and self._encoder is not None:
            run.journal = RunJournal(run, self._store, self._encoder, fanout=self._fanout)
            stream = True  # its row is written first, and it logs events as they come
        elif journal is not None and stream and self._encoder is not None:
            stored = self._store if run.state.store else None  # a retry may replay it
            deferred = self.runs if journal == "on_demand" else None
            run.journal = RunJournal(
                run, stored, self._encoder, fanout=self._fanout, deferred=deferred
            )
        self.runs.add(run)
        self._pending += 1  # until its driving begins
        drive = self._drive(run, plan, context, stream, toolset, generation, compaction)
        if attached:
            run.driver = drive  # its caller drives it: see drive_attached
        else:
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

    async def count(
        self, principal: Principal, command: CreateResponse, generation: Generation
    ) -> TokenCount:
        """The input tokens of ``command``'s first round, counted by the upstream when it
        can, else estimated; checked as a run would be, but nothing runs or is stored."""
        planned = await self._planner.plan(principal, command, generation, counting=True)
        plan, toolset, context = planned.plan, planned.toolset, planned.context
        settings = command.settings
        candidate = plan.order()[0]
        window = candidate.context_window  # the context it would be sent
        cleared = self._compaction.fitted(principal.tenant_id, command, window, context)
        context = cleared.items
        policy = generation.loop.tools.policy
        catalog = counted_catalog(toolset, context, policy.max_discovered_tools)
        # as a run's first round: the choice first, as it may narrow the tools offered
        choice = round_choice(toolset, catalog, settings.tool_choice)
        request = InferenceRequest(
            model=candidate.model,
            instructions=command.instructions,
            items=context,
            settings=command.settings,
            stream=False,
            tools=catalog.model_tools(choice=choice),
            tool_choice=choice,
            native_tools=toolset.native,
            names=catalog.names(),
        )
        if isinstance(candidate.backend, TokenCounter):
            counted = await candidate.backend.count_tokens(request)
            if counted is not None:
                return TokenCount(counted, estimated=False, cleared=cleared.tokens)
        return TokenCount(estimate_tokens(request), estimated=True, cleared=cleared.tokens)

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
        self._pending -= 1
        try:
            await generation.loop.execute(run, plan, context, stream, toolset, compaction)
        except Exception:  # the top of a run's task: nothing may leave a run open
            log.exception("run %s crashed while finishing", run.id)
            if not run.closed:
                error = InternalError()
                run.state.fail(error)
                run.error = run.error or error
                await run.ending()
                run.emit(ev.ResponseFinished(run.state))
                run.close()
        finally:
            self._telemetry.run_ended(_report(run, plan))  # before the ending's clients read on
            if run.journal is not None:
                await run.journal.ended()
            self.runs.discard(run)
            self.generations.release(generation)
            run.task = None  # a cancelled task keeps its CancelledError, whose frames hold the run
            if not run.closed:
                run.close()


Journal = Literal["stored", "on_demand"] | None
"""A streamed run's journal: none, its log stored as it runs (a command id's retry may
replay it), or stored only if a watcher keeps it (:attr:`CreateResponse.journaled`)."""


def _journal_of(command: CreateResponse) -> Journal:
    if command.replayable:
        return "stored"
    return "on_demand" if command.journaled else None


def _report(run: Run, plan: Plan) -> RunReport:
    state = run.state
    return RunReport(
        state.tenant_id, state.model, state.usage, plan.records, plan.time_to_first_output
    )
