"""The ``name`` of a declared tool, a field of both OpenAI wires (a Responses function's
``tools[N].name``, a Chat Completions function's ``tools[N].function.name``): at most as
long as hosted takes. Its characters are not judged: hosted takes ``[a-zA-Z0-9_-]`` only,
but vLLM and llama.cpp take any (a dotted MCP tool name), a Chat client's request goes to
them untouched on the fast path, and an Anthropic upstream is sent names it takes
(:mod:`stateway.backends.anthropic_names`): refusing one here would refuse, once a route
translates it, a request its server answers."""

from __future__ import annotations

from typing import Final

from stateway.protocols.validation import string_too_long

MAX_LENGTH: Final = 128
"""A tool's name at most, as hosted now takes."""


def check_tool_name(name: str, param: str) -> None:
    """As hosted: at most :data:`MAX_LENGTH` characters; a 400 on ``param`` otherwise."""
    if len(name) > MAX_LENGTH:
        raise string_too_long(param, MAX_LENGTH, len(name))
