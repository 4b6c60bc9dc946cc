"""``Idempotency-Key`` on Chat Completions and Messages end to end: the real ``stateway
serve`` and fake upstream, the official ``openai`` and ``anthropic`` SDKs sending the key.
The model is asked once per key however many retries and whenever they arrive; a whole
answer is replayed byte for byte, a stream as a stream of the same events (read by each
SDK's own stream parser); another request with the key is a 409 in the protocol's shape;
a failed request leaves nothing behind. Then two processes sharing Redis."""

from __future__ import annotations

import asyncio
import uuid
from typing import Any

import anthropic
import openai
import pytest
from anthropic import AsyncAnthropic

from tests.e2e.test_idempotency import MODEL, Pair, keyed, sdk, sent_upstream, shared

__all__ = ["shared"]  # the fixture of two processes sharing Redis

SLOW = "[[slow:20]] [[words:5]]"


def claude(url: str) -> AsyncAnthropic:
    return AsyncAnthropic(base_url=url, api_key="sk-test", max_retries=0)


def said(text: str) -> list[dict[str, str]]:
    return [{"role": "user", "content": text}]


async def test_twenty_concurrent_chat_completions_with_one_key_ask_the_model_once(
    gateway: str, fake_upstream: str
) -> None:
    client = sdk(gateway)
    marker = uuid.uuid4().hex
    create = client.chat.completions.with_raw_response.create

    raws = await asyncio.gather(
        *(
            create(model=MODEL, messages=said(f"{marker} {SLOW}"), extra_headers=keyed(marker))
            for _ in range(20)
        )
    )

    assert {raw.status_code for raw in raws} == {200}
    assert len({raw.http_response.content for raw in raws}) == 1
    assert raws[0].parse().choices[0].finish_reason == "stop"
    assert sent_upstream(fake_upstream, marker) == 1


async def test_twenty_concurrent_messages_with_one_key_ask_the_model_once(
    gateway: str, fake_upstream: str
) -> None:
    client = claude(gateway)
    marker = uuid.uuid4().hex
    create = client.messages.with_raw_response.create

    raws = await asyncio.gather(
        *(
            create(
                model=MODEL,
                max_tokens=64,
                messages=said(f"{marker} {SLOW}"),
                extra_headers=keyed(marker),
            )
            for _ in range(20)
        )
    )

    assert {raw.status_code for raw in raws} == {200}
    assert len({raw.http_response.content for raw in raws}) == 1
    assert (await raws[0].parse()).stop_reason == "end_turn"
    assert len({raw.headers["request-id"] for raw in raws}) == 20  # each answer's own
    assert sent_upstream(fake_upstream, marker) == 1


async def test_a_retried_chat_stream_gets_the_same_chunks(gateway: str, fake_upstream: str) -> None:
    client = sdk(gateway)
    marker = uuid.uuid4().hex
    text = f"{marker} [[reason:hm]] [[tool:f:{{}}]] {SLOW}"

    async def stream() -> list[dict[str, Any]]:
        chunks = await client.chat.completions.create(
            model=MODEL,
            messages=said(text),
            tools=[{"type": "function", "function": {"name": "f", "parameters": {}}}],
            stream=True,
            stream_options={"include_usage": True},
            extra_headers=keyed(marker),
        )
        return [chunk.model_dump() async for chunk in chunks]

    first, during = await asyncio.gather(stream(), stream())  # one waits for the other
    after = await stream()

    assert first == during == after
    assert first[-1]["usage"] is not None
    assert any(c["choices"] and c["choices"][0]["finish_reason"] == "tool_calls" for c in first)
    helped = keyed(marker + "h")
    finals = []
    for _ in range(2):
        async with client.chat.completions.stream(
            model=MODEL, messages=said(f"{marker} {SLOW}"), extra_headers=helped
        ) as helper:
            finals.append(await helper.get_final_completion())
    assert finals[0] == finals[1]
    assert finals[0].choices[0].message.content == "w1 w2 w3 w4 w5"
    assert sent_upstream(fake_upstream, marker) == 2


