"""Canonical -> Responses wire: the Response object, and the other objects its routes answer
(a compaction, an input token count, a page of items). Stream events are
:mod:`~stateway.protocols.responses.stream`'s.

Every field of the spec's Response is present, with numbers where the spec wants numbers
(the effective defaults of the sampling settings, not null); hosted's ``tool_usage`` too,
when the response declares web search (:func:`encode_tool_usage`).
"""

from __future__ import annotations

import copy
from typing import Any, Final

from stateway.core.compaction.service import Compacted
from stateway.core.errors import INSUFFICIENT_QUOTA
from stateway.core.items import WEB_SEARCH_CALL, Item
from stateway.core.ports import ItemPage
from stateway.core.response import UNFINISHED, ResponseState
from stateway.core.results import TokenCount
from stateway.core.tools.tool_types import WEB_SEARCH_TYPES
from stateway.core.usage import Usage
from stateway.protocols.service_tier import served_tier


def encode_response(
    state: ResponseState, *, snapshot: bool = False, queued: bool = False
) -> dict[str, Any]:
    """The Response object. ``snapshot`` renders it as first announced: in progress (or,
    ``queued``, waiting to start: a background response's create), empty."""
    s = state.settings
    status = ("queued" if queued else "in_progress") if snapshot else state.status
    incomplete = None
    if not snapshot and state.status == "incomplete":
        incomplete = {"reason": state.incomplete_reason}
    wire: dict[str, Any] = {
        "id": state.id,
        "object": "response",
        "created_at": int(state.created_at),
        "status": status,
        "background": state.background,
        "completed_at": None if snapshot or state.completed_at is None else int(state.completed_at),
        "error": None if snapshot or state.error is None else _wire_error(state.error),
        "image": s.image,
        "incomplete_details": incomplete,
        "instructions": state.instructions,
        "max_output_tokens": s.max_output_tokens,
        "max_tool_calls": s.max_tool_calls,
        "model": state.model,
        "output": [] if snapshot else state.output,
        "parallel_tool_calls": s.parallel_tool_calls,
        "previous_response_id": state.previous_response_id,
        "prompt_cache_key": s.prompt_cache_key,
        "prompt_cache_retention": s.prompt_cache_retention,
        "reasoning": {"effort": s.reasoning_effort, "summary": s.reasoning_summary},
        "safety_identifier": s.safety_identifier,
        "service_tier": _service_tier(
            s.service_tier, settled=not snapshot and status not in UNFINISHED
        ),
        "store": state.store,
        "temperature": 1.0 if s.temperature is None else s.temperature,
        "text": {"format": _text_format(s.text_format), "verbosity": s.verbosity or "medium"},
        "tool_choice": s.tool_choice,
        "tools": s.tools,
        "top_logprobs": s.top_logprobs or 0,
        "top_p": 1.0 if s.top_p is None else s.top_p,
        "presence_penalty": s.presence_penalty or 0.0,
        "frequency_penalty": s.frequency_penalty or 0.0,
        "truncation": s.truncation,
        "usage": None if snapshot or state.usage is None else encode_usage(state.usage),
        "user": s.user,
        "metadata": s.metadata,
        "conversation": None if state.conversation_id is None else {"id": state.conversation_id},
    }
    if not snapshot and s.tools and any(t.get("type") in WEB_SEARCH_TYPES for t in s.tools):
        wire["tool_usage"] = encode_tool_usage(state.output)
    return wire


def _service_tier(requested: str | None, *, settled: bool) -> str:
    """As hosted: the tier asked for (``auto`` when none) while the response is in
    progress; once it has ended, the tier it was served at."""
    return served_tier(requested) if settled else requested or "auto"


_NO_IMAGES: Final = {
    "input_tokens": 0,
    "input_tokens_details": {"image_tokens": 0, "text_tokens": 0},
    "output_tokens": 0,
    "total_tokens": 0,
}


