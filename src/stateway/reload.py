"""Reloading the configuration while serving: explicit triggers only (``SIGHUP``, and
``POST /admin/config/reload`` when ``[admin] reload_endpoint`` is on).

A reload reads the configuration again as start-up did: the same file path, the
environment as it is now, the start-up flags (which keep their precedence over the
file). It compiles it with the function ``stateway check-config`` and start-up use
(:func:`stateway.app.compile_generation`) and publishes the result as a new generation
(:mod:`stateway.core.generations`). A reload that fails keeps the generation in effect,
logs why and reports it in :meth:`Reloader.status`.

The ``[server]``, ``[storage]``, ``[coordination]``, ``[rate_limits]``, ``[admin]``,
``[security]``, ``[logging]``, ``[tracing]``, ``[auth]`` and ``[websocket]`` tables are
read once at start-up (the listening socket, the database, the HTTP surface's limits and
host check, the drain window, the shared upstream waiting room, command outcomes, cancel
signals, event fan-out and leases, the rate limits' buckets, the admin routes, the
sealing key, the log format, the trace exporter, who may call, WebSocket mode's
per-connection limits): a reload applies nothing from them
and reports each changed setting as needing a restart; the rest of the new configuration
applies.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Callable
from dataclasses import dataclass, field

from stateway.backends.admission import WaitingRoom
from stateway.config import Config, ConfigError
from stateway.core.errors import ConfigRejected
from stateway.core.generations import ConfigStatus, Generations
from stateway.core.hops import Hop
from stateway.core.routing import Router
from stateway.core.routing.probe import HealthProber
from stateway.core.routing.windows import LearnedWindows, WindowDiscovery
from stateway.core.tools.toolset import GatewayTools

log = logging.getLogger(__name__)

STARTUP_SECTIONS = (
    "server",
    "storage",
    "coordination",
    "rate_limits",
    "admin",
    "security",
    "logging",
    "tracing",
    "auth",
    "websocket",
)
"""Configuration tables read once at start-up: changing them needs a restart."""


@dataclass(slots=True, eq=False)
class Compiled:
    """A configuration compiled into a generation's parts, not yet published."""

    config: Config
    """As in effect: the start-up tables kept as they were at start-up."""
    router: Router
    tools: GatewayTools
    waiting_room: WaitingRoom
    """The process-wide queue for upstream connection slots (``[server]``)."""
    prober: HealthProber | None = None
    """Probes the router's backends while the generation is current (``active_probe``)."""
    restart_required: tuple[str, ...] = ()
    """Start-up settings the file (or environment) changed since start-up, not applied."""
    windows: LearnedWindows = field(default_factory=LearnedWindows)
    """What model servers advertised of their windows: the process's, handed on from the
    first generation to every reload's, as the waiting room is."""
    discovery: WindowDiscovery | None = None
    """Asks the router's model servers for their windows while the generation is current."""
    hop: Hop = field(default_factory=Hop)
    """This process's ``Via`` entry on what its backends send (a loop's mark), handed on
    from the first generation to every reload's."""


def restart_required(started: Config, loaded: Config) -> tuple[str, ...]:
    """The settings of the start-up tables whose loaded value differs from the started."""
    changed: list[str] = []
    for section in STARTUP_SECTIONS:
        before, after = getattr(started, section), getattr(loaded, section)
        changed += [
            f"{section}.{name}"
            for name in type(before).model_fields
            if getattr(before, name) != getattr(after, name)
        ]
    return tuple(changed)


def keep_started(started: Config, loaded: Config) -> Config:
    """``loaded`` with the start-up tables as they were at start-up."""
    return loaded.model_copy(update={s: getattr(started, s) for s in STARTUP_SECTIONS})


class Reloader:
    """Reloads for the running process (the core's :class:`~.generations.Reloads`), and
    the current generation's background work: probing its backends, learning their
    context windows."""

    def __init__(
        self,
        started: Compiled,
        compile: Callable[[], Compiled],
        publish: Callable[[Compiled], object],
        generations: Generations,
    ) -> None:
        """``compile`` builds a new generation (raising :class:`ConfigError`);
        ``publish`` makes it current."""
        self._compile = compile
        self._publish = publish
        self._generations = generations
        self._following: Compiled | None = started
        self._tasks: list[asyncio.Task[None]] = []
        self._last_error: str | None = None
        self._restart_required: tuple[str, ...] = ()
        self._serving = False
        self._closed = False

    def start(self) -> None:
        """Serving has started: the current generation's background work starts."""
        self._serving = True
        self._follow(self._following)

    async def reload(self) -> ConfigStatus:
        return self.reload_now()

    def reload_now(self) -> ConfigStatus:
        """Compile and publish a new generation. Runs without yielding to the event loop,
        so reloads never interleave and no request sees half of one. Raises
        :class:`ConfigRejected` (logged; the current generation serves on)."""
        serving = self._generations.current.number
        try:
            compiled = self._compile()
        except ConfigError as exc:
            self._last_error = str(exc)
            log.error("config reload failed; generation %d serves on: %s", serving, exc)
            raise ConfigRejected(f"The configuration was not reloaded: {exc}") from None
        except Exception as exc:  # a configuration compiling cannot handle: still refused
            self._last_error = f"{type(exc).__name__}: {exc}"
            log.exception("config reload failed; generation %d serves on", serving)
            raise ConfigRejected(
                f"The configuration was not reloaded: {self._last_error}"
            ) from None
        self._publish(compiled)
        self._last_error = None
        self._restart_required = compiled.restart_required
        self._follow(compiled)
        status = self.status()
        log.info("config generation %d serves new requests", status.generation)
        if status.restart_required:
            changed = ", ".join(status.restart_required)
            log.warning("config changes not applied until a restart: %s", changed)
        return status

    def reload_signalled(self) -> None:
        """``SIGHUP``: reload; a failure is logged and reported in the status only."""
        if not self._closed:
            with contextlib.suppress(ConfigRejected):
                self.reload_now()

    def status(self) -> ConfigStatus:
        current = self._generations.current
        return ConfigStatus(
            generation=current.number,
            loaded_at=current.loaded_at,
            last_error=self._last_error,
            restart_required=self._restart_required,
            retiring=tuple(self._generations.retiring),
        )

    async def aclose(self) -> None:
        """Stop reloading, probing and learning windows (shutting down), and wait for that
        work to end: the backends it asks close after this."""
        self._closed = True
        ending = self._tasks
        self._follow(None)
        await asyncio.gather(*ending, return_exceptions=True)

    def _follow(self, compiled: Compiled | None) -> None:
        """Run ``compiled``'s background work (its prober, its window discovery) from now
        on, once serving, ending the previous generation's (None: none at all)."""
        self._following = compiled
        for task in self._tasks:
            task.cancel()
        self._tasks = []
        if compiled is None or not self._serving or self._closed:
            return
        for work in (compiled.prober, compiled.discovery):
            if work is not None:
                task = asyncio.create_task(work.run())
                task.add_done_callback(_ended)
                self._tasks.append(task)


def _ended(task: asyncio.Task[None]) -> None:
    """Log a generation's background task that failed: nothing awaits it, and asyncio
    reports an exception never retrieved only once the task is collected, if ever."""
    if not task.cancelled() and (failure := task.exception()) is not None:
        work = getattr(task.get_coro(), "__qualname__", "?")
        log.error("%s of the current generation failed", work, exc_info=failure)
