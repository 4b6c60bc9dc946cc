"""Both CommandResults adapters against one contract: claim before run, outcomes for
retries, waiters joining the attempt under way, a failed attempt leaving nothing, a key
reused with another request refused. The Redis adapter against the real Redis server."""

from __future__ import annotations

import asyncio
import hashlib
import logging
import uuid
from collections.abc import AsyncIterator
from contextlib import suppress
from typing import Any, Literal

import pytest
from redis.exceptions import ConnectionError as RedisConnectionError

from stateway.coordination import MemoryCommandResults
from stateway.coordination import redis as redis_module
from stateway.coordination.redis import RedisCommandResults, connect
from stateway.core.coordination import CommandKey, CommandResults, Outcome
from stateway.core.errors import IdempotencyKeyReused, StorageError
from stateway.core.exactly_once import attempt
from tests.support.switch import Switch

KEY = CommandKey("default", "anonymous", "key-1")
WAIT = 5.0
"""Seconds a waiter is given to be answered: one left waiting fails, not hangs, its test."""


@pytest.fixture(params=["memory", pytest.param("redis", marks=pytest.mark.redis)])
async def results(request: pytest.FixtureRequest) -> AsyncIterator[CommandResults]:
    if request.param == "memory":
        adapter: CommandResults = MemoryCommandResults()
    else:
        url: str = request.getfixturevalue("redis_url")
        adapter = RedisCommandResults(connect(url), f"test:{uuid.uuid4().hex}:")
    yield adapter
    await adapter.aclose()


async def test_the_first_claim_runs_and_a_retry_gets_its_outcome(results: CommandResults) -> None:
    assert await results.claim(KEY, "f1") is None
    await results.complete(KEY, Outcome("f1", b'{"id":"resp_1"}'))

    assert await results.claim(KEY, "f1") == Outcome("f1", b'{"id":"resp_1"}')
    assert await results.claim(KEY, "f1") == Outcome("f1", b'{"id":"resp_1"}')


async def test_an_outcome_is_kept_byte_for_byte(results: CommandResults) -> None:
    body = b'{"text": "two\nlines"}\n\n'
    assert await results.claim(KEY, "f1") is None
    await results.complete(KEY, Outcome("f1", body))

    assert await results.claim(KEY, "f1") == Outcome("f1", body)


async def test_a_streamed_outcome_keeps_its_response_id(results: CommandResults) -> None:
    assert await results.claim(KEY, "f1") is None
    await results.complete(KEY, Outcome("f1", response_id="resp_9"))

    assert await results.claim(KEY, "f1") == Outcome("f1", b"", "resp_9")


async def test_keys_of_other_tenants_principals_and_ids_are_apart(
    results: CommandResults,
) -> None:
    assert await results.claim(KEY, "f1") is None
    await results.complete(KEY, Outcome("f1", b"1"))
    for other in (
        CommandKey("acme", "anonymous", "key-1"),
        CommandKey("default", "bob", "key-1"),
        CommandKey("default", "anonymous", "key-2"),
    ):
        assert await results.claim(other, "f1") is None


async def test_ids_holding_a_unit_separator_are_apart(results: CommandResults) -> None:
    """A WebSocket ``command_id`` and a token's ``sub`` may hold the key's separator."""
    first = CommandKey("default", "oidc:a\x1fb", "c")
    assert await results.claim(first, "f1") is None
    await results.complete(first, Outcome("f1", b"1"))
    assert await results.claim(CommandKey("default", "oidc:a", "b\x1fc"), "f2") is None


async def test_the_same_key_with_another_request_is_refused_done_or_running(
    results: CommandResults,
) -> None:
    assert await results.claim(KEY, "f1") is None
    with pytest.raises(IdempotencyKeyReused):
        await results.claim(KEY, "f2")  # while the first attempt runs
    await results.complete(KEY, Outcome("f1", b"1"))
    with pytest.raises(IdempotencyKeyReused):
        await results.claim(KEY, "f2")


