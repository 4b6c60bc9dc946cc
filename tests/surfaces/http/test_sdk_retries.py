"""Errors as the official SDKs retry them, in process: each SDK with its default
``max_retries`` (2), the requests the gateway saw counted. An answer the same request
meets again (a key used with another request, the gateway's credentials refused by its
model server, a quota used up) carries ``x-should-retry: false`` and is sent once; a
transient one is retried, after the ``Retry-After`` it carries."""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from typing import Any

import anthropic
import httpx2
import openai
import pytest
from starlette.applications import Starlette

from stateway.backends.upstream_status import classify_status
from stateway.coordination.redis import RedisCommandResults, connect
from stateway.core.errors import (
    GatewayError,
    ServerRestarted,
    ServerShuttingDown,
    StorageError,
    StorageFull,
    StorageReadOnly,
    UpstreamError,
    UpstreamResponseTooLarge,
)
from stateway.core.generation_settings import GenerationSettings
from stateway.core.inference import Delta, Finish, TextDelta
from stateway.core.response import ResponseState
from stateway.surfaces.http.run_answers import failure_after_output
from tests.core.fakes import ScriptedBackend
from tests.surfaces.http import test_chat, test_idempotency, test_messages

OK: list[Delta | GatewayError] = [TextDelta("ok"), Finish("stop")]


class Sent:
    """The requests a client sent, and the waits its SDK chose before each retry (not
    slept: a test waits for nothing)."""

    def __init__(self) -> None:
        self.paths: list[str] = []
        self.waits: list[float] = []

    async def saw(self, request: httpx2.Request) -> None:
        self.paths.append(request.url.path)

    def waited(self, choose: Callable[..., float]) -> Callable[..., float]:
        def chosen(*args: Any, **kwargs: Any) -> float:
            self.waits.append(choose(*args, **kwargs))
            return 0.0

        return chosen


@asynccontextmanager
async def http_client(app: Starlette, sent: Sent) -> AsyncIterator[httpx2.AsyncClient]:
    transport = httpx2.ASGITransport(app=app)
    hooks = {"request": [sent.saw]}
    async with httpx2.AsyncClient(transport=transport, event_hooks=hooks) as http:
        yield http


@asynccontextmanager
async def openai_client(app: Starlette, sent: Sent) -> AsyncIterator[openai.AsyncOpenAI]:
    async with (
        http_client(app, sent) as http,
        openai.AsyncOpenAI(api_key="k", base_url="http://localhost/v1", http_client=http) as sdk,
    ):
        sdk._calculate_retry_timeout = sent.waited(sdk._calculate_retry_timeout)  # type: ignore[method-assign]
        yield sdk


@asynccontextmanager
async def anthropic_client(app: Starlette, sent: Sent) -> AsyncIterator[anthropic.AsyncAnthropic]:
    async with (
        http_client(app, sent) as http,
        anthropic.AsyncAnthropic(api_key="k", base_url="http://localhost", http_client=http) as sdk,
    ):
        sdk._calculate_retry_timeout = sent.waited(sdk._calculate_retry_timeout)  # type: ignore[method-assign]
        yield sdk


def upstream(status: int, code: str | None = None, retry_after: str | None = None) -> GatewayError:
    """What a backend raises for its model server's ``status`` (and structured ``code``)."""
    headers = {"Retry-After": retry_after} if retry_after else None
    return classify_status(status, "refused", code, "up", headers)


async def test_a_key_used_with_another_request_is_refused_once() -> None:
    """409 ``idempotency_key_reused`` never turns into a success: without
    ``x-should-retry: false`` the SDK would send it three times (it retries any 409)."""
    sent = Sent()
    app = test_idempotency.build(ScriptedBackend(OK))
    async with openai_client(app, sent) as sdk:
        key = {"Idempotency-Key": "k1"}
        await sdk.responses.create(model="m", input="hi", extra_headers=key)
        with pytest.raises(openai.ConflictError) as refused:
            await sdk.responses.create(model="m", input="other", extra_headers=key)
    assert refused.value.code == "idempotency_key_reused"
    assert len(sent.paths) == 2
    assert refused.value.response.headers["x-should-retry"] == "false"


