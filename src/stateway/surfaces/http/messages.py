"""Routes of the Anthropic Messages API: ``POST /v1/messages`` and
``POST /v1/messages/count_tokens``.

Whatever Claude Code and the ``anthropic`` SDK send alongside is accepted: any
``anthropic-version`` and ``anthropic-beta``, the credential as ``x-api-key`` or a
bearer token (``surfaces/auth``), ``?beta=true``. Every answer carries a ``request-id``
header; every error, before or instead of a stream, has Anthropic's shape
(:mod:`stateway.protocols.messages.errors`), a block at fault named by its path
(:func:`named_block`). Who may ask is settled before the body is
read: the admin credential is a 403 whatever it sends.
A stream that is silent for the keep-alive interval gets a ``ping`` event. A create sent
with an ``Idempotency-Key`` is answered once per key (:mod:`.keyed_runs`).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable
from functools import partial
from typing import NoReturn

from starlette.requests import ClientDisconnect, Request
from starlette.responses import Response
from starlette.types import ASGIApp, Receive, Scope, Send

from stateway.core import hidden
from stateway.core.commands import CreateResponse
from stateway.core.errors import GatewayError
from stateway.core.gateway import Gateway
from stateway.core.ids import new_id
from stateway.core.items import Item
from stateway.core.principal import Principal
from stateway.core.runs import Run
from stateway.core.telemetry import REQUEST_ID as REQUEST_ID_VAR
from stateway.protocols.messages.context_edits import encode_token_count
from stateway.protocols.messages.decode import decode_count_tokens, decode_messages
from stateway.protocols.messages.encode import encode_message
from stateway.protocols.messages.errors import answer_status, encode_error
from stateway.protocols.messages.media import refused_block
from stateway.protocols.messages.signatures import signed_block
from stateway.protocols.messages.stream import PING, MessagesStream, encode_error_event
from stateway.surfaces.asgi.answers import JSONResponse
from stateway.surfaces.asgi.answers import error_response as openai_error_response
from stateway.surfaces.asgi.bodies import header, read_body, require_json
from stateway.surfaces.auth.authenticator import principal_of
from stateway.surfaces.http import idempotency
from stateway.surfaces.http.errors import AnswerSend, error_answer
from stateway.surfaces.http.keyed_runs import KeyedCreate, created_once, stay
from stateway.surfaces.http.run_answers import (
    ended_state,
    started,
    wait_for_output,
    wait_watched,
)
from stateway.surfaces.http.sessions import session_of
from stateway.surfaces.http.sse import KEEPALIVE_INTERVAL, Chunks, SSEResponse
from stateway.surfaces.http.transport import token_count_header, while_present

log = logging.getLogger(__name__)

REQUEST_ID = "request-id"
MESSAGES_PATH = "/v1/messages"
MODELS_PATH = "/v1/models"
INLINE_DECODE_BYTES = 1024 * 1024
"""Bodies up to this size are decoded on the event loop, larger ones in a worker thread."""

Handler = Callable[[Request, str], Awaitable[Response]]


class MessagesRoutes:
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
        """``POST /v1/messages``, as a plain ASGI app (served ahead of Starlette's router:
        :mod:`.express`). Errors before the answer starts are answered here, in
        Anthropic's shape; a client gone before its body arrived gets none."""
        request_id = current_request_id()
        answering = AnswerSend(send)  # a keyed stream answers as it runs
        try:
            answer = await self._create(scope, receive, answering, request_id)
        except ClientDisconnect:
            return
        except Exception as error:  # the route's error boundary (express)
            if answering.began:  # its answer under way: the server's to end
                raise
            respond = partial(error_response, request_id=request_id)
            answer = error_answer(scope, error, respond, log)
        if answer is not None:  # else a keyed stream, answered as it ran
            await answer(scope, receive, send)

    async def count_tokens(self, request: Request) -> Response:
        return await _answered(self._count_tokens, request)

    async def _create(
        self, scope: Scope, receive: Receive, send: Send, request_id: str
    ) -> ASGIApp | None:
        principal = principal_of(scope)  # who may ask, before what is asked is judged
        require_json(scope)
        body = await read_body(scope, receive, self._max_body, self._body_timeout)
        limit, named = self._max_items, betas(scope)
        if len(body) <= INLINE_DECODE_BYTES:
            command = decode_messages(body, max_input_items=limit, betas=named)
        else:
            command = await asyncio.to_thread(
                decode_messages, body, max_input_items=limit, betas=named
            )
        command.session = session_of(scope)
        key = header(scope, idempotency.HEADER_BYTES)
        try:
            if key is None:
                return await self._answer(scope, receive, request_id, principal, command, body)
            digest = idempotency.request_digest(Request(scope), body, named)
            keyed = KeyedCreate(
                command.stream,
                partial(self._gateway.execute, principal, command),
                partial(_whole, command, request_id),
                partial(self._streamed, scope, request_id, command, body, stay),
                partial(_recorded, command.input),
                partial(_refusal_event, body, command.input),
                self._keepalive,
                PING,
                {REQUEST_ID: request_id},
            )
            gateway = self._gateway
            return await created_once(gateway, principal, key, digest, keyed, scope, receive, send)
        except GatewayError as error:
            _raise_named(error, body, command.input)

    async def _answer(
        self,
        scope: Scope,
        receive: Receive,
        request_id: str,
        principal: Principal,
        command: CreateResponse,
        body: bytes,
    ) -> Response:
        run = await started(self._gateway, principal, command, receive)
        if command.stream:
            return self._streamed(scope, request_id, command, body, run.cancel, run)
        await wait_watched(run, receive, run.cancel)
        return _whole(command, request_id, run)

    def _streamed(
        self,
        scope: Scope,
        request_id: str,
        command: CreateResponse,
        body: bytes,
        on_disconnect: Callable[[], None],
        run: Run,
        opened: bool = False,
    ) -> SSEResponse:
        """``run``'s answer as a stream; ``on_disconnect``: what its client leaving does;
        ``opened``: in a stream already open (:class:`SSEResponse`): an error before any
        output is its error event (its block named) instead of its HTTP error."""
        return SSEResponse(
            _frames(run, command.input),
            on_disconnect,
            opening=partial(wait_for_output, run, hidden.shows),
            keepalive=self._keepalive,
            idle_frame=PING,
            headers={REQUEST_ID: request_id},
            error_response=partial(
                error_answer,
                scope,
                respond=partial(_refusal_response, body, command.input, request_id=request_id),
                logger=log,
            ),
            ending=partial(_refusal_event, body, command.input) if opened else encode_error_event,
            opened=opened,
        )

    async def _count_tokens(self, request: Request, request_id: str) -> Response:
        principal = principal_of(request.scope)
        body = await self._body(request)
        command = decode_count_tokens(body, max_input_items=self._max_items)
        command.request.settings.anthropic_beta = betas(request.scope)
        try:
            counted = await while_present(
                request.receive, self._gateway.execute(principal, command)
            )
        except GatewayError as error:
            _raise_named(error, body, command.request.input)
        headers = {REQUEST_ID: request_id, **token_count_header(counted.estimated)}
        edits = command.request.settings.context_edits
        return JSONResponse(encode_token_count(counted, edits), headers=headers)

    async def _body(self, request: Request) -> bytes:
        require_json(request.scope)
        return await read_body(request.scope, request.receive, self._max_body, self._body_timeout)


