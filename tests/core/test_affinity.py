"""Cache affinity: a chain stays on the candidate that served it; new chains spread."""

from __future__ import annotations

from collections import Counter
from typing import Any

from stateway.core.commands import CreateResponse
from stateway.core.conversations.commands import CreateConversation
from stateway.core.errors import UpstreamUnavailable
from stateway.core.gateway import Gateway
from stateway.core.generation_settings import GenerationSettings
from stateway.core.inference import Finish, TextDelta
from stateway.core.loop import Loop
from stateway.core.principal import Principal
from stateway.core.routing.affinity import AffinityTable, chain_names
from stateway.core.run_registry import RunRegistry
from tests.core.conversation_fakes import MemoryConversations, TurnStore
from tests.core.fakes import MemoryStore
from tests.core.routing_fakes import Named, candidate, gateway, needs, route, router

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


async def test_a_prompt_cache_key_names_a_chain_of_its_tenant_only() -> None:
    """Another tenant's request with the same key is not sent after the owner's chain
    (onto the server holding its prefix), nor does it move the owner's."""
    a, b = Steady("a"), Steady("b")
    gw = gateway(router(route(candidate(a), candidate(b)), seed=5))
    alice, bob = Principal("alice", "key_a"), Principal("bob", "key_b")

    async def keyed(principal: Principal) -> Any:
        settings = GenerationSettings(prompt_cache_key="k1")
        run = await gw.execute(principal, CreateResponse("assistant", [USER], settings=settings))
        await run.wait()
        return run

    home = served(await keyed(alice))
    theirs = await keyed(bob)
    assert "affinity" not in theirs.state.attempts[0]  # a new chain, of bob's
    (a if home == "a" else b).down = True
    assert served(await keyed(bob)) != home  # bob's chain moves, alice's stays
    (a if home == "a" else b).down = False
    mine = await keyed(alice)
    assert served(mine) == home
    assert mine.state.attempts[0]["affinity"] == "hit"


async def test_a_session_keeps_a_stateless_clients_turns_on_one_candidate() -> None:
    """A client that sends its whole conversation each turn (Claude Code), naming its
    session: its turns keep to the candidate of its first, in its tenant only; another
    session is a chain of its own."""
    a, b = Steady("a"), Steady("b")
    gw = gateway(router(route(candidate(a), candidate(b)), seed=5))
    home = served(await turn(gw, session="s1"))
    for _ in range(5):
        run = await turn(gw, session="s1")
        assert served(run) == home
        assert run.state.attempts[0]["affinity"] == "hit"
    other = await gw.execute(
        Principal("bob", "key_b"), CreateResponse("assistant", [USER], session="s1")
    )
    await other.wait()
    assert "affinity" not in other.state.attempts[0]  # bob's own session
    sessions = {served(await turn(gw, session=f"s{n}")) for n in range(2, 30)}
    assert sessions == {"a", "b"}


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


def test_a_chain_is_named_in_its_tenant_most_specific_first() -> None:
    names = chain_names("t1", "resp_1", "conv_1", "k1", session="s1")
    assert names == [
        "t1/response:resp_1",
        "t1/conversation:conv_1",
        "t1/cache_key:k1",
        "t1/session:s1",
    ]
    assert chain_names("t1", None, None, None) == []


def test_the_table_is_bounded_least_recently_used_first() -> None:
    table = AffinityTable(size=2)
    table.remember(["x"], "a/m")
    table.remember(["y"], "b/m")
    assert table.lookup(["x"]) == "a/m"
    table.remember(["z"], "b/m")
    assert table.lookup(["y"]) is None
    assert table.lookup(["nope", "x"]) == "a/m"


def first_choice(routing: Any, stored: str | None, chain: list[str] | None = None) -> Any:
    """The candidate the plan's first round opens first, and its attempt's ``affinity``."""
    plan = routing.plan(
        routing.resolve("assistant"), needs(CreateResponse("assistant", [USER])), chain, stored
    )
    chosen = plan.begin_round()[0]
    return chosen.backend.name, plan.open(chosen).affinity


