"""Active health probing (``[health] active_probe``, off by default): every
``probe_interval`` seconds, ``GET /models`` on each backend a route names. An answer
closes the circuits of that backend's candidates (but not before a ``Retry-After`` the
upstream gave is over); a failure counts against each, as a
failed attempt would. A catch-all backend's candidates (one per model name asked for)
are left to passive health."""

from __future__ import annotations

import asyncio
import logging

from stateway.core.errors import GatewayError
from stateway.core.routing.router import Router

log = logging.getLogger(__name__)


class HealthProber:
    def __init__(self, router: Router, interval: float) -> None:
        self._router = router
        self._interval = interval

    async def probe_once(self) -> None:
        health = self._router.state.health
        for backend, keys in self._router.candidates_by_backend().items():
            try:
                await backend.list_models()
            except GatewayError as exc:
                log.warning("health probe of backend %s failed: %s", backend.name, exc.message)
                for key in keys:
                    health.failed(key)
                continue
            for key in keys:
                health.probe_answered(key)

    async def run(self) -> None:
        """Probe until cancelled."""
        while True:
            await self.probe_once()
            await asyncio.sleep(self._interval)  # a timer: the probing period itself
