"""Compaction, sealed ``encrypted_content`` and input token counts, through the real
gateway and fake upstream, with the official ``openai`` SDK (every storage and upstream
API shape)."""

from __future__ import annotations

import uuid
from typing import Any

import openai
import pytest
from openai import OpenAI

from stateway.core.compaction.prompt import SUMMARY_PREFIX
from stateway.fake_upstream.plan import SUMMARY_HEADING
from tests.e2e.test_upstream_mapping import upstream_requests
from tests.support.sealing import readable_in

MODEL = "fake-model"


def user(text: str) -> dict[str, Any]:
    return {"role": "user", "content": text}


def assistant(text: str) -> dict[str, Any]:
    return {"role": "assistant", "content": text}


def as_input(items: list[Any]) -> list[dict[str, Any]]:
    # the SDK types output messages as assistant ones: the user messages kept by a
    # compaction make its serializer warn, harmlessly
    return [item.model_dump(exclude_none=True, warnings=False) for item in items]


def tampered(sealed: str) -> str:
    middle = len(sealed) // 2
    return sealed[:middle] + ("A" if sealed[middle] != "A" else "B") + sealed[middle + 1 :]


def test_compact_then_continue_from_its_output(client: OpenAI) -> None:
    history = [user("my name is Ada"), assistant("Nice to meet you, Ada."), user("I like tea")]
    compacted = client.responses.compact(model=MODEL, input=history)  # type: ignore[arg-type]
    assert compacted.object == "response.compaction"
    assert [item.type for item in compacted.output] == ["message", "message", "compaction"]
    kept = [item.content[0].text for item in compacted.output[:2]]  # type: ignore[union-attr]
    assert kept == ["my name is Ada", "I like tea"]
    sealed = compacted.output[-1].encrypted_content  # type: ignore[union-attr]
    assert sealed.startswith("sw1.")
    assert readable_in(sealed, "my name is Ada", "Nice to meet you, Ada") == []
    assert compacted.usage.input_tokens > 0
    assert compacted.usage.output_tokens > 0

    answer = client.responses.create(
        model=MODEL, input=[*as_input(compacted.output), user("[[echo]]")], store=False
    )
    transcript = answer.output_text
    # The assistant's words reached the model only through the summary.
    assert SUMMARY_PREFIX + SUMMARY_HEADING in transcript
    assert "assistant: Nice to meet you, Ada." in transcript
    assert transcript.splitlines()[:2] == ["user: my name is Ada", "user: I like tea"]


def test_compact_from_a_previous_response(client: OpenAI) -> None:
    first = client.responses.create(model=MODEL, input="remember the number 42")
    compacted = client.responses.compact(model=MODEL, previous_response_id=first.id)
    assert [item.type for item in compacted.output] == ["message", "compaction"]
    answer = client.responses.create(
        model=MODEL, input=[*as_input(compacted.output), user("[[echo]]")]
    )
    assert "assistant: Hello! You said: remember the number 42" in answer.output_text


def test_compact_refusals(client: OpenAI) -> None:
    with pytest.raises(openai.BadRequestError) as no_model:
        client.post("/responses/compact", body={"input": "hi"}, cast_to=object)
    assert no_model.value.code == "missing_required_parameter"
    assert no_model.value.body["param"] == "model"  # type: ignore[index]
    with pytest.raises(openai.BadRequestError) as nothing:
        client.responses.compact(model=MODEL)
    assert nothing.value.code == "missing_required_parameter"
    with pytest.raises(openai.BadRequestError) as unknown:
        client.responses.compact(model=MODEL, previous_response_id="resp_unknown")
    assert unknown.value.code == "previous_response_not_found"
    conversation = client.conversations.create(items=[user("hello")])  # type: ignore[list-item]
    with pytest.raises(openai.BadRequestError) as not_a_param:
        client.responses.compact(
            model=MODEL, input="hi", extra_body={"conversation": conversation.id}
        )
    assert not_a_param.value.code == "unknown_parameter"
    assert not_a_param.value.body["param"] == "conversation"  # type: ignore[index]
    with pytest.raises(openai.BadRequestError) as neither:
        client.responses.compact(model=MODEL, input=5)  # type: ignore[arg-type]
    assert (neither.value.code, neither.value.body["param"]) == ("invalid_type", "input")  # type: ignore[index]
    assert "expected one of a string or array of input items" in neither.value.message


