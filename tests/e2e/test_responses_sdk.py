"""The Responses API through the official ``openai`` SDK, sync and async."""

from __future__ import annotations

import json

import openai
import pytest
from openai import AsyncOpenAI, OpenAI
from openai.types.responses import Response, ResponseFunctionToolCall
from openai.types.responses.response_item_list import ResponseItemList

MODEL = "fake-model"
WEATHER_TOOL = {
    "type": "function",
    "name": "get_weather",
    "description": "Weather for a city",
    "parameters": {"type": "object", "properties": {"city": {"type": "string"}}},
}


def test_create_retrieve_input_items_delete(client: OpenAI) -> None:
    response = client.responses.create(model=MODEL, input="hi there", metadata={"k": "v"})
    assert isinstance(response, Response)
    assert response.status == "completed"
    assert response.output_text == "Hello! You said: hi there"
    assert response.usage is not None
    assert response.usage.total_tokens == response.usage.input_tokens + response.usage.output_tokens
    assert response.usage.output_tokens > 0
    assert response.metadata == {"k": "v"}
    assert response.store is True

    stored = client.responses.retrieve(response.id)
    assert stored.id == response.id
    assert stored.output_text == response.output_text
    assert stored.usage == response.usage

    items = client.responses.input_items.list(response.id)
    assert [item.type for item in items.data] == ["message"]
    assert items.data[0].content[0].text == "hi there"  # type: ignore[union-attr]

    deleted = client.responses.delete(response.id)
    assert deleted is None
    with pytest.raises(openai.NotFoundError):
        client.responses.retrieve(response.id)
    with pytest.raises(openai.NotFoundError):
        client.responses.delete(response.id)


def test_deleting_a_response_keeps_the_chains_that_went_on_from_it(client: OpenAI) -> None:
    first = client.responses.create(model=MODEL, input="My name is Ada.")
    second = client.responses.create(model=MODEL, input="Noted?", previous_response_id=first.id)
    client.responses.delete(first.id)
    with pytest.raises(openai.BadRequestError, match="not found"):
        client.responses.create(model=MODEL, input="again", previous_response_id=first.id)
    third = client.responses.create(
        model=MODEL, input="[[echo]] And my name?", previous_response_id=second.id
    )
    assert "My name is Ada." in third.output_text  # the deleted turn is the later one's context


def test_input_items_pagination(client: OpenAI) -> None:
    response = client.responses.create(
        model=MODEL,
        input=[{"role": "user", "content": f"message {i}"} for i in range(5)],
    )
    ordered = client.responses.input_items.list(response.id, order="asc", limit=2)
    assert [item.content[0].text for item in ordered.data] == ["message 0", "message 1"]  # type: ignore[union-attr]
    assert ordered.has_more is True
    every = [
        item.content[0].text
        for item in client.responses.input_items.list(response.id, order="asc", limit=2)
    ]  # type: ignore[union-attr]
    assert every == [f"message {i}" for i in range(5)]
    newest = client.responses.input_items.list(response.id, limit=1)
    assert newest.data[0].content[0].text == "message 4"  # type: ignore[union-attr]


def test_the_auto_pager_reaches_input_items_of_every_type(client: OpenAI) -> None:
    """An item of a type the gateway does not model (``additional_tools``) is listed under
    an id, as every item is: the SDK's auto-pager goes on from the last item's id, and
    stopped at one without, leaving the rest unlisted. A conversation keeps the turn's
    input under the same ids."""
    offer = {"type": "additional_tools", "role": "developer", "tools": [WEATHER_TOOL]}
    given = [{"role": "user", "content": "one"}, offer, {"role": "user", "content": "two"}]
    conversation = client.conversations.create()
    response = client.responses.create(model=MODEL, input=given, conversation=conversation.id)  # type: ignore[arg-type]
    kinds = ["message", "additional_tools", "message"]
    for order, expected in (("asc", kinds), ("desc", kinds[::-1])):
        paged = list(client.responses.input_items.list(response.id, order=order, limit=1))  # type: ignore[arg-type]
        assert [item.type for item in paged] == expected
    raw = client.responses.input_items.with_raw_response.list(response.id, order="asc")
    page = ResponseItemList.model_validate(json.loads(raw.text))  # the SDK's strict model
    ids = [item.id for item in page.data]
    assert all(ids)
    assert page.last_id == ids[-1]
    held = client.conversations.items.list(conversation.id, order="asc", limit=3)
    assert [item.id for item in held.data] == ids