def test_a_stored_hint_leads_when_the_table_knows_none_of_the_names() -> None:
    a, b = Steady("a"), Steady("b")
    for seed in range(20):  # the weighted order alone would put "a" first about half the time
        routing = router(route(candidate(a), candidate(b)), seed=seed)
        assert first_choice(routing, "b/b-model", ["response:r1"]) == ("b", "stored")


def test_the_table_outranks_the_stored_hint() -> None:
    a, b = Steady("a"), Steady("b")
    for seed in range(20):
        routing = router(route(candidate(a), candidate(b)), seed=seed)
        routing.state.affinity.remember(["conversation:c1"], "a/a-model")
        chain = ["response:r1", "conversation:c1"]
        assert first_choice(routing, "b/b-model", chain) == ("a", "hit")


def test_a_stored_hint_follows_the_tables_rules() -> None:
    a, b = Steady("a"), Steady("b")
    routing = router(route(candidate(a), candidate(b, priority=1)), seed=1)
    assert first_choice(routing, "b/b-model", ["response:r1"]) == ("a", "miss")  # a later tier
    assert first_choice(routing, "gone/model", ["response:r1"]) == ("a", "miss")  # no such
    for _ in range(3):
        routing.state.health.failed("a/a-model")
    assert first_choice(routing, "a/a-model", ["response:r1"]) == ("b", "miss")  # circuit open
    loose = router(route(candidate(a), candidate(b), affinity=False), seed=1)
    assert first_choice(loose, "b/b-model", ["response:r1"])[1] is None


async def test_after_a_restart_a_chain_returns_to_its_stored_candidate() -> None:
    """A new router (an empty table) over the same store: the parent's ``served_by``."""
    store = MemoryStore()
    a, b = Steady("a"), Steady("b")
    homes = {}
    for n in range(8):
        first = await turn(gateway(router(route(candidate(a), candidate(b)), seed=n), store))
        homes[first.id] = served(first)
        assert store.records[(Principal().tenant_id, first.id)].served_by == f"{served(first)}/" + (
            f"{served(first)}-model"
        )
    for n, (parent, home) in enumerate(homes.items()):
        restarted = gateway(router(route(candidate(a), candidate(b)), seed=100 + n), store)
        run = await turn(restarted, parent)
        assert (served(run), run.state.attempts[0]["affinity"]) == (home, "stored")
        again = await turn(restarted, run.id)
        assert (served(again), again.state.attempts[0]["affinity"]) == (home, "hit")


async def test_after_a_restart_a_conversation_returns_to_its_last_turns_candidate() -> None:
    conversations = MemoryConversations()
    store = TurnStore(conversations)
    a, b = Steady("a"), Steady("b")

    def fresh(seed: int) -> Gateway:
        routing = router(route(candidate(a), candidate(b)), seed=seed)
        return Gateway(store, routing, Loop(store), RunRegistry(), conversations=conversations)

    for n in range(6):
        conversation = await fresh(n).execute(Principal(), CreateConversation())
        first = await turn(fresh(n), conversation_id=conversation.id)
        assert "affinity" not in first.state.attempts[0]
        run = await turn(fresh(50 + n), conversation_id=conversation.id)
        assert (served(run), run.state.attempts[0]["affinity"]) == (served(first), "stored")


async def test_a_conversation_stays_on_the_candidate_of_its_last_turn() -> None:
    conversations = MemoryConversations()
    store = TurnStore(conversations)
    a, b = Steady("a"), Steady("b")
    routing = router(route(candidate(a), candidate(b)), seed=4)
    gw = Gateway(store, routing, Loop(store), RunRegistry(), conversations=conversations)
    for n in range(4):
        conversation = await gw.execute(Principal(), CreateConversation())
        home = served(await turn(gw, conversation_id=conversation.id))
        for _ in range(3):
            run = await turn(gw, conversation_id=conversation.id)
            assert (served(run), run.state.attempts[0]["affinity"]) == (home, "hit"), n
