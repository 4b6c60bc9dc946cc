"""OpenAI's prompt caching as an Anthropic upstream's ``cache_control`` marks.

Hosted OpenAI caches a prompt unasked: one implicit breakpoint, unless
``prompt_cache_options.mode`` is ``explicit``, beside the explicit ones content parts carry
(``prompt_cache_breakpoint``). Anthropic caches only what a request marks, so a Responses
or Chat Completions client (and the gateway's own rounds for it: the tool loop's,
compaction summaries) gets:

- :func:`automatic_mark`: in ``implicit`` mode, Anthropic's automatic caching, the
  top-level ``cache_control`` (a mark on the last cacheable block, moving forward as the
  conversation grows); none in ``explicit`` mode. The request's mode wins, else its
  backend's ``prompt_cache_mode`` (``implicit`` by default). A client that marks its own
  (a Messages client, Anthropic's way: ``GenerationSettings.client_cache_marks``) gets no
  mark added, nor does a request whose context or tools hold a ``cache_control`` already;
- :func:`breakpoint_mark`: a part's ``prompt_cache_breakpoint`` as its block's mark;
- lifetimes: OpenAI's ``ttl`` (``30m``, ``12h``) is a minimum, so any asked, the
  breakpoint's or else the request's (``prompt_cache_options.ttl``;
  ``prompt_cache_retention: "24h"`` counts as ``12h``), is Anthropic's longest, ``1h``;
  none asked is Anthropic's default, 5 minutes, whose write costs less;
- :func:`order_lifetimes`: Anthropic refuses a ``1h`` mark after a ``5m`` one (in the
  order tools, system, messages), so a shorter mark before an hour's lasts the hour too.

Anthropic's four-mark limit, which its automatic mark counts against, is kept by
:mod:`.anthropic_breakpoints`, which drops the earliest message marks: as hosted OpenAI
writes the latest explicit breakpoints.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from typing import Any, Final, Literal

from stateway.backends.anthropic_breakpoints import CACHE_CONTROL
from stateway.core.generation_settings import GenerationSettings
from stateway.core.inference import InferenceRequest

PromptCacheMode = Literal["implicit", "explicit"]
BREAKPOINT: Final = "prompt_cache_breakpoint"
HOUR: Final = "1h"
_ASKED_TTLS: Final = frozenset({"30m", "12h"})
_MODES: Final = frozenset({"implicit", "explicit"})


def request_ttl(settings: GenerationSettings) -> str | None:
    """The Anthropic ``ttl`` of the request's own marks: :data:`HOUR` when it asked for a
    lifetime, else None (Anthropic's default)."""
    options = settings.prompt_cache_options or {}
    if options.get("ttl") in _ASKED_TTLS or settings.prompt_cache_retention == "24h":
        return HOUR
    return None


def breakpoint_mark(breakpoint: Any, ttl: str | None) -> dict[str, Any] | None:
    """The ``cache_control`` of a part's ``prompt_cache_breakpoint`` (an object; its own
    ``ttl``, else the request's, ``ttl``); None for anything else."""
    if not isinstance(breakpoint, Mapping):
        return None
    return _mark(HOUR if breakpoint.get("ttl") in _ASKED_TTLS else ttl)


def automatic_mark(request: InferenceRequest, mode: PromptCacheMode) -> dict[str, Any] | None:
    """The body's top-level ``cache_control``: a Messages client's own, as it came; else,
    in ``implicit`` mode (the request's, else the backend's ``mode``), Anthropic's
    automatic mark, unless the request holds marks of its own."""
    settings = request.settings
    if settings.cache_control or settings.client_cache_marks:
        return settings.cache_control or None
    asked = (settings.prompt_cache_options or {}).get("mode")
    if (asked if asked in _MODES else mode) == "explicit" or _marked(request):
        return None
    return _mark(request_ttl(settings))


def order_lifetimes(body: dict[str, Any]) -> None:
    """Give every mark before the body's last ``1h`` one that ``ttl`` (Anthropic refuses a
    longer mark after a shorter one). A block is replaced in its list by a copy, never
    changed: it may be an item's own."""
    places = list(_marked_places(body))
    hours = [n for n, (blocks, at) in enumerate(places) if _ttl(blocks[at]) == HOUR]
    for blocks, at in places[: hours[-1]] if hours else ():
        mark = blocks[at][CACHE_CONTROL]
        if isinstance(mark, dict) and mark.get("ttl") != HOUR:
            blocks[at] = {**blocks[at], CACHE_CONTROL: {**mark, "ttl": HOUR}}


def _mark(ttl: str | None) -> dict[str, Any]:
    return {"type": "ephemeral", "ttl": ttl} if ttl else {"type": "ephemeral"}


def _ttl(block: dict[str, Any]) -> Any:
    mark = block[CACHE_CONTROL]
    return mark.get("ttl") if isinstance(mark, dict) else None


def _marked(request: InferenceRequest) -> bool:
    """Whether the request's tools or context hold a ``cache_control`` (a Messages turn
    continued by an OpenAI-shaped request): those marks are the client's."""
    if any(CACHE_CONTROL in tool for tool in request.tools):
        return True
    for item in request.items:
        if CACHE_CONTROL in item:
            return True
        for key in ("content", "output"):
            parts = item.get(key)
            if isinstance(parts, list) and any(
                isinstance(part, dict) and CACHE_CONTROL in part for part in parts
            ):
                return True
    return False


def _marked_places(body: dict[str, Any]) -> Iterator[tuple[list[dict[str, Any]], int]]:
    """Each marked block as (its list, its index), in Anthropic's order: tools, system,
    messages (a tool result's own blocks after it)."""
    lists: list[list[dict[str, Any]]] = [body.get("tools") or []]
    if isinstance(body.get("system"), list):
        lists.append(body["system"])
    lists += [message["content"] for message in body["messages"]]
    for blocks in lists:
        for at, block in enumerate(blocks):
            if CACHE_CONTROL in block:
                yield blocks, at
            inner = block.get("content")
            if block.get("type") == "tool_result" and isinstance(inner, list):
                for inner_at, inner_block in enumerate(inner):
                    if CACHE_CONTROL in inner_block:
                        yield inner, inner_at
