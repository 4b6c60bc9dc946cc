"""The Conversations API, and responses as turns of a conversation, through the official
``openai`` SDK (sync and async), over SQLite and PostgreSQL and both upstream shapes."""

from __future__ import annotations

import asyncio
from typing import Any

import openai
import pytest
from openai import AsyncOpenAI, OpenAI
from openai.types.conversations import Conversation, ConversationDeletedResource, Message

MODEL = "fake-model"
SLOW = "[[slow:150]] [[words:8]]"
"""Over a second of streamed output: a turn certainly still running while a test acts."""


def user(text: str) -> dict[str, Any]:
    return {"type": "message", "role": "user", "content": text}


def texts(items: list[Any]) -> list[str]:
    return [item.content[0].text for item in items]


def test_create_retrieve_update_delete(client: OpenAI) -> None:
    created = client.conversations.create(items=[user("hello")], metadata={"topic": "tea"})
    assert isinstance(created, Conversation)
    assert created.id.startswith("conv_")
    assert created.object == "conversation"
    assert created.metadata == {"topic": "tea"}
    assert created.created_at > 0

    assert client.conversations.retrieve(created.id) == created
    updated = client.conversations.update(created.id, metadata={"topic": "coffee", "n": "2"})
    assert updated.metadata == {"topic": "coffee", "n": "2"}
    assert client.conversations.retrieve(created.id).metadata == updated.metadata

    deleted = client.conversations.delete(created.id)
    assert isinstance(deleted, ConversationDeletedResource)
    assert (deleted.id, deleted.object, deleted.deleted) == (
        created.id,
        "conversation.deleted",
        True,
    )
    for attempt in (
        lambda: client.conversations.retrieve(created.id),
        lambda: client.conversations.delete(created.id),
        lambda: client.conversations.update(created.id, metadata={}),
        lambda: client.conversations.items.list(created.id),
        lambda: client.conversations.items.create(created.id, items=[user("x")]),  # type: ignore[list-item]
        lambda: client.responses.create(model=MODEL, input="x", conversation=created.id),
    ):
        with pytest.raises(openai.NotFoundError) as caught:
            attempt()
        assert created.id in caught.value.message


def test_a_cursor_naming_no_item_is_an_empty_page_on_both_item_lists(client: OpenAI) -> None:
    """A conversation's items and a response's input items take an unknown ``after``
    alike: an empty last page, on which the SDK's auto-pager stops."""
    conversation = client.conversations.create(items=[user("one")])
    response = client.responses.create(model=MODEL, input=[user("two")])  # type: ignore[list-item]
    pages = [
        client.conversations.items.list(conversation.id, after="msg_unknown"),
        client.responses.input_items.list(response.id, after="msg_unknown"),
        client.responses.input_items.list(response.id, after="x" * 300),
    ]
    for page in pages:
        assert (page.data, page.has_more) == ([], False)
    assert list(client.responses.input_items.list(response.id, after="msg_unknown")) == []


def test_items_create_list_retrieve_delete(client: OpenAI) -> None:
    conversation = client.conversations.create()
    added = client.conversations.items.create(
        conversation.id,
        items=[user(f"message {n}") for n in range(5)],  # type: ignore[misc]
        include=["message.output_text.logprobs"],
    )
    assert added.object == "list"
    assert len(added.data) == 5
    assert all(isinstance(item, Message) for item in added.data)
    first = added.data[0]
    assert isinstance(first, Message)
    assert first.id.startswith("msg_")
    assert (first.status, first.role) == ("completed", "user")
    assert first.content[0].type == "input_text"
    assert (added.first_id, added.last_id) == (first.id, added.data[-1].id)
    assert added.has_more is False

    newest = client.conversations.items.list(conversation.id, limit=2)
    assert texts(newest.data) == ["message 4", "message 3"], "newest first by default"
    assert newest.has_more is True
    every = list(client.conversations.items.list(conversation.id, limit=2, order="asc"))
    assert texts(every) == [f"message {n}" for n in range(5)]
    after = client.conversations.items.list(
        conversation.id, after=first.id, order="asc", include=["message.input_image.image_url"]
    )
    assert texts(after.data) == [f"message {n}" for n in range(1, 5)]

    assert client.conversations.items.retrieve(first.id, conversation_id=conversation.id) == first
    remaining = client.conversations.items.delete(first.id, conversation_id=conversation.id)
    assert isinstance(remaining, Conversation)
    assert remaining.id == conversation.id
    with pytest.raises(openai.NotFoundError):
        client.conversations.items.retrieve(first.id, conversation_id=conversation.id)
    with pytest.raises(openai.NotFoundError):
        client.conversations.items.delete(first.id, conversation_id=conversation.id)
    assert texts(list(client.conversations.items.list(conversation.id, order="asc"))) == [
        f"message {n}" for n in range(1, 5)
    ]


