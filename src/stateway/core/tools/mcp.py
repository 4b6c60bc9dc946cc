"""Remote MCP tools as items: discovery (``mcp_list_tools``), calls (``mcp_call``, and a
failed one's ``error``) and approval requests (``mcp_approval_request``), and the
model-visible functions of a server's tools (``<server_label>__<tool>``, described by the
tool's description and its server's; one the request does not offer: :func:`refused`)."""

from __future__ import annotations

from dataclasses import replace
from typing import Any, Final

import orjson

from stateway.core.ids import new_id
from stateway.core.items import MCP_APPROVAL_REQUEST, MCP_CALL, MCP_LIST_TOOLS, Item
from stateway.core.nesting import MAX_NESTING, nests_too_deep
from stateway.core.tools.catalog import Entry
from stateway.core.tools.mcp_binding import McpBinding
from stateway.core.tools.model_names import model_name
from stateway.core.tools.ports import (
    GATEWAY_REFUSED,
    INVALID_PARAMS,
    McpTool,
    ToolError,
    ToolFailure,
)

READ_ONLY: Final = "read_only"
"""Hosted's annotation of a listed tool: whether the server marks it read-only."""
FILTERED_LISTING: Final = "mcpl_f"
"""The id prefix (``mcpl_f_<filter key>_...``) of a listing made under an
``allowed_tools`` filter: it shows only the tools that filter let through, not all the
server's (an unfiltered listing's id is ``mcpl_...``, as any other). A later turn reads
it back knowing that, and under which filter (:func:`listing_filter`): the wire item has
no field to say so."""


def list_item(label: str, filter_key: str | None = None) -> Item:
    """An ``mcp_list_tools`` item, to show the tools offered (``filter_key``: under the
    ``allowed_tools`` filter of that :attr:`~.mcp_binding.McpBinding.filter_key`, which
    may hold some back)."""
    prefix = "mcpl" if filter_key is None else f"{FILTERED_LISTING}_{filter_key}"
    return {"id": new_id(prefix), "type": MCP_LIST_TOOLS, "server_label": label, "tools": []}


def listing_filter(item: Item) -> str | None:
    """The filter key an earlier listing was made under, "" when it was filtered under a
    filter it does not name, None when it shows all its server's tools: any listing but
    a filtered one of the gateway's (an unfiltered one, one a client made) is taken to."""
    item_id = item.get("id")
    if not isinstance(item_id, str) or not item_id.startswith(FILTERED_LISTING + "_"):
        return None
    key, _, rest = item_id.removeprefix(FILTERED_LISTING + "_").partition("_")
    return key if rest else ""


def listed_tool(tool: McpTool) -> Item:
    """A tool as an ``mcp_list_tools`` item shows it: its ``annotations`` always an object
    holding hosted's ``read_only`` (after the server's own hints), and no field ``null``, as
    hosted lists a tool (the Vercel AI SDK refuses a listing with either ``null``)."""
    listed: Item = {"name": tool.name, "input_schema": dict(tool.input_schema)}
    if tool.description is not None:
        listed["description"] = tool.description
    listed["annotations"] = {**(tool.annotations or {}), READ_ONLY: tool.read_only}
    return listed


def tools_of(item: Item) -> list[McpTool]:
    """The tools an earlier ``mcp_list_tools`` item listed (reused on later turns)."""
    out = []
    for tool in item.get("tools") or ():
        if isinstance(tool, dict) and isinstance(tool.get("name"), str):
            schema = tool.get("input_schema")
            out.append(
                McpTool(
                    name=tool["name"],
                    input_schema=schema if isinstance(schema, dict) else {"type": "object"},
                    description=tool.get("description"),
                    annotations=_hints(tool.get("annotations")),
                )
            )
    return out


def _hints(annotations: Any) -> dict[str, Any] | None:
    """A listed tool's annotations as the server's hints: hosted's ``read_only`` taken out,
    or as ``readOnlyHint`` when the listing holds no hints of its own (one a client sends
    back from hosted)."""
    if not isinstance(annotations, dict):
        return None
    hints = {key: value for key, value in annotations.items() if key != READ_ONLY}
    if annotations.get(READ_ONLY) is True and "readOnlyHint" not in hints:
        hints["readOnlyHint"] = True
    return hints or None


def entries(binding: McpBinding, tools: list[McpTool], *, defer: bool = False) -> list[Entry]:
    """The model-visible functions of the server's tools the binding offers; ``defer``: a
    tool search is declared, so a server declared ``defer_loading`` has its tools held
    back until a search loads them (:meth:`.catalog.Catalog.load_mcp`)."""
    deferred = defer and binding.deferred
    declared: Item = {"type": "mcp", "server_label": binding.label}
    if binding.description:
        declared["server_description"] = binding.description
    out = []
    for tool in tools:
        if not binding.offers(tool.name, tool.read_only):
            continue
        function: Item = {
            "type": "function",
            "name": model_name(tool.name, binding.label),
            "parameters": _parameters(tool.input_schema),
            "strict": False,  # a server's schema as it is (strict would change its meaning)
        }
        description = _description(tool, binding)
        if description:
            function["description"] = description
        out.append(
            Entry(
                kind="mcp",
                function=function,
                tool=declared,
                server_label=binding.label,
                name=tool.name,
                approval=binding.approval.required(tool.name, tool.read_only),
                read_only=tool.read_only,
                parallel_safe=tool.parallel_safe,
                deferred=deferred,
            )
        )
    return out


