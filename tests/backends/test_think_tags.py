"""Reasoning between ``<think>`` tags in a Chat upstream's content (``think_tags``): split
from the text the same however the content is cut into chunks, holding back no more than
a partial tag."""

from __future__ import annotations

import itertools
from typing import Any

import orjson
import pytest
from aiohttp import web
from hypothesis import given, settings
from hypothesis import strategies as st
from pydantic import ValidationError

from stateway.app.generation import BACKEND_APIS
from stateway.backend_config import BackendConfig
from stateway.backends.think_tags import CLOSE, OPEN, TaggedReply, ThinkTags
from stateway.backends.upstream_http import UpstreamClient
from stateway.backends.upstream_target import UpstreamTarget
from stateway.core.backend import Backend, ChatForwarder
from stateway.core.generation_settings import GenerationSettings
from stateway.core.inference import (
    Delta,
    Finish,
    InferenceRequest,
    ReasoningDelta,
    TextDelta,
    ToolCallDelta,
)
from stateway.core.items import Item
from tests.backends.conftest import Loopback


def whole(content: str) -> tuple[str, str]:
    """What the content means, read whole: the reasoning and the text."""
    body = content.lstrip()
    if not body.startswith(OPEN):
        return "", content
    reasoning, closed, text = body[len(OPEN) :].partition(CLOSE)
    return reasoning, text.lstrip() if closed else ""


def whole_opened(content: str) -> tuple[str, str]:
    """What the content means, read whole, in a block the chat template opened: reasoning
    from the start (a ``<think>`` written anyway left out) up to ``</think>``."""
    body = content.lstrip()
    thought = body[len(OPEN) :] if body.startswith(OPEN) else content
    reasoning, closed, text = thought.partition(CLOSE)
    return reasoning, text.lstrip() if closed else ""


def streamed(chunks: list[str], *, opened: bool = False) -> tuple[str, str]:
    tags = ThinkTags(opened=opened)
    fed = [tags.feed(chunk) for chunk in chunks]
    reasoning, text = tags.flush()
    return "".join(r for r, _ in fed) + reasoning, "".join(t for _, t in fed) + text


_pieces = st.sampled_from(
    [OPEN, CLOSE, "<", "</", "<th", "ink>", "</thi", "nk", ">", "/", " ", "\n", "a", "é", "x y"]
)
_content = st.lists(_pieces, max_size=12).map("".join)


@st.composite
def _split(draw: st.DrawFn) -> tuple[str, list[str]]:
    """A content and a cut of it into chunks at any places (empty chunks too)."""
    content = draw(_content)
    cuts = sorted(draw(st.lists(st.integers(0, len(content)), max_size=8)))
    bounds = [0, *cuts, len(content)]
    return content, [content[a:b] for a, b in itertools.pairwise(bounds)]


@settings(max_examples=400, deadline=None)
@given(_split())
def test_any_cut_into_chunks_splits_as_the_whole(split: tuple[str, list[str]]) -> None:
    content, chunks = split
    assert streamed(chunks) == whole(content)


@settings(max_examples=400, deadline=None)
@given(_split())
def test_any_cut_splits_as_the_whole_in_a_block_the_template_opened(
    split: tuple[str, list[str]],
) -> None:
    content, chunks = split
    assert streamed(chunks, opened=True) == whole_opened(content)


def test_a_block_the_template_opened_is_reasoning_up_to_its_close() -> None:
    tags = ThinkTags(opened=True)
    assert tags.feed("\nLet me") == ("\nLet me", "")
    assert tags.feed(" see.</th") == (" see.", "")
    assert tags.feed("ink>\n\nIt is 4.") == ("", "It is 4.")
    assert tags.passing
    assert streamed(["<think>", "Hm.</think>Yes."], opened=True) == ("Hm.", "Yes.")
    assert streamed(["All thought, never closed <"], opened=True) == (
        "All thought, never closed <",
        "",
    )


@settings(max_examples=200, deadline=None)
@given(_split())
def test_text_passes_as_it_comes_once_it_is_known_to_be_text(
    split: tuple[str, list[str]],
) -> None:
    """Past the start of the text, each chunk is given back itself: nothing is held."""
    _, chunks = split
    tags = ThinkTags()
    for chunk in chunks:
        passing = tags.passing
        _, text = tags.feed(chunk)
        if passing:
            assert text is chunk


