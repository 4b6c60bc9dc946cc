"""What the surfaces share of the ASGI app they are served on, below any one surface's
routes: :mod:`.hosts` (the ``Host`` check every request and upgrade passes, and the
``Origin`` check of a WebSocket upgrade or an MCP request), :mod:`.answers` (JSON
answers, an error in the OpenAI shape) and :mod:`.bodies` (a request body read within
its bounds).

Shared like :mod:`stateway.surfaces.auth`: the surfaces (``http``, ``websocket``,
``mcp``) import these, never each other.
"""
