"""Routes of the Chat Completions API: ``POST /v1/chat/completions``, and the routes of
stored chat completions, which the gateway does not keep (:func:`stored_completions`).

A request goes to the core as a ``ForwardChat``: when its route's backend speaks Chat
Completions itself and offers no gateway tools, the body goes upstream untouched and the
upstream's answer comes back byte for byte (:class:`~.relay.RelayResponse`), status and
error bodies included; otherwise it is validated and run like any response, and its
result encoded as a ``chat.completion`` or a stream of ``chat.completion.chunk``
(:mod:`stateway.protocols.chat`). Errors the gateway raises have the OpenAI shape. A
request sent with an ``Idempotency-Key`` is answered once per key (:mod:`.keyed_runs`),
on the same path as without it: relayed, byte for byte, its answer remembered as it went
out when the relay ended well (:mod:`.keyed_relay`); its client leaving closes the
upstream request as it would, and leaves nothing to remember: its retry is relayed again
(where a translated keyed run goes on for its retry to take over).
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from functools import partial
from typing import Any, Final

from starlette.requests import ClientDisconnect, Request
from starlette.responses import Response
from starlette.types import ASGIApp, Receive, Scope, Send

from stateway.core import hidden
from stateway.core.backend import Relay
from stateway.core.commands import CreateResponse, ForwardChat
from stateway.core.errors import GatewayError, NotFound
from stateway.core.gateway import Gateway
from stateway.core.principal import Principal
from stateway.core.runs import Run
from stateway.protocols.chat.decode import ChatCall, ChatRequest, decode_chat, peek_chat
from stateway.protocols.chat.encode import encode_completion
from stateway.protocols.chat.errors import chat_error
from stateway.protocols.chat.stream import ChatStream, encode_error_chunk
from stateway.surfaces.asgi.answers import JSONResponse
from stateway.surfaces.asgi.bodies import header, read_body, require_json
from stateway.surfaces.auth.authenticator import principal_of
from stateway.surfaces.http import idempotency
from stateway.surfaces.http.errors import AnswerSend, error_answer
from stateway.surfaces.http.keyed_relay import relayed_once
from stateway.surfaces.http.keyed_runs import KeyedCreate, created_once, stay
from stateway.surfaces.http.relay import RelayResponse
from stateway.surfaces.http.run_answers import ended_state, handed_over, wait_for_output
from stateway.surfaces.http.sessions import session_of
from stateway.surfaces.http.sse import KEEPALIVE_INTERVAL, Chunks, SSEResponse
from stateway.surfaces.http.transport import DisconnectWatch, watch_disconnect

INLINE_DECODE_BYTES = 1024 * 1024
"""Bodies up to this size are parsed and decoded on the event loop, larger ones in a
worker thread."""


class ChatRoutes:
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

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        """``POST /v1/chat/completions``, as a plain ASGI app (served ahead of Starlette's
        router: :mod:`.express`). Errors before the answer starts are answered here. From
        the body on, a client that leaves cancels the answer (:class:`DisconnectWatch`):
        a forwarded request is closed upstream, waiting for its status line or relayed."""
        key = header(scope, idempotency.HEADER_BYTES)
        watch: DisconnectWatch | None = None
        translated: list[ChatRequest] = []
        answering = AnswerSend(send)  # a keyed stream answers as it runs
        try:
            answer: ASGIApp | None
            try:
                principal = principal_of(scope)  # who may ask, before what is asked is judged
                raw = await self._read(scope, receive)
                if key is None:
                    watch = DisconnectWatch(receive)
                    answer = await self._answer(scope, receive, principal, raw, watch, translated)
                else:  # run once, whether its client stays or not: its retry takes over
                    answer = await self._answer_once(
                        scope, receive, answering, principal, raw, key, translated
                    )
                del raw  # not held while the answer goes out: a body may be megabytes
            except ClientDisconnect:
                return  # gone before its body arrived: nobody to answer
            except Exception as error:  # the route's error boundary (express)
                if answering.began:  # its answer under way: the server's to end
                    raise
                if translated:  # judged in its canonical form: its fields named as sent
                    answer = _translated_answer(scope, translated[0].fields, error)
                else:
                    answer = error_answer(scope, error)
            translated.clear()  # its parsed body, as large, is not held either
            if answer is not None:  # else a keyed stream, answered as it ran
                await answer(scope, receive, send)
        except asyncio.CancelledError:
            if watch is None or not watch.left():
                raise
        finally:
            if watch is not None:
                watch.stop()

    async def _read(self, scope: Scope, receive: Receive) -> bytes:
        require_json(scope)
        return await read_body(scope, receive, self._max_body, self._body_timeout)

    async def _answer(
        self,
        scope: Scope,
        receive: Receive,
        principal: Principal,
        raw: bytes,
        watch: DisconnectWatch,
        translated: list[ChatRequest],
    ) -> ASGIApp:
        large = len(raw) > INLINE_DECODE_BYTES
        peek = partial(peek_chat, raw, max_input_items=self._max_items)
        call = await asyncio.to_thread(peek) if large else peek()
        attach = None if call.stream else handed_over(watch)
        translate = partial(self._translate, call, large, translated, attach, scope)
        needs = call.needs_gateway
        command = ForwardChat(call.model, raw, call.fields, translate, needs_gateway=needs)
        result = await self._gateway.execute(principal, command)
        if not isinstance(result, Run):
            return await RelayResponse(result).held()
        run = result
        if watch.stop():  # the client left as the run was admitted, or while it ran here
            if run.closed:
                raise ClientDisconnect  # nobody to answer
            run.cancel()
        if call.stream:
            return self._streamed(scope, translated[0], run.cancel, run)
        if not run.closed:  # else an attached run, over by now
            watcher = asyncio.create_task(watch_disconnect(receive, run.cancel))
            try:
                await run.wait()
            finally:
                watcher.cancel()
        return _whole(run)

    async def _answer_once(
        self,
        scope: Scope,
        receive: Receive,
        send: Send,
        principal: Principal,
        raw: bytes,
        key: str,
        translated: list[ChatRequest],
    ) -> ASGIApp | None:
        """The answer to a request sent with an ``Idempotency-Key`` (:mod:`.keyed_runs`).
        On the fast path, relayed as without the key (:mod:`.keyed_relay`): its client
        leaving closes the upstream request, as it would, and leaves nothing to remember.
        Translated, its run goes on when its client leaves, and its answer is remembered
        whole or as its stream's chunks."""
        large = len(raw) > INLINE_DECODE_BYTES
        peek = partial(peek_chat, raw, max_input_items=self._max_items)
        call = await asyncio.to_thread(peek) if large else peek()
        digest = idempotency.request_digest(Request(scope), raw)
        watches: list[DisconnectWatch] = []  # the key claimed: watched while it may relay

        async def translate() -> CreateResponse:
            watches[0].stop()  # translated: its run outlives its client
            return await self._translate(call, large, translated, None, scope)

        needs = call.needs_gateway
        command = ForwardChat(call.model, raw, call.fields, translate, needs_gateway=needs)

        async def start() -> Run | Relay:
            watches.append(DisconnectWatch(receive))
            return await self._gateway.execute(principal, command)

        async def relayed(relay: Relay, opened: bool) -> bytes | None:
            try:
                return await relayed_once(relay, call.stream, scope, receive, send, opened)
            finally:  # over: storing its answer is not cancelled by its client leaving
                watches[0].stop()

        def decoded() -> ChatRequest:  # once translated
            return translated[0]

        keyed = KeyedCreate(
            call.stream,
            start,
            _whole,
            lambda run, opened: self._streamed(scope, decoded(), stay, run, opened),
            lambda run: _recorded(decoded().include_usage, run),
            partial(_error_line, translated),
            self._keepalive,
            relayed=relayed,
        )
        gateway = self._gateway
        try:
            return await created_once(gateway, principal, key, digest, keyed, scope, receive, send)
        except asyncio.CancelledError:
            if not watches or not watches[0].left():
                raise
            raise ClientDisconnect from None  # gone while relayed: nobody to answer
        finally:
            if watches:
                watches[0].stop()

    def _streamed(
        self,
        scope: Scope,
        decoded: ChatRequest,
        on_disconnect: Callable[[], None],
        run: Run,
        opened: bool = False,
    ) -> SSEResponse:
        """``run``'s answer as a stream; ``on_disconnect``: what its client leaving does;
        ``opened``: in a stream already open (:class:`SSEResponse`)."""
        sent = decoded.fields if opened else None  # its error, as its status's would be
        return SSEResponse(
            _frames(run, decoded.include_usage),
            on_disconnect,
            opening=partial(wait_for_output, run, hidden.shows),
            keepalive=self._keepalive,
            error_response=partial(_translated_answer, scope, decoded.fields),
            ending=partial(encode_error_chunk, sent=sent),
            opened=opened,
        )

    async def _translate(
        self,
        call: ChatCall,
        large: bool,
        into: list[ChatRequest],
        attach: Callable[[Run], None] | None,
        scope: Scope,
    ) -> CreateResponse:
        decode = partial(decode_chat, call.fields, max_input_items=self._max_items)
        decoded = await asyncio.to_thread(decode) if large else decode()
        into.append(decoded)
        decoded.command.attach = attach
        decoded.command.session = session_of(scope)  # a forwarded request needs none
        return decoded.command


