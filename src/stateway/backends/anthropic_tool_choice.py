"""A Messages ``tool_choice`` as the server behind an Anthropic backend takes it.

Anthropic forces the tool a ``{"type": "tool", "name": ...}`` choice names, and with
``{"type": "none"}`` the model calls nothing. llama.cpp's ``llama-server`` serves
``/v1/messages`` by converting the body to Chat Completions, which keeps only a choice's
kind: ``tool`` becomes ``required`` over every tool offered, so the model calls whichever
it likes, and ``none`` is dropped, leaving ``auto`` (its grammar for calls armed), so a
call the model writes is a call. ``auto`` and ``any`` it reads as they are. To it a named
choice goes as ``any`` with only the tool it names offered, and ``none`` with no tools at
all: the same force in the words it takes, at the price of a prefix cache miss for that
call (the chat template writes the tools first).

Which server it is, its model listing tells
(:func:`~stateway.backends.model_windows.serves_llama_cpp`), learned once per backend
(:mod:`stateway.backends.listed_trait`): from the listing the window discovery reads,
else asked by the first call whose choice is one of those two. Every other server gets
the choice as it came, every tool offered: Anthropic, whose prompt cache begins with the
tools, vLLM, a server refusing its listing, one not yet known (its listing unanswered:
asked again once a back-off has passed), and one the gateway cannot tell, such as a
proxy in front of llama-server that lists its models as its own (llama-swap).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from stateway.backends.listed_trait import ListedTrait
from stateway.backends.model_windows import serves_llama_cpp
from stateway.backends.upstream_http import UpstreamClient

_REWRITTEN = frozenset({"tool", "none"})
"""The kinds of choice llama.cpp does not read as they are."""


class ToolChoices:
    """Whether the server behind an Anthropic backend is llama.cpp's."""

    __slots__ = ("_llama_cpp",)

    def __init__(self, client: UpstreamClient) -> None:
        self._llama_cpp = ListedTrait(client, serves_llama_cpp)

    def learn(self, listing: Sequence[object]) -> None:
        """Learn it from ``listing`` (the ``data`` of the server's ``GET /models``)."""
        self._llama_cpp.learn(listing)

    async def send(self, body: dict[str, Any]) -> None:
        """Give a Messages ``body`` its ``tool_choice`` in a form the server forces (in
        place): as it came, or, to llama.cpp, a named one as :func:`as_any` and ``none``
        as :func:`without_tools`."""
        choice = body.get("tool_choice")
        if not isinstance(choice, dict) or choice.get("type") not in _REWRITTEN:
            return
        if not await self._llama_cpp.held():
            return
        if choice["type"] == "none":
            without_tools(body)
        else:
            as_any(body, choice)


def as_any(body: dict[str, Any], choice: dict[str, Any]) -> None:
    """``body`` (in place) with ``any`` for the named ``choice`` and only the tool it names
    offered; as it was when it offers no tool of that name (the server judges it)."""
    offered = [t for t in body.get("tools") or () if t.get("name") == choice.get("name")]
    if offered:
        body["tools"] = offered
        rest = {k: v for k, v in choice.items() if k not in ("type", "name")}
        body["tool_choice"] = {"type": "any", **rest}


def without_tools(body: dict[str, Any]) -> None:
    """``body`` (in place) offering no tools, for a choice of ``none``: the calls of
    earlier turns stay in its messages."""
    body.pop("tools", None)
    body.pop("tool_choice", None)
