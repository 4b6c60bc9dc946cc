"""Messages content -> canonical items, in conversation order.

- ``system`` (a string or text blocks) and each ``role: "system"`` message: a ``system``
  message item where it stands (its ``tool_addition`` and ``tool_removal`` blocks are
  no part of it: :mod:`.tool_changes`; the ``cache_control`` of one goes on the part
  before it);
- a user message: its text, image, document and ``search_result`` blocks as one ``user``
  message's parts (a run of them between tool results), each ``tool_result`` as a
  ``function_call_output``
  (``call_id`` = its ``tool_use_id``; ``is_error`` and ``cache_control`` kept on the
  item);
- an assistant message: runs of text as ``assistant`` messages, ``thinking`` and
  ``redacted_thinking`` as reasoning items sealed as :mod:`stateway.core.reasoning` says,
  ``tool_use`` as a ``function_call`` (``call_id`` = its ``id``, ``arguments`` = its
  ``input`` as JSON), a ``server_tool_use`` of ``web_search`` and its
  ``web_search_tool_result``, or an ``mcp_tool_use`` and its ``mcp_tool_result``, as the
  ``web_search_call`` or ``mcp_call`` it showed (:mod:`.server_tools`); a
  ``server_tool_use`` of the tool search and its ``tool_search_tool_result`` as the
  ``tool_search_call`` and ``tool_search_output`` it showed (:mod:`.tool_search`).

In a ``tool_result``, a ``tool_reference`` (a deferred tool the client's tool search loaded:
Claude Code's ToolSearch) becomes the text ``Tool loaded: NAME``, its mark kept (the tool
itself, declared with ``defer_loading``, is offered to the model like any other; beside
the tool search server tool, which holds deferred tools back, the reference loads it:
:func:`.tool_search.referenced`). A
``search_result`` (in a user message or a tool result) becomes its title, source and
text, one per line, as an ``input_text`` part that keeps the block as it came under
``search_result``: an Anthropic upstream gets the block itself (and can cite it), the
others its text.

A text block's ``citations`` (an earlier answer's, sent back) stay on its part, for an
Anthropic upstream (which gets those whose document or search result it is sent too:
:mod:`stateway.backends.anthropic_content`); the others get the text.

Images become ``input_image`` (a ``data:`` URL for base64), documents ``input_file``
(``file_data`` as a ``data:`` URL, plain text included, or ``file_url``; the title as
``filename``); a custom content document's images follow it as ``input_image`` parts of
their own, marked ``in_document`` (an Anthropic upstream gets them in the document). A
part keeps its block's ``cache_control``, and a document part its ``context`` and
``citations`` and, for custom content, its ``source`` as it came (the blocks Anthropic's
citations of it count), for an Anthropic upstream. A Chat upstream, which takes no
files, gets a plain-text document as its text (a custom one's text blocks), after its
title and context (:mod:`stateway.core.text_files`), and refuses any other
(:mod:`.media`). Empty text carries nothing and is left out. A ``tool_result`` must
answer a ``tool_use`` of an earlier assistant message that no other result answered (or,
leading a thread's new turn, a call of the thread's last response): otherwise a 400
naming its ``tool_use_id``. Every ``tool_use`` must be answered by the next turn, which
begins with the results, and ids must be unique (400s in Anthropic's words). A turn is a
run of consecutive user (or assistant) messages, as Anthropic merges them: calls split
over assistant messages and results over user messages pair up as in one message (the
items are the same).
"""

from __future__ import annotations

import base64
from collections.abc import Sequence
from itertools import islice
from typing import Any

import orjson

from stateway.core.ids import new_id
from stateway.core.items import Item
from stateway.core.reasoning import redacted_item
from stateway.protocols.messages import tool_search
from stateway.protocols.messages.blocks import (
    Block,
    DocumentBlock,
    ImageBlock,
    McpToolResultBlock,
    McpToolUseBlock,
    ResultPart,
    SearchResultBlock,
    ServerToolUseBlock,
    TextBlock,
    ThinkingBlock,
    ToolAdditionBlock,
    ToolReferenceBlock,
    ToolRemovalBlock,
    ToolResultBlock,
    ToolSearchToolResultBlock,
    ToolUseBlock,
    WebSearchToolResultBlock,
)
from stateway.protocols.messages.errors import field_error
from stateway.protocols.messages.request import MessageParam
from stateway.protocols.messages.server_tools import call_of, complete
from stateway.protocols.messages.turns import (
    check_results_first,
    continues_turn,
    thread_calls,
    turn_blocks,
    unanswered,
)


