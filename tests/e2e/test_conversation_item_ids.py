"""A conversation's item ids through the official ``openai`` SDK, on SQLite and
PostgreSQL: no two items share one, so the SDK's auto-pager reaches every item once;
what would repeat one is refused as hosted refuses it, and writes nothing."""

from __future__ import annotations

from itertools import islice
from typing import Any

import openai
import pytest
from openai import OpenAI

MODEL = "fake-model"


def user(text: str, item_id: str | None = None) -> dict[str, Any]:
    item: dict[str, Any] = {"type": "message", "role": "user", "content": text}
    if item_id is not None:
        item["id"] = item_id
    return item


def shell_call(call_id: str) -> dict[str, Any]:
    action = {"type": "exec", "command": ["ls"], "env": {}}
    return {"type": "local_shell_call", "call_id": call_id, "status": "completed", "action": action}


def shell_output(call_id: str) -> dict[str, Any]:
    """A ``local_shell_call_output``, whose ``id`` names its call (as the spec has it)."""
    return {"type": "local_shell_call_output", "id": call_id, "output": "ok"}


def paged(client: OpenAI, conversation_id: str, order: Any) -> list[str]:
    """Every id the auto-pager hands out one item a page, stopped well past the end."""
    pager = client.conversations.items.list(conversation_id, limit=1, order=order)
    return [item.id for item in islice(pager, 20)]


def check_paged_once(client: OpenAI, conversation_id: str, count: int) -> None:
    ascending = paged(client, conversation_id, "asc")
    assert len(ascending) == len(set(ascending)) == count, ascending
    assert paged(client, conversation_id, "desc") == ascending[::-1]


def test_what_would_repeat_an_id_is_refused_and_every_item_is_paged_once(
    client: OpenAI,
) -> None:
    conversation = client.conversations.create()
    client.responses.create(
        model=MODEL,
        input=[user("hello", "msg_shared")],  # type: ignore[list-item]
        conversation=conversation.id,
    )
    with pytest.raises(openai.BadRequestError) as caught:  # the output's id is its call's
        client.conversations.items.create(
            conversation.id,
            items=[shell_call("msg_shared"), shell_output("msg_shared")],  # type: ignore[list-item]
        )
    assert (caught.value.code, caught.value.body["param"]) == ("duplicate_item_id", "items[1].id")  # type: ignore[index]
    assert caught.value.body["message"] == (  # type: ignore[index]
        "Duplicate item found with id msg_shared. Remove duplicate items from your input and "
        "try again."
    )
    with pytest.raises(openai.BadRequestError) as caught:  # a turn resending an item
        client.responses.create(
            model=MODEL,
            input=[user("new"), user("hello", "msg_shared")],  # type: ignore[list-item]
            conversation=conversation.id,
        )
    assert (caught.value.code, caught.value.body["param"]) == ("duplicate_item_id", "input[1].id")  # type: ignore[index]
    reference = {"type": "item_reference", "id": "msg_shared"}
    with pytest.raises(openai.BadRequestError) as caught:  # or a reference to one
        client.responses.create(
            model=MODEL,
            input=[reference],  # type: ignore[list-item]
            conversation=conversation.id,
        )
    assert caught.value.code == "duplicate_item_id"
    client.conversations.items.create(conversation.id, items=[user("after")])  # type: ignore[list-item]

    check_paged_once(client, conversation.id, 3)  # nothing half-written
    ended = client.responses.create(model=MODEL, input="next", conversation=conversation.id)
    assert ended.status == "completed", "no refusal left the conversation taken"
    check_paged_once(client, conversation.id, 5)


def test_an_id_only_a_deleted_item_had_is_no_duplicate_and_not_given_again(
    client: OpenAI,
) -> None:
    conversation = client.conversations.create(items=[user("hello")])  # type: ignore[list-item]
    client.conversations.items.create(
        conversation.id,
        items=[shell_call("call_9"), shell_output("call_9")],  # type: ignore[list-item]
    )
    client.conversations.items.delete("call_9", conversation_id=conversation.id)
    again = client.conversations.items.create(
        conversation.id,
        items=[shell_output("call_9"), user("after")],  # type: ignore[list-item]
    )
    answer = again.data[0]
    assert answer.id != "call_9"
    assert answer.model_extra == {"call_id": "call_9"}, "it answers its call by call_id"
    turn = client.responses.create(
        model=MODEL,
        input=[user("[[echo]]", "call_9")],  # type: ignore[list-item]
        conversation=conversation.id,
    )
    assert turn.status == "completed"
    items = client.conversations.items.list(conversation.id, order="asc").data
    assert "call_9" not in [item.id for item in items]
    check_paged_once(client, conversation.id, len(items))
    cursor = client.conversations.items.list(conversation.id, after="call_9", order="asc")
    assert [item.id for item in cursor.data] == [item.id for item in items[2:]], (
        "a cursor naming the deleted item goes on after it"
    )
