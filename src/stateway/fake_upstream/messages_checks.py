"""What the fake Messages wire refuses, as Anthropic refuses it (400
``invalid_request_error``): a gateway test that passes here sent a request Anthropic
would take.

- top-level fields outside the API's; ``model``, ``max_tokens`` (a positive integer) and a
  non-empty ``messages`` required; a ``service_tier`` other than ``auto`` or
  ``standard_only``; roles ``user``, ``assistant`` or ``system``;
- empty or blank (whitespace only) text blocks, in ``system`` and tool results too, and
  empty or blank ``stop_sequences``;
  unknown block types; a base64 image of a media type other than ``image/jpeg``,
  ``image/png``, ``image/gif`` or ``image/webp``; a ``search_result`` without a ``source`` or
  text ``content``; a text block's ``citations`` of an unknown type, pointing at no
  document (``document_index``) or search result (``search_result_index``) of the
  request, or of a web search (``web_search_result_location``: this API ran none, so no
  ``encrypted_index`` is its own);
- tool names and tool-use ids outside ``[A-Za-z0-9_-]``; a tool's ``input_schema`` whose
  ``type`` is not ``object``; a ``tool_use`` without a
  ``tool_result`` in the next message, or a ``tool_result`` answering no ``tool_use`` of
  the message before; a user message whose tool results do not come first; a
  ``tool_use`` or ``tool_result`` block in a request that declares no ``tools``;
- an ``output_config`` with fields besides ``effort`` and ``format``, an ``effort`` other
  than ``low``, ``medium``, ``high``, ``xhigh`` or ``max``, or a ``format`` other than
  ``{"type": "json_schema", "schema": {...}}``;
- a ``thinking`` of ``type: "disabled"`` with any other field;
  ``thinking.budget_tokens`` below 1024 or not below ``max_tokens`` (but with the
  ``interleaved-thinking-2025-05-14`` beta, under which it is the whole turn's); while
  thinking, a ``temperature`` other than 1, ``top_k``, a ``top_p`` below 0.95, or a
  ``tool_choice`` forcing a tool, or a last assistant message calling tools that does not
  start with a ``thinking`` (or ``redacted_thinking``) block; a ``thinking`` block whose
  ``signature`` is not the fake's;
- a final assistant message (a prefill) whose text ends in whitespace;
- ``cache_control`` marks Anthropic refuses (:mod:`stateway.fake_upstream.cache_marks`).
"""

from __future__ import annotations

import re
from collections.abc import Callable, Collection
from typing import Any

from stateway.fake_upstream.cache_marks import check_breakpoints
from stateway.fake_upstream.errors import invalid_request

FIELDS = frozenset(
    {
        "model",
        "messages",
        "max_tokens",
        "system",
        "stream",
        "tools",
        "tool_choice",
        "temperature",
        "top_p",
        "top_k",
        "stop_sequences",
        "metadata",
        "thinking",
        "output_config",
        "context_management",
        "service_tier",
        "container",
        "mcp_servers",
        "cache_control",
        "safeguards",
    }
)
COUNT_FIELDS = frozenset(
    {
        "model",
        "messages",
        "system",
        "tools",
        "tool_choice",
        "thinking",
        "output_config",
        "cache_control",
    }
)
INTERLEAVED_THINKING = "interleaved-thinking-2025-05-14"
"""The beta under which ``thinking.budget_tokens`` is the whole turn's, past
``max_tokens`` if need be."""
_EFFORTS = frozenset({None, "low", "medium", "high", "xhigh", "max"})
_NAME = re.compile(r"[A-Za-z0-9_-]{1,128}")
_IMAGE_TYPES = frozenset({"image/jpeg", "image/png", "image/gif", "image/webp"})
_BLOCKS = frozenset(
    {
        "text",
        "image",
        "document",
        "search_result",
        "tool_use",
        "tool_result",
        "thinking",
        "redacted_thinking",
    }
)
_CITED_BY = {
    "char_location": ("document", "document_index"),
    "page_location": ("document", "document_index"),
    "content_block_location": ("document", "document_index"),
    "search_result_location": ("search_result", "search_result_index"),
}