async def test_retries_arriving_meanwhile_wait_for_the_attempt_under_way(
    results: CommandResults,
) -> None:
    assert await results.claim(KEY, "f1") is None
    waiters = [asyncio.create_task(results.claim(KEY, "f1")) for _ in range(5)]
    await asyncio.sleep(0)
    assert not any(w.done() for w in waiters)

    await results.complete(KEY, Outcome("f1", b"answer"))

    async with asyncio.timeout(WAIT):
        assert await asyncio.gather(*waiters) == [Outcome("f1", b"answer")] * 5


async def test_a_failed_attempt_leaves_nothing_and_one_waiter_runs_instead(
    results: CommandResults,
) -> None:
    assert await results.claim(KEY, "f1") is None
    waiters = [asyncio.create_task(results.claim(KEY, "f1")) for _ in range(3)]
    await asyncio.sleep(0)

    await results.release(KEY)

    async with asyncio.timeout(WAIT):
        done, pending = await asyncio.wait(waiters, return_when=asyncio.FIRST_COMPLETED)
        assert [w.result() for w in done] == [None]  # the one that claimed it runs it
        await results.complete(KEY, Outcome("f1", b"second"))
        assert [await w for w in pending] == [Outcome("f1", b"second")] * 2


async def test_memory_outcomes_are_bounded_least_recently_used_first() -> None:
    results = MemoryCommandResults(max_results=2)
    keys = [CommandKey("t", "p", str(n)) for n in range(3)]
    for key in keys[:2]:
        assert await results.claim(key, "f") is None
        await results.complete(key, Outcome("f", key.command_id.encode()))
    assert await results.claim(keys[0], "f") is not None  # used: now the most recent
    assert await results.claim(keys[2], "f") is None
    await results.complete(keys[2], Outcome("f", b"2"))

    assert len(results) == 2
    assert await results.claim(keys[1], "f") is None  # dropped: runs again
    assert await results.claim(keys[0], "f") == Outcome("f", b"0")


async def test_memory_outcomes_are_bounded_by_their_bytes_least_recently_used_first() -> None:
    """Past ``max_bytes`` of answers, the least recently used outcomes are dropped (their
    retries run again), as past ``max_results``; the newest is kept whatever its size."""
    results = MemoryCommandResults(max_bytes=100)
    keys = [CommandKey("t", "p", str(n)) for n in range(4)]
    for key in keys[:2]:
        assert await results.claim(key, "f") is None
        await results.complete(key, Outcome("f", b"x" * 40))
    assert await results.claim(keys[0], "f") is not None  # used: now the most recent
    assert await results.claim(keys[2], "f") is None
    await results.complete(keys[2], Outcome("f", b"y" * 40))  # 120 bytes: one must go

    assert len(results) == 2
    assert await results.claim(keys[1], "f") is None  # dropped: runs again
    await results.release(keys[1])
    assert await results.claim(keys[0], "f") == Outcome("f", b"x" * 40)

    assert await results.claim(keys[3], "f") is None
    await results.complete(keys[3], Outcome("f", b"z" * 500))  # alone past the bound
    assert len(results) == 1
    assert await results.claim(keys[3], "f") == Outcome("f", b"z" * 500)
    assert await results.claim(keys[2], "f") is None


async def test_a_tenants_flood_of_commands_pushes_out_its_own_outcomes_only() -> None:
    """Past a bound, the outcome dropped is the least recently used of the tenant holding
    the most (outcomes past ``max_results``, answer bytes past ``max_bytes``): another
    tenant's many cheap keyed requests (conversations made with an ``Idempotency-Key``)
    do not make a tenant's retry run its create again."""
    for bounded, size in (
        (MemoryCommandResults(max_results=4), 1),
        (MemoryCommandResults(max_bytes=100), 30),
    ):
        theirs = CommandKey("alice", "key_a", "create")
        assert await bounded.claim(theirs, "f") is None
        await bounded.complete(theirs, Outcome("f", b"a" * 40))
        flood = [CommandKey("bob", "key_b", str(n)) for n in range(10)]
        for key in flood:
            assert await bounded.claim(key, "f") is None
            await bounded.complete(key, Outcome("f", b"b" * size))

        assert await bounded.claim(theirs, "f") == Outcome("f", b"a" * 40)
        assert await bounded.claim(flood[-1], "f") == Outcome("f", b"b" * size)
        assert await bounded.claim(flood[0], "f") is None  # bob's own oldest went
        await bounded.release(flood[0])