def test_previous_response_rebuilds_context_but_not_instructions(client: OpenAI) -> None:
    first = client.responses.create(model=MODEL, input="my name is Ada", instructions="Be terse.")
    second = client.responses.create(
        model=MODEL, input="and I like tea", previous_response_id=first.id
    )
    third = client.responses.create(
        model=MODEL, input="[[echo]]", previous_response_id=second.id, instructions="New rules."
    )
    transcript = third.output_text.splitlines()
    assert transcript[0] in ("system: New rules.", "instructions: New rules.")
    assert "Be terse." not in third.output_text
    assert transcript[1:] == [
        "user: my name is Ada",
        "assistant: Hello! You said: my name is Ada",
        "user: and I like tea",
        "assistant: Hello! You said: and I like tea",
        "user: [[echo]]",
    ]
    assert third.previous_response_id == second.id
    assert third.instructions == "New rules."


def test_function_tool_round_trip(client: OpenAI) -> None:
    first = client.responses.create(
        model=MODEL,
        input='weather? [[tool:get_weather:{"city": "Paris"}]] '
        '[[tool:get_weather:{"city": "Oslo"}]]',
        tools=[WEATHER_TOOL],  # type: ignore[list-item]
    )
    calls = [item for item in first.output if isinstance(item, ResponseFunctionToolCall)]
    assert [json.loads(call.arguments)["city"] for call in calls] == ["Paris", "Oslo"]
    assert len({call.call_id for call in calls}) == 2
    assert first.tools[0].name == "get_weather"  # type: ignore[union-attr]

    second = client.responses.create(
        model=MODEL,
        previous_response_id=first.id,
        input=[
            {"type": "function_call_output", "call_id": calls[0].call_id, "output": "sunny"},
            {"type": "function_call_output", "call_id": calls[1].call_id, "output": "snow"},
        ],
        tools=[WEATHER_TOOL],  # type: ignore[list-item]
    )
    assert second.output_text.splitlines() == ["Tool said: sunny", "Tool said: snow"]


def test_function_output_without_a_pending_call_is_rejected(client: OpenAI) -> None:
    with pytest.raises(openai.BadRequestError) as caught:
        client.responses.create(
            model=MODEL,
            input=[{"type": "function_call_output", "call_id": "call_nope", "output": "x"}],
        )
    assert caught.value.body["param"] == "input[0].call_id"  # type: ignore[index]


def test_a_tool_choice_forcing_an_undeclared_tool_is_rejected(client: OpenAI) -> None:
    for choice in ({"type": "function", "name": "zzz"}, "required"):
        with pytest.raises(openai.BadRequestError) as caught:
            client.responses.create(
                model=MODEL,
                input="x",
                tools=[] if choice == "required" else [WEATHER_TOOL],  # type: ignore[list-item]
                tool_choice=choice,  # type: ignore[arg-type]
            )
        assert caught.value.body["param"] == "tool_choice"  # type: ignore[index]


def test_store_false_is_not_retrievable_nor_continuable(client: OpenAI) -> None:
    response = client.responses.create(model=MODEL, input="secret", store=False)
    assert response.store is False
    with pytest.raises(openai.NotFoundError):
        client.responses.retrieve(response.id)
    with pytest.raises(openai.BadRequestError) as caught:
        client.responses.create(model=MODEL, input="more", previous_response_id=response.id)
    assert caught.value.code == "previous_response_not_found"


