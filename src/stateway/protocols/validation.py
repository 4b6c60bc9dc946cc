"""A body's pydantic validation error as the OpenAI-shaped :class:`InvalidRequest` that
every OpenAI wire (Responses, Chat Completions) answers with; each wire names the field
its own way (``param``). Also the list of values a field takes, as hosted words it.

The hosted API's own sentences and codes for a field out of its bounds or of the wrong
JSON type are built here, for the errors pydantic raises and for the checks a decoder
makes by hand (an ``input`` longer than the gateway takes, a schema name too long)
alike: ``Invalid 'x': string too long. Expected a string with maximum length N, but got
a string with length M instead.`` (``string_above_max_length``), ``Invalid 'x': string
does not match pattern. Expected a string that matches the pattern '^[a-zA-Z0-9_-]+$'.``
(``invalid_value``), ``Invalid 'x': decimal
above maximum value. Expected a value <= 2, but got 3 instead.``
(``decimal_above_max_value``), ``Invalid type for 'x': expected an integer, but got a
string instead.`` (``invalid_type``), ``Invalid value: 'x'. Supported values are: 'auto'
and 'disabled'.`` (``invalid_value``: a string none of a field's values). A value a
union's alternatives all refuse, where hosted's wording for that field is not known,
and a bound hosted's wording is not known for (a string or array shorter than a minimum
above one), keep pydantic's sentence (``Invalid value for 'x': ...``)."""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping, Sequence
from typing import Any, Final

import pydantic
from pydantic_core import ErrorDetails

from stateway.core.errors import InvalidRequest

Location = tuple[int | str, ...]
"""Where pydantic found the error, union alternatives and tags included."""


def invalid_request(
    exc: pydantic.ValidationError,
    param_of: Callable[[Location], str],
    tag_of: Callable[[Location], str] | None = None,
    unions: Mapping[str, str] | None = None,
) -> InvalidRequest:
    """The error that got furthest into the body (of a union's alternatives, the one that
    names the field best: the most array indices, then the deepest, so an object given
    for a union of a literal and a model is judged as the model): a missing field, a body
    that is no object, a value of the wrong type, out of its bounds, or a wrong value.
    ``tag_of``: the discriminator of a tagged union (``role``, ``type``), for a wire that
    names it as the field missing or holding an unknown tag. ``unions``: what a union
    field (by its ``param``, its indices left empty: ``messages[].content``) is said to
    expect when every alternative refused the value's type, where hosted's words for it
    are known (``one of a string or array of input items``)."""
    errors = exc.errors(include_url=False)
    error = max(errors, key=_reach)
    kind = error["type"]
    param = param_of(error["loc"])
    if kind == "missing":
        return _missing(param)
    if kind in ("model_type", "model_attributes_type") and not error["loc"]:
        return InvalidRequest("The request body must be a JSON object.", code="invalid_type")
    if kind == "union_tag_not_found" and tag_of is not None:
        return _missing(f"{param}.{tag_of(error['loc'])}")
    if kind == "union_tag_invalid" and tag_of is not None:
        param = f"{param}.{tag_of(error['loc'])}"
    hosted = _hosted(error, param)
    if kind in _EXPECTED and _alternatives(errors, param_of, param):
        expected = None if unions is None else unions.get(_INDICES.sub("[]", param))
        if expected is not None:
            return wrong_type(param, expected, error["input"])
    elif hosted is not None:
        return hosted
    code = "invalid_type" if kind.endswith("_type") else "invalid_value"
    return InvalidRequest(f"Invalid value for '{param}': {error['msg']}.", param=param, code=code)


def string_too_long(param: str, limit: int, length: int) -> InvalidRequest:
    return InvalidRequest(
        f"Invalid '{param}': string too long. Expected a string with maximum length {limit}, "
        f"but got a string with length {length} instead.",
        param=param,
        code="string_above_max_length",
    )


def empty_string(param: str, minimum: int = 1) -> InvalidRequest:
    return InvalidRequest(
        f"Invalid '{param}': empty string. Expected a string with minimum length {minimum}, "
        "but got an empty string instead.",
        param=param,
        code="empty_string",
    )


