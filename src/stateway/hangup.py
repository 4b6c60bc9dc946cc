"""``SIGHUP`` while ``stateway serve`` starts up: noted, not the end of the process.

Serving reloads on ``SIGHUP`` once its event loop handles it (:mod:`stateway.reload`);
until then the signal's default action would end the process. Start-up can take a while
(migrating the database, waiting for another process's migration), and a ``SIGHUP`` sent
to every gateway on a host (``pkill -HUP``) or by a deploy tool may reach one still
starting. :class:`StartupHangup` notes such a signal from before the configuration is
read; serving then reloads once, so that the file it was sent for is read.
"""

from __future__ import annotations

import signal
from types import FrameType


class StartupHangup:
    """Installed before the configuration is read; :attr:`seen` once a ``SIGHUP`` came."""

    __slots__ = ("seen",)

    def __init__(self) -> None:
        self.seen = False
        signal.signal(signal.SIGHUP, self._note)

    def _note(self, signum: int, frame: FrameType | None) -> None:
        self.seen = True
