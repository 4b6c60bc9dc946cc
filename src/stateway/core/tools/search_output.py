"""What a ``tool_search_output`` item loads: the offered kinds among its tools, and the
MCP servers' tools its ``mcp`` entries name (:meth:`.catalog.Catalog.load` offers them;
:mod:`.result_text` tells the model of them)."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
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


@dataclass(frozen=True, slots=True)
class Loaded:
    """What one ``mcp`` entry of a ``tool_search_output`` loads of its server's tools: its
    ``allowed_tools`` (a list of names, or a filter's ``tool_names`` and ``read_only``;
    none: every tool), as a declared server's filter reads (:class:`.mcp_binding.ToolFilter`)."""

    names: tuple[str, ...] | None = None
    read_only: bool = False

    def loads(self, name: str | None, read_only: bool) -> bool:
        """Whether it loads the tool ``name`` (``read_only``: marked so by its server)."""
        named = self.names is None or name in self.names
        return named and (read_only or not self.read_only)


def loaded_servers(tools: Iterable[Any]) -> dict[str, list[Loaded]]:
    """What a ``tool_search_output``'s ``mcp`` entries load, by server label."""
    out: dict[str, list[Loaded]] = {}
    for tool in tools:
        if not isinstance(tool, dict) or tool.get("type") != "mcp":
            continue
        label = tool.get("server_label")
        if not isinstance(label, str):
            continue
        allowed = tool.get("allowed_tools")
        read_only = False
        if isinstance(allowed, dict):
            read_only = allowed.get("read_only") is True
            allowed = allowed.get("tool_names")
        names = (
            tuple(n for n in allowed if isinstance(n, str)) if isinstance(allowed, list) else None
        )
        out.setdefault(label, []).append(Loaded(names, read_only))
    return out


def loaded_mcp(tools: Iterable[Any]) -> dict[str, tuple[str, ...] | None]:
    """The MCP servers' tools a ``tool_search_output``'s ``mcp`` entries name, by server
    label (:func:`loaded_servers`): their names in the order given, each once, None for
    all of the server's (an entry naming none)."""
    out: dict[str, tuple[str, ...] | None] = {}
    for label, loads in loaded_servers(tools).items():
        named = [load.names for load in loads]
        if any(names is None for names in named):
            out[label] = None
        else:
            out[label] = tuple(dict.fromkeys(n for names in named for n in names or ()))
    return out
