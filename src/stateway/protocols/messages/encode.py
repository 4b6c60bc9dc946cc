"""Canonical -> Messages wire: the ``message`` object, its usage and stop reason.

Output items become content blocks: an assistant message's text parts ``text`` (with
the ``citations`` an Anthropic upstream gave them: its blocks, which it splits where the
citations change, are messages of their own, each a block again; and, when the client
declared web search, a ``web_search_result_location`` for each ``url_citation`` of a hit
of the searches shown: one block lists every hit its text names), a
reasoning item ``thinking`` (its ``encrypted_content`` as the ``signature``: the
upstream's, else the gateway's seal; its text left out when the client asked for
``display: "omitted"``) or ``redacted_thinking``, a function call ``tool_use``, a
compaction item ``compaction`` (its summary as ``content``, its seal as ``signature``:
:mod:`.compaction`). The
calls of the gateway's own tools that the client declared (web search, MCP servers, tool
search) are shown as Anthropic shows its server tools (:mod:`.server_tools`,
:mod:`.tool_search`), web searches counted in
``usage.server_tool_use.web_search_requests``; other items only the gateway acts on (the
calls of a backend's ``gateway_tools``) are not shown.

``stop_reason``: ``compaction`` when the response stopped after its compaction block,
nothing sampled after it (a compaction request's only block, an autocompact's with
``pause_after_compaction``; an answer sampled after it ends as the model ended it, even
empty, and one cut short says why it was cut); an Anthropic upstream's own as it came, with its
``stop_details``, when it ended the response (``model_context_window_exceeded``,
``pause_turn``, ``refusal``), and its ``safeguard_results`` beside it (Claude Code's auto
mode);
else ``max_tokens`` when the output was cut at the limit, or when none was asked for
(``max_tokens: 0``, a prewarm), ``refusal`` when filtered,
``pause_turn`` when the gateway's tool rounds ran out, ``stop_sequence`` when a stop
sequence ended it, ``tool_use`` when it ends in calls the client must answer, else
``end_turn``. Usage: ``input_tokens`` counts the prompt *outside* the cache, as Anthropic
does (``cache_read_input_tokens`` and ``cache_creation_input_tokens`` beside it); once the
response compacted, the top-level counts are the answer's alone and ``iterations`` gives
each sampling call's, the compaction's first (:func:`message_usage`).
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any, Final

import orjson

from stateway.core.compaction.sealed import COMPACTION
from stateway.core.compaction.view import SHOWN
from stateway.core.hidden import client_calls
from stateway.core.items import FUNCTION_CALL, MESSAGE, REASONING, Item
from stateway.core.nesting import nests_too_deep
from stateway.core.reasoning import thinking_of
from stateway.core.response import ResponseState
from stateway.core.threads import message_id
from stateway.core.usage import Iteration, Usage
from stateway.protocols.messages.context_edits import applied_edits
from stateway.protocols.messages.server_tools import SearchResults, Shown

_INCOMPLETE: Final = {
    "max_output_tokens": "max_tokens",
    "content_filter": "refusal",
    "max_rounds": "pause_turn",
}
_TEXT: Final = frozenset({"output_text", "text"})
REFUSAL_BREAK: Final = "\n\n"
"""Between a message's text and the refusal that follows it, in their one text block."""


def encode_message(state: ResponseState, earlier: Iterable[Item] = ()) -> dict[str, Any]:
    """``earlier``: the request's input (its turn's searches are cited too:
    :class:`SearchResults`)."""
    shown = Shown.of(state)
    results = SearchResults.of(state, shown, earlier)
    omitted = thinking_omitted(state)
    hidden = thinking_hidden(state)
    return {
        "id": message_id(state.id),
        "type": "message",
        "role": "assistant",
        "model": state.model,
        "content": [
            block
            for item in state.output
            if not (hidden and item.get("type") == REASONING)
            for block in content_blocks(item, shown, omitted, results)
        ],
        **stop_fields(state),
        "usage": message_usage(state, shown.searches_run(state)),
        **applied_edits(state),
    }


