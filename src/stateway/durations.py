"""Durations as people write them in a configuration or on a command line: ``30d``,
``12h``, ``90m``, ``45s``, ``2w`` (a whole number and one unit)."""

from __future__ import annotations

import re
from typing import Final

_DURATION: Final = re.compile(r"(\d+)([smhdw])")
_UNITS: Final = {"s": 1, "m": 60, "h": 3600, "d": 86400, "w": 7 * 86400}
EXAMPLES: Final = "30d, 12h, 90m, 45s, 2w"


def duration_seconds(text: str) -> int | None:
    """The seconds ``text`` names (surrounding spaces ignored); None when it is not a
    duration."""
    duration = _DURATION.fullmatch(text.strip())
    if duration is None:
        return None
    return int(duration.group(1)) * _UNITS[duration.group(2)]


def duration_text(seconds: float) -> str:
    """``seconds`` as a duration in its largest whole unit (``30d``; ``2592001s``), or in
    seconds when not whole (``1.5s``)."""
    for unit, size in sorted(_UNITS.items(), key=lambda item: -item[1]):
        if seconds >= size and seconds % size == 0:
            return f"{int(seconds // size)}{unit}"
    return f"{seconds:g}s"