def test_compact_sends_its_safety_identifier_and_tier_with_the_summary_and_echoes_them(
    client: OpenAI, fake_upstream: str
) -> None:
    marker = f"compact-for-{uuid.uuid4().hex}"
    compacted = client.responses.compact(
        model=MODEL, input=marker, safety_identifier="sid-1", service_tier="flex"
    )
    [sent] = [r["body"] for r in upstream_requests(fake_upstream) if marker in str(r["body"])]
    assert (sent["safety_identifier"], sent["service_tier"]) == ("sid-1", "flex")
    assert (compacted.safety_identifier, compacted.service_tier) == ("sid-1", "flex")
    plain = client.responses.compact(model=MODEL, input="hello")
    assert (plain.safety_identifier, plain.service_tier) == (None, None)


def test_compact_refuses_what_its_safety_identifier_and_tier_may_not_be(client: OpenAI) -> None:
    with pytest.raises(openai.BadRequestError) as too_long:
        client.responses.compact(model=MODEL, input="hi", safety_identifier="s" * 129)
    assert too_long.value.code == "string_above_max_length"
    assert too_long.value.body["param"] == "safety_identifier"  # type: ignore[index]
    with pytest.raises(openai.BadRequestError) as tier:
        client.responses.compact(model=MODEL, input="hi", service_tier="scale")  # type: ignore[arg-type]
    assert tier.value.code == "invalid_value"
    assert tier.value.body["param"] == "service_tier"  # type: ignore[index]


def test_compact_echoes_the_image_policy_in_effect_and_refuses_enabled(client: OpenAI) -> None:
    compacted = client.responses.compact(
        model=MODEL, input="hello", image={"context_compression": "disabled"}
    )
    assert compacted.image is not None
    assert compacted.image.context_compression == "disabled"
    assert client.responses.compact(model=MODEL, input="hello").image is None
    for image, code, param in [
        ({"context_compression": "enabled"}, "unsupported_value", "image.context_compression"),
        ({"context_compression": "bogus"}, "invalid_value", "image.context_compression"),
        ("x", "invalid_type", "image"),
    ]:
        with pytest.raises(openai.BadRequestError) as refused:
            client.responses.compact(model=MODEL, input="hi", image=image)  # type: ignore[arg-type]
        assert refused.value.code == code
        assert refused.value.body["param"] == param  # type: ignore[index]


def test_a_tampered_compaction_is_not_added_to_a_conversation(client: OpenAI) -> None:
    compacted = client.responses.compact(model=MODEL, input="hello")
    item = compacted.output[-1].model_dump(exclude={"id"})
    conversation = client.conversations.create(items=[user("hello")])
    for bad in (tampered(item["encrypted_content"]), "sw1.forged", "plain text"):
        broken = {**item, "encrypted_content": bad}
        with pytest.raises(openai.BadRequestError) as refused:
            client.conversations.create(items=[user("hello"), broken])  # type: ignore[list-item]
        assert refused.value.code == "invalid_encrypted_content"
        assert refused.value.body["param"] == "items[1].encrypted_content"  # type: ignore[index]
        assert refused.value.body["type"] == "invalid_request_error"  # type: ignore[index]
        with pytest.raises(openai.BadRequestError) as appended:
            client.conversations.items.create(conversation.id, items=[item, broken])  # type: ignore[list-item]
        assert appended.value.code == "invalid_encrypted_content"
        assert appended.value.body["param"] == "items[1].encrypted_content"  # type: ignore[index]
    stored = client.conversations.items.list(conversation.id).data
    assert [entry.type for entry in stored] == ["message"]  # the batch's good item neither
    client.conversations.items.create(conversation.id, items=[item])  # type: ignore[list-item]
    answer = client.responses.create(model=MODEL, input="[[echo]]", conversation=conversation.id)
    assert SUMMARY_PREFIX in answer.output_text