def array_too_long(param: str, limit: int, length: int) -> InvalidRequest:
    return InvalidRequest(
        f"Invalid '{param}': array too long. Expected an array with maximum length {limit}, "
        f"but got an array with length {length} instead.",
        param=param,
        code="array_above_max_length",
    )


def empty_array(param: str, minimum: int = 1) -> InvalidRequest:
    return InvalidRequest(
        f"Invalid '{param}': empty array. Expected an array with minimum length {minimum}, "
        "but got an empty array instead.",
        param=param,
        code="empty_array",
    )


def out_of_range(
    param: str, value: int | float, bound: int | float, operator: str, *, decimal: bool
) -> InvalidRequest:
    """A number past a bound: ``operator`` is the bound's (``>=``, ``>``: a minimum;
    ``<=``, ``<``: a maximum); ``decimal``: the field is a number, not an integer."""
    below = operator.startswith(">")
    kind = "decimal" if decimal else "integer"
    code = _RANGE_CODES[decimal, below]
    where = "below minimum" if below else "above maximum"
    return InvalidRequest(
        f"Invalid '{param}': {kind} {where} value. Expected a value {operator} "
        f"{_bound(bound)}, but got {value!r} instead.",
        param=param,
        code=code,
    )


_RANGE_CODES: Final = {
    (False, True): "integer_below_min_value",
    (False, False): "integer_above_max_value",
    (True, True): "decimal_below_min_value",
    (True, False): "decimal_above_max_value",
}
"""A number's code past a bound, by (a decimal field?, below its minimum?)."""


def pattern_mismatch(param: str, pattern: str) -> InvalidRequest:
    """A string not of the characters a field takes (``pattern``: its regex, as hosted
    shows it, ``^[a-zA-Z0-9_-]+$``)."""
    return InvalidRequest(
        f"Invalid '{param}': string does not match pattern. Expected a string that matches "
        f"the pattern '{pattern}'.",
        param=param,
        code="invalid_value",
    )


def wrong_type(param: str, expected: str, value: object) -> InvalidRequest:
    """``expected``: what the field holds, as hosted names it (``an integer``)."""
    return InvalidRequest(
        f"Invalid type for '{param}': expected {expected}, but got {json_kind(value)} instead.",
        param=param,
        code="invalid_type",
    )


def unsupported_value(param: str, value: str, values: Sequence[str]) -> InvalidRequest:
    """A string none of the ``values`` a field takes, in hosted's words (which name the
    value, and leave the field to ``param``)."""
    return InvalidRequest(
        f"Invalid value: '{value}'. Supported values are: {supported_values(values)}.",
        param=param,
        code="invalid_value",
    )


def missing_or_wrong_type(
    raw: dict[str, Any], path: str, key: str, expected: str = "a string"
) -> InvalidRequest:
    """``raw``'s ``key`` (at ``path``) missing, or not ``expected``: each in hosted's words."""
    param = f"{path}.{key}"
    if raw.get(key) is None:
        return _missing(param)
    return wrong_type(param, expected, raw[key])


def json_kind(value: object) -> str:
    """A JSON value's type, as hosted names the one it got (``a decimal number``)."""
    match value:
        case None:
            return "null"
        case bool():
            return "a boolean"
        case int():
            return "an integer"
        case float():
            return "a decimal number"
        case str():
            return "a string"
        case list():
            return "an array"
        case _:
            return "an object"


def supported_values(values: Sequence[str]) -> str:
    """The values a field takes, as hosted lists them in its ``Invalid value`` message
    (``'a', 'b', and 'c'``; ``'a' and 'b'``)."""
    return _listed(values, "and")


def _listed(values: Sequence[str], conjunction: str) -> str:
    quoted = [f"'{v}'" for v in values]
    if len(quoted) <= 2:
        return f" {conjunction} ".join(quoted)
    return ", ".join(quoted[:-1]) + f", {conjunction} {quoted[-1]}"


