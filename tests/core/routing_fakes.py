"""Routes over scripted backends, for the routing tests."""

from __future__ import annotations

import random

from stateway.core.commands import CreateResponse
from stateway.core.context import Prior
from stateway.core.gateway import Gateway
from stateway.core.loop import Loop
from stateway.core.routing import Candidate, Capabilities, Needs, Route, Router
from stateway.core.run_registry import RunRegistry
from stateway.core.tools.toolset import Toolset
from tests.core.fakes import MemoryStore, ScriptedBackend


class Named(ScriptedBackend):
    """A scripted backend with its own name."""

    def __init__(self, name: str, script: list[object] | None = None) -> None:
        super().__init__(list(script or []))  # type: ignore[arg-type]
        self.name = name


def candidate(
    backend: ScriptedBackend, *, weight: float = 1.0, priority: int = 0, **can: object
) -> Candidate:
    return Candidate(
        backend,
        f"{backend.name}-model",
        weight,
        priority,
        Capabilities(**can),  # type: ignore[arg-type]
    )


def route(*candidates: Candidate, name: str = "assistant", **fields: object) -> Route:
    return Route(name, tuple(candidates), **fields)  # type: ignore[arg-type]


def router(*routes: Route, seed: int = 7, **fields: object) -> Router:
    return Router(routes=list(routes), rng=random.Random(seed), **fields)  # type: ignore[arg-type]


def gateway(routing: Router, store: MemoryStore | None = None) -> Gateway:
    store = store or MemoryStore()
    return Gateway(store, routing, Loop(store), RunRegistry())


def needs(command: CreateResponse) -> Needs:
    tools = command.settings.tools
    return Needs.of(command, Prior([]), Toolset(tools, tools))
