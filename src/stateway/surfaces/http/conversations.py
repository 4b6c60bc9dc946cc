"""Routes of the Conversations API: ``/v1/conversations`` and its items."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import TypeVar

from starlette.requests import Request
from starlette.responses import Response

from stateway.core.conversations.commands import (
    DeleteConversation,
    DeleteConversationItem,
    GetConversation,
)
from stateway.core.gateway import Gateway
from stateway.protocols.conversations.decode import (
    decode_add_items,
    decode_create_conversation,
    decode_get_item,
    decode_list_items,
    decode_update_conversation,
)
from stateway.protocols.conversations.encode import (
    encode_conversation,
    encode_deleted,
    encode_item_list,
)
from stateway.surfaces.asgi.answers import JSONResponse
from stateway.surfaces.asgi.bodies import read_body, require_json
from stateway.surfaces.auth.authenticator import principal_of
from stateway.surfaces.http.idempotency import answered_once
from stateway.surfaces.http.responses import INLINE_DECODE_BYTES, include_of

T = TypeVar("T")


class ConversationsRoutes:
    def __init__(
        self, gateway: Gateway, max_body_bytes: int, *, body_timeout: float | None = None
    ) -> None:
        self._gateway = gateway
        self._max_body = max_body_bytes
        self._body_timeout = body_timeout

    async def create(self, request: Request) -> Response:
        principal = principal_of(request.scope)
        body = await self._body(request)
        command = await _decoded(body, decode_create_conversation)

        async def answer() -> Response:
            return JSONResponse(
                encode_conversation(await self._gateway.execute(principal, command))
            )

        return await answered_once(self._gateway, request, principal, answer, body)

    async def retrieve(self, request: Request) -> Response:
        principal = principal_of(request.scope)
        command = GetConversation(request.path_params["conversation_id"])
        return JSONResponse(encode_conversation(await self._gateway.execute(principal, command)))

    async def update(self, request: Request) -> Response:
        principal = principal_of(request.scope)
        conversation_id = request.path_params["conversation_id"]
        body = await self._body(request)
        command = await _decoded(body, lambda raw: decode_update_conversation(conversation_id, raw))

        async def answer() -> Response:
            return JSONResponse(
                encode_conversation(await self._gateway.execute(principal, command))
            )

        return await answered_once(self._gateway, request, principal, answer, body)

    async def delete(self, request: Request) -> Response:
        principal = principal_of(request.scope)
        command = DeleteConversation(request.path_params["conversation_id"])

        async def answer() -> Response:
            return JSONResponse(encode_deleted(await self._gateway.execute(principal, command)))

        return await answered_once(self._gateway, request, principal, answer)

    async def add_items(self, request: Request) -> Response:
        """The added items are answered as the query's ``include`` shows them."""
        principal = principal_of(request.scope)
        conversation_id = request.path_params["conversation_id"]
        include = include_of(request.query_params)
        body = await self._body(request)
        command = await _decoded(body, lambda raw: decode_add_items(conversation_id, raw, include))

        async def answer() -> Response:
            return JSONResponse(encode_item_list(await self._gateway.execute(principal, command)))

        return await answered_once(self._gateway, request, principal, answer, body)

    async def list_items(self, request: Request) -> Response:
        principal = principal_of(request.scope)
        query = request.query_params
        conversation_id = request.path_params["conversation_id"]
        command = decode_list_items(conversation_id, query, include_of(query))
        return JSONResponse(encode_item_list(await self._gateway.execute(principal, command)))

    async def retrieve_item(self, request: Request) -> Response:
        principal = principal_of(request.scope)
        path = request.path_params
        include = include_of(request.query_params)
        command = decode_get_item(path["conversation_id"], path["item_id"], include)
        return JSONResponse(await self._gateway.execute(principal, command))

    async def delete_item(self, request: Request) -> Response:
        """Answers with the conversation, as hosted does."""
        principal = principal_of(request.scope)
        command = DeleteConversationItem(
            request.path_params["conversation_id"], request.path_params["item_id"]
        )

        async def answer() -> Response:
            return JSONResponse(
                encode_conversation(await self._gateway.execute(principal, command))
            )

        return await answered_once(self._gateway, request, principal, answer)

    async def _body(self, request: Request) -> bytes:
        require_json(request.scope)
        return await read_body(request.scope, request.receive, self._max_body, self._body_timeout)


async def _decoded(body: bytes, decode: Callable[[bytes], T]) -> T:
    if len(body) <= INLINE_DECODE_BYTES:
        return decode(body)
    return await asyncio.to_thread(decode, body)
