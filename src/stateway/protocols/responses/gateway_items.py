"""Input items of the gateway's own tools sent back by a client (``mcp_call``,
``mcp_approval_request``, ``web_search_call``), checked for the fields the core reads
when it shows them to the model as the function calls and outputs it saw
(:mod:`stateway.core.tools.history`): an id of another type, say, is a 400 naming it,
not a failure of the turn. Every other field is kept as sent."""

from __future__ import annotations

from typing import Any

from stateway.protocols.validation import missing_or_wrong_type

_STRINGS = {
    "mcp_call": ("id", "name", "server_label", "arguments"),
    "mcp_approval_request": ("id", "name", "server_label", "arguments"),
    "web_search_call": ("id",),
}
"""The fields each type needs as strings (as the hosted API's items always have them)."""


def check_gateway_item(raw: dict[str, Any], path: str, kind: str) -> None:
    for key in _STRINGS[kind]:
        if not isinstance(raw.get(key), str):
            raise missing_or_wrong_type(raw, path, key, "a string")
    approval = raw.get("approval_request_id")
    if kind == "mcp_call" and approval is not None and not isinstance(approval, str):
        raise missing_or_wrong_type(raw, path, "approval_request_id", "a string")
    if kind == "web_search_call" and raw.get("action") is not None:
        action = raw["action"]
        if not isinstance(action, dict):
            raise missing_or_wrong_type(raw, path, "action", "an object")
        sources = action.get("sources")
        if sources is not None and (
            not isinstance(sources, list) or not all(isinstance(s, dict) for s in sources)
        ):
            raise missing_or_wrong_type(action, f"{path}.action", "sources", "a list of objects")
