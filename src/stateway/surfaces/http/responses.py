"""Routes of the Responses API: ``/v1/responses`` and its sub-resources."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from functools import partial
from typing import TypeVar

from starlette.datastructures import QueryParams
from starlette.requests import ClientDisconnect, Request
from starlette.responses import Response
from starlette.types import ASGIApp, Receive, Scope, Send
from starlette.websockets import WebSocket

from stateway.core import events as ev
from stateway.core.commands import CancelResponse, DeleteResponse, WatchResponse
from stateway.core.errors import GatewayError, InvalidRequest
from stateway.core.gateway import Gateway
from stateway.core.journal import RunJournal
from stateway.core.principal import Principal
from stateway.core.runs import Run
from stateway.core.watch import LiveWatch, Watch
from stateway.protocols.responses.decode import (
    decode_compact,
    decode_create,
    decode_input_tokens,
)
from stateway.protocols.responses.encode import (
    encode_compacted,
    encode_item_page,
    encode_response,
    encode_token_count,
)
from stateway.protocols.responses.reads import decode_list_input_items, decode_retrieve
from stateway.protocols.responses.stream import (
    encode_sse_batch,
    encode_sse_error,
    encode_sse_payload,
)
from stateway.surfaces.asgi.answers import JSONResponse, error_response
from stateway.surfaces.asgi.bodies import header, read_body, require_json
from stateway.surfaces.auth.authenticator import principal_of
from stateway.surfaces.http import idempotency
from stateway.surfaces.http.errors import error_answer
from stateway.surfaces.http.run_answers import started, wait_for_output, wait_watched
from stateway.surfaces.http.sessions import session_of
from stateway.surfaces.http.sse import (
    KEEPALIVE_INTERVAL,
    Chunks,
    Opening,
    SSEResponse,
    Watcher,
    held,
)
from stateway.surfaces.http.transport import token_count_header, while_present

INLINE_DECODE_BYTES = 1024 * 1024
"""Bodies up to this size are decoded on the event loop (the hot path); larger ones in a
worker thread, so decoding many megabytes of JSON does not stall every other request."""

C = TypeVar("C")


def include_of(query: QueryParams) -> list[str]:
    """A read's ``include``: ``include[]=...`` (the SDKs) or ``include=...``, repeated."""
    return query.getlist("include[]") + query.getlist("include")


