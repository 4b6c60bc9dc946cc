"""A continuing request's ``tool_choice``, judged by the core once the earlier turns are
read (a first turn's is judged as it is decoded: tests/protocols/responses/test_decode.py)."""

from __future__ import annotations

from typing import Any

import pytest

from stateway.core.commands import CountTokens, CreateResponse
from stateway.core.errors import InvalidRequest
from stateway.core.gateway import Gateway
from stateway.core.generation_settings import GenerationSettings
from stateway.core.inference import Finish, TextDelta
from stateway.core.items import Item
from stateway.core.principal import Principal
from stateway.core.tools.history import REWRITTEN_ITEM_TYPES
from tests.core.fakes import MemoryStore, ScriptedBackend
from tests.core.test_loop import gateway_for, user

LOOKUP: Item = {"type": "function", "name": "lookup", "parameters": {"type": "object"}}
FORCED = {"type": "function", "name": "lookup"}


def offering(*tools: Item) -> Item:
    return {"type": "additional_tools", "role": "developer", "tools": list(tools), "id": "at_1"}


async def first_turn(gateway: Gateway, items: list[Item], tools: list[Item]) -> str:
    run = await gateway.execute(
        Principal(),
        CreateResponse(model="m", input=items, settings=GenerationSettings(tools=tools)),
    )
    await run.wait()
    return run.id


def continuing(previous: str, choice: Any, tools: list[Item] | None = None) -> CreateResponse:
    settings = GenerationSettings(tools=tools or [], tool_choice=choice)
    return CreateResponse(
        model="m", input=[user("again")], previous_response_id=previous, settings=settings
    )


async def test_a_continuation_may_force_a_tool_an_earlier_turns_item_offers() -> None:
    backend = ScriptedBackend([TextDelta("ok"), Finish("stop")])
    backend.carried_item_types |= REWRITTEN_ITEM_TYPES  # as every backend (additional_tools)
    gateway = gateway_for(backend, MemoryStore())
    previous = await first_turn(gateway, [offering(LOOKUP), user("hi")], [])
    run = await gateway.execute(Principal(), continuing(previous, FORCED))
    await run.wait()
    assert run.state.status == "completed"
    assert backend.requests[-1].tool_choice == FORCED
    declared = await gateway.execute(Principal(), continuing(previous, "required", [LOOKUP]))
    await declared.wait()
    assert backend.requests[-1].tool_choice == "required"


@pytest.mark.parametrize(
    ("choice", "message"),
    [
        (FORCED, "Tool choice 'lookup' not found in 'tools' parameter."),
        (
            {"type": "mcp", "server_label": "docs"},
            "Tool choice 'docs' not found in 'tools' parameter.",
        ),
        (
            {"type": "allowed_tools", "mode": "auto", "tools": [FORCED]},
            "Tool choice 'lookup' not found in 'tools' parameter.",
        ),
        ("required", "Tool choice 'required' must be specified with 'tools' parameter."),
    ],
)
async def test_a_continuation_forcing_what_nothing_offers_is_a_400(
    choice: Any, message: str
) -> None:
    """As hosted: the earlier turn's top-level tools are its own (a request declares its
    tools anew); the choice is refused, not sent as ``auto``."""
    backend = ScriptedBackend([TextDelta("ok"), Finish("stop")])
    store = MemoryStore()
    gateway = gateway_for(backend, store)
    previous = await first_turn(gateway, [user("hi")], [LOOKUP])
    for command in (continuing(previous, choice), CountTokens(continuing(previous, choice))):
        with pytest.raises(InvalidRequest) as caught:
            await gateway.execute(Principal(), command)
        error = caught.value
        assert (error.status, error.param, error.message) == (400, "tool_choice", message)
    assert len(backend.requests) == 1  # the first turn's only
    assert len(store.records) == 1
