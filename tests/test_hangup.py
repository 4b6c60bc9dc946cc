"""``SIGHUP`` while ``stateway serve`` starts up (``stateway.hangup``): noted, and the
process goes on."""

from __future__ import annotations

import signal

from stateway.hangup import StartupHangup


def test_a_sighup_while_starting_is_noted_and_does_not_end_the_process() -> None:
    previous = signal.getsignal(signal.SIGHUP)
    try:
        hangup = StartupHangup()
        assert hangup.seen is False
        signal.raise_signal(signal.SIGHUP)  # its handler runs before this returns
        assert hangup.seen
    finally:
        signal.signal(signal.SIGHUP, previous)
