"""Checks that objects are freed by reference counting alone, without the cyclic garbage
collector: what a reference cycle holds lives until the collector happens to run."""

from __future__ import annotations

import asyncio
import gc
import weakref
from collections.abc import Iterator
from contextlib import contextmanager
from types import FrameType
from typing import Any

from stateway.core.commands import Command
from stateway.core.gateway import Gateway, Result
from stateway.core.journal import EventEncoder
from stateway.core.loop import Loop
from stateway.core.principal import Principal
from stateway.core.routing import BackendEntry, Router
from stateway.core.run_registry import RunRegistry
from stateway.core.runs import Run
from tests.core.fakes import MemoryStore, ScriptedBackend


class WatchedGateway(Gateway):
    """A gateway over ``backend`` alone that keeps a weak reference to every run it
    starts, to tell whether runs are freed."""

    def __init__(self, backend: ScriptedBackend, *, encoder: EventEncoder | None = None) -> None:
        store = MemoryStore()
        router = Router([BackendEntry(backend, {}, catch_all=True)])
        super().__init__(store, router, Loop(store), RunRegistry(), encoder=encoder)
        self.started: list[weakref.ref[Run]] = []

    async def execute(self, principal: Principal, command: Command) -> Result:  # type: ignore[override]
        result = await super().execute(principal, command)  # type: ignore[call-overload]
        if isinstance(result, Run):
            self.started.append(weakref.ref(result))
        return result  # type: ignore[no-any-return]


@contextmanager
def collector_off() -> Iterator[None]:
    enabled = gc.isenabled()
    gc.collect()
    gc.disable()
    try:
        yield
    finally:
        if enabled:
            gc.enable()


async def freed(ref: weakref.ref[Any], within: float = 5.0) -> bool:
    """Whether ``ref``'s object is gone within ``within`` seconds (the loop keeps running
    meanwhile, so tasks still closing things can finish)."""
    gone = asyncio.Event()
    target = ref()
    if target is None:
        return True
    weakref.finalize(target, gone.set)
    del target
    try:
        await asyncio.wait_for(gone.wait(), within)
    except TimeoutError:
        return False
    return True


def cyclic_garbage() -> list[Any]:
    """Everything unreachable that only the collector would free, since the last collection."""
    gc.set_debug(gc.DEBUG_SAVEALL)
    try:
        gc.collect()
        return list(gc.garbage)
    finally:
        gc.set_debug(0)
        gc.garbage.clear()


def gateway_frames(objects: list[Any]) -> list[str]:
    """The frames of stateway's own code among ``objects``, as ``function file:line``."""
    return [
        f"{o.f_code.co_name} {o.f_code.co_filename}:{o.f_lineno}"
        for o in objects
        if isinstance(o, FrameType) and "/stateway/" in o.f_code.co_filename
    ]
