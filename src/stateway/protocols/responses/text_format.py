"""``text.format``: plain text, a JSON object, or a JSON schema (its name checked as hosted
checks it, whatever the upstream)."""

from __future__ import annotations

from typing import Any

from stateway.protocols.responses.nesting import check_nesting
from stateway.protocols.schema_name import check_schema_name
from stateway.protocols.validation import (
    empty_string,
    missing_or_wrong_type,
    not_one_of,
    wrong_type,
)

_FORMATS = ("json_object", "json_schema", "text")
"""In the order hosted lists them refusing another (as a translated Chat request's
``response_format.type``)."""


def decode_text_format(fmt: dict[str, Any] | None) -> dict[str, Any]:
    """The format the response is asked for (``text`` when none was given)."""
    if fmt is None:
        return {"type": "text"}
    kind = fmt.get("type")
    if kind is None:
        raise missing_or_wrong_type(fmt, "text.format", "type")
    if not isinstance(kind, str) or kind not in _FORMATS:
        raise not_one_of("text.format.type", kind, _FORMATS)
    if kind == "json_schema":
        return _json_schema(fmt)
    return {"type": kind}


def _json_schema(fmt: dict[str, Any]) -> dict[str, Any]:
    """Only the keys the client gave (no nulls reach an upstream); the echo fills in the
    spec's defaults. A required field sent with the wrong type is named as such, not as
    missing, as hosted names it."""
    if not isinstance(fmt.get("name"), str):
        raise missing_or_wrong_type(fmt, "text.format", "name")
    if not fmt["name"]:
        raise empty_string("text.format.name")
    if not isinstance(fmt.get("schema"), dict):
        raise missing_or_wrong_type(fmt, "text.format", "schema", "an object")
    check_schema_name(fmt["name"], "text.format.name")
    check_nesting(fmt["schema"], "text.format.schema")
    out = {"type": "json_schema", "name": fmt["name"], "schema": fmt["schema"]}
    for key, kind, expected in (("strict", bool, "a boolean"), ("description", str, "a string")):
        value = fmt.get(key)
        if value is not None and not isinstance(value, kind):
            raise wrong_type(f"text.format.{key}", expected, value)
        if value is not None:
            out[key] = value
    return out
