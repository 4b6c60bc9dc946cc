"""A conversation's item ids through ``Gateway.execute``: an item kept under the id it
came with may not take one the conversation holds (refused as hosted, nothing written),
while an id only a deleted item had is no duplicate."""

from __future__ import annotations

import pytest

from stateway.core.commands import CreateResponse, ThreadTurn
from stateway.core.conversations.commands import AddConversationItems, DeleteConversationItem
from stateway.core.errors import DuplicateItem
from stateway.core.items import Item
from tests.core.test_conversations import ME, World, texts, user

CALL: Item = {
    "type": "local_shell_call",
    "id": "lsh_1",
    "call_id": "call_7",
    "action": {"type": "exec", "command": ["ls"], "env": {}},
    "status": "completed",
}


def output(item_id: str) -> Item:
    return {"type": "local_shell_call_output", "id": item_id, "output": "ok"}


async def test_a_turn_whose_input_names_an_item_of_its_conversation_is_refused() -> None:
    world = World()
    conversation = await world.conversation("hello", "again")
    held = (await world.items(conversation.id))[1]["id"]
    command = CreateResponse(
        model="m", input=[user("new"), user("hello", held)], conversation_id=conversation.id
    )
    with pytest.raises(DuplicateItem) as caught:
        await world.gateway.execute(ME, command)
    assert (caught.value.status, caught.value.code) == (400, "duplicate_item_id")
    assert caught.value.param == "input[1].id"
    assert caught.value.message == (
        f"Duplicate item found with id {held}. Remove duplicate items from your input and "
        "try again."
    )
    assert world.backend.requests == [], "refused before it ran"
    assert texts(await world.items(conversation.id)) == ["hello", "again"]
    run = await world.turn(conversation.id, "next")  # the conversation was never taken
    await run.wait()
    assert texts(await world.items(conversation.id))[2:] == ["next", "answer"]


async def test_a_deleted_items_id_is_no_duplicate_but_is_not_given_again() -> None:
    world = World()
    conversation = await world.conversation("hello", "doomed")
    doomed = (await world.items(conversation.id))[1]["id"]
    await world.gateway.execute(ME, DeleteConversationItem(conversation.id, doomed))
    command = CreateResponse(
        model="m", input=[user("edited", doomed)], conversation_id=conversation.id
    )
    await (await world.gateway.execute(ME, command)).wait()
    items = await world.items(conversation.id)
    assert texts(items) == ["hello", "edited", "answer"]
    assert items[1]["id"] != doomed


async def test_a_messages_thread_turn_is_not_held_to_its_conversations_ids() -> None:
    """A Messages turn names no items by id; one repeated is renamed when stored."""
    world = World()
    first = CreateResponse(model="m", input=[user("hi", "msg_1")], thread=ThreadTurn())
    run = await world.gateway.execute(ME, first)
    await run.wait()
    thread = ThreadTurn(previous_response_id=run.state.id)
    second = CreateResponse(model="m", input=[user("again", "msg_1")], thread=thread)
    await (await world.gateway.execute(ME, second)).wait()
    conversation_id = run.state.conversation_id
    assert conversation_id is not None
    items = await world.items(conversation_id)
    assert texts(items) == ["hi", "answer", "again", "answer"]
    assert len({item["id"] for item in items}) == 4


async def test_an_added_output_whose_id_the_conversation_holds_is_refused_whole() -> None:
    """An output's ``id`` names its call and is kept; one an item of the conversation
    already has is refused, and nothing of its batch is added."""
    world = World()
    conversation = await world.conversation()
    first = await world.gateway.execute(
        ME, AddConversationItems(conversation.id, [CALL, output("call_7")])
    )
    assert first.items[1]["id"] == "call_7"
    call = {**CALL, "call_id": "call_8"}
    with pytest.raises(DuplicateItem) as caught:
        await world.gateway.execute(
            ME,
            AddConversationItems(
                conversation.id, [call, {**output("call_7"), "call_id": "call_8"}]
            ),
        )
    assert caught.value.param == "items[1].id"
    assert len(await world.items(conversation.id)) == 2, "nothing half-written"
