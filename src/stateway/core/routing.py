"""Routing: a model name to the backend that serves it and the name upstream knows it by.

Backends declare the model names they serve; one backend may serve every name (a
catch-all, as with a single ``--upstream``). Exact names win over catch-alls, and earlier
backends over later ones.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass

from stateway.core.errors import GatewayError, ModelNotFound
from stateway.core.ports import Backend

log = logging.getLogger(__name__)


@dataclass(slots=True, frozen=True)
class Route:
    backend: Backend
    upstream_model: str


@dataclass(slots=True, frozen=True)
class BackendEntry:
    backend: Backend
    models: dict[str, str]
    """Public model name → upstream model name. Empty with ``catch_all``."""
    catch_all: bool = False


class Router:
    def __init__(self, entries: list[BackendEntry]) -> None:
        self._entries = entries
        self._exact: dict[str, Route] = {}
        for entry in entries:
            for public, upstream in entry.models.items():
                self._exact.setdefault(public, Route(entry.backend, upstream))
        self._catch_all = next((e.backend for e in entries if e.catch_all), None)

    @property
    def backends(self) -> list[Backend]:
        return [entry.backend for entry in self._entries]

    def resolve(self, model: str) -> Route:
        route = self._exact.get(model)
        if route is not None:
            return route
        if self._catch_all is not None:
            return Route(self._catch_all, model)
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
