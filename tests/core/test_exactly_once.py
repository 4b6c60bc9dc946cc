"""Exactly-once commands in the core: the attempt's claim let go on failure, command ids
checked, and cancel signals: one sent to another process's run, one acted on here."""

from __future__ import annotations

import asyncio
import hashlib
from dataclasses import replace

import orjson
import pytest

from stateway.coordination import MemoryCommandResults
from stateway.core import background, cancel_signals
from stateway.core.commands import CancelResponse, DeleteResponse
from stateway.core.coordination import MAX_COMMAND_ID, CancelHandler, CommandKey, Outcome
from stateway.core.errors import (
    IdempotencyKeyReused,
    InvalidRequest,
    NotFound,
    ServerShuttingDown,
    StorageError,
)
from stateway.core.exactly_once import Attempt, attempt, fingerprint
from stateway.core.gateway import Gateway
from stateway.core.inference import TextDelta
from stateway.core.loop import Loop
from stateway.core.ports import ResponseRecord
from stateway.core.principal import Credential, Principal
from stateway.core.routing import BackendEntry, Router
from stateway.core.run_registry import RunRegistry
from stateway.core.runs import CancelReason
from stateway.protocols.responses.stream import encode_event_json
from tests.core.fakes import MemoryStore, ScriptedBackend
from tests.core.test_background import create, ended, script, until_output

KEY = CommandKey("default", "anonymous", "id")
ME = Principal()


class Signals:
    """Shared cancel signals whose other process is this test: sends are recorded."""

    shared = True

    def __init__(self) -> None:
        self.sent: list[tuple[str, str]] = []
        self.arrived = asyncio.Event()

    async def send(self, tenant_id: str, response_id: str) -> None:
        self.sent.append((tenant_id, response_id))
        self.arrived.set()

    async def start(self, handler: CancelHandler) -> None:
        pass

    async def aclose(self) -> None:
        pass


class UnreachableSignals(Signals):
    """Shared cancel signals whose Redis cannot be reached: every send fails as the Redis
    adapter's does."""

    async def send(self, tenant_id: str, response_id: str) -> None:
        raise StorageError("The coordination store (Redis) is unavailable.")


class FlakySignals(Signals):
    """Shared cancel signals whose second send fails (Redis away for a moment)."""

    async def send(self, tenant_id: str, response_id: str) -> None:
        await super().send(tenant_id, response_id)
        if len(self.sent) == 2:
            raise StorageError("The coordination store (Redis) is unavailable.")


def gateway_for(
    store: MemoryStore, backend: ScriptedBackend | None = None, **parts: object
) -> Gateway:
    backend = backend or ScriptedBackend(script("a"))
    router = Router([BackendEntry(backend, {}, catch_all=True)])
    return Gateway(
        store,
        router,
        Loop(store),
        RunRegistry(),
        encoder=encode_event_json,
        **parts,  # type: ignore[arg-type]
    )


def test_fingerprints_tell_parts_apart() -> None:
    assert fingerprint(b"ab", b"c") != fingerprint(b"a", b"bc")
    assert fingerprint(b"x") == fingerprint(b"x")


def test_fingerprints_are_stable_across_versions() -> None:
    """Outcomes outlive a process (in Redis, for a day): a retry answered by another
    version of the gateway must digest its request alike, or it gets a 409."""
    parts = (b"POST", b"/v1/responses", b"{}")
    framed = b"".join(len(part).to_bytes(8, "big") + part for part in parts)
    assert fingerprint(*parts) == hashlib.sha256(framed).hexdigest()


async def test_an_attempt_that_raises_lets_its_claim_go() -> None:
    results = MemoryCommandResults()
    with pytest.raises(RuntimeError):
        async with attempt(results, KEY, "f", param="command_id"):
            raise RuntimeError("boom")
    async with attempt(results, KEY, "f", param="command_id") as again:
        assert again.outcome is None  # runs again
        again.remember(b"x")
    async with attempt(results, KEY, "f", param="command_id") as third:
        assert third.outcome == Outcome("f", b"x")


class UnreachableResults(MemoryCommandResults):
    """Command outcomes whose Redis goes away once a command is claimed: storing an
    outcome, or letting a claim go, fails as the Redis adapter's does."""

    async def complete(self, key: CommandKey, outcome: Outcome) -> None:
        raise StorageError("The coordination store (Redis) is unavailable.")

    async def release(self, key: CommandKey) -> None:
        raise StorageError("The coordination store (Redis) is unavailable.")