async def test_the_tenant_holding_most_gives_up_its_least_recently_used_outcome() -> None:
    results = MemoryCommandResults(max_results=4)
    alice = [CommandKey("alice", "key_a", str(n)) for n in range(3)]
    bob = CommandKey("bob", "key_b", "0")
    for key in [bob, *alice]:  # bob's the least recently used of all
        assert await results.claim(key, "f") is None
        await results.complete(key, Outcome("f", key.command_id.encode()))
    assert await results.claim(alice[0], "f") is not None  # used: alice's most recent
    newest = CommandKey("bob", "key_b", "1")
    assert await results.claim(newest, "f") is None
    await results.complete(newest, Outcome("f", b"1"))  # five: alice holds the most

    assert len(results) == 4
    assert await results.claim(alice[1], "f") is None  # alice's least recently used went
    await results.release(alice[1])
    assert [await results.claim(key, "f") for key in (alice[0], alice[2], bob, newest)] == [
        Outcome("f", b"0"),
        Outcome("f", b"2"),
        Outcome("f", b"0"),
        Outcome("f", b"1"),
    ]


async def test_memory_outcomes_free_their_bytes_as_they_expire() -> None:
    now = [0.0]
    results = MemoryCommandResults(ttl=10, clock=lambda: now[0], max_bytes=100)
    first, second = CommandKey("t", "p", "1"), CommandKey("t", "p", "2")
    assert await results.claim(first, "f") is None
    await results.complete(first, Outcome("f", b"x" * 60))
    now[0] = 10.0
    assert await results.claim(first, "f") is None  # expired: its 60 bytes freed
    await results.release(first)
    assert await results.claim(second, "f") is None
    await results.complete(second, Outcome("f", b"y" * 60))
    assert await results.claim(first, "f") is None
    await results.complete(first, Outcome("f", b"x" * 40))  # 100 bytes: both kept

    assert len(results) == 2
    assert await results.claim(second, "f") == Outcome("f", b"y" * 60)


async def test_memory_outcomes_expire_after_their_ttl() -> None:
    now = [0.0]
    results = MemoryCommandResults(ttl=10, clock=lambda: now[0])
    assert await results.claim(KEY, "f") is None
    await results.complete(KEY, Outcome("f", b"x"))
    now[0] = 9.9
    assert await results.claim(KEY, "f") == Outcome("f", b"x")
    now[0] = 10.0
    assert await results.claim(KEY, "f") is None


async def test_a_waiter_gets_the_outcome_it_waited_for_even_if_it_is_not_kept() -> None:
    now = [0.0]
    results = MemoryCommandResults(ttl=10, clock=lambda: now[0])
    assert await results.claim(KEY, "f") is None
    waiter = asyncio.create_task(results.claim(KEY, "f"))
    await asyncio.sleep(0)

    await results.complete(KEY, Outcome("f", b"x"))
    now[0] = 10.0  # expired before the waiter woke

    async with asyncio.timeout(WAIT):
        assert await waiter == Outcome("f", b"x")


async def test_an_attempt_ending_after_close_is_let_go_quietly(results: CommandResults) -> None:
    """Shutting down lets every claim go; the attempts still under way end afterwards."""
    first, second = CommandKey("t", "p", "1"), CommandKey("t", "p", "2")
    assert await results.claim(first, "f") is None
    assert await results.claim(second, "f") is None
    await results.aclose()

    await results.complete(first, Outcome("f", b"x"))
    await results.release(second)


async def test_closing_wakes_waiters_of_claims_left_open() -> None:
    results = MemoryCommandResults()
    assert await results.claim(KEY, "f") is None
    waiter = asyncio.create_task(results.claim(KEY, "f"))
    await asyncio.sleep(0)
    await results.aclose()
    async with asyncio.timeout(WAIT):
        assert await waiter is None  # the claim was let go: the waiter holds it now


