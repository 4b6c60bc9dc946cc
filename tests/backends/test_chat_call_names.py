"""A streamed call's name as Chat upstreams send it: once on its first fragment (most), in
pieces over its fragments (Gemini's OpenAI-compatible endpoint, continuedev/continue#5849),
or whole on every fragment (older llama-server, ggml-org/llama.cpp#13774, some proxies).
Each reaches the core whole, on the call's opening fragment; text streams pass as they
are. Fed through the backend's own streaming loop, from a loopback server."""

from __future__ import annotations

from typing import Any

import orjson
import pytest
from aiohttp import web

from stateway.backends.chat_forwarder import OpenAIChatBackend
from stateway.backends.upstream_http import UpstreamClient
from stateway.backends.upstream_target import UpstreamTarget
from stateway.core.errors import UpstreamError
from stateway.core.inference import Delta, Finish, TextDelta, ToolCallDelta
from tests.backends.conftest import Loopback
from tests.backends.test_redaction import inference


def fragment(
    index: int, name: str | None = None, arguments: str = "", call_id: str | None = None
) -> dict[str, Any]:
    """A chunk of one call fragment (``call_id`` "" as DashScope and DeepSeek repeat it)."""
    function: dict[str, Any] = {"arguments": arguments}
    if name is not None:
        function["name"] = name
    call: dict[str, Any] = {"index": index, "type": "function", "function": function}
    if call_id is not None:
        call["id"] = call_id
    return {"choices": [{"index": 0, "delta": {"tool_calls": [call]}}]}


def words(content: str) -> dict[str, Any]:
    return {"choices": [{"index": 0, "delta": {"content": content}}]}


def finish(reason: str = "tool_calls") -> dict[str, Any]:
    return {"choices": [{"index": 0, "delta": {}, "finish_reason": reason}]}


async def streamed(loopback: Loopback, *chunks: dict[str, Any]) -> list[Delta]:
    """The deltas the backend makes of a stream of ``chunks``, then ``[DONE]``."""
    frames = [b"data: " + orjson.dumps(chunk) + b"\n\n" for chunk in chunks]
    body = b"".join(frames) + b"data: [DONE]\n\n"

    async def replays(request: web.Request) -> web.Response:
        return web.Response(body=body, content_type="text/event-stream")

    client = UpstreamClient(UpstreamTarget("up", await loopback.serve(replays)))
    backend = OpenAIChatBackend(loopback.adopt(client))
    return [delta async for delta in backend.infer(inference(stream=True))]


async def test_a_name_split_over_fragments_is_joined(loopback: Loopback) -> None:
    deltas = await streamed(
        loopback,
        fragment(0, "edit_ex", call_id="call_1"),
        fragment(0, "isting_file"),
        fragment(0, None, '{"path":'),
        fragment(0, None, '"a"}'),
        finish(),
    )
    assert deltas == [
        ToolCallDelta(0, "call_1", "edit_existing_file", '{"path":'),
        ToolCallDelta(0, None, None, '"a"}'),
        Finish("tool_calls"),
    ]


async def test_a_name_repeated_on_every_fragment_is_kept_once(loopback: Loopback) -> None:
    deltas = await streamed(
        loopback,
        fragment(0, "edit_file", call_id="call_1"),
        fragment(0, "edit_file", call_id="call_1"),
        fragment(0, "edit_file", "{}", call_id="call_1"),
        finish(),
    )
    assert deltas == [ToolCallDelta(0, "call_1", "edit_file", "{}"), Finish("tool_calls")]


async def test_a_later_piece_that_starts_with_the_name_so_far_replaces_it(
    loopback: Loopback,
) -> None:
    deltas = await streamed(
        loopback, fragment(0, "edit", call_id="c"), fragment(0, "edit_file", "{}"), finish()
    )
    assert deltas == [ToolCallDelta(0, "c", "edit_file", "{}"), Finish("tool_calls")]


