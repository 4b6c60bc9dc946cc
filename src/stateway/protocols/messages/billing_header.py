"""Claude Code's billing header, left out of the system prompt.

Claude Code leads ``system`` with a text block of its own,
``x-anthropic-billing-header: cc_version=2.1.332.0b8; cc_entrypoint=sdk-cli;`` (some builds
add ``cch=...``): attribution that Anthropic's servers read, not part of the model's
prompt. Its values change with a session's first message (``cc_version``'s suffix), or with
every request (``cch``). Forwarded, it made every session's prompt differ from its first
line on, so a model server caching prompts by their prefix (llama.cpp's slots, vLLM's
prefix cache) read again all of a session's instructions and tools, some 20,000 tokens,
on each new session or request. Only a line that opens the system prompt or one of its
blocks is taken for it; the rest of that block stays.
"""

from __future__ import annotations

from typing import Final

from stateway.protocols.messages.blocks import TextBlock

PREFIX: Final = "x-anthropic-billing-header:"


def without_billing_header(system: str | list[TextBlock] | None) -> str | list[TextBlock] | None:
    """``system`` as the model is to see it: without the billing header's line."""
    if isinstance(system, str):
        return _rest(system)
    if system is None:
        return None
    kept = []
    for block in system:
        rest = _rest(block.text)
        if rest == block.text:
            kept.append(block)
        elif rest:
            kept.append(block.model_copy(update={"text": rest}))
    return kept


def _rest(text: str) -> str:
    """``text`` without its first line if that is the billing header."""
    if not text.startswith(PREFIX):
        return text
    _, _, rest = text.partition("\n")
    return rest
