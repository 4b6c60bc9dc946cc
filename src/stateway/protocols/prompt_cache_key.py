"""``prompt_cache_key``, a field of the OpenAI wires (Responses' create and compact, Chat
Completions): the key a client groups requests under for prompt caching, at most
:data:`MAX_LENGTH` characters, as hosted takes it; a longer one (an agent's session ids
joined) is refused in hosted's words (``string_above_max_length``) by every route, whatever
the upstream."""

from __future__ import annotations

from typing import Annotated, Final

from pydantic import Field

MAX_LENGTH: Final = 64

PromptCacheKey = Annotated[str, Field(max_length=MAX_LENGTH)]
"""The field of a request model (validated strictly, as every body is)."""
