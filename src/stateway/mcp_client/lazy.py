"""The MCP client loaded when first used.

The ``mcp`` SDK is the largest import of a serving process (~20 MiB with its protocol
types). Most gateways never call a remote MCP server, so the composition root hands the
tool loop a :class:`LazyMcpClient`, which imports and builds the
:class:`~stateway.mcp_client.pool.PooledMcpClient` at the first ``list_tools`` or
``call_tool``.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from stateway.core.tools.ports import McpServer, McpTool

if TYPE_CHECKING:
    from stateway.mcp_client.pool import PooledMcpClient


class LazyMcpClient:
    """A :class:`~stateway.core.tools.ports.McpClient`; ``settings`` are the pooled
    client's keyword arguments."""

    def __init__(self, **settings: Any) -> None:
        self._settings = settings
        self._client: PooledMcpClient | None = None

    @property
    def loaded(self) -> bool:
        """Whether the pooled client (and the SDK) was loaded."""
        return self._client is not None

    def _pool(self) -> PooledMcpClient:
        if self._client is None:
            from stateway.mcp_client.pool import PooledMcpClient

            self._client = PooledMcpClient(**self._settings)
        return self._client

    async def list_tools(self, server: McpServer) -> list[McpTool]:
        return await self._pool().list_tools(server)

    async def call_tool(self, server: McpServer, name: str, arguments: Mapping[str, Any]) -> str:
        return await self._pool().call_tool(server, name, arguments)

    async def aclose(self) -> None:
        if self._client is not None:
            await self._client.aclose()
