"""Edge paths clients act on, through the real server: chunked bodies past the limit, an
upstream 404, the completion time, page cursors and the parallel tool calls default."""

from __future__ import annotations

from collections.abc import AsyncIterator

import aiohttp
import openai
import orjson
import pytest
from openai import OpenAI

from tests.e2e.conftest import MAX_BODY_BYTES
from tests.e2e.test_upstream_mapping import clear, upstream_requests

MODEL = "fake-model"


async def post_chunked(gateway: str, chunks: list[bytes]) -> tuple[int, dict[str, object]]:
    """POST without ``content-length``: aiohttp sends a generator body chunked."""

    async def body() -> AsyncIterator[bytes]:
        for chunk in chunks:
            yield chunk

    async with (
        aiohttp.ClientSession() as session,
        session.post(
            f"{gateway}/v1/responses",
            data=body(),
            headers={"Content-Type": "application/json"},
        ) as response,
    ):
        assert "content-length" not in response.request_info.headers
        assert response.request_info.headers.get("Transfer-Encoding") == "chunked"
        return response.status, orjson.loads(await response.read())


def split_body(text_size: int) -> list[bytes]:
    raw = orjson.dumps({"model": MODEL, "input": "x" * text_size, "store": False})
    middle = len(raw) // 2
    return [raw[:middle], raw[middle:]]


async def test_a_chunked_body_over_the_limit_is_413(gateway: str) -> None:
    status, body = await post_chunked(gateway, split_body(MAX_BODY_BYTES))

    assert status == 413
    error = body["error"]
    assert isinstance(error, dict)
    assert error["type"] == "invalid_request_error"


async def test_a_chunked_body_under_the_limit_is_served(gateway: str) -> None:
    status, body = await post_chunked(gateway, split_body(MAX_BODY_BYTES // 2))

    assert status == 200
    assert body["status"] == "completed"


def test_an_upstream_404_is_a_404_model_not_found(client: OpenAI) -> None:
    with pytest.raises(openai.NotFoundError) as caught:
        client.responses.create(model=MODEL, input="[[error:404]]")

    assert caught.value.status_code == 404
    assert caught.value.code == "model_not_found"


def test_completed_responses_say_when_they_completed(client: OpenAI) -> None:
    created = client.responses.create(model=MODEL, input="hi")
    events = list(client.responses.create(model=MODEL, input="hi", stream=True))
    streamed = events[-1].response  # type: ignore[union-attr]

    assert events[-1].type == "response.completed"
    for response in (created, streamed):
        assert response.status == "completed"
        assert response.completed_at is not None
        assert response.created_at <= response.completed_at
        fetched = client.responses.retrieve(response.id)
        assert fetched.completed_at == response.completed_at
    first = events[0].response  # type: ignore[union-attr]
    assert first.completed_at is None  # response.created: not completed yet


def test_input_item_pages_name_their_first_and_last_items(client: OpenAI) -> None:
    response = client.responses.create(
        model=MODEL, input=[{"role": "user", "content": f"m{i}"} for i in range(4)]
    )
    for order in ("asc", "desc"):
        page = client.get(
            f"/responses/{response.id}/input_items",
            cast_to=object,
            options={"params": {"order": order, "limit": 3}},
        )
        assert isinstance(page, dict)
        ids = [item["id"] for item in page["data"]]
        assert len(ids) == 3
        assert (page["first_id"], page["last_id"]) == (ids[0], ids[-1])
        assert page["has_more"] is True


def test_parallel_tool_calls_default_to_true_in_the_echo_and_upstream(
    client: OpenAI, fake_upstream: str
) -> None:
    clear(fake_upstream)
    response = client.responses.create(
        model=MODEL,
        input="hi",
        tools=[{"type": "function", "name": "f", "parameters": {"type": "object"}, "strict": True}],
    )

    assert response.parallel_tool_calls is True
    assert client.responses.retrieve(response.id).parallel_tool_calls is True
    [sent] = upstream_requests(fake_upstream)
    assert sent["body"]["parallel_tool_calls"] is True
