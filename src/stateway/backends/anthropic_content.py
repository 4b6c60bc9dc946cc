"""Canonical items -> the ``system`` and ``messages`` of an Anthropic Messages body
(:func:`conversation`), as :mod:`.anthropic_request` puts them in it.

- ``system``: the instructions, then the system/developer messages that lead the context
  (a string when that is one plain text, else text blocks keeping ``cache_control``);
  a system message later in the context stays a ``role: "system"`` entry where it was,
  as Claude Code sends it, but for one between calls and their results, which goes after
  the results (Anthropic refuses any message between them).
- Items become blocks of alternating turns: text, ``image`` and ``document`` parts (a
  Messages client's document with its ``context``, ``citations`` and custom content as
  it sent them, images included, which are not sent again as the ``in_document`` image
  parts the other upstreams get; and its ``search_result`` block as it sent it); a text
  part's
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
- A part's ``cache_control`` (a Messages client's) marks its block, as does its
  ``prompt_cache_breakpoint`` (an OpenAI client's; :mod:`.anthropic_caching`).
- Tool names and ids are respelled into ``[A-Za-z0-9_-]`` (:mod:`.anthropic_names`).
- A base64 image's ``media_type`` is the one its bytes are
  (:mod:`.anthropic_images`). An image or file this API cannot take (by ``file_id``, or a
  file without a data URL) is a 400.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any, Final, TypeGuard

import orjson

from stateway.backends.anthropic_caching import BREAKPOINT, breakpoint_mark, request_ttl
from stateway.backends.anthropic_images import image_media_type
from stateway.backends.anthropic_names import ToolNames, safe_name
from stateway.core.errors import InvalidRequest
from stateway.core.inference import InferenceRequest
from stateway.core.items import Item
from stateway.core.nesting import nests_too_deep
from stateway.core.reasoning import thinking_of
from stateway.core.text_files import file_text
from stateway.core.tools.history import model_items

EMPTY_TURN: Final = "(no content)"
"""The text of a user turn that came empty or blank (a Chat client's ``content: ""``):
Anthropic refuses empty and blank text blocks (left out: :func:`_said`) and a turn without
blocks, and leaving the turn out would make the assistant's last message a prefill to
continue instead of a turn to answer."""
_TEXT_PARTS: Final = frozenset({"input_text", "output_text", "text", "summary_text"})
_SYSTEM_ROLES: Final = frozenset({"system", "developer"})


def conversation(
    request: InferenceRequest, names: ToolNames
) -> tuple[str | list[dict[str, Any]], list[dict[str, Any]]]:
    """The body's ``system`` and ``messages`` for the request's instructions and items, the
    text blocks' citations checked."""
    system: list[dict[str, Any]] = []
    ttl = request_ttl(request.settings)  # of the breakpoints that ask none themselves
    if _said(request.instructions):
        system.append({"type": "text", "text": request.instructions})
    turns = _Turns()
    for item in model_items(request.items, names=request.names):
        kind = item.get("type")
        if kind == "message":
            role = item.get("role")
            if role in _SYSTEM_ROLES and not turns.messages:
                system += _text_blocks(item.get("content"), ttl)
            else:
                turns.add(_role(role), _message_blocks(item, ttl))
        elif kind == "reasoning":
            turns.add("assistant", _thinking_blocks(item))
        elif kind == "function_call":
            turns.add("assistant", [_tool_use(item, names)])
        elif kind == "function_call_output":
            turns.add("user", [_tool_result(item, ttl)])
    joined, messages = _system(system), turns.done()
    _check_citations(joined, messages)
    return joined, messages


def _system(blocks: list[dict[str, Any]]) -> str | list[dict[str, Any]]:
    if len(blocks) == 1 and set(blocks[0]) == {"type", "text"}:
        return str(blocks[0]["text"])
    return blocks


class _Turns:
    """Messages being built: blocks of one role join the last message of that role. A
    system message between calls and their results (which Anthropic refuses: the
    results must be the next message) is held until the next assistant message, and
    sent right before it (or last)."""

    __slots__ = ("held", "messages")

    def __init__(self) -> None:
        self.messages: list[dict[str, Any]] = []
        self.held: list[dict[str, Any]] = []
        """System blocks held back from between calls and their results."""

    def add(self, role: str, blocks: list[dict[str, Any]]) -> None:
        if role == "system" and (self.held or self._awaiting_results()):
            self.held += blocks
            return
        if role == "assistant":
            self._release()
        self._append(role, blocks)

    def _append(self, role: str, blocks: list[dict[str, Any]]) -> None:
        last = self.messages[-1] if self.messages else None
        if last is not None and last["role"] == role:
            last["content"] += blocks
        elif blocks or role == "user":  # an empty user turn stays a turn (see done)
            self.messages.append({"role": role, "content": blocks})

    def _awaiting_results(self) -> bool:
        """Whether the last message calls tools: the next must hold their results."""
        last = self.messages[-1] if self.messages else None
        return last is not None and last["role"] == "assistant" and _calls(last)

    def _release(self) -> None:
        if self.held:
            held, self.held = self.held, []
            self._append("system", held)

    def done(self) -> list[dict[str, Any]]:
        self._release()
        for message in self.messages:
            if message["role"] == "user":  # tool results must lead a user message
                blocks = message["content"]
                ordered = [b for b in blocks if b["type"] == "tool_result"] + [
                    b for b in blocks if b["type"] != "tool_result"
                ]
                message["content"] = ordered or [{"type": "text", "text": EMPTY_TURN}]
        _trim_prefill(self.messages)
        return self.messages


def _calls(message: dict[str, Any]) -> bool:
    return any(block["type"] == "tool_use" for block in message["content"])


def _trim_prefill(messages: list[dict[str, Any]]) -> None:
    """A last assistant message is a prefill the model continues, which Anthropic refuses
    when its text ends in whitespace (an OpenAI client's answer sent back often ends with
    a newline): its last text is sent without it (never blank: see :func:`_said`)."""
    last = messages[-1]["content"] if messages and messages[-1]["role"] == "assistant" else []
    if last and last[-1]["type"] == "text":
        last[-1] = {**last[-1], "text": last[-1]["text"].rstrip()}


def _role(role: Any) -> str:
    if role in _SYSTEM_ROLES:
        return "system"
    return "assistant" if role == "assistant" else "user"


def _said(text: str | None) -> bool:
    """Whether ``text`` says anything: Anthropic refuses a text block that is empty or of
    whitespace only (``isspace`` stops at the first other character: no copy)."""
    return bool(text and not text.isspace())


def _message_blocks(item: Item, ttl: str | None) -> list[dict[str, Any]]:
    content = item.get("content")
    if isinstance(content, str):
        return [{"type": "text", "text": content}] if _said(content) else []
    return [block for part in content or () if (block := _block(part, ttl)) is not None]


def _text_blocks(content: Any, ttl: str | None) -> list[dict[str, Any]]:
    if isinstance(content, str):
        return [{"type": "text", "text": content}] if _said(content) else []
    blocks = (_block(part, ttl) for part in content or ())
    return [block for block in blocks if block is not None and block["type"] == "text"]


def _block(part: Item, ttl: str | None) -> dict[str, Any] | None:
    """The block of a content part, marked as the part is (``ttl``: the request's, for a
    breakpoint that asks none)."""
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
    elif kind == "input_image" and part.get("in_document"):
        return None  # its document's custom content holds it
    elif kind == "input_image":
        block = {"type": "image", "source": _image_source(part)}
    elif kind == "input_file":
        block = _document(part)
    else:
        return None
    if isinstance(part.get("cache_control"), dict):
        block["cache_control"] = part["cache_control"]
    elif BREAKPOINT in part and (mark := breakpoint_mark(part[BREAKPOINT], ttl)) is not None:
        block["cache_control"] = mark
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
    return {"type": "base64", "media_type": image_media_type(media_type, data), "data": data}


def _document_source(part: Item) -> dict[str, Any]:
    """A text file (:func:`~stateway.core.text_files.file_text`: Markdown, JSON, a named
    charset too) as a ``text`` source, since Anthropic's base64 documents are PDFs only;
    other data as it came, plain text that is no text file too (its bytes not UTF-8); a
    URL."""
    text = file_text(part)
    if text is not None:
        return {"type": "text", "media_type": "text/plain", "data": text}
    data = part.get("file_data")
    if isinstance(data, str) and (decoded := _data_url(data)) is not None:
        media_type, payload = decoded
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
    media_type, *parameters = head.split(";")  # RFC 2397: ;base64 ends them
    if not sep or not parameters or parameters[-1] != "base64":
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
        "input": parsed if _writable(parsed) else {"arguments": arguments},
    }


def _writable(parsed: object) -> TypeGuard[dict[str, Any]]:
    """Whether parsed arguments can go as the ``input`` object: an object no deeper than
    the request can be written (deeper ones go as their text, as arguments that are no
    object do, whether a client's history or a model's answer nested them so)."""
    return isinstance(parsed, dict) and not nests_too_deep(parsed)


def _tool_result(item: Item, ttl: str | None) -> dict[str, Any]:
    block: dict[str, Any] = {"type": "tool_result", "tool_use_id": safe_name(str(item["call_id"]))}
    output = item.get("output")
    if isinstance(output, str):
        if _said(output):
            block["content"] = output
    else:
        parts = [b for part in output or () if (b := _block(part, ttl)) is not None]
        if parts:
            block["content"] = parts
    if item.get("is_error") is True:
        block["is_error"] = True
    if isinstance(item.get("cache_control"), dict):
        block["cache_control"] = item["cache_control"]
    return block
