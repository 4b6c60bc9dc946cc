"""The checks of a declared tool's field values that every kind shares: a list of strings,
an optional field of one type or of a few allowed strings, and the ``invalid_type`` error
of a field of the wrong type."""

from __future__ import annotations

from collections.abc import Collection
from typing import Any

from stateway.core.errors import InvalidRequest


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
    tool: dict[str, Any],
    out: dict[str, Any],
    key: str,
    path: str,
    allowed: Collection[str],
    expected: str,
) -> None:
    """Copy ``tool[key]`` into ``out`` when given; anything but one of the ``allowed``
    strings (a list or an object included) is a 400 ``invalid_value``."""
    value = tool.get(key)
    if value is None:
        return
    if not isinstance(value, str) or value not in allowed:
        raise InvalidRequest(
            f"Invalid value for '{path}.{key}': {value!r}; expected {expected}.",
            param=f"{path}.{key}",
            code="invalid_value",
        )
    out[key] = value
