"""The checks of a declared tool's field values that every kind shares: a list of strings,
an optional field of one type or of a few allowed strings, and the ``invalid_type`` error
of a field of the wrong type."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from stateway.core.errors import InvalidRequest
from stateway.protocols.validation import not_one_of


def strings(value: Any, *, optional: bool) -> bool:
    """Whether ``value`` is a list of strings (absent, None: whether it is ``optional``)."""
    if value is None:
        return optional
    return isinstance(value, list) and all(isinstance(v, str) for v in value)


def invalid_type(message: str, param: str) -> InvalidRequest:
    return InvalidRequest(message, param=param, code="invalid_type")


def copy_typed(
    tool: dict[str, Any], out: dict[str, Any], key: str, path: str, kind: type, what: str
) -> None:
    """Copy ``tool[key]`` into ``out`` when given; a value not of ``kind`` is a 400
    ``invalid_type`` (``'KEY' must be WHAT.``)."""
    value = tool.get(key)
    if value is None:
        return
    if not isinstance(value, kind):
        raise invalid_type(f"'{key}' must be {what}.", f"{path}.{key}")
    out[key] = value


def copy_choice(
    tool: dict[str, Any], out: dict[str, Any], key: str, path: str, allowed: Sequence[str]
) -> None:
    """Copy ``tool[key]`` into ``out`` when given; anything but one of the ``allowed``
    strings is a 400 in hosted's words (``invalid_value`` for another string,
    ``invalid_type`` for a list or an object)."""
    value = tool.get(key)
    if value is None:
        return
    if not isinstance(value, str) or value not in allowed:
        raise not_one_of(f"{path}.{key}", value, allowed)
    out[key] = value
