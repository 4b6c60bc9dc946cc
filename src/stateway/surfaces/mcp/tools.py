"""The MCP tools: each one a command through ``Gateway.execute``, its arguments decoded
by the protocol the REST route uses, its result the object that route answers with (a
Response, a Conversation, an item list)."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

import orjson

from stateway.core import events as ev
from stateway.core.commands import CancelResponse, DeleteResponse, GetResponse
from stateway.core.conversations.commands import (
    DeleteConversation,
    DeleteConversationItem,
    GetConversation,
    GetConversationItem,
)
from stateway.core.gateway import Gateway
from stateway.core.principal import Principal
from stateway.core.runs import Run
from stateway.protocols.conversations.decode import (
    decode_add_items,
    decode_create_conversation,
    decode_list_items,
    decode_update_conversation,
)
from stateway.protocols.conversations.encode import (
    encode_conversation,
    encode_deleted,
    encode_item_list,
)
from stateway.protocols.responses.decode import decode_create
from stateway.protocols.responses.encode import encode_item_page, encode_response
from stateway.protocols.responses.reads import decode_list_input_items
from stateway.surfaces.mcp import inputs as i

Result = dict[str, Any]


@dataclass(frozen=True, slots=True)
class Effect:
    """What a call does to the gateway's objects, as MCP's tool annotations tell a host
    (hints it may show its user, or ask before a call on)."""

    read_only: bool = False
    destructive: bool = False
    """Changes or removes what exists (else it only adds)."""
    idempotent: bool = False
    """Calling it again with the same arguments changes nothing more."""
    open_world: bool = False
    """Reaches beyond the gateway's store: a model, and the tools it may call."""

    def annotations(self) -> dict[str, bool]:
        """``ToolAnnotations`` on the wire (the other hints mean nothing when read-only)."""
        if self.read_only:
            return {"readOnlyHint": True, "openWorldHint": self.open_world}
        return {
            "readOnlyHint": False,
            "destructiveHint": self.destructive,
            "idempotentHint": self.idempotent,
            "openWorldHint": self.open_world,
        }


READS = Effect(read_only=True)
ADDS = Effect()
REPLACES = Effect(destructive=True, idempotent=True)
"""Cancels, replaces or deletes: done again, it does nothing more."""
ASKS_A_MODEL = Effect(open_world=True)


@dataclass(frozen=True, slots=True)
class Tool:
    name: str
    description: str
    input: type[i.ToolInput]
    run: Callable[[Gateway, Principal, Any], Awaitable[Result]]
    effect: Effect
    takes_items: bool = False
    """Its ``input`` argument holds Responses input items, as many as a request to the
    route may carry (``[server] max_input_items``), counted before anything is read."""


async def create_response(
    gateway: Gateway, principal: Principal, args: i.CreateResponseInput
) -> Result:
    body: dict[str, Any] = {"model": args.model, "input": args.input}
    for name in ("instructions", "previous_response_id", "conversation"):
        if (value := getattr(args, name)) is not None:
            body[name] = value
    if args.background:
        body["background"] = True
    command = decode_create(orjson.dumps(body))
    run = await gateway.execute(principal, command)
    if command.background:
        await _announced(run)
        return encode_response(run.state, snapshot=True, queued=True)
    try:
        await run.wait()
    except asyncio.CancelledError:
        if args.command_id is None:  # with an id, a retry takes over: the run goes on
            run.cancel()
        raise
    if run.error is not None:
        raise run.error
    return encode_response(run.state)


async def _announced(run: Run) -> None:
    """Wait until a background run is stored (announced); one that could not be is an error."""
    async for _ in run.subscribe_batches():
        break
    if not isinstance(run.events[0], ev.ResponseCreated) and run.error is not None:
        raise run.error


async def get_response(gateway: Gateway, principal: Principal, args: i.ResponseInput) -> Result:
    return encode_response(await gateway.execute(principal, GetResponse(args.response_id)))


async def cancel_response(
    gateway: Gateway, principal: Principal, args: i.ChangeResponseInput
) -> Result:
    return encode_response(await gateway.execute(principal, CancelResponse(args.response_id)))


async def delete_response(
    gateway: Gateway, principal: Principal, args: i.ChangeResponseInput
) -> Result:
    deleted = await gateway.execute(principal, DeleteResponse(args.response_id))
    return {"id": deleted.id, "object": "response.deleted", "deleted": True}


async def list_input_items(
    gateway: Gateway, principal: Principal, args: i.ListInputItemsInput
) -> Result:
    command = decode_list_input_items(args.response_id, _query(args))
    return encode_item_page(await gateway.execute(principal, command))


