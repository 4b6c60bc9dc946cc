"""The ``name`` of a declared tool, a field of both OpenAI wires (a Responses function's
``tools[N].name``, a Chat Completions function's ``tools[N].function.name``): checked as
hosted checks it, whatever the upstream, so a name one upstream would take and another
refuse (a dotted MCP tool name) is refused alike, before any model is asked."""

from __future__ import annotations

import re
from typing import Final

from stateway.protocols.validation import pattern_mismatch, string_too_long

TOOL_NAME_PATTERN: Final = "^[a-zA-Z0-9_-]+$"
"""A function's name (and a Chat message's ``name``), as hosted shows the pattern."""
MAX_LENGTH: Final = 128
"""A tool's name at most, as hosted now takes."""

_CHARACTERS: Final = re.compile(TOOL_NAME_PATTERN[1:-1])


def check_tool_name(name: str, param: str, *, pattern: bool = True) -> None:
    """As hosted: at most :data:`MAX_LENGTH` characters (judged first), and, when
    ``pattern`` (a function's name), of ``[a-zA-Z0-9_-]``; a 400 on ``param`` otherwise."""
    if len(name) > MAX_LENGTH:
        raise string_too_long(param, MAX_LENGTH, len(name))
    if pattern and not _CHARACTERS.fullmatch(name):
        raise pattern_mismatch(param, TOOL_NAME_PATTERN)
