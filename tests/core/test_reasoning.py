"""A reasoning item's thinking and its upstream's seal (:mod:`stateway.core.reasoning`)."""

from __future__ import annotations

from stateway.core.items import Item
from stateway.core.reasoning import (
    REDACTED,
    Wrapped,
    sealed_over,
    thinking_of,
    unwrapped_thinking,
    wrapped,
)
from stateway.sealing import AesGcmSealer
from tests.core.test_references import THOUGHT

SEALER = AesGcmSealer(bytes(range(32)))


def test_an_empty_seal_is_no_seal() -> None:
    """An empty ``encrypted_content`` is no signature (Anthropic refuses an empty one),
    and there is nothing to seal over."""
    unsigned = {**THOUGHT, "encrypted_content": ""}
    assert thinking_of(unsigned).seal is None
    assert thinking_of(unsigned).text == "cloudy"
    assert sealed_over(unsigned, SEALER, "t") is unsigned


def test_a_stored_seal_as_it_came_is_sealed_over_with_its_thinking() -> None:
    """The text sealed beside the signature is what the upstream gets back with it."""
    item = sealed_over(THOUGHT, SEALER, "t")
    assert unwrapped_thinking(SEALER, "t", item["encrypted_content"]) == Wrapped("sig", "cloudy")
    assert item["content"] == THOUGHT["content"]


def test_only_a_reasoning_items_seal_as_it_came_is_sealed_over() -> None:
    """A seal sealed over already, a redacted one too, is left as it is; so is any item
    that is no reasoning item, whatever its ``encrypted_content``."""
    for seal in (wrapped(SEALER, "t", "sig", "cloudy"), wrapped(SEALER, "t", REDACTED + "d")):
        done = {**THOUGHT, "encrypted_content": seal}
        assert sealed_over(done, SEALER, "t") is done
    compaction: Item = {"id": "cmp_1", "type": "compaction", "encrypted_content": "opaque"}
    assert sealed_over(compaction, SEALER, "t") is compaction