def test_item_references_name_stored_items(client: OpenAI) -> None:
    """The Vercel AI SDK (``store`` on, its default) resends an earlier response's
    reasoning and messages as ``item_reference`` items: each stands for the stored item."""
    first = client.responses.create(
        model=MODEL,
        input='weather? [[reason:cloudy]] [[tool:get_weather:{"city": "Oslo"}]]',
        tools=[WEATHER_TOOL],  # type: ignore[list-item]
    )
    reasoning, call = first.output
    assert isinstance(call, ResponseFunctionToolCall)
    user = {"role": "user", "content": 'weather? [[tool:get_weather:{"city": "Oslo"}]]'}
    second = client.responses.create(
        model=MODEL,
        input=[
            user,
            {"type": "item_reference", "id": reasoning.id},
            {
                "type": "function_call",
                "call_id": call.call_id,
                "name": call.name,
                "arguments": call.arguments,
            },
            {"type": "function_call_output", "call_id": call.call_id, "output": "sunny"},
        ],  # type: ignore[list-item]
        tools=[WEATHER_TOOL],  # type: ignore[list-item]
    )
    assert second.output_text == "Tool said: sunny"
    third = client.responses.create(
        model=MODEL,
        input=[
            user,
            {"type": "item_reference", "id": second.output[0].id},
            {"role": "user", "content": "[[echo]]"},
        ],  # type: ignore[list-item]
    )
    assert third.output_text.splitlines()[1:] == [
        "assistant: Tool said: sunny",
        "user: [[echo]]",
    ]
    listed = client.responses.input_items.list(third.id, order="asc")
    assert [item.type for item in listed.data] == ["message", "message", "message"]

    hidden = client.responses.create(model=MODEL, input="x", store=False)
    for missing in (hidden.output[0].id, "msg_nope"):
        with pytest.raises(openai.NotFoundError) as caught:
            client.responses.create(
                model=MODEL,
                input=[{"type": "item_reference", "id": missing}, user],  # type: ignore[list-item]
            )
        assert caught.value.body["param"] == "input[0]"  # type: ignore[index]


def test_a_reasoning_item_sent_back_without_its_text_gets_the_stored_text(
    client: OpenAI,
) -> None:
    """LangChain keeps a streamed reasoning item's id and ``encrypted_content`` only: the
    model still sees the reasoning, as stored under that id."""
    first = client.responses.create(
        model=MODEL,
        input="[[reason:cloudy skies]] hi",
        include=["reasoning.encrypted_content"],
    )
    reasoning, message = first.output
    sent_back: list[dict[str, object]] = [
        {"type": "reasoning", "id": reasoning.id, "summary": [], **sealed}
        for sealed in ({"encrypted_content": reasoning.encrypted_content}, {})
    ]
    for item in sent_back:
        echoed = client.responses.create(
            model=MODEL,
            input=[
                {"role": "user", "content": "hi"},
                item,
                {"role": "assistant", "content": message.content[0].text},  # type: ignore[union-attr]
                {"role": "user", "content": "[[echo]]"},
            ],
            store=False,
        )
        assert "reasoning: cloudy skies" in echoed.output_text
    stranger = {"type": "reasoning", "id": reasoning.id, "summary": [], "encrypted_content": "x"}
    echoed = client.responses.create(
        model=MODEL,
        input=[
            {"role": "user", "content": "hi"},
            stranger,
            {"role": "user", "content": "[[echo]]"},
        ],
        store=False,
    )
    assert "cloudy" not in echoed.output_text  # another item under a reused label


def test_unknown_previous_response(client: OpenAI) -> None:
    with pytest.raises(openai.BadRequestError) as caught:
        client.responses.create(model=MODEL, input="x", previous_response_id="resp_missing")
    assert caught.value.code == "previous_response_not_found"
    assert caught.value.body["param"] == "previous_response_id"  # type: ignore[index]


def test_stream_helper_final_response(client: OpenAI) -> None:
    with client.responses.stream(model=MODEL, input="stream me [[reason:let me think]]") as stream:
        deltas = [event.delta for event in stream if event.type == "response.output_text.delta"]
        final = stream.get_final_response()
    assert "".join(deltas) == "Hello! You said: stream me"
    assert final.output_text == "Hello! You said: stream me"
    assert [item.type for item in final.output] == ["reasoning", "message"]
    assert client.responses.retrieve(final.id).output_text == final.output_text


def test_raw_stream_event_order_and_sequence_numbers(client: OpenAI) -> None:
    events = list(client.responses.create(model=MODEL, input="[[words:5]]", stream=True))
    assert [e.sequence_number for e in events] == list(range(len(events)))
    types = [e.type for e in events]
    assert types[:4] == [
        "response.created",
        "response.in_progress",
        "response.output_item.added",
        "response.content_part.added",
    ]
    assert types[-4:] == [
        "response.output_text.done",
        "response.content_part.done",
        "response.output_item.done",
        "response.completed",
    ]
    assert types.count("response.output_text.delta") == 5


