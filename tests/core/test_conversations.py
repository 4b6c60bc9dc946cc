"""Conversations through ``Gateway.execute``: the commands, and responses as turns of a
conversation (context, appended items, the lock and when it is let go)."""

from __future__ import annotations

import asyncio
import logging
from dataclasses import replace
from typing import Any

import pytest

from stateway.core import events as ev
from stateway.core import planning
from stateway.core.commands import (
    CountTokens,
    CreateResponse,
    DeleteResponse,
    GetResponse,
    ThreadTurn,
)
from stateway.core.compaction.sealed import COMPACTION, REASONING, seal
from stateway.core.conversations.commands import (
    AddConversationItems,
    CreateConversation,
    DeleteConversation,
    DeleteConversationItem,
    GetConversation,
    GetConversationItem,
    ListConversationItems,
    UpdateConversation,
)
from stateway.core.conversations.ports import Conversation
from stateway.core.conversations.service import ConversationDeleted
from stateway.core.errors import (
    ConversationLocked,
    ConversationNotFound,
    InvalidRequest,
    NotFound,
    StorageError,
    ThreadAlreadyContinued,
    ThreadNotFound,
    UpstreamError,
)
from stateway.core.gateway import Gateway
from stateway.core.generation_settings import GenerationSettings
from stateway.core.inference import Delta, Finish, TextDelta
from stateway.core.items import Item
from stateway.core.journal import EventEncoder
from stateway.core.loop import Loop
from stateway.core.ownership import ProcessIdentity
from stateway.core.ports import Sealer
from stateway.core.principal import Principal
from stateway.core.reasoning import wrapped
from stateway.core.routing import BackendEntry, Router
from stateway.core.run_registry import RunRegistry
from stateway.core.runs import Run
from stateway.core.settling import Settler
from stateway.protocols.responses.stream import encode_event_json
from stateway.sealing import AesGcmSealer
from tests.core.conversation_fakes import MemoryConversations, TurnStore
from tests.core.fakes import MemoryStore, ScriptedBackend

ME = Principal()
SEALER = AesGcmSealer(bytes(range(32)))


def user(text: str, item_id: str | None = None) -> Item:
    item: Item = {
        "type": "message",
        "role": "user",
        "content": [{"type": "input_text", "text": text}],
        "status": "completed",
    }
    if item_id is not None:
        item["id"] = item_id
    return item


def texts(items: list[Item]) -> list[str]:
    return [part["text"] for item in items for part in item["content"]]


class World:
    def __init__(
        self,
        script: list[Delta | UpstreamError] | None = None,
        gate: asyncio.Event | None = None,
        encoder: EventEncoder | None = None,
        sealer: Sealer | None = None,
    ) -> None:
        self.conversations = MemoryConversations()
        self.store = TurnStore(self.conversations)
        self.backend = ScriptedBackend(script or [TextDelta("answer"), Finish("stop")], gate)
        router = Router([BackendEntry(self.backend, {}, catch_all=True)])
        self.settler = Settler(self.store, first_pause=0.01, max_pause=0.02)
        loop = Loop(self.store, settler=self.settler)
        self.gateway = Gateway(
            self.store,
            router,
            loop,
            RunRegistry(),
            conversations=self.conversations,
            encoder=encoder,
            sealer=sealer,
        )

    async def conversation(self, *texts_: str) -> Conversation:
        return await self.gateway.execute(
            ME, CreateConversation(items=[user(t) for t in texts_], metadata={"k": "v"})
        )

    async def turn(self, conversation_id: str, text: str, **fields: Any) -> Run:
        command = CreateResponse(
            model="m", input=[user(text)], conversation_id=conversation_id, **fields
        )
        return await self.gateway.execute(ME, command)

    async def items(self, conversation_id: str) -> list[Item]:
        page = await self.gateway.execute(
            ME, ListConversationItems(conversation_id, limit=100, order="asc")
        )
        return page.items


async def test_create_get_update_delete() -> None:
    world = World()
    created = await world.conversation()
    assert created.id.startswith("conv_")
    assert created.metadata == {"k": "v"}
    assert await world.gateway.execute(ME, GetConversation(created.id)) == created
    updated = await world.gateway.execute(ME, UpdateConversation(created.id, {"n": "1"}))
    assert (updated.id, updated.metadata) == (created.id, {"n": "1"})
    deleted = await world.gateway.execute(ME, DeleteConversation(created.id))
    assert deleted == ConversationDeleted(created.id)
    for command in (
        GetConversation(created.id),
        UpdateConversation(created.id, {}),
        DeleteConversation(created.id),
        AddConversationItems(created.id, [user("x")]),
        ListConversationItems(created.id),
        GetConversationItem(created.id, "msg_1"),
        DeleteConversationItem(created.id, "msg_1"),
    ):
        with pytest.raises(ConversationNotFound) as caught:
            await world.gateway.execute(ME, command)  # type: ignore[call-overload]
        assert caught.value.status == 404
        assert caught.value.param == "conversation_id"
        assert created.id in caught.value.message