async def test_a_retried_messages_stream_gets_the_same_events(
    gateway: str, fake_upstream: str
) -> None:
    client = claude(gateway)
    marker = uuid.uuid4().hex
    asked: dict[str, Any] = {
        "model": MODEL,
        "max_tokens": 64,
        "messages": said(f"{marker} {SLOW}"),
        "extra_headers": keyed(marker),
    }

    async def stream() -> list[dict[str, Any]]:
        events = await client.messages.create(**asked, stream=True)
        return [event.model_dump() async for event in events]

    first, during = await asyncio.gather(stream(), stream())
    after = await stream()

    assert first == during == after
    assert [first[0]["type"], first[-1]["type"]] == ["message_start", "message_stop"]
    async with client.messages.stream(**asked) as helper:
        message = await helper.get_final_message()
    assert message.content[0].type == "text"
    assert message.content[0].text == "w1 w2 w3 w4 w5"
    assert sent_upstream(fake_upstream, marker) == 1


async def test_the_same_key_with_another_request_is_a_409_in_each_protocols_shape(
    gateway: str, fake_upstream: str
) -> None:
    marker = uuid.uuid4().hex
    chat, messages = sdk(gateway), claude(gateway)
    key, other = keyed(marker), keyed(marker + "m")
    await chat.chat.completions.create(model=MODEL, messages=said(marker), extra_headers=key)
    await messages.messages.create(
        model=MODEL, max_tokens=64, messages=said(marker), extra_headers=other
    )

    with pytest.raises(openai.ConflictError) as refused:
        await chat.chat.completions.create(
            model=MODEL, messages=said(marker + " again"), extra_headers=key
        )
    assert refused.value.code == "idempotency_key_reused"
    with pytest.raises(openai.ConflictError):  # a stream is another request
        await chat.chat.completions.create(
            model=MODEL, messages=said(marker), stream=True, extra_headers=key
        )
    with pytest.raises(anthropic.ConflictError) as conflict:
        await messages.messages.create(
            model=MODEL, max_tokens=64, messages=said(marker + " again"), extra_headers=other
        )
    body = conflict.value.body
    assert isinstance(body, dict)
    assert body["type"] == "error"
    assert body["error"]["type"] == "conflict_error"
    assert "idempotency key" in body["error"]["message"]
    assert sent_upstream(fake_upstream, marker) == 2


async def test_a_failed_request_leaves_nothing_behind(gateway: str, fake_upstream: str) -> None:
    marker = uuid.uuid4().hex
    chat, messages = sdk(gateway), claude(gateway)
    text = f"{marker} [[error:500]]"
    for stream in (False, True, False, True):
        with pytest.raises(openai.APIStatusError):
            await chat.chat.completions.create(
                model=MODEL, messages=said(text), stream=stream, extra_headers=keyed(marker)
            )
        with pytest.raises(anthropic.APIStatusError):
            await messages.messages.create(
                model=MODEL,
                max_tokens=64,
                messages=said(text),
                stream=stream,
                extra_headers=keyed(marker + "m"),
            )
    assert sent_upstream(fake_upstream, marker) == 8


@pytest.mark.postgres
@pytest.mark.redis
async def test_two_processes_sharing_redis_ask_the_model_once_per_key(
    shared: Pair, fake_upstream: str
) -> None:
    chats = [sdk(process.url) for process in shared]
    claudes = [claude(process.url) for process in shared]
    marker = uuid.uuid4().hex
    text = f"{marker} {SLOW}"

    chat_answers = asyncio.gather(
        *(
            chats[n % 2].chat.completions.with_raw_response.create(
                model=MODEL, messages=said(text), extra_headers=keyed(marker)
            )
            for n in range(10)
        )
    )
    message_answers = asyncio.gather(
        *(
            claudes[n % 2].messages.with_raw_response.create(
                model=MODEL, max_tokens=64, messages=said(text), extra_headers=keyed(marker + "m")
            )
            for n in range(10)
        )
    )
    for raws in await asyncio.gather(chat_answers, message_answers):
        assert {raw.status_code for raw in raws} == {200}
        assert len({raw.http_response.content for raw in raws}) == 1
    assert sent_upstream(fake_upstream, marker) == 2
