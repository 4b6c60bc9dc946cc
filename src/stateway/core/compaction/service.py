"""The gateway's context management: compaction, truncation and token counting.

:class:`Compaction` serves three commands' worth of work for ``Gateway.execute``:

- :meth:`Compaction.prepare` (``responses.create``): the context's model view
  (:mod:`.view`) with its clearing edits applied (:mod:`.clearing`); then, when the
  input ends with a ``compaction_trigger`` or the view is past its
  ``context_management`` threshold, a :class:`CompactionStep` the run takes before its
  rounds; otherwise, with ``truncation: "auto"`` and a known context window, the view
  truncated to fit (:mod:`.truncation`): the smallest window of the capable candidates,
  and when they declare different ones, each candidate's own as a round tries it
  (:class:`~.truncation.Fitted`).
- :meth:`Compaction.compact` (``/responses/compact``): the context's ``user`` messages
  followed by one sealed ``compaction`` item.
- :meth:`Compaction.fitted` (``/responses/input_tokens``, Messages' ``count_tokens``):
  the context a round would send (its clearing edits applied), without compacting, for
  the upstream (or the estimate) to count.

A threshold is ``compact_threshold`` when given, else 80% of the context window (the
smallest any capable candidate declares: ``capabilities.context_window``, by default its
backend's ``context_window``, else what its model server advertises:
:mod:`stateway.core.routing.windows`); without either there is no automatic compaction.
It is checked when the response starts, against the estimate
(:mod:`stateway.core.token_estimate`), and, when it did not compact then, before each later
round of its tool loop (:mod:`.between_rounds`). An entry with ``pause_after_compaction``
(Messages' autocompact edit) makes its compaction the whole output, as a trigger does. A
context that ends with the assistant message the answer continues (Messages' prefill) is
summarized whole, and the rounds after the compaction still end with that message.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from typing import Any

from stateway.core import events as ev
from stateway.core.commands import CompactResponse, CreateResponse
from stateway.core.compaction import sealed
from stateway.core.compaction.clearing import Cleared, clear
from stateway.core.compaction.prompt import SUMMARY_PROMPT
from stateway.core.compaction.summarize import summarize, summary_settings
from stateway.core.compaction.truncation import Fitted
from stateway.core.compaction.view import SHOWN, kept_messages, model_view
from stateway.core.context import build_context, shown
from stateway.core.errors import InvalidRequest
from stateway.core.generation_settings import GenerationSettings
from stateway.core.ids import new_id
from stateway.core.immutable import immutable
from stateway.core.items import MESSAGE, Item
from stateway.core.ports import ResponseStore, Sealer
from stateway.core.routing import Candidate, Router
from stateway.core.runs import Run
from stateway.core.telemetry import Telemetry
from stateway.core.token_estimate import estimate_context
from stateway.core.usage import Iteration, Usage

DEFAULT_THRESHOLD = 0.8
"""Of the context window: where a ``context_management`` compaction without its own
``compact_threshold`` triggers."""


@immutable
class Compacted:
    """What ``/responses/compact`` answers: also the request's ``service_tier`` (as asked:
    the surface says what it was served at), ``safety_identifier`` and image context policy
    in effect, which it echoes."""

    id: str
    created_at: float
    output: list[Item]
    usage: Usage
    service_tier: str | None = None
    safety_identifier: str | None = None
    image: dict[str, str] | None = None


@immutable
class Prepared:
    """What a response starts from (:meth:`Compaction.prepare`)."""

    context: list[Item]
    """The context its rounds send (fitted to the smallest window, with ``fitted``)."""
    compaction: CompactionStep | None = None
    """The compaction it owes first, if any."""
    fitted: Fitted | None = None
    """Its fit for each candidate, when they declare different windows."""
    applied: Sequence[dict[str, Any]] = ()
    """What its clearing edits cleared (:attr:`.clearing.Cleared.applied`)."""
    threshold: int | None = None
    """The ``context_management`` threshold its tool loop checks before its later rounds,
    when it did not compact first (:mod:`.between_rounds`)."""


class CompactionStep:
    """The compaction a response makes before its rounds; for a ``compaction_trigger``
    (``alone``) instead of them: its one ``compaction`` item is the whole output."""

    def __init__(
        self,
        sealer: Sealer | None,
        tenant_id: str,
        context: list[Item],
        view: list[Item],
        *,
        alone: bool,
    ) -> None:
        self._sealer = sealer
        self._tenant_id = tenant_id
        self._context = context
        self._view = view
        self.alone = alone

    async def run(
        self, run: Run, candidate: Candidate, usage: Usage, telemetry: Telemetry
    ) -> list[Item]:
        """Summarize (asking ``candidate``, with the request's ``summary_prompt`` if it has
        one; the call a span of ``telemetry``'s), count it (the response's first
        :class:`~stateway.core.usage.Iteration`), emit the compaction item (added and
        done each carry it whole, with its seal, as the hosted API's do, compacting
        between them; its summary shown beside its seal when ``summary_shown``) and
        return the context the rounds go on with: the model view of the context and that
        item, then the prefill the answer continues, if any (:func:`prefill`: the summary
        covers it too, and the answer still goes on from it)."""
        state = run.state
        asked = state.settings
        summary = await summarize(
            candidate.backend,
            candidate.model,
            state.instructions,
            self._view,
            summary_settings(asked),
            asked.summary_prompt or SUMMARY_PROMPT,
            window=candidate.context_window,
            cache_salt=run.cache_salt,
            telemetry=telemetry,
        )
        usage.add(summary.usage)
        state.iterations.append(Iteration(sealed.COMPACTION, summary.usage))
        item = compaction_item(self._sealer, self._tenant_id, summary.text)
        if asked.summary_shown:
            item[SHOWN] = summary.text
        output = run.state.output
        index = len(output)
        output.append(item)
        run.emit(ev.ItemAdded(index, dict(item)))  # whole, its seal in it, as hosted
        run.emit(ev.Compacting(index, item["id"]))
        run.emit(ev.ItemDone(index, dict(item)))
        context = [*self._context, item]
        continued = prefill(self._context, asked)
        if continued is not None:
            context = [*self._context[:-1], item, continued]
        return model_view(context, self._tenant_id, self._sealer, len(context))


def prefill(context: list[Item], settings: GenerationSettings) -> Item | None:
    """The assistant message ``context`` ends with, which the answer continues
    (``continue_final_message``: Messages' prefill), if any."""
    last = context[-1] if context else None
    if not settings.continue_final_message or last is None:
        return None
    return last if last.get("type") == MESSAGE and last.get("role") == "assistant" else None


def compaction_item(sealer: Sealer | None, tenant_id: str, summary: str) -> Item:
    return {
        "id": new_id("cmp"),
        "type": sealed.COMPACTION,
        "encrypted_content": sealed.seal(sealer, sealed.COMPACTION, tenant_id, summary),
    }


class Compaction:
    def __init__(self, store: ResponseStore, sealer: Sealer | None) -> None:
        self._store = store
        self.sealer = sealer

    def prepare(
        self,
        tenant_id: str,
        command: CreateResponse,
        candidates: list[Candidate],
        context: list[Item],
    ) -> Prepared:
        """The context the run sends, the compaction it owes first, if any, and when
        ``candidates`` (those able to serve it) declare different windows to fit it to,
        its fit for each (the context returned is fitted to the smallest)."""
        cleared = self._cleared_view(tenant_id, command, context)
        view, applied = cleared.items, cleared.applied
        settings = command.settings
        window = context_window(candidates)  # a compaction is made once, for any of them
        trigger = any(item.get("type") == sealed.COMPACTION_TRIGGER for item in command.input)
        threshold = compact_threshold(settings.context_management, window)
        if trigger or (
            threshold is not None
            and estimate_context(command.instructions, view, settings.tools) >= threshold
        ):
            alone = trigger or _paused(settings.context_management)
            step = CompactionStep(self.sealer, tenant_id, context, view, alone=alone)
            return Prepared(view, step, applied=applied)
        if not _between_rounds(settings.context_management):
            threshold = None
        if settings.truncation != "auto" or window is None:
            return Prepared(view, applied=applied, threshold=threshold)
        fits = Fitted(view, _reserve(command.instructions, settings))
        fitted = fits.fit(window)
        if len(candidates) > 1 and any(c.context_window != window for c in candidates):
            return Prepared(fitted, fitted=fits, applied=applied, threshold=threshold)
        return Prepared(fitted, applied=applied, threshold=threshold)

    async def compact(
        self,
        tenant_id: str,
        command: CompactResponse,
        router: Router,
        cache_salt: str | None = None,
        telemetry: Telemetry | None = None,
    ) -> Compacted:
        """``router``: the current config generation's; ``cache_salt``: the tenant's, which
        the summary call carries; ``telemetry``: what makes the call a span."""
        route = router.resolve(command.model)
        create = CreateResponse(
            model=command.model,
            input=command.input,
            instructions=command.instructions,
            previous_response_id=command.previous_response_id,
        )
        context = await build_context(self._store, tenant_id, create, route.backend)
        view = model_view(context, tenant_id, self.sealer, len(context) - len(command.input))
        view = shown(view, route.backend)  # none its upstream API has no place for
        if not view:
            raise InvalidRequest(
                "There is nothing to compact: the input and the previous response hold no items.",
                param="input",
                code="missing_required_parameter",
            )
        summary = await summarize(
            route.backend,
            route.upstream_model,
            command.instructions,
            view,
            summary_settings(command.settings),
            window=route.candidates[0].context_window,
            cache_salt=cache_salt,
            telemetry=telemetry,
        )
        item = compaction_item(self.sealer, tenant_id, summary.text)
        output = [*kept_messages(context), item]
        asked = command.settings
        return Compacted(
            new_id("resp"),
            time.time(),
            output,
            summary.usage,
            asked.service_tier,
            asked.safety_identifier,
            asked.image,
        )

    def verify(self, tenant_id: str, command: CreateResponse, context: list[Item]) -> None:
        """Check the context's seals as its model view does (a 400 for one that does not
        open), for a run that makes no view: a prewarm, which still stores its input."""
        model_view(
            context, tenant_id, self.sealer, len(context) - len(command.input), _prior(command)
        )

    def fitted(
        self, tenant_id: str, command: CreateResponse, window: int | None, context: list[Item]
    ) -> Cleared:
        """The context's model view as a round would send it to a candidate whose window
        is ``window``, its clearing edits applied, without compacting (what
        ``/responses/input_tokens`` counts), and what the edits cleared."""
        cleared = self._cleared_view(tenant_id, command, context)
        settings = command.settings
        if settings.truncation != "auto":
            return cleared
        fitted = Fitted(cleared.items, _reserve(command.instructions, settings)).fit(window)
        return Cleared(fitted, cleared.applied)

    def _cleared_view(
        self, tenant_id: str, command: CreateResponse, context: list[Item]
    ) -> Cleared:
        """The context's model view with the request's clearing edits applied."""
        view = model_view(
            context, tenant_id, self.sealer, len(context) - len(command.input), _prior(command)
        )
        settings = command.settings
        if not settings.context_edits:
            return Cleared(view)
        return clear(command.instructions, view, settings.tools, settings.context_edits)


def context_window(candidates: list[Candidate]) -> int | None:
    """The window a context must fit to be served by any of ``candidates`` (the smallest
    they declare: a round may fail over to any), or None when none declares one."""
    windows = [c.context_window for c in candidates]
    known = [window for window in windows if window is not None]
    return min(known) if known else None


def _reserve(instructions: str | None, settings: GenerationSettings) -> int:
    """``truncation: "auto"``: what of a window the view may not take (the output
    allowance, the instructions and tools)."""
    fixed = estimate_context(instructions, [], settings.tools)
    return (settings.max_output_tokens or 0) + fixed


def compact_threshold(entries: list[dict[str, object]], window: int | None) -> int | None:
    """The token count at which a ``context_management`` compaction triggers, if any."""
    for entry in entries:
        if entry.get("type") != sealed.COMPACTION:
            continue
        threshold = entry.get("compact_threshold")
        if isinstance(threshold, int):
            return threshold
        return int(window * DEFAULT_THRESHOLD) if window is not None else None
    return None


def _paused(entries: list[dict[str, object]]) -> bool:
    """Whether a ``context_management`` compaction ends the response (Messages'
    ``pause_after_compaction``): its compaction item is then the whole output."""
    return any(entry.get("pause_after_compaction") is True for entry in entries)


def _between_rounds(entries: list[dict[str, object]]) -> bool:
    """Whether a ``context_management`` threshold is checked between a response's rounds
    too: a Responses client's, not Messages' (whose entries say ``pause_after_compaction``:
    :mod:`.between_rounds`)."""
    return not any("pause_after_compaction" in entry for entry in entries)


def _prior(command: CreateResponse) -> str:
    """The parameter that names the stored items ``command`` continues."""
    return "conversation" if command.conversation_id is not None else "previous_response_id"
