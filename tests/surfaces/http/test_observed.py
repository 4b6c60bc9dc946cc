"""``x-request-id`` on every answer (JSON, errors, an unexpected 500, SSE, a refused
WebSocket), unique and never the client's; the id in the request's context; what each
request reports to the observer: route template, status, and WebSocket connections."""

from __future__ import annotations

import logging
import re
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from typing import Any

import orjson
import pytest
from starlette.requests import Request
from starlette.responses import Response
from starlette.types import Message, Receive, Scope, Send

from stateway.core.gateway import Gateway
from stateway.core.inference import Finish, TextDelta, UsageReport
from stateway.core.loop import Loop
from stateway.core.routing import BackendEntry, Router
from stateway.core.run_registry import RunRegistry
from stateway.core.telemetry import REQUEST_ID
from stateway.core.usage import Usage
from stateway.identity.key_cache import KeyCache
from stateway.surfaces.asgi.answers import JSONResponse
from stateway.surfaces.auth.authenticator import Authenticator
from stateway.surfaces.http.app import build_http_app
from stateway.surfaces.http.messages import MessagesRoutes
from stateway.surfaces.http.observed import CLIENT_GONE, ObservedApp
from stateway.surfaces.http.responses import ResponsesRoutes
from stateway.surfaces.http.service import ServiceRoutes
from tests.core.fakes import MemoryStore, ScriptedBackend
from tests.identity.test_key_cache import Store
from tests.surfaces.http.asgi import call

REQUEST_ID_SHAPE = re.compile(r"req_[0-9a-f]{32}")


class Observer:
    def __init__(self) -> None:
        self.ended: list[tuple[str, int]] = []
        self.spans: list[tuple[str, str, tuple[str, int] | None]] = []
        self.sockets = 0
        self.most_sockets = 0
        self.span_headers: list[list[tuple[bytes, bytes]]] = []

    @contextmanager
    def request_span(
        self, method: str, request_id: str, headers: Iterable[tuple[bytes, bytes]]
    ) -> Iterator[Any]:
        finished: list[tuple[str, int]] = []
        self.span_headers.append(list(headers))

        class Span:
            def finish(self, route: str, status: int) -> None:
                finished.append((route, status))

        yield Span()
        self.spans.append((method, request_id, finished[0] if finished else None))

    def request_ended(self, route: str, status: int, seconds: float) -> None:
        assert 0 <= seconds < 60  # the request's own, not a clock's reading
        self.ended.append((route, status))

    def websocket_opened(self) -> None:
        self.sockets += 1
        self.most_sockets = max(self.most_sockets, self.sockets)

    def websocket_closed(self) -> None:
        self.sockets -= 1


class Service(ServiceRoutes):
    async def health(self, request: Request) -> Response:
        if "explode" in request.query_params:
            raise RuntimeError("a bug")
        return JSONResponse({"request_id": REQUEST_ID.get()})


def build(observer: Observer, authenticator: Authenticator | None = None) -> Any:
    store = MemoryStore()
    backend = ScriptedBackend([TextDelta("hi"), Finish("stop"), UsageReport(Usage(3, 2))])
    gateway = Gateway(
        store, Router([BackendEntry(backend, {}, catch_all=True)]), Loop(store), RunRegistry()
    )
    routes = ResponsesRoutes(gateway, 1 << 20)
    return build_http_app(
        routes,
        Service(gateway),
        messages=MessagesRoutes(gateway, 1 << 20),
        observer=observer,
        authenticator=authenticator,
    )


async def test_a_request_refused_before_routing_counts_under_its_route_s_template() -> None:
    observer = Observer()
    app = build(observer, Authenticator(keys=KeyCache(Store(), 2.0)))  # keys required
    for path in ("/v1/responses/resp_abc", "/v1/models", "/nowhere"):
        assert (await call(app, "GET", path, content_type=None)).status == 401
    assert observer.ended == [
        ("/v1/responses/{response_id}", 401),
        ("/v1/models", 401),
        ("unmatched", 401),
    ]


CREATE = orjson.dumps({"model": "m", "input": "hi"})
STREAM = orjson.dumps({"model": "m", "input": "hi", "stream": True})


class Untraced(Observer):
    """An observer with tracing off: it opens no span for a request."""

    def request_span(  # type: ignore[override]
        self, method: str, request_id: str, headers: Iterable[tuple[bytes, bytes]]
    ) -> None:
        return None