def test_deleting_every_item_while_auto_paging_reaches_them_all(client: OpenAI) -> None:
    conversation = client.conversations.create(items=[user(f"m{n}") for n in range(7)])
    deleted = []
    for item in client.conversations.items.list(conversation.id, limit=3, order="asc"):
        client.conversations.items.delete(item.id, conversation_id=conversation.id)
        deleted.append(item.content[0].text)  # type: ignore[union-attr]
    assert deleted == [f"m{n}" for n in range(7)], "each page's cursor was deleted by then"
    assert client.conversations.items.list(conversation.id).data == []


def test_a_second_turn_sees_the_first(client: OpenAI) -> None:
    conversation = client.conversations.create(items=[user("my name is Ada")])
    first = client.responses.create(model=MODEL, input="I like tea", conversation=conversation.id)
    assert first.conversation is not None
    assert first.conversation.id == conversation.id
    second = client.responses.create(
        model=MODEL, input="[[echo]]", conversation={"id": conversation.id}
    )
    assert second.output_text.splitlines() == [
        "user: my name is Ada",
        "user: I like tea",
        "assistant: Hello! You said: I like tea",
        "user: [[echo]]",
    ]
    assert second.previous_response_id is None
    retrieved = client.responses.retrieve(second.id)
    assert retrieved.conversation is not None
    assert retrieved.conversation.id == conversation.id

    items = list(client.conversations.items.list(conversation.id, order="asc"))
    assert [(item.type, item.role) for item in items] == [  # type: ignore[union-attr]
        ("message", "user"),
        ("message", "user"),
        ("message", "assistant"),
        ("message", "user"),
        ("message", "assistant"),
    ]
    assert items[2].id == first.output[0].id, "a turn's output keeps its id"
    assert [i.id for i in client.responses.input_items.list(second.id)] != []


def test_a_deleted_item_leaves_later_turns_but_not_earlier_responses(client: OpenAI) -> None:
    conversation = client.conversations.create(items=[user("forget this"), user("keep this")])
    first = client.responses.create(model=MODEL, input="turn one", conversation=conversation.id)
    doomed = client.conversations.items.list(conversation.id, order="asc").data[0]
    client.conversations.items.delete(doomed.id, conversation_id=conversation.id)
    echo = client.responses.create(model=MODEL, input="[[echo]]", conversation=conversation.id)
    assert "forget this" not in echo.output_text
    assert echo.output_text.splitlines()[0] == "user: keep this"
    assert texts(client.responses.input_items.list(first.id).data) == ["turn one"]
    assert client.responses.retrieve(first.id).output_text == "Hello! You said: turn one"


def test_an_item_reference_names_an_item_added_to_a_conversation(client: OpenAI) -> None:
    """Items the Conversations API added have ids of their own, and a reference to one
    stands for it (as hosted), until it or its conversation is deleted."""
    conversation = client.conversations.create(items=[user("my name is Ada")])
    [created] = client.conversations.items.list(conversation.id).data
    added = client.conversations.items.create(
        conversation.id,
        items=[user("I like tea"), user("and cake"), user("and pie")],  # type: ignore[list-item]
    )
    tea, cake, pie = (item.id for item in added.data)

    def reference(item_id: str) -> dict[str, str]:
        return {"type": "item_reference", "id": item_id}

    def echo(item_id: str) -> list[str]:
        response = client.responses.create(
            model=MODEL,
            input=[reference(item_id), user("[[echo]]")],  # type: ignore[list-item]
        )
        return response.output_text.splitlines()

    assert echo(created.id) == ["user: my name is Ada", "user: [[echo]]"]
    elsewhere = client.conversations.create(items=[reference(tea)])  # type: ignore[list-item]
    [copy] = client.conversations.items.list(elsewhere.id).data
    assert texts([copy]) == ["I like tea"]
    assert copy.id != tea, "an added item gets an id of its own"
    assert echo(copy.id)[0] == "user: I like tea"

    client.conversations.items.delete(pie, conversation_id=conversation.id)
    client.conversations.delete(conversation.id)
    for gone in (pie, cake, tea):
        with pytest.raises(openai.NotFoundError) as caught:
            echo(gone)
        assert caught.value.body["param"] == "input[0]"  # type: ignore[index]
        assert gone in caught.value.message
    assert echo(copy.id)[0] == "user: I like tea"
    assert echo(created.id)[0] == "user: my name is Ada", "a response took it in, as input"


