"""The content-parts bound's shortcut: a body too small to hold more parts than allowed is
not counted, and the densest body that could is."""

from __future__ import annotations

import orjson
import pytest

from stateway.core.errors import InvalidRequest
from stateway.protocols.input_parts import countable, part_limit
from stateway.protocols.responses.body import parse_body


def test_a_body_of_two_bytes_a_part_or_fewer_is_not_counted() -> None:
    most = part_limit(3)
    assert not countable(2 * most, 3)
    assert countable(2 * most + 1, 3)


def test_the_densest_body_over_the_bound_is_still_counted_and_refused() -> None:
    """Parts of two bytes each (``1,``) reach the bound in the fewest bytes: past it, the
    shortcut must not let the body through uncounted."""
    parts = part_limit(1) + 1
    raw = orjson.dumps({"input": [{"content": [1] * parts}]})
    with pytest.raises(InvalidRequest) as refused:
        parse_body(raw, 1)
    assert refused.value.code == "array_above_max_length"
    assert parse_body(orjson.dumps({"input": [{"content": [1] * (parts - 1)}]}), 1)
