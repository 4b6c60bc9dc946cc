"""Guided decoding of a forced ``custom`` tool's grammar, for Chat Completions upstreams
that constrain generation with a grammar (vLLM's structured outputs).

vLLM cannot constrain one argument of a tool call with a grammar: a named ``tool_choice``
already makes it constrain the whole call to the function's JSON Schema, and its
structured outputs apply to the message text. So a round whose ``tool_choice`` forces a
custom tool with a grammar ``format`` is sent *without* tools, with the grammar as the
constraint on the reply text, and the model is told (in the system message) that its
reply is the tool's raw input. That text then comes back as the forced tool's call, so
the client gets the ``custom_tool_call`` it asked for, with an input the grammar allowed.

Styles (``guided_decoding`` in a ``[[backends]]`` table):

- ``vllm``: ``structured_outputs: {"grammar": ...}`` (``{"regex": ...}`` for a ``regex``
  syntax), vLLM 0.10.2 and later (the only form since 0.12).
- ``vllm-legacy``: ``guided_grammar`` / ``guided_regex``, for vLLM before 0.12.

A ``lark`` grammar is passed as it is: vLLM's grammar backends take Lark (guidance) or
convert it to their EBNF (xgrammar).
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any, Final, Literal

import orjson

from stateway.core.inference import Delta, Finish, InferenceRequest, TextDelta, ToolCallDelta

GuidedDecoding = Literal["vllm", "vllm-legacy"]
_OPEN: Final = '{"input":"'
_CLOSE: Final = '"}'
"""Around the escaped reply: the arguments of the custom tool's function."""
_FIELDS: Final[dict[str, dict[str, tuple[str, str | None]]]] = {
    "vllm": {"regex": ("structured_outputs", "regex"), "": ("structured_outputs", "grammar")},
    "vllm-legacy": {"regex": ("guided_regex", None), "": ("guided_grammar", None)},
}
"""Per style and grammar syntax (``""``: any other than regex): the body field, and the
key inside it (None: the field holds the definition itself)."""


def forced_tool(request: InferenceRequest) -> str | None:
    """The model-visible name of the custom tool this round forces with a grammar."""
    choice = request.tool_choice
    if request.grammar is None or not isinstance(choice, dict):
        return None
    name = choice.get("name")
    return name if isinstance(name, str) else None


def guide(body: dict[str, Any], request: InferenceRequest, style: GuidedDecoding) -> str | None:
    """Turn ``body`` into a grammar-constrained request for the forced custom tool's input
    (in place); the tool's model-visible name, or None (body untouched) when this round
    forces no custom tool with a grammar."""
    name = forced_tool(request)
    if name is None or request.grammar is None:
        return None
    for dropped in ("tools", "tool_choice", "parallel_tool_calls", "response_format"):
        body.pop(dropped, None)
    grammar = request.grammar
    field, key = _FIELDS[style]["regex" if grammar.get("syntax") == "regex" else ""]
    definition = grammar.get("definition", "")
    body[field] = {key: definition} if key else definition
    description = next(
        (t.get("description") or "" for t in request.tools if t.get("name") == name), ""
    )
    hint = (
        f"Reply with only the raw input for the tool '{name}': your whole reply is passed "
        f"to it as it is.\n\n{description}"
    ).strip()
    messages: list[dict[str, Any]] = body["messages"]
    if messages and messages[0].get("role") == "system":
        messages[0] = {**messages[0], "content": f"{messages[0]['content']}\n\n{hint}"}
    else:
        messages.insert(0, {"role": "system", "content": hint})
    return name


async def as_tool_input(deltas: AsyncIterator[Delta], name: str) -> AsyncIterator[Delta]:
    """The reply text of a guided round, as one call of tool ``name`` whose input is that
    text (the ``input`` argument of the custom tool's function), streamed as the text
    comes: each piece escaped as it comes, the first opening the arguments, the finish
    closing them; other deltas pass. A reply that ends without a finish reason (vLLM's,
    now and then) is the call all the same."""
    begun = False
    finished = False
    async for delta in deltas:
        match delta:
            case TextDelta(text=piece):
                if piece:
                    escaped = orjson.dumps(piece).decode()[1:-1]
                    yield _piece(name, escaped, begun)
                    begun = True
            case Finish(reason=reason):
                finished = True
                yield _closing(name, begun)
                yield Finish("tool_calls" if reason == "stop" else reason)
            case _:
                yield delta
    if not finished:
        yield _closing(name, begun)
        yield Finish("tool_calls")


def _piece(name: str, escaped: str, begun: bool) -> ToolCallDelta:
    """A piece of the input, escaped: the call's first (named, opening its arguments)
    unless it has ``begun``."""
    if begun:
        return ToolCallDelta(0, None, None, escaped)
    return ToolCallDelta(0, None, name, _OPEN + escaped)


def _closing(name: str, begun: bool) -> ToolCallDelta:
    """The end of the call's arguments; all of them when no text began it."""
    if begun:
        return ToolCallDelta(0, None, None, _CLOSE)
    return ToolCallDelta(0, None, name, _OPEN + _CLOSE)