async def test_a_conversation_is_its_tenants_alone() -> None:
    world = World()
    created = await world.conversation("mine")
    [item] = await world.items(created.id)
    stranger = Principal(tenant_id="other")
    for command in (
        GetConversation(created.id),
        UpdateConversation(created.id, {}),
        DeleteConversation(created.id),
        AddConversationItems(created.id, [user("x")]),
        ListConversationItems(created.id),
        GetConversationItem(created.id, item["id"]),
        DeleteConversationItem(created.id, item["id"]),
    ):
        with pytest.raises(ConversationNotFound):
            await world.gateway.execute(stranger, command)
    assert await world.gateway.execute(ME, GetConversation(created.id)) == created
    assert texts(await world.items(created.id)) == ["mine"]


async def test_added_items_get_new_ids_of_their_type() -> None:
    world = World()
    conversation = await world.conversation("first")
    call = {"type": "function_call", "call_id": "c1", "name": "f", "arguments": "{}", "id": "x"}
    added = await world.gateway.execute(
        ME, AddConversationItems(conversation.id, [user("second", "msg_mine"), call])
    )
    assert added.has_more is False
    assert added.items[0]["id"].startswith("msg_")
    assert added.items[0]["id"] != "msg_mine", "the conversation makes its ids"
    assert added.items[1]["id"].startswith("fc_")
    stored = await world.items(conversation.id)
    assert texts(stored[:2]) == ["first", "second"]
    assert stored[0]["id"].startswith("msg_")


async def test_items_the_gateway_makes_get_its_prefixes_in_a_conversation() -> None:
    """An item of a type the gateway makes (a compaction, a web search or MCP call) gets
    the prefix the gateway gives that type, as in a response's output, not ``item_``."""
    world = World(sealer=SEALER)
    conversation = await world.conversation("first")
    compaction = {
        "type": "compaction",
        "id": "cmp_mine",
        "encrypted_content": seal(SEALER, COMPACTION, ME.tenant_id, "sum"),
    }
    search = {"type": "web_search_call", "status": "completed", "action": {"type": "search"}}
    mcp = {"type": "mcp_call", "server_label": "s", "name": "t", "arguments": "{}"}
    added = await world.gateway.execute(
        ME, AddConversationItems(conversation.id, [compaction, search, mcp])
    )
    assert [item["id"].split("_")[0] for item in added.items] == ["cmp", "ws", "mcp"]


def call(call_id: str) -> Item:
    return {"type": "function_call", "call_id": call_id, "name": "f", "arguments": "{}"}


def answer(call_id: str) -> Item:
    return {"type": "function_call_output", "call_id": call_id, "output": "ok"}


async def test_added_outputs_answer_calls_of_the_conversation_once() -> None:
    world = World()
    conversation = await world.conversation("first")
    await world.gateway.execute(ME, AddConversationItems(conversation.id, [call("c1")]))
    await world.gateway.execute(ME, AddConversationItems(conversation.id, [answer("c1")]))
    await world.gateway.execute(
        ME, AddConversationItems(conversation.id, [user("x"), call("c2"), answer("c2")])
    )
    for items, param, code, message in [
        ([answer("nope")], "items[0].call_id", "tool_call_not_found", "No tool call found"),
        ([user("y"), answer("c1")], "items[1].call_id", "tool_call_not_found", "Duplicate"),
        ([call("c2")], "items[0].call_id", "duplicate_call_id", "Duplicate or empty"),
    ]:
        with pytest.raises(InvalidRequest) as caught:
            await world.gateway.execute(ME, AddConversationItems(conversation.id, items))
        assert (caught.value.status, caught.value.param, caught.value.code) == (400, param, code)
        assert caught.value.message.startswith(message)
    assert len(await world.items(conversation.id)) == 6, "nothing of a refused batch is added"
    with pytest.raises(ConversationNotFound) as unknown:
        await world.gateway.execute(ME, AddConversationItems("conv_nope", [answer("c1")]))
    assert unknown.value.param == "conversation_id"


