"""A real MCP server, built with the ``mcp`` SDK's ``MCPServer``, whose tools ask the client
for input mid-call, in each way a server may: for tests of a gateway that has no user to
ask (it declares no elicitation capability).

- ``confirm()``: asks through ``ctx.elicit`` (MCP 2025-06-18 on): the server sends the
  client an ``elicitation/create`` request during the call, which a client without the
  capability answers with an error; the call then fails with it.
- ``pick()``: a parameter its resolver fills by asking the user (``Resolve(Elicit)``):
  the server checks the client's capabilities first and refuses the call
  (``-32021``, a client capability missing).
- ``ask()``: answered with an ``InputRequiredResult`` (MCP 2026-07-28's multi-round
  ``tools/call``: ``resultType: "input_required"``, an elicitation among its
  ``inputRequests``), whatever revision the session negotiated, as a server written for
  that revision alone answers.
- ``add(a, b)``: answers at once (the session still serves).

    with serve_asking_mcp() as url:                   # or serve_asking_mcp("sse")
        McpServer(label="asking", url=url)
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Annotated, Any

from mcp.server.context import CallNext, HandlerResult, ServerRequestContext
from mcp.server.mcpserver import Context, MCPServer, Resolve
from mcp.server.mcpserver.resolve import Elicit
from pydantic import BaseModel

from stateway.core.tools.ports import McpTransport
from tests.support.mcp_server import serve_app

QUESTION = "Which branch should I deploy?"
INPUT_REQUIRED: dict[str, Any] = {
    "resultType": "input_required",
    "inputRequests": {
        "branch": {
            "method": "elicitation/create",
            "params": {
                "mode": "form",
                "message": QUESTION,
                "requestedSchema": {
                    "type": "object",
                    "properties": {"branch": {"type": "string"}},
                    "required": ["branch"],
                },
            },
        }
    },
    "requestState": "round-1",
}
"""``ask``'s answer, as the 2026-07-28 revision words it on the wire."""


class Branch(BaseModel):
    branch: str


def _which_branch() -> Elicit[Branch]:
    return Elicit(QUESTION, Branch)


async def _asks_for_input(
    ctx: ServerRequestContext[Any, Any], call_next: CallNext
) -> HandlerResult:
    """``ask`` answered with :data:`INPUT_REQUIRED`: a middleware's answer is sent as it is
    (the SDK shapes only its handlers' results to the negotiated revision)."""
    params = ctx.params if isinstance(ctx.params, dict) else {}
    if ctx.method == "tools/call" and params.get("name") == "ask":
        return dict(INPUT_REQUIRED)
    return await call_next(ctx)


def build_server() -> MCPServer:
    server = MCPServer("stateway-asking-test", middleware=[_asks_for_input])

    @server.tool(description="Confirm with the user before deploying.")
    async def confirm(ctx: Context) -> str:
        answer = await ctx.elicit(QUESTION, Branch)
        return f"deploying {answer}"

    @server.tool(description="Deploy the branch the user picks.")
    async def pick(choice: Annotated[Branch, Resolve(_which_branch)]) -> str:
        return f"deploying {choice.branch}"

    @server.tool(description="Deploy, asking for the branch in a later round.")
    async def ask() -> str:
        return "never reached: the middleware answers"

    @server.tool(description="Add two integers.")
    async def add(a: int, b: int) -> str:
        return str(a + b)

    return server


@contextmanager
def serve_asking_mcp(transport: McpTransport = "streamable_http") -> Iterator[str]:
    """The server on loopback (a free port), speaking ``transport``; yields its URL."""
    server = build_server()
    if transport == "sse":
        with serve_app(server.sse_app()) as base_url:
            yield f"{base_url}/sse"
        return
    app = server.streamable_http_app(streamable_http_path="/mcp", host="127.0.0.1")
    with serve_app(app) as base_url:
        yield f"{base_url}/mcp"