def check_messages_request(
    body: dict[str, Any],
    verify: Callable[[str, str], str | None],
    *,
    fields: frozenset[str] = FIELDS,
    betas: Collection[str] = (),
) -> None:
    """``betas``: the features the request's ``anthropic-beta`` header names."""
    for key in body:
        if key not in fields:
            raise invalid_request(f"{key}: Extra inputs are not permitted", key)
    if not isinstance(body.get("model"), str) or not body["model"]:
        raise invalid_request("model: Field required", "model")
    if fields is FIELDS:
        max_tokens = body.get("max_tokens")
        if not isinstance(max_tokens, int) or isinstance(max_tokens, bool) or max_tokens < 1:
            raise invalid_request("max_tokens: Field required (a positive integer)", "max_tokens")
        _check_thinking(body, max_tokens, whole_turn=INTERLEAVED_THINKING in betas)
    messages = body.get("messages")
    if not isinstance(messages, list) or not messages:
        raise invalid_request("messages: Field required (at least one message)", "messages")
    for tool in body.get("tools") or []:
        if not isinstance(tool, dict) or not _NAME.fullmatch(str(tool.get("name"))):
            raise invalid_request(f"tools: invalid tool name {tool.get('name')!r}", "tools")
        if not isinstance(tool.get("input_schema"), dict):
            raise invalid_request("tools: input_schema: Field required", "tools")
        if "type" in tool and tool["type"] != "custom":
            continue  # an Anthropic-defined tool: its schema is Anthropic's
        if tool["input_schema"].get("type") != "object":
            raise invalid_request("tools.custom.input_schema.type: Field required", "tools")
    if body.get("service_tier") not in (None, "auto", "standard_only"):
        raise invalid_request(
            "service_tier: Input should be 'auto' or 'standard_only'", "service_tier"
        )
    _check_system(body.get("system"))
    _check_stop_sequences(body.get("stop_sequences"))
    _check_output_config(body.get("output_config"))
    check_breakpoints(body)
    previous_uses: set[str] = set()
    cited = _citable(messages)
    for index, message in enumerate(messages):
        where = f"messages.{index}"
        if not isinstance(message, dict) or message.get("role") not in (
            "user",
            "assistant",
            "system",
        ):
            raise invalid_request(f"{where}.role: Input should be 'user' or 'assistant'", where)
        blocks = _blocks(message.get("content"), where)
        results = _check_blocks(blocks, where, verify, cited)
        if previous_uses - results:
            missing = ", ".join(sorted(previous_uses - results))
            raise invalid_request(
                f"{where}: tool_use ids were found without tool_result blocks immediately "
                f"after: {missing}",
                where,
            )
        if results - previous_uses:
            raise invalid_request(
                f"{where}.content: unexpected tool_use_id found in tool_result blocks: "
                f"{', '.join(sorted(results - previous_uses))}. Each tool_result block must have "
                "a corresponding tool_use block in the previous message.",
                where,
            )
        previous_uses = {str(b["id"]) for b in blocks if b.get("type") == "tool_use"}
    if previous_uses:
        raise invalid_request(
            f"messages: tool_use ids were found without tool_result blocks immediately "
            f"after: {', '.join(sorted(previous_uses))}",
            "messages",
        )
    _check_tools_declared(body, messages)
    _check_thinking_tool_turn(body, messages)
    _check_prefill(messages[-1])


def _check_tools_declared(body: dict[str, Any], messages: list[Any]) -> None:
    """A request holding tool calls or results must declare tools (Anthropic's words)."""
    if body.get("tools"):
        return
    for index, message in enumerate(messages):
        blocks = _blocks(message["content"], f"messages.{index}")
        if any(b.get("type") in ("tool_use", "tool_result") for b in blocks):
            raise invalid_request(
                "Requests which include `tool_use` or `tool_result` blocks must define tools.",
                "tools",
            )


def _check_prefill(last: dict[str, Any]) -> None:
    """A final assistant message (a prefill) whose text ends in whitespace."""
    blocks = _blocks(last["content"], "messages") if last["role"] == "assistant" else []
    text = blocks[-1].get("text") if blocks and blocks[-1].get("type") == "text" else None
    if isinstance(text, str) and text != text.rstrip():
        raise invalid_request(
            "messages: final assistant content cannot end with trailing whitespace", "messages"
        )