def stop_fields(state: ResponseState) -> dict[str, Any]:
    """``stop_reason`` and ``stop_sequence``, and ``stop_details`` and
    ``safeguard_results`` when the upstream gave them (a message's, and a stream's last
    ``message_delta``'s)."""
    fields: dict[str, Any] = {
        "stop_reason": stop_reason(state),
        "stop_sequence": state.stop_sequence,
    }
    if state.stop_details is not None and fields["stop_reason"] == state.stop_reason:
        fields["stop_details"] = state.stop_details
    if state.safeguard_results is not None:
        fields["safeguard_results"] = state.safeguard_results
    return fields


def content_blocks(
    item: Item, shown: Shown, omitted: bool, results: SearchResults | None = None
) -> list[dict[str, Any]]:
    """The content blocks of one finished output item (none for the gateway's own calls,
    but for those of tools the client declared: ``shown``); ``omitted``: thinking without
    its text; ``results``: the hits of the searches shown, which the text may cite."""
    kind = item.get("type")
    if kind == MESSAGE:  # one text block, as streamed: its text, then its refusal
        parts = [p for p in item.get("content") or () if isinstance(p, dict)]
        text = "".join(p.get("text") or "" for p in parts if p.get("type") in _TEXT)
        refusal = "".join(p.get("refusal") or "" for p in parts if p.get("type") == "refusal")
        if text and refusal:
            refusal = REFUSAL_BREAK + refusal
        block: dict[str, Any] = {"type": "text", "text": text + refusal}
        cited = [c for p in parts if p.get("type") in _TEXT for c in citations(p, results)]
        if cited:
            block["citations"] = cited
        return [block]
    if kind == REASONING:
        return [thinking_block(item, omitted)]
    if kind == FUNCTION_CALL:
        cut = item.get("status") == "incomplete"
        return [{**tool_use_start(item), "input": tool_input(item.get("arguments") or "", cut)}]
    if kind == COMPACTION:
        return [compaction_block(item)]
    if shown.shows(item):
        return shown.blocks(item)
    return []


HIDDEN: Final = "hidden"
"""``reasoning_display`` of a request that did not enable thinking: no thinking blocks,
as Anthropic answers it (a model that reasons anyway is not the client's concern)."""


def thinking_hidden(state: ResponseState) -> bool:
    """Whether the client did not enable thinking: no thinking blocks."""
    return state.settings.reasoning_display == HIDDEN


def thinking_omitted(state: ResponseState) -> bool:
    """Whether the client asked for thinking without its text (``display: "omitted"``)."""
    return state.settings.reasoning_display == "omitted"


def citations(part: Item, results: SearchResults | None = None) -> list[Any]:
    """A text part's citations: as an Anthropic upstream gave them, then those of the
    ``results`` of the searches shown that it names."""
    given = part.get("citations")
    cited: list[Any] = given if isinstance(given, list) else []
    if results is None:
        return cited
    return [*cited, *results.citations(part)]


def thinking_block(item: Item, omitted: bool) -> dict[str, Any]:
    thinking = thinking_of(item)
    if thinking.redacted:
        return {"type": "redacted_thinking", "data": thinking.seal}
    text = "" if omitted else thinking.text
    return {"type": "thinking", "thinking": text, "signature": thinking.seal or ""}


def compaction_block(item: Item, content: bool = True) -> dict[str, Any]:
    """A compaction item as its block: the summary shown as ``content`` (None when not
    ``content``: a stream's start, the summary following as its delta) and its seal as the
    ``signature``, which a later request sends back with it (no ``encrypted_content`` or
    ``tool_changes``: the gateway computes neither)."""
    summary = item.get(SHOWN) if content else None
    return {"type": COMPACTION, "content": summary, "signature": item.get("encrypted_content")}


def tool_use_start(item: Item) -> dict[str, Any]:
    return {"type": "tool_use", "id": item.get("call_id"), "name": item.get("name"), "input": {}}


