"""The compaction wire: ``/compact`` and ``/input_tokens`` bodies, compaction and reasoning
items, ``context_management``, and the events and objects they encode to."""

from __future__ import annotations

from typing import Any

import orjson
import pytest
from openai.types.responses import CompactedResponse, ResponseStreamEvent
from openai.types.responses.input_token_count_response import InputTokenCountResponse
from pydantic import TypeAdapter

from stateway.core import events as ev
from stateway.core.compaction.service import Compacted
from stateway.core.errors import InvalidRequest
from stateway.core.results import TokenCount
from stateway.core.usage import Usage
from stateway.protocols.responses.decode import decode_compact, decode_create, decode_input_tokens
from stateway.protocols.responses.encode import encode_compacted, encode_token_count
from stateway.protocols.responses.stream import encode_event

EVENTS: TypeAdapter[ResponseStreamEvent] = TypeAdapter(ResponseStreamEvent)


def body(**fields: Any) -> bytes:
    return orjson.dumps(fields)


def refused(decode: Any, **fields: Any) -> InvalidRequest:
    with pytest.raises(InvalidRequest) as caught:
        decode(body(**fields))
    return caught.value


def test_compact_body() -> None:
    command = decode_compact(
        body(model="m", input="hi", instructions="I", previous_response_id="r", store=True)
    )
    assert (command.model, command.instructions, command.previous_response_id) == ("m", "I", "r")
    assert command.input[0]["content"] == [{"type": "input_text", "text": "hi"}]
    assert decode_compact(body(model="m", previous_response_id="r")).input == []


def test_compact_takes_the_prompt_cache_fields_and_service_tier_for_its_summary() -> None:
    """The SDK's ``responses.compact`` params: each reaches the summary call."""
    settings = decode_compact(
        body(
            model="m",
            input="hi",
            prompt_cache_key="k",
            prompt_cache_retention="24h",
            prompt_cache_options={"mode": "explicit", "ttl": "30m", "comparison_response_id": "r"},
            service_tier="flex",
            image={"context_compression": "disabled"},
        )
    ).settings
    assert (settings.prompt_cache_key, settings.prompt_cache_retention) == ("k", "24h")
    assert settings.prompt_cache_options == {"mode": "explicit", "ttl": "30m"}
    assert settings.service_tier == "flex"
    plain = decode_compact(body(model="m", input="hi")).settings
    assert (plain.prompt_cache_key, plain.prompt_cache_options, plain.service_tier) == (
        None,
        None,
        None,
    )


@pytest.mark.parametrize(
    "image", [{"context_compression": "auto"}, {"context_compression": "disabled"}, {}]
)
def test_compact_image_options_come_to_disabled(image: dict[str, Any]) -> None:
    """As a create's: the policy in effect, echoed by the compaction, is ``disabled``."""
    settings = decode_compact(body(model="m", input="hi", image=image)).settings
    assert settings.image == {"context_compression": "disabled"}
    plain = decode_compact(body(model="m", input="hi")).settings
    assert plain.image is None


def test_compact_takes_a_safety_identifier_for_its_summary() -> None:
    """As a create does: the summary call is made for the end user it names."""
    settings = decode_compact(body(model="m", input="hi", safety_identifier="sid")).settings
    assert settings.safety_identifier == "sid"
    longest = decode_compact(body(model="m", input="hi", safety_identifier="s" * 128)).settings
    assert longest.safety_identifier == "s" * 128
    assert decode_compact(body(model="m", input="hi")).settings.safety_identifier is None


def test_a_bad_safety_identifier_is_refused_as_a_create_refuses_it() -> None:
    for fields in ({"safety_identifier": "s" * 129}, {"safety_identifier": 7}):
        on_compact = refused(decode_compact, model="m", input="hi", **fields)
        on_create = refused(decode_create, model="m", input="hi", **fields)
        assert (on_compact.message, on_compact.param, on_compact.code) == (
            on_create.message,
            on_create.param,
            on_create.code,
        )
    too_long = refused(decode_compact, model="m", input="hi", safety_identifier="s" * 129)
    assert (too_long.param, too_long.code) == ("safety_identifier", "string_above_max_length")


