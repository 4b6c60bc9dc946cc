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

An upstream that speaks Responses natively also answers with whole call items of its own
(:class:`~stateway.core.inference.OutputItem`): a ``shell_call``, ``local_shell_call``,
``apply_patch_call``, ``computer_call``, ``custom_tool_call``, or a type yet to come. Any
such item with a ``call_id`` is a call the client would run and answer; it is the
client's only if its tool was offered this round (:meth:`WithheldCalls.refused_item`): a
``custom_tool_call`` (or ``function_call``) by its name, a client's tool not withheld;
any other by its type, a tool sent as declared (:attr:`Toolset.native
<stateway.core.tools.toolset.Toolset.native>`) whose type the call's names (``shell`` for
``shell_call``, ``computer_use_preview`` for ``computer_call``). A tool the stages
withheld is never sent, and the hosted API calls only the tools it is offered, so a call
of any other tool is answered as one of a withheld tool is, shown to the model as the
function call it would have made. The upstream's own calls, which it ran itself
(``image_generation_call``, ``web_search_call``, ``code_interpreter_call``, ``mcp_call``:
no ``call_id``; a ``tool_search_call`` whose ``execution`` is ``server``), are results,
not calls for the client to run, and pass. Its ``mcp_approval_request`` (hosted asks one
for an ``mcp`` tool it was given) is a call too, though none the client could answer: the
gateway runs a client's MCP servers itself and sends the upstream no ``mcp`` tool, so the
server is none the request declared through it, and an approval could reach neither the
gateway's tools nor the upstream's. It is answered as a call of a tool not offered, shown
to the model as the function call of that server's tool (``<server_label>__<name>``, as
the gateway names one), under the request's ``id``.
"""

from __future__ import annotations

import logging
from typing import Any, Final

import orjson

from stateway.core.items import (
    CUSTOM_TOOL_CALL,
    FUNCTION_CALL,
    FUNCTION_CALL_OUTPUT,
    MCP_APPROVAL_REQUEST,
    TOOL_SEARCH_OUTPUT,
    Item,
)
from stateway.core.telemetry import Telemetry
from stateway.core.tools import client_hosted
from stateway.core.tools.catalog import Catalog
from stateway.core.tools.context_offers import visible_names
from stateway.core.tools.model_names import model_name
from stateway.core.tools.tool_types import ADDITIONAL_TOOLS, NAMESPACE

log = logging.getLogger(__name__)

WITHHELD: Final = "withheld"
"""The ``tool`` of such a call in ``stateway_tool_calls_total`` (its outcome ``error``)."""

NOT_AVAILABLE: Final = "Error: the tool '{name}' is not available; this call was not run."
"""What the model is told of its call of a withheld tool (an error result, as an MCP tool's
failure reads: :func:`stateway.core.tools.result_text.mcp_output`)."""
_OFFERING: Final = (ADDITIONAL_TOOLS, TOOL_SEARCH_OUTPUT)
"""The context's items that offer tools."""
_CALL: Final = "_call"
"""How the type of a call item ends (``shell_call``: a call of the ``shell`` tool)."""
_NAMED: Final = frozenset({FUNCTION_CALL, CUSTOM_TOOL_CALL})
"""The call items that name their tool; any other's type names it."""
_PLACED: Final = frozenset({"id", "type", "status", "call_id"})
"""What a whole call item holds besides what it asks the tool."""


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

    def withholds(self, name: str | None, catalog: Catalog) -> bool:
        """Whether a call of the model-visible ``name`` is of a client's tool the stages
        withheld (not of a gateway tool ``catalog`` offers by that name): never the
        client's."""
        if not name or name not in self.names:
            return False
        entry = catalog.entry(name)
        return entry is None or not entry.gateway_owned

    def refused_item(self, item: Item, catalog: Catalog, native: list[Item]) -> Item | None:
        """A whole call ``item`` an upstream made, as the ``function_call`` the model is
        shown it made, when it is not the client's: a call of a tool not offered this round
        (by ``catalog``'s client tools, not withheld, or by the ``native`` tools sent as
        declared); None when it is the client's, or no call the client would run."""
        kind, call_id = item.get("type"), item.get("call_id")
        if kind == MCP_APPROVAL_REQUEST:  # never the client's: the gateway sends no mcp tool
            name = model_name(str(item.get("name") or ""), str(item.get("server_label") or ""))
            return _function_call(str(item.get("id") or ""), name, item.get("arguments") or "")
        if not client_call(item):
            return None  # no call, or the upstream's own, run there (an image generation)
        kind, call_id = str(kind), str(call_id)  # both strings, as client_call found them
        if kind in _NAMED:
            name = model_name(str(item.get("name") or ""), item.get("namespace") or None)
            entry = catalog.entry(name)
            if entry is not None and not entry.gateway_owned and name not in self.names:
                return None
            given = item.get("arguments") if kind == FUNCTION_CALL else {"input": item.get("input")}
            return _function_call(call_id, name, given)
        tool = kind.removesuffix(_CALL)
        if any(_of_type(declared, tool) for declared in native):
            return None
        if kind in client_hosted.ANSWERS:
            return client_hosted.model_item(item)
        return _function_call(call_id, tool, {k: v for k, v in item.items() if k not in _PLACED})

    def answer(self, position: int, call: Item) -> None:
        """Answer ``call`` (a ``function_call`` as the model made it, before the output
        item at ``position``): the tool is not available. The operator is told (a warning
        naming the tool, a count in ``stateway_tool_calls_total``): a deny list the model
        runs into is worth knowing of."""
        name = call["name"]
        why = "the route's stages withheld" if name in self.names else "this request does not offer"
        log.warning("the model called %r, a tool %s: not run", name, why)
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


def client_call(item: Item) -> bool:
    """Whether a whole item an upstream gave is a call the client would run and answer:
    a ``..._call`` with a ``call_id``, not one the upstream ran itself (an image
    generation has no ``call_id``; a ``tool_search_call`` whose ``execution`` is
    ``server`` was run there)."""
    kind, call_id = item.get("type"), item.get("call_id")
    if not isinstance(kind, str) or not kind.endswith(_CALL):
        return False
    return isinstance(call_id, str) and bool(call_id) and item.get("execution") != "server"


def withheld_call(call_id: str, name: str) -> Item:
    """The item of a call of a withheld tool, as the model made it (never shown)."""
    return {"type": FUNCTION_CALL, "call_id": call_id, "name": name, "arguments": ""}


def _of_type(tool: Item, called: str) -> bool:
    """Whether ``tool`` is of the type a call's names: that type, or one of its variants
    (``computer_use_preview`` for a ``computer_call``)."""
    kind = tool.get("type")
    return isinstance(kind, str) and (kind == called or kind.startswith(called + "_"))


def _function_call(call_id: str, name: str, arguments: object) -> Item:
    """A call as the function call the model is shown it made (its ``arguments`` as
    JSON, unless they are text already)."""
    text = arguments if isinstance(arguments, str) else orjson.dumps(arguments).decode()
    return {"type": FUNCTION_CALL, "call_id": call_id, "name": name, "arguments": text}