async def test_an_approval_added_answers_a_request_of_the_conversation() -> None:
    world = World()
    request = {
        "type": "mcp_approval_request",
        "id": "mcpr_1",
        "server_label": "s",
        "name": "t",
        "arguments": "{}",
    }
    conversation = await world.gateway.execute(
        ME, CreateConversation(items=[user("x"), request], metadata={})
    )
    [_, stored] = await world.items(conversation.id)

    def approval(request_id: str) -> Item:
        return {"type": "mcp_approval_response", "approval_request_id": request_id, "approve": True}

    with pytest.raises(InvalidRequest) as caught:
        await world.gateway.execute(ME, AddConversationItems(conversation.id, [approval("nope")]))
    assert (caught.value.param, caught.value.code) == (
        "items[0].approval_request_id",
        "approval_request_not_found",
    )
    added = await world.gateway.execute(
        ME, AddConversationItems(conversation.id, [approval(stored["id"])])
    )
    assert added.items[0]["type"] == "mcp_approval_response"


async def test_a_conversation_cannot_start_with_an_output_that_answers_nothing() -> None:
    world = World()
    with pytest.raises(InvalidRequest) as caught:
        await world.gateway.execute(
            ME, CreateConversation(items=[user("x"), answer("c9")], metadata={})
        )
    assert caught.value.param == "items[1].call_id"
    assert world.conversations.stored == {}
    created = await world.gateway.execute(
        ME, CreateConversation(items=[call("c9"), answer("c9")], metadata={})
    )
    assert len(await world.items(created.id)) == 2


async def test_an_upstreams_seal_as_it_came_is_refused_among_added_items() -> None:
    """Any tenant could add another's: only seals the gateway made are stored."""
    world = World(sealer=SEALER)
    conversation = await world.conversation("hi")
    for raw in ("EqQBsig", "redacted_thinking:data", "responses:blob"):
        item = {"type": "reasoning", "summary": [], "encrypted_content": raw}
        with pytest.raises(InvalidRequest) as caught:
            await world.gateway.execute(
                ME, AddConversationItems(conversation.id, [user("x"), item])
            )
        assert caught.value.code == "invalid_encrypted_content"
        assert caught.value.param == "items[1].encrypted_content"
        with pytest.raises(InvalidRequest):
            await world.gateway.execute(ME, CreateConversation(items=[item], metadata={}))
    assert len(await world.items(conversation.id)) == 1
    sealed_over = {
        "type": "reasoning",
        "summary": [],
        "encrypted_content": wrapped(SEALER, ME.tenant_id, "EqQBsig"),
    }
    await world.gateway.execute(ME, AddConversationItems(conversation.id, [sealed_over]))
    assert len(await world.items(conversation.id)) == 2


async def test_a_seal_is_verified_for_the_tenant_when_added() -> None:
    """A compaction item's seal, and a reasoning item's the gateway made, must open for
    the tenant adding it: nothing forged is stored, and a batch with one is not added."""
    world = World(sealer=SEALER)
    conversation = await world.conversation("hi")
    mine, theirs = ME.tenant_id, "another-tenant"

    def compaction(tenant: str) -> Item:
        return {"type": "compaction", "encrypted_content": seal(SEALER, COMPACTION, tenant, "sum")}

    def reasoning(tenant: str) -> Item:
        blob = seal(SEALER, REASONING, tenant, "thought")
        return {"type": "reasoning", "summary": [], "encrypted_content": blob}

    def sealed_over(tenant: str) -> Item:
        blob = wrapped(SEALER, tenant, "redacted_thinking:data")
        return {"type": "reasoning", "summary": [], "encrypted_content": blob}

    for make in (compaction, reasoning, sealed_over):
        good = make(mine)
        blob = good["encrypted_content"]
        middle = len(blob) // 2
        flipped = blob[:middle] + ("A" if blob[middle] != "A" else "B") + blob[middle + 1 :]
        altered = {**good, "encrypted_content": flipped}
        for bad in (make(theirs), altered, {**good, "encrypted_content": "sw1.forged"}):
            with pytest.raises(InvalidRequest) as caught:
                await world.gateway.execute(
                    ME, AddConversationItems(conversation.id, [user("x"), good, bad])
                )
            assert caught.value.code == "invalid_encrypted_content"
            assert caught.value.param == "items[2].encrypted_content"
            assert f"this {good['type']} item could not be verified" in caught.value.message
            with pytest.raises(InvalidRequest) as refused:
                await world.gateway.execute(ME, CreateConversation(items=[bad], metadata={}))
            assert refused.value.param == "items[0].encrypted_content"
        assert len(await world.items(conversation.id)) == 1
        assert len(world.conversations.stored) == 1
    added = [compaction(mine), reasoning(mine), sealed_over(mine)]
    await world.gateway.execute(ME, AddConversationItems(conversation.id, added))
    await world.gateway.execute(ME, CreateConversation(items=added, metadata={}))
    assert len(await world.items(conversation.id)) == 4