def _check_thinking_tool_turn(body: dict[str, Any], messages: list[Any]) -> None:
    """While thinking, the last assistant message must start with its thinking when it
    calls tools (Anthropic's wording)."""
    thinking = body.get("thinking")
    if not isinstance(thinking, dict) or thinking.get("type") == "disabled":
        return
    for index in range(len(messages) - 1, -1, -1):
        if messages[index]["role"] != "assistant":
            continue
        blocks = _blocks(messages[index]["content"], f"messages.{index}")
        if blocks and any(b.get("type") == "tool_use" for b in blocks):
            first = blocks[0].get("type")
            if first not in ("thinking", "redacted_thinking"):
                raise invalid_request(
                    f"messages.{index}.content.0.type: Expected `thinking` or "
                    f"`redacted_thinking`, but found `{first}`. When `thinking` is enabled, "
                    "a final `assistant` message must start with a thinking block",
                    f"messages.{index}",
                )
        return


def _check_output_config(config: Any) -> None:
    if config is None:
        return
    if not isinstance(config, dict) or not set(config) <= {"effort", "format"}:
        raise invalid_request("output_config: Extra inputs are not permitted", "output_config")
    if config.get("effort") not in _EFFORTS:
        raise invalid_request(
            "output_config.effort: Input should be 'low', 'medium', 'high', 'xhigh' or 'max'",
            "output_config.effort",
        )
    fmt = config.get("format")
    if fmt is not None and (
        not isinstance(fmt, dict)
        or set(fmt) != {"type", "schema"}
        or fmt["type"] != "json_schema"
        or not isinstance(fmt["schema"], dict)
    ):
        raise invalid_request(
            "output_config.format: Input should be {type: 'json_schema', schema}",
            "output_config",
        )


def _check_thinking(body: dict[str, Any], max_tokens: int, *, whole_turn: bool) -> None:
    """``whole_turn``: the budget is the turn's (interleaved thinking), not the answer's."""
    thinking = body.get("thinking")
    if not isinstance(thinking, dict):
        return
    if thinking.get("type") == "disabled":
        for extra in sorted(set(thinking) - {"type"}):
            raise invalid_request(
                f"thinking.disabled.{extra}: Extra inputs are not permitted", "thinking"
            )
        return
    if thinking.get("type") == "enabled":
        budget = thinking.get("budget_tokens")
        if not isinstance(budget, int) or budget < 1024:
            raise invalid_request("thinking.budget_tokens: must be at least 1024", "thinking")
        if budget >= max_tokens and not whole_turn:
            raise invalid_request(
                "max_tokens must be greater than thinking.budget_tokens", "thinking"
            )
    elif thinking.get("type") != "adaptive":
        raise invalid_request("thinking.type: unknown thinking type", "thinking")
    if thinking.get("display") not in (None, "summarized", "omitted"):
        raise invalid_request(
            "thinking.display: Input should be 'summarized' or 'omitted'", "thinking"
        )
    temperature = body.get("temperature")
    if temperature is not None and temperature != 1:
        raise invalid_request(
            "temperature may only be set to 1 when thinking is enabled", "temperature"
        )
    if body.get("top_k") is not None:
        raise invalid_request("top_k is not supported when thinking is enabled", "top_k")
    top_p = body.get("top_p")
    if top_p is not None and top_p < 0.95:
        raise invalid_request("top_p must be at least 0.95 when thinking is enabled", "top_p")
    choice = body.get("tool_choice")
    if isinstance(choice, dict) and choice.get("type") in ("any", "tool"):
        raise invalid_request(
            "Thinking may not be enabled when tool_choice forces tool use.", "tool_choice"
        )


def _check_system(system: Any) -> None:
    if system is None or isinstance(system, str):
        return
    for block in _blocks(system, "system"):
        if block.get("type") != "text":
            raise invalid_request("system: only text content blocks", "system")
        _check_text(block.get("text"), "system")


def _check_stop_sequences(sequences: Any) -> None:
    """Each stop sequence not empty, nor whitespace only (Anthropic's words)."""
    for sequence in sequences or ():
        if not isinstance(sequence, str) or not sequence:
            raise invalid_request(
                "stop_sequences: each stop sequence must be non-empty", "stop_sequences"
            )
        if sequence.isspace():
            raise invalid_request(
                "stop_sequences: each stop sequence must contain non-whitespace", "stop_sequences"
            )


def _check_text(text: Any, at: str) -> None:
    """A text block's text: not empty, nor whitespace only (Anthropic's two refusals)."""
    if not isinstance(text, str) or not text:
        raise invalid_request(f"{at}: text content blocks must be non-empty", at)
    if text.isspace():
        raise invalid_request(f"{at}: text content blocks must contain non-whitespace text", at)