@pytest.mark.redis
async def test_redis_outcomes_are_shared_by_two_processes_clients(redis_url: str) -> None:
    prefix = f"test:{uuid.uuid4().hex}:"
    first = RedisCommandResults(connect(redis_url), prefix)
    second = RedisCommandResults(connect(redis_url), prefix)
    try:
        assert await first.claim(KEY, "f") is None
        waiting = asyncio.create_task(second.claim(KEY, "f"))
        await asyncio.sleep(0.01)
        assert not waiting.done()
        await first.complete(KEY, Outcome("f", b"shared"))
        assert await waiting == Outcome("f", b"shared")
    finally:
        await first.aclose()
        await second.aclose()


@pytest.mark.redis
async def test_redis_keeps_a_claim_and_an_outcome_for_their_ttls(
    redis_url: str, caplog: pytest.LogCaptureFixture
) -> None:
    prefix = f"test:{uuid.uuid4().hex}:"
    results = RedisCommandResults(connect(redis_url), prefix, claim_ttl=30, result_ttl=100)
    probe = connect(redis_url)
    name = prefix + "cmd:" + hashlib.sha256(str(KEY).encode()).hexdigest()
    try:
        assert await results.claim(KEY, "f") is None
        assert 29_000 < await probe.pttl(name) <= 30_000
        await results.complete(KEY, Outcome("f", b"x"))
        assert 99_000 < await probe.pttl(name) <= 100_000
        assert not [r for r in caplog.records if r.name == "stateway.coordination.redis"]
    finally:
        await results.aclose()
        await probe.aclose()


@pytest.mark.redis
async def test_a_claim_is_renewed_while_its_command_runs(redis_url: str) -> None:
    prefix = f"test:{uuid.uuid4().hex}:"
    results = RedisCommandResults(connect(redis_url), prefix, claim_ttl=1.0)
    probe = connect(redis_url)
    try:
        assert await results.claim(KEY, "f") is None
        [name] = await probe.keys(prefix + "*")
        for _ in range(5):  # over twice its expiry: still held
            await asyncio.sleep(0.5)
            assert await probe.exists(name)
        await results.complete(KEY, Outcome("f", b"x"))
        assert await results.claim(KEY, "f") == Outcome("f", b"x")
    finally:
        await results.aclose()
        await probe.aclose()


@pytest.mark.redis
async def test_a_renewal_redis_cannot_take_is_warned_of_with_its_error(
    redis_url: str, caplog: pytest.LogCaptureFixture
) -> None:
    """Renewing goes on through an outage, each failure told with what Redis's client
    said (the claim may expire meanwhile: a retry then runs the command again)."""
    async with Switch(redis_url) as switch:
        results = RedisCommandResults(
            connect(switch.url), f"test:{uuid.uuid4().hex}:", claim_ttl=0.3
        )
        try:
            assert await results.claim(KEY, "f") is None
            with caplog.at_level(logging.WARNING, logger=redis_module.__name__):
                switch.off()
                await switch.refused(4)  # renewals, and their sends on new connections
        finally:
            await results.aclose()
    warned = [r.getMessage() for r in caplog.records if r.name == redis_module.__name__]
    assert warned
    for message in warned:
        assert message.startswith("renewing a command's claim failed: Connection closed")


@pytest.mark.redis
async def test_a_claim_whose_holder_died_expires_and_the_command_runs_again(
    redis_url: str, caplog: pytest.LogCaptureFixture
) -> None:
    prefix = f"test:{uuid.uuid4().hex}:"
    dead = RedisCommandResults(connect(redis_url), prefix, claim_ttl=0.2)
    alive = RedisCommandResults(connect(redis_url), prefix, claim_ttl=0.2)
    try:
        assert await dead.claim(KEY, "f") is None
        for _, renewing in dead._held.values():  # the holder's process is gone
            renewing.cancel()
        assert await alive.claim(KEY, "f") is None  # waited for the expiry, then claimed
        with caplog.at_level(logging.WARNING, logger=redis_module.__name__):
            await dead.complete(KEY, Outcome("f", b"late"))  # not its claim any more
        assert [r.getMessage() for r in caplog.records if r.name == redis_module.__name__] == [
            "the claim of a command expired before it ended; its outcome is lost"
        ]
        await alive.complete(KEY, Outcome("f", b"mine"))
        assert await alive.claim(KEY, "f") == Outcome("f", b"mine")
    finally:
        await dead.aclose()
        await alive.aclose()


