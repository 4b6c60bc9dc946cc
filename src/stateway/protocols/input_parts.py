"""How many content parts a request may carry: ten for each input item it may carry
(``[server] max_input_items``), counted in the parsed body before anything is validated,
on every frontend (a Chat Completions request the fast path forwards included), and for
the items a conversation is given (twenty a request).

A part costs the gateway about as much as an item, whatever its text: its parsed object,
its validated model, its canonical copy (some 500 bytes to a kilobyte each). A body
within the size limit made of a million one-letter parts held a gigabyte and seconds of
CPU; the clients' histories (Codex's, Claude Code's: thousands of items, megabytes of
tool output) carry a part or two an item. A message's parts are its content array's;
a tool output's (Responses ``output``, a Messages ``tool_result``'s ``content``) and a
Messages ``system`` prompt's blocks count as well.
"""

from __future__ import annotations

from typing import Any, Final

PARTS_PER_ITEM: Final = 10


def part_limit(max_input_items: int) -> int:
    """The content parts a request may carry when it may carry ``max_input_items``."""
    return PARTS_PER_ITEM * max_input_items


def countable(size: int, max_input_items: int) -> bool:
    """Whether a body of ``size`` bytes could carry more parts than ``max_input_items``
    allows: each takes two of its bytes at least (``1,``), so a smaller body, as nearly
    every request is, is not counted at all."""
    return size > 2 * part_limit(max_input_items)


def parts_in(entries: list[Any], fields: tuple[str, ...], inner: str | None = None) -> int:
    """The content parts of the parsed ``entries`` (messages, input items): the length of
    each one's ``fields`` that is an array, and with ``inner``, of that field of each of
    those parts that is one (a tool result's own content blocks)."""
    count = 0
    for entry in entries:
        if not isinstance(entry, dict):
            continue
        for field in fields:
            parts = entry.get(field)
            if not isinstance(parts, list):
                continue
            count += len(parts)
            if inner is None:
                continue
            for part in parts:
                if isinstance(part, dict) and isinstance(held := part.get(inner), list):
                    count += len(held)
    return count
