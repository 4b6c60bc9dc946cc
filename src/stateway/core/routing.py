"""Routing: a model name to the backend that serves it and the name upstream knows it by.

Backends declare the model names they serve; one backend may serve every name (a
catch-all, as with a single ``--upstream``). Exact names win over catch-alls, and earlier
backends over later ones. A route also carries what its backend offers Chat Completions
and Messages clients: its configured gateway tools, and whether a Chat Completions request
can be forwarded to it untouched (a Chat Completions upstream without gateway tools).
"""

from __future__ import annotations

import logging
from dataclasses import dataclass

from stateway.core.errors import GatewayError, ModelNotFound
from stateway.core.ports import Backend, ChatForwarder
from stateway.core.tools.toolset import Toolset

log = logging.getLogger(__name__)


@dataclass(slots=True, frozen=True)
class Route:
    backend: Backend
    upstream_model: str
    gateway_tools: Toolset | None = None
    """The gateway tools offered to Chat Completions and Messages clients (hidden rounds)."""
    forwarder: ChatForwarder | None = None
    """Set when a Chat Completions request may go to the backend untouched."""


@dataclass(slots=True, frozen=True)
class BackendEntry:
    backend: Backend
    models: dict[str, str]
    """Public model name → upstream model name. Empty with ``catch_all``."""
    catch_all: bool = False
    gateway_tools: Toolset | None = None
    """The backend's ``gateway_tools``, resolved; None when it has none."""

    def route(self, upstream_model: str) -> Route:
        backend = self.backend
        tools = self.gateway_tools
        forwarder = backend if isinstance(backend, ChatForwarder) and tools is None else None
        return Route(backend, upstream_model, tools, forwarder)


class Router:
    def __init__(self, entries: list[BackendEntry]) -> None:
        self._entries = entries
        self._exact: dict[str, Route] = {}
        for entry in entries:
            for public, upstream in entry.models.items():
                self._exact.setdefault(public, entry.route(upstream))
        catch_all = next((e for e in entries if e.catch_all), None)
        self._catch_all = None if catch_all is None else catch_all.route("")
        """Every other model name's route, but for the upstream model name."""

    @property
    def backends(self) -> list[Backend]:
        return [entry.backend for entry in self._entries]

    def resolve(self, model: str) -> Route:
        route = self._exact.get(model)
        if route is not None:
            return route
        if (other := self._catch_all) is not None:
            return Route(other.backend, model, other.gateway_tools, other.forwarder)
        raise ModelNotFound(model)

    async def list_models(self) -> list[tuple[str, str]]:
        """``(model, backend name)`` for every declared name and, for catch-all backends,
        every name the upstream reports. An unreachable upstream contributes nothing."""
        seen: dict[str, str] = {}
        for entry in self._entries:
            for public in entry.models:
                seen.setdefault(public, entry.backend.name)
            if entry.catch_all:
                try:
                    names = await entry.backend.list_models()
                except GatewayError as exc:
                    log.warning("listing models of backend %s failed: %s", entry.backend.name, exc)
                    continue
                for name in names:
                    seen.setdefault(name, entry.backend.name)
        return list(seen.items())
