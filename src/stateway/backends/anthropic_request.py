"""Canonical request -> an Anthropic Messages body, limited to what that API accepts.

- ``system``: the instructions, then the system/developer messages that lead the context
  (a string when that is one plain text, else text blocks keeping ``cache_control``);
  a system message later in the context stays a ``role: "system"`` entry where it was,
  as Claude Code sends it.
- Items become blocks of alternating turns: text, ``image`` and ``document`` parts (a
  Messages client's document with its ``context``, ``citations`` and custom content as
  it sent them, and its ``search_result`` block as it sent it); a text part's
  ``citations`` (an Anthropic answer's, sent back) go along when what they cite does
  too: a document's (``char_location``, ``page_location``, ``content_block_location``)
  when a document of their ``document_index`` comes before them, a search result's
  (``search_result_location``) likewise by ``search_result_index``; others (the
  gateway's own ``web_search_result_location``, which no Anthropic search made) are
  left out, the text kept;
  reasoning items as ``thinking`` (with their signature) or ``redacted_thinking``
  (:mod:`stateway.core.reasoning`; unsigned reasoning from another upstream cannot be
  carried and is left out); function calls as ``tool_use`` and their outputs as
  ``tool_result`` (``is_error`` kept). Consecutive items of one role share a message, and
  in a user message the tool results come first. Empty text is never sent: a user turn
  left without blocks (a Chat client's ``content: ""``) says ``(no content)`` instead.
- Tool names and ids are respelled into ``[A-Za-z0-9_-]`` (:mod:`.anthropic_names`).
- ``max_tokens`` is always sent (the backend's default when the client set none).
  Thinking: an explicit budget, or one derived from the effort, kept within
  ``[1024, max_tokens)`` (half of the default when the client set no limit; no thinking
  when ``max_tokens`` leaves no room); or, with ``thinking = "adaptive"`` or for a client
  that asked for adaptive thinking, adaptive thinking with the effort in
  ``output_config``; a Messages client's ``thinking.display`` goes along. While
  thinking, sampling settings Anthropic refuses are left out (a temperature other than 1,
  ``top_k``, a ``top_p`` below 0.95), and a tool choice that forces a tool turns thinking
  off (the two cannot be combined), as does a last assistant message calling tools
  without its signed thinking (a Chat client's, or one whose reasoning item was dropped):
  Anthropic refuses thinking unless that message starts with a thinking block.
- ``service_tier``: ``auto`` (and ``priority``) as ``auto``, ``default`` as
  ``standard_only``; others are not sent.
- A ``json_schema`` text format is Anthropic's structured output,
  ``output_config.format``; ``json_object`` has no equivalent there and is not carried.
"""

from __future__ import annotations

import base64
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any, Final, Literal

import orjson

from stateway.backends.anthropic_names import ToolNames, safe_name
from stateway.core.adaptive_effort import ADAPTIVE_DEFAULT, ADAPTIVE_EFFORTS
from stateway.core.errors import InvalidRequest
from stateway.core.inference import InferenceRequest
from stateway.core.items import Item
from stateway.core.reasoning import thinking_of
from stateway.core.tools.history import model_items