def test_tampered_or_forged_compaction_is_refused(client: OpenAI) -> None:
    compacted = client.responses.compact(model=MODEL, input="hello")
    item = compacted.output[-1].model_dump()
    for bad in (tampered(item["encrypted_content"]), "sw1.forged", "plain text"):
        with pytest.raises(openai.BadRequestError) as refused:
            client.responses.create(
                model=MODEL, input=[user("hello"), {**item, "encrypted_content": bad}, user("go")]
            )
        assert refused.value.code == "invalid_encrypted_content"
        assert refused.value.body["param"] == "input[1].encrypted_content"  # type: ignore[index]


def test_compaction_trigger_answers_with_exactly_one_compaction_item(client: OpenAI) -> None:
    items = [user("plan the trip [[words:3]]"), assistant("w1 w2 w3")]
    events = list(
        client.responses.create(
            model=MODEL,
            input=[*items, {"type": "compaction_trigger"}],  # type: ignore[list-item]
            stream=True,
            store=False,
        )
    )
    types = [event.type for event in events]
    assert types == [
        "response.created",
        "response.in_progress",
        "response.output_item.added",
        "response.compaction.compacting",
        "response.output_item.done",
        "response.completed",
    ]
    final = events[-1].response  # type: ignore[union-attr]
    [item] = final.output
    assert item.type == "compaction"
    assert events[4].item == item  # type: ignore[union-attr]
    # announced whole, as hosted announces it: a client reading only the added event
    # has the seal
    assert events[2].item == item  # type: ignore[union-attr]
    assert final.usage.input_tokens > 0

    answer = client.responses.create(
        model=MODEL, input=[*items, item.model_dump(), user("[[echo]]")], store=False
    )
    assert "assistant: w1 w2 w3" in answer.output_text


def test_a_compacted_responses_input_items_page_through_by_their_ids(client: OpenAI) -> None:
    """Every input item listed has an id, the trigger and an ``additional_tools`` item
    too (the SDK's types say so): the listing's cursors are ids, and a page ending on
    one without an id ended the listing there."""
    extra: Any = {"type": "additional_tools", "role": "developer", "tools": []}
    trigger: Any = {"type": "compaction_trigger"}
    response = client.responses.create(
        model=MODEL, input=[extra, user("one"), user("two"), trigger]
    )
    page = client.responses.input_items.list(response.id, limit=1)
    assert page.first_id is not None
    assert page.first_id == page.last_id == page.data[0].id
    listed = list(client.responses.input_items.list(response.id, limit=1))
    assert [item.type for item in listed] == [
        "compaction_trigger",
        "message",
        "message",
        "additional_tools",
    ]
    assert all(isinstance(item.id, str) for item in listed)  # type: ignore[union-attr]


def test_context_management_threshold_compacts_first(client: OpenAI) -> None:
    history = [user("first question"), assistant("first answer")]
    response = client.responses.create(
        model=MODEL,
        input=[*history, user("[[echo]]")],
        context_management=[{"type": "compaction", "compact_threshold": 5}],
    )
    assert [item.type for item in response.output] == ["compaction", "message"]
    assert "assistant: first answer" in response.output_text  # via the summary
    below = client.responses.create(
        model=MODEL,
        input=[*history, user("[[echo]]")],
        context_management=[{"type": "compaction", "compact_threshold": 100_000}],
    )
    assert [item.type for item in below.output] == ["message"]

    # The stored chain goes on from the compaction: the model no longer sees the turns.
    after = client.responses.create(model=MODEL, input="[[echo]]", previous_response_id=response.id)
    lines = after.output_text.splitlines()
    # the user's messages, then the summary: the assistant's turn is gone
    assert lines[:2] == ["user: first question", "user: [[echo]]"]
    assert lines[2] == "user: " + SUMMARY_PREFIX.splitlines()[0]


