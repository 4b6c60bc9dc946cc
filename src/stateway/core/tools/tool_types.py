"""The declared tool types the catalog, the decoders and the tool loop name, and who runs
a ``tool_search`` tool's searches (:mod:`.catalog` offers the tools; :mod:`.tool_search`
runs a gateway's searches)."""

from __future__ import annotations

from typing import Final, Literal

from stateway.core.items import Item
from stateway.core.tools import client_hosted

WEB_SEARCH_TYPES: Final = frozenset(
    {"web_search", "web_search_2025_08_26", "web_search_preview", "web_search_preview_2025_03_11"}
)
"""The types of the hosted web search tool (the SDK's ``WebSearchTool`` and
``WebSearchPreviewTool``, dated versions among them): each is the gateway's web search."""
NAMESPACE: Final = "namespace"
CUSTOM: Final = "custom"
ADDITIONAL_TOOLS: Final = "additional_tools"
"""An input item (role ``developer``) whose ``tools`` join the request's declared tools.
It stays in the stored context as sent and never reaches a model as a message."""
OFFERED: Final = frozenset({"function", CUSTOM, NAMESPACE})
"""The declared types offered to the model as they are declared (a ``namespace`` by its
members): what ``additional_tools`` and ``tool_search_output`` items may offer."""
CLIENT_TYPES: Final = OFFERED | client_hosted.TOOL_TYPES
"""Client-owned tool types the gateway models (offered to any upstream as functions)."""
TOOL_SEARCH: Final = "tool_search"
DEFER: Final = "defer_loading"


def search_execution(tool: Item) -> Literal["client", "server"]:
    """Who runs a ``tool_search`` tool's searches: the gateway unless it says ``client``."""
    return "client" if tool.get("execution") == "client" else "server"