def test_streamed_tool_calls(client: OpenAI) -> None:
    with client.responses.stream(
        model=MODEL,
        input='[[tool:get_weather:{"city": "Rome"}]]',
        tools=[WEATHER_TOOL],  # type: ignore[list-item]
    ) as stream:
        types = [event.type for event in stream]
        final = stream.get_final_response()
    assert "response.function_call_arguments.delta" in types
    assert "response.function_call_arguments.done" in types
    [call] = final.output
    assert isinstance(call, ResponseFunctionToolCall)
    assert json.loads(call.arguments) == {"city": "Rome"}


def test_length_limit_is_incomplete(client: OpenAI) -> None:
    response = client.responses.create(model=MODEL, input="[[words:50]]", max_output_tokens=16)
    assert response.status == "incomplete"
    assert response.incomplete_details is not None
    assert response.incomplete_details.reason == "max_output_tokens"
    assert client.responses.retrieve(response.id).status == "incomplete"


def test_a_length_cut_after_parallel_calls_leaves_only_the_last_incomplete(
    client: OpenAI,
) -> None:
    """Only the item being written when the tokens ran out is cut short: the calls before
    it were finished, and an ``incomplete`` item is the last of its response."""
    with client.responses.stream(
        model=MODEL,
        input='[[tool:get_weather:{"city": "Rome"}]] [[tool:get_weather:{"city": "Oslo"}]] '
        "[[length]]",
        tools=[WEATHER_TOOL],  # type: ignore[list-item]
    ) as stream:
        events = list(stream)
    done = [e.item.status for e in events if e.type == "response.output_item.done"]
    last = events[-1]
    assert last.type == "response.incomplete"
    assert [item.status for item in last.response.output] == ["completed", "incomplete"]  # type: ignore[union-attr]
    assert done == ["completed", "incomplete"]


def test_structured_output_settings_are_echoed(client: OpenAI) -> None:
    response = client.responses.create(
        model=MODEL,
        input="json please",
        text={
            "format": {
                "type": "json_schema",
                "name": "answer",
                "schema": {"type": "object"},
                "strict": True,
            }
        },
        temperature=0.2,
        top_p=0.5,
        reasoning={"effort": "low"},
        parallel_tool_calls=False,
        prompt_cache_key="pk",
        safety_identifier="user-1",
    )
    assert response.text.format.type == "json_schema"  # type: ignore[union-attr]
    assert (response.temperature, response.top_p) == (0.2, 0.5)
    assert response.reasoning is not None
    assert response.reasoning.effort == "low"
    assert response.parallel_tool_calls is False
    assert (response.prompt_cache_key, response.safety_identifier) == ("pk", "user-1")


def test_the_image_policy_in_effect_is_echoed_kept_and_not_inherited(client: OpenAI) -> None:
    """``image`` sent: the Response (and its stored copy) says ``disabled``, the policy in
    effect; a follow-up that sends none echoes none (request options are per request)."""
    first = client.responses.create(
        model=MODEL, input="look", image={"context_compression": "auto"}
    )
    assert first.image is not None
    assert first.image.context_compression == "disabled"
    stored = client.responses.retrieve(first.id)
    assert stored.image is not None
    assert stored.image.context_compression == "disabled"
    follow_up = client.responses.create(model=MODEL, input="again", previous_response_id=first.id)
    assert follow_up.image is None
    assert client.responses.retrieve(follow_up.id).image is None
    with pytest.raises(openai.BadRequestError) as enabled:
        client.responses.create(model=MODEL, input="x", image={"context_compression": "enabled"})
    assert enabled.value.code == "unsupported_value"
    assert enabled.value.body["param"] == "image.context_compression"  # type: ignore[index]


