"""Where system messages go in a Chat Completions request: first, and only first.

Many open models' chat templates (Qwen, Gemma, Mistral, ... served by vLLM or llama.cpp)
refuse a system message anywhere but at the start ("System message must be at the
beginning"), and some refuse two in a row. Clients send them elsewhere: Claude Code puts a
``role: "system"`` message (``# Environment``) after the user's turn, a Responses client may
send a ``developer`` message mid-conversation. So :func:`place_system_messages`:

- joins the system messages that lead the conversation (instructions first) into one,
  their texts separated by a blank line (a lone one is left as it is, ``name`` and all;
  joined ones lose their ``name``);
- turns each later one into user text wrapped in ``<system-reminder>`` tags, as Claude Code
  itself sends reminders, added to the user message just before it, else to the next user
  message, else (between an assistant turn and the next) as a user message of its own.
  Never between an assistant's tool calls and their tool results.

The text keeps its place in the conversation, so the prefix a server caches stays the
prefix, and the result holds the same texts in the same order, in roles every template
accepts.

Stricter templates (Mistral's older ones, Llama 2's) also refuse two user messages in a
row ("roles must alternate"), which Codex sends (its instructions, its environment, the
prompt) and a Messages tool result with images becomes. For a backend configured so
(``alternate_roles``), :func:`merge_user_turns` makes each run of user messages one, its
parts in order.
"""

from __future__ import annotations

from typing import Any

Message = dict[str, Any]


def place_system_messages(messages: list[Message]) -> list[Message]:
    """``messages`` (as the Chat backend builds them: system content is a string) with one
    leading system message at most, and later system texts as user reminders (the user
    messages that take them are changed in place)."""
    lead = 0
    while lead < len(messages) and messages[lead]["role"] == "system":
        lead += 1
    placed: list[Message] = []
    if lead == 1:
        placed.append(messages[0])
    elif lead:
        texts = [m["content"] for m in messages[:lead] if m["content"]]
        placed.append({"role": "system", "content": "\n\n".join(texts)})
    waiting: list[str] = []
    for message in messages[lead:]:
        role = message["role"]
        if role == "system":
            if not message["content"]:
                continue
            reminder = f"<system-reminder>\n{message['content']}\n</system-reminder>"
            if not waiting and placed and placed[-1]["role"] == "user":
                _add_text(placed[-1], [reminder], at_end=True)
            else:
                waiting.append(reminder)
            continue
        if waiting and role == "user":
            _add_text(message, waiting, at_end=False)
            waiting = []
        elif waiting and role != "tool":
            placed.append({"role": "user", "content": "\n\n".join(waiting)})
            waiting = []
        placed.append(message)
    if waiting:
        placed.append({"role": "user", "content": "\n\n".join(waiting)})
    return placed


def merge_user_turns(messages: list[Message]) -> list[Message]:
    """``messages`` with each run of consecutive user messages made one (text content
    becomes a text part; a message's ``name`` is the first's)."""
    merged: list[Message] = []
    for message in messages:
        last = merged[-1] if merged else None
        if last is None or message["role"] != "user" or last["role"] != "user":
            merged.append(message)
            continue
        merged[-1] = {**last, "content": [*_parts(last), *_parts(message)]}
    return merged


def _parts(message: Message) -> list[Any]:
    content = message["content"]
    if isinstance(content, str):
        return [{"type": "text", "text": content}] if content else []
    return list(content or ())


def _add_text(message: Message, texts: list[str], *, at_end: bool) -> None:
    """Add ``texts`` to a user message, after or before its own content."""
    content = message["content"]
    if isinstance(content, str):
        parts = [content, *texts] if at_end else [*texts, content]
        message["content"] = "\n\n".join(part for part in parts if part)
        return
    added = [{"type": "text", "text": text} for text in texts]
    message["content"] = [*content, *added] if at_end else [*added, *content]