async def test_an_upstreams_seal_as_it_came_in_a_turns_input_is_not_stored() -> None:
    """Left out of the turn's input, it must not be taken as stored by the next turn."""
    world = World(sealer=SEALER)
    conversation = await world.conversation("hi")
    raw = {"type": "reasoning", "summary": [], "encrypted_content": "EqQBsig"}
    command = CreateResponse(model="m", input=[raw, user("x")], conversation_id=conversation.id)
    await (await world.gateway.execute(ME, command)).wait()
    stored = await world.items(conversation.id)
    assert [item["type"] for item in stored] == ["message", "reasoning", "message", "message"]
    assert "encrypted_content" not in stored[1]
    await (await world.turn(conversation.id, "again")).wait()
    for request in world.backend.requests:
        assert all(item.get("encrypted_content") != "EqQBsig" for item in request.items)


async def test_a_prewarm_turns_seals_are_verified_before_its_input_is_stored() -> None:
    """A prewarm (``generate=False``) asks no model but stores its input with the turn:
    a seal that does not open for the tenant is a 400 there too, and nothing is added."""
    world = World(sealer=SEALER)
    conversation = await world.conversation("hi")
    theirs = seal(SEALER, COMPACTION, "another-tenant", "their summary")
    forged = [
        {"type": "compaction", "encrypted_content": theirs},
        {"type": "reasoning", "summary": [], "encrypted_content": "sw1.forged"},
    ]
    for bad in forged:
        command = CreateResponse(
            model="m", input=[user("x"), bad], conversation_id=conversation.id, generate=False
        )
        with pytest.raises(InvalidRequest) as caught:
            await (await world.gateway.execute(ME, command)).wait()
        assert caught.value.code == "invalid_encrypted_content"
        assert caught.value.param == "input[1].encrypted_content"
    assert len(await world.items(conversation.id)) == 1
    assert world.backend.requests == []


async def test_a_reference_id_is_kept() -> None:
    world = World()
    conversation = await world.conversation()
    call = {
        "type": "local_shell_call",
        "id": "lsh_1",
        "call_id": "call_7",
        "action": {"type": "exec", "command": ["ls"], "env": {}},
        "status": "completed",
    }
    output = {"type": "local_shell_call_output", "id": "call_7", "output": "ok"}
    added = await world.gateway.execute(ME, AddConversationItems(conversation.id, [call, output]))
    assert added.items[1]["id"] == "call_7"


async def test_an_apply_patch_output_added_answers_its_call() -> None:
    world = World()
    conversation = await world.conversation()
    call = {
        "type": "apply_patch_call",
        "call_id": "call_8",
        "operation": {"type": "create_file", "path": "a.txt", "diff": "+hi"},
        "status": "completed",
    }
    output = {"type": "apply_patch_call_output", "call_id": "call_8", "status": "completed"}
    with pytest.raises(InvalidRequest) as caught:
        await world.gateway.execute(ME, AddConversationItems(conversation.id, [output]))
    assert (caught.value.param, caught.value.code) == ("items[0].call_id", "tool_call_not_found")
    added = await world.gateway.execute(ME, AddConversationItems(conversation.id, [call, output]))
    assert [item["id"].split("_")[0] for item in added.items] == ["apc", "apco"]


async def test_get_and_delete_one_item() -> None:
    world = World()
    conversation = await world.conversation("a", "b")
    first, second = await world.items(conversation.id)
    assert (
        await world.gateway.execute(ME, GetConversationItem(conversation.id, first["id"])) == first
    )
    after = await world.gateway.execute(ME, DeleteConversationItem(conversation.id, first["id"]))
    assert after == conversation, "deleting an item answers with the conversation"
    assert await world.items(conversation.id) == [second]
    for command in (
        GetConversationItem(conversation.id, first["id"]),
        DeleteConversationItem(conversation.id, first["id"]),
    ):
        with pytest.raises(NotFound) as caught:
            await world.gateway.execute(ME, command)  # type: ignore[call-overload]
        assert not isinstance(caught.value, ConversationNotFound)
        assert caught.value.param == "item_id"
        assert first["id"] in caught.value.message


async def test_a_turn_sees_the_conversation_and_is_appended() -> None:
    world = World()
    conversation = await world.conversation("earlier")
    run = await world.turn(conversation.id, "now")
    await run.wait()
    assert run.state.status == "completed"
    assert run.state.conversation_id == conversation.id
    assert texts(world.backend.requests[0].items) == ["earlier", "now"]
    stored = await world.items(conversation.id)
    assert [item["role"] for item in stored] == ["user", "user", "assistant"]
    assert stored[-1]["id"] == run.state.output[0]["id"], "output keeps its id"
    assert texts(stored)[:2] == ["earlier", "now"]
    record = world.store.records[(ME.tenant_id, run.id)]
    assert record.body["conversation_id"] == conversation.id
    assert texts(record.input_items) == ["now"], "the response stores its own input only"
    state = await world.gateway.execute(ME, GetResponse(run.id))
    assert state.conversation_id == conversation.id