def refused(label: str, name: str, declared: bool) -> Entry:
    """The entry of a call of ``label``'s tool ``name`` that this request does not offer
    (``declared``: the server is, the tool is not), saying why it is not run."""
    if declared:
        reason = f"MCP server '{label}' does not offer the tool '{name}' in this request."
    else:
        reason = f"MCP server '{label}' is not declared in this request."
    return Entry(
        kind="mcp",
        function={"type": "function", "name": model_name(name, label)},
        tool={"type": "mcp", "server_label": label},
        server_label=label,
        name=name,
        refusal=reason,
    )


def held_back(entry: Entry) -> Entry:
    """The entry of a model's call of a deferred server's tool that no search loaded: never
    offered, so refused (asking no approval), the model told to search for it first."""
    reason = (
        f"The tool '{entry.name}' of MCP server '{entry.server_label}' is not loaded: "
        "load it with the tool search first."
    )
    return replace(entry, approval=False, refusal=reason)


def _description(tool: McpTool, binding: McpBinding) -> str:
    """The tool's own description, then what its server is for (when the request or the
    configuration says), so the model knows which server a tool belongs to."""
    text = tool.description or ""
    if binding.description:
        text += f"\n\nMCP server '{binding.label}': {binding.description}"
    return text.strip()


def call_item(entry: Entry, arguments: str = "", approval_request_id: str | None = None) -> Item:
    return {
        "id": new_id("mcp"),
        "type": MCP_CALL,
        "status": "in_progress",
        "server_label": entry.server_label,
        "name": entry.name,
        "arguments": arguments,
        "output": None,
        "error": None,
        "approval_request_id": approval_request_id,
    }


def ran_writes(output: list[Item]) -> bool:
    """Whether ``output`` holds a call of an MCP tool its listing there does not mark
    read-only (or that no listing there shows): a call that may have changed something,
    which the same request sent again would make again."""
    read_only = {
        (item.get("server_label"), tool.name)
        for item in output
        if item.get("type") == MCP_LIST_TOOLS
        for tool in tools_of(item)
        if tool.read_only
    }
    return any(
        item.get("type") == MCP_CALL
        and (item.get("server_label"), item.get("name")) not in read_only
        for item in output
    )


ERROR_TYPES: Final = {
    "protocol": "mcp_protocol_error",
    "http": "http_error",
    "execution": "mcp_tool_execution_error",
}
"""A failed ``mcp_call``'s ``error.type`` for each kind of :class:`ToolError`."""


def call_error(error: ToolError) -> Item:
    """A failed call's ``error``: ``{"type": "mcp_protocol_error" | "http_error", "code",
    "message"}``, or ``{"type": "mcp_tool_execution_error", "content"}`` (the tool's result
    content), as the Responses API has it."""
    kind = ERROR_TYPES[error.kind]
    if error.kind == "execution":
        return {"type": kind, "content": error.content}
    return {"type": kind, "code": error.code, "message": error.message}


def approval_item(entry: Entry) -> Item:
    return {
        "id": new_id("mcpr"),
        "type": MCP_APPROVAL_REQUEST,
        "server_label": entry.server_label,
        "name": entry.name,
        "arguments": "",
    }


def over_cap(text: str, cap: int) -> bool:
    """Whether an answer's ``text`` is over ``[tools] max_output_bytes`` (``cap``)."""
    return len(text) > cap // 4 and len(text.encode()) > cap  # inline: rarely long


def output_too_long(
    label: str, name: str, output: str, cap: int, *, error: bool = False
) -> ToolError:
    """Why a call whose output (or, ``error``, whose ``isError`` result's text) is over
    ``[tools] max_output_bytes`` failed (what the model and the client read)."""
    size = len(output.encode())
    answer = f"an error of {size} bytes" if error else f"{size} bytes of output"
    return ToolError.protocol(
        GATEWAY_REFUSED,
        f"MCP server '{label}' answered the call of '{name}' with {answer}; at most {cap} "
        "are taken. Ask for less (a narrower query, a smaller range).",
    )


def parse_arguments(arguments: str) -> dict[str, Any]:
    """A call's JSON arguments; a model that sent no valid object gets a failed output
    (``INVALID_PARAMS``, as a server answers bad arguments; the call is not sent)."""
    if not arguments.strip():
        return {}
    try:
        parsed = orjson.loads(arguments)
    except orjson.JSONDecodeError:
        message = "The arguments are not valid JSON."
        raise ToolFailure(ToolError.protocol(INVALID_PARAMS, message)) from None
    if not isinstance(parsed, dict):
        message = "The arguments must be a JSON object."
        raise ToolFailure(ToolError.protocol(INVALID_PARAMS, message))
    if nests_too_deep(parsed):  # the call could not be written to the server
        message = f"The arguments nest deeper than {MAX_NESTING} levels."
        raise ToolFailure(ToolError.protocol(INVALID_PARAMS, message))
    return parsed


def _parameters(schema: Any) -> Item:
    if isinstance(schema, dict) and schema.get("type") == "object":
        return dict(schema)
    return {"type": "object", "properties": {}}