async def create_conversation(
    gateway: Gateway, principal: Principal, args: i.CreateConversationInput
) -> Result:
    raw = orjson.dumps({"items": args.items, "metadata": args.metadata})
    return encode_conversation(await gateway.execute(principal, decode_create_conversation(raw)))


async def get_conversation(
    gateway: Gateway, principal: Principal, args: i.ConversationInput
) -> Result:
    command = GetConversation(args.conversation_id)
    return encode_conversation(await gateway.execute(principal, command))


async def update_conversation(
    gateway: Gateway, principal: Principal, args: i.UpdateConversationInput
) -> Result:
    raw = orjson.dumps({"metadata": args.metadata})
    command = decode_update_conversation(args.conversation_id, raw)
    return encode_conversation(await gateway.execute(principal, command))


async def delete_conversation(
    gateway: Gateway, principal: Principal, args: i.ChangeConversationInput
) -> Result:
    command = DeleteConversation(args.conversation_id)
    return encode_deleted(await gateway.execute(principal, command))


async def add_conversation_items(
    gateway: Gateway, principal: Principal, args: i.AddConversationItemsInput
) -> Result:
    command = decode_add_items(args.conversation_id, orjson.dumps({"items": args.items}))
    return encode_item_list(await gateway.execute(principal, command))


async def list_conversation_items(
    gateway: Gateway, principal: Principal, args: i.ListConversationItemsInput
) -> Result:
    command = decode_list_items(args.conversation_id, _query(args))
    return encode_item_list(await gateway.execute(principal, command))


async def get_conversation_item(
    gateway: Gateway, principal: Principal, args: i.ConversationItemInput
) -> Result:
    command = GetConversationItem(args.conversation_id, args.item_id)
    return dict(await gateway.execute(principal, command))


async def delete_conversation_item(
    gateway: Gateway, principal: Principal, args: i.ChangeConversationItemInput
) -> Result:
    command = DeleteConversationItem(args.conversation_id, args.item_id)
    return encode_conversation(await gateway.execute(principal, command))


def _query(args: i.ListInputItemsInput | i.ListConversationItemsInput) -> dict[str, str]:
    query = {"limit": str(args.limit), "order": args.order}
    if args.after is not None:
        query["after"] = args.after
    return query


TOOLS: dict[str, Tool] = {
    tool.name: tool
    for tool in (
        Tool(
            "create_response",
            "Create a model response (the Responses API). Returns the Response object once "
            "it has ended, or at once with background=true.",
            i.CreateResponseInput,
            create_response,
            ASKS_A_MODEL,
            takes_items=True,
        ),
        Tool("get_response", "Get a stored response.", i.ResponseInput, get_response, READS),
        Tool(
            "cancel_response",
            "Cancel a background response that is still running; returns it once ended.",
            i.ChangeResponseInput,
            cancel_response,
            REPLACES,
        ),
        Tool(
            "delete_response",
            "Delete a stored response.",
            i.ChangeResponseInput,
            delete_response,
            REPLACES,
        ),
        Tool(
            "list_input_items",
            "List a stored response's input items.",
            i.ListInputItemsInput,
            list_input_items,
            READS,
        ),
        Tool(
            "create_conversation",
            "Create a conversation, optionally with items and metadata.",
            i.CreateConversationInput,
            create_conversation,
            ADDS,
        ),
        Tool(
            "get_conversation",
            "Get a conversation.",
            i.ConversationInput,
            get_conversation,
            READS,
        ),
        Tool(
            "update_conversation",
            "Replace a conversation's metadata.",
            i.UpdateConversationInput,
            update_conversation,
            REPLACES,
        ),
        Tool(
            "delete_conversation",
            "Delete a conversation.",
            i.ChangeConversationInput,
            delete_conversation,
            REPLACES,
        ),
        Tool(
            "add_conversation_items",
            "Append items to a conversation.",
            i.AddConversationItemsInput,
            add_conversation_items,
            ADDS,
        ),
        Tool(
            "list_conversation_items",
            "List a conversation's items.",
            i.ListConversationItemsInput,
            list_conversation_items,
            READS,
        ),
        Tool(
            "get_conversation_item",
            "Get one item of a conversation.",
            i.ConversationItemInput,
            get_conversation_item,
            READS,
        ),
        Tool(
            "delete_conversation_item",
            "Delete one item of a conversation; returns the conversation.",
            i.ChangeConversationItemInput,
            delete_conversation_item,
            REPLACES,
        ),
    )
}
