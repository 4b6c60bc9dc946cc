"""The items an upstream gives whole, and the calls it begins whose input streams, as the
output assembler (:mod:`stateway.core.assembler`) writes them.

An item the gateway does not model comes whole (:meth:`GivenItems.add`) and is added
(announced ``in_progress``, as every item) and done at once; a custom, shell or
apply_patch call among them goes back to the client like any client call
(:meth:`CallItems.given`), but one of a tool not offered, which is answered unseen
(:meth:`CallItems.refuses`). A custom tool's call an upstream began (its ``call_id`` and
name; no input yet: :meth:`GivenItems.begun`) is added at once, streams its input as the
upstream sends it (:meth:`GivenItems.input`), and is done with its whole item
(:meth:`GivenItems.end`), or, when other output closes it first, as it stands
(:meth:`GivenItems.cut`): its whole item, coming after, is not added again.
"""

from __future__ import annotations

from collections.abc import Callable

from stateway.core import events as ev
from stateway.core.call_items import CallItems, Emit, silent
from stateway.core.ids import new_id
from stateway.core.items import REASONING, Item, announced
from stateway.core.open_item import OpenItem


class GivenItems:
    """One round's whole items and begun calls, added to its ``output``."""

    __slots__ = ("_calls", "_emit", "_ended", "_output", "_wrap")

    def __init__(
        self,
        output: list[Item],
        emit: Emit,
        calls: CallItems,
        wrap: Callable[[str, str | None], str] | None,
    ) -> None:
        self._output = output
        self._emit = emit
        self._calls = calls
        self._wrap = wrap
        """Seals an upstream's own seal over for the tenant (:func:`stateway.core.reasoning.
        wrapped`); None: kept as it came."""
        self._ended: set[str] = set()
        """The call ids of the calls an upstream began that other output closed before
        their whole items came: those items are not added again."""

    def silence(self) -> None:
        """Announce nothing more (the round failed)."""
        self._emit = silent

    def ended(self, item: Item) -> bool:
        """Whether ``item`` is the whole item of a call begun and already ended
        (:meth:`cut`): not added again."""
        return item.get("call_id") in self._ended

    def add(self, item: Item) -> bool:
        """A whole output item passed through as it came (its ``id`` given if missing, a
        redacted reasoning's seal wrapped), added and done at once: False when it was not
        added, a call of a tool not offered, answered unseen."""
        if self._calls.refuses(len(self._output), item):
            return False
        item = _identified(dict(item))
        seal = item.get("encrypted_content")
        if item.get("type") == REASONING and isinstance(seal, str) and seal:  # redacted
            item["encrypted_content"] = self._wrap(seal, None) if self._wrap is not None else seal
        index = len(self._output)
        self._output.append(item)
        self._emit(ev.ItemAdded(index, announced(item)))
        self._calls.given(index, item)
        self._emit(ev.ItemDone(index, dict(item)))
        return True

    def further(self, item: Item) -> None:
        """``item``, whole (an apply_patch call's further file): added (announced
        ``in_progress``) and done at once."""
        index = len(self._output)
        self._output.append(item)
        self._emit(ev.ItemAdded(index, announced(item)))
        self._emit(ev.ItemDone(index, dict(item)))

    def begun(self, item: Item) -> Item | None:
        """The item to open for a custom tool's call an upstream began, as announced; None
        for one of a tool not offered, not shown: its whole item is answered unseen."""
        if self._calls.refusing(item):
            return None
        return _identified(announced(item))

    def input(self, current: OpenItem | None, text: str) -> None:
        """A piece of the input of the call ``current`` an upstream began, as it sent it;
        nothing when ``current`` is none such (one not shown)."""
        if current is not None and current.begun and text:
            current.chunks.append(text)
            self._emit(ev.CustomInputDelta(current.index, current.item["id"], text))

    def end(self, current: OpenItem, whole: Item) -> None:
        """The call an upstream began, done as its ``whole`` item says (under the id it
        was announced with): the input it streamed is not said again."""
        item = {**whole, "id": current.item["id"]}
        self._output[current.index] = item
        self._calls.given(current.index, item, "".join(current.chunks))
        self._emit(ev.ItemDone(current.index, dict(item)))

    def cut(self, current: OpenItem, status: str) -> None:
        """The call an upstream began, closed with ``status`` before its whole item came
        (cut short, or other output came first): done with the input it streamed."""
        self._ended.add(str(current.upstream_id))
        self.end(current, {**current.item, "input": "".join(current.chunks), "status": status})


def _identified(item: Item) -> Item:
    """``item``, given an ``id`` if it has none."""
    if not isinstance(item.get("id"), str) or not item["id"]:
        item["id"] = new_id("item")
    return item
