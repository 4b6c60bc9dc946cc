"""A client's free-form JSON refused when it nests deeper than the gateway can write again
(:mod:`stateway.core.nesting` says why, and how deep that is)."""

from __future__ import annotations

from typing import Any

from stateway.core.errors import InvalidRequest
from stateway.core.nesting import MAX_NESTING, nests_too_deep


def check_nesting(value: Any, param: str) -> None:
    """Refuse ``value`` when it nests deeper than :data:`MAX_NESTING`, naming ``param``."""
    if isinstance(value, dict | list) and nests_too_deep(value):
        raise InvalidRequest(
            f"Invalid value for '{param}': JSON nested deeper than {MAX_NESTING} levels.",
            param=param,
            code="nesting_too_deep",
        )
