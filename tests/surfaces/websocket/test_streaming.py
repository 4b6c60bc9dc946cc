"""What a lane streams: how far it trails a live run (and not a replay), and a run without
an event journal refused."""

from __future__ import annotations

import pytest

from stateway.core import events as ev
from stateway.core.commands import CreateResponse
from stateway.core.errors import GatewayError
from stateway.core.response import ResponseState
from stateway.core.runs import Run
from stateway.surfaces.websocket.streaming import Streaming, live_watch


class Trailing:
    """A watch whose run is ``events`` bytes ahead of it."""

    def __init__(self, events: int) -> None:
        self.events = events

    def behind(self) -> int:
        return self.events


@pytest.mark.parametrize(("live", "behind"), [(True, 150), (False, 100)], ids=["live", "replay"])
def test_a_lane_trails_by_what_its_watch_has_not_given_and_a_live_lane_holds(
    live: bool, behind: int
) -> None:
    streaming = Streaming(Trailing(100), live)  # type: ignore[arg-type]
    assert streaming.behind() == 100
    streaming.held = 50
    assert streaming.behind() == behind


def test_a_run_without_an_event_journal_is_not_streamed() -> None:
    request = CreateResponse(model="m", input=[])
    run = Run(ResponseState.start("resp_1", "t", 0.0, request), [])
    run.emit(ev.ResponseCreated(run.state))
    assert run.journal is None
    with pytest.raises(GatewayError) as refused:
        live_watch(run)
    assert refused.value.status == 503
    assert refused.value.message == "WebSocket mode needs the gateway's event journal."
