"""A generation request answered: its window kept, then its script played.

A window told as vLLM tells it is kept as vLLM keeps it (:func:`check_window`), one told as
llama.cpp tells it as llama-server keeps a slot's (:func:`slot_room`); :func:`answer` then
plays the script (:mod:`~stateway.fake_upstream.script`): an error, a drop, or the planned
answer (:mod:`~stateway.fake_upstream.plan`) in the request's wire, paced and broken as its
directives ask.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterable, Iterator
from dataclasses import replace
from functools import partial
from typing import Protocol

from stateway.fake_upstream.chat import (
    ChatRequest,
    llama_cpp_error,
    llama_cpp_refusal,
    overrun,
    unanswered,
)
from stateway.fake_upstream.conversation import Conversation
from stateway.fake_upstream.delivery import (
    END,
    Frame,
    Receive,
    Send,
    drop_connection,
    send_json,
    send_stream,
)
from stateway.fake_upstream.errors import (
    UpstreamError,
    context_too_long,
    output_too_long,
    output_too_long_counted_in_part,
    scripted_error,
)
from stateway.fake_upstream.misbehaviour import (
    ending_in_error,
    failing,
    huge_plan,
    leak_error,
    leaked_key_message,
    send_huge_json,
    send_text,
)
from stateway.fake_upstream.plan import Plan, build_plan
from stateway.fake_upstream.script import Script


class WireRequest(Protocol):
    """What answering needs from a parsed generation request, whatever its wire."""

    @property
    def stream(self) -> bool: ...
    @property
    def max_tokens(self) -> int | None: ...
    @property
    def conversation(self) -> Conversation: ...
    def body(self, plan: Plan) -> bytes: ...
    def frames(self, plan: Plan) -> Iterator[Frame]: ...
    def error_frame(self, message: str, sequence: int, code: str | None = None) -> bytes: ...
    def context_error(self, window: int) -> UpstreamError: ...


def slot_room(request: WireRequest, slot: int) -> int:
    """The output tokens a slot of ``slot`` tokens has room for beside the prompt, which
    llama-server generates at most whatever ``max_tokens`` asks (and then finishes with
    ``length``); a prompt that fills the slot is refused in llama-server's words (in each
    wire's on the others)."""
    prompt = request.conversation.prompt_tokens
    if prompt >= slot:
        if isinstance(request, ChatRequest):
            raise context_too_long(prompt, slot, "llama.cpp")
        raise request.context_error(slot)
    return slot - prompt


def check_window(request: WireRequest, window: int, renderer: bool = False) -> None:
    """Refuse a prompt longer than ``window`` in the wire's words, and on the Chat wire, as
    vLLM, one that fits but not with the output tokens asked for (as its ``renderer``
    does: counted only as far as their room)."""
    prompt = request.conversation.prompt_tokens
    if prompt > window:
        raise request.context_error(window)
    asked = request.max_tokens
    if isinstance(request, ChatRequest) and asked is not None and prompt + asked > window:
        if renderer:
            raise output_too_long_counted_in_part(asked, window)
        raise output_too_long(prompt, asked, window)


async def answer(
    request: WireRequest,
    script: Script,
    key: str | None,
    receive: Receive,
    send: Send,
    room: int | None = None,
) -> None:
    """Play the script: error, drop, or the planned answer, paced by ``[[slow]]``;
    ``room``: the output tokens the window leaves, whatever ``max_tokens`` asks."""
    if script.silence_ms:
        await asyncio.sleep(script.silence_ms / 1000)
    delay = (script.slow_ms or 0) / 1000
    if delay and (script.error is not None or not request.stream):
        await asyncio.sleep(delay)
    if script.leak == "json":
        raise leak_error(key, script.error or 400)
    if script.leak == "text":
        await send_text(send, script.error or 400, leaked_key_message(key))
        return
    if script.error is not None:
        raise scripted_error(script.error)
    if script.context is not None and request.conversation.prompt_tokens > script.context:
        if script.llamacpp and isinstance(request, ChatRequest):
            if request.stream:
                await send_stream(send, receive, llama_cpp_refusal(), delay=0.0, cut=None)
                return
            raise context_too_long(request.conversation.prompt_tokens, script.context, "llama.cpp")
        raise request.context_error(script.context)
    asked = request.max_tokens
    limit = asked if room is None else min(room, asked or room)
    plan = build_plan(request.conversation, script, limit)
    if script.finish is not None and isinstance(request, ChatRequest):
        plan = replace(plan, finish_reason=script.finish)
    if script.huge is not None:
        plan = huge_plan(plan, script.huge, request.stream)
    if request.stream:
        frames: Iterable[Frame] = request.frames(plan)
        if script.leak == "stream":
            message = leaked_key_message(key)
            frames = ending_in_error(frames, lambda sent: request.error_frame(message, sent))
        if script.fail is not None:
            frames = failing(frames, script.fail, partial(_failure, request, script))
        if script.unanswered and isinstance(request, ChatRequest):
            frames = unanswered()
        if script.overrun and isinstance(request, ChatRequest):
            frames = overrun(frames)
        if script.truncate is not None:
            frames = failing(frames, script.truncate, lambda sent: ())
        late, pause = (script.late_ms or 0) / 1000, (script.pause_ms or 0) / 1000
        await send_stream(
            send, receive, frames, delay=delay, cut=script.cut, late=late, pause=pause
        )
    elif script.cut is not None:
        await drop_connection(send, receive)
    elif script.huge is not None:
        await send_huge_json(send, request.body(plan), script.huge)
    else:
        await send_json(send, 200, request.body(plan))


FAILED_MID_STREAM = "Scripted failure mid-stream: [[fail]]"


def _failure(request: WireRequest, script: Script, sent: int) -> list[Frame]:
    """The error event ending a ``[[fail]]`` stream after ``sent`` frames."""
    if script.llamacpp and isinstance(request, ChatRequest):
        return llama_cpp_error({"code": 500, "message": FAILED_MID_STREAM, "type": "server_error"})
    return [(request.error_frame(FAILED_MID_STREAM, sent, script.code), END)]