async def test_an_answer_whose_outcome_cannot_be_stored_is_still_given(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """The command ran (a response generated and stored): Redis going away before its
    outcome is stored must not turn its answer into a 503, whose retry would run it a
    second time. The outcome is lost (logged), as when its claim expires: a retry runs
    again."""
    async with attempt(UnreachableResults(), KEY, "f", param="Idempotency-Key") as once:
        assert once.outcome is None
        once.remember(b"the answer")
    assert warnings(caplog) == [
        "a command ended, but its outcome is not kept: "
        "The coordination store (Redis) is unavailable."
    ]


async def test_an_attempt_that_raises_keeps_its_error_when_its_claim_cannot_go(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """A failed command answers its own error (a 400, an upstream's 502...), not the 503
    of a claim Redis could not let go: that claim expires by itself. The log says which
    was lost, a claim or an outcome, and why."""
    with pytest.raises(RuntimeError, match="boom"):
        async with attempt(UnreachableResults(), KEY, "f", param="command_id"):
            raise RuntimeError("boom")
    async with attempt(UnreachableResults(), KEY, "f", param="command_id") as nothing:
        assert nothing.outcome is None  # remembers nothing: its claim is let go, or not
    lost_claim = (
        "a command ended, but its claim is left to expire: "
        "The coordination store (Redis) is unavailable."
    )
    assert warnings(caplog) == [lost_claim, lost_claim]


def warnings(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [
        record.getMessage()
        for record in caplog.records
        if record.name == "stateway.core.exactly_once" and record.levelname == "WARNING"
    ]


async def test_an_attempt_that_remembers_nothing_lets_its_claim_go() -> None:
    results = MemoryCommandResults()
    async with attempt(results, KEY, "f", param="command_id") as first:
        assert first.outcome is None
    async with attempt(results, KEY, "f", param="command_id") as second:
        assert second.outcome is None


async def test_a_reused_id_names_the_surfaces_parameter() -> None:
    results = MemoryCommandResults()
    async with attempt(results, KEY, "f", param="command_id") as first:
        first.remember(b"x")
    with pytest.raises(IdempotencyKeyReused) as caught:
        async with attempt(results, KEY, "g", param="command_id"):
            pass
    assert (caught.value.param, caught.value.status) == ("command_id", 409)


async def test_a_gateway_without_command_results_refuses_command_ids() -> None:
    gateway = gateway_for(MemoryStore())
    with pytest.raises(InvalidRequest) as caught:
        gateway.once(ME, "id", "f", param="command_id")
    assert caught.value.param == "command_id"


async def test_command_ids_are_checked_and_refused_with_their_codes() -> None:
    bare = gateway_for(MemoryStore())
    with pytest.raises(InvalidRequest) as unserved:
        bare.once(ME, "id", "f", param="command_id")
    assert unserved.value.code == "unsupported"
    gateway = gateway_for(MemoryStore(), results=MemoryCommandResults())
    for bad in ("", "x" * (MAX_COMMAND_ID + 1)):
        with pytest.raises(InvalidRequest) as caught:
            gateway.once(ME, bad, "f", param="p")
        assert (caught.value.param, caught.value.code) == ("p", "invalid_value")
        assert caught.value.message == f"'p' must be 1 to {MAX_COMMAND_ID} characters."
    async with gateway.once(ME, "x" * MAX_COMMAND_ID, "f", param="p") as longest:
        assert longest.outcome is None


async def test_tenants_have_their_own_command_ids() -> None:
    gateway = gateway_for(MemoryStore(), results=MemoryCommandResults())
    async with gateway.once(Principal(tenant_id="a"), "id", "f", param="p") as first:
        first.remember(b"a's")
    async with gateway.once(Principal(tenant_id="b"), "id", "g", param="p") as second:
        assert second.outcome is None  # neither b's replay of a's answer nor a conflict


async def test_a_response_deleted_here_is_signalled_to_the_process_running_it() -> None:
    store = MemoryStore()
    body = {"id": "resp_x", "created_at": 1.0, "model": "m", "status": "in_progress"}
    await store.save(ResponseRecord("acme", "resp_x", None, "in_progress", 1.0, body))
    signals = Signals()
    gateway = gateway_for(store, signals=signals)
    await gateway.execute(Principal(tenant_id="acme"), DeleteResponse("resp_x"))
    assert signals.sent == [("acme", "resp_x")]
    with pytest.raises(NotFound) as missing:
        await gateway.execute(Principal(tenant_id="acme"), DeleteResponse("resp_x"))
    assert (missing.value.param, missing.value.message) == (
        "response_id",
        "Response with id 'resp_x' not found.",
    )


async def test_principals_of_one_tenant_have_their_own_command_ids() -> None:
    gateway = gateway_for(MemoryStore(), results=MemoryCommandResults())
    alice, bob = Principal(subject="alice"), Principal(subject="bob")
    async with gateway.once(alice, "id", "f", param="p") as first:
        first.remember(b"alice's")
    async with gateway.once(bob, "id", "f", param="p") as second:
        assert second.outcome is None


async def test_a_token_whose_sub_is_a_keys_id_has_command_ids_of_its_own() -> None:
    gateway = gateway_for(MemoryStore(), results=MemoryCommandResults())
    key = Principal("acme", "key_1", Credential.API_KEY)
    token = Principal("acme", "key_1", Credential.TOKEN)
    async with gateway.once(key, "id", "f", param="p") as first:
        first.remember(b"the key's")
    async with gateway.once(token, "id", "f", param="p") as second:
        assert second.outcome is None


async def _running_elsewhere(store: MemoryStore) -> ResponseRecord:
    """A background response ``resp_x`` stored in progress, as another process running it
    left it."""
    body = {"id": "resp_x", "created_at": 1.0, "model": "m", "status": "in_progress"}
    body |= {"background": True}
    record = ResponseRecord("default", "resp_x", None, "in_progress", 1.0, body)
    await store.save(record)
    return record


async def test_a_cancel_reaches_another_processs_run_through_shared_signals() -> None:
    store = MemoryStore()
    record = await _running_elsewhere(store)
    signals = Signals()
    gateway = gateway_for(store, signals=signals)

    cancelling = asyncio.create_task(gateway.execute(ME, CancelResponse("resp_x")))
    await signals.arrived.wait()
    assert signals.sent == [("default", "resp_x")]
    ended_body = record.body | {"status": "cancelled"}
    await store.finish(replace(record, status="cancelled", body=ended_body))  # the owner did it

    state = await cancelling
    assert state.status == "cancelled"


async def test_a_cancel_signal_the_owner_missed_is_sent_again(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A signal reaches the processes subscribed as it is sent: an owner subscribing
    again after Redis restarted misses one. The cancel sends it again while it waits (a
    send failing meanwhile does not end the wait), so the owner's next subscription
    hears it instead of the cancel answering 409 while the run goes on."""
    monkeypatch.setattr(background, "RESEND_INTERVAL", 0.0)
    store = MemoryStore()
    record = await _running_elsewhere(store)
    signals = FlakySignals()
    gateway = gateway_for(store, signals=signals)

    cancelling = asyncio.create_task(gateway.execute(ME, CancelResponse("resp_x")))
    async with asyncio.timeout(5):
        while len(signals.sent) < 3:  # the first missed, the second failed to go out
            signals.arrived.clear()
            await signals.arrived.wait()
    assert not cancelling.done()
    ended_body = record.body | {"status": "cancelled"}
    await store.finish(replace(record, status="cancelled", body=ended_body))  # the owner did it

    state = await cancelling
    assert state.status == "cancelled"


async def test_a_cancelled_response_deleted_meanwhile_is_a_404() -> None:
    store = MemoryStore()
    await _running_elsewhere(store)
    signals = Signals()
    gateway = gateway_for(store, signals=signals)
    cancelling = asyncio.create_task(gateway.execute(ME, CancelResponse("resp_x")))
    await signals.arrived.wait()
    await store.delete("default", "resp_x")
    with pytest.raises(NotFound):
        await cancelling


async def test_a_cancel_whose_owner_never_ends_the_run_gives_up(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(background, "CANCEL_WAIT", 0.0)
    store = MemoryStore()
    await _running_elsewhere(store)
    gateway = gateway_for(store, signals=Signals())
    with pytest.raises(InvalidRequest) as caught:
        await gateway.execute(ME, CancelResponse("resp_x"))
    assert (caught.value.status, caught.value.code) == (409, "response_running_elsewhere")


async def test_a_cancel_waiting_on_another_process_ends_when_this_one_shuts_down() -> None:
    """A cancel sent to the process running the response waits for its end (up to
    CANCEL_WAIT): at shutdown it is answered with the runs here, a 503 its client retries
    on another process, rather than left to the server's last resort."""
    store = MemoryStore()
    await _running_elsewhere(store)
    signals = Signals()
    gateway = gateway_for(store, signals=signals)
    cancelling = asyncio.create_task(gateway.execute(ME, CancelResponse("resp_x")))
    await signals.arrived.wait()

    await gateway.runs.end_all(CancelReason.SHUTTING_DOWN)

    with pytest.raises(ServerShuttingDown) as caught:
        async with asyncio.timeout(5):  # the owner never ends it: CANCEL_WAIT is 30 s
            await cancelling
    assert (caught.value.status, caught.value.code) == (503, "server_shutting_down")
    assert "the cancel was sent to the gateway process running it" in caught.value.message


async def test_a_delete_whose_signal_cannot_be_sent_still_answers_deleted() -> None:
    """DELETE signals a run another process may hold only once the response is deleted:
    signals that cannot be sent then (Redis away) must not turn the DELETE into a 503
    that a retry answers with a 404. The run elsewhere goes on to its end, as it does
    without shared signals."""
    store = MemoryStore()
    body = {"id": "resp_x", "created_at": 1.0, "model": "m", "status": "in_progress"}
    await store.save(ResponseRecord("default", "resp_x", None, "in_progress", 1.0, body))
    gateway = gateway_for(store, signals=UnreachableSignals())

    deleted = await gateway.execute(ME, DeleteResponse("resp_x"))

    assert deleted.id == "resp_x"
    assert await store.get("default", "resp_x") is None


async def test_a_delete_signal_the_owner_missed_is_sent_again(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """As a cancel's: an owner subscribing again after Redis restarted misses the DELETE's
    signal, and would run the deleted response to its end. The signal goes again in the
    background (a send failing meanwhile does not stop it) for as long as a cancel waits;
    the DELETE answers at once, and shutdown ends the resends."""
    monkeypatch.setattr(cancel_signals, "RESEND_INTERVAL", 0.0)
    store = MemoryStore()
    body = {"id": "resp_x", "created_at": 1.0, "model": "m", "status": "in_progress"}
    await store.save(ResponseRecord("default", "resp_x", None, "in_progress", 1.0, body))
    finished = body | {"id": "resp_y", "status": "completed"}
    await store.save(ResponseRecord("default", "resp_y", None, "completed", 1.0, finished))
    signals = FlakySignals()
    gateway = gateway_for(store, signals=signals)

    await gateway.execute(ME, DeleteResponse("resp_x"))
    assert signals.sent == [("default", "resp_x")], "sent once before it answers"
    async with asyncio.timeout(5):
        while len(signals.sent) < 4:  # the second failed to go out
            signals.arrived.clear()
            await signals.arrived.wait()
    assert gateway.deletes is not None
    await gateway.deletes.aclose()
    sent = len(signals.sent)
    await asyncio.sleep(0.01)
    assert len(signals.sent) == sent, "no resend after shutdown"

    await gateway.execute(ME, DeleteResponse("resp_y"))
    assert ("default", "resp_y") not in signals.sent, "a response that ended has no run"


async def test_a_signalled_cancel_ends_this_processs_background_run() -> None:
    gate = asyncio.Event()
    gateway = gateway_for(MemoryStore(), ScriptedBackend([TextDelta("a")], gate))
    run = await create(gateway, background=True, store=True)
    await until_output(run)

    gateway.cancel_signalled("other-tenant", run.id)  # not its tenant: ignored
    gateway.cancel_signalled("default", "resp_unknown")  # not here: ignored
    assert not run.closed
    gateway.cancel_signalled("default", run.id)
    await ended(run)
    assert run.state.status == "cancelled"


async def test_a_signalled_cancel_stops_a_foreground_run_deleted_elsewhere() -> None:
    """Another process's DELETE of a running stream sends the cancel signal: the run stops
    here as a DELETE sent here stops it, and its response stays deleted."""
    store = MemoryStore()
    gate = asyncio.Event()
    gateway = gateway_for(store, ScriptedBackend([TextDelta("a")], gate))
    run = await create(gateway, stream=True, store=True)
    await until_output(run)

    store.deleted.add(("default", run.id))  # what the other process's DELETE did first
    gateway.cancel_signalled("default", run.id)

    await asyncio.wait_for(ended(run), 5)
    assert run.state.status == "cancelled"
    assert await store.get("default", run.id) is None


async def test_a_signalled_cancel_leaves_a_foreground_run_alone() -> None:
    gate = asyncio.Event()
    gateway = gateway_for(MemoryStore(), ScriptedBackend([TextDelta("a")], gate))
    run = await create(gateway, stream=True)
    await until_output(run)
    gateway.cancel_signalled("default", run.id)
    run.cancel()  # its client leaves: it ends as incomplete, not cancelled
    await ended(run)
    assert run.state.status != "cancelled"


def test_a_remembered_body_holds_about_its_own_size() -> None:
    """Outcomes are kept by the thousand: not the ~4 KiB buffer orjson wrote each into."""
    import tracemalloc

    tracemalloc.start()
    try:
        before = tracemalloc.get_traced_memory()[0]
        kept = []
        for n in range(500):
            once = Attempt(CommandKey("t", "p", "k"), "f", None)
            once.remember(orjson.dumps({"id": f"resp_{n}", "object": "response"}))
            assert once.remembered is not None
            kept.append(once.remembered.body)
        held = tracemalloc.get_traced_memory()[0] - before
    finally:
        tracemalloc.stop()
    assert orjson.loads(kept[7]) == {"id": "resp_7", "object": "response"}
    assert held < 500 * 400  # each body ~40 bytes and its list slot; not 4 KiB