MIN_THINKING_BUDGET: Final = 1024
EFFORT_BUDGETS: Final = {
    "minimal": 1024,
    "low": 2048,
    "medium": 8192,
    "high": 16384,
    "xhigh": 32768,
    "max": 65536,
}
"""The thinking budget asked for each reasoning effort when the client gave no budget."""
_ADAPTIVE_LEVELS: Final = {"minimal": "low"} | {level: level for level in ADAPTIVE_EFFORTS}
"""The ``output_config.effort`` of each reasoning effort: Anthropic's levels as they are,
``minimal`` as its nearest, ``low``. Any other (a Chat client's own word) is asked as
``ADAPTIVE_DEFAULT``, Anthropic's default, rather than refused upstream."""
_SERVICE_TIERS: Final = {"auto": "auto", "priority": "auto", "default": "standard_only"}
"""Anthropic's service tier for each canonical (OpenAI) one it has: ``auto`` may use
priority capacity, ``standard_only`` never does; ``flex`` and others are not sent."""
EMPTY_TURN: Final = "(no content)"
"""The text of a user turn that came empty or blank (a Chat client's ``content: ""``):
Anthropic refuses empty and blank text blocks (left out: :func:`_said`) and a turn without
blocks, and leaving the turn out would make the assistant's last message a prefill to
continue instead of a turn to answer."""
_TEXT_PARTS: Final = frozenset({"input_text", "output_text", "text", "summary_text"})
_SYSTEM_ROLES: Final = frozenset({"system", "developer"})


@dataclass(slots=True, frozen=True)
class AnthropicOptions:
    default_max_tokens: int = 4096
    thinking: Literal["enabled", "adaptive"] = "enabled"


def to_upstream(
    request: InferenceRequest, options: AnthropicOptions, names: ToolNames
) -> dict[str, Any]:
    settings = request.settings
    max_tokens = settings.max_output_tokens or options.default_max_tokens
    system, messages = _conversation(request, names)
    if not messages:
        raise InvalidRequest(
            "An Anthropic upstream needs at least one user or assistant message.",
            param="input",
            code="missing_required_parameter",
        )
    body: dict[str, Any] = {"model": request.model, "max_tokens": max_tokens}
    if system:
        body["system"] = system
    body["messages"] = messages
    _check_citations(system, messages)
    if request.stream:
        body["stream"] = True
    forced = _tools(body, request, names)
    unsigned = _unsigned_tool_turn(messages)
    thinking = None if forced or unsigned else _thinking(body, request, options, max_tokens)
    if settings.temperature is not None and (thinking is None or settings.temperature == 1):
        body["temperature"] = min(settings.temperature, 1.0)
    if settings.top_p is not None and (thinking is None or settings.top_p >= 0.95):
        body["top_p"] = settings.top_p
    if settings.top_k is not None and thinking is None:
        body["top_k"] = settings.top_k
    if settings.stop_sequences:
        body["stop_sequences"] = settings.stop_sequences
    if settings.user:
        body["metadata"] = {"user_id": settings.user}
    tier = _SERVICE_TIERS.get(settings.service_tier or "")
    if tier is not None:
        body["service_tier"] = tier
    if settings.cache_control:
        body["cache_control"] = settings.cache_control
    _output_format(body, settings.text_format)
    return body


def _output_format(body: dict[str, Any], text_format: dict[str, Any]) -> None:
    """A ``json_schema`` text format as Anthropic's structured output
    (``output_config.format``), beside an adaptive effort there; Anthropic has no
    schema-less JSON mode, so ``json_object`` is not carried."""
    schema = text_format.get("schema")
    if text_format.get("type") == "json_schema" and isinstance(schema, dict):
        config = body.setdefault("output_config", {})
        config["format"] = {"type": "json_schema", "schema": schema}


def count_body(body: dict[str, Any]) -> dict[str, Any]:
    """The ``/messages/count_tokens`` body of a ``/messages`` body: what shapes the input."""
    kept = ("model", "system", "messages", "tools", "tool_choice", "thinking")
    return {k: body[k] for k in kept if k in body}


def _tools(body: dict[str, Any], request: InferenceRequest, names: ToolNames) -> bool:
    """Add ``tools`` and ``tool_choice``; whether the choice forces a tool."""
    if not request.tools:
        return False
    body["tools"] = [_tool(tool, names) for tool in request.tools]
    choice = request.tool_choice
    if choice == "none":
        body["tool_choice"] = {"type": "none"}
        return False
    wire: dict[str, Any] = {"type": "auto"}
    if choice == "required":
        wire = {"type": "any"}
    elif isinstance(choice, dict) and isinstance(choice.get("name"), str):
        wire = {"type": "tool", "name": names.to_upstream(choice["name"])}
    if not request.settings.parallel_tool_calls:
        wire["disable_parallel_tool_use"] = True
    body["tool_choice"] = wire
    return bool(wire["type"] != "auto")