async def test_the_second_turn_sees_the_first() -> None:
    world = World()
    conversation = await world.conversation()
    await (await world.turn(conversation.id, "one")).wait()
    await (await world.turn(conversation.id, "two")).wait()
    assert texts(world.backend.requests[1].items) == ["one", "answer", "two"]
    assert len(await world.items(conversation.id)) == 4


async def test_a_deleted_item_leaves_later_context_but_not_the_response() -> None:
    world = World()
    conversation = await world.conversation("secret", "kept")
    first = (await world.items(conversation.id))[0]
    run = await world.turn(conversation.id, "q1")
    await run.wait()
    await world.gateway.execute(ME, DeleteConversationItem(conversation.id, first["id"]))
    await (await world.turn(conversation.id, "q2")).wait()
    assert texts(world.backend.requests[1].items) == ["kept", "q1", "answer", "q2"]
    assert texts(world.store.records[(ME.tenant_id, run.id)].input_items) == ["q1"]


async def test_an_unstored_turn_sees_the_conversation_and_adds_nothing() -> None:
    """``store: false``, as hosted: the conversation is read, nothing is written, and no
    lock is taken (a stored turn may run beside it)."""
    gate = asyncio.Event()
    world = World(gate=gate)
    conversation = await world.conversation("earlier")
    unstored = await world.turn(conversation.id, "now", store=False)
    stored = await world.turn(conversation.id, "beside")  # not refused: nothing is held
    gate.set()
    await unstored.wait()
    await stored.wait()
    assert unstored.state.status == "completed"
    assert unstored.state.conversation_id == conversation.id
    assert texts(world.backend.requests[0].items) == ["earlier", "now"]
    assert texts(await world.items(conversation.id)) == ["earlier", "beside", "answer"]
    assert (ME.tenant_id, unstored.id) not in world.store.records
    with pytest.raises(NotFound):
        await world.gateway.execute(ME, GetResponse(unstored.id))


async def test_a_second_turn_while_one_runs_is_refused_and_writes_nothing() -> None:
    gate = asyncio.Event()
    world = World(gate=gate)
    conversation = await world.conversation()
    running = await world.turn(conversation.id, "first")
    with pytest.raises(ConversationLocked) as caught:
        await world.turn(conversation.id, "second", stream=True)
    error = caught.value
    assert (error.status, error.type, error.code, error.param) == (
        409,
        "invalid_request_error",
        "conversation_locked",
        "conversation",
    )
    assert len(world.gateway.runs) == 1
    assert len(world.store.records) == 1
    with pytest.raises(ConversationLocked):
        await world.gateway.execute(ME, AddConversationItems(conversation.id, [user("x")]))
    with pytest.raises(ConversationLocked):  # its call may be the running turn's: retry
        await world.gateway.execute(ME, AddConversationItems(conversation.id, [answer("c")]))
    gate.set()
    await running.wait()
    assert texts(await world.items(conversation.id)) == ["first", "answer"]


async def test_input_tokens_count_the_conversation_too() -> None:
    world = World()
    conversation = await world.conversation("x" * 400)
    alone = await world.gateway.execute(
        ME, CountTokens(CreateResponse(model="m", input=[user("q")], store=False))
    )
    within = await world.gateway.execute(
        ME,
        CountTokens(
            CreateResponse(
                model="m", input=[user("q")], store=False, conversation_id=conversation.id
            )
        ),
    )
    assert within.input_tokens >= alone.input_tokens + 100  # its 400 bytes, about 100 tokens
    missing = CreateResponse(model="m", input=[user("q")], store=False, conversation_id="conv_x")
    with pytest.raises(ConversationNotFound):
        await world.gateway.execute(ME, CountTokens(missing))
    assert world.store.records == {}  # counting stores nothing


async def test_a_caller_gone_while_the_turn_is_written_still_lets_go() -> None:
    world = World()
    conversation = await world.conversation()
    save = world.store.save
    written = _saves_held(world)
    caller = asyncio.create_task(world.turn(conversation.id, "gone"))
    await asyncio.sleep(0)
    caller.cancel()
    with pytest.raises(asyncio.CancelledError):
        await caller
    written.set()  # the row (and the lock) land after the caller left
    for _ in range(20):
        await asyncio.sleep(0)
    (record,) = world.store.records.values()
    assert (record.status, record.body["incomplete_reason"]) == (
        "incomplete",
        "client_disconnected",
    )
    assert len(world.gateway.runs) == 0
    assert world.gateway.generations.current.leases == 0  # that run gave its lease back
    world.store.save = save  # type: ignore[method-assign]
    await (await world.turn(conversation.id, "next")).wait()  # the conversation is free
    assert texts(await world.items(conversation.id))[-2:] == ["next", "answer"]


