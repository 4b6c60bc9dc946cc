"""Cache affinity through the real ``stateway serve`` over two equal-weight fake model
servers: a chain's turns keep to the candidate that served its first turn while new chains
spread over both, a chain whose candidate goes down moves to the other for good, and
chains and conversations find their candidate again after the gateway restarts."""

from __future__ import annotations

import asyncio
import uuid
from collections import Counter
from collections.abc import Iterator
from contextlib import ExitStack
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import pytest
from anthropic import Anthropic
from openai import AsyncOpenAI, OpenAI

from stateway.fake_upstream.launch import start_fake_upstream
from tests.e2e.configured import RunningGateway
from tests.e2e.routing import fake_requests, routed_gateway

TURNS = 10
NEW_CHAINS = 200
EVEN = range(70, 131)
"""How many of the new chains each candidate may start: 100 ± 30, over 4 standard
deviations of a fair split (a fair router fails once in ~30,000 runs; one sending two
chains in three to the same candidate fails)."""


class Restartable:
    """A fake model server that can be stopped and started again on the same port."""

    def __init__(self) -> None:
        self.url = ""
        self._running: ExitStack | None = None

    def start(self) -> None:
        port = urlsplit(self.url).port if self.url else 0
        running = ExitStack()
        self.url = running.enter_context(start_fake_upstream(port=port or 0))
        self._running = running

    def stop(self) -> None:
        assert self._running is not None
        self._running.close()
        self._running = None

    @property
    def up(self) -> bool:
        return self._running is not None


@pytest.fixture(scope="module")
def fakes() -> Iterator[dict[str, Restartable]]:
    servers = {"a": Restartable(), "b": Restartable()}
    for server in servers.values():
        server.start()
    yield servers
    for server in servers.values():
        if server.up:
            server.stop()


def pair_config(fakes: dict[str, Restartable]) -> str:
    return f"""
[[backends]]
name = "a"
url = "{fakes["a"].url}"
[[backends]]
name = "b"
url = "{fakes["b"].url}"

[[routes]]
name = "pair"
[[routes.candidates]]
backend = "a"
model = "pair-a"
[[routes.candidates]]
backend = "b"
model = "pair-b"
"""


@pytest.fixture(scope="module")
def pair(
    fakes: dict[str, Restartable], tmp_path_factory: pytest.TempPathFactory
) -> Iterator[RunningGateway]:
    with routed_gateway(tmp_path_factory.mktemp("pair"), pair_config(fakes)) as gateway:
        yield gateway


def marker() -> str:
    return uuid.uuid4().hex[:12]


def outcomes(gateway: RunningGateway, response_id: str) -> list[tuple[Any, ...]]:
    """Each attempt's backend, outcome, error code and affinity."""
    attempts = gateway.stored(response_id)["attempts"]
    return [(x["backend"], x["outcome"], x["detail"], x.get("affinity")) for x in attempts]


def served_by(gateway: RunningGateway, response_id: str) -> str:
    return str(next(x[0] for x in outcomes(gateway, response_id) if x[1] == "ok"))


async def test_a_chain_keeps_to_its_first_candidate_while_new_chains_split_evenly(
    pair: RunningGateway, fakes: dict[str, Restartable]
) -> None:
    """Before each of the chain's ten turns, twenty new chains start at once."""
    mark = marker()
    starts: Counter[str] = Counter()
    home = ""
    previous: str | None = None
    async with AsyncOpenAI(base_url=pair.url + "/v1", api_key="x", max_retries=0) as client:
        for turn in range(TURNS):
            batch = await asyncio.gather(
                *(client.responses.create(model="pair", input="new") for _ in range(20))
            )
            starts.update(served_by(pair, answer.id) for answer in batch)
            answer = await client.responses.create(
                model="pair", input=f"{mark} turn {turn}", previous_response_id=previous
            )
            if previous is None:
                home = served_by(pair, answer.id)
                assert outcomes(pair, answer.id) == [(home, "ok", None, None)]
            else:
                assert outcomes(pair, answer.id) == [(home, "ok", None, "hit")]
            previous = answer.id
    assert sum(starts.values()) == NEW_CHAINS
    assert starts["a"] in EVEN, starts
    assert starts["b"] in EVEN, starts
    away = "b" if home == "a" else "a"
    home_log = fake_requests(fakes[home].url, mark)
    assert [r["body"]["model"] for r in home_log] == [f"pair-{home}"] * TURNS
    assert fake_requests(fakes[away].url, mark) == []


