"""The model-visible tool catalog.

Clients declare tools in their public shapes; an upstream model only ever sees function
tools. This module names the tool kinds and (as client-owned kinds are added) maps public
tools to model-visible functions and calls back to public items.

Gateway-owned kinds (``web_search``, ``mcp``) have no provider yet: a ``web_search`` tool
sent as an optional hint (``external_web_access: false``, as Codex sends it) is dropped when
the request is decoded, so it is neither offered to the model nor echoed in ``tools``.
"""

from __future__ import annotations

from typing import Final

WEB_SEARCH_TYPES: Final = frozenset({"web_search", "web_search_preview"})
