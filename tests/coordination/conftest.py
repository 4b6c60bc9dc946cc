"""Fixtures of the coordination adapters' tests."""

from __future__ import annotations

import pytest


class Clock:
    """Seconds that move only when a test moves them (``clock.now += 5``)."""

    def __init__(self) -> None:
        self.now = 1_000_000.0

    def __call__(self) -> float:
        return self.now


@pytest.fixture
def clock() -> Clock:
    return Clock()