@pytest.mark.parametrize("stream", [False, True])
@pytest.mark.parametrize(
    ("refusal", "status"),
    [
        (upstream(401), 502),  # the gateway's credentials: a configuration to fix
        (upstream(402), 502),  # its account's payment
        (upstream(307), 502),  # a redirect, never followed: the URL to configure
        (upstream(429, "insufficient_quota"), 429),  # a quota, not a rate
        (UpstreamResponseTooLarge("over max_response_bytes"), 502),  # as the next would be
    ],
)
async def test_an_upstream_refusal_the_same_request_meets_again_is_sent_once(
    refusal: GatewayError, status: int, stream: bool
) -> None:
    sent = Sent()
    backend = ScriptedBackend([refusal])
    async with openai_client(test_idempotency.build(backend), sent) as sdk:
        with pytest.raises(openai.APIStatusError) as refused:
            await sdk.responses.create(model="m", input="hi", stream=stream)
    assert refused.value.status_code == status
    assert (len(sent.paths), len(backend.requests)) == (1, 1)
    assert refused.value.response.headers["x-should-retry"] == "false"


@pytest.mark.parametrize("stream", [False, True])
async def test_a_chat_client_is_told_an_upstream_refusal_is_final(stream: bool) -> None:
    sent = Sent()
    backend = ScriptedBackend([upstream(401)])
    async with openai_client(test_chat.build(backend), sent) as sdk:
        with pytest.raises(openai.InternalServerError) as refused:
            await sdk.chat.completions.create(
                model="m", messages=[{"role": "user", "content": "hi"}], stream=stream
            )
    assert (refused.value.code, len(sent.paths)) == ("upstream_auth_failed", 1)
    assert refused.value.response.headers["x-should-retry"] == "false"


async def test_a_rate_limit_is_retried_after_its_retry_after() -> None:
    """An upstream's 429 that is a rate is retried by the SDK, waiting as it asked."""
    sent = Sent()
    backend = ScriptedBackend([upstream(429, retry_after="3")])
    async with openai_client(test_idempotency.build(backend), sent) as sdk:
        with pytest.raises(openai.RateLimitError):
            await sdk.responses.create(model="m", input="hi")
    assert len(sent.paths) == 3
    assert sent.waits == [3.0, 3.0]


@pytest.mark.parametrize("wait", ["3600", "Wed, 21 Oct 2099 07:28:00 GMT"])
async def test_an_upstream_wait_longer_than_the_sdks_take_is_not_slept_through(wait: str) -> None:
    """An upstream's 429 asking for an hour (a daily quota): the ``openai`` SDK does not
    retry a wait over 120 s, but the ``anthropic`` SDK would sleep it, twice, in silence.
    Answered with ``x-should-retry: false``, both raise at once, the wait still told."""
    sent = Sent()
    backend = ScriptedBackend([upstream(429, retry_after=wait)])
    async with anthropic_client(test_messages.build(backend), sent) as sdk:
        with pytest.raises(anthropic.RateLimitError) as refused:
            await sdk.messages.create(
                model="m", max_tokens=16, messages=[{"role": "user", "content": "hi"}]
            )
    assert (len(sent.paths), sent.waits) == (1, [])
    headers = refused.value.response.headers
    assert (headers["retry-after"], headers["x-should-retry"]) == (wait, "false")


async def test_a_messages_client_is_told_an_upstream_refusal_is_final() -> None:
    sent = Sent()
    backend = ScriptedBackend([upstream(401)])
    async with anthropic_client(test_messages.build(backend), sent) as sdk:
        with pytest.raises(anthropic.APIStatusError) as refused:
            await sdk.messages.create(
                model="m", max_tokens=16, messages=[{"role": "user", "content": "hi"}]
            )
    assert (refused.value.status_code, len(sent.paths)) == (502, 1)
    assert refused.value.response.headers["x-should-retry"] == "false"