def decode_conversation(
    system: str | list[TextBlock] | None,
    messages: list[MessageParam],
    *,
    continued: bool = False,
) -> list[Item]:
    """``continued``: the new turn of a thread, whose first message may begin with the
    results of the calls the thread's last response made (the core checks them against
    it: :func:`stateway.core.context.checked_context`)."""
    items = decode_system(system)
    pending: dict[str, str | None] = thread_calls(messages) if continued else {}
    """Every ``tool_use`` id: where its message is, None once a result answered it."""
    awaited: list[str] = []
    """The ``tool_use`` ids of the assistant turn before: the next turn begins with their
    results (so no earlier call can still be waiting: each was checked the same way)."""
    asked = ""
    """Where the turn that made them ends."""
    for index, message in enumerate(messages):
        where = f"messages.{index}"
        if not continues_turn(messages, index):
            check_results_first(awaited, turn_blocks(messages, index), where, asked)
            awaited = []
        before = len(pending)
        if message.role == "assistant":
            _assistant(items, message.content, pending, where)
            awaited += list(islice(reversed(pending), len(pending) - before))[::-1]
            asked = where
        else:
            _user(items, message.role, message.content, pending, where)
    if awaited:  # as Anthropic words it, naming the message left waiting
        raise unanswered(asked, awaited)
    return items


def decode_system(system: str | list[TextBlock] | None) -> list[Item]:
    """``system`` as the one ``system`` message it becomes (none when empty)."""
    items: list[Item] = []
    if system:
        _add_message(items, "system", _parts(system))
    return items


def _user(
    items: list[Item],
    role: str,
    content: str | list[Block],
    pending: dict[str, str | None],
    where: str,
) -> None:
    if isinstance(content, str):
        _add_message(items, role, _parts(content))
        return
    run: list[Item] = []
    for position, block in enumerate(content):
        if isinstance(block, ToolResultBlock) and role == "user":
            _add_message(items, role, run)
            run = []
            items.append(_tool_output(block, pending, f"{where}.content.{position}"))
            items += tool_search.referenced(block, f"{where}.content.{position}")
        elif isinstance(block, TextBlock | ImageBlock | DocumentBlock | SearchResultBlock):
            run += _block_parts(block)
        elif isinstance(block, ToolAdditionBlock | ToolRemovalBlock) and role == "system":
            _keep_mark(run, block.cache_control)  # the change itself: .tool_changes
        else:
            raise field_error(
                f"{where}.content.{position}.type",
                f"a '{block.type}' block cannot appear in a {role} message.",
            )
    _add_message(items, role, run)


def _keep_mark(parts: list[Item], mark: dict[str, Any] | None) -> None:
    """A tool change's ``cache_control`` on the part before it in its message, which an
    Anthropic upstream is sent where the change stood (the change is not: it is folded
    into the tools offered); with no part before it in its message, it is not sent."""
    if mark is not None and parts and "cache_control" not in parts[-1]:
        parts[-1]["cache_control"] = mark


def _assistant(
    items: list[Item], content: str | list[Block], pending: dict[str, str | None], where: str
) -> None:
    if isinstance(content, str):
        _add_message(items, "assistant", _parts(content, "output_text"))
        return
    run: list[Item] = []
    server_calls: dict[str, Item] = {}
    for position, block in enumerate(content):
        if isinstance(block, TextBlock):
            if block.text:
                run.append(_carried({"type": "output_text", "text": block.text}, block))
            continue
        _add_message(items, "assistant", run)
        run = []
        if isinstance(block, ToolUseBlock):
            if block.id in pending:
                problem = "`tool_use` ids must be unique."
                raise field_error(f"{where}.content.{position}", problem, "duplicate_call_id")
            pending[block.id] = where
            items.append(_tool_call(block))
        elif isinstance(block, ThinkingBlock):
            items.append(_reasoning(block))
        elif block.type == "redacted_thinking":
            items.append(redacted_item(new_id("rs"), block.data))
        elif isinstance(block, ServerToolUseBlock) and block.name in tool_search.NAMES:
            items.append(tool_search.call_of(block, server_calls))
        elif isinstance(block, ToolSearchToolResultBlock):
            at = f"{where}.content.{position}"
            items.append(tool_search.output_of(block, at, server_calls))
        elif isinstance(block, ServerToolUseBlock | McpToolUseBlock):
            items.append(call_of(block, f"{where}.content.{position}", server_calls))
        elif isinstance(block, WebSearchToolResultBlock | McpToolResultBlock):
            complete(block, f"{where}.content.{position}", server_calls)
        else:
            raise field_error(
                f"{where}.content.{position}.type",
                f"a '{block.type}' block cannot appear in an assistant message.",
            )
    _add_message(items, "assistant", run)


def _add_message(items: list[Item], role: str, parts: list[Item]) -> None:
    if parts:
        items.append(
            {"id": new_id("msg"), "type": "message", "role": role, "content": parts}
            | ({"status": "completed"} if role == "assistant" else {})
        )


