"""Token accounting for one response, summed over its rounds, and each sampling call's
own (:class:`Iteration`)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal


@dataclass(slots=True)
class Usage:
    input_tokens: int = 0
    output_tokens: int = 0
    cached_tokens: int = 0
    """Of ``input_tokens``, those read from the upstream's prompt cache."""
    reasoning_tokens: int = 0
    cache_write_tokens: int = 0
    """Of ``input_tokens``, those written to the upstream's prompt cache (Anthropic's
    ``cache_creation_input_tokens``)."""

    @property
    def total_tokens(self) -> int:
        return self.input_tokens + self.output_tokens

    def add(self, other: Usage) -> None:
        self.input_tokens += other.input_tokens
        self.output_tokens += other.output_tokens
        self.cached_tokens += other.cached_tokens
        self.reasoning_tokens += other.reasoning_tokens
        self.cache_write_tokens += other.cache_write_tokens

    def since(self, earlier: Usage) -> Usage:
        """What was counted after ``earlier`` (a copy of this usage, taken then)."""
        return Usage(
            self.input_tokens - earlier.input_tokens,
            self.output_tokens - earlier.output_tokens,
            self.cached_tokens - earlier.cached_tokens,
            self.reasoning_tokens - earlier.reasoning_tokens,
            self.cache_write_tokens - earlier.cache_write_tokens,
        )


@dataclass(slots=True, frozen=True)
class Iteration:
    """One sampling call of a response and its usage: the summary of the compaction it
    made first (``compaction``), or one round of its answer (``message``). Messages shows
    them as ``usage.iterations`` when the response compacted."""

    kind: Literal["compaction", "message"]
    usage: Usage
