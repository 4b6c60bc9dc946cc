"""The reasoning efforts a Chat upstream takes (``[[backends]] reasoning_efforts``), and
the level each other effort is sent at.

Clients ask for ``none``, ``minimal``, ``low``, ``medium``, ``high``, ``xhigh`` or ``max``
(the OpenAI SDK's levels; Codex's ``model_reasoning_effort``, a Messages client's
``output_config.effort``). Hosted OpenAI takes them all, as do recent vLLM releases and
llama.cpp (which turns thinking off for ``none`` and leaves the others to the chat
template); older vLLM releases take only ``low``, ``medium`` and ``high`` and refuse any
other with a 400. A backend that lists what its server takes has every other level sent
at the nearest listed one, the lower of two as near (less reasoning, sooner): with
``low``, ``medium`` and ``high`` listed, ``xhigh`` and ``max`` are sent as ``high``,
``minimal`` as ``low``. ``none`` is no level of reasoning but its absence: a reasoning effort is
never sent as ``none``, and ``none`` unlisted is sent as the lowest listed level (the
least reasoning the server offers, where leaving the field out would get its default,
which may be more). An effort outside the ladder (a Chat client's own string) is sent as
it came: the server judges it.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Final, Literal, get_args

Effort = Literal["none", "minimal", "low", "medium", "high", "xhigh", "max"]
LADDER: Final[tuple[str, ...]] = get_args(Effort)
"""The levels, from the least reasoning to the most."""
NONE: Final = "none"


def effort_levels(accepted: tuple[str, ...] | None) -> Mapping[str, str]:
    """The level each effort the server does not take is sent at; empty when every
    effort goes as it is (``accepted`` None)."""
    if not accepted:
        return {}
    return {effort: _nearest(effort, accepted) for effort in LADDER if effort not in accepted}


def _nearest(effort: str, accepted: tuple[str, ...]) -> str:
    """The accepted level nearest ``effort`` on the ladder, the lower of two as near
    (``none`` aside: ``accepted`` names another level)."""
    asked = LADDER.index(effort)
    levels = [LADDER.index(level) for level in accepted if level != NONE]
    return LADDER[min(levels, key=lambda level: (abs(level - asked), level))]


def level_sent(levels: Mapping[str, str], effort: object) -> object:
    """What is sent for the client's ``effort`` given :func:`effort_levels`: its level, or
    itself (an effort the server takes, or not a string: the server judges it)."""
    return levels.get(effort, effort) if isinstance(effort, str) else effort
