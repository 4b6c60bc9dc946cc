"""The gateway tools' items in a response's output, from announced to done.

Every item a gateway tool adds (an ``mcp_list_tools`` listing, an ``mcp_call``, a
``web_search_call``, a ``tool_search_call``) is announced (``ItemAdded``) and stays open
until it is done (``ItemDone``, once). A response that ends early (cancelled, cut short or
failed) closes every item still open as ``incomplete`` (a listing as failed): no dangling
call. An ``mcp_approval_request`` is never open: it is done as it closes, like a client's
call.
"""

from __future__ import annotations

from collections.abc import Callable

from stateway.core import events as ev
from stateway.core.items import MCP_LIST_TOOLS, Item, announced

Emit = Callable[[ev.Event], None]


class OpenItems:
    __slots__ = ("_open", "emit", "output")

    def __init__(self, output: list[Item], emit: Emit) -> None:
        self.output = output
        """The response's output, which the gateway's items are appended to."""
        self.emit = emit
        """Into the run's stream."""
        self._open: dict[str, tuple[Item, int]] = {}
        """Items announced and not done yet, by id, with their output index."""

    def add(self, item: Item) -> int:
        """Append ``item`` to the output, announce it and keep it open; its index."""
        index = len(self.output)
        self.output.append(item)
        self._open[item["id"]] = (item, index)
        self.emit(ev.ItemAdded(index, dict(item)))
        return index

    def added(self, item: Item, index: int) -> None:
        """Keep open an item appended and announced by someone else (the assembler)."""
        self._open[item["id"]] = (item, index)

    def add_done(self, item: Item) -> None:
        """Append ``item`` to the output done at once (announced ``in_progress``, then
        done)."""
        index = len(self.output)
        self.output.append(item)
        self.emit(ev.ItemAdded(index, announced(item)))
        self.emit(ev.ItemDone(index, dict(item)))

    def done(self, item: Item, index: int) -> None:
        """Close ``item``: done as it is now."""
        self._open.pop(item["id"], None)
        self.emit(ev.ItemDone(index, dict(item)))

    def abandon(self) -> None:
        """Close every item still open as ``incomplete`` (a listing as failed)."""
        for item, index in list(self._open.values()):
            if item["type"] == MCP_LIST_TOOLS:
                item["error"] = "The response ended before the tools were listed."
                self.emit(ev.ToolProgress("response.mcp_list_tools.failed", index, item["id"]))
            else:
                item["status"] = "incomplete"
            self.emit(ev.ItemDone(index, dict(item)))
        self._open.clear()
