"""A named ``tool_choice`` (``{"type": "function", "function": {"name": ...}}``) as each
Chat Completions server takes it.

vLLM and SGLang force the function a named choice names (their guided decoding holds the
call to it), and get the choice as named: the tools offered stay those of every other
call, so their prefix cache, which holds the tools the chat template renders first,
still serves. llama.cpp's ``llama-server`` takes only the string choices: an object is of
the wrong type, which it reads as ``auto`` (a warning in its log), so its model may answer
without calling anything. Behind it a named choice goes as ``required`` with only the
function it names offered: the same force in the words it takes, as an ``allowed_tools``
choice is its ``mode`` over the tools it names
(:meth:`~stateway.core.tools.catalog.Catalog.model_choice`).

Which server it is, its model listing tells
(:func:`~stateway.backends.model_windows.forces_named_choice`), learned once per backend
(:mod:`stateway.backends.listed_trait`): from the listing the window discovery reads,
else asked by the first call naming a function. Only a server the listing shows to force
a named choice (vLLM, SGLang, hosted OpenAI) gets it named; any other, llama.cpp or one
unknown (a proxy such as llama-swap in front of llama-server lists its models as its own;
Ollama, LM Studio), or one refusing its listing, gets ``required`` over that function:
forced whatever the server, at the price of a prefix cache miss where one would have
served. While none is known (the server unreachable, hanging or still loading, a 5xx, a
429, the gateway's credentials refused) a named choice goes as ``required`` too, and the
listing is asked again once a back-off has passed.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from stateway.backends.listed_trait import ListedTrait
from stateway.backends.model_windows import forces_named_choice
from stateway.backends.upstream_http import UpstreamClient


class NamedChoices:
    """Whether the server behind a Chat backend forces a named choice sent as named."""

    __slots__ = ("_forcing",)

    def __init__(self, client: UpstreamClient) -> None:
        self._forcing = ListedTrait(client, forces_named_choice)

    @property
    def taken(self) -> bool | None:
        """Whether it does; None while its listing has not told."""
        return self._forcing.known

    def learn(self, listing: Sequence[object]) -> None:
        """Learn it from ``listing`` (the ``data`` of the server's ``GET /models``)."""
        self._forcing.learn(listing)

    async def send(self, body: dict[str, Any], choice: dict[str, Any]) -> None:
        """Give a Chat Completions ``body`` whose ``tool_choice`` is ``choice``, naming a
        function, the choice in a form the server forces (in place): as named, or as
        ``required`` over that function alone."""
        if not await self._forcing.held():
            as_required(body, choice)


def as_required(body: dict[str, Any], choice: dict[str, Any]) -> None:
    """``body`` (in place) with ``required`` for ``choice`` and only the function it names
    offered; as it was when it offers no function of that name (the server judges it)."""
    function = choice.get("function")
    name = function.get("name") if isinstance(function, dict) else None
    offered = [tool for tool in body.get("tools") or () if _named(tool, name)]
    if offered:
        body["tools"] = offered
        body["tool_choice"] = "required"


def _named(tool: object, name: object) -> bool:
    function = tool.get("function") if isinstance(tool, dict) else None
    return isinstance(function, dict) and function.get("name") == name