@pytest.mark.redis
async def test_a_holder_whose_claim_is_gone_stops_renewing_it_and_says_so(
    redis_url: str, caplog: pytest.LogCaptureFixture
) -> None:
    """Its process was paused past ``claim_ttl`` (or Redis lost the key): a retry elsewhere
    may have claimed the command meanwhile. The holder's renewals touch nothing but its
    own claim, so they stop, once it is gone, with one warning: the command may run twice."""
    prefix = f"test:{uuid.uuid4().hex}:"
    paused = RedisCommandResults(connect(redis_url), prefix, claim_ttl=0.3)
    retry = RedisCommandResults(connect(redis_url), prefix)
    probe = connect(redis_url)
    try:
        assert await paused.claim(KEY, "f") is None
        [name] = await probe.keys(prefix + "*")
        await probe.delete(name)  # expired while its holder could not renew it
        assert await retry.claim(KEY, "f") is None  # the retry runs it now
        _, renewing = paused._held[KEY]
        async with asyncio.timeout(WAIT):
            await renewing
        assert await probe.pttl(name) > 10_000  # the retry's claim, untouched
        assert [r.getMessage() for r in caplog.records if r.name == redis_module.log.name] == [
            "a command's claim expired while it ran (this process paused, or Redis lost the"
            " key, for longer than claim_ttl): a retry may run the command meanwhile"
        ]
    finally:
        await paused.aclose()
        await retry.aclose()
        await probe.aclose()


async def test_an_unreachable_redis_is_a_503() -> None:
    results = RedisCommandResults(connect("redis://127.0.0.1:1/0"), "test:")
    try:
        with pytest.raises(StorageError) as raised:
            await results.claim(KEY, "f")
        assert raised.value.status == 503
    finally:
        await results.aclose()


@pytest.mark.redis
async def test_ping_answers_when_redis_does(redis_url: str) -> None:
    results = RedisCommandResults(connect(redis_url), "test:")
    try:
        await results.ping()
    finally:
        await results.aclose()


async def test_ping_reports_an_unreachable_redis_as_a_503() -> None:
    results = RedisCommandResults(connect("redis://127.0.0.1:1/0"), "test:")
    try:
        with pytest.raises(StorageError) as raised:
            await results.ping()
        assert (raised.value.status, raised.value.message) == (
            503,
            "The coordination store (Redis) is unavailable.",
        )
    finally:
        await results.aclose()


