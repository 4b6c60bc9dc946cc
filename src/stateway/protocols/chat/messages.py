"""Chat messages -> canonical items, in conversation order.

- ``system`` / ``developer``: a message item of that role (text parts as ``input_text``);
- ``user``: a ``user`` message; ``text`` parts as ``input_text``, ``image_url`` as
  ``input_image`` (its ``detail`` kept; an http(s) or data URL, as on responses, else a
  400 naming it), ``file`` as ``input_file`` (``file_data``, ``file_id``, ``filename``;
  one with neither data nor id is a 400); ``input_audio`` has no canonical form and is
  refused;
- a part's ``prompt_cache_breakpoint`` stays on it (but an assistant message's text: the
  Responses API has none on ``output_text``);
- ``assistant``: its ``reasoning_content`` (or ``reasoning``) as a reasoning item, its text
  (and ``refusal``) as an ``assistant`` message, each tool call as a ``function_call``
  (``call_id`` = the call's ``id``), a ``custom`` one as a ``custom_tool_call`` (its
  ``input``);
- ``tool``: a ``function_call_output`` (a ``custom_tool_call_output`` when it answers a
  custom call; ``call_id`` = ``tool_call_id``, its text as the
  output: one ``input_text`` part holding it when a part marks a breakpoint, the last
  one's). It must answer a call of an earlier assistant message that no other tool
  message answered: otherwise a 400 naming its ``tool_call_id``. Every call must be
  answered (a 400 naming the assistant message, as OpenAI words it), and two calls may
  not share an id.

A message's ``name`` (of ``[a-zA-Z0-9_-]``, as hosted takes it) stays on its item (a Chat
upstream gets it back). Empty text carries nothing and is left out; a message left with no
content is left out, but for a user message (``content: ""``, or only empty text parts):
hosted answers that empty turn, so it stays, with one empty text part.
"""

from __future__ import annotations

from collections.abc import Sequence

from stateway.core.errors import InvalidRequest
from stateway.core.ids import new_id
from stateway.core.items import Item
from stateway.protocols.chat.request import (
    AssistantMessage,
    AudioPart,
    FilePart,
    ImagePart,
    Message,
    RefusalPart,
    TextPart,
    ToolCall,
    ToolMessage,
    UserMessage,
    UserPart,
)
from stateway.protocols.validation import empty_array


def decode_messages(messages: list[Message]) -> list[Item]:
    items: list[Item] = []
    pending: dict[str, int | None] = {}
    """Every call's id: the index of the assistant message making it, None once a tool
    message answered it."""
    custom: set[str] = set()
    """The ids of the calls of custom tools."""
    for index, message in enumerate(messages):
        where = f"messages[{index}]"
        if message.content == [] and not isinstance(message, AssistantMessage):
            raise empty_array(f"{where}.content")
        match message:
            case AssistantMessage():
                _assistant(items, message, pending, custom, index)
            case ToolMessage():
                items.append(_tool_output(message, pending, where, message.tool_call_id in custom))
            case UserMessage():
                parts = _user_parts(message.content, where)
                _add(items, message, parts or [{"type": "input_text", "text": ""}])
            case _:
                _add(items, message, _text_parts(message.content, "input_text"))
    waiting = [at for at in pending.values() if at is not None]
    if waiting:  # as OpenAI words it, naming the first assistant message left waiting
        index = waiting[0]
        ids = ", ".join(call for call, at in pending.items() if at == index)
        param = f"messages[{index}].role"
        raise InvalidRequest(
            f"Invalid '{param}': an assistant message with 'tool_calls' must be followed by "
            "tool messages responding to each 'tool_call_id'. The following tool_call_ids "
            f"did not have response messages: {ids}",
            param=param,
            code="tool_output_missing",
        )
    return items


def _add(items: list[Item], message: Message, parts: list[Item]) -> None:
    if not parts:
        return
    item: Item = {"id": new_id("msg"), "type": "message", "role": message.role, "content": parts}
    if message.role == "assistant":
        item["status"] = "completed"
    name = getattr(message, "name", None)
    if name is not None:
        item["name"] = name
    items.append(item)


def _text_parts(content: str | Sequence[TextPart | RefusalPart] | None, kind: str) -> list[Item]:
    if content is None:
        return []
    if isinstance(content, str):
        return [{"type": kind, "text": content}] if content else []
    parts: list[Item] = []
    for part in content:
        if isinstance(part, RefusalPart):
            parts.append({"type": "refusal", "refusal": part.refusal})
        elif part.text:
            said: Item = {"type": kind, "text": part.text}
            parts.append(said if kind == "output_text" else _marked(said, part))
    return parts


def _marked(item: Item, part: TextPart | ImagePart | FilePart) -> Item:
    """``item`` with ``part``'s ``prompt_cache_breakpoint``, if it has one."""
    if part.prompt_cache_breakpoint is not None:
        item["prompt_cache_breakpoint"] = part.prompt_cache_breakpoint
    return item