def test_the_upstreams_context_refusal_passes_through(client: OpenAI) -> None:
    # the fake holds 3 words: as vLLM (Chat wire) or OpenAI (Responses wire) refuse it
    body = {"model": MODEL, "input": "one two three four [[context:3]]"}
    with pytest.raises(openai.BadRequestError) as refused:
        client.responses.create(**body)  # type: ignore[call-overload]
    assert refused.value.code == "context_length_exceeded"
    with pytest.raises(openai.BadRequestError) as streamed:
        list(client.responses.create(**body, stream=True))  # type: ignore[call-overload]
    assert streamed.value.code == "context_length_exceeded"


def test_reasoning_encrypted_content_round_trip_without_storage(client: OpenAI) -> None:
    first = client.responses.create(
        model=MODEL,
        input="hi [[reason:the secret plan]]",
        store=False,
        include=["reasoning.encrypted_content"],
        reasoning={"summary": "auto"},
    )
    reasoning = first.output[0]
    assert reasoning.type == "reasoning"
    assert reasoning.summary[0].text == "the secret plan"
    assert reasoning.encrypted_content is not None
    assert "secret" not in reasoning.encrypted_content
    forged = {
        **reasoning.model_dump(exclude_none=True),
        "content": [{"type": "reasoning_text", "text": "a forged thought"}],
        "summary": [],
    }
    answer = client.responses.create(
        model=MODEL,
        input=[user("hi"), forged, *as_input(first.output[1:]), user("[[echo]]")],
        store=False,
    )
    assert "reasoning: the secret plan" in answer.output_text
    assert "forged" not in answer.output_text

    forged["encrypted_content"] = tampered(reasoning.encrypted_content)
    with pytest.raises(openai.BadRequestError) as refused:
        client.responses.create(model=MODEL, input=[user("hi"), forged, user("again")])
    assert refused.value.code == "invalid_encrypted_content"
    assert refused.value.body["param"] == "input[1].encrypted_content"  # type: ignore[index]


def test_reasoning_is_not_sealed_unless_included(client: OpenAI) -> None:
    response = client.responses.create(model=MODEL, input="hi [[reason:hmm]]")
    assert response.output[0].encrypted_content is None  # type: ignore[union-attr]
    assert response.output[0].summary == []  # type: ignore[union-attr]


@pytest.fixture
def upstream_api(request: pytest.FixtureRequest) -> str:
    return str(request.node.callspec.params["gateway"]).split("-")[1]


@pytest.mark.parametrize("stream", [False, True])
def test_hidden_reasoning_continues_from_its_upstreams_seal(
    client: OpenAI, upstream_api: str, stream: bool
) -> None:
    """A Responses upstream that hides its reasoning (``[[hidden]]``: as OpenAI's reasoning
    models, no text) gives the model its reasoning back only through its own
    ``encrypted_content``: kept, sealed over for the client's tenant, and sent back as the
    upstream made it, statelessly and along a stored chain. (A Chat upstream shows the
    text: the same turns hold.)"""
    prompt = "hi [[hidden]] [[reason:the secret plan]]"
    if stream:
        with client.responses.stream(model=MODEL, input=prompt, store=False) as events:
            first = events.get_final_response()
    else:
        first = client.responses.create(model=MODEL, input=prompt, store=False)
    reasoning = first.output[0]
    assert reasoning.type == "reasoning"
    if upstream_api == "responses":
        assert not "".join(part.text for part in reasoning.content or [])
        assert reasoning.encrypted_content is not None
        assert reasoning.encrypted_content.startswith("sw1.")  # never the upstream's own
    answer = client.responses.create(
        model=MODEL, input=[user("hi"), *as_input(first.output), user("[[echo]]")], store=False
    )
    assert "reasoning: the secret plan" in answer.output_text

    stored = client.responses.create(model=MODEL, input=prompt)
    after = client.responses.create(model=MODEL, input="[[echo]]", previous_response_id=stored.id)
    assert "reasoning: the secret plan" in after.output_text

    if upstream_api == "responses":  # a seal as an upstream made it is not sent on,
        # which the upstream would refuse (this one is not its own)
        as_made = {**as_input([reasoning])[0], "encrypted_content": "responses:forged"}
        answer = client.responses.create(
            model=MODEL, input=[user("hi"), as_made, user("[[echo]]")], store=False
        )
        # no text, no seal: nothing left to send (a bare id hosted OpenAI would look up)
        assert "reasoning:" not in answer.output_text
        assert "user: hi\nuser: [[echo]]" in answer.output_text
        forged = {**as_input([reasoning])[0], "encrypted_content": "sw1.forged"}
        with pytest.raises(openai.BadRequestError) as refused:
            client.responses.create(model=MODEL, input=[user("hi"), forged, user("again")])
        assert refused.value.code == "invalid_encrypted_content"


