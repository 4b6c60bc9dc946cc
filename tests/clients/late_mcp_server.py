"""An MCP server (stdio, the ``mcp`` SDK's) whose one tool, ``late_echo``, arrives after
its client's first request: it serves only once released, and tells when it has listed
its tools, so a command the client runs decides when its tools come.

    python tests/clients/late_mcp_server.py GO LISTED

``GO`` is a FIFO: the server starts serving once a line is written to it (a writer that
opens it read-write, ``exec 3<>GO; echo >&3``, never blocks, so releasing it twice is
harmless). ``LISTED`` is a file the server creates once it has answered ``tools/list``.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import anyio
from mcp.server.context import CallNext, HandlerResult, ServerRequestContext
from mcp.server.mcpserver import MCPServer

TOOL = "late_echo"


def serve(go: Path, listed: Path) -> None:
    with go.open() as fifo:  # blocks until a writer opens it
        fifo.readline()
    server = MCPServer("late")

    @server.tool()
    def late_echo(text: str) -> str:
        """Echo the text back (a tool that arrived late)."""
        return f"late says {text}"

    async def mark_listed(
        ctx: ServerRequestContext[Any, Any], call_next: CallNext
    ) -> HandlerResult:
        result = await call_next(ctx)
        if ctx.method == "tools/list":
            await anyio.Path(listed).touch()
        return result

    server.middleware.append(mark_listed)
    server.run("stdio")


if __name__ == "__main__":
    serve(Path(sys.argv[1]), Path(sys.argv[2]))