@pytest.mark.parametrize("tier", ["auto", "default", "fast", "flex", "priority"])
def test_compact_takes_the_tiers_of_its_sdk_params(tier: str) -> None:
    assert decode_compact(body(model="m", input="hi", service_tier=tier)).settings.service_tier == (
        tier
    )


@pytest.mark.parametrize("tier", ["scale", "ultrafast"])
def test_compact_refuses_the_create_only_tiers(tier: str) -> None:
    """``ResponseCompactParams.service_tier`` has fewer values than a create's: the others
    are refused as a create refuses an unknown tier, listing compact's."""
    assert decode_create(body(model="m", input="hi", service_tier=tier)).settings.service_tier
    error = refused(decode_compact, model="m", input="hi", service_tier=tier)
    assert (error.param, error.code) == ("service_tier", "invalid_value")
    assert error.message == (
        f"Invalid value: '{tier}'. Supported values are: "
        "'auto', 'default', 'fast', 'flex', and 'priority'."
    )


@pytest.mark.parametrize(
    ("fields", "param", "code"),
    [
        ({"input": "hi"}, "model", "missing_required_parameter"),
        ({"model": "m", "input": "hi", "prompt_cache_key": 1}, "prompt_cache_key", "invalid_type"),
        (
            {"model": "m", "input": "hi", "prompt_cache_retention": "1h"},
            "prompt_cache_retention",
            "invalid_value",
        ),
        (
            {"model": "m", "input": "hi", "prompt_cache_options": {"prewarm": True}},
            "prompt_cache_options.prewarm",
            "unsupported_parameter",
        ),
        ({"model": "m", "input": "hi", "service_tier": "cheap"}, "service_tier", "invalid_value"),
        (
            {"model": "m", "input": "hi", "image": {"context_compression": "enabled"}},
            "image.context_compression",
            "unsupported_value",
        ),
        (
            {"model": "m", "input": "hi", "image": {"context_compression": "bogus"}},
            "image.context_compression",
            "invalid_value",
        ),
        ({"model": "m", "input": "hi", "image": "x"}, "image", "invalid_type"),
        ({"model": "", "input": "hi"}, "model", "empty_string"),
        ({"model": "m"}, "input", "missing_required_parameter"),
        ({"model": "m", "input": []}, "input", "missing_required_parameter"),
        ({"model": "m", "input": 3}, "input", "invalid_type"),
    ],
)
def test_compact_refusals(fields: dict[str, Any], param: str, code: str) -> None:
    error = refused(decode_compact, **fields)
    assert (error.param, error.code) == (param, code)


@pytest.mark.parametrize("conversation", ["conv_1", {"id": "conv_1"}, 3])
def test_compact_refuses_a_conversation_rather_than_compact_something_else(
    conversation: object,
) -> None:
    """``/compact`` takes no conversation (nor does hosted's); ignored, it would answer
    with the compaction of the input alone, or of nothing at all."""
    for fields in ({"input": "hi"}, {}):
        error = refused(decode_compact, model="m", conversation=conversation, **fields)
        assert (error.param, error.code) == ("conversation", "unknown_parameter")
        assert error.message.startswith("Unknown parameter: 'conversation'.")
    assert decode_compact(body(model="m", input="hi", conversation=None)).input != []


def test_compact_checks_the_item_count_first() -> None:
    with pytest.raises(InvalidRequest) as caught:
        decode_compact(
            body(model="m", input=[{"role": "user", "content": "x"}] * 3), max_input_items=2
        )
    assert caught.value.code == "array_above_max_length"
    with pytest.raises(InvalidRequest) as bad_json:
        decode_compact(b"{not json")
    assert bad_json.value.code == "invalid_json"