def encode_tool_usage(output: list[Item]) -> dict[str, Any]:
    """Hosted's ``tool_usage`` of a response declaring web search: its searches that ran
    (``web_search.num_requests``, the billable ones: a failed search and a hosted page
    action sent back are not), and no image generation (each family is there, at zero
    when unused)."""
    searches = sum(
        1
        for item in output
        if item.get("type") == WEB_SEARCH_CALL
        and item.get("status") == "completed"
        and isinstance(action := item.get("action"), dict)
        and action.get("type") == "search"
    )
    return {"image_gen": copy.deepcopy(_NO_IMAGES), "web_search": {"num_requests": searches}}


def encode_usage(usage: Usage) -> dict[str, Any]:
    return {
        "input_tokens": usage.input_tokens,
        "input_tokens_details": {
            "cached_tokens": usage.cached_tokens,
            "cache_write_tokens": usage.cache_write_tokens,
        },
        "output_tokens": usage.output_tokens,
        "output_tokens_details": {"reasoning_tokens": usage.reasoning_tokens},
        "total_tokens": usage.total_tokens,
    }


def encode_compacted(compacted: Compacted) -> dict[str, Any]:
    """The ``response.compaction`` object of ``POST /v1/responses/compact``: its
    ``service_tier`` the tier it was served at, as an ended response's, when one was asked
    for (else none: the SDK's "when reported"); its ``image`` the image context policy in
    effect, as a response's."""
    tier = compacted.service_tier
    return {
        "id": compacted.id,
        "object": "response.compaction",
        "created_at": int(compacted.created_at),
        "output": compacted.output,
        "usage": encode_usage(compacted.usage),
        "safety_identifier": compacted.safety_identifier,
        "service_tier": None if tier is None else _service_tier(tier, settled=True),
        "image": compacted.image,
    }


def encode_token_count(count: TokenCount) -> dict[str, Any]:
    """The ``response.input_tokens`` object (whether it is an estimate travels in a
    header: see the HTTP surface)."""
    return {"object": "response.input_tokens", "input_tokens": count.input_tokens}


def encode_item_page(page: ItemPage) -> dict[str, Any]:
    data = page.items
    return {
        "object": "list",
        "data": data,
        "first_id": data[0].get("id") if data else None,
        "last_id": data[-1].get("id") if data else None,
        "has_more": page.has_more,
    }


def _text_format(fmt: dict[str, Any]) -> dict[str, Any]:
    """A ``json_schema`` format as the spec has it: ``strict`` a boolean, ``description``
    present (null when not given)."""
    if fmt.get("type") != "json_schema":
        return fmt
    return {**fmt, "description": fmt.get("description"), "strict": bool(fmt.get("strict"))}


_PASSED_CODES = frozenset(
    {
        "server_error",
        "rate_limit_exceeded",
        "context_length_exceeded",
        INSUFFICIENT_QUOTA,
        # the gateway's own, which clients and operators act on (see docs/compatibility.md)
        "server_restarted",
        "server_shutting_down",
        "upstream_timeout",
        "upstream_response_too_large",
        "overloaded",
    }
)
_TOO_MANY_REQUESTS: Final = 429


def _wire_error(error: dict[str, Any]) -> dict[str, Any]:
    """The spec's ``ResponseError``: its code set is closed, so gateway codes are folded into
    it by status: a 429 is ``rate_limit_exceeded``, another 4xx ``invalid_prompt``, the
    rest ``server_error``. The codes clients act on pass through as hosted sends them:
    Codex ends a turn on ``context_length_exceeded`` (to compact) and ``insufficient_quota``
    (with its quota message), gives one up on ``invalid_prompt`` and retries the rest."""
    code = error.get("code")
    if code not in _PASSED_CODES:
        status = error.get("status") or 500
        if status == _TOO_MANY_REQUESTS:
            code = "rate_limit_exceeded"
        else:
            code = "invalid_prompt" if 400 <= status < 500 else "server_error"
    return {"code": code, "message": error.get("message", "")}