@pytest.mark.parametrize("client", ["claude-code", "opencode"])
def test_a_stateless_clients_session_keeps_its_turns_on_one_candidate(
    pair: RunningGateway, fakes: dict[str, Restartable], client: str
) -> None:
    """Claude Code (Messages, ``X-Claude-Code-Session-Id``) and opencode (Chat
    Completions, ``x-session-affinity``) send the whole conversation every turn and name
    their session in a header: each session's turns reach one server (by chance alone,
    four would once in 8 runs, all sixteen sessions' never), and different sessions
    still reach both."""
    homes: set[str] = set()
    for _ in range(16):  # sessions
        mark = marker()
        for turn in range(4):
            said = f"{mark} turn {turn}"
            if client == "claude-code":
                with Anthropic(
                    base_url=pair.url,
                    api_key="x",
                    max_retries=0,
                    default_headers={"X-Claude-Code-Session-Id": mark},
                ) as claude:
                    claude.messages.create(
                        model="pair", max_tokens=50, messages=[{"role": "user", "content": said}]
                    )
            else:
                with OpenAI(
                    base_url=pair.url + "/v1",
                    api_key="x",
                    max_retries=0,
                    default_headers={"x-session-affinity": mark},
                ) as openai:
                    openai.chat.completions.create(
                        model="pair", messages=[{"role": "user", "content": said}]
                    )
        reached = {name for name, fake in fakes.items() if fake_requests(fake.url, mark)}
        assert len(reached) == 1, reached
        homes |= reached
    assert homes == {"a", "b"}  # all sixteen sessions on one server: once in 32,768 runs


def test_a_chain_whose_candidate_is_down_moves_to_the_other_and_stays(
    pair: RunningGateway, fakes: dict[str, Restartable]
) -> None:
    with OpenAI(base_url=pair.url + "/v1", api_key="x", max_retries=0) as client:

        def turn(previous: str) -> str:
            answer = client.responses.create(
                model="pair", input="next", previous_response_id=previous
            )
            assert answer.status == "completed"
            return answer.id

        first = client.responses.create(model="pair", input="first").id
        home = served_by(pair, first)
        away = "b" if home == "a" else "a"
        fakes[home].stop()
        try:
            moved = turn(first)
            assert outcomes(pair, moved) == [
                (home, "failed", "upstream_unavailable", "hit"),
                (away, "ok", None, None),
            ]
            previous = moved
            for _ in range(3):
                previous = turn(previous)
                assert outcomes(pair, previous) == [(away, "ok", None, "hit")]
        finally:
            fakes[home].start()
        for _ in range(3):  # the old candidate is back; the chain stays where it went
            previous = turn(previous)
            assert outcomes(pair, previous) == [(away, "ok", None, "hit")]
        for _ in range(60):  # yet it serves again: new chains reach it
            if served_by(pair, client.responses.create(model="pair", input="new").id) == home:
                break
        else:
            raise AssertionError(f"no new chain reached {home} once it was back")


def test_after_a_restart_chains_and_conversations_return_to_their_candidates(
    fakes: dict[str, Restartable], tmp_path: Path
) -> None:
    """The restarted process's affinity table is empty: each continuation's first attempt
    goes to the candidate stored as its parent's (``stored``), the next one's to the
    table's (``hit``)."""
    text = pair_config(fakes)
    homes: dict[str, str] = {}
    with routed_gateway(tmp_path, text) as first, client_of(first) as client:
        for _ in range(6):  # by chance alone, all six would come home once in 64 runs
            answer = client.responses.create(model="pair", input="first")
            homes[answer.id] = served_by(first, answer.id)
        conversation = client.conversations.create()
        opening = client.responses.create(model="pair", input="hi", conversation=conversation.id)
        conversation_home = served_by(first, opening.id)
    with routed_gateway(tmp_path, text) as restarted, client_of(restarted) as client:
        for parent, home in homes.items():
            answer = client.responses.create(
                model="pair", input="next", previous_response_id=parent
            )
            assert outcomes(restarted, answer.id) == [(home, "ok", None, "stored")]
            again = client.responses.create(
                model="pair", input="again", previous_response_id=answer.id
            )
            assert outcomes(restarted, again.id) == [(home, "ok", None, "hit")]
        turn = client.responses.create(model="pair", input="next", conversation=conversation.id)
        assert outcomes(restarted, turn.id) == [(conversation_home, "ok", None, "stored")]


def client_of(gateway: RunningGateway) -> OpenAI:
    return OpenAI(base_url=gateway.url + "/v1", api_key="x", max_retries=0)
