"""How the reasoning items of a response are finished, from its request settings.

- ``reasoning.summary`` set (``auto``, ``concise``, ``detailed``): the reasoning text is
  also the item's ``summary`` (one ``summary_text`` part, or each part a Responses upstream
  summarized it in: :func:`stateway.core.item_parts.break_summary`), streamed with the
  ``response.reasoning_summary_*`` events alongside the reasoning text's own: clients that
  show only summaries (Codex) show the model's reasoning.
- ``include: ["reasoning.encrypted_content"]``: the text is sealed as the item's
  ``encrypted_content`` (:mod:`.sealed`), so a ``store: false`` client that sends the item
  back gives the model its reasoning again (:mod:`.view`); an item that holds its
  upstream's own seal already (:mod:`stateway.core.reasoning`) keeps that one.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from functools import partial
from typing import Final

from stateway.core.compaction import sealed
from stateway.core.generation_settings import GenerationSettings
from stateway.core.ports import Sealer

INCLUDE_ENCRYPTED: Final = "reasoning.encrypted_content"


@dataclass(slots=True, frozen=True)
class ReasoningOutput:
    summary: bool = False
    """Offer the reasoning text as the item's summary too."""
    seal: Callable[[str], str] | None = None
    """Seals the reasoning text as ``encrypted_content``."""


def reasoning_output(
    settings: GenerationSettings, sealer: Sealer | None, tenant_id: str
) -> ReasoningOutput | None:
    """None when reasoning items are finished as they always are."""
    summary = settings.reasoning_summary is not None
    seal = None
    if INCLUDE_ENCRYPTED in settings.include:
        seal = partial(sealed.seal, sealer, sealed.REASONING, tenant_id)
    if not summary and seal is None:
        return None
    return ReasoningOutput(summary, seal)