def _parts(content: str | Sequence[TextBlock], kind: str = "input_text") -> list[Item]:
    if isinstance(content, str):
        return [{"type": kind, "text": content}] if content else []
    return [_carried({"type": kind, "text": b.text}, b) for b in content if b.text]


def _block_parts(block: ResultPart) -> list[Item]:
    """The parts of one block: its own (none for empty text), then, for a document of
    custom content, its images, which an Anthropic upstream gets in the document's
    ``source`` (marked ``in_document``: not again as blocks of their own)."""
    part = _part(block)
    parts = [] if part is None else [part]
    source = block.source if isinstance(block, DocumentBlock) else None
    if source is not None and source.type == "content" and isinstance(source.content, list):
        images = [b for b in source.content if isinstance(b, ImageBlock)]
        parts += [{**_image(image), "in_document": True} for image in images]
    return parts


def _part(block: ResultPart) -> Item | None:
    if isinstance(block, TextBlock):
        return _carried({"type": "input_text", "text": block.text}, block) if block.text else None
    if isinstance(block, ToolReferenceBlock):
        return _carried({"type": "input_text", "text": f"Tool loaded: {block.tool_name}"}, block)
    if isinstance(block, SearchResultBlock):
        lines = [block.title, block.source, *(b.text for b in block.content if b.text)]
        text = "\n".join(line for line in lines if line)
        part = {
            "type": "input_text",
            "text": text,
            "search_result": block.model_dump(exclude_none=True),
        }
        return _carried(part, block)
    if isinstance(block, ImageBlock):
        return _carried(_image(block), block)
    return _carried(_document(block), block)


def _image(block: ImageBlock) -> Item:
    source = block.source
    if source.type == "base64":
        url = f"data:{source.media_type};base64,{source.data}"
    else:
        url = source.url
    return {"type": "input_image", "image_url": url, "detail": "auto"}


def _document(block: DocumentBlock) -> Item:
    source = block.source
    part: Item = {"type": "input_file"}
    if source.type == "url":
        part["file_url"] = source.url
    elif source.type == "base64":
        part["file_data"] = f"data:{source.media_type};base64,{source.data}"
    else:
        text = source.data if source.type == "text" else _joined(source.content)
        encoded = base64.b64encode(text.encode()).decode()
        part["file_data"] = f"data:text/plain;base64,{encoded}"
    if block.title:
        part["filename"] = block.title
    if source.type == "content":
        part["source"] = source.model_dump(exclude_none=True)
    if block.context is not None:
        part["context"] = block.context
    if block.citations is not None:
        part["citations"] = block.citations
    return part


def _joined(content: str | list[TextBlock | ImageBlock]) -> str:
    """A custom content document's text (its images are parts of their own)."""
    if isinstance(content, str):
        return content
    return "".join(b.text for b in content if isinstance(b, TextBlock))


def _carried(part: Item, block: ResultPart) -> Item:
    """``part`` with what its block marks for an Anthropic upstream: its ``cache_control``,
    a text's ``citations``."""
    if block.cache_control is not None:
        part["cache_control"] = block.cache_control
    if isinstance(block, TextBlock) and block.citations:
        part["citations"] = block.citations
    return part


def _tool_call(block: ToolUseBlock) -> Item:
    return {
        "id": new_id("fc"),
        "type": "function_call",
        "call_id": block.id,
        "name": block.name,
        "arguments": orjson.dumps(block.input).decode(),
        "status": "completed",
    }


def _tool_output(block: ToolResultBlock, pending: dict[str, str | None], where: str) -> Item:
    if pending.get(block.tool_use_id) is None:
        raise field_error(
            f"{where}.tool_use_id",
            f"unexpected tool_use_id '{block.tool_use_id}' found in a tool_result "
            "block: each tool_result must answer a tool_use block of an earlier assistant "
            "message, once.",
            code="tool_call_not_found",
        )
    pending[block.tool_use_id] = None
    output: str | list[Item]
    if block.content is None or isinstance(block.content, str):
        output = block.content or ""
    else:
        output = [part for b in block.content for part in _block_parts(b)]
    item: Item = {
        "id": new_id("fco"),
        "type": "function_call_output",
        "call_id": block.tool_use_id,
        "output": output,
        "status": "completed",
    }
    if block.is_error:
        item["is_error"] = True
    if block.cache_control is not None:
        item["cache_control"] = block.cache_control
    return item


def _reasoning(block: ThinkingBlock) -> Item:
    content: list[Any] = [{"type": "reasoning_text", "text": block.thinking}]
    return {
        "id": new_id("rs"),
        "type": "reasoning",
        "summary": [],
        "content": content if block.thinking else [],
        "encrypted_content": block.signature,
        "status": "completed",
    }