def test_a_failed_turn_appends_nothing_and_lets_the_conversation_go(client: OpenAI) -> None:
    conversation = client.conversations.create()
    with pytest.raises(openai.APIStatusError):
        client.responses.create(model=MODEL, input="[[error:500]]", conversation=conversation.id)
    assert client.conversations.items.list(conversation.id).data == []
    client.responses.create(model=MODEL, input="again", conversation=conversation.id)
    assert texts(client.conversations.items.list(conversation.id, order="asc").data) == [
        "again",
        "Hello! You said: again",
    ]


def test_an_unstored_turn_reads_the_conversation_and_adds_nothing(client: OpenAI) -> None:
    conversation = client.conversations.create(items=[user("earlier")])
    unstored = client.responses.create(
        model=MODEL, input="now", conversation=conversation.id, store=False
    )
    assert unstored.status == "completed"
    assert unstored.conversation is not None
    assert unstored.conversation.id == conversation.id
    assert texts(client.conversations.items.list(conversation.id).data) == ["earlier"]
    with pytest.raises(openai.NotFoundError):
        client.responses.retrieve(unstored.id)
    with client.responses.stream(
        model=MODEL, input="streamed", conversation=conversation.id, store=False
    ) as stream:
        streamed = stream.get_final_response()
    assert (streamed.status, streamed.store) == ("completed", False)
    assert texts(client.conversations.items.list(conversation.id).data) == ["earlier"]
    with pytest.raises(openai.BadRequestError) as caught:  # a background run is stored
        client.responses.create(
            model=MODEL, input="x", conversation=conversation.id, store=False, background=True
        )
    assert caught.value.body["param"] == "background"  # type: ignore[index]


def test_request_errors(client: OpenAI) -> None:
    conversation = client.conversations.create()
    previous = client.responses.create(model=MODEL, input="x")
    with pytest.raises(openai.BadRequestError) as caught:
        client.responses.create(
            model=MODEL, input="x", conversation=conversation.id, previous_response_id=previous.id
        )
    assert caught.value.code == "mutually_exclusive_parameters"
    with pytest.raises(openai.NotFoundError) as missing:
        client.responses.create(model=MODEL, input="x", conversation="conv_missing")
    assert missing.value.body["param"] == "conversation"  # type: ignore[index]
    with pytest.raises(openai.BadRequestError) as caught:
        client.responses.create(model=MODEL, input="x", conversation="session-42")
    assert (caught.value.code, caught.value.body["param"]) == ("invalid_value", "conversation")  # type: ignore[index]

    too_many = [user(str(n)) for n in range(21)]
    with pytest.raises(openai.BadRequestError) as caught:
        client.conversations.items.create(conversation.id, items=too_many)  # type: ignore[arg-type]
    assert caught.value.code == "array_above_max_length"
    assert caught.value.body["param"] == "items"  # type: ignore[index]
    with pytest.raises(openai.BadRequestError) as caught:
        client.conversations.create(items=too_many)  # type: ignore[arg-type]
    assert caught.value.code == "array_above_max_length"
    with pytest.raises(openai.BadRequestError) as caught:
        client.conversations.create(metadata={f"k{n}": "v" for n in range(17)})
    assert caught.value.body["param"] == "metadata"  # type: ignore[index]
    with pytest.raises(openai.BadRequestError) as caught:
        client.conversations.create(safety_identifier="s" * 129)
    assert caught.value.code == "string_above_max_length"
    assert caught.value.body["param"] == "safety_identifier"  # type: ignore[index]
    assert client.conversations.create(safety_identifier="sid").id.startswith("conv_")
    with pytest.raises(openai.BadRequestError) as caught:
        client.conversations.items.list(conversation.id, limit=101)
    assert caught.value.body["param"] == "limit"  # type: ignore[index]
    with pytest.raises(openai.NotFoundError):
        client.conversations.items.retrieve("msg_missing", conversation_id=conversation.id)
    orphan = {"type": "function_call_output", "call_id": "call_nope", "output": "x"}
    with pytest.raises(openai.BadRequestError) as caught:
        client.conversations.items.create(conversation.id, items=[user("a"), orphan])  # type: ignore[list-item]
    assert caught.value.code == "tool_call_not_found"
    assert caught.value.body["param"] == "items[1].call_id"  # type: ignore[index]
    assert client.conversations.items.list(conversation.id).data == [], "nothing half-written"


