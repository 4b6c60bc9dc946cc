"""The text's tokens in a Chat Completions answer (``choices[0].logprobs.content``), read
into the core's token shape (:mod:`stateway.core.logprobs`) when a request asked for them.
"""

from __future__ import annotations

from typing import Any

from stateway.backends.upstream_values import obj, text
from stateway.core import logprobs
from stateway.core.items import Item


def chunk_tokens(given: Any) -> list[Item] | None:
    """A choice's text tokens (its ``logprobs.content``), when it carries them."""
    content = obj(given).get("content")
    return None if content is None else logprobs.tokens(content)


def text_tokens(given: Any, message: dict[str, Any]) -> list[Item] | None:
    """A whole completion's tokens of its text. vLLM lists every token it generated, the
    reasoning's before the text and the tool calls' after it: with either, only the run of
    tokens spelling the text is kept (the minimal suffix or prefix of the tokens whose text
    holds it; all of them when neither does)."""
    tokens = chunk_tokens(given)
    content = text(message.get("content")) or ""
    reasoning = message.get("reasoning_content") or message.get("reasoning")
    calls = message.get("tool_calls")
    if not tokens or not content or bool(reasoning) == bool(calls):
        return tokens
    return _spelling(tokens, content, ending=bool(reasoning))


def ending_tokens(tokens: list[Item], spelled: str) -> list[Item]:
    """The least run of ``tokens`` ending them whose text holds ``spelled`` (all of them
    when none does): the tokens of a text that came after others (reasoning, say)."""
    return _spelling(tokens, spelled, ending=True)


def _spelling(tokens: list[Item], content: str, *, ending: bool) -> list[Item]:
    """The least run of ``tokens`` ending them (``ending``), else beginning them, whose
    text holds ``content``; all of them when none does."""
    spelled = ""
    ordered = tokens[::-1] if ending else tokens
    for taken, token in enumerate(ordered, 1):
        spelled = token["token"] + spelled if ending else spelled + token["token"]
        if len(spelled) >= len(content):
            if content not in spelled:
                return tokens
            kept = ordered[:taken]
            return kept[::-1] if ending else kept
    return tokens
