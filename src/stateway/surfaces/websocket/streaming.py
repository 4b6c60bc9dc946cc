"""What a WebSocket lane streams: a run's watch, and how far the lane trails it."""

from __future__ import annotations

from stateway.core.errors import GatewayError
from stateway.core.runs import Run
from stateway.core.watch import LiveWatch, Watch


class Streaming:
    """What a lane streams now, and how far it trails: the events its watch has not
    given it, and those it was given and has not put into the outbox yet (counted for a
    live run only: a replay of a stored log is paced, it piles nothing up)."""

    __slots__ = ("held", "live", "watch")

    def __init__(self, watch: Watch, live: bool) -> None:
        self.watch = watch
        self.live = live
        self.held = 0

    def behind(self) -> int:
        return self.watch.behind() + (self.held if self.live else 0)


def live_watch(run: Run) -> Watch:
    """The watch a lane streams a run of this process through: its journal's payloads."""
    if run.journal is None:  # the composition root always gives the core an encoder
        raise GatewayError("WebSocket mode needs the gateway's event journal.", status=503)
    return LiveWatch(run, run.journal)
