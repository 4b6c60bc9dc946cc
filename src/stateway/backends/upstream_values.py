"""Checks on values read from an upstream's JSON.

Translators read model output with these, so an upstream that sends the wrong type (a
number for ``content``, a string for a token count) is reported as a malformed reply —
the translators' callers turn ``TypeError`` into an ``UpstreamError`` — instead of
corrupting items or failing later.
"""

from __future__ import annotations

from typing import Any


def text(value: Any) -> str | None:
    """A string field, or None when absent."""
    if value is None or isinstance(value, str):
        return value
    raise TypeError(f"expected a string, got {type(value).__name__}")


def count(value: Any) -> int:
    """A token count; absent counts as 0; a whole number written as a float (``7.0``, as
    some servers write it) counts."""
    if value is None:
        return 0
    if isinstance(value, int) and not isinstance(value, bool) and value >= 0:
        return value
    if isinstance(value, float) and value.is_integer() and 0 <= value < 2**63:
        return int(value)
    raise TypeError(f"expected a token count, got {value!r}")


def obj(value: Any) -> dict[str, Any]:
    """A JSON object field; absent is empty."""
    if value is None:
        return {}
    if isinstance(value, dict):
        return value
    raise TypeError(f"expected an object, got {type(value).__name__}")