def _tool(tool: Item, names: ToolNames) -> dict[str, Any]:
    wire: dict[str, Any] = {"name": names.to_upstream(str(tool["name"]))}
    if tool.get("description"):
        wire["description"] = tool["description"]
    schema = tool.get("parameters")
    wire["input_schema"] = schema if isinstance(schema, dict) else {"type": "object"}
    if tool.get("cache_control"):
        wire["cache_control"] = tool["cache_control"]
    return wire


def _thinking(
    body: dict[str, Any], request: InferenceRequest, options: AnthropicOptions, max_tokens: int
) -> dict[str, Any] | None:
    settings = request.settings
    budget, effort = settings.reasoning_budget, settings.reasoning_effort
    if budget is None and effort in (None, "none"):
        return None
    shown = settings.reasoning_display
    display = {"display": shown} if shown in ("omitted", "summarized") else {}
    if budget is None and (options.thinking == "adaptive" or settings.reasoning_adaptive):
        thinking: dict[str, Any] = {"type": "adaptive", **display}
        level = _ADAPTIVE_LEVELS.get(str(effort), ADAPTIVE_DEFAULT)
        body["thinking"], body["output_config"] = thinking, {"effort": level}
        return thinking
    wanted = budget if budget is not None else EFFORT_BUDGETS.get(str(effort), 8192)
    if max_tokens <= MIN_THINKING_BUDGET:
        return None
    # the client's limit is thinking and answer together; without one, thinking may take
    # half of the backend's default, not all of it
    ceiling = max_tokens - 1 if settings.max_output_tokens is not None else max_tokens // 2
    thinking = {
        "type": "enabled",
        "budget_tokens": max(MIN_THINKING_BUDGET, min(wanted, ceiling)),
        **display,
    }
    body["thinking"] = thinking
    return thinking


def _unsigned_tool_turn(messages: list[dict[str, Any]]) -> bool:
    """Whether the last assistant message calls tools without leading thinking: Anthropic
    refuses thinking then ("a final `assistant` message must start with a thinking
    block"), and a client that cannot carry signatures (Chat Completions) or that dropped
    the reasoning item sends such a tool turn."""
    last = next((m for m in reversed(messages) if m["role"] == "assistant"), None)
    if last is None:
        return False
    blocks = last["content"]
    calls = any(block["type"] == "tool_use" for block in blocks)
    return calls and blocks[0]["type"] not in ("thinking", "redacted_thinking")


def _conversation(
    request: InferenceRequest, names: ToolNames
) -> tuple[str | list[dict[str, Any]], list[dict[str, Any]]]:
    system: list[dict[str, Any]] = []
    if _said(request.instructions):
        system.append({"type": "text", "text": request.instructions})
    turns = _Turns()
    for item in model_items(request.items):
        kind = item.get("type")
        if kind == "message":
            role = item.get("role")
            if role in _SYSTEM_ROLES and not turns.messages:
                system += _text_blocks(item.get("content"))
            else:
                turns.add(_role(role), _message_blocks(item))
        elif kind == "reasoning":
            turns.add("assistant", _thinking_blocks(item))
        elif kind == "function_call":
            turns.add("assistant", [_tool_use(item, names)])
        elif kind == "function_call_output":
            turns.add("user", [_tool_result(item)])
    return _system(system), turns.done()


def _system(blocks: list[dict[str, Any]]) -> str | list[dict[str, Any]]:
    if len(blocks) == 1 and set(blocks[0]) == {"type", "text"}:
        return str(blocks[0]["text"])
    return blocks