async def test_a_turns_in_progress_row_names_the_process_running_it() -> None:
    """As every in-progress row does: were the process to die, the survivors find the
    turn by its owner, end it and let its conversation go."""
    world = World(gate=asyncio.Event())
    conversation = await world.conversation()
    run = await world.turn(conversation.id, "hi")
    await world.backend.started.wait()
    [record] = world.store.records.values()
    assert (record.status, record.owner) == ("in_progress", str(ProcessIdentity.current()))
    run.cancel()
    await run.wait()


async def test_a_caller_gone_while_a_failing_turn_write_runs_holds_no_generation() -> None:
    world = World()
    conversation = await world.conversation()
    written = asyncio.Event()

    saves: list[str] = []

    async def failing_save(record: Any) -> None:
        saves.append(record.status)
        await written.wait()
        raise StorageError("the database went away")

    world.store.save = failing_save  # type: ignore[method-assign]
    caller = asyncio.create_task(world.turn(conversation.id, "gone"))
    await asyncio.sleep(0)
    caller.cancel()
    with pytest.raises(asyncio.CancelledError):
        await caller
    generation = world.gateway.generations.current
    assert generation.leases == 1  # held for the run that starts once the row is written
    written.set()
    for _ in range(20):
        await asyncio.sleep(0)
    assert generation.leases == 0  # nothing was written, so no run started: given back
    assert len(world.gateway.runs) == 0
    assert (saves, world.store.finishes) == (["in_progress"], [])  # nor ended one


async def test_a_background_turn_goes_on_when_its_caller_leaves_while_it_is_written() -> None:
    world = World(encoder=encode_event_json)
    conversation = await world.conversation()
    written = _saves_held(world)
    world.backend.carries_unknown_types = True  # speaks Responses: the image tool goes as declared
    image = {"type": "image_generation"}
    tools = GenerationSettings(tools=[image])
    caller = asyncio.create_task(
        world.turn(conversation.id, "later", background=True, settings=tools)
    )
    await asyncio.sleep(0)
    caller.cancel()
    with pytest.raises(asyncio.CancelledError):
        await caller
    written.set()
    for _ in range(20):
        await asyncio.sleep(0)
    await world.gateway.runs.settle()
    (record,) = world.store.records.values()
    assert (record.status, record.body["background"]) == ("completed", True)
    assert texts(await world.items(conversation.id)) == ["later", "answer"]
    assert world.backend.requests[0].native_tools == [image]  # the tools it was admitted with


async def test_a_background_turn_is_announced_queued_then_in_progress_once() -> None:
    """A turn's row is written before its run starts (it takes the conversation), so the
    run is announced as it begins: queued, as any background run, until it starts."""
    world = World(encoder=encode_event_json)
    conversation = await world.conversation()
    run = await world.turn(conversation.id, "later", background=True)
    await run.wait()
    assert [type(e) for e in run.events][:4] == [
        ev.ResponseCreated,
        ev.ResponseQueued,
        ev.ResponseInProgress,
        ev.ItemAdded,
    ]
    assert world.store.records[ME.tenant_id, run.id].status == "completed"


async def test_a_background_turn_whose_caller_leaves_still_compacts_first() -> None:
    world = World(encoder=encode_event_json, sealer=AesGcmSealer(bytes(range(32))))
    conversation = await world.conversation("earlier")
    written = _saves_held(world)
    trigger = [user("later"), {"type": "compaction_trigger"}]
    command = CreateResponse(
        model="m", input=trigger, conversation_id=conversation.id, background=True
    )
    caller = asyncio.create_task(world.gateway.execute(ME, command))
    await asyncio.sleep(0)
    caller.cancel()
    with pytest.raises(asyncio.CancelledError):
        await caller
    written.set()
    for _ in range(20):
        await asyncio.sleep(0)
    await world.gateway.runs.settle()
    (record,) = world.store.records.values()
    assert record.status == "completed"
    assert [item["type"] for item in record.output_items] == ["compaction"]
    [summarized] = world.backend.requests  # the summary call, and no round
    assert texts(summarized.items)[:2] == ["earlier", "later"]