async def test_a_name_sent_once_passes_as_it_came(loopback: Loopback) -> None:
    deltas = await streamed(
        loopback,
        fragment(0, "f", call_id="call_a"),
        fragment(0, None, "{}", call_id=""),  # DashScope's and DeepSeek's empty id
        finish(),
    )
    assert deltas == [
        ToolCallDelta(0, "call_a", "f", "{}"),
        Finish("tool_calls"),
    ]


async def test_a_name_given_whole_with_arguments_is_not_held(loopback: Loopback) -> None:
    deltas = await streamed(loopback, fragment(0, "f", "{}", call_id="call_a"), finish())
    assert deltas == [ToolCallDelta(0, "call_a", "f", "{}"), Finish("tool_calls")]


async def test_interleaved_calls_each_keep_their_name(loopback: Loopback) -> None:
    deltas = await streamed(
        loopback,
        fragment(0, "read_", call_id="call_a"),
        fragment(0, "file"),
        fragment(1, "write_", call_id="call_b"),
        fragment(1, "file"),
        fragment(0, None, "{}"),
        fragment(1, "write_file", "[]"),  # a repeat after the call opened: passed on
        finish(),
    )
    assert deltas == [
        ToolCallDelta(0, "call_a", "read_file", ""),
        ToolCallDelta(1, "call_b", "write_file", ""),
        ToolCallDelta(0, None, None, "{}"),
        ToolCallDelta(1, None, "write_file", "[]"),
        Finish("tool_calls"),
    ]


async def test_a_name_split_while_arguments_arrive(loopback: Loopback) -> None:
    deltas = await streamed(
        loopback,
        fragment(0, "get_", call_id="call_1"),
        fragment(0, "weather", '{"city"'),
        fragment(0, None, ':"Oslo"}'),
        finish(),
    )
    assert deltas == [
        ToolCallDelta(0, "call_1", "get_weather", '{"city"'),
        ToolCallDelta(0, None, None, ':"Oslo"}'),
        Finish("tool_calls"),
    ]


async def test_a_call_without_arguments_until_the_finish(loopback: Loopback) -> None:
    deltas = await streamed(
        loopback, fragment(0, "list_", call_id="call_1"), fragment(0, "files"), finish()
    )
    assert deltas == [ToolCallDelta(0, "call_1", "list_files", ""), Finish("tool_calls")]


async def test_a_held_call_is_released_at_the_streams_end(loopback: Loopback) -> None:
    """No finish reason, then ``[DONE]``: the call still comes, whole."""
    deltas = await streamed(loopback, words("ok"), fragment(0, "no"), fragment(0, "w"))
    assert deltas == [TextDelta("ok"), ToolCallDelta(0, None, "now", "")]


async def test_a_held_call_is_released_before_the_stream_is_cut_short(
    loopback: Loopback,
) -> None:
    frames = b"data: " + orjson.dumps(fragment(0, "no")) + b"\n\n"

    async def drops(request: web.Request) -> web.Response:
        return web.Response(body=frames, content_type="text/event-stream")

    client = UpstreamClient(UpstreamTarget("up", await loopback.serve(drops)))
    backend = OpenAIChatBackend(loopback.adopt(client))
    deltas: list[Delta] = []

    async def collect() -> None:
        async for delta in backend.infer(inference(stream=True)):
            deltas.append(delta)

    with pytest.raises(UpstreamError, match="closed the stream before finishing"):
        await collect()
    assert deltas == [ToolCallDelta(0, None, "no", "")]


async def test_text_after_a_held_call_keeps_its_place(loopback: Loopback) -> None:
    deltas = await streamed(loopback, fragment(0, "f", call_id="c"), words("after"), finish())
    assert deltas == [ToolCallDelta(0, "c", "f", ""), TextDelta("after"), Finish("tool_calls")]


async def test_a_text_stream_is_untouched(loopback: Loopback) -> None:
    deltas = await streamed(loopback, words("Hel"), words("lo"), finish("stop"))
    assert deltas == [TextDelta("Hel"), TextDelta("lo"), Finish("stop")]
