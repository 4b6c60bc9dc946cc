"""The id the gateway gives an item by its type (``new_item_id``)."""

from __future__ import annotations

import pytest

from stateway.core.items import new_item_id


def test_a_modelled_type_gets_its_prefix() -> None:
    assert new_item_id("function_call").startswith("fc_")


@pytest.mark.parametrize("kind", ["a_future_type", None, 7, ["message"], {"type": "message"}])
def test_any_other_kind_gets_an_item_id(kind: object) -> None:
    """Even one no type could be (a stored row's, read back as it was written): an
    unhashable one is not looked up."""
    assert new_item_id(kind).startswith("item_")
