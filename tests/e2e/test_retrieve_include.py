"""``GET /v1/responses/{id}`` with ``include`` (the SDK's ``include[]=...``), through the
real gateway and fake upstream with the official ``openai`` SDK: the output shows what a
create with that ``include`` shows (every storage and upstream API shape); and so do
the items of a conversation and a response's input items, listed or read with one."""

from __future__ import annotations

from typing import Any

import openai
import pytest
from openai import OpenAI
from openai.types.responses import Response, ResponseOutputMessage, ResponseReasoningItem

from tests.e2e.test_compaction import as_input, user

MODEL = "fake-model"
ENCRYPTED = "reasoning.encrypted_content"
LOGPROBS = "message.output_text.logprobs"


def _reasoning(response: Response) -> ResponseReasoningItem:
    [item] = [item for item in response.output if item.type == "reasoning"]
    assert isinstance(item, ResponseReasoningItem)
    return item


def _tokens(response: Response) -> list[Any]:
    [message] = [item for item in response.output if item.type == "message"]
    assert isinstance(message, ResponseOutputMessage)
    [part] = message.content
    assert part.type == "output_text"
    return list(part.logprobs or [])


def test_encrypted_content_comes_back_only_when_included(client: OpenAI) -> None:
    made = client.responses.create(
        model=MODEL, input="hi [[reason:the stored plan]]", include=[ENCRYPTED]
    )
    sealed = _reasoning(made).encrypted_content
    assert sealed is not None
    assert _reasoning(client.responses.retrieve(made.id)).encrypted_content is None
    again = client.responses.retrieve(made.id, include=[ENCRYPTED])
    assert _reasoning(again).encrypted_content == sealed


def test_a_response_made_without_the_include_is_sealed_as_it_is_read(client: OpenAI) -> None:
    """Its reasoning comes sealed, and the seal carries it into a stateless turn."""
    made = client.responses.create(model=MODEL, input="hi [[reason:a later secret]]")
    assert _reasoning(made).encrypted_content is None
    read = client.responses.retrieve(made.id, include=[ENCRYPTED])
    sealed = _reasoning(read).encrypted_content
    assert sealed is not None
    assert "secret" not in sealed
    assert _reasoning(read).content == _reasoning(made).content
    answer = client.responses.create(
        model=MODEL,
        input=[user("hi"), *as_input(read.output), user("[[echo]]")],  # type: ignore[list-item]
        store=False,
    )
    assert "reasoning: a later secret" in answer.output_text


def test_logprobs_come_back_only_when_included(client: OpenAI) -> None:
    made = client.responses.create(
        model=MODEL, input="some words", include=[LOGPROBS], top_logprobs=1
    )
    tokens = _tokens(made)
    assert tokens
    assert _tokens(client.responses.retrieve(made.id)) == []
    assert _tokens(client.responses.retrieve(made.id, include=[LOGPROBS])) == tokens
    both = client.responses.retrieve(made.id, include=[LOGPROBS, ENCRYPTED])
    assert _tokens(both) == tokens


def test_an_empty_include_entry_is_refused_as_on_create(client: OpenAI) -> None:
    made = client.responses.create(model=MODEL, input="hi")
    conversation = client.conversations.create(items=[user("hi")])  # type: ignore[list-item]
    item = client.conversations.items.list(conversation.id).data[0].id
    include: Any = [LOGPROBS, ""]
    reads = [
        lambda: client.responses.retrieve(made.id, include=include),
        lambda: client.responses.retrieve(made.id, include=include, stream=True),
        lambda: client.responses.input_items.list(made.id, include=include),
        lambda: client.conversations.items.list(conversation.id, include=include),
        lambda: client.conversations.items.retrieve(
            item, conversation_id=conversation.id, include=include
        ),
        lambda: client.conversations.items.create(
            conversation.id,
            items=[user("more")],
            include=include,  # type: ignore[list-item]
        ),
    ]
    for read in reads:
        with pytest.raises(openai.BadRequestError) as refused:
            read()
        assert refused.value.code == "invalid_value"
        assert refused.value.param == "include[1]"


