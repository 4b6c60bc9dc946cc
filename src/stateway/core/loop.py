"""The agentic loop: infer, classify, run gateway tools, continue or finish.

One ``Loop.execute`` drives one run to its single terminal event. Each round
(:mod:`.rounds`) sends the context plus the output so far to the backend and assembles what
comes back. Calls to
client-owned tools end the run (the client answers them in its next request); gateway-owned
tools, when they exist, run here and feed another round, up to ``max_rounds``. A round
whose context has grown past the response's ``context_management`` threshold is preceded
by a compaction (:mod:`.compaction.between_rounds`), once a response.

A stored response whose id leaves before its end (a stream's ``response.created``, a
background response) gets its in-progress row, with its input, as the run starts: the
write runs while the first upstream request is under way, and ``response.created`` is
emitted only once it is committed, so the row exists for anyone holding the id. A
non-stream client learns the id only with the finished response, which is then written
once, at the end. Either way the end is written *before* the terminal event is emitted,
whatever the ending (:mod:`.run_endings`).

A conversation turn writes its row before its run starts (:meth:`Loop.begin_turn`), since
that write takes the conversation: a turn refused it never starts. Its end lets the
conversation go, with the turn's items when it completed or is incomplete; when that
write fails the turn is ended once more as failed, so the conversation is let go if
storage answers again.
"""

from __future__ import annotations

import asyncio
import itertools
import logging
from collections.abc import Awaitable
from dataclasses import replace
from functools import partial

from stateway.core.assembler import OutputAssembler
from stateway.core.compaction.reasoning_output import reasoning_output
from stateway.core.compaction.service import CompactionStep
from stateway.core.compaction.view import unsealed_output
from stateway.core.errors import GatewayError, InternalError
from stateway.core.generation_settings import GenerationSettings
from stateway.core.inference import PAUSED, InferenceRequest
from stateway.core.items import CUSTOM_TOOL_CALL, FUNCTION_CALL, TOOL_SEARCH_CALL, Item
from stateway.core.leases import LeaseKeeper
from stateway.core.ownership import ProcessIdentity
from stateway.core.ports import ConversationTurn, ResponseRecord, ResponseStore, Sealer
from stateway.core.reasoning import wrapped
from stateway.core.response import MAX_ROUNDS_REASON, STEERED_REASON, started_record
from stateway.core.rounds import one_round
from stateway.core.routing import Plan
from stateway.core.run_endings import answered, counted, detached, end_cancelled, finish, shown
from stateway.core.run_row import QueuedStart, Row, announce, announce_once_durable, durable
from stateway.core.runs import CancelReason, Run
from stateway.core.settling import Settler
from stateway.core.stages.context import StageContext
from stateway.core.telemetry import NoTelemetry, Telemetry
from stateway.core.tools import client_hosted
from stateway.core.tools.session import ToolSession, round_choice
from stateway.core.tools.toolset import GatewayTools, Toolset
from stateway.core.usage import Iteration, Usage

log = logging.getLogger(__name__)

_INCOMPLETE_REASONS = {
    "length": "max_output_tokens",
    "content_filter": "content_filter",
    PAUSED: MAX_ROUNDS_REASON,
}
_CALLS = frozenset({FUNCTION_CALL, CUSTOM_TOOL_CALL, TOOL_SEARCH_CALL, *client_hosted.ANSWERS})