class ResponsesRoutes:
    def __init__(
        self,
        gateway: Gateway,
        max_body_bytes: int,
        *,
        body_timeout: float | None = None,
        keepalive: float = KEEPALIVE_INTERVAL,
        max_input_items: int | None = None,
    ) -> None:
        self._gateway = gateway
        self._max_body = max_body_bytes
        self._body_timeout = body_timeout
        self._keepalive = keepalive
        self._max_items = max_input_items

    async def create(self, scope: Scope, receive: Receive, send: Send) -> None:
        """``POST /v1/responses``, as a plain ASGI app (served ahead of Starlette's router:
        :mod:`.express`). Errors before the answer starts are answered here, in the
        OpenAI shape (:mod:`.errors`); a client gone before its body arrived gets none."""
        try:
            answer = await self._create(scope, receive)
        except ClientDisconnect:
            return
        except Exception as error:  # noqa: BLE001 - the route's error boundary (express)
            answer = error_answer(scope, error)
        await answer(scope, receive, send)

    async def _create(self, scope: Scope, receive: Receive) -> ASGIApp:
        principal = principal_of(scope)  # who may ask, before what is asked is judged
        require_json(scope)
        body = await read_body(scope, receive, self._max_body, self._body_timeout)
        if len(body) <= INLINE_DECODE_BYTES:
            command = decode_create(body, max_input_items=self._max_items)
        else:
            command = await asyncio.to_thread(decode_create, body, max_input_items=self._max_items)
        command.session = session_of(scope)
        key = header(scope, idempotency.HEADER_BYTES)
        digest = None if key is None else idempotency.request_digest(Request(scope), body)
        del body  # not held while the run goes on: a body may be megabytes
        if key is None or digest is None:
            run = await started(self._gateway, principal, command, receive)
            return await self._answer(scope, receive, command.stream, run, run.cancel)
        async with self._gateway.once(principal, key, digest, param=idempotency.PARAM) as once:
            if once.outcome is None:
                command.replayable = command.stream
                run = await self._gateway.execute(principal, command)
                # A retry takes over from a client that left: leaving cancels nothing.
                if not command.stream:
                    answer = await self._answer(scope, receive, False, run, None)
                    assert isinstance(answer, JSONResponse)
                    once.remember(bytes(answer.body))
                    return answer
                # A stream that fails before it opens is answered with its HTTP error:
                # raised here, a failure, which leaves no outcome for a retry to replay.
                await held(_opening(run), self._keepalive)
                await run.announced()  # a retry elsewhere must find it stored
                once.remember(response_id=run.id)
                return await self._answer(scope, receive, True, run, None, opened=True)
            outcome = once.outcome
        if outcome.response_id is None:
            return idempotency.replayed(outcome)
        replay = WatchResponse(outcome.response_id, replay=True)
        return self._watching(await self._gateway.execute(principal, replay), scope)

    async def _answer(
        self,
        scope: Scope,
        receive: Receive,
        stream: bool,
        run: Run,
        on_disconnect: Callable[[], None] | None,
        *,
        opened: bool = False,
    ) -> ASGIApp:
        """``run``'s answer; ``on_disconnect``: what its client leaving does (None:
        nothing); ``opened``: a stream's opening was waited for already."""
        opening = None if opened or not stream else _opening(run)  # a stream's only
        if run.journal is not None and run.state.background:  # detached from this request
            return await self._background(run, run.journal, scope, stream, opening)
        if stream:
            sent = _Sent(0)
            return SSEResponse(
                _frames(run, sent),
                on_disconnect or _stay,
                opening=opening,
                keepalive=self._keepalive,
                error_response=partial(error_answer, scope),
                ending=sent.ending,
            )
        if on_disconnect is None:
            await run.wait()
        else:
            await wait_watched(run, receive, on_disconnect)
        if run.error is not None:
            raise run.error
        return JSONResponse(encode_response(run.state))

    async def _background(
        self, run: Run, journal: RunJournal, scope: Scope, stream: bool, opening: Opening | None
    ) -> Response:
        """A background response is answered once it is stored: as first announced, or as
        a stream a disconnect does not cancel (the client resumes with ``starting_after``),
        opened once ``opening`` passed."""
        if stream:
            return self._watching(LiveWatch(run, journal), scope, opening)
        await _accepted(run)
        return JSONResponse(encode_response(run.state, snapshot=True, queued=True))

    async def compact(self, request: Request) -> Response:
        """``POST /v1/responses/compact``."""
        principal = _principal(request)
        command = await self._decode(request, decode_compact)
        compacted = await while_present(request.receive, self._gateway.execute(principal, command))
        return JSONResponse(encode_compacted(compacted))

    async def input_tokens(self, request: Request) -> Response:
        """``POST /v1/responses/input_tokens``; the header says whether it is an estimate."""
        principal = _principal(request)
        command = await self._decode(request, decode_input_tokens)
        count = await while_present(request.receive, self._gateway.execute(principal, command))
        headers = token_count_header(count.estimated)
        return JSONResponse(encode_token_count(count), headers=headers)

    async def _decode(self, request: Request, decode: Callable[..., C]) -> C:
        require_json(request.scope)
        body = await read_body(request.scope, request.receive, self._max_body, self._body_timeout)
        if len(body) <= INLINE_DECODE_BYTES:
            return decode(body, max_input_items=self._max_items)
        return await asyncio.to_thread(decode, body, max_input_items=self._max_items)

    async def retrieve(self, request: Request) -> Response:
        query = request.query_params
        command = decode_retrieve(request.path_params["response_id"], query, include_of(query))
        if isinstance(command, WatchResponse):
            watch = await self._gateway.execute(_principal(request), command)
            return self._watching(watch, request.scope)
        state = await self._gateway.execute(_principal(request), command)
        return JSONResponse(encode_response(state))

    async def cancel(self, request: Request) -> Response:
        principal = _principal(request)
        command = CancelResponse(request.path_params["response_id"])

        async def answer() -> Response:
            return JSONResponse(encode_response(await self._gateway.execute(principal, command)))

        return await idempotency.answered_once(self._gateway, request, principal, answer)

    def _watching(self, watch: Watch, scope: Scope, opening: Opening | None = None) -> SSEResponse:
        sent = _Sent(watch.position)
        return SSEResponse(
            _wire_frames(watch, sent),
            _stay,
            opening=opening,
            keepalive=self._keepalive,
            error_response=partial(error_answer, scope),
            watcher=Watcher(watch.behind),
            ending=sent.ending,
        )

    async def delete(self, request: Request) -> Response:
        principal = _principal(request)
        command = DeleteResponse(request.path_params["response_id"])

        async def answer() -> Response:
            deleted = await self._gateway.execute(principal, command)
            return JSONResponse({"id": deleted.id, "object": "response.deleted", "deleted": True})

        return await idempotency.answered_once(self._gateway, request, principal, answer)

    async def input_items(self, request: Request) -> Response:
        query = request.query_params
        response_id = request.path_params["response_id"]
        command = decode_list_input_items(response_id, query, include_of(query))
        page = await self._gateway.execute(_principal(request), command)
        return JSONResponse(encode_item_page(page))


