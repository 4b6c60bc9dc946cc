"""Which thinking each model behind an Anthropic backend takes: ``enabled`` (a
``budget_tokens``) or ``adaptive`` (an ``output_config.effort``).

Anthropic's listing (``GET /v1/models``) tells it of each model, under
``capabilities.thinking.types``: Claude models from Opus 4.7 on take adaptive thinking
only (a budget is a 400), those before Claude 4.6 enabled thinking only. A reasoning effort
without a budget is asked as the backend's ``thinking`` says, except of a model whose
listing says it takes only the other: that one is asked for the kind it takes. A model the
listing tells nothing of (another server's listing, no listing read yet, window discovery
off or not needed: a backend with its ``context_window`` set) is asked as the backend
says. Learned from the listing the window discovery reads (in the background from
start-up; one backend's per server, which the server's other backends follow:
``AnthropicBackend.follow``), as :mod:`.anthropic_tool_choice` learns its server, but
never asked on a request's path (nearly every request of a reasoning client names an
effort). The listing names dated models: a client naming an alias
(``claude-opus-4-7`` for its dated id) is asked as the backend says.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Literal

ThinkingKind = Literal["enabled", "adaptive"]


class ThinkingTypes:
    """The one thinking kind each listed model takes, of those it told."""

    __slots__ = ("_only",)

    def __init__(self) -> None:
        self._only: dict[str, ThinkingKind] = {}

    def learn(self, listing: Sequence[object]) -> None:
        """Learn it from ``listing`` (the ``data`` of the server's ``GET /models``)."""
        only: dict[str, ThinkingKind] = {}
        for entry in listing:
            if isinstance(entry, dict) and isinstance(entry.get("id"), str):
                kind = _only_kind(entry)
                if kind is not None:
                    only[entry["id"]] = kind
        self._only = only

    def asked(self, model: str, configured: ThinkingKind) -> ThinkingKind:
        """The thinking ``model`` is asked for: the one it takes, if one only, else
        ``configured``."""
        return self._only.get(model, configured)


def _only_kind(entry: dict[str, Any]) -> ThinkingKind | None:
    """The one of ``enabled`` and ``adaptive`` a listing entry says its model takes, or
    None (both, neither, or not told)."""
    types = _field(_field(_field(entry, "capabilities"), "thinking"), "types")
    taken = {kind: _field(types, kind).get("supported") for kind in ("enabled", "adaptive")}
    if taken == {"enabled": True, "adaptive": False}:
        return "enabled"
    if taken == {"enabled": False, "adaptive": True}:
        return "adaptive"
    return None


def _field(value: dict[str, Any], name: str) -> dict[str, Any]:
    inner = value.get(name)
    return inner if isinstance(inner, dict) else {}
