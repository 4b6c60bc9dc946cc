"""What the fake model answers: its chunks, tool calls, finish reason and usage.

A :class:`Plan` is computed once per request from the :class:`Conversation` and its
:class:`Script`; both wires render the same plan, streamed or not. Text and reasoning are
split into one chunk per word (whitespace kept, so chunks concatenate back to the exact
text) and tool arguments into pieces of :data:`ARGUMENT_CHUNK` characters.
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass
from typing import Any

from stateway.core.compaction.prompt import SUMMARY_PROMPTS
from stateway.fake_upstream.conversation import Conversation
from stateway.fake_upstream.script import Script

ARGUMENT_CHUNK = 8
_WORD = re.compile(r"\s*\S+\s*")


def new_id(prefix: str) -> str:
    """A fresh unique identifier such as ``call_<24 hex digits>``."""
    return prefix + os.urandom(12).hex()


def word_chunks(text: str) -> list[str]:
    """One chunk per word, surrounding whitespace attached, so ``"".join`` gives ``text``."""
    chunks = _WORD.findall(text)
    if not chunks and text:
        return [text]
    return chunks


def word_logprob(word: str, top: int) -> dict[str, Any]:
    """A word's token as both wires give it (``logprobs`` asked for): its log probability
    falls with its length, and its ``top`` alternatives (itself first) fall by 1 each."""
    logprob = -0.01 * len(word)
    alternatives = [word, *(f"{word.strip()}~{k}" for k in range(1, top))][:top]
    return {
        "token": word,
        "logprob": logprob,
        "bytes": list(word.encode()),
        "top_logprobs": [
            {"token": t, "logprob": logprob - k, "bytes": list(t.encode())}
            for k, t in enumerate(alternatives)
        ],
    }


def argument_chunks(arguments: str) -> list[str]:
    """Tool-call arguments in pieces of :data:`ARGUMENT_CHUNK` characters."""
    return [arguments[i : i + ARGUMENT_CHUNK] for i in range(0, len(arguments), ARGUMENT_CHUNK)]


@dataclass(frozen=True, slots=True)
class ToolCall:
    """A function call the fake model makes."""

    call_id: str
    name: str
    arguments: str


@dataclass(frozen=True, slots=True)
class Plan:
    """The fake model's complete answer to one request."""

    reasoning: list[str]
    text: list[str]
    tool_calls: list[ToolCall]
    finish_reason: str
    """``stop``, ``length`` or ``tool_calls`` (Chat Completions vocabulary); on the Chat
    wire, a ``[[finish]]``'s."""
    prompt_tokens: int
    items: tuple[dict[str, object], ...] = ()
    """Whole output items (``[[item]]``), rendered by the Responses wire only."""
    refusal: tuple[str, ...] = ()
    """The refusal's chunks (``[[refuse]]``), given instead of text."""
    hidden: bool = False
    """The reasoning is hidden (``[[hidden]]``; the Responses wire only)."""
    stop_reason: str | None = None
    """The Messages wire's own stop reason (``[[stop]]``), instead of ``finish_reason``'s."""
    interleave: bool = False
    """The tool calls' streamed fragments are interleaved (``[[interleave]]``; the Chat
    wire only)."""
    new_ids: bool = False
    """Each streamed argument piece of a call carries an id of its own (``[[newids]]``;
    the Chat wire only)."""
    custom_calls: bool = False
    """The tool calls are custom tools' (``[[custom]]``; the Chat wire only)."""
    item_pieces: bool = False
    """The custom tool calls among ``items`` stream their input in pieces (``[[pieces]]``;
    the Responses wire only)."""
    think_tags: bool = False
    """The reasoning goes in the content, between ``<think>`` tags (``[[think]]``; the Chat
    wire only)."""
    cached_tokens: int = 0
    """Of ``prompt_tokens``, those reported read from the prompt cache (``[[cached]]``)."""
    sglang_usage: bool = False
    """The usage reports its reasoning tokens as SGLang does (``[[sglang]]``; the Chat
    wire only)."""

    @property
    def reasoning_text(self) -> str:
        return "".join(self.reasoning)

    @property
    def content(self) -> str:
        return "".join(self.text)

    @property
    def refusal_text(self) -> str:
        return "".join(self.refusal)

    @property
    def reasoning_tokens(self) -> int:
        return len(self.reasoning)

    @property
    def completion_tokens(self) -> int:
        return len(self.reasoning) + len(self.text) + len(self.refusal) + len(self.tool_calls)