class Loop:
    def __init__(
        self,
        store: ResponseStore,
        max_rounds: int = 8,
        owner: ProcessIdentity | None = None,
        tools: GatewayTools | None = None,
        sealer: Sealer | None = None,
        telemetry: Telemetry | None = None,
        settler: Settler | None = None,
        lease: LeaseKeeper | None = None,
    ) -> None:
        self._store = store
        self._lease = lease
        """This process's lease, registered before a row naming it is stored (None: no
        run is judged by its lease)."""
        self.settler = settler or Settler(store)
        """Stores, later, the failed end of a run whose final save failed (one for every
        generation's loop: the composition root gives them the same)."""
        self._telemetry = telemetry or NoTelemetry()
        """Spans around rounds, upstream attempts and tool calls."""
        self._max_rounds = max_rounds
        self.tools = tools or GatewayTools()
        self._sealer = sealer
        """Seals reasoning items' ``encrypted_content`` when a request includes it."""
        self._owner = str(owner or ProcessIdentity.current())
        """Recorded on every in-progress row this process writes."""

    async def begin_turn(self, run: Run, seen: int) -> None:
        """Write a conversation turn's in-progress row, taking its conversation (which
        had ``seen`` items when the context was read). Raises
        :class:`~stateway.core.errors.ConversationLocked` or
        :class:`~stateway.core.errors.ConversationNotFound`, having written nothing."""
        state = run.state
        assert state.conversation_id is not None
        record = started_record(state, run.stored_input, self._owner)
        record.turn = ConversationTurn(state.conversation_id, seen=seen)
        await self._save_started(record)
        run.has_row = True

    def _save_started(self, record: ResponseRecord) -> Awaitable[None]:
        """The write of a run's unfinished row, which names this process its owner: once
        this process's lease is registered, which it is but after a start on a database
        taking no writes (:meth:`LeaseKeeper.register`). Registered, the write alone."""
        lease = self._lease
        if lease is None or lease.registered:
            return self._store.save(record)
        return self._registered_then_saved(lease, record)

    async def _registered_then_saved(self, lease: LeaseKeeper, record: ResponseRecord) -> None:
        await lease.register()
        await self._store.save(record)

    async def execute(
        self,
        run: Run,
        plan: Plan,
        context: list[Item],
        stream: bool,
        toolset: Toolset,
        compaction: CompactionStep | None = None,
    ) -> None:
        state = run.state
        row: Row | None = None
        queued = None
        if state.status == "queued":  # a background run: in progress once it starts working
            queued = run.queued = QueuedStart(run, self._store, self._owner)
        if run.has_row:  # written before the run was started (a conversation turn)
            row = asyncio.get_running_loop().create_future()
            row.set_result(None)
            announce(run)
        elif state.store and stream:  # cancelled before it began too: announced once stored
            record = started_record(state, run.stored_input, self._owner)
            row = asyncio.ensure_future(self._save_started(record))
            row.add_done_callback(partial(announce_once_durable, run))
            run.has_row = True
        else:  # no id leaves before the end: the response is written once, at the end
            announce(run)
        if queued is not None:
            queued.row = row  # its update waits for it
        run.began = True
        usage = Usage()
        # every call of the chain, shown to the model or not (cut short, truncated away,
        # summarized): a new call must not take any one's id
        chain = run.context if context is run.context else itertools.chain(run.context, context)
        used_call_ids = {i.get("call_id") or "" for i in chain if i.get("type") in _CALLS}
        settings = state.settings
        tools = ToolSession(
            self.tools, toolset, state.output, run.emit, self._telemetry, state.tenant_id, context
        )
        reasoning = reasoning_output(settings, self._sealer, state.tenant_id)
        sealer = self._sealer
        wrap = partial(wrapped, sealer, state.tenant_id) if sealer is not None else None
        assembler = OutputAssembler(
            state.output, run.emit, used_call_ids, tools=tools, reasoning=reasoning, wrap=wrap
        )
        run.progress = assembler.output_so_far
        run.cancellable = True
        try:
            if run.cancel_reason is not None:  # cancelled before it started generating
                raise asyncio.CancelledError
            if tools.needed(run.input_items):  # its items come first: announce the response
                await durable(row)
                announce(run)
                if queued is not None:
                    queued.start()
                await tools.prepare(context)
                await tools.resume_approvals(context, run.input_items, settings.max_tool_calls)
            if compaction is not None:  # compacted first: a trigger, or past the threshold
                await durable(row)
                announce(run)
                if queued is not None:
                    queued.start()
                context = await compaction.run(run, plan.first, usage, self._telemetry)
                tools.compacted(context)
                state.usage = usage
            choice = round_choice(toolset, tools.catalog, settings.tool_choice)
            limit = settings.max_tool_calls
            generated_before = usage.output_tokens  # a compaction's summary is not the answer
            threshold, fitted = run.compaction_threshold, run.fitted
            compacted: Item | None = None  # the compaction item made between two rounds
            for number in range(1, self._max_rounds + 1):
                if compaction is not None and compaction.alone:  # the item is the answer
                    state.status = "completed"
                    break
                if not run.generate:  # a prewarm: the context is checked, nothing is asked
                    await durable(row)
                    announce(run)
                    if queued is not None:
                        queued.start()
                    state.status = "completed"
                    break
                round_settings: GenerationSettings | None = settings
                if (
                    settings.max_output_tokens is not None
                    and not settings.max_output_tokens_per_call
                ):
                    generated = usage.output_tokens - generated_before
                    round_settings = _within_budget(settings, generated, plan)
                if round_settings is None:  # max_output_tokens used up, or too little left to ask
                    tools.abandon()
                    state.status = "incomplete"
                    state.incomplete_reason = _INCOMPLETE_REASONS["length"]
                    break
                assembler = OutputAssembler(
                    state.output,
                    run.emit,
                    used_call_ids,
                    tools=tools,
                    reasoning=reasoning,
                    wrap=wrap,
                )
                run.progress = assembler.output_so_far
                exhausted = limit is not None and tools.calls_made >= limit
                # empty in the first round; with the answers to its calls of withheld tools
                output = tools.withheld.woven(state.output)
                if compacted is not None:  # summarized with the context: what follows goes
                    output = _after(output, compacted)
                if output:  # the seals on its reasoning are the client's: the model gets
                    # what is under them
                    output = unsealed_output(output, self._sealer, state.tenant_id)
                if threshold is not None and output:  # grown since the start measured it
                    step = threshold.crossed(
                        state.instructions, context, output, settings.tools, state.output
                    )
                    if step is not None:  # once a response: its first crossing
                        threshold, fitted = None, None
                        summarized = usage.output_tokens
                        context = await step.run(run, plan.first, usage, self._telemetry)
                        tools.compacted(context)
                        if number == 1:  # the request's choice, of what is offered now
                            choice = round_choice(toolset, tools.catalog, settings.tool_choice)
                        generated_before += usage.output_tokens - summarized
                        state.usage = usage
                        compacted, output = state.output[-1], []
                request = InferenceRequest(
                    model=plan.first.model,
                    instructions=state.instructions,
                    items=context + output,
                    settings=round_settings,
                    stream=stream,
                    tools=tools.catalog.model_tools(gateway=not exhausted, choice=choice),
                    tool_choice=choice,
                    native_tools=toolset.native,
                    names=tools.catalog.names(),
                    grammar=tools.catalog.forced_grammar(choice),
                    cache_salt=run.cache_salt,
                )
                fit = None if fitted is None else partial(fitted.items, output=output)
                with self._telemetry.round(number):
                    produced = len(state.output)
                    # each call's own usage is shown only after a compaction (Messages'
                    # usage.iterations), which comes first: counted only then
                    before = replace(usage) if state.iterations else None
                    reason = await one_round(
                        run, row, plan, request, assembler, usage, self._telemetry, fit
                    )
                    if queued is not None:  # an answer without output, from a backend
                        queued.start()  # without slots: it worked all the same
                    if before is not None:
                        state.iterations.append(Iteration("message", usage.since(before)))
                    incomplete = _INCOMPLETE_REASONS.get(reason)
                    assembler.finish("incomplete" if incomplete else "completed")
                    await _parts(plan, state.output[produced:])
                    state.usage = usage
                    if incomplete:
                        tools.abandon()
                        state.status, state.incomplete_reason = "incomplete", incomplete
                        break
                    pending = assembler.gateway_calls
                    if not pending and not assembler.refused:  # an answer, or client calls
                        state.status = "completed"  # back to the client
                        break
                    if pending:
                        await tools.run(pending, limit, parallel=settings.parallel_tool_calls)
                    if assembler.tool_calls:  # a mixed round: the client's calls go back now
                        state.status = "completed"
                        break
                    if run.steered:  # a safe boundary: its successor takes the new input
                        state.status, state.incomplete_reason = "incomplete", STEERED_REASON
                        break
                    choice = "auto"  # a forced tool is forced once, not every round
            else:
                state.status, state.incomplete_reason = "incomplete", MAX_ROUNDS_REASON
            if state.status == "completed" and plan.route.stages:
                gate = StageContext("completion_gate", plan.route.name, state=state)
                await plan.route.stages.run(gate)  # raising fails the response
        except asyncio.CancelledError:
            run.cancellable = False
            interrupted = run.cancel_reason is CancelReason.INTERRUPTED
            if interrupted:
                assembler.abandon()
            else:
                assembler.finish("incomplete")
            tools.abandon()
            if interrupted:  # the items it was writing discarded
                state.output[:] = [i for i in state.output if i.get("status") != "incomplete"]
            state.usage = counted(usage)
            end_cancelled(run)
            await finish(run, row, self._store, self.settler)
            raise
        except Exception as exc:  # the top of a run: even a bug must end it, stored as failed
            run.cancellable = False
            if isinstance(exc, GatewayError):
                error: GatewayError = detached(exc)
            else:
                log.exception("run %s failed unexpectedly", run.id)
                error = InternalError()
            assembler.abandon()  # no item cut off is announced done
            tools.abandon()
            state.usage = counted(usage)
            state.fail(error)
            if not shown(run, assembler.started):
                run.error = answered(state, error)
        run.cancellable = False  # from here a client leaving interrupts nothing
        await finish(run, row, self._store, self.settler)