class _Turns:
    """Messages being built: blocks of one role join the last message of that role."""

    __slots__ = ("messages",)

    def __init__(self) -> None:
        self.messages: list[dict[str, Any]] = []

    def add(self, role: str, blocks: list[dict[str, Any]]) -> None:
        last = self.messages[-1] if self.messages else None
        if last is not None and last["role"] == role:
            last["content"] += blocks
        elif blocks or role == "user":  # an empty user turn stays a turn (see done)
            self.messages.append({"role": role, "content": blocks})

    def done(self) -> list[dict[str, Any]]:
        for message in self.messages:
            if message["role"] == "user":  # tool results must lead a user message
                blocks = message["content"]
                ordered = [b for b in blocks if b["type"] == "tool_result"] + [
                    b for b in blocks if b["type"] != "tool_result"
                ]
                message["content"] = ordered or [{"type": "text", "text": EMPTY_TURN}]
        return self.messages


def _role(role: Any) -> str:
    if role in _SYSTEM_ROLES:
        return "system"
    return "assistant" if role == "assistant" else "user"


def _said(text: str | None) -> bool:
    """Whether ``text`` says anything: Anthropic refuses a text block that is empty or of
    whitespace only (``isspace`` stops at the first other character: no copy)."""
    return bool(text and not text.isspace())


def _message_blocks(item: Item) -> list[dict[str, Any]]:
    content = item.get("content")
    if isinstance(content, str):
        return [{"type": "text", "text": content}] if _said(content) else []
    return [block for part in content or () if (block := _block(part)) is not None]


def _text_blocks(content: Any) -> list[dict[str, Any]]:
    if isinstance(content, str):
        return [{"type": "text", "text": content}] if _said(content) else []
    return [b for part in content or () if (b := _block(part)) is not None and b["type"] == "text"]


def _block(part: Item) -> dict[str, Any] | None:
    kind = part.get("type")
    block: dict[str, Any]
    if isinstance(part.get("search_result"), dict):  # a Messages client's, as it came
        block = {**part["search_result"], "type": "search_result"}
    elif kind in _TEXT_PARTS or kind == "refusal":
        text = part.get("text") or part.get("refusal") or ""
        if not _said(text):
            return None
        block = {"type": "text", "text": text}
        if isinstance(part.get("citations"), list) and part["citations"]:
            block["citations"] = part["citations"]
    elif kind == "input_image":
        block = {"type": "image", "source": _image_source(part)}
    elif kind == "input_file":
        block = _document(part)
    else:
        return None
    if isinstance(part.get("cache_control"), dict):
        block["cache_control"] = part["cache_control"]
    return block


_CITED_BY: Final = {
    "char_location": ("document", "document_index"),
    "page_location": ("document", "document_index"),
    "content_block_location": ("document", "document_index"),
    "search_result_location": ("search_result", "search_result_index"),
}
"""Each citation type Anthropic checks against the request: the block type it points at,
and the field that numbers it among that type's blocks."""


def _check_citations(system: str | list[dict[str, Any]], messages: list[dict[str, Any]]) -> None:
    """Leave out the text blocks' citations that point at no document or search result
    sent before them (Anthropic refuses those), and those of other types."""
    seen = {"document": 0, "search_result": 0}
    for block in _in_order(system, messages):
        kind = block["type"]
        if kind in seen:
            seen[kind] += 1
        elif kind == "text" and "citations" in block:
            kept = [c for c in block["citations"] if _points_at_one(c, seen)]
            if kept:
                block["citations"] = kept
            else:
                del block["citations"]


def _in_order(
    system: str | list[dict[str, Any]], messages: list[dict[str, Any]]
) -> Iterator[dict[str, Any]]:
    """Every block of the body in order, a tool result's own blocks after it."""
    if isinstance(system, list):
        yield from system
    for message in messages:
        for block in message["content"]:
            yield block
            if block["type"] == "tool_result" and isinstance(block.get("content"), list):
                yield from block["content"]


