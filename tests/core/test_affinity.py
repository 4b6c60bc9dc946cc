"""Cache affinity: a chain stays on the candidate that served it; new chains spread."""

from __future__ import annotations

from collections import Counter
from typing import Any

from stateway.core.commands import CreateResponse, GenerationSettings, Principal
from stateway.core.errors import UpstreamUnavailable
from stateway.core.gateway import Gateway
from stateway.core.inference import Finish, TextDelta
from stateway.core.routing.affinity import AffinityTable
from tests.core.routing_fakes import Named, candidate, gateway, route, router

USER = {"type": "message", "role": "user", "content": [{"type": "input_text", "text": "hi"}]}


class Steady(Named):
    """Answers every request; ``down`` fails each before output."""

    down = False

    async def infer(self, request: Any) -> Any:  # type: ignore[override]
        self.requests.append(request)
        if self.down:
            raise UpstreamUnavailable("down")
        yield TextDelta("ok")
        yield Finish("stop")


async def turn(gw: Gateway, previous: str | None = None, **fields: Any) -> Any:
    command = CreateResponse("assistant", [USER], previous_response_id=previous, **fields)
    run = await gw.execute(Principal(), command)
    await run.wait()
    assert run.state.status == "completed"
    return run


def served(run: Any) -> str:
    return next(x["backend"] for x in run.state.attempts if x["outcome"] == "ok")


async def test_a_chain_stays_while_new_chains_split_evenly() -> None:
    a, b = Steady("a"), Steady("b")
    gw = gateway(router(route(candidate(a), candidate(b)), seed=11))
    first = await turn(gw)
    home = served(first)
    previous = first.id
    for _ in range(9):
        run = await turn(gw, previous)
        assert served(run) == home
        assert run.state.attempts[0]["affinity"] == "hit"
        previous = run.id
    assert "affinity" not in first.state.attempts[0]  # a new chain has no parent
    starts = Counter([served(await turn(gw)) for _ in range(200)])
    assert 70 <= starts["a"] <= 130


async def test_with_its_candidate_down_a_chain_moves_and_stays_moved() -> None:
    a, b = Steady("a"), Steady("b")
    gw = gateway(router(route(candidate(a), candidate(b)), seed=3))
    first = await turn(gw)
    home, other = (a, b) if served(first) == "a" else (b, a)
    home.down = True
    moved = await turn(gw, first.id)
    assert served(moved) == other.name
    home.down = False
    previous = moved.id
    for _ in range(5):
        run = await turn(gw, previous)
        assert served(run) == other.name
        previous = run.id


async def test_prompt_cache_key_and_none_affinity() -> None:
    a, b = Steady("a"), Steady("b")
    keyed = GenerationSettings(prompt_cache_key="k1")
    gw = gateway(router(route(candidate(a), candidate(b)), seed=5))
    home = served(await turn(gw, settings=keyed))
    for _ in range(5):
        assert served(await turn(gw, settings=GenerationSettings(prompt_cache_key="k1"))) == home
    loose = gateway(router(route(candidate(a), candidate(b), affinity=False), seed=5))
    first = await turn(loose)
    spread = {served(await turn(loose, first.id)) for _ in range(30)}
    assert spread == {"a", "b"}


async def test_a_loaded_candidate_loses_its_continuations_past_the_tolerance() -> None:
    a, b = Steady("a"), Steady("b")
    routing = router(route(candidate(a), candidate(b), affinity_tolerance=0.5), seed=2)
    gw = gateway(routing)
    first = await turn(gw)
    home = served(first)
    routing.state.in_flight[f"{home}/{home}-model"] = 9  # 9 of 10 in flight: 90% > 75%
    other = "b" if home == "a" else "a"
    routing.state.in_flight[f"{other}/{other}-model"] = 1
    run = await turn(gw, first.id)
    assert run.state.attempts[0]["affinity"] == "miss"


def test_the_table_is_bounded_least_recently_used_first() -> None:
    table = AffinityTable(size=2)
    table.remember(["x"], "a/m")
    table.remember(["y"], "b/m")
    assert table.lookup(["x"]) == "a/m"
    table.remember(["z"], "b/m")
    assert table.lookup(["y"]) is None
    assert table.lookup(["nope", "x"]) == "a/m"
