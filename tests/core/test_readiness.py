"""``GET /ready``'s probe: one at a time. It asks every model server for its listing, and
the route needs no credential, so requests arriving while a probe is under way share its
answer instead of each sending every server a request of their own."""

from __future__ import annotations

import asyncio

import pytest

from stateway.core.commands import CheckReadiness
from stateway.core.gateway import Gateway
from stateway.core.loop import Loop
from stateway.core.principal import Principal
from stateway.core.results import Readiness
from stateway.core.routing import BackendEntry, Router
from stateway.core.run_registry import RunRegistry
from tests.core.fakes import MemoryStore, ScriptedBackend


class Listing(ScriptedBackend):
    """A model server whose listings wait for ``answer``; ``asked`` counts them."""

    def __init__(self) -> None:
        super().__init__([])
        self.name = "listing"
        self.asked = 0
        self.answer = asyncio.Event()
        self.waiting = asyncio.Event()

    async def list_models(self) -> list[str]:
        self.asked += 1
        self.waiting.set()
        await self.answer.wait()
        return ["m"]


def gateway(backend: Listing) -> Gateway:
    store = MemoryStore()
    return Gateway(
        store, Router([BackendEntry(backend, {}, catch_all=True)]), Loop(store), RunRegistry()
    )


async def check(gateway: Gateway) -> Readiness:
    return await gateway.execute(Principal(), CheckReadiness())


async def test_checks_arriving_during_a_probe_share_it() -> None:
    backend = Listing()
    served = gateway(backend)
    checks = [asyncio.create_task(check(served)) for _ in range(20)]
    await backend.waiting.wait()
    backend.answer.set()

    answers = await asyncio.gather(*checks)

    assert backend.asked == 1
    assert {answer.upstreams["listing"] for answer in answers} == {True}


async def test_a_check_after_a_probe_ended_probes_again() -> None:
    backend = Listing()
    backend.answer.set()
    served = gateway(backend)

    await check(served)
    await check(served)

    assert backend.asked == 2


async def test_a_check_that_leaves_leaves_the_probe_to_the_others() -> None:
    backend = Listing()
    served = gateway(backend)
    leaving = asyncio.create_task(check(served))
    await backend.waiting.wait()
    staying = asyncio.create_task(check(served))
    await asyncio.sleep(0)
    leaving.cancel()
    backend.answer.set()

    answer = await staying

    assert answer.upstreams == {"listing": True}
    assert leaving.cancelled()
    assert backend.asked == 1


class Failing(Listing):
    async def list_models(self) -> list[str]:
        await super().list_models()
        raise RuntimeError("a bug")


async def test_a_probe_that_fails_fails_every_check_sharing_it_and_the_next_probes_again() -> None:
    backend = Failing()
    served = gateway(backend)
    checks = [asyncio.create_task(check(served)) for _ in range(3)]
    await backend.waiting.wait()
    backend.answer.set()

    failures = await asyncio.gather(*checks, return_exceptions=True)

    assert [type(failure) for failure in failures] == [RuntimeError] * 3
    with pytest.raises(RuntimeError):
        await check(served)
    assert backend.asked == 2