def test_a_compaction_trigger_is_not_added_to_a_conversation(client: OpenAI) -> None:
    """No conversation item type is a trigger (the SDK would list one as a message): it
    compacts only as a turn's last input item, which appends the ``compaction`` item."""
    conversation = client.conversations.create(items=[user("hello")])
    trigger: Any = {"type": "compaction_trigger"}
    with pytest.raises(openai.BadRequestError) as appended:
        client.conversations.items.create(conversation.id, items=[user("a"), trigger])
    with pytest.raises(openai.BadRequestError) as created:
        client.conversations.create(items=[trigger])
    for caught, param in ((appended, "items[1].type"), (created, "items[0].type")):
        assert (caught.value.code, caught.value.body["param"]) == ("invalid_value", param)  # type: ignore[index]
    assert texts(client.conversations.items.list(conversation.id).data) == ["hello"]


async def test_racing_turns_let_one_in_and_do_not_interleave(async_client: AsyncOpenAI) -> None:
    async with async_client:
        conversation = await async_client.conversations.create()

        async def turn(name: str) -> str:
            stream = await async_client.responses.create(
                model=MODEL, input=f"{name} {SLOW}", conversation=conversation.id, stream=True
            )
            async for _ in stream:
                pass
            return name

        results = await asyncio.gather(turn("alpha"), turn("beta"), return_exceptions=True)
        [winner] = [r for r in results if isinstance(r, str)]
        [refused] = [r for r in results if isinstance(r, BaseException)]
        assert isinstance(refused, openai.ConflictError)
        assert refused.status_code == 409
        assert refused.code == "conversation_locked"
        assert refused.body == {  # type: ignore[comparison-overlap]
            "message": "Another process is currently operating on this conversation. "
            "Please retry in a few seconds.",
            "type": "invalid_request_error",
            "param": "conversation",
            "code": "conversation_locked",
        }
        page = await async_client.conversations.items.list(conversation.id, order="asc")
        assert [(item.role, item.content[0].text.split()[0]) for item in page.data] == [  # type: ignore[union-attr]
            ("user", winner),
            ("assistant", "w1"),
        ]


async def test_a_turn_refused_while_another_streams(async_client: AsyncOpenAI) -> None:
    async with async_client:
        conversation = await async_client.conversations.create()
        stream = await async_client.responses.create(
            model=MODEL, input=f"first {SLOW}", conversation=conversation.id, stream=True
        )
        events = aiter(stream)
        assert (await anext(events)).type == "response.created"
        with pytest.raises(openai.ConflictError):
            await async_client.responses.create(
                model=MODEL, input="second", conversation=conversation.id
            )
        with pytest.raises(openai.ConflictError):
            await async_client.conversations.items.create(
                conversation.id,
                items=[user("meanwhile")],  # type: ignore[list-item]
            )
        async for _ in events:
            pass
        second = await async_client.responses.create(
            model=MODEL, input="second", conversation=conversation.id
        )
        assert second.status == "completed"
        page = await async_client.conversations.items.list(conversation.id, order="asc")
        assert [item.content[0].text.split()[0] for item in page.data] == [  # type: ignore[union-attr]
            "first",
            "w1",
            "second",
            "Hello!",
        ]


def test_list_query_refusals_are_worded_as_hosted(client: OpenAI) -> None:
    """Both item listings refuse a bad ``limit`` or ``order`` as hosted refuses a bad value:
    ``-1`` is below the bound, a word is not an integer, ``order`` lists its values."""
    conversation = client.conversations.create()
    response = client.responses.create(model=MODEL, input="x")
    listings = [
        lambda query: client.conversations.items.list(conversation.id, extra_query=query),
        lambda query: client.responses.input_items.list(response.id, extra_query=query),
    ]
    refusals = [
        ({"limit": "-1"}, "integer_below_min_value", "Expected a value >= 1, but got -1"),
        ({"limit": "ten"}, "invalid_type", "expected an integer, but got a string instead."),
        ({"order": "up"}, "invalid_value", "Supported values are: 'asc' and 'desc'."),
    ]
    for listing in listings:
        for query, code, words in refusals:
            with pytest.raises(openai.BadRequestError) as caught:
                listing(query)
            assert (caught.value.code, caught.value.body["param"]) == (code, *query)  # type: ignore[index]
            assert words in caught.value.message