def _points_at_one(citation: Any, seen: dict[str, int]) -> bool:
    cited = _CITED_BY.get(str(citation.get("type"))) if isinstance(citation, dict) else None
    if cited is None:
        return False
    kind, field = cited
    index = citation.get(field)
    return isinstance(index, int) and 0 <= index < seen[kind]


def _document(part: Item) -> dict[str, Any]:
    """A ``document`` block: a Messages client's own source when the part kept it (custom
    content), its ``context`` and ``citations`` as they came."""
    source = part.get("source")
    block: dict[str, Any] = {
        "type": "document",
        "source": source if isinstance(source, dict) else _document_source(part),
    }
    if part.get("filename"):
        block["title"] = part["filename"]
    for key in ("context", "citations"):
        if part.get(key) is not None:
            block[key] = part[key]
    return block


def _image_source(part: Item) -> dict[str, Any]:
    url = part.get("image_url")
    if not isinstance(url, str) or not url:
        raise _uncarried("an image without an image_url (a file_id)")
    data_url = _data_url(url)
    if data_url is None:
        return {"type": "url", "url": url}
    media_type, data = data_url
    return {"type": "base64", "media_type": media_type, "data": data}


def _document_source(part: Item) -> dict[str, Any]:
    data = part.get("file_data")
    if isinstance(data, str) and (decoded := _data_url(data)) is not None:
        media_type, payload = decoded
        if media_type == "text/plain":
            text = base64.b64decode(payload, validate=False).decode("utf-8", "replace")
            return {"type": "text", "media_type": "text/plain", "data": text}
        return {"type": "base64", "media_type": media_type, "data": payload}
    url = part.get("file_url")
    if isinstance(url, str) and url:
        return {"type": "url", "url": url}
    raise _uncarried("a file given by file_id or without a data URL")


def _data_url(url: str) -> tuple[str, str] | None:
    """``(media type, base64 data)`` of a base64 ``data:`` URL, else None."""
    if not url.startswith("data:"):
        return None
    head, sep, data = url[5:].partition(",")
    media_type, _, encoding = head.partition(";")
    if not sep or encoding != "base64":
        return None
    return media_type or "application/octet-stream", data


def _uncarried(what: str) -> InvalidRequest:
    return InvalidRequest(
        f"An Anthropic upstream cannot carry {what}.",
        param="input",
        code="unsupported_content_type",
    )


def _thinking_blocks(item: Item) -> list[dict[str, Any]]:
    thinking = thinking_of(item)
    if thinking.seal is None or not thinking.anthropic:
        return []  # unsigned reasoning (another upstream's) would be refused
    if thinking.redacted:
        return [{"type": "redacted_thinking", "data": thinking.seal}]
    return [{"type": "thinking", "thinking": thinking.text, "signature": thinking.seal}]


def _tool_use(item: Item, names: ToolNames) -> dict[str, Any]:
    arguments = item.get("arguments") or ""
    try:
        parsed = orjson.loads(arguments) if arguments else {}
    except orjson.JSONDecodeError:
        parsed = None
    return {
        "type": "tool_use",
        "id": safe_name(str(item["call_id"])),
        "name": names.to_upstream(str(item["name"])),
        "input": parsed if isinstance(parsed, dict) else {"arguments": arguments},
    }


def _tool_result(item: Item) -> dict[str, Any]:
    block: dict[str, Any] = {"type": "tool_result", "tool_use_id": safe_name(str(item["call_id"]))}
    output = item.get("output")
    if isinstance(output, str):
        if _said(output):
            block["content"] = output
    else:
        parts = [b for part in output or () if (b := _block(part)) is not None]
        if parts:
            block["content"] = parts
    if item.get("is_error") is True:
        block["is_error"] = True
    if isinstance(item.get("cache_control"), dict):
        block["cache_control"] = item["cache_control"]
    return block
