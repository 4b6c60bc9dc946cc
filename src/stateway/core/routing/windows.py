"""Context windows learned from the model servers themselves (``[[backends]]
discover_context_window``, on by default), for candidates whose configuration gives none.

The configuration always wins: a candidate's ``capabilities.context_window``, else its
backend's ``context_window``; only a candidate with neither reads what its server
advertised (:attr:`Candidate.context_window <.route.Candidate.context_window>`), and reads
it at each use, so a window learned while serving applies to the next request.

What was learned is the process's, not a generation's: :class:`LearnedWindows` keeps one
:class:`ServerWindows` per model server URL, which every generation's candidates of that
server hold. A reload keeps what was learned (the new generation's candidates read the
same record), and asks each server again in the background, the record keeping its
value until the server answers (a restarted server with another ``--max-model-len`` is
seen after a reload).

:class:`WindowDiscovery` is the asking, one task per generation (run while it is current,
beside serving, never holding up start-up or a reload): each server at once, and while it
cannot be reached (or answers 5xx or 429: a model server loading its weights, a container
not started yet) again, 1 s later, then twice as long each time up to ``retry`` apart (the
``[health] probe_interval``), until it answers; what it answers (nothing, for a server that
does not say) is what the record holds. Reading a learned window costs an attribute
read and a dict lookup, only where the core reads a window: ``truncation: "auto"``,
compaction thresholds, the Anthropic model listing. It is not checked against the
gateway's estimate before asking (:mod:`.needs`: the server counts exactly), and takes no
route off the Chat Completions fast path.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Sequence

from stateway.core.backend import AdvertisedWindows, WindowAdvertiser
from stateway.core.errors import GatewayError, UpstreamRejected

log = logging.getLogger(__name__)

_FIRST_RETRY = 1.0


class ServerWindows:
    """What one model server advertised of its models' windows; nothing until it answers."""

    __slots__ = ("advertised",)

    def __init__(self) -> None:
        self.advertised = AdvertisedWindows()
        """Replaced whole by each answer (a value: nothing read half of one)."""

    def window(self, model: str) -> int | None:
        """``model``'s window as the server advertised it; None when it did not (yet)."""
        return self.advertised.of(model)

    def learn(self, advertised: AdvertisedWindows) -> None:
        self.advertised = advertised


class LearnedWindows:
    """Every model server's :class:`ServerWindows`, by URL, for the whole process (every
    generation's candidates of a server read one record). A URL no longer configured
    keeps its small record, should a reload name it again."""

    __slots__ = ("_servers",)

    def __init__(self) -> None:
        self._servers: dict[str, ServerWindows] = {}

    def server(self, url: str) -> ServerWindows:
        record = self._servers.get(url)
        if record is None:
            record = self._servers[url] = ServerWindows()
        return record


class WindowDiscovery:
    """Asks each of a generation's servers for its windows until it answers."""

    def __init__(
        self, servers: Sequence[tuple[WindowAdvertiser, ServerWindows]], retry: float
    ) -> None:
        """``servers``: one backend per server, and the server's record; ``retry``: the
        longest wait between two asks of a server that did not answer."""
        self.servers = servers
        self._retry = retry

    async def run(self) -> None:
        """Ask every server until each has answered (cancelled when the generation is
        superseded, or at shutdown). One asking failing unexpectedly ends the others (a
        task group: ``gather`` would leave them running, beyond any cancel's reach)."""
        async with asyncio.TaskGroup() as asking:
            for backend, record in self.servers:
                asking.create_task(self._learn(backend, record))

    async def _learn(self, backend: WindowAdvertiser, record: ServerWindows) -> None:
        wait = min(_FIRST_RETRY, self._retry)
        level = logging.INFO  # why not yet, told once: then at each ask only in DEBUG
        while True:
            try:
                advertised = await backend.advertised_windows()
            except GatewayError as exc:
                if _answered(exc):
                    log.info("backend %s: no context window learned: %s", backend.name, exc)
                    record.learn(AdvertisedWindows())
                    return
                # a server still starting, or one whose listing cannot be read
                log.log(level, "backend %s: its windows not learned yet: %s", backend.name, exc)
                level = logging.DEBUG
                await asyncio.sleep(wait)  # a timer: the retry period itself
                wait = min(wait * 2, self._retry)
                continue
            record.learn(advertised)
            _report(backend.name, advertised)
            return


def _answered(error: GatewayError) -> bool:
    """Whether ``error`` is the server's answer (a refusal, 429 apart: asking again would
    be refused alike), not its absence."""
    return isinstance(error, UpstreamRejected) and error.status != 429


def _report(backend: str, advertised: AdvertisedWindows) -> None:
    if advertised.server is not None:
        log.info("backend %s: context window %d learned", backend, advertised.server)
    elif advertised.models:
        listed = ", ".join(f"{model}: {window}" for model, window in advertised.models.items())
        log.info("backend %s: context windows learned (%s)", backend, listed)
    else:
        log.debug("backend %s: its model server advertises no context window", backend)