@settings(max_examples=200, deadline=None)
@given(_split())
def test_only_a_partial_tag_is_held_back(split: tuple[str, list[str]]) -> None:
    """Inside the block, what is held back is the start of ``</think>`` and no more: the
    reasoning given so far is the whole's, short of that start."""
    _, chunks = split
    tags = ThinkTags()
    given_so_far = ""
    for index, chunk in enumerate(chunks):
        reasoning, _ = tags.feed(chunk)
        given_so_far += reasoning
        written = "".join(chunks[: index + 1])
        body = written.lstrip()
        if not body.startswith(OPEN) or CLOSE in body:
            continue
        thought = body[len(OPEN) :]
        held = thought[len(given_so_far) :]
        assert thought.startswith(given_so_far)
        assert len(held) < len(CLOSE)
        assert CLOSE.startswith(held)


def test_the_tags_are_taken_out_as_they_arrive() -> None:
    tags = ThinkTags()
    assert tags.feed("\n<thi") == ("", "")
    assert tags.feed("nk>\nLet me see") == ("\nLet me see", "")
    assert tags.feed(".\n</th") == (".\n", "")
    assert tags.feed("ink>") == ("", "")
    assert tags.feed("\n\n") == ("", "")
    assert not tags.passing
    assert tags.feed("It is 4.") == ("", "It is 4.")
    assert tags.passing
    assert tags.feed(" <think>no</think>") == ("", " <think>no</think>")
    assert tags.flush() == ("", "")


def test_content_that_does_not_open_with_the_tag_is_text_as_written() -> None:
    tags = ThinkTags()
    assert tags.feed("  \n") == ("", "")
    assert tags.feed("Hi <think>") == ("", "  \nHi <think>")
    assert tags.passing
    started = ThinkTags()
    assert started.feed("<th") == ("", "")
    assert started.feed("ey") == ("", "<they")
    assert streamed(["<thi"]) == ("", "<thi")
    assert streamed([" \n "]) == ("", " \n ")
    assert streamed(["Hello"]) == ("", "Hello")


def test_a_block_never_closed_is_all_reasoning() -> None:
    assert streamed(["<think>so ", "far </thin"]) == ("so far </thin", "")
    assert streamed(["<think>"]) == ("", "")
    assert streamed(["<think>done</think>  \n"]) == ("done", "")


TOKENS: dict[str, Item] = {
    word: {"token": word, "bytes": list(word.encode()), "logprob": -0.5, "top_logprobs": []}
    for word in (OPEN, "hmm", CLOSE, "\n\n", "Hi", " there", "<", "b")
}


def text_delta(*words: str) -> TextDelta:
    return TextDelta("".join(words), [TOKENS[word] for word in words])


def test_a_replys_deltas_lose_the_tags_and_their_tokens() -> None:
    reply = TaggedReply()
    chunks: list[list[Delta]] = [
        [text_delta(OPEN)],
        [text_delta("hmm")],
        [text_delta(CLOSE, "\n\n", "Hi")],
        [text_delta(" there")],
    ]
    split = [delta for chunk in chunks for delta in reply.split(chunk)]
    assert split == [
        ReasoningDelta("hmm"),
        TextDelta("Hi", [TOKENS["Hi"]]),
        TextDelta(" there", [TOKENS[" there"]]),
    ]


def test_held_text_keeps_its_tokens() -> None:
    reply = TaggedReply()
    assert reply.split([text_delta("\n\n"), text_delta("<")]) == []
    assert reply.split([text_delta("b")]) == [
        TextDelta("\n\n<b", [TOKENS["\n\n"], TOKENS["<"], TOKENS["b"]])
    ]
    assert reply.passing


def test_what_is_held_comes_before_a_call_or_the_finish() -> None:
    """A partial tag is given up before a delta of another kind, in its place; a reasoning
    field the server sent goes on as it came, beside the content's."""
    call = ToolCallDelta(0, "c1", "f", "{}")
    reply = TaggedReply()
    assert reply.split([ReasoningDelta("field "), TextDelta("\n<th"), call]) == [
        ReasoningDelta("field "),
        TextDelta("\n<th"),
        call,
    ]
    inside = TaggedReply()
    deltas = [TextDelta("<think>plan</thi"), call, Finish("tool_calls")]
    assert inside.split(deltas) == [
        ReasoningDelta("plan"),
        ReasoningDelta("</thi"),
        call,
        Finish("tool_calls"),
    ]


CHUNKS: list[dict[str, Any]] = [
    {"role": "assistant", "content": ""},
    {"content": "<thi"},
    {"content": "nk>\nPlan"},
    {"reasoning_content": "(a field) ", "content": "ned.</th"},
    {"content": "ink>\n\n"},
    {"content": "Done."},
]