def _user_parts(content: str | list[UserPart], where: str) -> list[Item]:
    if isinstance(content, str):
        return _text_parts(content, "input_text")
    parts: list[Item] = []
    for position, part in enumerate(content):
        match part:
            case TextPart(text=text):
                if text:
                    parts.append(_marked({"type": "input_text", "text": text}, part))
            case ImagePart(image_url=image):
                _check_image_url(image.url, f"{where}.content[{position}].image_url.url")
                detail = image.detail or "auto"
                image_part = {"type": "input_image", "image_url": image.url, "detail": detail}
                parts.append(_marked(image_part, part))
            case FilePart(file=file):
                if file.file_data is None and file.file_id is None:
                    param = f"{where}.content[{position}].file.file_data"
                    raise InvalidRequest(
                        f"Missing required parameter: '{param}' (or 'file_id'): a file part "
                        "holds the file's data or names its id.",
                        param=param,
                        code="missing_required_parameter",
                    )
                parts.append(_marked(_file(file.file_data, file.file_id, file.filename), part))
            case AudioPart():
                param = f"{where}.content[{position}].type"
                raise InvalidRequest(
                    f"Content part type 'input_audio' is not supported by this gateway ({param}).",
                    param=param,
                    code="unsupported_content_type",
                )
    return parts


def _check_image_url(url: str, param: str) -> None:
    """An image is an http(s) URL or a data URL, as on responses (``input_image``): a file
    id, another scheme or a bare path reaches no upstream as an image. Worded as hosted
    words a URL that is no data URL."""
    if not url.startswith(("http://", "https://", "data:")):
        raise InvalidRequest(
            f"Invalid image URL: '{param}'. Expected an http(s) URL or a base64-encoded data "
            "URL with an image MIME type (e.g. 'data:image/png;base64,aW1nIGJ5dGVzIGhlcmU='); "
            "file ids are not supported.",
            param=param,
            code="invalid_value",
        )


def _file(data: str | None, file_id: str | None, filename: str | None) -> Item:
    part: Item = {"type": "input_file"}
    for key, value in (("file_data", data), ("file_id", file_id), ("filename", filename)):
        if value is not None:
            part[key] = value
    return part


def _assistant(
    items: list[Item],
    message: AssistantMessage,
    pending: dict[str, int | None],
    custom: set[str],
    index: int,
) -> None:
    reasoning = message.reasoning_content or message.reasoning
    if reasoning:
        items.append(
            {
                "id": new_id("rs"),
                "type": "reasoning",
                "summary": [],
                "content": [{"type": "reasoning_text", "text": reasoning}],
                "status": "completed",
            }
        )
    parts = _text_parts(message.content, "output_text")
    if message.refusal:
        parts.append({"type": "refusal", "refusal": message.refusal})
    _add(items, message, parts)
    for position, call in enumerate(message.tool_calls or ()):
        if call.id in pending:
            param = f"messages[{index}].tool_calls[{position}].id"
            raise InvalidRequest(
                f"Invalid '{param}': the id '{call.id}' is already used by an earlier tool "
                "call; each tool call needs an id of its own.",
                param=param,
                code="duplicate_call_id",
            )
        pending[call.id] = index
        if isinstance(call, ToolCall):
            items.append(
                {
                    "id": new_id("fc"),
                    "type": "function_call",
                    "call_id": call.id,
                    "name": call.function.name,
                    "arguments": call.function.arguments,
                    "status": "completed",
                }
            )
            continue
        custom.add(call.id)
        items.append(
            {
                "id": new_id("ctc"),
                "type": "custom_tool_call",
                "call_id": call.id,
                "name": call.custom.name,
                "input": call.custom.input,
                "status": "completed",
            }
        )


def _tool_output(
    message: ToolMessage, pending: dict[str, int | None], where: str, custom: bool
) -> Item:
    if pending.get(message.tool_call_id) is None:
        param = f"{where}.tool_call_id"
        raise InvalidRequest(
            f"Invalid parameter: '{param}': '{message.tool_call_id}' does not answer a tool "
            "call of an earlier assistant message (each tool call is answered once).",
            param=param,
            code="tool_call_not_found",
        )
    pending[message.tool_call_id] = None
    output = _tool_text(message.content)
    if custom:  # no ``status``: hosted has none on it
        return {
            "id": new_id("ctco"),
            "type": "custom_tool_call_output",
            "call_id": message.tool_call_id,
            "output": output,
        }
    return {
        "id": new_id("fco"),
        "type": "function_call_output",
        "call_id": message.tool_call_id,
        "output": output,
        "status": "completed",
    }


def _tool_text(content: str | list[TextPart]) -> str | list[Item]:
    """A tool message's text; one part holding it when a part marks a breakpoint (the
    last one's: the text's end is the nearest a prefix can end at)."""
    if isinstance(content, str):
        return content
    text = "".join(part.text for part in content)
    marks = [part for part in content if part.prompt_cache_breakpoint is not None]
    return [_marked({"type": "input_text", "text": text}, marks[-1])] if marks else text
