"""A Responses request body parsed, and what is wrong with it in the OpenAI error shape
(``param`` as the API writes it: ``input[0].content``)."""

from __future__ import annotations

from typing import Any, Final

import orjson
import pydantic

from stateway.core.errors import InvalidRequest
from stateway.protocols import validation
from stateway.protocols.input_parts import countable, part_limit, parts_in


def parse_body(raw: bytes, max_input_items: int | None) -> Any:
    """The JSON body; its ``input`` checked against ``max_input_items`` before anything is
    validated. Raises :class:`InvalidRequest` (``invalid_json``)."""
    # orjson first: it refuses what JSON forbids (NaN, invalid UTF-8) and keeps every
    # number within what the gateway can serialize again (huge integers become floats).
    try:
        data = orjson.loads(raw)
    except orjson.JSONDecodeError:
        raise InvalidRequest(
            "We could not parse the JSON body of your request. Expected a JSON object.",
            code="invalid_json",
        ) from None
    if max_input_items is not None:
        check_item_count(data, max_input_items, len(raw))
    return data


def check_item_count(data: Any, limit: int, size: int | None = None) -> None:
    """Refuse an ``input`` array longer than ``limit``, or carrying more content parts
    than :mod:`~stateway.protocols.input_parts` allows (before validating its items; not
    counted when the body's ``size`` in bytes could not hold that many)."""
    items = data.get("input") if isinstance(data, dict) else None
    if not isinstance(items, list):
        return
    if len(items) > limit:
        raise validation.array_too_long("input", limit, len(items))
    if size is not None and not countable(size, limit):
        return
    check_part_count(items, limit, "input")


def check_part_count(items: list[Any], limit: int, field: str) -> None:
    """Refuse the input ``items`` of ``field`` (a request that may carry ``limit``) if
    they hold more content parts than :mod:`~stateway.protocols.input_parts` allows."""
    if (parts := parts_in(items, _PARTS)) > (most := part_limit(limit)):
        raise InvalidRequest(
            f"Invalid '{field}': {parts} content parts are more than the {most} this "
            "gateway takes (ten for each input item).",
            param=field,
            code="array_above_max_length",
        )


_PARTS: Final = ("content", "output")
"""Where an input item holds its parts: a message's content, a tool output's output."""


def invalid_request(exc: pydantic.ValidationError) -> InvalidRequest:
    """A body's validation error in the OpenAI shape, its field named as Responses does."""
    return validation.invalid_request(exc, param_of, unions=UNIONS)


UNIONS: Final = {
    "input": "one of a string or array of input items",
    "tool_choice": "one of a string or object",
    "conversation": "one of a string or object",
}
"""What a union field is said to expect, by hosted, when a value is of none of its types."""


UNION_TAGS = frozenset(
    {"str", "list[dict[str,any]]", "dict[str,any]", "bool", "float", "int", "function-after"}
)
"""How pydantic names the alternatives of a union in an error's location: not fields."""


def param_of(loc: tuple[int | str, ...]) -> str:
    """``input[0].content`` from ``("input", "list[dict[str,any]]", 0, "content")``."""
    text = ""
    for part in loc:
        if isinstance(part, int):
            text += f"[{part}]"
        elif part not in UNION_TAGS:
            text += f".{part}" if text else str(part)
    return text