NOT_STORED: Final = (
    "Stored chat completions are not served: this gateway stores no chat completion ('store' "
    "is taken and ignored). Keep state with /v1/responses instead."
)


async def stored_completions(request: Request) -> Response:
    """A route of hosted's stored chat completions (list, retrieve, update, delete, the
    messages of one): none is kept, so each is a 404 saying so (the SDK's
    ``NotFoundError``), the list's too (not a 405, as if only its method were wrong)."""
    raise NotFound(NOT_STORED)


def _translated_answer(scope: Scope, fields: dict[str, Any], error: Exception) -> Response:
    """The answer to an error of a translated request (:func:`error_answer`), its
    ``param`` a field the client sent (:mod:`stateway.protocols.chat.errors`), or null."""
    return error_answer(scope, error, partial(_translated_error, fields))


def _translated_error(fields: dict[str, Any], error: GatewayError) -> Response:
    wire = chat_error(error, fields)
    return JSONResponse({"error": wire}, status_code=error.status, headers=error.headers or None)


def _error_line(translated: list[ChatRequest], error: GatewayError) -> bytes:
    """The error line ending a keyed stream opened while it waited, in place of an error
    status: worded as that status's answer (:func:`_translated_answer` once the request
    was translated)."""
    return encode_error_chunk(error, translated[0].fields if translated else None)


async def _frames(run: Run, include_usage: bool) -> Chunks:
    stream = ChatStream(include_usage)
    async for first, events in run.subscribe_batches():
        chunk = b"".join([stream.encode(event) for event in events])
        last = run.closed and first + len(events) == len(run.events)
        if chunk or last:
            yield chunk, last


def _whole(run: Run) -> JSONResponse:
    """An ended run's answer as one completion; raises its error when it failed."""
    return JSONResponse(encode_completion(ended_state(run)))


def _recorded(include_usage: bool, run: Run) -> bytes:
    """An ended run's stream, all of it (:func:`_frames`), for a keyed request's retry."""
    stream = ChatStream(include_usage)
    return b"".join([stream.encode(event) for event in run.events])
