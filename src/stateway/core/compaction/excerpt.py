"""An item too large for a summary call, shown as its head and its tail.

One item can be larger than the whole window a summary call is fitted to
(:mod:`.summary_window`): a tool's output of a whole file, a log pasted into a user message.
Left out, the summary loses even its gist; sent whole, the call is refused. It is shown
instead as an excerpt: each of its long texts keeps its start and its end, with
:data:`MARKER` between them saying how much was left out, as much of them as the room
allows by the gateway's estimate (:mod:`stateway.core.token_estimate`; no tokenizer is
asked). The longest texts are cut first, to one length, and none below :data:`SHORTEST`
characters: the shorter ones stay whole.

What is cut, by item type (:data:`_TEXTS`): a message's text (its ``content`` string, or
each part's ``text``); a tool output's (its ``output`` string, or each part's ``text``:
a function, custom tool, MCP, local shell or patch call's; a shell call's ``stdout`` and
``stderr``); a custom tool call's ``input``; and the strings within a function or MCP
call's ``arguments``, whose JSON is made again, still valid: arguments that do not parse
as JSON are never cut, as broken JSON must never go upstream. Reasoning is never cut (an
upstream's signature covers its text), nor an image or a file.

An excerpt is a copy, made for one summary call: the items stored, and the client's, are
never changed.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Final

import orjson

from stateway.core.items import (
    CUSTOM_TOOL_CALL,
    CUSTOM_TOOL_CALL_OUTPUT,
    FUNCTION_CALL,
    FUNCTION_CALL_OUTPUT,
    MCP_CALL,
    MESSAGE,
    Item,
)
from stateway.core.token_estimate import item_tokens

MARKER: Final = "\n[... {:,} characters omitted ...]\n"
"""What stands for the middle of a text cut, with how many characters it held."""
SHORTEST: Final = 200
"""The fewest characters a cut text keeps (its head and its tail): fewer would say too
little to be worth their place."""

_Cut = Callable[[str], str]


def excerpt(item: Item, tokens: int) -> Item | None:
    """``item`` within ``tokens`` (estimated): itself when it fits, else a copy with its
    longest texts cut to their head and tail, as little as makes it fit; None when it
    holds no text to cut, or even its shortest excerpt does not fit."""
    if item_tokens(item) <= tokens:
        return item
    longest = max(map(len, _texts(item)), default=0)
    if longest <= SHORTEST or item_tokens(_cut(item, SHORTEST)) > tokens:
        return None
    low, high = SHORTEST, longest - 1  # the longest cut that fits, by bisection
    while low < high:
        middle = (low + high + 1) // 2
        if item_tokens(_cut(item, middle)) <= tokens:
            low = middle
        else:
            high = middle - 1
    return _cut(item, low)


def least_tokens(item: Item) -> int | None:
    """The estimated tokens of ``item``'s shortest excerpt; None when it has none smaller
    than itself."""
    if max(map(len, _texts(item)), default=0) <= SHORTEST:
        return None
    least = item_tokens(_cut(item, SHORTEST))
    return least if least < item_tokens(item) else None


def _cut(item: Item, length: int) -> Item:
    """``item`` with each text longer than ``length`` cut to it, head and tail."""
    return _mapped(item, lambda text: _head_and_tail(text, length))


def _head_and_tail(text: str, length: int) -> str:
    if len(text) <= length:
        return text
    head = length // 2
    cut = text[:head] + MARKER.format(len(text) - length) + text[len(text) - (length - head) :]
    return cut if len(cut) < len(text) else text


def _texts(item: Item) -> list[str]:
    found: list[str] = []

    def collect(text: str) -> str:
        found.append(text)
        return text

    _mapped(item, collect)
    return found


def _mapped(item: Item, cut: _Cut) -> Item:
    """A copy of ``item`` with each of its texts that may be cut replaced by ``cut``'s."""
    shown = dict(item)
    for key, mapping in _TEXTS.get(item.get("type"), ()):
        if key in item:
            shown[key] = mapping(item[key], cut)
    return shown


def _text(value: Any, cut: _Cut) -> Any:
    return cut(value) if isinstance(value, str) else value


def _parts(value: Any, cut: _Cut) -> Any:
    """A string, or a list of parts, each with a ``text``: its texts cut."""
    if not isinstance(value, list):
        return _text(value, cut)
    return [
        {**part, "text": cut(part["text"])}
        if isinstance(part, dict) and isinstance(part.get("text"), str)
        else part
        for part in value
    ]


def _streams(value: Any, cut: _Cut) -> Any:
    """A shell call's output: a list of commands' ``stdout`` and ``stderr``, each cut."""
    if not isinstance(value, list):
        return value
    return [
        {key: _text(text, cut) if key in _STREAMS else text for key, text in entry.items()}
        if isinstance(entry, dict)
        else entry
        for entry in value
    ]


def _json(value: Any, cut: _Cut) -> Any:
    """JSON text with the strings within it cut, made again; left as it is when it does
    not parse, or when nothing within it was cut."""
    if not isinstance(value, str):
        return value
    try:
        parsed = orjson.loads(value)
    except orjson.JSONDecodeError:
        return value
    shown = _strings(parsed, cut)
    return value if shown == parsed else orjson.dumps(shown).decode()


def _strings(value: Any, cut: _Cut) -> Any:
    if isinstance(value, str):
        return cut(value)
    if isinstance(value, list):
        return [_strings(member, cut) for member in value]
    if isinstance(value, dict):
        return {key: _strings(member, cut) for key, member in value.items()}
    return value


_STREAMS: Final = frozenset({"stdout", "stderr"})
_Mapping = Callable[[Any, _Cut], Any]
_OUTPUT: Final[tuple[tuple[str, _Mapping], ...]] = (("output", _parts),)
_TEXTS: Final[dict[object, tuple[tuple[str, _Mapping], ...]]] = {
    MESSAGE: (("content", _parts),),
    FUNCTION_CALL_OUTPUT: _OUTPUT,
    CUSTOM_TOOL_CALL_OUTPUT: _OUTPUT,
    "shell_call_output": (("output", _streams),),
    "local_shell_call_output": _OUTPUT,
    "apply_patch_call_output": _OUTPUT,
    CUSTOM_TOOL_CALL: (("input", _text),),
    FUNCTION_CALL: (("arguments", _json),),
    MCP_CALL: (("arguments", _json), ("output", _text)),
}
"""Where each item type holds the texts an excerpt may cut, and how to reach them."""
