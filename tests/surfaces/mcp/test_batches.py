"""JSON-RPC batches, which MCP 2025-03-26 has a server take (a POST whose body is an
array of messages) and later versions removed: served on a 2025-03-26 session, refused
with a JSON-RPC error on any other."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import httpx2
import orjson
import pytest

from stateway.surfaces.mcp.batches import _Answer
from tests.surfaces.mcp.test_server import (
    ACCEPT,
    Served,
    answering,
    initialize,
    opened_session,
    serving,
)


def call(request_id: int | str, method: str, params: dict[str, Any] | None = None) -> Any:
    message: dict[str, Any] = {"jsonrpc": "2.0", "id": request_id, "method": method}
    if params is not None:
        message["params"] = params
    return message


@asynccontextmanager
async def session(version: str) -> AsyncIterator[tuple[Served, httpx2.AsyncClient, dict[str, str]]]:
    """A session opened at ``version``, and the headers its requests carry."""
    async with serving(answering()) as served, httpx2.AsyncClient() as http:
        yield served, http, await opened_session(http, served, version)


async def test_a_batch_of_requests_is_answered_with_their_replies_in_one_array() -> None:
    batch = [
        call(1, "ping"),
        call("two", "tools/list"),
        {"jsonrpc": "2.0", "method": "notifications/cancelled", "params": {"requestId": 99}},
        call(3, "tools/call", {"name": "get_response", "arguments": {"response_id": "resp_x"}}),
        call(4, "resources/read", {"uri": "stateway://acme/responses/resp_x"}),
    ]
    async with session("2025-03-26") as (served, http, headers):
        reply = await http.post(served.url, json=batch, headers=headers)

    assert reply.status_code == 200
    assert reply.headers["content-type"] == "application/json"
    assert reply.headers["mcp-session-id"] == headers["mcp-session-id"]
    replies = {r["id"]: r for r in reply.json()}
    assert set(replies) == {1, "two", 3, 4}
    assert replies[1]["result"] == {}
    assert "create_response" in {t["name"] for t in replies["two"]["result"]["tools"]}
    assert replies[3]["result"]["isError"] is True
    assert replies[4]["error"]["code"] == -32602
    assert served.escaped == []


async def test_a_batch_without_requests_is_accepted() -> None:
    notes = [{"jsonrpc": "2.0", "method": "notifications/cancelled", "params": {"requestId": 9}}]
    async with session("2025-03-26") as (served, http, headers):
        reply = await http.post(served.url, json=notes * 2, headers=headers)
    assert reply.status_code == 202


OPENING = "Invalid Request: a batch cannot open a session (initialize it alone first)."


@pytest.mark.parametrize(
    ("version", "batch", "message"),
    [
        (
            "2025-11-25",
            [call(1, "ping")],
            "JSON-RPC batches are MCP 2025-03-26's; this session's version has none.",
        ),
        (
            "2025-06-18",
            [call(1, "ping")],
            "JSON-RPC batches are MCP 2025-03-26's; this session's version has none.",
        ),
        ("2025-03-26", [], "Invalid Request: an empty batch."),
        (
            "2025-03-26",
            [call(1, "ping"), call(1, "tools/list")],
            "Invalid Request: a batch names a request id twice.",
        ),
        (
            "2025-03-26",
            [call(1, "ping"), 7],
            "Invalid Request: each message of a batch must be a JSON object.",
        ),
        ("2025-03-26", [call(1, "ping"), initialize("2025-03-26") | {"id": 2}], OPENING),
        (
            "2025-03-26",
            [call(i, "ping") for i in range(101)],
            "A batch holds at most 100 messages; this one holds 101.",
        ),
    ],
    ids=["2025-11-25", "2025-06-18", "empty", "twice", "no_object", "initialize", "101"],
)
async def test_a_batch_is_refused_where_the_protocol_has_none(
    version: str, batch: list[Any], message: str
) -> None:
    async with session(version) as (served, http, headers):
        reply = await http.post(served.url, content=orjson.dumps(batch), headers=headers)
        still = await http.post(served.url, json=call(5, "ping"), headers=headers)

    assert reply.status_code == 400
    assert reply.headers["content-type"] == "application/json"
    assert reply.json() == {
        "jsonrpc": "2.0",
        "id": None,
        "error": {"code": -32600, "message": message},
    }
    assert still.status_code == 200


async def test_a_batch_of_the_most_messages_is_served() -> None:
    async with session("2025-03-26") as (served, http, headers):
        batch = [call(i, "ping") for i in range(100)]
        reply = await http.post(served.url, json=batch, headers=headers)
    assert reply.status_code == 200
    assert sorted(r["id"] for r in reply.json()) == list(range(100))


async def test_a_batch_without_a_session_is_refused() -> None:
    async with session("2025-03-26") as (served, http, _):
        reply = await http.post(served.url, json=[call(1, "ping")], headers=ACCEPT)
    assert reply.status_code == 400
    assert reply.json()["error"] == {"code": -32600, "message": OPENING}


async def test_a_body_that_only_begins_as_a_batch_is_the_sdks_parse_error() -> None:
    async with session("2025-03-26") as (served, http, headers):
        cut = b' [{"jsonrpc": "2.0",'
        json = {**headers, "content-type": "application/json"}
        reply = await http.post(served.url, content=cut, headers=json)
    assert reply.status_code == 400
    assert reply.json()["error"]["code"] == -32700
    assert served.escaped == []


async def test_a_batch_opens_no_session() -> None:
    """``initialize`` must not be part of a batch (2025-03-26), and nothing else opens one."""
    async with serving(answering()) as served, httpx2.AsyncClient() as http:
        batch = [initialize("2025-03-26")]
        reply = await http.post(served.url, json=batch, headers=ACCEPT)
        assert served.surface._manager._server_instances == {}

    assert reply.status_code == 400
    assert reply.json()["error"]["code"] == -32600


async def test_a_batch_on_a_session_that_is_gone_is_not_found() -> None:
    async with session("2025-03-26") as (served, http, headers):
        assert (await http.delete(served.url, headers=headers)).status_code == 200
        reply = await http.post(served.url, json=[call(1, "ping")], headers=headers)
    assert reply.status_code == 404
    assert reply.headers["content-type"] == "application/json"
    assert reply.json()["error"]["message"] == "Session not found"


async def test_a_batch_holds_a_message_the_sdk_cannot_read_as_its_error() -> None:
    batch = [call(1, "ping"), {"jsonrpc": "2.0", "id": 2}]
    async with session("2025-03-26") as (served, http, headers):
        reply = await http.post(served.url, json=batch, headers=headers)
        unacceptable = {**headers, "accept": "text/plain"}
        refused = await http.post(served.url, json=batch, headers=unacceptable)

    assert reply.status_code == 200
    [ping, unread] = reply.json()
    assert (ping["id"], ping["result"]) == (1, {})
    assert (unread["id"], unread["error"]["code"]) == (None, -32602)
    assert refused.status_code == 406


async def test_a_batch_of_requests_alone_is_answered_with_every_reply() -> None:
    async with session("2025-03-26") as (served, http, headers):
        reply = await http.post(
            served.url, json=[call(1, "ping"), call(2, "ping")], headers=headers
        )
    assert reply.status_code == 200
    assert sorted(r["id"] for r in reply.json()) == [1, 2]


async def test_a_batch_of_messages_the_sdk_cannot_read_is_answered_with_each_error() -> None:
    """JSON-RPC 2.0 answers a batch of invalid messages with an array of their errors: a
    message's refusal is not the request's, even when every message is refused."""
    batch = [{"jsonrpc": "2.0", "id": 1}, {"jsonrpc": "2.0", "id": 2}]
    async with session("2025-03-26") as (served, http, headers):
        reply = await http.post(served.url, json=batch, headers=headers)
    assert reply.status_code == 200
    errors = reply.json()
    assert [error["error"]["code"] for error in errors] == [-32602, -32602]


async def test_an_answer_read_as_asgi_allows_it_without_headers_or_body() -> None:
    """ASGI's ``headers`` and ``body`` are optional (empty when left out)."""
    answer = _Answer()
    await answer.send({"type": "http.response.start", "status": 200})
    await answer.send({"type": "http.response.body", "more_body": True})
    await answer.send({"type": "http.response.body", "body": b'{"id": 1}'})
    assert (answer.headers, answer.body) == ([], b'{"id": 1}')
    assert answer.replies() == [{"id": 1}]