def _blocks(content: Any, where: str) -> list[dict[str, Any]]:
    if isinstance(content, str):
        return [{"type": "text", "text": content}]
    if not isinstance(content, list) or not all(isinstance(b, dict) for b in content):
        raise invalid_request(
            f"{where}.content: Input should be a string or a list of blocks", where
        )
    return content


def _citable(messages: list[Any]) -> dict[str, int]:
    """How many documents and search results the request holds (in tool results too)."""
    found = {"document": 0, "search_result": 0}
    for message in messages:
        content = message.get("content") if isinstance(message, dict) else None
        for block in content if isinstance(content, list) else ():
            if not isinstance(block, dict):
                continue
            inner = block.get("content") if block.get("type") == "tool_result" else None
            for one in [block, *(inner if isinstance(inner, list) else ())]:
                if isinstance(one, dict) and one.get("type") in found:
                    found[one["type"]] += 1
    return found


def _check_citations(citations: Any, at: str, cited: dict[str, int]) -> None:
    if not isinstance(citations, list):
        raise invalid_request(f"{at}.citations: Input should be a valid list", at)
    for citation in citations:
        kind = citation.get("type") if isinstance(citation, dict) else None
        if kind == "web_search_result_location":
            raise invalid_request(f"{at}.citations: Invalid `encrypted_index`", at)
        if kind not in _CITED_BY:
            raise invalid_request(f"{at}.citations: unknown citation type {kind!r}", at)
        target, field = _CITED_BY[kind]
        index = citation.get(field)
        if not isinstance(index, int) or not 0 <= index < cited[target]:
            raise invalid_request(f"{at}.citations: {field} {index!r} is out of range", at)


def _check_search_result(block: dict[str, Any], at: str) -> None:
    content = block.get("content")
    if not isinstance(block.get("source"), str) or not block["source"]:
        raise invalid_request(f"{at}.source: Field required", at)
    if not isinstance(content, list) or not content:
        raise invalid_request(f"{at}.content: Field required (text blocks)", at)
    if not all(isinstance(b, dict) and b.get("type") == "text" and b.get("text") for b in content):
        raise invalid_request(f"{at}.content: only non-empty text blocks", at)


def _check_blocks(
    blocks: list[dict[str, Any]],
    where: str,
    verify: Callable[[str, str], str | None],
    cited: dict[str, int],
) -> set[str]:
    """Check one message's blocks; the tool_use ids its tool results answer (``cited``:
    how many documents and search results citations may point at)."""
    results: set[str] = set()
    seen_other = False
    for position, block in enumerate(blocks):
        at = f"{where}.content.{position}"
        kind = block.get("type")
        if kind not in _BLOCKS:
            raise invalid_request(f"{at}.type: unknown content block type {kind!r}", at)
        if kind == "text":
            _check_text(block.get("text"), at)
        if kind == "text" and "citations" in block:
            _check_citations(block["citations"], at, cited)
        if kind == "search_result":
            _check_search_result(block, at)
        if kind == "image":
            _check_image(block, at)
        if kind == "tool_use" and not _NAME.fullmatch(str(block.get("id"))):
            raise invalid_request(f"{at}.id: String should match pattern '^[a-zA-Z0-9_-]+$'", at)
        if kind == "tool_use" and not isinstance(block.get("input"), dict):
            raise invalid_request(f"{at}.input: Input should be a valid dictionary", at)
        if kind == "thinking" and not _signed(block, verify):
            raise invalid_request(f"{at}: Invalid `signature` in `thinking` block", at)
        if kind == "tool_result":
            inner = block.get("content")
            for index, one in enumerate(inner if isinstance(inner, list) else ()):
                if isinstance(one, dict) and one.get("type") == "text":
                    _check_text(one.get("text"), f"{at}.content.{index}")
            if seen_other:
                raise invalid_request(f"{at}: tool_result blocks must come first", at)
            results.add(str(block.get("tool_use_id")))
        else:
            seen_other = True
    return results


def _check_image(block: dict[str, Any], at: str) -> None:
    source = block.get("source")
    source = source if isinstance(source, dict) else {}
    if source.get("type") == "base64" and source.get("media_type") not in _IMAGE_TYPES:
        raise invalid_request(
            f"{at}.source.base64.media_type: Input should be 'image/jpeg', 'image/png', "
            "'image/gif' or 'image/webp'",
            at,
        )


def _signed(block: dict[str, Any], verify: Callable[[str, str], str | None]) -> bool:
    thinking, signature = str(block.get("thinking", "")), str(block.get("signature", ""))
    return verify(thinking, signature) is not None