async def refuse_websocket(websocket: WebSocket) -> None:
    """In an app composed without WebSocket mode, an upgrade on ``/v1/responses`` is denied
    with 426 so clients that try WebSockets first (Codex) fall back to HTTP at once."""
    error = InvalidRequest(
        "WebSocket mode is not served here; send POST /v1/responses over HTTP.",
        code="websocket_not_supported",
        status=426,
    )
    if "websocket.http.response" in websocket.scope.get("extensions", {}):
        await websocket.send_denial_response(error_response(error))
    else:
        await websocket.close(code=1008, reason=error.message)  # the handshake fails alike


async def _accepted(run: Run) -> None:
    """Wait until a background run is announced (its row is stored); one that ended without
    being announced (its row could not be written) is answered with its HTTP error."""
    async for _ in run.subscribe_batches():
        break
    if not isinstance(run.events[0], ev.ResponseCreated) and run.error is not None:
        raise run.error


def _opening(run: Run) -> Opening:
    """What a stream of ``run`` waits for before its status line: a background run's
    stored row, any other's first output; either raising the run's HTTP error."""
    if run.journal is not None and run.state.background:
        return partial(_accepted, run)
    return partial(wait_for_output, run)


def _stay() -> None:
    """A watcher leaving changes nothing for the run it watched."""


class _Sent:
    """How far a stream got: the sequence number of its next event (those before it were
    sent: a chunk is taken as sent once its write returned, when its generator resumes).
    The ``error`` event ending a stream the gateway cut off takes it."""

    __slots__ = ("next",)

    def __init__(self, first: int) -> None:
        self.next = first

    def ending(self, error: GatewayError) -> bytes:
        return encode_sse_error(error, self.next)


async def _wire_frames(watch: Watch, sent: _Sent) -> Chunks:
    """Whole SSE frames of a watch's wire payloads; a batch leaves in one write."""
    async for payloads, last in watch.batches():
        yield b"".join([encode_sse_payload(payload) for payload in payloads]), last
        sent.next = watch.position


async def _frames(run: Run, sent: _Sent) -> Chunks:
    """Whole SSE frames; events logged together leave in one write."""
    async for first, events in run.subscribe_batches():
        end = first + len(events)
        yield encode_sse_batch(first, events), run.closed and end == len(run.events)
        sent.next = end


def _principal(request: Request) -> Principal:
    return principal_of(request.scope)