def test_reasoning_summary_stream_events(client: OpenAI) -> None:
    with client.responses.stream(
        model=MODEL,
        input="hi [[reason:step one]]",
        reasoning={"summary": "auto"},
        include=["reasoning.encrypted_content"],
        store=False,
    ) as stream:
        events = list(stream)
        final = stream.get_final_response()
    types = [event.type for event in events]
    assert types.index("response.reasoning_summary_part.added") < types.index(
        "response.reasoning_summary_text.delta"
    )
    deltas = [e.delta for e in events if e.type == "response.reasoning_summary_text.delta"]
    assert "".join(deltas) == "step one"
    done = [e for e in events if e.type == "response.reasoning_summary_text.done"]
    assert [e.text for e in done] == ["step one"]
    assert "response.reasoning_summary_part.done" in types
    item_done = next(
        e for e in events if e.type == "response.output_item.done" and e.item.type == "reasoning"
    )
    assert item_done.item.encrypted_content == final.output[0].encrypted_content  # type: ignore[union-attr]
    assert final.output[0].summary[0].text == "step one"  # type: ignore[union-attr]


def test_input_tokens_counted_by_the_upstream_tokenizer(client: OpenAI) -> None:
    raw = client.responses.input_tokens.with_raw_response.count(
        model=MODEL, input="one two three four"
    )
    assert raw.headers["stateway-token-count"] == "upstream"
    counted = raw.parse()
    assert counted.object == "response.input_tokens"
    generated = client.responses.create(model=MODEL, input="one two three four")
    assert counted.input_tokens == generated.usage.input_tokens == 4  # type: ignore[union-attr]
    chained = client.responses.input_tokens.count(
        model=MODEL, input="five six", previous_response_id=generated.id
    )
    # the previous turn (4 + "Hello! You said: one two three four" = 7) and the new words
    assert chained.input_tokens == 4 + 7 + 2


def test_input_tokens_need_a_model(client: OpenAI) -> None:
    with pytest.raises(openai.BadRequestError) as refused:
        client.responses.input_tokens.count(input="one two three")
    assert refused.value.code == "missing_required_parameter"
    assert refused.value.body["param"] == "model"  # type: ignore[index]


def test_input_tokens_count_a_conversations_items(client: OpenAI) -> None:
    with pytest.raises(openai.NotFoundError):
        client.responses.input_tokens.count(model=MODEL, input="x", conversation="conv_1")
    conversation = client.conversations.create(
        items=[{"type": "message", "role": "user", "content": "y " * 400}]
    )
    alone = client.responses.input_tokens.count(model=MODEL, input="x")
    within = client.responses.input_tokens.count(
        model=MODEL, input="x", conversation=conversation.id
    )
    assert within.input_tokens > alone.input_tokens + 100