def tool_input(arguments: str, cut: bool = False) -> dict[str, Any]:
    """A call's arguments as the ``input`` object (arguments that are no JSON object, or
    one nested deeper than can be written again, are kept under ``arguments``, as the
    Anthropic backend sends them). A call ``cut`` short
    (out of tokens) whose arguments are unfinished has an empty input, as a streaming
    client's SDK makes of the fragment it was sent."""
    try:
        parsed = orjson.loads(arguments) if arguments else {}
    except orjson.JSONDecodeError:
        parsed = None
    if isinstance(parsed, dict) and not nests_too_deep(parsed):
        return parsed
    return {} if cut else {"arguments": arguments}


def stop_reason(state: ResponseState) -> str:
    if state.settings.max_output_tokens == 0:  # a prewarm: at its limit before it began
        return "max_tokens"
    if state.status == "incomplete":  # even right after a compaction: no pause, a cut
        if state.stop_reason is not None:  # an Anthropic upstream's, which ended it
            return state.stop_reason
        return _INCOMPLETE.get(state.incomplete_reason or "", "max_tokens")
    if state.output and state.output[-1].get("type") == COMPACTION and not _sampled(state):
        return "compaction"  # stopped after its block: nothing was sampled after it
    if state.stop_sequence is not None:
        return "stop_sequence"
    if any(_refused(item) for item in state.output):
        return "refusal"
    if client_calls(state.output):
        return "tool_use"
    return "end_turn"


def _sampled(state: ResponseState) -> bool:
    """Whether the model was asked for an answer (after any compaction)."""
    return any(iteration.kind == "message" for iteration in state.iterations)


def _refused(item: Item) -> bool:
    """Whether ``item`` is a message in which the model declined (a ``refusal`` part)."""
    if item.get("type") != MESSAGE:
        return False
    parts = item.get("content") or ()
    return any(isinstance(part, dict) and part.get("type") == "refusal" for part in parts)


def encode_usage(usage: Usage, web_searches: int = 0) -> dict[str, Any]:
    uncached = usage.input_tokens - usage.cached_tokens - usage.cache_write_tokens
    wire: dict[str, Any] = {
        "input_tokens": max(0, uncached),
        "output_tokens": usage.output_tokens,
        "cache_read_input_tokens": usage.cached_tokens,
        "cache_creation_input_tokens": usage.cache_write_tokens,
    }
    if usage.reasoning_tokens:
        wire["output_tokens_details"] = {"thinking_tokens": usage.reasoning_tokens}
    if web_searches:
        wire["server_tool_use"] = {"web_search_requests": web_searches, "web_fetch_requests": 0}
    return wire


def message_usage(state: ResponseState, web_searches: int = 0) -> dict[str, Any]:
    """A message's ``usage`` (a stream's last ``message_delta``'s). Once the response
    compacted, as Anthropic counts it: the top-level counts are the answer's (its
    ``message`` iterations'), not the compaction's, and ``iterations`` lists every
    sampling call with its own, the compaction's first."""
    usage = state.usage or Usage()
    compactions = [i.usage for i in state.iterations if i.kind == COMPACTION]
    if not compactions:
        return encode_usage(usage, web_searches)
    spent = Usage()
    for compaction in compactions:
        spent.add(compaction)
    wire = encode_usage(usage.since(spent), web_searches)
    wire["iterations"] = [_iteration(i) for i in state.iterations]
    return wire


def _iteration(iteration: Iteration) -> dict[str, Any]:
    """One entry of ``usage.iterations`` (the SDK's ``BetaCompactionIterationUsage`` or
    ``BetaMessageIterationUsage``)."""
    counts = encode_usage(iteration.usage)
    return {"type": iteration.kind, **{key: counts[key] for key in _ITERATION_COUNTS}}


_ITERATION_COUNTS: Final = (
    "input_tokens",
    "output_tokens",
    "cache_read_input_tokens",
    "cache_creation_input_tokens",
)
