"""Which approvals let a call run, and the tool each runs (the loop's view of them is in
test_tool_session.py)."""

from __future__ import annotations

from stateway.core.items import Item
from stateway.core.tools.approvals import approved, approved_entry
from stateway.core.tools.catalog import Entry
from stateway.core.tools.mcp_binding import Approval, McpBinding
from stateway.core.tools.ports import McpServer


def request(request_id: str, label: str = "docs", name: str = "search") -> Item:
    return {"type": "mcp_approval_request", "id": request_id, "server_label": label, "name": name}


def answer(request_id: str, approve: bool = True) -> Item:
    return {"type": "mcp_approval_response", "approval_request_id": request_id, "approve": approve}


def test_approvals_run_in_their_order_once_each() -> None:
    context = [request("mcpr_a"), request("mcpr_b")]
    new_input = [answer("mcpr_b"), {"type": "message"}, answer("mcpr_a"), answer("mcpr_b")]
    assert approved(context, new_input) == [request("mcpr_b"), request("mcpr_a")]


def test_a_request_run_or_declined_before_is_not_run() -> None:
    ran = {"type": "mcp_call", "approval_request_id": "mcpr_a"}
    context = [request("mcpr_a"), ran, request("mcpr_b"), answer("mcpr_b", approve=False)]
    assert approved(context, [answer("mcpr_a"), answer("mcpr_b")]) == []


def test_a_denial_or_an_unknown_request_runs_nothing() -> None:
    assert approved([request("mcpr_a")], [answer("mcpr_a", approve=False)]) == []
    assert approved([request("mcpr_a")], [answer("mcpr_x")]) == []


def binding(label: str) -> McpBinding:
    return McpBinding(McpServer(label, f"http://{label}.test/mcp"), None, False, Approval(True))


def test_an_approved_call_runs_the_tool_as_offered_or_says_why_not() -> None:
    offered = Entry(kind="mcp", function={}, tool={}, server_label="docs", name="search")
    assert approved_entry(request("mcpr_a"), [offered], [binding("docs")]) == (offered, None)

    entry, refusal = approved_entry(request("mcpr_a", name="drop"), [offered], [binding("docs")])
    assert (entry.server_label, entry.name, entry.refusal) == ("docs", "drop", refusal)
    assert refusal == "MCP server 'docs' does not offer the tool 'drop' in this request."
    _, refusal = approved_entry(request("mcpr_a", label="gone"), [offered], [binding("docs")])
    assert refusal == "MCP server 'gone' is not declared in this request."
