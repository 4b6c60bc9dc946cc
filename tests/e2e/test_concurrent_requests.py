"""``[rate_limits] concurrent_requests`` through the real ``stateway serve`` and the
official SDKs: while a principal's one allowed stream runs, its next model request is a
429 in each frontend's shape; once the stream ends, the next one runs."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import anthropic
import openai
import pytest
from openai import AsyncOpenAI

from stateway.launch import Launched
from tests.e2e.test_durability import gateway

MODEL = "fake-model"
SLOW = "[[slow:100]] [[words:20]]"
"""A stream of some two seconds."""
REFUSAL = "Too many concurrent requests (limit 1): wait for one to end."


@pytest.fixture
def limited(fake_upstream: str, tmp_path: Path) -> Iterator[Launched]:
    database = f"sqlite:///{tmp_path / 'stateway.db'}"
    env = {"STATEWAY_CONCURRENT_REQUESTS": "1"}
    with gateway(fake_upstream, database, tmp_path / "gateway.log", env) as launched:
        yield launched


async def test_a_second_request_is_refused_while_the_first_streams_then_runs(
    limited: Launched,
) -> None:
    client = AsyncOpenAI(base_url=limited.url + "/v1", api_key="sk-test", max_retries=0)
    stream = await client.responses.create(model=MODEL, input=SLOW, stream=True)
    first = await anext(aiter(stream))
    assert first.type == "response.created"

    with pytest.raises(openai.RateLimitError) as refused:
        await client.responses.create(model=MODEL, input="two")
    error = refused.value.response.json()["error"]
    assert (error["type"], error["code"]) == ("requests", "rate_limit_exceeded")
    assert error["message"] == REFUSAL
    assert refused.value.response.headers["retry-after"] == "1"
    with (
        anthropic.Anthropic(base_url=limited.url, api_key="k", max_retries=0) as claude,
        pytest.raises(anthropic.RateLimitError) as messages_refused,
    ):
        claude.messages.create(
            model=MODEL, max_tokens=16, messages=[{"role": "user", "content": "three"}]
        )
    body = messages_refused.value.response.json()
    assert (body["type"], body["error"]["type"]) == ("error", "rate_limit_error")
    assert body["error"]["message"] == REFUSAL
    assert messages_refused.value.response.headers["retry-after"] == "1"
    assert (await client.models.list()).data, "what asks no model holds no slot"

    types = [event.type async for event in stream]
    assert types[-1] == "response.completed"
    third = await client.responses.create(model=MODEL, input="four")
    assert third.status == "completed"


async def test_a_websocket_refusal_carries_its_retry_after_as_hosted_error_frames_do(
    limited: Launched,
) -> None:
    """Over a WebSocket a 429 has no HTTP answer to carry ``Retry-After``: hosted's error
    frame names the headers in ``error.headers`` (the ``openai`` SDK's ``ResponseWsError``)
    and Codex reads them from the frame's own ``headers`` (its wrapped error event, to
    retry after them). Both held none, so neither knew when to try again."""
    client = AsyncOpenAI(base_url=limited.url + "/v1", api_key="sk-test", max_retries=0)
    async with client.responses.connect() as connection:
        await connection.response.create(model=MODEL, input=SLOW, stream_id="slow")
        assert (await connection.recv()).type == "response.created"
        await connection.response.create(model=MODEL, input="two", stream_id="refused")
        while (refused := await connection.recv()).type != "error":
            pass
    assert (refused.status, refused.stream_id) == (429, "refused")
    assert (refused.error.code, refused.error.message) == ("rate_limit_exceeded", REFUSAL)
    assert refused.error.headers == {"retry-after": "1"}
    assert refused.to_dict()["headers"] == {"retry-after": "1"}


async def test_a_websocket_continuation_refused_for_concurrency_keeps_its_parent(
    limited: Launched,
) -> None:
    """A continuation refused by the rate limits ran nothing and changed nothing, as a
    refusal by the connection's own caps: its ``store: false`` parent is kept, so the
    retry its ``Retry-After`` asks for continues the chain. Before, the refusal evicted
    the parent as a failed continuation does, and the retry was
    ``previous_response_not_found``."""
    client = AsyncOpenAI(base_url=limited.url + "/v1", api_key="sk-test", max_retries=0)
    async with client.responses.connect() as connection:
        await connection.response.create(
            model=MODEL, input="the word is kiwi", store=False, stream_id="source"
        )
        while (parent := await connection.recv()).type != "response.completed":
            pass
        await connection.response.create(model=MODEL, input=SLOW, stream_id="slow")
        assert (await connection.recv()).type == "response.created"
        continuation = {"model": MODEL, "store": False, "stream_id": "source"}
        previous = parent.response.id
        await connection.response.create(
            input="[[echo]]", previous_response_id=previous, **continuation
        )
        while (refused := await connection.recv()).type != "error":
            pass
        while (await connection.recv()).type != "response.completed":  # the slow one's end
            pass
        await connection.response.create(
            input="[[echo]]", previous_response_id=previous, **continuation
        )
        while (retried := await connection.recv()).type not in ("response.completed", "error"):
            pass
    assert (refused.status, refused.error.code) == (429, "rate_limit_exceeded")
    assert retried.type == "response.completed", retried
    assert "the word is kiwi" in retried.response.output_text