def _after(output: list[Item], compacted: Item) -> list[Item]:
    """What ``output`` holds after the compaction item ``compacted`` (itself, not an
    equal one)."""
    at = next(index for index, item in enumerate(output) if item is compacted)
    return output[at + 1 :]


async def _parts(plan: Plan, items: list[Item]) -> None:
    """Hand each output item of a round to the ``response_part`` stages."""
    stages = plan.route.stages
    if stages:
        for item in items:
            await stages.run(StageContext("response_part", plan.route.name, item=item))


def _within_budget(
    settings: GenerationSettings, generated: int, plan: Plan
) -> GenerationSettings | None:
    """A round's settings: ``max_output_tokens`` bounds the whole response, every round of
    its tool loop together, so a later round may write only what the earlier ones left
    (unless it bounds each call: ``max_output_tokens_per_call``, not asked here).
    None: nothing is left, or less than the plan's upstreams may be asked for (hosted
    OpenAI's Responses API refuses a budget under 16): the response ends as at its length,
    not on a refusal after its tools ran. The first round is sent the client's own budget,
    whatever it is."""
    cap = settings.max_output_tokens
    if cap is None or not generated:
        return settings
    left = cap - generated
    if left < plan.min_output_tokens:  # at least 1: nothing left is less
        return None
    return replace(settings, max_output_tokens=left)
