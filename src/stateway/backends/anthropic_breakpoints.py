"""At most four prompt-cache breakpoints on a request to an Anthropic upstream.

Anthropic refuses a request whose blocks carry more than four ``cache_control`` marks
(``A maximum of 4 blocks with cache_control may be provided``). A client counts its own,
but a context the gateway holds for it carries every earlier turn's: a Messages thread
keeps each turn's messages as they came, marks included, and a fifth turn would be
refused. So the earliest message marks are dropped until four remain: the tools', the
system's, the top-level automatic one and the latest messages' are what the client set
for this request, and a cache read still hits the longest prefix a kept mark covers.
A request whose own marks outside its messages already pass four is left to the
upstream's refusal.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any, Final

MAX_BREAKPOINTS: Final = 4
CACHE_CONTROL: Final = "cache_control"


def cap_breakpoints(body: dict[str, Any]) -> None:
    """Drop the earliest message blocks' ``cache_control`` from ``body`` until it holds at
    most :data:`MAX_BREAKPOINTS`. Only what changes is copied: a block may be a dict the
    run keeps (an item's), which must keep its mark for the next request."""
    messages = body["messages"]
    marked = sum(CACHE_CONTROL in block for block in _blocks(messages))
    if marked <= 1:  # the common case: nothing more to count
        return
    fixed = sum(CACHE_CONTROL in tool for tool in body.get("tools") or ())
    system = body.get("system")
    if isinstance(system, list):
        fixed += sum(CACHE_CONTROL in block for block in system)
    fixed += CACHE_CONTROL in body
    excess = min(fixed + marked - MAX_BREAKPOINTS, marked)
    if excess > 0:
        body["messages"] = _unmarked(messages, excess)


def _blocks(messages: list[dict[str, Any]]) -> Iterator[dict[str, Any]]:
    """Every content block of ``messages``, a tool result's own blocks after it, in order."""
    for message in messages:
        content = message.get("content")
        if isinstance(content, list):
            for block in content:
                yield block
                inner = block.get("content")
                if block.get("type") == "tool_result" and isinstance(inner, list):
                    yield from inner


def _unmarked(messages: list[dict[str, Any]], count: int) -> list[dict[str, Any]]:
    """``messages`` with the first ``count`` marks (in :func:`_blocks` order) left out."""
    left = count

    def blocks(content: list[dict[str, Any]]) -> list[dict[str, Any]]:
        nonlocal left
        out = []
        for block in content:
            if left and CACHE_CONTROL in block:
                left -= 1
                block = {k: v for k, v in block.items() if k != CACHE_CONTROL}
            inner = block.get("content")
            if left and block.get("type") == "tool_result" and isinstance(inner, list):
                block = {**block, "content": blocks(inner)}
            out.append(block)
        return out

    out = []
    for message in messages:
        content = message.get("content")
        if left and isinstance(content, list):
            message = {**message, "content": blocks(content)}
        out.append(message)
    return out