async def serve_stream(loopback: Loopback, deltas: list[dict[str, Any]]) -> str:
    async def answer(incoming: web.Request) -> web.StreamResponse:
        reply = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
        await reply.prepare(incoming)
        for delta in [*deltas, {}]:
            finish = None if delta else "stop"
            chunk = {"choices": [{"index": 0, "delta": delta, "finish_reason": finish}]}
            await reply.write(b"data: " + orjson.dumps(chunk) + b"\n\n")
        await reply.write(b"data: [DONE]\n\n")
        return reply

    return await loopback.serve(answer)


async def serve_completion(loopback: Loopback, message: dict[str, Any]) -> str:
    async def answer(incoming: web.Request) -> web.Response:
        reason = "tool_calls" if message.get("tool_calls") else "stop"
        choice = {"index": 0, "message": message, "finish_reason": reason}
        return web.json_response({"choices": [choice]})

    return await loopback.serve(answer)


async def answered(
    loopback: Loopback, url: str, *, stream: bool, **config: Any
) -> tuple[Backend, list[Delta]]:
    settings = BackendConfig(name="up", url=url, **config)
    client = loopback.adopt(UpstreamClient(UpstreamTarget("up", url)))
    backend = BACKEND_APIS["chat"](client, settings)
    user = {"type": "message", "role": "user", "content": [{"type": "input_text", "text": "q"}]}
    request = InferenceRequest("m", None, [user], GenerationSettings(), stream=stream)
    return backend, [delta async for delta in backend.infer(request)]


async def test_a_streamed_replys_tags_are_taken_out_of_its_text(loopback: Loopback) -> None:
    url = await serve_stream(loopback, CHUNKS)
    backend, deltas = await answered(loopback, url, stream=True, think_tags=True)
    assert deltas == [
        ReasoningDelta("\nPlan"),
        ReasoningDelta("(a field) "),
        ReasoningDelta("ned."),
        TextDelta("Done."),
        Finish("stop"),
    ]
    assert not isinstance(backend, ChatForwarder)  # answers relayed untouched keep tags


async def test_without_think_tags_the_content_is_the_text_as_written(loopback: Loopback) -> None:
    url = await serve_stream(loopback, CHUNKS)
    backend, deltas = await answered(loopback, url, stream=True)
    text = "".join(delta.text for delta in deltas if type(delta) is TextDelta)
    assert text == "<think>\nPlanned.</think>\n\nDone."
    assert isinstance(backend, ChatForwarder)


async def test_a_whole_replys_tags_are_taken_out_of_its_text(loopback: Loopback) -> None:
    message = {
        "role": "assistant",
        "content": "\n<think>Sum it.</think>\n\nIt is 4.",
        "reasoning_content": "(a field)",
    }
    url = await serve_completion(loopback, message)
    _, deltas = await answered(loopback, url, stream=False, think_tags=True)
    assert deltas == [
        ReasoningDelta("(a field)"),
        ReasoningDelta("Sum it."),
        TextDelta("It is 4."),
        Finish("stop"),
    ]


@pytest.mark.parametrize("stream", [False, True])
async def test_a_reply_in_a_block_the_template_opened_is_split_at_its_close(
    loopback: Loopback, stream: bool
) -> None:
    content = ["Plan", "ned.</th", "ink>\n\n", "Done."]
    if stream:
        url = await serve_stream(loopback, [{"content": piece} for piece in content])
    else:
        url = await serve_completion(loopback, {"role": "assistant", "content": "".join(content)})
    backend, deltas = await answered(loopback, url, stream=stream, think_tags="opened")
    reasoning = "".join(d.text for d in deltas if type(d) is ReasoningDelta)
    assert (reasoning, [d for d in deltas if type(d) is TextDelta]) == (
        "Planned.",
        [TextDelta("Done.")],
    )
    assert not isinstance(backend, ChatForwarder)


@pytest.mark.parametrize("stream", [False, True])
async def test_a_reply_with_tool_calls_keeps_them(loopback: Loopback, stream: bool) -> None:
    call = {"id": "c1", "type": "function", "function": {"name": "f", "arguments": "{}"}}
    content = "<think>A tool.</think>\n\n"
    if stream:
        url = await serve_stream(loopback, [{"content": content}, {"tool_calls": [call]}])
    else:
        message = {"role": "assistant", "content": content, "tool_calls": [call]}
        url = await serve_completion(loopback, message)
    _, deltas = await answered(loopback, url, stream=stream, think_tags=True)
    assert deltas[:2] == [ReasoningDelta("A tool."), ToolCallDelta(0, "c1", "f", "{}")]
    assert not any(type(delta) is TextDelta for delta in deltas)


@pytest.mark.parametrize("api", ["responses", "anthropic"])
def test_only_a_chat_backend_reads_think_tags(api: str) -> None:
    with pytest.raises(ValidationError, match="only a chat upstream's content"):
        BackendConfig(name="up", url="http://x", api=api, think_tags=True)