def _whole(command: CreateResponse, request_id: str, run: Run) -> JSONResponse:
    """An ended run's answer as one message; raises its error when it failed."""
    message = encode_message(ended_state(run), command.input)
    return JSONResponse(message, headers={REQUEST_ID: request_id})


def _recorded(earlier: list[Item], run: Run) -> bytes:
    """An ended run's stream, all of it (:func:`_frames`), for a keyed request's retry."""
    stream = MessagesStream(earlier)
    return b"".join([stream.encode(event) for event in run.events])


async def _answered(handler: Handler, request: Request) -> Response:
    """Run ``handler``; any error is answered in Anthropic's shape."""
    request_id = current_request_id()
    try:
        return await handler(request, request_id)
    except ClientDisconnect:
        raise  # nobody to answer: the app's handler answers nothing
    except Exception as error:  # noqa: BLE001 - the route's error boundary
        respond = partial(error_response, request_id=request_id)
        return error_answer(request.scope, error, respond, log)


def error_response(error: GatewayError, *, request_id: str) -> Response:
    """``error`` in Anthropic's shape, its ``request_id`` in the body and the header."""
    headers = {**error.headers, REQUEST_ID: request_id}
    body = {**encode_error(error), "request_id": request_id}
    return JSONResponse(body, status_code=answer_status(error, body), headers=headers)


