"""The levels of adaptive thinking are the Anthropic API's."""

from __future__ import annotations

from typing import get_args, get_type_hints

from anthropic.types import OutputConfigParam

from stateway.core.adaptive_effort import ADAPTIVE_DEFAULT, ADAPTIVE_EFFORTS


def test_the_levels_are_those_the_anthropic_sdk_sends() -> None:
    effort = get_type_hints(OutputConfigParam)["effort"]  # Optional[Literal[...]]
    (levels,) = (arg for arg in get_args(effort) if arg is not type(None))
    assert get_args(levels) == ADAPTIVE_EFFORTS
    assert ADAPTIVE_DEFAULT in ADAPTIVE_EFFORTS
