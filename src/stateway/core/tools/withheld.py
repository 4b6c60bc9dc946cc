"""The client's tools that the feature stages withheld from the model, and calls of them.

A ``tool_catalog_filter`` stage (the shipped ``tool_filter``) takes a tool out of what the
model is offered: a declared one, or one the context's items offer (an earlier turn's
``additional_tools``, a tool search's ``tool_search_output``), which the stages are
shown beside the declared (:func:`stateway.core.stages.chain.before_planning`). Such an
item goes on offering what the stages left: the model is sent the context
:func:`unoffered`, without the withheld tools in those items (nor named as loaded by a
search), while what is stored keeps them as sent.

Yet the model may call a withheld tool anyway: it saw the tool in earlier turns, or its
server does not hold calls to the tools offered (vLLM's tool parsers pass on whatever
name the model wrote). The client has that tool, so it would run the call: such a call
never reaches it. The output assembler opens no item for it and emits none of
its events (a call's name comes with its first fragment, before anything of it could be
shown), and the model is answered instead, as the gateway answers a call of an MCP tool
it does not offer: an error output saying the tool is not available, in a round of its
own that the client does not see. The call and its answer are the model's view only
(:meth:`WithheldCalls.woven`): they are neither output nor stored, so a later turn does
not show them to the model either.

Such a call in a round with calls the client does answer is dropped: the client's calls
go back to it at once, as in a mixed round of gateway and client calls.
"""

from __future__ import annotations

import logging
from typing import Any, Final

from stateway.core.items import FUNCTION_CALL, FUNCTION_CALL_OUTPUT, TOOL_SEARCH_OUTPUT, Item
from stateway.core.telemetry import Telemetry
from stateway.core.tools.catalog import ADDITIONAL_TOOLS, NAMESPACE, visible_names

log = logging.getLogger(__name__)

WITHHELD: Final = "withheld"
"""The ``tool`` of such a call in ``stateway_tool_calls_total`` (its outcome ``error``)."""

NOT_AVAILABLE: Final = "Error: the tool '{name}' is not available; this call was not run."
"""What the model is told of its call of a withheld tool (an error result, as an MCP tool's
failure reads: :func:`stateway.core.tools.result_text.mcp_output`)."""
_OFFERING: Final = (ADDITIONAL_TOOLS, TOOL_SEARCH_OUTPUT)
"""The context's items that offer tools."""


def withheld_names(shown: list[Item], left: list[Item]) -> frozenset[str]:
    """The model-visible names of the client's tools ``shown`` to the stages that no tool
    they ``left`` has: those they withheld."""
    return visible_names(shown) - visible_names(left)


def unoffered(context: list[Item], names: frozenset[str]) -> list[Item]:
    """``context`` as the model is sent it: the tools named ``names`` taken out of what its
    ``additional_tools`` and ``tool_search_output`` items offer (each such item a copy;
    a namespace keeps its other members), so that no withheld tool is offered from them
    and no search tells the model it loaded one. What is stored is left as it came."""
    return [_unoffering(item, names) if item.get("type") in _OFFERING else item for item in context]


def _unoffering(item: Item, names: frozenset[str]) -> Item:
    tools = item.get("tools")
    if not isinstance(tools, list):
        return item
    kept: list[Any] = []
    for tool in tools:
        if isinstance(tool, dict) and tool.get("type") == NAMESPACE and tool.get("tools"):
            members = tool["tools"]
            left = [m for m in members if not _withheld({**tool, "tools": [m]}, names)]
            if left:
                kept.append(tool if len(left) == len(members) else {**tool, "tools": left})
        elif not _withheld(tool, names):
            kept.append(tool)
    return {**item, "tools": kept}


def _withheld(tool: Any, names: frozenset[str]) -> bool:
    """Whether ``tool`` is a client's tool whose every model-visible name is withheld."""
    own = visible_names([tool]) if isinstance(tool, dict) else frozenset()
    return bool(own) and own <= names


class WithheldCalls:
    """One response's calls of withheld tools, each answered where the model made it."""

    __slots__ = ("_answered", "_telemetry", "names")

    def __init__(
        self, names: frozenset[str] = frozenset(), telemetry: Telemetry | None = None
    ) -> None:
        self.names = names
        """The model-visible names of the tools withheld from this response."""
        self._telemetry = telemetry
        self._answered: list[tuple[int, Item, Item]] = []
        """Each refused call and its answer, with the output position it was made at."""

    def answer(self, position: int, call: Item) -> None:
        """Answer ``call`` (a ``function_call`` as the model made it, before the output
        item at ``position``): the tool is not available. The operator is told (a warning
        naming the tool, a count in ``stateway_tool_calls_total``): a deny list the model
        runs into is worth knowing of."""
        name = call["name"]
        log.warning("the model called %r, a tool the route's stages withheld: not run", name)
        if self._telemetry is not None:
            self._telemetry.tool_called(WITHHELD, "error")
        output = NOT_AVAILABLE.format(name=name)
        answer = {"type": FUNCTION_CALL_OUTPUT, "call_id": call["call_id"], "output": output}
        self._answered.append((position, call, answer))

    def woven(self, output: list[Item]) -> list[Item]:
        """``output`` as the model's next round sees it: each refused call and its answer
        in the place it was made."""
        if not self._answered:
            return output
        out: list[Item] = []
        taken = 0
        for position, call, answer in self._answered:
            position = max(taken, min(position, len(output)))
            out += output[taken:position]
            out += (call, answer)
            taken = position
        return out + output[taken:]


def withheld_call(call_id: str, name: str) -> Item:
    """The item of a call of a withheld tool, as the model made it (never shown)."""
    return {"type": FUNCTION_CALL, "call_id": call_id, "name": name, "arguments": ""}
