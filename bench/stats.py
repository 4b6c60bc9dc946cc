"""Small statistics helpers: nearest-rank percentiles over nanosecond samples, in ms."""

from __future__ import annotations

import math
from collections.abc import Sequence


def percentile(sorted_values: Sequence[float], p: float) -> float:
    """Nearest-rank percentile ``p`` (0..100) of already sorted values."""
    if not sorted_values:
        return math.nan
    rank = max(1, math.ceil(p / 100 * len(sorted_values)))
    return sorted_values[min(rank, len(sorted_values)) - 1]


def ms(nanoseconds: float) -> float:
    return round(nanoseconds / 1e6, 4)
