"""``configuration_update`` items: settings changed mid-conversation (the Responses API's
beta item ``{"type": "configuration_update", "reasoning": {"effort"}, "text": {"format"}}``).

Each setting an update names holds from there on, until a later update replaces it, and
takes the place of the request's own: Codex (a provider named ``OpenAI``, its default
model) keeps sending its first turn's ``reasoning.effort`` (its prompt cache) and records
every change of effort as an item. The gateway applies them to the response's settings
(:func:`updated_settings`, over the whole context: earlier turns' inputs and this one's);
no upstream is sent the item (:mod:`stateway.core.tools.history` leaves it out), which
every backend therefore carries.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import replace
from typing import Any, Final

from stateway.core.generation_settings import GenerationSettings
from stateway.core.items import Item

CONFIGURATION_UPDATE: Final = "configuration_update"


def updated_settings(settings: GenerationSettings, *contexts: Iterable[Item]) -> GenerationSettings:
    """``settings`` with the latest update of each setting the ``contexts`` (in order)
    hold; ``settings`` itself when they hold none."""
    changes: dict[str, Any] = {}
    for items in contexts:
        for item in items:
            if item.get("type") != CONFIGURATION_UPDATE:
                continue
            reasoning, text = item.get("reasoning"), item.get("text")
            if isinstance(reasoning, dict) and reasoning.get("effort") is not None:
                changes["reasoning_effort"] = reasoning["effort"]
            if isinstance(text, dict) and isinstance(text.get("format"), dict):
                changes["text_format"] = text["format"]
    return replace(settings, **changes) if changes else settings
