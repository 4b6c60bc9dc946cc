"""The ``stateway`` command: serve, check-config, migrate, backup, keys, fake-upstream.

Its entry imports nothing else first: ``serve`` notes a ``SIGHUP`` from here on
(:mod:`stateway.hangup`), before the second or so it takes to import what it runs, in
which the signal's default action would end it; a Ctrl+C meanwhile ends it by SIGINT,
quietly. Output into a pipe whose reader left (``| head``) ends a command quietly too.
The commands: :mod:`stateway.subcommands`.
"""

from __future__ import annotations

import os
import signal
import sys
from collections.abc import Sequence

from stateway.hangup import StartupHangup


def main(argv: Sequence[str] | None = None) -> int:
    arguments = list(sys.argv[1:] if argv is None else argv)
    # Subcommands come first (``stateway`` itself takes only --help and --version).
    hangup = StartupHangup() if arguments[:1] == ["serve"] else None
    try:
        from stateway import subcommands

        return subcommands.main(arguments, hangup)
    except KeyboardInterrupt:  # Ctrl+C before a command took SIGINT (importing, say)
        end_by(signal.SIGINT)
        return 130  # pragma: no cover - the signal ended the process
    except BrokenPipeError:  # its output's reader left (``| head``): no traceback
        # What is still buffered would fail again as Python flushes it at exit.
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 1


def end_by(signum: int) -> None:
    """End the process by ``signum`` (its status says so, as README's "Shutdown" has it),
    without the traceback an uncaught KeyboardInterrupt would print."""
    sys.stdout.flush()
    signal.signal(signum, signal.SIG_DFL)
    signal.raise_signal(signum)


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
