"""The ``young_heap`` fixture (tests/conftest.py): a test's collections go through what
it made, and still free every cycle it made."""

from __future__ import annotations

import gc
import weakref


class Node:
    def __init__(self) -> None:
        self.other: Node | None = None


def test_the_objects_made_before_the_test_are_set_aside_and_its_cycles_collected(
    young_heap: None,
) -> None:
    assert gc.get_freeze_count() > 0
    first, second = Node(), Node()
    first.other, second.other = second, first
    gone = weakref.ref(first)
    del first, second
    gc.collect()
    assert gone() is None


def test_a_test_without_it_collects_the_whole_heap() -> None:
    assert gc.get_freeze_count() == 0
