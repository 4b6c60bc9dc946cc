"""A process whose lease registration was refused as it started (a database taking no
writes) stores no run's row naming it before its lease row is registered: should it die
then, before its next beat, a survivor still judges it, and fails its runs. A registration
refused still refuses the run, as its row's write would be."""

from __future__ import annotations

import asyncio

import pytest

from stateway.core.commands import CreateResponse
from stateway.core.conversations.commands import CreateConversation
from stateway.core.errors import StorageError
from stateway.core.gateway import Gateway
from stateway.core.inference import Finish, TextDelta
from stateway.core.leases import LeaseKeeper
from stateway.core.loop import Loop
from stateway.core.ownership import ProcessIdentity
from stateway.core.ports import ResponseRecord
from stateway.core.principal import Principal
from stateway.core.response import UNFINISHED
from stateway.core.routing import BackendEntry, Router
from stateway.core.run_registry import RunRegistry
from stateway.core.runs import Run
from stateway.core.settling import Settler
from stateway.protocols.responses.event_log import decode_event_json
from stateway.protocols.responses.stream import encode_event_json
from tests.core.conversation_fakes import MemoryConversations, TurnStore
from tests.core.fakes import ScriptedBackend
from tests.core.sharing_fakes import MemoryOwnerLeases
from tests.core.test_leases import Clock
from tests.core.test_loop import user

ME = "host-a 1 1"
LONG = 3600.0
"""This process's lease timeout: no beat of its own falls inside a test."""


class Process:
    """A gateway whose lease registration was refused as it started; the database takes
    writes again when ``leases.fail`` is cleared."""

    def __init__(self, gate: asyncio.Event | None = None) -> None:
        self.conversations = MemoryConversations()
        store = self.store = TurnStore(self.conversations)
        self.leases = MemoryOwnerLeases()
        self.keeper = LeaseKeeper(
            store, self.leases, ME, encode_event_json, decode_event_json, LONG
        )
        self.backend = ScriptedBackend([TextDelta("hi"), Finish("stop")], gate)
        router = Router([BackendEntry(self.backend, {}, catch_all=True)])
        owner = ProcessIdentity.parse(ME)
        loop = Loop(store, owner=owner, settler=Settler(store), lease=self.keeper)
        self.gateway = Gateway(
            store,
            router,
            loop,
            RunRegistry(),
            conversations=self.conversations,
            encoder=encode_event_json,
        )

    async def start(self) -> None:
        self.leases.fail = True
        with pytest.raises(StorageError):
            await self.keeper.start()
        self.keeper.start_unregistered()
        assert not self.keeper.registered

    async def create(self, **fields: object) -> Run:
        command = CreateResponse(model="m", input=[user("hi")], **fields)  # type: ignore[arg-type]
        return await self.gateway.execute(Principal(), command)


def registered_when_stored(process: Process) -> list[bool]:
    """For each unfinished row saved, whether its owner's lease row was there already."""
    seen: list[bool] = []

    def saved(record: ResponseRecord) -> None:
        if record.status in UNFINISHED:
            seen.append(record.owner in process.leases.counts)

    process.store.on_save = saved
    return seen


async def test_a_run_stored_before_the_first_beat_is_judged_once_its_process_died() -> None:
    gate = asyncio.Event()
    process = Process(gate)
    await process.start()
    process.leases.fail = False  # the database takes writes again, before any beat

    run = await process.create(stream=True)
    await run.announced()  # its row stored
    await process.keeper.aclose()  # it dies: beating no more, its run in progress

    clock = Clock()
    await process.leases.register("host-b 2 2", 10.0)
    survivor = LeaseKeeper(
        process.store,
        process.leases,
        "host-b 2 2",
        encode_event_json,
        decode_event_json,
        10.0,
        clock=clock,
    )
    assert await survivor.beat() == []  # first seen now
    clock.now += LONG
    assert await survivor.beat() == [ME]
    [record] = process.store.records.values()
    assert (record.status, record.body["error"]["code"]) == ("failed", "server_restarted")
    gate.set()
    await run.wait()


@pytest.mark.parametrize("fields", [{"stream": True}, {"background": True}])
async def test_a_run_registers_its_process_before_its_row_is_stored(
    fields: dict[str, object],
) -> None:
    process = Process()
    await process.start()
    process.leases.fail = False
    seen = registered_when_stored(process)

    run = await process.create(**fields)
    await run.wait()
    assert set(seen) == {True}  # a background run's: queued, then in progress
    await process.keeper.aclose()


async def test_a_conversation_turn_registers_its_process_before_it_takes_its_conversation() -> None:
    process = Process()
    await process.start()
    process.leases.fail = False
    command = CreateConversation(items=[], metadata={})
    conversation = await process.gateway.execute(Principal(), command)
    seen = registered_when_stored(process)

    run = await process.create(conversation_id=conversation.id)
    await run.wait()
    assert seen == [True]
    await process.keeper.aclose()


async def test_a_run_whose_registration_is_refused_still_stores_no_row_naming_its_process() -> None:
    process = Process()
    await process.start()
    seen = registered_when_stored(process)  # the store takes writes, the leases do not

    run = await process.create(stream=True)
    await run.wait()
    assert seen == []
    assert isinstance(run.error, StorageError)  # told as a refused row's write is
    assert run.error.message == "The response could not be stored."
    assert run.state.error is not None
    assert run.state.error["code"] == "storage_unavailable"
    assert not process.keeper.registered
    assert process.store.records == {}  # as when its row's write fails
    await process.keeper.aclose()


async def test_runs_starting_together_register_their_process_once() -> None:
    process = Process()
    await process.start()
    process.leases.fail = False
    registrations = 0
    register = process.leases.register

    async def counted(owner: str, lease: float) -> None:
        nonlocal registrations
        registrations += 1
        await asyncio.sleep(0)
        await register(owner, lease)

    process.leases.register = counted  # type: ignore[method-assign]
    runs = await asyncio.gather(*(process.create(stream=True) for _ in range(5)))
    for run in runs:
        await run.wait()
    assert registrations == 1
    await process.keeper.aclose()