async def test_without_a_span_every_request_still_gets_its_id_and_its_report() -> None:
    observer = Untraced()
    app = build(observer)
    replies = [
        await call(app, "GET", "/health", content_type=None),
        await call(app, "POST", "/v1/responses", CREATE),
        await call(app, "GET", "/nowhere", content_type=None),
    ]
    ids = [r.headers["x-request-id"] for r in replies]
    assert all(REQUEST_ID_SHAPE.fullmatch(i) for i in ids)
    assert len(set(ids)) == 3
    assert replies[0].json() == {"request_id": ids[0]}
    assert observer.ended == [("/health", 200), ("/v1/responses", 200), ("unmatched", 404)]
    assert observer.spans == []


async def test_every_answer_carries_its_own_request_id() -> None:
    observer = Observer()
    app = build(observer)
    replies = [
        await call(app, "GET", "/health", content_type=None),
        await call(app, "GET", "/v1/models", content_type=None),
        await call(app, "GET", "/nowhere", content_type=None),
        await call(app, "POST", "/v1/responses", b"{not json"),
        await call(app, "POST", "/v1/responses", CREATE),
        await call(app, "POST", "/v1/responses", STREAM),
        await call(app, "GET", "/v1/responses/resp_missing", content_type=None),
    ]
    assert [r.status for r in replies] == [200, 200, 404, 400, 200, 200, 404]
    assert replies[5].headers["content-type"].startswith("text/event-stream")
    ids = [r.headers["x-request-id"] for r in replies]
    assert all(REQUEST_ID_SHAPE.fullmatch(i) for i in ids)
    assert len(set(ids)) == len(ids)
    assert replies[0].json() == {"request_id": ids[0]}  # the id is the request's context
    assert [s[1] for s in observer.spans] == ids
    assert observer.ended == [
        ("/health", 200),
        ("/v1/models", 200),
        ("unmatched", 404),
        ("/v1/responses", 400),
        ("/v1/responses", 200),
        ("/v1/responses", 200),
        ("/v1/responses/{response_id}", 404),
    ]
    assert [s[2] for s in observer.spans] == observer.ended
    assert [s[0] for s in observer.spans][:4] == ["GET", "GET", "GET", "POST"]


async def test_a_client_request_id_is_neither_used_nor_reflected() -> None:
    app = build(Observer())
    sent = b"client-id\r\nset-cookie: stolen=1"
    reply = await call(app, "GET", "/health", content_type=None, headers=[(b"x-request-id", sent)])
    assert REQUEST_ID_SHAPE.fullmatch(reply.headers["x-request-id"])
    assert "set-cookie" not in reply.headers


async def test_an_unexpected_failure_is_a_500_with_a_request_id() -> None:
    observer = Observer()
    app = build(observer)
    started: list[Message] = []

    def watch(message: Message) -> None:
        if message["type"] == "http.response.start":
            started.append(message)

    with pytest.raises(RuntimeError, match="a bug"):  # re-raised for the server's log
        await call(app, "GET", "/health", query="explode=1", content_type=None, watch=watch)
    [start] = started
    assert start["status"] == 500
    headers = dict(start["headers"])
    assert REQUEST_ID_SHAPE.fullmatch(headers[b"x-request-id"].decode())
    assert observer.ended == [("/health", 500)]


async def test_an_answer_never_started_is_reported_as_client_gone() -> None:
    async def silent(scope: Scope, receive: Receive, send: Send) -> None:
        return None

    observer = Observer()
    await call(ObservedApp(silent, observer), "GET", "/anything", content_type=None)
    assert observer.ended == [("unmatched", CLIENT_GONE)]


@pytest.mark.parametrize(
    "path",
    [
        "/v1/responses",
        "/v1/responses/compact",
        "/v1/responses/input_tokens",
        "/v1/messages",
        "/v1/messages/count_tokens",
    ],
)
async def test_a_client_gone_while_its_body_is_sent_is_answered_nothing_and_not_logged(
    path: str, caplog: pytest.LogCaptureFixture
) -> None:
    """Not an unexpected failure: no 500 sent to nobody, no error logged (the server's
    too: nothing is re-raised), counted as a client gone."""
    observer = Observer()
    started: list[Message] = []

    def watch(message: Message) -> None:
        if message["type"] == "http.response.start":
            started.append(message)

    headers = [(b"anthropic-version", b"2023-06-01")]
    await call(build(observer), "POST", path, CREATE, cut=5, headers=headers, watch=watch)
    assert started == []
    assert observer.ended == [(path, CLIENT_GONE)]
    assert [r for r in caplog.records if r.levelno >= logging.ERROR] == []


