"""What a ``tool_search_output`` item loads: the offered kinds among its tools, and the
MCP servers' tools its ``mcp`` entries name (:meth:`.catalog.Catalog.load` offers them;
:mod:`.result_text` tells the model of them)."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from stateway.core.items import Item
from stateway.core.tools.tool_types import DEFER, NAMESPACE, OFFERED


def loaded(tools: Iterable[Any]) -> list[Item]:
    """The offered kinds among a ``tool_search_output``'s tools, without ``defer_loading``
    (a loaded tool is offered, whatever its definition says)."""
    out: list[Item] = []
    for tool in tools:
        if not isinstance(tool, dict) or tool.get("type") not in OFFERED:
            continue
        copy = {k: v for k, v in tool.items() if k != DEFER}
        if copy.get("type") == NAMESPACE:
            copy["tools"] = [
                {k: v for k, v in m.items() if k != DEFER} for m in tool.get("tools") or ()
            ]
        out.append(copy)
    return out


def loaded_mcp(tools: Iterable[Any]) -> dict[str, tuple[str, ...] | None]:
    """The MCP servers' tools a ``tool_search_output``'s ``mcp`` entries load, by server
    label: their names in the order given, each once (``allowed_tools``: a list, or a
    filter's ``tool_names``), None for all of the server's (an entry naming none)."""
    out: dict[str, tuple[str, ...] | None] = {}
    for tool in tools:
        if not isinstance(tool, dict) or tool.get("type") != "mcp":
            continue
        label = tool.get("server_label")
        if not isinstance(label, str):
            continue
        allowed = tool.get("allowed_tools")
        if isinstance(allowed, dict):
            allowed = allowed.get("tool_names")
        if not isinstance(allowed, list):
            out[label] = None
        elif label not in out or out[label] is not None:
            names = (*(out.get(label) or ()), *(n for n in allowed if isinstance(n, str)))
            out[label] = tuple(dict.fromkeys(names))
    return out
