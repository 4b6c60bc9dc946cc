"""One summarization call: the context plus :data:`~.prompt.SUMMARY_PROMPT` (or the prompt
a request gives), no tools;
cached and served as the request asked (its prompt cache key and options, service tier).

The backend (a route's first candidate: a compaction does not fail over) is asked the
way it is asked for any round (its API shape, its errors), not streamed; the summary is
the text of the answer (reasoning and any tool call the model attempts anyway are
ignored). An empty answer is an upstream failure: a compaction item must stand for the
turns it replaces. The context is fitted to the candidate's window, and asked again
smaller when the server refuses it as too long (:mod:`.summary_window`).
"""

from __future__ import annotations

from contextlib import aclosing
from dataclasses import dataclass, field

from stateway.core.backend import Backend
from stateway.core.compaction.prompt import SUMMARY_PROMPT, prompt_message
from stateway.core.compaction.summary_window import ATTEMPTS, SummaryWindow
from stateway.core.errors import CONTEXT_LENGTH_EXCEEDED, UpstreamError
from stateway.core.generation_settings import GenerationSettings
from stateway.core.inference import Answered, Finish, InferenceRequest, TextDelta, UsageReport
from stateway.core.items import Item
from stateway.core.telemetry import NoTelemetry, Telemetry
from stateway.core.usage import Usage


@dataclass(slots=True)
class Summary:
    text: str
    usage: Usage = field(default_factory=Usage)


def summary_settings(settings: GenerationSettings) -> GenerationSettings:
    """What a summary call keeps of a request's settings: how it is cached and served, and
    for whom; not its tools, sampling or output format (the summary is the gateway's ask)."""
    return GenerationSettings(
        user=settings.user,
        safety_identifier=settings.safety_identifier,
        prompt_cache_key=settings.prompt_cache_key,
        prompt_cache_retention=settings.prompt_cache_retention,
        prompt_cache_options=settings.prompt_cache_options,
        client_cache_marks=settings.client_cache_marks,
        service_tier=settings.service_tier,
    )


async def summarize(
    backend: Backend,
    model: str,
    instructions: str | None,
    items: list[Item],
    settings: GenerationSettings,
    prompt: str = SUMMARY_PROMPT,
    *,
    window: int | None = None,
    cache_salt: str | None = None,
    telemetry: Telemetry | None = None,
) -> Summary:
    """``model``'s summary of ``items`` (a model view), asked of ``backend`` with
    ``settings`` (:func:`summary_settings`) and ``prompt`` as the last user message, and
    the tenant's ``cache_salt``; ``items`` fitted to ``window`` (the candidate's, if known)
    and to the server's refusals (:mod:`.summary_window`). Raises the backend's
    :class:`UpstreamError` subclasses. Each call is an attempt's span of ``telemetry``
    (a model call as a round's, its tokens told), under the span of the request or run
    that compacts."""
    telemetry = telemetry or NoTelemetry()
    shown = SummaryWindow(instructions, items, prompt, window)
    attempt = 1
    while True:
        request = InferenceRequest(
            model=model,
            instructions=instructions,
            items=[*shown.items, prompt_message(prompt)],
            settings=settings,
            stream=False,
            cache_salt=cache_salt,
        )
        try:
            with telemetry.attempt(backend, request) as span:
                # the upstream's id and model, noted by the backend while the span records
                request.answered = Answered() if span.recording else None
                summary, ended = await _summary(backend, request)
                if span.recording:
                    span.answered(ended.reason, ended.usage, request.answered)
                return summary
        except UpstreamError as refused:
            too_long = refused.code == CONTEXT_LENGTH_EXCEEDED
            if not too_long or attempt == ATTEMPTS or not shown.shrink(refused):
                raise
        attempt += 1


@dataclass(slots=True)
class _Ended:
    """How a summary call's answer ended, as its span tells it."""

    reason: str = "stop"
    usage: Usage | None = None
    """What its upstream reported (None: nothing)."""


async def _summary(backend: Backend, request: InferenceRequest) -> tuple[Summary, _Ended]:
    chunks: list[str] = []
    ended = _Ended()
    async with aclosing(backend.infer(request)) as deltas:
        async for delta in deltas:
            match delta:
                case TextDelta(text=text):
                    chunks.append(text)
                case UsageReport(usage=reported):
                    ended.usage = reported  # some servers repeat running totals: the last counts
                case Finish(reason=reason):
                    ended.reason = reason
    text = "".join(chunks).strip()
    if not text:
        raise UpstreamError(
            f"The model server '{backend.name}' answered the compaction request without a summary.",
            code="empty_summary",
        )
    return Summary(text, ended.usage or Usage()), ended
