"""The ``name`` of a ``json_schema`` output format, a field of both OpenAI wires (the
Responses API's ``text.format.name``, Chat Completions' ``response_format.json_schema.name``):
checked as hosted checks it, whatever the upstream, so a name one upstream would take and
another refuse is refused alike."""

from __future__ import annotations

import re
from typing import Final

from stateway.protocols.validation import pattern_mismatch, string_too_long

_PATTERN: Final = re.compile(r"[a-zA-Z0-9_-]+")
_MAX_LENGTH: Final = 64


def check_schema_name(name: str, param: str) -> None:
    """As hosted: at most 64 characters (judged first), of ``[a-zA-Z0-9_-]``; a 400 on
    ``param`` otherwise."""
    if len(name) > _MAX_LENGTH:
        raise string_too_long(param, _MAX_LENGTH, len(name))
    if not _PATTERN.fullmatch(name):
        raise pattern_mismatch(param, f"^{_PATTERN.pattern}$")
