"""One summarization call: the context plus :data:`~.prompt.SUMMARY_PROMPT` (or the prompt
a request gives), no tools;
cached and served as the request asked (its prompt cache key and options, service tier).

The backend (a route's first candidate: a compaction does not fail over) is asked the
way it is asked for any round (its API shape, its errors), not streamed; the summary is
the text of the answer (reasoning and any tool call the model attempts anyway are
ignored). An empty answer is an upstream failure: a compaction item must stand for the
turns it replaces.
"""

from __future__ import annotations

from contextlib import aclosing
from dataclasses import dataclass, field

from stateway.core.commands import GenerationSettings
from stateway.core.compaction.prompt import SUMMARY_PROMPT
from stateway.core.errors import UpstreamError
from stateway.core.inference import InferenceRequest, TextDelta, UsageReport
from stateway.core.items import MESSAGE, Item
from stateway.core.ports import Backend
from stateway.core.usage import Usage


@dataclass(slots=True)
class Summary:
    text: str
    usage: Usage = field(default_factory=Usage)


def prompt_message(prompt: str = SUMMARY_PROMPT) -> Item:
    return {
        "type": MESSAGE,
        "role": "user",
        "content": [{"type": "input_text", "text": prompt}],
    }


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
    cache_salt: str | None = None,
) -> Summary:
    """``model``'s summary of ``items`` (a model view), asked of ``backend`` with
    ``settings`` (:func:`summary_settings`) and ``prompt`` as the last user message, and
    the tenant's ``cache_salt``. Raises the backend's :class:`UpstreamError` subclasses."""
    request = InferenceRequest(
        model=model,
        instructions=instructions,
        items=[*items, prompt_message(prompt)],
        settings=settings,
        stream=False,
        cache_salt=cache_salt,
    )
    chunks: list[str] = []
    usage = Usage()
    async with aclosing(backend.infer(request)) as deltas:
        async for delta in deltas:
            match delta:
                case TextDelta(text=text):
                    chunks.append(text)
                case UsageReport(usage=reported):
                    usage = reported  # some servers repeat running totals: the last counts
    text = "".join(chunks).strip()
    if not text:
        raise UpstreamError(
            f"The model server '{backend.name}' answered the compaction request without a summary.",
            code="empty_summary",
        )
    return Summary(text, usage)
