"""Approvals answered by the client: which calls a request's ``mcp_approval_response``
items let run, and the tool each runs.

A call of a tool that needs approval became an ``mcp_approval_request`` and went back to
the client; an approving ``mcp_approval_response`` in a later request runs it before that
request's first round. Each request runs once: a request that already has its
``mcp_call`` in the context (the client resent its history) is not run again, and one the
context declines anywhere is never run, even approved later (a denial stands). The call
runs the tool as this request offers it; a request whose tool is no longer offered (its
server not declared again, the tool no longer listed or allowed) fails without running.
"""

from __future__ import annotations

from stateway.core.items import MCP_APPROVAL_REQUEST, MCP_APPROVAL_RESPONSE, MCP_CALL, Item
from stateway.core.tools import mcp
from stateway.core.tools.catalog import Entry
from stateway.core.tools.mcp_binding import McpBinding


def approved(context: list[Item], new_input: list[Item]) -> list[Item]:
    """The ``mcp_approval_request`` items of ``context`` that ``new_input`` approves and
    that are still to run, in the order of their approvals."""
    answered = {i.get("approval_request_id") for i in context if i.get("type") == MCP_CALL}
    answered.update(
        i.get("approval_request_id")
        for i in context
        if i.get("type") == MCP_APPROVAL_RESPONSE and i.get("approve") is not True
    )
    requests = {i.get("id"): i for i in context if i.get("type") == MCP_APPROVAL_REQUEST}
    out = []
    for item in new_input:
        if item.get("type") != MCP_APPROVAL_RESPONSE or item.get("approve") is not True:
            continue
        request_id = item.get("approval_request_id")
        request = requests.get(request_id)
        if request is None or request_id in answered:
            continue
        answered.add(request_id)
        out.append(request)
    return out


def approved_entry(
    request: Item, offered: list[Entry], bindings: list[McpBinding]
) -> tuple[Entry, str | None]:
    """The entry of an approved request's tool among the MCP tools this request
    ``offered``; or, when it does not offer it, one for the call's item and why the call
    is refused."""
    label, name = request.get("server_label", ""), request.get("name", "")
    for entry in offered:
        if entry.server_label == label and entry.name == name:
            return entry, None
    refused = mcp.refused(label, name, any(b.label == label for b in bindings))
    return refused, refused.refusal