async def test_a_compacting_turn_appends_its_compaction_but_not_its_trigger() -> None:
    """A ``compaction_trigger`` asks the turn to compact; it is no conversation item (no
    ``ConversationItem`` type of the SDK's is one): a listing shows the compaction."""
    world = World(sealer=AesGcmSealer(bytes(range(32))))
    conversation = await world.conversation("earlier")
    trigger = [user("later"), {"type": "compaction_trigger"}]
    run = await world.gateway.execute(
        ME, CreateResponse(model="m", input=trigger, conversation_id=conversation.id)
    )
    await run.wait()
    items = await world.items(conversation.id)
    assert [item["type"] for item in items] == ["message", "message", "compaction"]
    world.backend.script = [TextDelta("ok"), Finish("stop")]
    await (await world.turn(conversation.id, "again")).wait()
    assert [item["type"] for item in await world.items(conversation.id)][2:] == [
        "compaction",
        "message",
        "message",
    ]


@pytest.mark.parametrize(
    "script",
    [[UpstreamError("the model server failed")], [TextDelta("partial"), UpstreamError("cut")]],
)
async def test_a_failed_turn_appends_nothing_and_lets_go(script: list[Any]) -> None:
    world = World(script)
    conversation = await world.conversation("before")
    run = await world.turn(conversation.id, "lost")
    await run.wait()
    assert run.state.status == "failed"
    assert texts(await world.items(conversation.id)) == ["before"]
    world.backend.script = [TextDelta("ok"), Finish("stop")]
    await (await world.turn(conversation.id, "again")).wait()
    assert texts(await world.items(conversation.id)) == ["before", "again", "ok"]


async def test_an_incomplete_turn_is_appended() -> None:
    world = World([TextDelta("cut sh"), Finish("length")])
    conversation = await world.conversation()
    run = await world.turn(conversation.id, "long")
    await run.wait()
    assert run.state.status == "incomplete"
    assert texts(await world.items(conversation.id)) == ["long", "cut sh"]


async def test_deleting_the_response_cancels_the_turn_and_lets_go() -> None:
    gate = asyncio.Event()
    world = World([TextDelta("half")], gate)
    conversation = await world.conversation()
    run = await world.turn(conversation.id, "doomed", stream=True)
    await world.backend.started.wait()
    await world.gateway.execute(ME, DeleteResponse(run.id))
    await run.wait()
    assert run.state.status == "cancelled"
    assert await world.items(conversation.id) == []
    world.backend.script, world.backend.gate = [TextDelta("ok"), Finish("stop")], None
    await (await world.turn(conversation.id, "next")).wait()
    assert texts(await world.items(conversation.id)) == ["next", "ok"]


async def test_a_failed_final_save_still_lets_the_conversation_go() -> None:
    world = World()
    conversation = await world.conversation()
    world.store.failing_finishes = 1
    run = await world.turn(conversation.id, "unsaved")
    await run.wait()
    assert run.state.status == "failed"
    assert run.error is not None
    assert run.error.code == "storage_unavailable"
    await world.settler.settled()
    first, retry = world.store.finishes
    assert first.turn is not None
    assert len(first.turn.items) == 2
    assert retry.status == "failed"
    assert retry.turn is not None
    assert retry.turn.items == []
    assert await world.items(conversation.id) == []
    await (await world.turn(conversation.id, "next")).wait()
    assert texts(await world.items(conversation.id)) == ["next", "answer"]


