"""The MCP client adapter: remote MCP servers' tools for the gateway's tool loop, over
pooled sessions of the official ``mcp`` SDK (Streamable HTTP and SSE). It implements
``stateway.core.tools.ports.McpClient`` and imports nothing else from the core, and of
the rest of stateway only ``stateway.redaction`` (shared with the backends, which it
does not import).

``pool.py`` (the client and its pool), ``session.py`` (one session and the task that owns
it), ``transports.py`` (opening a transport, watching its HTTP answers), ``failures.py``
(every error -> ``ToolFailure``), ``notifications.py`` (a call's bound on what the server
sends that is no reply), ``results.py`` (wire results -> port types), ``lazy.py``
(the client the gateway holds: the pool and the SDK loaded at first use).
"""

from stateway.mcp_client.lazy import LazyMcpClient

__all__ = ["LazyMcpClient"]