_INDICES: Final = re.compile(r"\[\d+\]")
"""An array index in a ``param`` (``[3]``)."""
_QUOTED: Final = re.compile(r"'([^']*)'")
"""A value in pydantic's list of a literal's values (``'auto' or 'disabled'``)."""


def not_one_of(param: str, value: object, values: Sequence[str]) -> InvalidRequest:
    """A value none of the ``values`` a field takes: a string as hosted refuses a value it
    does not take, another type as hosted refuses a value of the wrong type."""
    if isinstance(value, str):
        return unsupported_value(param, value, values)
    return wrong_type(param, f"one of {_listed(values, 'or')}", value)


def _not_one_of(error: ErrorDetails, param: str) -> InvalidRequest | None:
    values = _QUOTED.findall(str((error.get("ctx") or {}).get("expected", "")))
    return not_one_of(param, error["input"], values) if values else None


_EXPECTED: Final = {
    "string_type": "a string",
    "int_type": "an integer",
    "int_parsing": "an integer",
    "int_from_float": "an integer",
    "float_type": "a decimal",
    "float_parsing": "a decimal",
    "bool_type": "a boolean",
    "bool_parsing": "a boolean",
    "list_type": "an array",
    "dict_type": "an object",
    "model_type": "an object",
    "model_attributes_type": "an object",
}
"""What a field of each JSON type is said to expect, by the pydantic error of a value of
another type."""

_BOUNDS: Final = {
    "greater_than_equal": ("ge", ">="),
    "greater_than": ("gt", ">"),
    "less_than_equal": ("le", "<="),
    "less_than": ("lt", "<"),
}
"""A numeric bound's pydantic error: where its context holds the bound, and its operator."""


def _hosted(error: ErrorDetails, param: str) -> InvalidRequest | None:
    """The error in hosted's own words, when hosted's wording for it is known."""
    kind, value = error["type"], error["input"]
    ctx: dict[str, Any] = dict(error.get("ctx") or {})
    if kind in _EXPECTED:
        return wrong_type(param, _EXPECTED[kind], value)
    if kind in _BOUNDS and isinstance(value, int | float) and not isinstance(value, bool):
        key, operator = _BOUNDS[kind]
        # pydantic holds a float field's bound as a float, an int field's as an int.
        bound = ctx[key]
        return out_of_range(param, value, bound, operator, decimal=isinstance(bound, float))
    if kind == "string_too_long" and isinstance(value, str):
        return string_too_long(param, ctx["max_length"], len(value))
    if kind == "string_pattern_mismatch":
        return pattern_mismatch(param, ctx["pattern"])
    if kind == "string_too_short" and value == "":
        return empty_string(param, ctx["min_length"])
    if kind == "too_long" and isinstance(value, list):
        return array_too_long(param, ctx["max_length"], len(value))
    if kind == "too_short" and value == []:
        return empty_array(param, ctx["min_length"])
    if kind == "literal_error":
        return _not_one_of(error, param)
    if kind == "union_tag_invalid":  # a role or a type none of the union's tags
        tags = _QUOTED.findall(str(ctx.get("expected_tags", "")))
        return unsupported_value(param, str(ctx.get("tag")), tags) if tags else None
    return None


def _alternatives(
    errors: list[ErrorDetails], param_of: Callable[[Location], str], param: str
) -> bool:
    """Whether the field is a union whose every alternative refused the value's type (a
    string or an array of items, say): no one type to say it expected."""
    return sum(e["type"] in _EXPECTED and param_of(e["loc"]) == param for e in errors) > 1


def _bound(bound: int | float) -> str:
    """A bound as the spec writes it (``2``, not pydantic's ``2.0``; ``0.5`` as is)."""
    return str(int(bound)) if isinstance(bound, float) and bound.is_integer() else str(bound)


def _reach(error: ErrorDetails) -> tuple[int, int]:
    """How far into the body an error got: its array indices, then its depth."""
    loc = error["loc"]
    return sum(isinstance(part, int) for part in loc), len(loc)


def _missing(param: str) -> InvalidRequest:
    return InvalidRequest(
        f"Missing required parameter: '{param}'.", param=param, code="missing_required_parameter"
    )