async def test_a_refused_websocket_has_a_request_id() -> None:
    observer = Observer()
    app = build(observer)
    sent: list[Message] = []

    async def receive() -> Message:
        return {"type": "websocket.connect"}

    async def send(message: Message) -> None:
        sent.append(message)

    scope = {
        "type": "websocket",
        "asgi": {"version": "3.0"},
        "path": "/v1/responses",
        "raw_path": b"/v1/responses",
        "query_string": b"",
        "headers": [(b"host", b"127.0.0.1")],
        "client": ("127.0.0.1", 1),
        "server": ("127.0.0.1", 80),
        "extensions": {"websocket.http.response": {}},
        "state": {},
    }
    await app(scope, receive, send)
    [start] = [m for m in sent if m["type"] == "websocket.http.response.start"]
    assert start["status"] == 426
    assert REQUEST_ID_SHAPE.fullmatch(dict(start["headers"])[b"x-request-id"].decode())
    assert observer.ended == [("/v1/responses", 426)]
    assert observer.most_sockets == 0


async def test_websocket_sessions_are_counted_while_open() -> None:
    observer = Observer()
    sent: list[Message] = []
    open_during: list[int] = []

    async def session(scope: Scope, receive: Receive, send: Send) -> None:
        await receive()
        await send({"type": "websocket.accept"})
        open_during.append(observer.sockets)
        await send({"type": "websocket.close", "code": 1000})

    async def receive() -> Message:
        return {"type": "websocket.connect"}

    async def send(message: Message) -> None:
        sent.append(message)

    await ObservedApp(session, observer)({"type": "websocket", "path": "/ws"}, receive, send)
    assert open_during == [1]
    assert observer.sockets == 0
    accept = sent[0]
    assert REQUEST_ID_SHAPE.fullmatch(dict(accept["headers"])[b"x-request-id"].decode())
    assert observer.ended == [("unmatched", 101)]
    assert [(method, finished) for method, _, finished in observer.spans] == [
        ("WEBSOCKET", ("unmatched", 101))
    ]


async def test_the_lifespan_passes_unobserved() -> None:
    """Not a request: no id set, nothing reported, its messages untouched."""
    observer = Observer()
    sent: list[Message] = []
    seen: list[tuple[str, str, str | None]] = []

    async def lifespan(scope: Scope, receive: Receive, send: Send) -> None:
        seen.append((scope["type"], (await receive())["type"], REQUEST_ID.get(None)))
        await send({"type": "lifespan.startup.complete"})

    async def receive() -> Message:
        return {"type": "lifespan.startup"}

    async def send(message: Message) -> None:
        sent.append(message)

    await ObservedApp(lifespan, observer)({"type": "lifespan"}, receive, send)
    assert sent == [{"type": "lifespan.startup.complete"}]
    assert seen == [("lifespan", "lifespan.startup", None)]
    assert (observer.ended, observer.spans) == ([], [])


async def test_the_request_id_joins_the_answer_s_own_headers() -> None:
    """Added to what the answer sends, not in place of it; and the request's id is
    unset again once it is answered."""

    async def app(scope: Scope, receive: Receive, send: Send) -> None:
        headers = [(b"content-type", b"text/plain")]
        await send({"type": "http.response.start", "status": 201, "headers": headers})
        await send({"type": "http.response.body", "body": REQUEST_ID.get().encode()})

    observer = Observer()
    traceparent = (b"traceparent", b"00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01")
    reply = await call(
        ObservedApp(app, observer), "GET", "/anything", content_type=None, headers=[traceparent]
    )
    assert reply.status == 201
    assert reply.headers["content-type"] == "text/plain"
    assert reply.headers["x-request-id"] == reply.body.decode()
    assert REQUEST_ID.get(None) is None
    assert observer.ended == [("unmatched", 201)]
    [(method, request_id, finished)] = observer.spans
    assert (method, request_id, finished) == ("GET", reply.body.decode(), ("unmatched", 201))
    [headers] = observer.span_headers
    assert traceparent in headers  # the span continues the client's trace
    assert (observer.sockets, observer.most_sockets) == (0, 0)  # no WebSocket opened
