"""Web search providers behind :class:`stateway.core.tools.ports.SearchProvider`, for the
gateway-owned ``web_search`` tool.

One module per API (``searxng``, ``brave``, ``tavily``) maps a :class:`SearchQuery` to the
API's request and its answer to :class:`SearchHit` s; ``transport`` owns the HTTP leg
(session, deadline, failure messages) and ``selection`` what every provider does to the
hits (domain filter, de-duplication, count). ``factory.build_search_provider`` picks one
from ``[web_search]``. Only ``stateway.core.tools.ports`` is imported from the core.
"""

from stateway.search.factory import build_search_provider

__all__ = ["build_search_provider"]