@pytest.mark.parametrize(("status", "kind"), [(529, "overloaded_error"), (429, "rate_limit_error")])
async def test_a_messages_client_retries_after_the_wait_asked(status: int, kind: str) -> None:
    """Anthropic's 529 ``overloaded_error`` (an upstream's 503 or 529, or the gateway's
    full queue) and 429 ``rate_limit_error``, with their ``Retry-After`` and
    ``request-id``: what the SDK (and Claude Code) retry, waiting as asked."""
    sent = Sent()
    backend = ScriptedBackend([upstream(status, retry_after="2")])
    async with anthropic_client(test_messages.build(backend), sent) as sdk:
        with pytest.raises(anthropic.APIStatusError) as refused:
            await sdk.messages.create(
                model="m", max_tokens=16, messages=[{"role": "user", "content": "hi"}]
            )
    error = refused.value
    assert (error.status_code, error.body["error"]["type"]) == (status, kind)  # type: ignore[index]
    assert (len(sent.paths), sent.waits) == (3, [2.0, 2.0])
    assert (error.request_id or "").startswith("req_")


UNAVAILABLE = [
    (StorageError("Storage failed while saving a response."), 5.0),
    (StorageFull("Storage failed while saving a response."), 5.0),
    (StorageReadOnly("Storage failed while saving a response."), 5.0),
    (ServerShuttingDown(), 1.0),
    (ServerRestarted(), 1.0),
]
"""The gateway's own 503s, and the wait each asks: an outage of its database (or Redis)
takes seconds to pass (a failover, a restart); a process shutting down or judged dead
leaves the retry to another (or to itself, restarted) at once."""


@pytest.mark.parametrize(("unavailable", "wait"), UNAVAILABLE)
async def test_the_gateways_own_503_is_retried_after_the_wait_it_carries(
    unavailable: GatewayError, wait: float
) -> None:
    """Each of the gateway's own 503s tells when to try again, as its full queue's does
    (``overloaded``): the SDKs wait that out rather than their own back-off (Claude Code's
    grows to half a minute), and nothing marks it final."""
    sent = Sent()
    async with openai_client(test_idempotency.build(ScriptedBackend([unavailable])), sent) as sdk:
        with pytest.raises(openai.InternalServerError) as refused:
            await sdk.responses.create(model="m", input="hi")
    assert (len(sent.paths), sent.waits) == (3, [wait, wait])
    assert refused.value.code == unavailable.code
    assert "x-should-retry" not in refused.value.response.headers


def test_the_gateways_own_503_told_final_asks_no_wait() -> None:
    """Told final (a retry would make the MCP calls the gateway made again), a 503 asks no
    wait the client is not to take; told retryable again, it asks its own."""
    error = StorageError("Storage failed while saving a response.")
    error.told_retryable(False)
    assert error.headers == {"x-should-retry": "false"}
    error.told_retryable(True)
    assert error.headers == {"Retry-After": "5"}


@pytest.mark.parametrize(("unavailable", "wait"), UNAVAILABLE)
async def test_a_messages_client_retries_the_gateways_own_503_after_its_wait(
    unavailable: GatewayError, wait: float
) -> None:
    sent = Sent()
    async with anthropic_client(test_messages.build(ScriptedBackend([unavailable])), sent) as sdk:
        with pytest.raises(anthropic.InternalServerError) as refused:
            await sdk.messages.create(
                model="m", max_tokens=16, messages=[{"role": "user", "content": "hi"}]
            )
    assert (len(sent.paths), sent.waits) == (3, [wait, wait])
    assert refused.value.body["error"]["type"] == "api_error"  # type: ignore[index]


async def test_a_keyed_request_redis_cannot_take_is_retried_after_the_outage_wait() -> None:
    """Redis refusing connections (down, restarting): a keyed request cannot be claimed,
    and its 503 asks the wait the gateway's own outages ask, not the SDK's half second."""
    sent = Sent()
    results = RedisCommandResults(connect("redis://127.0.0.1:9/0", timeout=2.0))
    backend = ScriptedBackend(OK)
    try:
        async with openai_client(test_idempotency.build(backend, results), sent) as sdk:
            with pytest.raises(openai.InternalServerError) as refused:
                await sdk.responses.create(
                    model="m", input="hi", extra_headers={"Idempotency-Key": "k1"}
                )
    finally:
        await results.aclose()
    assert (refused.value.code, len(backend.requests)) == ("storage_unavailable", 0)
    assert (len(sent.paths), sent.waits) == (3, [5.0, 5.0])
    assert refused.value.response.headers["retry-after"] == "5"


