"""A body's pydantic validation error as the OpenAI-shaped :class:`InvalidRequest` that
every OpenAI wire (Responses, Chat Completions) answers with; each wire names the field
its own way (``param``)."""

from __future__ import annotations

from collections.abc import Callable

import pydantic

from stateway.core.errors import InvalidRequest

Location = tuple[int | str, ...]
"""Where pydantic found the error, union alternatives and tags included."""


def invalid_request(
    exc: pydantic.ValidationError,
    param_of: Callable[[Location], str],
    tag_of: Callable[[Location], str] | None = None,
) -> InvalidRequest:
    """The error that got furthest into the body (of a union's alternatives, the one that
    names the field best): a missing field, a body that is no object, or a value of the
    wrong type or value. ``tag_of``: the discriminator a tagged union misses (``role``,
    ``type``), for a wire that reports it as a missing field."""
    errors = exc.errors(include_url=False, include_context=False)
    error = max(errors, key=lambda e: sum(isinstance(part, int) for part in e["loc"]))
    param = param_of(error["loc"])
    if error["type"] == "missing":
        return _missing(param)
    if error["type"] in ("model_type", "model_attributes_type") and not error["loc"]:
        return InvalidRequest("The request body must be a JSON object.", code="invalid_type")
    if error["type"] == "union_tag_not_found" and tag_of is not None:
        return _missing(f"{param}.{tag_of(error['loc'])}")
    if error["type"] == "too_short" and error.get("input") == []:
        return InvalidRequest(
            f"Invalid '{param}': empty array. Expected an array with minimum length 1, but got "
            "an empty array instead.",
            param=param,
            code="empty_array",
        )
    code = "invalid_type" if error["type"].endswith("_type") else "invalid_value"
    return InvalidRequest(f"Invalid value for '{param}': {error['msg']}.", param=param, code=code)


def _missing(param: str) -> InvalidRequest:
    return InvalidRequest(
        f"Missing required parameter: '{param}'.", param=param, code="missing_required_parameter"
    )
