"""A response's state as stored (``dump_state``) and read back (``load_state``)."""

from __future__ import annotations

import dataclasses

import orjson
import pytest

from stateway.core.generation_settings import GenerationSettings
from stateway.core.response import ResponseState, dump_state, load_state
from stateway.core.usage import Usage


def _state(settings: GenerationSettings) -> ResponseState:
    state = ResponseState(
        id="resp_1",
        tenant_id="t",
        created_at=1.5,
        model="m",
        instructions=None,
        previous_response_id=None,
        store=True,
        settings=settings,
    )
    state.status = "completed"
    state.usage = Usage(input_tokens=3, output_tokens=4)
    state.output = [{"type": "message", "role": "assistant", "content": []}]
    return state


CHANGED = GenerationSettings(
    temperature=0.5,
    tools=[{"type": "function", "name": "f"}],
    reasoning_effort="low",
    metadata={"k": "v"},
    parallel_tool_calls=False,
    text_format={"type": "json_object"},
)


def test_settings_at_their_defaults_are_not_stored() -> None:
    assert dump_state(_state(GenerationSettings()))["settings"] == {}


def test_only_the_settings_that_differ_from_their_defaults_are_stored() -> None:
    assert dump_state(_state(CHANGED))["settings"] == {
        "temperature": 0.5,
        "tools": [{"type": "function", "name": "f"}],
        "reasoning_effort": "low",
        "metadata": {"k": "v"},
        "parallel_tool_calls": False,
        "text_format": {"type": "json_object"},
    }


@pytest.mark.parametrize("settings", [GenerationSettings(), CHANGED], ids=["defaults", "changed"])
def test_a_stored_state_reads_back_as_it_was(settings: GenerationSettings) -> None:
    state = _state(settings)
    stored = orjson.loads(orjson.dumps(dump_state(state)))
    loaded = load_state("t", stored, state.output)
    assert loaded == state
    assert dataclasses.asdict(loaded.settings) == dataclasses.asdict(settings)


def test_defaults_read_back_are_not_shared_between_states() -> None:
    stored = orjson.loads(orjson.dumps(dump_state(_state(GenerationSettings()))))
    first = load_state("t", stored, [])
    first.settings.tools.append({"type": "function", "name": "g"})
    assert load_state("t", stored, []).settings.tools == []