class FailingFirst(ScriptedBackend):
    """Fails its first ``times`` calls with ``error``, then plays its script."""

    def __init__(self, error: GatewayError, times: int = 1) -> None:
        super().__init__(OK)
        self.error, self.times = error, times

    async def infer(self, request: Any) -> Any:
        failing = len(self.requests) < self.times
        async for delta in super().infer(request):
            if failing:
                raise self.error
            yield delta


@pytest.mark.parametrize("stream", [False, True])
async def test_a_conversation_turn_the_sdk_retries_is_added_once(stream: bool) -> None:
    """A turn that failed before its output (its response stored ``failed``) added nothing
    and let the conversation go before its client was answered: the SDK's retry is the
    turn, taken at once (no 409 ``conversation_locked``), its input added once."""
    sent = Sent()
    backend = FailingFirst(upstream(500))
    async with openai_client(test_idempotency.build(backend), sent) as sdk:
        conversation = await sdk.conversations.create()
        answer = await sdk.responses.create(
            model="m", input="hi", conversation=conversation.id, stream=stream
        )
        if stream:
            async for _ in answer:  # type: ignore[union-attr]
                pass
        items = await sdk.conversations.items.list(conversation.id, order="asc")
    assert sent.paths.count("/v1/responses") == 2
    assert len(backend.requests) == 2
    assert [item.role for item in items.data] == ["user", "assistant"]  # type: ignore[union-attr]


LISTING = {
    "type": "mcp_list_tools",
    "server_label": "docs",
    "tools": [
        {"name": "read", "input_schema": {}, "annotations": {"read_only": True}},
        {"name": "write", "input_schema": {}, "annotations": {"read_only": False}},
    ],
}


@pytest.mark.parametrize(
    ("ran", "retryable"),
    [
        ([LISTING], True),
        ([LISTING, {"type": "mcp_call", "server_label": "docs", "name": "read"}], True),
        ([LISTING, {"type": "mcp_call", "server_label": "docs", "name": "write"}], False),
        ([{"type": "mcp_call", "server_label": "docs", "name": "read"}], False),  # unlisted
        ([LISTING, {"type": "mcp_call", "server_label": "other", "name": "read"}], False),
    ],
)
def test_a_failure_after_output_is_final_once_a_gateway_call_that_may_write_ran(
    ran: list[dict[str, Any]], retryable: bool
) -> None:
    """A Chat or Messages client is answered a response that failed after its output as
    an HTTP error (its protocol shows no partial output): retried, an MCP call the gateway
    made for it, of a tool its server does not mark read-only, would be made again."""
    state = ResponseState("resp_1", "t", 0.0, "m", None, None, False, GenerationSettings())
    state.output = [{"type": "message", "role": "assistant", "content": []}, *ran]
    state.fail(UpstreamError("cut", code="upstream_stream_cut"))
    error = failure_after_output(state)
    assert (error.status, error.code, error.retryable) == (502, "upstream_stream_cut", retryable)


@pytest.mark.parametrize(
    ("refusal", "code"),
    [
        (upstream(429, "insufficient_quota"), "insufficient_quota"),
        (upstream(429, "too_many_requests"), "rate_limit_exceeded"),
        (upstream(400), "invalid_prompt"),
    ],
)
async def test_a_refusal_after_output_ends_the_stream_with_the_code_clients_act_on(
    refusal: GatewayError, code: str
) -> None:
    """Once output has streamed, an upstream's refusal ends the stream in
    ``response.failed``, its code one Codex classifies as hosted's: a quota used up
    (``insufficient_quota``: it stops with its quota message) or a rate
    (``rate_limit_exceeded``: it retries), never ``invalid_prompt``, on which it gives the
    turn up as a request to fix."""
    backend = ScriptedBackend([TextDelta("part"), refusal])
    async with openai_client(test_idempotency.build(backend), Sent()) as sdk:
        events = [
            event async for event in await sdk.responses.create(model="m", input="hi", stream=True)
        ]
    last = events[-1]
    assert last.type == "response.failed"
    assert last.response.error is not None
    assert last.response.error.code == code