def _refusal_response(
    raw: bytes, items: list[Item], error: GatewayError, *, request_id: str
) -> Response:
    """:func:`error_response`, a block of the request ``raw`` named as Anthropic names it
    (:func:`named_block`)."""
    return error_response(named_block(error, raw, items), request_id=request_id)


def _refusal_event(raw: bytes, items: list[Item], error: GatewayError) -> bytes:
    """The ``error`` event for ``error``, a block of the request ``raw`` named as
    Anthropic names it (:func:`named_block`): a stream's answer to what would have been
    its HTTP error, once its status line went out."""
    return encode_error_event(named_block(error, raw, items))


def _raise_named(error: GatewayError, raw: bytes, items: list[Item]) -> NoReturn:
    """Raise ``error``, or in its place the refusal naming its block (:func:`named_block`)."""
    refusal = named_block(error, raw, items)
    if refusal is error:
        raise error
    raise refusal from None


def named_block(error: GatewayError, raw: bytes, items: list[Item]) -> GatewayError:
    """``error`` for the Messages request ``raw``, decoded as ``items``, naming the block
    at fault by its path as Anthropic does: one the upstream cannot take
    (:mod:`stateway.protocols.messages.media`), or a thinking block whose signature does
    not open (:mod:`stateway.protocols.messages.signatures`)."""
    return signed_block(refused_block(error, raw, items), items, raw)


def answers_anthropic(scope: Scope) -> bool:
    """Whether a request is an Anthropic client's, answered in Anthropic's shape: the
    Messages routes, and any other route (the models, or one not served here: the Files
    API's) when it sends ``anthropic-version``, which only Anthropic's clients send."""
    path: str = scope["path"]
    if path == MESSAGES_PATH or path.startswith(MESSAGES_PATH + "/"):
        return True
    return any(name == b"anthropic-version" for name, _ in scope["headers"])


def current_request_id() -> str:
    """The id an answer in Anthropic's shape gives (``request-id``, and an error body's
    ``request_id``): the request's ``x-request-id``, or a new one outside a request."""
    return REQUEST_ID_VAR.get() or new_id("req")


def request_id_header() -> dict[str, str]:
    """The ``request-id`` header of an answer in Anthropic's shape, from which the SDK
    gives each object its ``_request_id``."""
    return {REQUEST_ID: current_request_id()}


def error_response_for(scope: Scope) -> Callable[[GatewayError], Response]:
    """How an error is answered to this request: in Anthropic's shape (with the
    request's id) or in the OpenAI shape."""
    if not answers_anthropic(scope):
        return openai_error_response
    return partial(error_response, request_id=current_request_id())


async def _frames(run: Run, earlier: list[Item]) -> Chunks:
    """``earlier``: the request's input (the turn's searches its answer cites)."""
    stream = MessagesStream(earlier)
    async for first, events in run.subscribe_batches():
        chunk = b"".join([stream.encode(event) for event in events])
        last = run.closed and first + len(events) == len(run.events)
        if chunk or last:
            yield chunk, last


def betas(scope: Scope) -> list[str]:
    """The features the client's ``anthropic-beta`` headers name, in order, once each."""
    named: list[str] = []
    for key, value in scope["headers"]:
        if key == b"anthropic-beta":
            for beta in value.decode("latin-1").split(","):
                beta = beta.strip()
                if beta and beta not in named:
                    named.append(beta)
    return named
