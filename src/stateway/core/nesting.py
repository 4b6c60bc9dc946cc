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


_CONTAINERS: Final = (dict, list)


def nests_too_deep(value: dict[str, Any] | list[Any]) -> bool:
    """Whether ``value`` nests deeper than :data:`MAX_NESTING`."""
    # Level by level: a parsed value may nest 1,024 levels, past Python's recursion limit,
    # and one list of the containers a level holds is the least to keep (a body of a
    # million parts is that many objects at one level) and the fewest steps to walk.
    level: list[Any] = [value]
    for _ in range(MAX_NESTING):
        level = [
            child
            for node in level
            for child in (node.values() if isinstance(node, dict) else node)
            if isinstance(child, _CONTAINERS)
        ]
        if not level:
            return False
    return True
