"""The ``name`` of a ``json_schema`` output format, a field of both OpenAI wires (the
Responses API's ``text.format.name``, Chat Completions' ``response_format.json_schema.name``):
checked as hosted checks it, whatever the upstream, so a name one upstream would take and
another refuse is refused alike."""

from __future__ import annotations

import re
from typing import Final

from stateway.core.errors import InvalidRequest
from stateway.protocols.validation import string_too_long

_PATTERN: Final = re.compile(r"[a-zA-Z0-9_-]+")
_MAX_LENGTH: Final = 64


def check_schema_name(name: str, param: str) -> None:
    """As hosted: at most 64 characters (judged first), of ``[a-zA-Z0-9_-]``; a 400 on
    ``param`` otherwise."""
    if len(name) > _MAX_LENGTH:
        raise string_too_long(param, _MAX_LENGTH, len(name))
    if not _PATTERN.fullmatch(name):
        raise InvalidRequest(
            f"Invalid '{param}': string does not match pattern. Expected a string that "
            "matches the pattern '^[a-zA-Z0-9_-]+$'.",
            param=param,
            code="invalid_value",
        )
