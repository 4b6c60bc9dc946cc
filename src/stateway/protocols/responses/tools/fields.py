"""The checks of a declared tool's field values that every kind shares: a list of strings,
and the ``invalid_type`` error of a field of the wrong type."""

from __future__ import annotations

from typing import Any

from stateway.core.errors import InvalidRequest


def strings(value: Any, *, optional: bool) -> bool:
    """Whether ``value`` is a list of strings (absent, None: whether it is ``optional``)."""
    if value is None:
        return optional
    return isinstance(value, list) and all(isinstance(v, str) for v in value)


def invalid_type(message: str, param: str) -> InvalidRequest:
    return InvalidRequest(message, param=param, code="invalid_type")
