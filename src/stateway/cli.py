"""The ``stateway`` command: serve, check-config, migrate, keys, fake-upstream.

Its entry imports nothing else first: ``serve`` notes a ``SIGHUP`` from here on
(:mod:`stateway.hangup`), before the second or so it takes to import what it runs, in
which the signal's default action would end it. The commands: :mod:`stateway.subcommands`.
"""

from __future__ import annotations

import sys
from collections.abc import Sequence

from stateway.hangup import StartupHangup


def main(argv: Sequence[str] | None = None) -> int:
    arguments = list(sys.argv[1:] if argv is None else argv)
    # Subcommands come first (``stateway`` itself takes only --help and --version).
    hangup = StartupHangup() if arguments[:1] == ["serve"] else None
    from stateway import subcommands

    return subcommands.main(arguments, hangup)


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