async def test_async_client_end_to_end(async_client: AsyncOpenAI) -> None:
    async with async_client:
        created = await async_client.responses.create(model=MODEL, input="async hi")
        assert created.output_text == "Hello! You said: async hi"
        async with async_client.responses.stream(
            model=MODEL, input="async stream", previous_response_id=created.id
        ) as stream:
            async for _ in stream:
                pass
            final = await stream.get_final_response()
        assert final.previous_response_id == created.id
        retrieved = await async_client.responses.retrieve(final.id)
        assert retrieved.output_text == "Hello! You said: async stream"
        items = await async_client.responses.input_items.list(final.id)
        assert len(items.data) == 1
        await async_client.responses.delete(final.id)
        with pytest.raises(openai.NotFoundError):
            await async_client.responses.retrieve(final.id)


def test_models_list(client: OpenAI) -> None:
    assert "fake-model" in [model.id for model in client.models.list()]


def test_codex_style_full_history_with_client_labels(client: OpenAI) -> None:
    """Codex resends the whole history with its own item ids, store:false, every turn."""
    history: list[dict[str, object]] = [
        {"type": "message", "role": "developer", "id": "msg_sys", "content": "You are terse."},
        {"type": "message", "role": "user", "id": "msg_1", "content": "[[tool:exec:{}]] run it"},
    ]
    first = client.responses.create(
        model=MODEL,
        input=history,
        store=False,
        tools=[WEATHER_TOOL],
        stream=False,  # type: ignore[arg-type, list-item]
    )
    [call] = [item for item in first.output if isinstance(item, ResponseFunctionToolCall)]
    history += [
        {
            "type": "function_call",
            "id": "fc_1",
            "call_id": call.call_id,
            "name": call.name,
            "arguments": call.arguments,
        },
        {"type": "function_call_output", "call_id": call.call_id, "output": "done"},
    ]
    second = client.responses.create(model=MODEL, input=history, store=False, tools=[WEATHER_TOOL])  # type: ignore[arg-type, list-item]
    assert second.output_text == "Tool said: done"
    again = client.responses.create(model=MODEL, input=history, store=True, tools=[WEATHER_TOOL])  # type: ignore[arg-type, list-item]
    labels = [item.id for item in client.responses.input_items.list(again.id, order="asc")]
    assert labels[:3] == ["msg_sys", "msg_1", "fc_1"]


def test_a_response_cut_before_its_upstream_counted_has_no_usage(client: OpenAI) -> None:
    """Its upstream counts tokens at the answer's end: cut after three words, nothing was
    counted, and ``response.failed`` and the stored response say so with a null usage (as
    for a response a dead process left), not with zeros beside the words it shows."""
    events = list(
        client.responses.create(model=MODEL, input="[[words:20]] [[truncate:3]]", stream=True)
    )
    failed = events[-1]
    assert failed.type == "response.failed"
    assert failed.response.error is not None
    assert "closed the stream before finishing" in failed.response.error.message
    texts = [e.delta for e in events if e.type == "response.output_text.delta"]
    assert "".join(texts).split() == ["w1", "w2", "w3"]
    assert failed.response.usage is None
    assert client.responses.retrieve(failed.response.id).usage is None


@pytest.mark.parametrize(
    "gateway",
    ["sqlite-responses", pytest.param("postgres-responses", marks=pytest.mark.postgres)],
    indirect=True,
)
@pytest.mark.parametrize("hidden", [False, True])
def test_a_responses_upstreams_pieces_stream_as_they_came(client: OpenAI, hidden: bool) -> None:
    """Reasoning text (or, hidden, its summary) and a call's arguments, each piece as the
    upstream sent it: one word of reasoning, eight characters of arguments."""
    arguments = '{"city": "Rome, the eternal city"}'
    with client.responses.stream(
        model=MODEL,
        input=f"[[reason:weighing the weather here]]{'[[hidden]]' * hidden}"
        f"[[tool:get_weather:{arguments}]]",
        tools=[WEATHER_TOOL],  # type: ignore[list-item]
        reasoning={"summary": "auto"} if hidden else None,  # type: ignore[arg-type]
    ) as stream:
        events = list(stream)
    kind = "reasoning_summary_text" if hidden else "reasoning_text"
    reasoning = [e.delta for e in events if e.type == f"response.{kind}.delta"]  # type: ignore[union-attr]
    assert reasoning == ["weighing ", "the ", "weather ", "here"]
    pieces = [e.delta for e in events if e.type == "response.function_call_arguments.delta"]  # type: ignore[union-attr]
    assert pieces == [arguments[at : at + 8] for at in range(0, len(arguments), 8)]
