"""Calls of the client's tools that the feature stages withheld from the model.

A ``tool_catalog_filter`` stage (the shipped ``tool_filter``) takes a declared tool out of
what the model is offered, yet the model may call it anyway: it saw the tool in earlier
turns, or its server does not hold calls to the tools offered (vLLM's tool parsers pass on
whatever name the model wrote). The client declared that tool, so it would run the call:
such a call never reaches it. The output assembler opens no item for it and emits none of
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

from typing import Final

from stateway.core.items import FUNCTION_CALL, FUNCTION_CALL_OUTPUT, Item
from stateway.core.tools.catalog import Catalog
from stateway.core.tools.toolset import CLIENT_TYPES

NOT_AVAILABLE: Final = "Error: the tool '{name}' is not available; this call was not run."
"""What the model is told of its call of a withheld tool (an error result, as an MCP tool's
failure reads: :func:`stateway.core.tools.result_text.mcp_output`)."""


def withheld_names(declared: list[Item], offered: list[Item]) -> frozenset[str]:
    """The model-visible names of the client's tools ``declared`` that no tool left
    ``offered`` has: those the stages withheld."""
    return _names(declared) - _names(offered)


def _names(tools: list[Item]) -> frozenset[str]:
    client = [tool for tool in tools if tool.get("type") in CLIENT_TYPES]
    return frozenset(function["name"] for function in Catalog(client).model_tools())


class WithheldCalls:
    """One response's calls of withheld tools, each answered where the model made it."""

    __slots__ = ("_answered", "names")

    def __init__(self, names: frozenset[str] = frozenset()) -> None:
        self.names = names
        """The model-visible names of the tools withheld from this response."""
        self._answered: list[tuple[int, Item, Item]] = []
        """Each refused call and its answer, with the output position it was made at."""

    def answer(self, position: int, call: Item) -> None:
        """Answer ``call`` (a ``function_call`` as the model made it, before the output
        item at ``position``): the tool is not available."""
        output = NOT_AVAILABLE.format(name=call["name"])
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
