"""One inference round of a run: the plan's candidates tried in order until one starts
answering (failover only before the first output, :mod:`stateway.core.routing.plan`), its
deltas assembled into output items and events as they come.

A usage report before any output (an Anthropic upstream's ``message_start``, counting the
prompt) is no output: it starts nothing and leaves failover open; the first round's, when
nothing was opened before it, is the response's
:attr:`~stateway.core.response.ResponseState.prompt_usage`. Nor is an
answer opened without content (a Responses upstream's ``output_item.added`` message, an
Anthropic upstream's ``content_block_start`` with its empty text), nor a call named before
its first argument (vLLM's first fragment, an Anthropic ``tool_use`` block's start): what
they begin is held back until the first output, and dropped with its attempt if none
comes (an answer that ends on them alone, a call without arguments, shows them then; a
message begun again before it shows only the later one, the first left empty). The
first output also ends the attempt's :class:`~stateway.core.deadline.FirstOutput` wait (a
backend's ``first_token_timeout``), as does a call's name (generated: some tool parsers
send a call's arguments only once it is whole): until then the attempt may time out and
fail over.

A request whose ``max_output_tokens`` may be fitted to the window (Messages'
``max_tokens``,
:attr:`~stateway.core.generation_settings.GenerationSettings.max_output_tokens_fit_window`)
and that a candidate refused for asking more output tokens than its window has room for
beside the prompt is sent to it again asking for that room, once; the run's later rounds
ask that candidate, counted first, for the room their own prompt leaves
(:mod:`stateway.core.window_room`). An answer asking only that room that stops at its
limit has filled the window (:data:`~stateway.core.inference.WINDOW_FILLED`), as has one
its upstream says did (Anthropic's stop reason), and one stopped at a limit when its
prompt and output tokens together reach the candidate's known window short of the output
tokens asked (llama-server takes any ``max_tokens`` and stops there, a ``length`` finish
like any other). A request whose API has no word for that
(:attr:`~stateway.core.generation_settings.GenerationSettings.window_filled_refused`: Responses)
fails instead, as a context too long.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace

from stateway.core import logprobs
from stateway.core.assembler import OutputAssembler
from stateway.core.backend import Backend
from stateway.core.deadline import FirstOutput
from stateway.core.errors import GatewayError, WindowFilled
from stateway.core.inference import (
    WINDOW_FILLED,
    Annotation,
    Answered,
    CallBegun,
    CallInput,
    Citation,
    Finish,
    InferenceRequest,
    MessageStart,
    OutputItem,
    ReasoningDelta,
    ReasoningSignature,
    RefusalDelta,
    SummaryBreak,
    TextDelta,
    ToolCallDelta,
    UsageReport,
)
from stateway.core.items import Item
from stateway.core.routing import Candidate, Plan
from stateway.core.routing.attempts import told
from stateway.core.run_row import Row, announce, durable
from stateway.core.runs import Run
from stateway.core.telemetry import Telemetry
from stateway.core.token_estimate import estimate_tokens
from stateway.core.usage import Usage
from stateway.core.window_room import WindowRoom


async def one_round(
    run: Run,
    row: Row | None,
    plan: Plan,
    request: InferenceRequest,
    assembler: OutputAssembler,
    usage: Usage,
    telemetry: Telemetry,
    fit: Callable[[Candidate], list[Item]] | None = None,
) -> str:
    """Run one round; its finish reason. Raises the last candidate's error when none
    could answer (or an earlier one's server failure:
    :func:`~stateway.core.routing.attempts.told`), or the error that ended an answer
    part-way. Adds its upstream's count to ``usage``: of an answer ended part-way (or
    left by its client), the prompt's, when counted before the end (:func:`_count_cut`).
    ``fit``: the items each candidate is sent, when they are not all ``request``'s
    (candidates of different context windows, the context truncated to each)."""
    error: GatewayError | None = None
    for candidate in plan.begin_round():
        if error is not None and plan.passed_over(candidate):
            continue
        request.model = candidate.model
        sent = request if fit is None else replace(request, items=fit(candidate))
        if sent.settings.parallel_tool_calls and not candidate.capabilities.parallel_tool_calls:
            # a candidate that makes one call per round (chosen when no other could serve)
            sent = replace(sent, settings=replace(sent.settings, parallel_tool_calls=False))
        backend = candidate.backend
        fitted = retried = False  # asks only the window's room; asked again after a refusal
        if run.window_room is not None:  # a candidate refused an earlier round's output tokens
            counted = await run.window_room.counted(candidate, sent, plan.min_output_tokens)
            if counted is not None:
                sent, fitted = counted, True
        while True:  # twice at most: again with the output lowered to the window's room
            attempt = plan.open(candidate)
            try:
                reason, reported = await _infer(
                    run, row, backend, plan, sent, assembler, usage, telemetry
                )
            except GatewayError as exc:
                moves_on = plan.failed(attempt, candidate, exc)
                room = run.window_room or WindowRoom()  # kept once a refusal is fitted
                least = plan.min_output_tokens
                lowered = None if retried else await room.refused(candidate, sent, exc, least)
                if lowered is not None:
                    run.window_room, sent, fitted, retried = room, lowered, True, True
                    continue
                if not moves_on:
                    raise
                error = told(error, exc)
                break
            except BaseException:
                plan.abandoned(attempt, candidate)
                raise
            plan.succeeded(attempt, candidate)
            if reason == "length" and _filled(
                run, window := candidate.context_window, sent, reported, fitted
            ):
                if sent.settings.window_filled_refused:
                    raise WindowFilled(window=window, prompt=reported.input_tokens or None)
                if sent.settings.max_output_tokens_fit_window:
                    run.state.stop_reason = WINDOW_FILLED
            return reason
    assert error is not None  # a round opens one candidate at least
    raise error


def _filled(
    run: Run, window: int | None, request: InferenceRequest, reported: Usage, fitted: bool
) -> bool:
    """Whether an answer stopped at a limit filled the window: asked only for the room the
    window left (``fitted``), said so by its upstream (Anthropic's stop reason), or its
    prompt and output tokens reaching the window known for it short of the output tokens
    asked (llama-server stops there, whatever ``max_tokens`` asked)."""
    if fitted or run.state.stop_reason == WINDOW_FILLED:
        return True
    asked = request.settings.max_output_tokens
    return (
        window is not None
        and reported.total_tokens >= window
        and (asked is None or reported.output_tokens < asked)
    )


async def _infer(
    run: Run,
    row: Row | None,
    backend: Backend,
    plan: Plan,
    request: InferenceRequest,
    assembler: OutputAssembler,
    usage: Usage,
    telemetry: Telemetry,
) -> tuple[str, Usage]:
    """The round's finish reason and the usage its upstream reported (added to
    ``usage``)."""
    reason = "stop"
    unreported = reported = Usage()  # some servers repeat running totals: the last counts
    produced = len(run.state.output)  # the round's items follow
    if plan.first_output is None:  # a candidate that failed first: its count is not this one's
        run.state.prompt_usage = None
    single = _SingleCall() if not request.settings.parallel_tool_calls else None
    top = request.settings.top_logprobs or 0  # alternatives of each token asked for
    held: list[MessageStart | ToolCallDelta | CallBegun] = []
    """Openings before any output (a message begun, a call named before its first
    argument): shown with the first output, if any comes."""
    queued = run.queued  # a background run still queued starts once the call is seated
    seated = None if queued is None or queued.started else queued.start
    waiting = request.first_output = FirstOutput(seated)
    try:
        with telemetry.attempt(backend, request) as span:
            # the upstream's id and model asked for, noted by the backend (per attempt)
            request.answered = Answered() if span.recording else None
            deltas = backend.infer(request)  # closed however the round ends (aclose)
            try:
                started = plan.output_started
                async for delta in deltas:
                    if not started:  # until the attempt's first output (a local: read per delta)
                        if type(delta) is UsageReport:  # the prompt counted ahead: no output yet
                            reported = delta.usage
                            # the run's first round's, ahead of any opening (after one, it
                            # is the answer's count: a call named with empty arguments, ended)
                            if plan.first_output is None and not held:
                                run.state.prompt_usage = reported
                            continue
                        if _empty(delta):
                            continue
                        if isinstance(delta, MessageStart):  # a message begun: not yet output
                            if held and isinstance(held[-1], MessageStart):
                                held[-1] = delta  # begun again: the one before it left empty
                            else:
                                held.append(delta)
                            continue
                        if (isinstance(delta, ToolCallDelta) and not delta.arguments) or isinstance(
                            delta, CallBegun
                        ):
                            # a call named before its first argument (vLLM's first fragment,
                            # an Anthropic tool_use block's start, a Responses upstream's
                            # custom call added): not yet output, but the model generates
                            # (its arguments may come all at the end)
                            held.append(delta)
                            waiting.came()
                            continue
                        await _output_begins(run, row, plan, waiting, held, assembler, single)
                        started = True
                    match delta:
                        case TextDelta(text=text, logprobs=tokens):
                            assembler.text(text, tokens and logprobs.asked(tokens, top))
                        case ReasoningDelta(text=text):
                            assembler.reasoning(text)
                        case ReasoningSignature(signature=signature):
                            assembler.reasoning_signature(signature)
                        case SummaryBreak(text=text):
                            assembler.summary_break(text)
                        case ToolCallDelta():
                            if single is None or single.admits(delta):
                                assembler.tool_call(delta)
                        case RefusalDelta(text=text):
                            assembler.refusal(text)
                        case MessageStart(phase=phase):
                            assembler.message(phase)
                        case Citation(citation=citation):
                            assembler.citation(citation)
                        case Annotation(annotation=annotation):
                            assembler.annotation(annotation)
                        case OutputItem(item=item):
                            assembler.item(item)
                        case UsageReport(usage=latest):
                            reported = latest
                        case Finish(reason=finish_reason, stop_sequence=matched):
                            reason = finish_reason
                            run.state.stop_sequence = matched
                            run.state.stop_reason = delta.stop_reason
                            run.state.stop_details = delta.stop_details
                            run.state.safeguard_results = delta.safeguard_results
                        case CallInput(text=text):  # a Responses upstream's: last, as rare
                            assembler.call_input(text)
                        case CallBegun(item=item):
                            assembler.call_begun(item)
                if held:  # the answer ended on openings alone (a call that takes no arguments)
                    await _output_begins(run, row, plan, waiting, held, assembler, single)
            finally:
                await deltas.aclose()
                waiting.seated = None  # whoever keeps the request keeps no run by it
            if span.recording:
                told = None if reported is unreported else reported
                span.answered(reason, told, request.answered)
    except BaseException:
        if plan.output_started:  # the upstream read the prompt; the answer's count never came
            _count_cut(run, request, reported, usage, produced)
        raise
    usage.add(reported)
    return reason, reported


def _count_cut(
    run: Run, request: InferenceRequest, reported: Usage, usage: Usage, produced: int
) -> None:
    """Count the prompt of a round cut short after its output began (failed, or left by
    its client): in ``usage`` as its upstream counted it, when it did (an Anthropic
    ``message_start``, a running count), cache reads and writes too; else estimated, and
    charged beside the usage (:attr:`~stateway.core.response.ResponseState.uncounted_input`).
    The output tokens of such a count are only the answer's first: they are left out, the
    round's output, its items from ``produced`` on (the run's last: a cut ends it),
    charged estimated (:attr:`~stateway.core.response.ResponseState.uncounted_output_from`,
    :func:`~stateway.core.limits.charged_tokens`)."""
    run.state.uncounted_output_from = produced
    if not reported.input_tokens:
        run.state.uncounted_input += estimate_tokens(request)
        return
    usage.add(
        Usage(
            input_tokens=reported.input_tokens,
            cached_tokens=reported.cached_tokens,
            cache_write_tokens=reported.cache_write_tokens,
        )
    )


async def _output_begins(
    run: Run,
    row: Row | None,
    plan: Plan,
    waiting: FirstOutput,
    held: list[MessageStart | ToolCallDelta | CallBegun],
    assembler: OutputAssembler,
    single: _SingleCall | None,
) -> None:
    """The attempt's first output: failover is over, the run's first output is made
    durable and announced, and the openings held back until now are shown."""
    plan.output()
    waiting.came()
    if not run.events:  # the run's first output: durable first, then announced
        await durable(row)
        announce(run)
    if run.queued is not None:  # working, if no seat told it (a backend without slots)
        run.queued.start()
    for opening in held:
        if isinstance(opening, MessageStart):
            assembler.message(opening.phase)
        elif isinstance(opening, CallBegun):
            assembler.call_begun(opening.item)
        elif single is None or single.admits(opening):
            assembler.tool_call(opening)
    held.clear()


def _empty(delta: object) -> bool:
    """Whether ``delta`` adds nothing to the output (an empty piece of text or reasoning,
    without tokens; a summary's break before anything it would break): before any output,
    it starts none."""
    match delta:
        case TextDelta(text="", logprobs=None) | ReasoningDelta(text="") | SummaryBreak():
            return True
    return False


class _SingleCall:
    """``parallel_tool_calls: false`` (Messages' ``disable_parallel_tool_use``): a round
    makes at most one call, as hosted. Servers that do not enforce it (vLLM's tool parsers
    emit whatever the model wrote) may send more; the fragments of any call after the
    first are dropped. Calls are told apart as the assembler tells them: by index, and at
    one index by a new upstream id (servers that omit indexes)."""

    __slots__ = ("_call_id", "_dropping", "_index")

    def __init__(self) -> None:
        self._index: int | None = None
        self._call_id: str | None = None
        self._dropping = False

    def admits(self, delta: ToolCallDelta) -> bool:
        if self._index is None:
            self._index, self._call_id = delta.index, delta.call_id
            return True
        if delta.index != self._index:
            return False
        if delta.call_id is not None and delta.call_id != self._call_id:
            self._dropping = True  # and the fragments after it, which are that call's
        return not self._dropping
