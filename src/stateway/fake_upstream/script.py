"""Directives that script the fake model, parsed from the last user message's text.

Grammar (names are lower case, no spaces inside the brackets)::

    directive := "[[" NAME "]]" | "[[" NAME ":" ARG "]]"
    [[echo]]              reply with a transcript of the received context
    [[tail:N]]            the same, its last N lines only (a client's long system prompt
                          left out)
    [[length]]            finish with reason "length"
    [[tool:FN:ARGS]]      call function FN ([A-Za-z0-9_.-]+) with ARGS (repeatable)
    [[rounds:N]]          make the tool calls again after their results, N rounds in all
    [[then:FN:ARGS]]      call function FN with ARGS in the round after the first round's
                          results, instead of answering (repeatable: a call of a tool
                          that round's tool search loaded)
    [[interleave]]        on the Chat wire, stream the tool calls' fragments interleaved:
                          every call's opening fragment (id and name), then their argument
                          pieces by turns, each under its call's ``index`` (as some servers
                          stream parallel calls; the Responses wire ignores it)
    [[newids]]            on the Chat wire, a streamed call's argument pieces each carry an
                          id of their own, not its opening fragment's (as some servers
                          stream them: Poolside's, mlx-openai-server's before 2026-03);
                          whole answers and the other wires ignore it
    [[custom]]            on the Chat wire, answer the tool calls as OpenAI's Chat answers a
                          custom tool's: ``type: "custom"``, the raw input (ARGS' ``input``
                          string, else ARGS) under ``custom.input``, streamed or not
    [[item:JSON]]         on the Responses wire, also output the item JSON (an object) whole,
                          its ``id`` given if missing (repeatable; the Chat wire ignores it)
    [[pieces]]            on the Responses wire, stream each [[item]] that is a custom tool's
                          call as hosted streams one: added with no input yet, its input in
                          ``response.custom_tool_call_input.delta`` pieces, its ``.done``,
                          then done (without it, whole; the Chat wire ignores it)
    [[reason:TEXT]]       emit TEXT as reasoning first (repeatable, joined by a space)
    [[think]]             on the Chat wire, write the reasoning in the content instead, first,
                          between ``<think>`` and ``</think>`` (then a blank line), as a
                          server without a reasoning parser passes on what an open reasoning
                          model wrote (the other wires ignore it)
    [[hidden]]            on the Responses wire, hide the reasoning as OpenAI's reasoning
                          models do: no ``content``; its text as the ``summary`` only when
                          ``reasoning.summary`` is set, a part per paragraph (split at
                          blank lines); ``encrypted_content`` when included
    [[refuse:TEXT]]       decline with TEXT instead of answering: Chat's ``refusal``, a
                          Responses ``refusal`` part, Anthropic's ``stop_reason: "refusal"``
                          (with its ``stop_details``)
    [[stop:REASON]]       on the Messages wire, end the answer with ``stop_reason`` REASON
                          (``pause_turn``, ``model_context_window_exceeded``); the other
                          wires ignore it
    [[error:STATUS]]      fail with HTTP STATUS (400..599)
    [[context:N]]         the model's context holds N tokens (words): a longer prompt is
                          refused with 400, as vLLM (Chat wire: ``param`` ``input_tokens``)
                          and OpenAI (Responses wire: ``code`` ``context_length_exceeded``)
                          refuse it
    [[sglang]]            on the Chat wire, report usage as SGLang does: the reasoning tokens
                          beside the other counts (``usage.reasoning_tokens``), no
                          ``completion_tokens_details``; the other wires ignore it
    [[reported]]          send the refusal [[error]], [[context]] or [[leak:json]] scripts
                          with status 200, its JSON body the error in the wire's shape
                          (streamed or not: as some proxies and llama.cpp builds answer)
    [[llamacpp]]          on the Chat wire, a streamed answer's ``[[context]]`` refusal comes
                          as llama-server's builds of 2025 sent it: after a 200's headers, an
                          ``error: {...}`` line in its words, then ``data: [DONE]``; an
                          unstreamed one's as llama-server answers now: a 400 typed
                          ``exceed_context_size_error``, with ``n_prompt_tokens`` and ``n_ctx``
    [[cut:N]]             drop the connection after N streamed payload chunks (a
                          non-streamed answer: before its status line, whatever N)
    [[fail:N]]            end a streamed answer after N payload chunks (0: after the frames
                          before the first, such as Chat's role chunk) with the wire's
                          mid-stream error event instead of the rest (Chat: a data line
                          holding only ``error``, as vLLM and llama-server send one; with
                          [[llamacpp]], an ``error: {...}`` line then ``data: [DONE]``, as
                          llama-server's builds of 2025); unstreamed answers ignore it
    [[code:CODE]]         the ``code`` of [[fail]]'s error event, on the Responses and Chat
                          wires (hosted OpenAI's ``insufficient_quota``, ...; else
                          Responses' ``server_error``, Chat's none)
    [[unanswered]]        on the Chat wire, a streamed answer is ``data: [DONE]`` alone (as
                          vLLM ends one whose error came before the first token); the other
                          wires and unstreamed answers ignore it
    [[overrun]]           on the Chat wire, a streamed answer's ``data: [DONE]`` goes on with
                          another data line in its event (``data: more``), as a server
                          writing past its end; the other wires and unstreamed answers
                          ignore it
    [[truncate:N]]        end a streamed answer cleanly after N payload chunks (0: after the
                          frames before the first), without the rest: no finish, usage or
                          ``data: [DONE]`` (a proxy's timeout, a server dying between two
                          events); unstreamed answers ignore it
    [[finish:REASON]]     on the Chat wire, finish the answer with ``finish_reason`` REASON
                          (vLLM's ``abort``, of a request its engine aborted, or ``error``),
                          streamed or not; the other wires ignore it
    [[slow:MS]]           wait MS milliseconds before the first and between chunks
    [[cached:N]]          report N of the prompt's tokens (at most all) as read from the
                          prompt cache: Chat's ``prompt_tokens_details.cached_tokens``,
                          Responses' ``input_tokens_details.cached_tokens`` (both counted
                          in the prompt's tokens), Anthropic's ``cache_read_input_tokens``
                          (its ``input_tokens`` the rest)
    [[words:N]]           reply with "w1 w2 ... wN"
    [[say:TEXT]]          reply with TEXT exactly (a JSON object, for structured outputs)
    [[silence:MS]]        wait MS milliseconds before sending the response headers
    [[stall:MS]]          send the headers, then wait MS milliseconds before the body
    [[late:MS]]           stream the frames before the first payload (role chunk, item or
                          block opened) at once, then wait MS milliseconds before it: bytes
                          come, output does not (a server whose first token is late)
    [[pause:MS]]          stream the first payload, then wait MS milliseconds before the
                          next (output started, then a gap)
    [[trickle:MS]]        send the body one byte every MS milliseconds
    [[huge:N]]            reply with a text of N bytes ("xxx...", streamed in 16 KiB pieces)
    [[leak:json]]         fail with 400 (or [[error]]'s STATUS) whose JSON error message
                          echoes the bearer key
    [[leak:text]]         the same with a text/plain body
    [[leak:stream]]       stream the answer, but end it with an error event echoing the key
    [[only:MODEL]]        the misbehaviours (error, cut, fail, unanswered, overrun, truncate,
                          finish,
                          slow, silence, stall, late, pause, trickle, leak) and the context
                          limit apply only to requests for model MODEL; a request for
                          another model is answered plainly (tests of routing between
                          candidates that name different models)

A last user message that is one of the gateway's compaction prompts
(:data:`stateway.core.compaction.prompt.SUMMARY_PROMPTS`) is answered with a summary: the
``[[echo]]`` transcript of everything before it, after the line ``Summary of the
conversation:``, with each ``[[`` written ``[ [``: a summary the model is later shown (as
the last user message) quotes the script without running it again. Instructions added to
the prompt (after a blank line: Messages' autocompact ``instructions``) end the summary as
they were given, so their directives run in the answer sampled from it.

The key is echoed lower-cased and as its first 12 characters (what careless model servers
do), for tests of the gateway's scrubbing. On the Responses wire the closing events of a
``[[huge]]`` stream repeat the whole text, as that wire does.

An ARG runs up to the first ``]]``, except for ``tool`` and ``then``, whose ARGS run up to the first
``]]`` at which they parse as JSON (so nested arrays survive), falling back to the first
``]]``, and ``item``, whose JSON runs up to the first ``]]`` at which it parses as an
object. ``cut``, ``fail``, ``truncate``, ``slow``, ``words``, ``silence``, ``stall``,
``late``, ``pause``, ``trickle``, ``huge``, ``rounds``, ``context``, ``tail`` and ``cached``
take decimal integers. Anything in ``[[...]]`` that does not fit the grammar is kept as
plain text. For non-repeatable directives the last occurrence wins.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field, replace

import orjson

_OPEN = "[["
_CLOSE = "]]"
_HEAD = re.compile(r"([a-z]+)(:|\]\])")
_TOOL_NAME = re.compile(r"([A-Za-z0-9_.\-]+):")
_FLAGS = frozenset(
    {
        "echo",
        "length",
        "hidden",
        "think",
        "interleave",
        "newids",
        "custom",
        "pieces",
        "llamacpp",
        "sglang",
        "reported",
        "unanswered",
        "overrun",
    }
)
_INTEGERS = {
    "error": "error",
    "cut": "cut",
    "fail": "fail",
    "truncate": "truncate",
    "slow": "slow_ms",
    "words": "words",
    "silence": "silence_ms",
    "stall": "stall_ms",
    "late": "late_ms",
    "pause": "pause_ms",
    "trickle": "trickle_ms",
    "huge": "huge",
    "rounds": "rounds",
    "context": "context",
    "tail": "tail",
    "cached": "cached",
}
"""Directive -> the :class:`Script` field its integer sets."""
LEAKS = frozenset({"json", "text", "stream"})


@dataclass(frozen=True, slots=True)
class ToolDirective:
    """One scripted function call: the function name and its raw arguments string."""

    name: str
    arguments: str


@dataclass(slots=True)
class Script:
    """The plan a user message scripts; ``text`` is that message with directives removed."""

    text: str = ""
    echo: bool = False
    length: bool = False
    hidden: bool = False
    think: bool = False
    interleave: bool = False
    newids: bool = False
    custom: bool = False
    pieces: bool = False
    llamacpp: bool = False
    sglang: bool = False
    reported: bool = False
    unanswered: bool = False
    overrun: bool = False
    tools: list[ToolDirective] = field(default_factory=list)
    then: list[ToolDirective] = field(default_factory=list)
    items: list[dict[str, object]] = field(default_factory=list)
    reasoning: str | None = None
    refusal: str | None = None
    say: str | None = None
    stop: str | None = None
    error: int | None = None
    cut: int | None = None
    fail: int | None = None
    truncate: int | None = None
    finish: str | None = None
    code: str | None = None
    slow_ms: int | None = None
    words: int | None = None
    silence_ms: int | None = None
    stall_ms: int | None = None
    late_ms: int | None = None
    pause_ms: int | None = None
    trickle_ms: int | None = None
    huge: int | None = None
    leak: str | None = None
    rounds: int | None = None
    only: str | None = None
    context: int | None = None
    tail: int | None = None
    cached: int | None = None

    @property
    def waits(self) -> bool:
        """Whether the answer waits somewhere (a client may leave meanwhile)."""
        paced = (self.slow_ms, self.silence_ms, self.stall_ms, self.trickle_ms)
        return any(paced) or bool(self.late_ms or self.pause_ms)

    def for_model(self, model: object) -> Script:
        """The script as a request for ``model`` plays it (see ``[[only]]``)."""
        if self.only is None or model == self.only:
            return self
        return replace(
            self,
            error=None,
            cut=None,
            fail=None,
            unanswered=False,
            overrun=False,
            truncate=None,
            finish=None,
            slow_ms=None,
            silence_ms=None,
            stall_ms=None,
            late_ms=None,
            pause_ms=None,
            trickle_ms=None,
            leak=None,
            context=None,
        )


def parse_script(text: str) -> Script:
    """Parse every directive out of ``text``; unknown or malformed ones stay as text."""
    if _OPEN not in text:
        return Script(text=text.strip())
    script = Script()
    kept: list[str] = []
    pos = scan = 0
    while (start := text.find(_OPEN, scan)) >= 0:
        end = _apply(text, start, script)
        if end < 0:
            scan = start + 1
            continue
        kept.append(text[pos:start])
        pos = scan = end
    kept.append(text[pos:])
    script.text = "".join(kept).strip()
    return script


def _apply(text: str, start: int, script: Script) -> int:
    """Apply the directive at ``start`` to ``script``; return its end, or -1 if none."""
    head = _HEAD.match(text, start + len(_OPEN))
    if head is None:
        return -1
    name, sep = head.group(1), head.group(2)
    if sep == _CLOSE:
        if name not in _FLAGS:
            return -1
        setattr(script, name, True)
        return head.end()
    if name in ("tool", "then"):
        return _apply_tool(text, head.end(), script.tools if name == "tool" else script.then)
    if name == "item":
        return _apply_item(text, head.end(), script)
    close = text.find(_CLOSE, head.end())
    if close < 0:
        return -1
    arg = text[head.end() : close]
    if name == "reason":
        script.reasoning = arg if script.reasoning is None else f"{script.reasoning} {arg}"
    elif name == "refuse" and arg:
        script.refusal = arg
    elif name == "say" and arg:
        script.say = arg
    elif name == "stop" and arg:
        script.stop = arg
    elif name == "finish" and arg:
        script.finish = arg
    elif name == "code" and arg:
        script.code = arg
    elif name == "only" and arg:
        script.only = arg
    elif name == "leak" and arg in LEAKS:
        script.leak = arg
    elif name in _INTEGERS and arg.isascii() and arg.isdigit():
        value = int(arg)
        if name == "error" and not 400 <= value <= 599:
            return -1
        setattr(script, _INTEGERS[name], value)
    else:
        return -1
    return close + len(_CLOSE)


def _apply_tool(text: str, pos: int, calls: list[ToolDirective]) -> int:
    """Parse ``FN:ARGS]]`` starting at ``pos``; ARGS end at the first ``]]`` giving JSON."""
    name = _TOOL_NAME.match(text, pos)
    if name is None:
        return -1
    args_start = name.end()
    first = close = text.find(_CLOSE, args_start)
    if first < 0:
        return -1
    while close >= 0 and not _is_json(text[args_start:close]):
        close = text.find(_CLOSE, close + 1)
    if close < 0:
        close = first
    calls.append(ToolDirective(name.group(1), text[args_start:close]))
    return close + len(_CLOSE)


def _apply_item(text: str, pos: int, script: Script) -> int:
    """Parse ``JSON]]`` starting at ``pos``: the first ``]]`` that closes a JSON object."""
    close = text.find(_CLOSE, pos)
    while close >= 0:
        try:
            item = orjson.loads(text[pos:close])
        except orjson.JSONDecodeError:
            item = None
        if isinstance(item, dict):
            script.items.append(item)
            return close + len(_CLOSE)
        close = text.find(_CLOSE, close + 1)
    return -1


def _is_json(candidate: str) -> bool:
    try:
        orjson.loads(candidate)
    except orjson.JSONDecodeError:
        return False
    return True
