"""``moderation``, a field of both OpenAI wires (Responses and Chat Completions): the input
and output scored by a moderation model, and blocked when flagged where the policy says
``block``.

The gateway does not moderate, and cannot tell whether an upstream would (a server other
than OpenAI's ignores the field), so it sends the field to no upstream. A policy that
blocks is refused (:func:`check_moderation`): ignoring it would let through what the
client asked to have blocked. Scores alone change nothing generated and are ignored: the
answer has no ``moderation`` object to show them.
"""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

from stateway.core.errors import InvalidRequest


class _Wire(BaseModel):
    model_config = ConfigDict(extra="ignore")


class ModerationPolicyMode(_Wire):
    mode: Literal["score", "block"]


class ModerationPolicy(_Wire):
    input: ModerationPolicyMode | None = None
    output: ModerationPolicyMode | None = None


class Moderation(_Wire):
    """``moderation``: the moderation model, and what its verdict does to each side."""

    model: str = Field(min_length=1)
    policy: ModerationPolicy | None = None


def check_moderation(moderation: Moderation | None) -> None:
    """A 400 (``unsupported_value``) on the first side whose policy blocks."""
    policy = moderation.policy if moderation is not None else None
    if policy is None:
        return
    for side, chosen in (("input", policy.input), ("output", policy.output)):
        if chosen is not None and chosen.mode == "block":
            param = f"moderation.policy.{side}.mode"
            raise InvalidRequest(
                f"Unsupported value: '{param}' 'block' is not supported by this gateway: it "
                f"cannot moderate the {side}, and leaving it unmoderated would let through "
                "what the policy blocks.",
                param=param,
                code="unsupported_value",
            )
