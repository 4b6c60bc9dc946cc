"""A body's pydantic validation error as the OpenAI-shaped :class:`InvalidRequest` that
every OpenAI wire (Responses, Chat Completions) answers with; each wire names the field
its own way (``param``). Also the list of values a field takes, as hosted words it."""

from __future__ import annotations

from collections.abc import Callable, Sequence

import pydantic
from pydantic_core import ErrorDetails

from stateway.core.errors import InvalidRequest

Location = tuple[int | str, ...]
"""Where pydantic found the error, union alternatives and tags included."""


def invalid_request(
    exc: pydantic.ValidationError,
    param_of: Callable[[Location], str],
    tag_of: Callable[[Location], str] | None = None,
) -> InvalidRequest:
    """The error that got furthest into the body (of a union's alternatives, the one that
    names the field best: the most array indices, then the deepest, so an object given
    for a union of a literal and a model is judged as the model): a missing field, a body
    that is no object, or a value of the wrong type or value. ``tag_of``: the
    discriminator of a tagged union (``role``, ``type``), for a wire that names it as the
    field missing or holding an unknown tag."""
    errors = exc.errors(include_url=False, include_context=False)
    error = max(errors, key=_reach)
    param = param_of(error["loc"])
    if error["type"] == "missing":
        return _missing(param)
    if error["type"] in ("model_type", "model_attributes_type") and not error["loc"]:
        return InvalidRequest("The request body must be a JSON object.", code="invalid_type")
    if error["type"] == "union_tag_not_found" and tag_of is not None:
        return _missing(f"{param}.{tag_of(error['loc'])}")
    if error["type"] == "union_tag_invalid" and tag_of is not None:
        param = f"{param}.{tag_of(error['loc'])}"
    if error["type"] == "too_short" and error.get("input") == []:
        return InvalidRequest(
            f"Invalid '{param}': empty array. Expected an array with minimum length 1, but got "
            "an empty array instead.",
            param=param,
            code="empty_array",
        )
    code = "invalid_type" if error["type"].endswith("_type") else "invalid_value"
    return InvalidRequest(f"Invalid value for '{param}': {error['msg']}.", param=param, code=code)


def supported_values(values: Sequence[str]) -> str:
    """The values a field takes, as hosted lists them in its ``Invalid value`` message
    (``'a', 'b', and 'c'``)."""
    return ", ".join(f"'{v}'" for v in values[:-1]) + f", and '{values[-1]}'"


def _reach(error: ErrorDetails) -> tuple[int, int]:
    """How far into the body an error got: its array indices, then its depth."""
    loc = error["loc"]
    return sum(isinstance(part, int) for part in loc), len(loc)


def _missing(param: str) -> InvalidRequest:
    return InvalidRequest(
        f"Missing required parameter: '{param}'.", param=param, code="missing_required_parameter"
    )