async def test_ping_reports_a_redis_that_never_answers_within_its_timeout(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """A Redis that accepts connections and answers nothing (hung, or a half-open
    proxy) is reported down: readiness is not held for the socket's own timeout."""
    monkeypatch.setattr(redis_module, "PING_TIMEOUT", 0.05)
    connected = asyncio.Event()

    async def silent(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        connected.set()
        await reader.read()  # until the client leaves; never a reply

    server = await asyncio.start_server(silent, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    results = RedisCommandResults(connect(f"redis://127.0.0.1:{port}/0"), "test:")
    try:
        async with asyncio.timeout(5):
            with pytest.raises(StorageError) as raised:
                await results.ping()
        assert connected.is_set()
        assert (raised.value.status, raised.value.message) == (
            503,
            "The coordination store (Redis) is unavailable.",
        )
        assert "redis: no answer to a ping within 0.05 s" in caplog.messages
    finally:
        await results.aclose()
        server.close()


@pytest.mark.redis
async def test_a_connection_redis_closed_meanwhile_is_replaced_not_a_503(redis_url: str) -> None:
    """Redis closed the pooled connection while the command ran (a restart, a failover, an
    idle client's ``timeout``): completing it sends again on a new connection, rather than
    answering 503 for a command that ran and leaving its claim to block its retries."""
    prefix = f"test:{uuid.uuid4().hex}:"
    client = connect(redis_url)
    results = RedisCommandResults(client, prefix)
    admin = connect(redis_url)
    try:
        assert await results.claim(KEY, "f") is None
        await admin.client_kill_filter(_id=str(await client.client_id()))

        await results.complete(KEY, Outcome("f", b"ran"))

        assert await results.claim(KEY, "f") == Outcome("f", b"ran")
        await admin.client_kill_filter(_id=str(await client.client_id()))
        assert await results.claim(KEY, "f") == Outcome("f", b"ran")
    finally:
        await results.aclose()
        await admin.aclose()


@pytest.mark.redis
async def test_a_claim_sent_twice_is_this_attempts_own(redis_url: str) -> None:
    """A claim whose reply was lost is sent again and finds itself: this attempt holds the
    key, it does not wait for its own claim to expire."""
    prefix = f"test:{uuid.uuid4().hex}:"
    results = RedisCommandResults(connect(redis_url), prefix)
    original = results._redis.set
    sent = []

    def twice(*args: Any, **kwargs: Any) -> Any:
        async def send() -> Any:
            sent.append(await original(*args, **kwargs))  # this one's reply is lost
            return await original(*args, **kwargs)

        return send()

    results._redis.set = twice  # type: ignore[method-assign]
    try:
        assert await asyncio.wait_for(results.claim(KEY, "f"), 5) is None
        assert sent == [None], "the first send took the key"
        results._redis.set = original  # type: ignore[method-assign]
        await results.complete(KEY, Outcome("f", b"once"))
        assert await results.claim(KEY, "f") == Outcome("f", b"once")
    finally:
        await results.aclose()


@pytest.mark.redis
@pytest.mark.parametrize(
    ("fails", "logged"),
    [(False, "its outcome is not kept"), (True, "its claim is left to expire")],
    ids=["completed", "released"],
)
async def test_a_settle_redis_cannot_take_is_one_warning(
    redis_url: str, caplog: pytest.LogCaptureFixture, fails: bool, logged: str
) -> None:
    """Redis going away while a keyed command runs: what is lost is told once, with what
    Redis said (the core's line), not once by the adapter and again by the core."""
    async with Switch(redis_url) as switch:
        results = RedisCommandResults(connect(switch.url), f"test:{uuid.uuid4().hex}:")
        try:
            with caplog.at_level(logging.WARNING), suppress(RuntimeError):
                async with attempt(results, KEY, "f", param="Idempotency-Key") as once:
                    switch.off()
                    if fails:
                        raise RuntimeError("the command failed")
                    once.remember(b"the answer")
        finally:
            await results.aclose()
    [warned] = [r.getMessage() for r in caplog.records if r.levelno >= logging.WARNING]
    assert logged in warned
    assert "The coordination store (Redis) is unavailable. (" in warned
    assert "Connection closed" in warned, "what Redis's client said of the cut"


@pytest.mark.redis
async def test_a_claim_cancelled_as_redis_takes_it_is_let_go(redis_url: str) -> None:
    """A waiter cancelled (its client left) at any point of its claim, even while Redis
    takes it for the waiter, leaves no claim behind: none left to hold the key, unrenewed,
    until it expires."""
    prefix = f"test:{uuid.uuid4().hex}:"
    results = RedisCommandResults(connect(redis_url), prefix)
    probe = connect(redis_url)
    held = []
    try:
        for steps in range(12):  # cancelled after ever more steps of its claim
            key = CommandKey("default", "anonymous", f"key-{steps}")
            claiming = asyncio.create_task(results.claim(key, "f"))
            for _ in range(steps):
                await asyncio.sleep(0)
            claiming.cancel()
            with suppress(asyncio.CancelledError):
                if await claiming is None:  # claimed before it was cancelled: its to let go
                    held.append(key)
        for key in held:
            await results.release(key)
    finally:
        await results.aclose()  # what it let go, let go by then
        left = await probe.keys(prefix + "cmd:*")
        await probe.aclose()
    assert left == []


class Gated:
    """A Redis adapter's client whose ``SET`` commands each wait for their own gate (the
    first for ``gates[0]``...), :attr:`sent` set as each is called, then sent (or, per
    ``then``, failed, or answered as if Redis took the claim, without asking it); and
    which records the scripts run after it closed."""

    def __init__(
        self,
        results: RedisCommandResults,
        count: int,
        *,
        then: Literal["send", "fail", "take"] = "send",
    ) -> None:
        client = results._redis
        self.gates = [asyncio.Event() for _ in range(count)]
        self.sent = [asyncio.Event() for _ in range(count)]
        self.closed = False
        self.after_close: list[str] = []
        self.settled = asyncio.Event()
        """Set once a script (a claim let go) returned."""
        calls = iter(range(count))
        sets, evalsha, aclose = client.set, client.evalsha, client.aclose

        def gated_set(*args: Any, **kwargs: Any) -> Any:
            turn = next(calls)

            async def send() -> Any:
                self.sent[turn].set()
                await self.gates[turn].wait()
                if then == "fail":
                    raise RedisConnectionError("Connection closed by server.")
                return None if then == "take" else await sets(*args, **kwargs)

            return send()

        async def recorded_evalsha(*args: Any, **kwargs: Any) -> Any:
            if self.closed:
                self.after_close.append("EVALSHA")
            result = await evalsha(*args, **kwargs)
            self.settled.set()
            return result

        async def close() -> None:
            self.closed = True
            await aclose()

        client.set = gated_set  # type: ignore[method-assign]
        client.evalsha = recorded_evalsha  # type: ignore[method-assign]
        client.aclose = close  # type: ignore[method-assign]


@pytest.mark.redis
async def test_closing_waits_for_a_claim_let_go_meanwhile(redis_url: str) -> None:
    """A waiter cancelled while the adapter closes, as Redis takes its claim: closing
    waits for that claim to be let go too, and closes the client only then (nothing run
    on a closed client, no claim left to expire)."""
    prefix = f"test:{uuid.uuid4().hex}:"
    results = RedisCommandResults(connect(redis_url), prefix)
    client = Gated(results, 2)
    probe = connect(redis_url)
    try:
        first = asyncio.create_task(results.claim(CommandKey("t", "p", "1"), "f"))
        second = asyncio.create_task(results.claim(CommandKey("t", "p", "2"), "f"))
        for sent in client.sent:
            await asyncio.wait_for(sent.wait(), WAIT)
        first.cancel()  # its claim let go once its SET is answered
        await asyncio.sleep(0)
        closing = asyncio.create_task(results.aclose())
        await asyncio.sleep(0)  # closing waits for the first's let-go
        second.cancel()  # its let-go begins after closing did
        await asyncio.sleep(0)
        client.gates[0].set()
        await asyncio.wait_for(client.settled.wait(), WAIT)  # the first let go
        client.gates[1].set()
        await asyncio.wait_for(closing, WAIT)
        left = await probe.keys(prefix + "cmd:*")
    finally:
        await probe.aclose()
    assert first.cancelled()
    assert second.cancelled()
    assert client.after_close == []
    assert left == []


@pytest.mark.redis
async def test_a_waiter_whose_claim_redis_failed_is_not_said_to_leave_one(
    redis_url: str, caplog: pytest.LogCaptureFixture
) -> None:
    """A waiter cancelled while its claim's ``SET`` is under way, which then fails: it
    took no claim, and the log tells what Redis said alone, not of a claim left to
    expire."""
    results = RedisCommandResults(connect(redis_url), f"test:{uuid.uuid4().hex}:")
    client = Gated(results, 1, then="fail")
    claiming = asyncio.create_task(results.claim(KEY, "f"))
    await asyncio.wait_for(client.sent[0].wait(), WAIT)
    claiming.cancel()
    await asyncio.sleep(0)
    with caplog.at_level(logging.WARNING):
        client.gates[0].set()
        await asyncio.wait_for(results.aclose(), WAIT)  # once its claim was let go

    assert [r.getMessage() for r in caplog.records] == ["redis: Connection closed by server."]


class Warned(logging.Handler):
    """Sets :attr:`warned` at the first warning it handles."""

    def __init__(self) -> None:
        super().__init__(logging.WARNING)
        self.warned = asyncio.Event()

    def emit(self, record: logging.LogRecord) -> None:
        self.warned.set()


@pytest.mark.redis
async def test_a_waiter_leaving_once_the_client_closed_leaves_its_claim_to_expire(
    redis_url: str, caplog: pytest.LogCaptureFixture
) -> None:
    """A waiter cancelled once the adapter's client closed, as Redis takes its claim:
    nothing is run on the closed client to let it go; the log says it is left to
    expire."""
    results = RedisCommandResults(connect(redis_url), f"test:{uuid.uuid4().hex}:")
    client = Gated(results, 1, then="take")
    claiming = asyncio.create_task(results.claim(KEY, "f"))
    await asyncio.wait_for(client.sent[0].wait(), WAIT)
    await results.aclose()
    claiming.cancel()
    await asyncio.sleep(0)
    handler = Warned()
    logger = logging.getLogger(redis_module.__name__)
    logger.addHandler(handler)
    try:
        with caplog.at_level(logging.WARNING, logger=redis_module.__name__):
            client.gates[0].set()
            await asyncio.wait_for(handler.warned.wait(), WAIT)
    finally:
        logger.removeHandler(handler)

    assert client.after_close == []
    assert [r.getMessage() for r in caplog.records] == [
        "a claim taken for a waiter that left as the store closed is left to expire"
    ]


async def held_keys(results: MemoryCommandResults, keys: list[CommandKey]) -> list[str]:
    """The command ids of ``keys`` whose outcomes are held (the others' claims let go)."""
    held = []
    for key in keys:
        if await results.claim(key, "f") is None:
            await results.release(key)
        else:
            held.append(key.command_id)
    return held


async def test_past_the_bytes_bound_the_tenant_holding_the_most_bytes_gives_up_one() -> None:
    """By bytes, not by count (bob's one large answer, not alice's many small ones), each
    tenant's bytes counted down as its outcomes go; the newest's tenant passed over while
    it holds nothing else."""
    results = MemoryCommandResults(max_bytes=80)
    b1, b2 = CommandKey("bob", "p", "b1"), CommandKey("bob", "p", "b2")
    a1, a2 = CommandKey("alice", "p", "a1"), CommandKey("alice", "p", "a2")
    c1 = CommandKey("carol", "p", "c1")
    for key, size in [(b1, 60), (b2, 5), (a1, 10), (a2, 10)]:
        await results.complete(key, Outcome("f", b"x" * size))
    # 85 bytes: bob's 65 the most (by count, alice's two and bob's two tie)
    assert await held_keys(results, [b1, b2, a1, a2]) == ["b2", "a1", "a2"]

    await results.complete(c1, Outcome("f", b"x" * 60))
    # 85 again: carol's the most but only the newest; alice's 20 then, not bob's 5
    assert await held_keys(results, [b2, a1, a2, c1]) == ["b2", "a2", "c1"]


async def test_a_long_flood_still_pushes_out_only_its_own_outcomes() -> None:
    """Long enough for the ranking to be rebuilt many times over."""
    results = MemoryCommandResults(max_results=5)
    theirs = CommandKey("alice", "p", "create")
    await results.complete(theirs, Outcome("f", b"a"))
    flood = [CommandKey("bob", "p", str(n)) for n in range(60)]
    for key in flood:
        await results.complete(key, Outcome("f", b"b"))
        assert len(results) == min(5, flood.index(key) + 2)
        assert await results.claim(theirs, "f") == Outcome("f", b"a")
    assert await held_keys(results, flood) == ["56", "57", "58", "59"]