SUMMARY_HEADING = "Summary of the conversation:"
_INSTRUCTIONS = ("system: ", "developer: ", "instructions: ")


def summary_asked(text: str) -> str | None:
    """What ``text`` asks of a summary when it is one of the gateway's compaction prompts:
    the instructions added after it (a blank line between), "" for none; else None."""
    for prompt in SUMMARY_PROMPTS:
        if text == prompt:
            return ""
        if text.startswith(prompt + "\n\n"):
            return text[len(prompt) + 2 :]
    return None


def reply_text(conversation: Conversation, script: Script) -> str:
    """The reply text, by precedence: a summary (asked with the gateway's compaction
    prompt), said text, echo, words, tool results, then the greeting."""
    added = summary_asked(conversation.user_text)
    if added is not None:  # the conversation's directives quoted, not run again
        # The conversation, not the instructions, which stay in place: a summary as short
        # as a model's (Codex's system prompt would make it thousands of words).
        lines = [
            line.replace("[[", "[ [")
            for line in conversation.lines[:-1]
            if not line.startswith(_INSTRUCTIONS)
        ]
        return "\n".join([SUMMARY_HEADING, *lines, *([added] if added else [])])
    if script.say is not None:
        return script.say
    if script.echo:
        return "\n".join(conversation.lines)
    if script.tail is not None:
        return "\n".join(conversation.lines[-script.tail :] if script.tail else [])
    if script.words is not None:
        return " ".join([f"w{i}" for i in range(1, script.words + 1)])
    if conversation.tool_outputs:
        return "\n".join([f"Tool said: {output}" for output in conversation.tool_outputs])
    return f"Hello! You said: {script.text}"


def build_plan(conversation: Conversation, script: Script, max_tokens: int | None) -> Plan:
    """Decide the answer; ``max_tokens`` caps reasoning, then text, then tool calls."""
    calls: list[ToolCall] = []
    items: tuple[dict[str, object], ...] = ()
    if _calls_again(conversation, script):
        calls = [ToolCall(new_id("call_"), tool.name, tool.arguments) for tool in script.tools]
        items = tuple({"id": new_id("item_"), **item} for item in script.items)
    elif script.then and conversation.calls_since_user == len(script.tools):
        calls = [ToolCall(new_id("call_"), tool.name, tool.arguments) for tool in script.then]
    reasoning = word_chunks(script.reasoning or "")
    refusal = tuple(word_chunks(script.refusal or ""))
    answers = not (calls or items or refusal)
    text = word_chunks(reply_text(conversation, script)) if answers else []
    truncated = False
    if max_tokens is not None and len(reasoning) + len(text) + len(calls) > max_tokens:
        truncated = True
        budget = max_tokens
        if len(reasoning) > budget:
            reasoning, text, calls = _truncate(reasoning, budget), [], []
        elif len(text) > budget - len(reasoning):
            text, calls = _truncate(text, budget - len(reasoning)), []
        else:
            calls = calls[: budget - len(reasoning) - len(text)]
    if truncated or script.length:
        finish = "length"
    elif calls:
        finish = "tool_calls"
    else:
        finish = "stop"
    prompt = conversation.prompt_tokens
    return Plan(
        reasoning,
        text,
        calls,
        finish,
        prompt,
        items,
        refusal,
        script.hidden,
        stop_reason=script.stop,
        interleave=script.interleave,
        new_ids=script.newids,
        custom_calls=script.custom,
        item_pieces=script.pieces,
        think_tags=script.think,
        cached_tokens=min(script.cached or 0, prompt),
        sglang_usage=script.sglang,
    )


def _calls_again(conversation: Conversation, script: Script) -> bool:
    """Tool directives fire on the turn answering the user, and (``[[rounds:N]]``) again
    after each round of results until N rounds are done."""
    if not conversation.tool_outputs:
        return True
    done = conversation.calls_since_user // max(1, len(script.tools))
    return script.rounds is not None and done < script.rounds


def _truncate(chunks: list[str], keep: int) -> list[str]:
    kept = chunks[:keep]
    if kept:
        kept[-1] = kept[-1].rstrip()
    return kept