def test_other_include_values_are_accepted_and_change_nothing(client: OpenAI) -> None:
    made = client.responses.create(model=MODEL, input="hi")
    read = client.responses.retrieve(
        made.id, include=["message.input_image.image_url", "web_search_call.action.sources"]
    )
    assert read.output == made.output


def _conversation_items(client: OpenAI, conversation: str, **include: Any) -> list[Any]:
    items = client.conversations.items.list(conversation, order="asc", **include).data
    one = client.conversations.items.retrieve(items[-1].id, conversation_id=conversation, **include)
    assert one == items[-1]
    return items


def test_a_conversations_items_show_what_the_include_asks_for(client: OpenAI) -> None:
    """Its reasoning sealed only with ``reasoning.encrypted_content`` (sealed as it is read
    for a turn made without it), its tokens only with ``message.output_text.logprobs``,
    whatever the turn that made them asked for."""
    conversation = client.conversations.create().id
    client.responses.create(
        model=MODEL,
        input="hi [[reason:kept plan]]",
        conversation=conversation,
        include=[ENCRYPTED, LOGPROBS],
        top_logprobs=1,
    )
    client.responses.create(
        model=MODEL, input="more [[reason:later plan]]", conversation=conversation
    )

    def shown(**include: Any) -> tuple[list[str | None], list[bool]]:
        items = _conversation_items(client, conversation, **include)
        seals = [item.encrypted_content for item in items if item.type == "reasoning"]
        tokens = [
            bool(part.logprobs)
            for item in items
            if item.type == "message" and item.role == "assistant"
            for part in item.content
        ]
        return seals, tokens

    seals, tokens = shown()
    assert (seals, tokens) == ([None, None], [False, False])
    seals, tokens = shown(include=[ENCRYPTED, LOGPROBS])
    assert all(seals)
    assert tokens == [True, False]
    listed = client.conversations.items.list(conversation, order="asc", include=[ENCRYPTED])
    [sealed] = [item for item in listed.data if item.type == "reasoning"][:1]
    resent: Any = as_input([sealed])
    added = client.conversations.items.create(conversation, items=resent)
    assert [item.encrypted_content for item in added.data] == [None]  # type: ignore[union-attr]
    added = client.conversations.items.create(conversation, items=resent, include=[ENCRYPTED])
    assert [item.encrypted_content for item in added.data] == [sealed.encrypted_content]  # type: ignore[union-attr]
    replayed = [*as_input(listed.data), user("[[echo]]")]
    answer = client.responses.create(model=MODEL, input=replayed, store=False)  # type: ignore[arg-type]
    assert "reasoning: later plan" in answer.output_text  # the seal made as it was read


def test_input_items_show_what_the_include_asks_for(client: OpenAI) -> None:
    """A reasoning item sent back sealed shows its seal only with the include; one sent
    without, sealed as it is read."""
    made = client.responses.create(
        model=MODEL, input="hi [[reason:a plan]]", include=[ENCRYPTED], store=False
    )
    sealed = _reasoning(made).encrypted_content
    assert sealed is not None
    bare = {k: v for k, v in as_input([_reasoning(made)])[0].items() if k != "encrypted_content"}
    again = client.responses.create(
        model=MODEL, input=[user("hi"), *as_input(made.output), user("next")]
    )
    other = client.responses.create(model=MODEL, input=[user("hi"), bare, user("next")])

    def seals(response_id: str, **include: Any) -> list[str | None]:
        items = client.responses.input_items.list(response_id, **include).data
        return [item.encrypted_content for item in items if item.type == "reasoning"]

    assert seals(again.id) == [None]
    assert seals(again.id, include=[ENCRYPTED]) == [sealed]
    assert seals(other.id) == [None]
    [read] = seals(other.id, include=[ENCRYPTED])
    assert read is not None
    assert "plan" not in read