def test_input_tokens_body() -> None:
    tool = {"type": "function", "name": "f", "parameters": {"type": "object"}}
    command = decode_input_tokens(
        body(model="m", input="hi", tools=[tool], truncation="auto", reasoning={"effort": "low"})
    ).request
    assert (command.model, command.store) == ("m", False)
    assert command.settings.truncation == "auto"
    assert command.settings.reasoning_effort == "low"
    assert [t["name"] for t in command.settings.tools] == ["f"]
    bare = decode_input_tokens(body(model="m", previous_response_id="r")).request
    assert (bare.input, bare.previous_response_id) == ([], "r")


def test_input_tokens_refusals() -> None:
    missing = refused(decode_input_tokens, input="x")
    assert (missing.param, missing.code) == ("model", "missing_required_parameter")
    both = refused(decode_input_tokens, model="m", conversation="c", previous_response_id="r")
    assert both.code == "mutually_exclusive_parameters"
    assert refused(decode_input_tokens, model="m", conversation={"id": 3}).param == "conversation"
    counted = decode_input_tokens(body(model="m", conversation={"id": "conv_1"})).request
    assert counted.conversation_id == "conv_1"
    assert refused(decode_input_tokens, model="m", truncation="sometimes").param == "truncation"
    assert refused(decode_input_tokens, model="m", tool_choice="maybe").param == "tool_choice"
    for nothing in ({}, {"input": []}, {"input": ""}):
        empty = refused(decode_input_tokens, model="m", **nothing)
        assert (empty.param, empty.code) == ("input", "missing_required_parameter")
        assert "nothing to count" in empty.message
    assert decode_input_tokens(body(model="m", instructions="be brief")).request.input == []


def test_compaction_items_and_trigger_decode() -> None:
    command = decode_create(
        body(
            model="m",
            input=[
                {"type": "compaction", "encrypted_content": "sw1.x"},
                {"type": "compaction", "id": "cmp_mine", "encrypted_content": "sw1.y"},
                {"role": "user", "content": "go"},
                {"type": "compaction_trigger"},
            ],
        )
    )
    first, second, _, trigger = command.input
    assert first["id"].startswith("cmp_")
    assert "status" not in first
    assert second["id"] == "cmp_mine"
    assert trigger == {"type": "compaction_trigger", "id": trigger["id"]}  # a page's cursor
    assert trigger["id"].startswith("item_")


@pytest.mark.parametrize(
    ("item", "param", "code"),
    [
        ({"type": "compaction"}, "input[0].encrypted_content", "missing_required_parameter"),
        (
            {"type": "compaction", "encrypted_content": 5},
            "input[0].encrypted_content",
            "invalid_type",
        ),
        (
            {"type": "reasoning", "summary": [], "encrypted_content": ["x"]},
            "input[0].encrypted_content",
            "invalid_type",
        ),
    ],
)
def test_malformed_sealed_items(item: dict[str, Any], param: str, code: str) -> None:
    error = refused(decode_create, model="m", input=[item])
    assert (error.param, error.code) == (param, code)


def test_the_trigger_must_come_last() -> None:
    error = refused(
        decode_create,
        model="m",
        input=[{"type": "compaction_trigger"}, {"role": "user", "content": "x"}],
    )
    assert (error.param, error.code) == ("input[0].type", "invalid_value")


def test_context_management() -> None:
    command = decode_create(
        body(
            model="m",
            input="x",
            context_management=[{"type": "compaction", "compact_threshold": 9}],
        )
    )
    assert command.settings.context_management == [{"type": "compaction", "compact_threshold": 9}]
    default = decode_create(body(model="m", input="x", context_management=[{"type": "compaction"}]))
    assert default.settings.context_management == [
        {"type": "compaction", "compact_threshold": None}
    ]
    assert decode_create(body(model="m", input="x")).settings.context_management == []


@pytest.mark.parametrize(
    ("entries", "param"),
    [
        ([{"type": "summarize"}], "context_management[0].type"),
        ([{"type": "compaction"}, {"type": "compaction"}], "context_management[1]"),
        (
            [{"type": "compaction", "compact_threshold": 0}],
            "context_management[0].compact_threshold",
        ),
        ([{"compact_threshold": 5}], "context_management[0].type"),
    ],
)
def test_context_management_refusals(entries: list[dict[str, Any]], param: str) -> None:
    assert refused(decode_create, model="m", input="x", context_management=entries).param == param


