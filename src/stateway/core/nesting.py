"""How deep free-form JSON may nest: no deeper than the gateway can write again.

orjson reads 1,024 levels but writes only 255, so a value that parses can still fail to be
stored, streamed or sent upstream. Free-form values (a client's tool parameters, a JSON
schema, an input item's fields; a call's arguments, parsed to be sent as an object) are
therefore held to :data:`MAX_NESTING` levels, counted as containers (``{}`` is one level,
``{"a": []}`` two). The deepest place such a value is written today is a stream event,
``event.response.text.format.schema``: five levels of wrappers. 128 leaves room for those
and for wrappers yet to come (stored event logs, WebSocket frames), and is far deeper than
any real schema.
"""

from __future__ import annotations

from typing import Any, Final

MAX_NESTING: Final = 128


def nests_too_deep(value: dict[str, Any] | list[Any]) -> bool:
    """Whether ``value`` nests deeper than :data:`MAX_NESTING`."""
    # Iterative: a parsed value may nest 1,024 levels, past Python's recursion limit.
    stack: list[tuple[Any, int]] = [(value, 1)]
    while stack:
        node, depth = stack.pop()
        children = node.values() if isinstance(node, dict) else node
        for child in children:
            if isinstance(child, dict | list):
                if depth == MAX_NESTING:
                    return True
                stack.append((child, depth + 1))
    return False
