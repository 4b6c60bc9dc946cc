"""The fake Messages upstream's check of a request's ``cache_control`` marks, as Anthropic
refuses them: more than four (tools, system blocks, message blocks and tool results'
blocks, and the top-level automatic one); a mark other than ``{"type": "ephemeral"}``
with a ``ttl`` of ``5m`` or ``1h``; a ``1h`` block mark after a ``5m`` one (in the order
tools, system, messages)."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from stateway.fake_upstream.errors import invalid_request

MAX_BREAKPOINTS = 4
_TTLS = ("5m", "1h")


def check_breakpoints(body: dict[str, Any]) -> None:
    """At most four marks, each ``{"type": "ephemeral"}`` with a ``ttl`` of ``5m`` or
    ``1h``; no ``1h`` block mark after a ``5m`` one (the top-level automatic mark, which
    lands on the last block, is not ordered here)."""
    marks = list(_marks(body))
    if "cache_control" in body:
        _check_mark(body["cache_control"], "cache_control")
    shorter = False
    for path, mark in marks:
        ttl = _check_mark(mark, f"{path}.cache_control")
        if ttl == "1h" and shorter:
            raise invalid_request(
                f"{path}.cache_control.ttl: a ttl='1h' cache_control block must not come after "
                "a ttl='5m' cache_control block. Note that blocks are processed in the "
                "following order: `tools`, `system`, `messages`.",
                f"{path}.cache_control.ttl",
            )
        shorter = shorter or ttl == "5m"
    found = len(marks) + int("cache_control" in body)
    if found > MAX_BREAKPOINTS:
        raise invalid_request(
            f"A maximum of {MAX_BREAKPOINTS} blocks with cache_control may be provided. "
            f"Found {found}."
        )


def _marks(body: dict[str, Any]) -> Iterator[tuple[str, Any]]:
    """Each block mark with its block's path, in the order Anthropic processes them:
    tools, system, messages (a tool result's own blocks after it)."""
    for n, tool in enumerate(body.get("tools") or ()):
        if isinstance(tool, dict) and "cache_control" in tool:
            yield f"tools.{n}", tool["cache_control"]
    system = body.get("system")
    for n, block in enumerate(system if isinstance(system, list) else ()):
        if isinstance(block, dict) and "cache_control" in block:
            yield f"system.{n}", block["cache_control"]
    for n, message in enumerate(body.get("messages") or ()):
        content = message.get("content") if isinstance(message, dict) else None
        for m, block in enumerate(content if isinstance(content, list) else ()):
            if not isinstance(block, dict):
                continue
            if "cache_control" in block:
                yield f"messages.{n}.content.{m}", block["cache_control"]
            inner = block.get("content")
            if block.get("type") == "tool_result" and isinstance(inner, list):
                for k, part in enumerate(inner):
                    if isinstance(part, dict) and "cache_control" in part:
                        yield f"messages.{n}.content.{m}.content.{k}", part["cache_control"]


def _check_mark(mark: Any, path: str) -> str:
    """``mark``'s lifetime (``5m`` when it names none); a 400 for a mark Anthropic
    refuses."""
    if not isinstance(mark, dict) or mark.get("type") != "ephemeral":
        raise invalid_request(f"{path}.type: Input should be 'ephemeral'", f"{path}.type")
    ttl = mark.get("ttl", "5m")
    if ttl not in _TTLS:
        raise invalid_request(f"{path}.ttl: Input should be '5m' or '1h'", f"{path}.ttl")
    return str(ttl)