def test_compacted_and_token_count_objects_validate_against_the_sdk() -> None:
    item = {"id": "cmp_1", "type": "compaction", "encrypted_content": "sw1.x"}
    user = {"id": "m", "type": "message", "role": "user", "content": [], "status": "completed"}
    encoded = encode_compacted(Compacted("resp_1", 12.5, [user, item], Usage(3, 2)))
    assert encoded["output"] == [user, item]
    # the SDK types output messages as the assistant's: check the rest against it
    parsed = CompactedResponse.model_validate({**encoded, "output": [item]})
    assert parsed.object == "response.compaction"
    assert parsed.created_at == 12
    assert parsed.usage.total_tokens == 5
    assert parsed.output[-1].type == "compaction"
    count = InputTokenCountResponse.model_validate(encode_token_count(TokenCount(7, True)))
    assert count.input_tokens == 7


@pytest.mark.parametrize(
    ("requested", "served"),
    [
        (None, None),
        ("flex", "flex"),
        ("auto", "default"),
        ("fast", "priority"),
        ("default", "default"),
    ],
)
def test_the_compacted_object_echoes_its_safety_identifier_and_served_tier(
    requested: str | None, served: str | None
) -> None:
    """``CompactedResponse``'s optional fields: the identifier as sent, the tier as a
    create's ended response reports it (none when none was asked for)."""
    item = {"id": "cmp_1", "type": "compaction", "encrypted_content": "sw1.x"}
    compacted = Compacted("resp_1", 1.0, [item], Usage(1, 1), requested, "sid")
    encoded = encode_compacted(compacted)
    assert (encoded["service_tier"], encoded["safety_identifier"]) == (served, "sid")
    parsed = CompactedResponse.model_validate(encoded)
    assert (parsed.service_tier, parsed.safety_identifier) == (served, "sid")
    plain = encode_compacted(Compacted("resp_2", 1.0, [item], Usage(1, 1)))
    assert (plain["service_tier"], plain["safety_identifier"]) == (None, None)


def test_the_compacted_object_echoes_the_image_policy_in_effect() -> None:
    """``CompactedResponse.image``: the effective policy when ``image`` was sent, else
    none."""
    item = {"id": "cmp_1", "type": "compaction", "encrypted_content": "sw1.x"}
    compacted = Compacted(
        "resp_1", 1.0, [item], Usage(1, 1), image={"context_compression": "disabled"}
    )
    encoded = encode_compacted(compacted)
    assert encoded["image"] == {"context_compression": "disabled"}
    parsed = CompactedResponse.model_validate(encoded)
    assert parsed.image is not None
    assert parsed.image.context_compression == "disabled"
    plain = encode_compacted(Compacted("resp_2", 1.0, [item], Usage(1, 1)))
    assert plain["image"] is None
    assert CompactedResponse.model_validate(plain).image is None


@pytest.mark.parametrize(
    ("event", "kind"),
    [
        (ev.SummaryPartAdded(1, 0, "rs_1"), "response.reasoning_summary_part.added"),
        (ev.SummaryTextDelta(1, 0, "rs_1", "a"), "response.reasoning_summary_text.delta"),
        (ev.SummaryTextDone(1, 0, "rs_1", "ab"), "response.reasoning_summary_text.done"),
        (ev.SummaryPartDone(1, 0, "rs_1", "ab"), "response.reasoning_summary_part.done"),
        (ev.Compacting(0, "cmp_1"), "response.compaction.compacting"),
    ],
)
def test_new_events_are_sdk_events(event: ev.Event, kind: str) -> None:
    payload = encode_event(4, event)
    assert payload["type"] == kind
    assert payload["sequence_number"] == 4
    parsed = EVENTS.validate_python(payload)
    assert parsed.type == kind
    if isinstance(event, ev.SummaryPartDone):
        assert payload["part"] == {"type": "summary_text", "text": "ab"}
