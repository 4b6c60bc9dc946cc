"""Readiness (``GET /ready``): whether this process can serve, probed at once.

The store answers a ping and takes writes (else the gateway is not ready; the adapters
bound how long they wait, a database or Redis that stopped answering is down, and a
database that answers but refuses every write, out of space or read-only, is not ready
either: ``storage`` says which), each model server of the
generation in effect answers its model listing (reported per server: one down leaves the
gateway ready if another can serve), and a shared coordination store (Redis), when one
is configured, answers a ping. Redis is only reported: while it is away only keyed
requests and cross-process cancels fail, and failing readiness would take every replica
out of a load balancer at once.

The route needs no credential (probes send none), and each probe asks every model server
for its listing: :class:`ReadinessProbe` runs one probe at a time, whose answer every
check arriving meanwhile shares, so a flood of ``GET /ready`` sends each server one
listing at a time, not one per request.
"""

from __future__ import annotations

import asyncio

from stateway.core.backend import Backend
from stateway.core.coordination import CommandResults
from stateway.core.errors import GatewayError, StorageError
from stateway.core.generations import Generations
from stateway.core.ports import ResponseStore
from stateway.core.results import Readiness


class ReadinessProbe:
    """:func:`readiness`, one probe at a time (see the module)."""

    def __init__(
        self, store: ResponseStore, generations: Generations, results: CommandResults | None
    ) -> None:
        self._store = store
        self._generations = generations
        self._results = results
        self._probing: asyncio.Task[Readiness] | None = None

    async def check(self) -> Readiness:
        """The probe under way's answer, else a new probe's. A caller that leaves leaves
        the probe to the others (shielded)."""
        probing = self._probing
        if probing is None:
            probing = asyncio.create_task(readiness(self._store, self._generations, self._results))
            self._probing = probing
            probing.add_done_callback(self._ended)
        return await asyncio.shield(probing)

    def _ended(self, probe: asyncio.Task[Readiness]) -> None:
        if self._probing is probe:
            self._probing = None
        if not probe.cancelled():
            probe.exception()  # retrieved: every caller still waiting gets it raised


async def readiness(
    store: ResponseStore, generations: Generations, results: CommandResults | None
) -> Readiness:
    storage_error = None
    try:
        await store.ping()
    except StorageError as exc:
        storage_error = exc.message
    shared = results if results is not None and results.shared else None
    with generations.lease() as generation:
        backends = generation.router.backends
        upstreams = asyncio.gather(*(_answers(b) for b in backends))
        coordination, answers = await asyncio.gather(_coordination_error(shared), upstreams)
    return Readiness(
        storage_error,
        {b.name: ok for b, ok in zip(backends, answers, strict=True)},
        coordination_error=coordination,
        shared_coordination=shared is not None,
    )


async def _coordination_error(results: CommandResults | None) -> str | None:
    """Why the shared coordination store did not answer; None when it did (or there is
    none)."""
    if results is None:
        return None
    try:
        await results.ping()
    except StorageError as exc:
        return exc.message
    return None


async def _answers(backend: Backend) -> bool:
    try:
        await backend.list_models()
    except GatewayError:
        return False
    return True
