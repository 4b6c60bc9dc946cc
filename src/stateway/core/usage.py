"""Token accounting for one response, summed over its rounds."""

from __future__ import annotations

from dataclasses import dataclass


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
