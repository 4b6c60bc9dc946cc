"""The settings a context's ``configuration_update`` items change."""

from __future__ import annotations

import pytest

from stateway.core.configuration_updates import updated_settings
from stateway.core.errors import InvalidRequest
from stateway.core.generation_settings import GenerationSettings
from stateway.protocols.responses.items import decode_items

SCHEMA = {"type": "json_schema", "name": "answer", "schema": {"type": "object"}}


def test_the_latest_update_of_each_setting_holds() -> None:
    settings = GenerationSettings(reasoning_effort="low")
    earlier = [{"type": "configuration_update", "reasoning": {"effort": "high"}}]
    later = [
        {"type": "message", "role": "user", "content": "hi"},
        {"type": "configuration_update", "text": {"format": SCHEMA}},
        {"type": "configuration_update", "reasoning": {"effort": "minimal"}},
    ]
    updated = updated_settings(settings, earlier, later)
    assert (updated.reasoning_effort, updated.text_format) == ("minimal", SCHEMA)
    assert updated_settings(settings, earlier).reasoning_effort == "high"


def test_a_context_without_updates_keeps_the_settings_themselves() -> None:
    settings = GenerationSettings(reasoning_effort="low")
    assert updated_settings(settings, [{"type": "message", "role": "user"}]) is settings


@pytest.mark.parametrize(
    ("update", "param"),
    [
        ({"reasoning": "high"}, "input[0].reasoning"),
        ({"reasoning": {"effort": "extreme"}}, "input[0].reasoning.effort"),
        ({"text": {"format": {"type": "json_schema"}}}, "input[0].text.format.name"),
        ({"text": {"format": {"type": "yaml"}}}, "input[0].text.format.type"),
    ],
)
def test_a_malformed_update_is_refused_naming_its_field(
    update: dict[str, object], param: str
) -> None:
    with pytest.raises(InvalidRequest) as refused:
        decode_items([{"type": "configuration_update", **update}])
    assert refused.value.param == param


def test_an_updates_format_is_normalized_as_a_requests() -> None:
    [item] = decode_items([{"type": "configuration_update", "text": {"format": {"type": "text"}}}])
    expected = {"type": "configuration_update", "text": {"format": {"type": "text"}}}
    assert item == {**expected, "id": item["id"]}
