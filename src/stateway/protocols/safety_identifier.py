"""``safety_identifier``, a field of the OpenAI wires (Responses' create and compact, Chat
Completions, Conversations' create): a stable id of the end user a request is made for, at
most :data:`MAX_LENGTH` characters. Every route that takes it refuses the same values in
the same words (``string_above_max_length``, ``invalid_type``): a request model through
:data:`SafetyIdentifier`, a body read by hand through :func:`decode_safety_identifier`."""

from __future__ import annotations

from typing import Annotated, Final

from pydantic import Field

from stateway.protocols.validation import string_too_long, wrong_type

MAX_LENGTH: Final = 128
PARAM: Final = "safety_identifier"

SafetyIdentifier = Annotated[str, Field(max_length=MAX_LENGTH)]
"""The field of a request model (validated strictly, as every body is)."""


def decode_safety_identifier(value: object) -> str | None:
    """The field of a body read by hand: a string of at most :data:`MAX_LENGTH`
    characters, or null. Raises :class:`~stateway.core.errors.InvalidRequest` as a
    model's field would."""
    if value is None:
        return None
    if not isinstance(value, str):
        raise wrong_type(PARAM, "a string", value)
    if len(value) > MAX_LENGTH:
        raise string_too_long(PARAM, MAX_LENGTH, len(value))
    return value