async def test_a_turn_ended_while_storage_is_away_lets_go_once_it_is_back(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """The final save and the next tries fail: the turn's row stays in progress, holding
    its conversation, until a try succeeds (a living owner's lease never lets another
    process end it)."""
    world = World()
    conversation = await world.conversation()
    world.store.failing_finishes = 4
    run = await world.turn(conversation.id, "unsaved")
    await run.wait()
    assert run.state.status == "failed"
    with pytest.raises(ConversationLocked):  # held while storage is away
        await world.turn(conversation.id, "next")
    await world.settler.settled()
    assert len(world.store.finishes) == 5
    assert f"storing the failed end of response {run.id} failed again" in caplog.text
    stored = await world.store.get(ME.tenant_id, run.id)
    assert stored is not None
    assert stored.status == "failed"
    await (await world.turn(conversation.id, "next")).wait()
    assert texts(await world.items(conversation.id)) == ["next", "answer"]


async def test_a_turn_on_an_unknown_or_deleted_conversation_is_not_found() -> None:
    world = World()
    with pytest.raises(ConversationNotFound) as caught:
        await world.turn("conv_nope", "hi")
    assert (caught.value.status, caught.value.param) == (404, "conversation")
    conversation = await world.conversation()
    await world.gateway.execute(ME, DeleteConversation(conversation.id))
    with pytest.raises(ConversationNotFound):
        await world.turn(conversation.id, "hi")
    assert world.backend.requests == []
    assert world.store.records == {}


async def test_conversation_items_of_unknown_types_are_kept_but_not_shown_to_a_chat_model(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """An upstream that does not speak Responses has no place for them: the model is sent
    the rest of the context, and the log says what it was not shown, once."""
    caplog.set_level(logging.INFO, logger=planning.__name__)
    world = World()
    conversation = await world.conversation("before")
    odd = {"type": "some_future_item", "payload": {"x": 1}}
    await world.gateway.execute(ME, AddConversationItems(conversation.id, [odd]))
    image = {"type": "image_generation"}
    run = await world.turn(conversation.id, "hi", settings=GenerationSettings(tools=[image]))
    await run.wait()
    assert run.state.status == "completed"
    [sent] = world.backend.requests
    assert [i["type"] for i in sent.items] == ["message", "message"]
    assert (sent.tools, sent.native_tools) == ([], [])
    assert run.state.settings.tools == [image]  # echoed and stored as declared
    held = await world.items(conversation.id)
    assert [i["type"] for i in held] == ["message", "some_future_item", "message", "message"]
    said = [r.getMessage() for r in caplog.records if r.name == planning.__name__]
    assert said == [
        "backend scripted: not shown to its model (its upstream API carries no such type): "
        "tool type 'image_generation', input item type 'some_future_item'"
    ]


async def test_a_gateway_without_conversations_knows_none() -> None:
    store = MemoryStore()
    router = Router([BackendEntry(ScriptedBackend([]), {}, catch_all=True)])
    gateway = Gateway(store, router, Loop(store), RunRegistry())
    with pytest.raises(NotFound) as caught:
        await gateway.execute(ME, GetConversation("conv_1"))
    assert caught.value.param == "conversation_id"
    command = CreateResponse(model="m", input=[user("x")], conversation_id="conv_1")
    with pytest.raises(NotFound) as caught:
        await gateway.execute(ME, command)
    assert caught.value.param == "conversation"


def _saves_held(world: World) -> asyncio.Event:
    """Hold every save of ``world``'s store until the event returned is set."""
    written = asyncio.Event()
    save = world.store.save

    async def slow_save(record: Any) -> None:
        await written.wait()
        await save(record)

    world.store.save = slow_save  # type: ignore[method-assign]
    return written


async def test_a_thread_whose_first_turn_is_refused_leaves_no_conversation() -> None:
    """A thread's create makes its conversation before the turn is admitted; a turn refused
    there (here a tool choice naming no declared tool) takes the conversation with it."""
    world = World()
    settings = GenerationSettings(tool_choice={"type": "function", "name": "missing"})
    command = CreateResponse(model="m", input=[user("hi")], settings=settings, thread=ThreadTurn())
    with pytest.raises(InvalidRequest):
        await world.gateway.execute(ME, command)
    assert world.conversations.stored == {}
    answered = await world.gateway.execute(
        ME, CreateResponse(model="m", input=[user("hi")], thread=ThreadTurn())
    )
    await answered.wait()
    assert list(world.conversations.stored) == [("default", answered.state.conversation_id)]


async def test_input_tokens_of_a_thread_turn_count_its_earlier_turns_and_system() -> None:
    """A count of a thread's continue counts what its turn would send: the system it
    inherits and the thread's items before the new turn; it holds and stores nothing."""
    world = World()
    system: list[Item] = [{"type": "message", "role": "system", "content": "y" * 400}]
    first = await world.gateway.execute(
        ME, CreateResponse(model="m", input=[user("x" * 400)], thread=ThreadTurn(system=system))
    )
    await first.wait()
    records, stored = dict(world.store.records), dict(world.conversations.stored)

    def count(thread: ThreadTurn | None) -> CountTokens:
        return CountTokens(CreateResponse(model="m", input=[user("q")], store=False, thread=thread))

    alone = await world.gateway.execute(ME, count(None))
    created = await world.gateway.execute(ME, count(ThreadTurn()))
    continued = ThreadTurn(previous_response_id=first.state.id, tools_given=False)
    within = await world.gateway.execute(ME, count(continued))

    assert created.input_tokens == alone.input_tokens
    assert within.input_tokens >= alone.input_tokens + 200  # 800 bytes, about 200 tokens
    assert (world.store.records, world.conversations.stored) == (records, stored)
    with pytest.raises(ThreadNotFound):
        await world.gateway.execute(ME, count(ThreadTurn(previous_response_id="resp_nope")))
    second = await world.gateway.execute(
        ME, CreateResponse(model="m", input=[user("r")], thread=replace(continued))
    )
    await second.wait()
    with pytest.raises(ThreadAlreadyContinued):  # as its turn would be
        await world.gateway.execute(ME, count(replace(continued)))
