"""``max_output_tokens`` across the gateway's tool loop, in memory: it bounds the whole
response, so each later round is asked for what the earlier ones left, and a round that
would be asked for less than its upstream takes (``min_output_tokens``) is not asked: the
response ends ``incomplete`` as at its length. ``tests/e2e/test_tool_loop_budget.py``
runs the same over a real Responses upstream."""

from __future__ import annotations

from typing import Any

from stateway.core import events as ev
from tests.core.tools.test_tool_loop import MCP_TOOL, Setup, answer, call, tools_round

ADDING = tools_round(call("docs__add", {"a": 1, "b": 1}))
"""A round that calls a gateway tool and writes 2 output tokens."""


def asked(setup: Setup) -> list[int | None]:
    """The ``max_output_tokens`` each round asked its upstream for."""
    return [request.settings.max_output_tokens for request in setup.backend.requests]


async def create(setup: Setup, budget: int | None) -> Any:
    return await setup.create([MCP_TOOL], settings={"max_output_tokens": budget})


async def test_each_round_is_asked_for_what_the_earlier_rounds_left() -> None:
    setup = Setup([ADDING, ADDING, answer()])
    run = await create(setup, 10)
    assert asked(setup) == [10, 8, 6]
    assert run.state.status == "completed"


async def test_a_budget_per_call_asks_every_round_for_all_of_it() -> None:
    """Messages' ``max_tokens``: Anthropic gives each call of a request with server tools
    the whole of it, so the rounds together may write more."""
    setup = Setup([ADDING, ADDING, answer()])
    settings = {"max_output_tokens": 3, "max_output_tokens_per_call": True}
    run = await setup.create([MCP_TOOL], settings=settings)
    assert asked(setup) == [3, 3, 3]
    assert run.state.status == "completed"
    assert run.state.usage is not None
    assert run.state.usage.output_tokens > 3


async def test_an_unbounded_response_asks_every_round_for_no_bound() -> None:
    setup = Setup([ADDING, answer()])
    run = await create(setup, None)
    assert asked(setup) == [None, None]
    assert run.state.status == "completed"


async def test_a_used_up_budget_ends_incomplete_before_another_round() -> None:
    setup = Setup([ADDING])
    run = await create(setup, 4)
    state = run.state
    assert asked(setup) == [4, 2]
    assert (state.status, state.incomplete_reason) == ("incomplete", "max_output_tokens")
    calls = [item for item in state.output if item["type"] == "mcp_call"]
    assert [c["status"] for c in calls] == ["completed", "completed"]  # no dangling call
    assert setup.store.records["default", run.id].status == "incomplete"
    assert run.events[-1] == ev.ResponseFinished(state)


async def test_a_later_round_is_asked_for_exactly_the_least_its_upstream_takes() -> None:
    """18 tokens, 2 a round, an upstream that takes no budget under 16: the second round
    is asked for 16, and the third, which would be asked for 14, is not asked."""
    setup = Setup([ADDING])
    setup.backend.min_output_tokens = 16
    run = await create(setup, 18)
    assert asked(setup) == [18, 16]
    assert (run.state.status, run.state.incomplete_reason) == ("incomplete", "max_output_tokens")


async def test_the_first_round_is_asked_for_the_clients_budget_whatever_it_is() -> None:
    """Under the upstream's least too: the client asked for it, the upstream judges it."""
    setup = Setup([answer()])
    setup.backend.min_output_tokens = 16
    run = await create(setup, 5)
    assert asked(setup) == [5]
    assert run.state.status == "completed"
