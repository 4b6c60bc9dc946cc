"""The room a model's window leaves for output beside the prompt, asked for by a request
whose ``max_output_tokens`` may be fitted to it (Messages' ``max_tokens``: Claude Code asks
32,000 whatever the window;
:attr:`~stateway.core.generation_settings.GenerationSettings.max_output_tokens_fit_window`).

A candidate that refused such a request for asking more output tokens than its window has
room for beside the prompt (vLLM's, SGLang's refusal saying both; a prompt vLLM's renderer
counted only as far as that room, or output tokens beyond the whole window, which vLLM
refuses before it counts: by the server's tokenizer) is sent it again asking for that room
(:meth:`WindowRoom.refused`). The run remembers the window it refused for: its later
rounds (the hidden rounds of gateway tools and Anthropic server tools, each asking the
client's ``max_tokens`` again) would be refused alike, so each is counted first by the
server's tokenizer and asks that candidate only the room its own prompt leaves
(:meth:`WindowRoom.counted`). The room itself is not carried over: every round's prompt is
longer than the last by its output and the tools' results, and a room asked too small
would cut the answer short and say it filled the window. Without a count (no tokenizer, or
it failed) a round asks as the client did, and is refused and asked again as the first.
"""

from __future__ import annotations

from dataclasses import replace

from stateway.core.backend import Backend, TokenCounter
from stateway.core.errors import GatewayError, UpstreamContextTooLong, UpstreamOutputOverWindow
from stateway.core.inference import InferenceRequest
from stateway.core.routing import Candidate


class WindowRoom:
    """The windows a run's candidates refused its output tokens for, by candidate key."""

    __slots__ = ("_windows",)

    def __init__(self) -> None:
        self._windows: dict[str, int] = {}

    async def refused(
        self, candidate: Candidate, request: InferenceRequest, error: GatewayError, least: int
    ) -> InferenceRequest | None:
        """``request`` asking only the output tokens the window has room for beside the
        prompt, when ``error`` refused it for asking more and it may ask fewer; None
        otherwise (no room for ``least``, the upstream's least, is no room). A refusal
        whose count stopped at the room asked for (``at_least``: vLLM's renderer) says
        nothing of the prompt, nor does one of output tokens beyond the whole window
        (vLLM's, before it counts): the candidate's tokenizer counts it, else there is no
        room known. The candidate's window is remembered when it is asked again."""
        settings = request.settings
        if not settings.max_output_tokens_fit_window or settings.max_output_tokens is None:
            return None
        if isinstance(error, UpstreamOutputOverWindow):  # refused before the prompt was counted
            tokens = await _counted(candidate.backend, request)
        elif isinstance(error, UpstreamContextTooLong) and error.requested is not None:
            tokens = await _counted(candidate.backend, request) if error.at_least else error.tokens
        else:
            return None
        if tokens is None:
            return None
        fitted = _asking(request, error.window - tokens, least)
        if fitted is not None:
            self._windows[candidate.key] = error.window
        return fitted

    async def counted(
        self, candidate: Candidate, request: InferenceRequest, least: int
    ) -> InferenceRequest | None:
        """``request`` asking only the room its prompt, counted by the candidate's
        tokenizer, leaves in the window the candidate refused an earlier round's output
        tokens for; None when it refused none, there is no count, or the room is not less
        than asked (or less than ``least``: the request is sent as asked, and its refusal
        says why)."""
        window = self._windows.get(candidate.key)
        if window is None:
            return None
        tokens = await _counted(candidate.backend, request)
        return None if tokens is None else _asking(request, window - tokens, least)


def _asking(request: InferenceRequest, room: int, least: int) -> InferenceRequest | None:
    """``request`` asking ``room`` output tokens, when that is fewer than it asks and at
    least ``least``; None otherwise."""
    settings = request.settings
    asked = settings.max_output_tokens
    if asked is None or not least <= room < asked:
        return None
    return replace(request, settings=replace(settings, max_output_tokens=room))


async def _counted(backend: Backend, request: InferenceRequest) -> int | None:
    """``request``'s input tokens by ``backend``'s upstream tokenizer; None when it has
    none, or it failed (the refusal stands)."""
    if not isinstance(backend, TokenCounter):
        return None
    try:
        return await backend.count_tokens(request)
    except GatewayError:
        return None
