"""Gateway-owned tools of the Responses wire: ``mcp`` and ``web_search`` (in any of its
types: ``web_search_preview`` and the dated ones). Their shapes are checked here; whether
the gateway can run them (a configured server or provider) in the core
(:mod:`stateway.core.tools.toolset`).
"""

from __future__ import annotations

from typing import Any

from stateway.core.errors import InvalidRequest
from stateway.core.items import Item
from stateway.core.tools.mcp_binding import without_secrets
from stateway.core.tools.model_names import SEPARATOR
from stateway.core.tools.web_search import domain_name
from stateway.protocols.responses.tools.fields import (
    copy_choice,
    copy_typed,
    invalid_type,
    strings,
)

_CONTEXT_SIZES = ("low", "medium", "high")
_CONTENT_TYPES = frozenset({"text", "image"})


def decode_web_search(tool: dict[str, Any], path: str) -> Item:
    out: Item = {"type": tool["type"]}
    copy_typed(tool, out, "external_web_access", path, bool, "a boolean")
    filters = tool.get("filters")
    if filters is not None:
        if not isinstance(filters, dict):
            raise invalid_type(
                "'filters.allowed_domains' must be a list of strings.",
                f"{path}.filters.allowed_domains",
            )
        out["filters"] = {"allowed_domains": _domains(filters, "allowed_domains", path)}
        if filters.get("blocked_domains") is not None:  # the Messages search's, kept
            out["filters"]["blocked_domains"] = _domains(filters, "blocked_domains", path)
    copy_choice(tool, out, "search_context_size", path, _CONTEXT_SIZES)
    copy_typed(tool, out, "user_location", path, dict, "an object")
    content_types = tool.get("search_content_types")
    if content_types is not None:  # the preview tool's; kept for the echo
        if not strings(content_types, optional=False) or not set(content_types) <= _CONTENT_TYPES:
            raise InvalidRequest(
                "Invalid value for 'search_content_types': expected a list of 'text' and 'image'.",
                param=f"{path}.search_content_types",
                code="invalid_value",
            )
        out["search_content_types"] = content_types
    return out


def _domains(filters: dict[str, Any], key: str, path: str) -> list[str] | None:
    """A filter's list of domains, each naming one (``filters.blocked_domains``, not a
    field of hosted's filters, is taken as the Messages API's search takes it: never
    ignored, so a search told to leave a site out does not bring its pages)."""
    domains = filters.get(key)
    if not strings(domains, optional=True):
        raise invalid_type(f"'filters.{key}' must be a list of strings.", f"{path}.filters.{key}")
    for position, domain in enumerate(domains or ()):
        if not domain_name(domain):
            raise InvalidRequest(
                f"Invalid value: {domain!r} names no domain (for example 'example.com').",
                param=f"{path}.filters.{key}[{position}]",
                code="invalid_value",
            )
    return domains


_APPROVALS = frozenset({"always", "never"})
_HOSTED_ONLY = {"connector_id": "MCP connectors", "tunnel_id": "Secure MCP Tunnels"}
"""Fields naming a server only hosted OpenAI can reach, instead of ``server_url``: refused
by name, never ignored (a declaration under a configured label would otherwise reach
that server instead)."""


def decode_mcp(tool: dict[str, Any], path: str) -> Item:
    label = tool.get("server_label")
    if not isinstance(label, str) or not label or SEPARATOR in label:
        raise InvalidRequest(
            "An 'mcp' tool needs a non-empty 'server_label' without '__' (which joins a "
            "label and a tool name in the names the model sees).",
            param=f"{path}.server_label",
            code="missing_required_parameter" if label is None else "invalid_value",
        )
    for key, what in _HOSTED_ONLY.items():
        if tool.get(key) is not None:
            raise InvalidRequest(
                f"{what} ('{key}') are not supported; give 'server_url' or the label of a "
                "configured server.",
                param=f"{path}.{key}",
                code="unsupported_parameter",
            )
    out: Item = {"type": "mcp", "server_label": label}
    for key in ("server_url", "server_description", "authorization"):
        value = tool.get(key)
        if value is not None:
            if not isinstance(value, str) or not value:
                raise invalid_type(f"'{key}' must be a non-empty string.", f"{path}.{key}")
            out[key] = value
    headers = tool.get("headers")
    if headers is not None:
        if not isinstance(headers, dict) or not all(
            isinstance(k, str) and isinstance(v, str) for k, v in headers.items()
        ):
            raise invalid_type("'headers' must be an object of strings.", f"{path}.headers")
        out["headers"] = headers
    allowed = tool.get("allowed_tools")
    if allowed is not None:
        if not (strings(allowed, optional=False) or _tool_filter(allowed)):
            raise invalid_type(
                "'allowed_tools' must be a list of tool names or a filter object "
                "({'tool_names': [...], 'read_only': bool}).",
                f"{path}.allowed_tools",
            )
        out["allowed_tools"] = allowed
    approval = tool.get("require_approval")
    if approval is not None:
        out["require_approval"] = _approval(approval, f"{path}.require_approval")
    copy_typed(tool, out, "defer_loading", path, bool, "a boolean")
    return out


def without_credentials(tools: list[Any]) -> list[Any]:
    """An input item's ``tools`` (a search's output, an ``additional_tools`` item: kept as
    sent) but for each ``mcp`` tool's credentials, which are used for the run and never
    stored or echoed (:func:`~stateway.core.tools.mcp_binding.without_secrets`)."""
    return [
        without_secrets(tool) if isinstance(tool, dict) and tool.get("type") == "mcp" else tool
        for tool in tools
    ]


def _tool_filter(value: Any) -> bool:
    """Whether ``value`` is an MCP tool filter: ``{"tool_names": [...], "read_only": bool}``,
    both optional (``allowed_tools``, and each rule of ``require_approval``)."""
    return (
        isinstance(value, dict)
        and strings(value.get("tool_names"), optional=True)
        and isinstance(value.get("read_only"), bool | None)
    )


def _approval(value: Any, path: str) -> Any:
    if isinstance(value, str) and value in _APPROVALS:
        return value
    if isinstance(value, dict) and set(value) <= _APPROVALS:
        for key, rule in value.items():
            if not _tool_filter(rule):
                raise invalid_type(
                    f"'{key}' must be a tool filter object ({{'tool_names': [...], "
                    "'read_only': bool}).",
                    f"{path}.{key}",
                )
        return value
    raise InvalidRequest(
        f"Invalid value for '{path}': expected 'always', 'never' or an object with "
        "'always'/'never' tool name filters.",
        param=path,
        code="invalid_value",
    )
