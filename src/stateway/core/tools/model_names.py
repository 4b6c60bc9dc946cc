"""The function names a model sees for declared tools.

A client's own function keeps its name. A namespace's member, or an MCP server's tool, is
flattened to ``<namespace>__<member>`` (``<server_label>__<tool>``); a flattened name that
strict model APIs would refuse (OpenAI's function names are ``[A-Za-z0-9_-]``, at most 64
characters; an MCP tool may be called ``files.read``) is respelled with a hash of it
(:func:`safe_name`), the same in every turn, so two names never meet in one spelling.

A gateway tool (the web search, the tool search, an MCP server's tool) is offered under its
usual name (``web_search``, ``tool_search``, ``<server_label>__<tool>``) unless another
tool of the request has it, a client's own mostly: the hosted API keeps its tools apart
from the functions (a function called ``web_search`` or ``docs__add`` is the client's,
beside the hosted search or the server ``docs``'s tool ``add``), and a Chat or Messages
client may declare one beside a backend's ``gateway_tools``. Then the gateway's is offered
apart, as ``gateway_<usual>`` (numbered while that is taken too: :func:`apart_name`), and
its earlier calls reach the model under that name (:class:`GatewayNames`): the client's
tool is never shadowed, nor the gateway's silently left out.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Container, Mapping
from dataclasses import field
from typing import Final

from stateway.core.immutable import immutable

SEPARATOR: Final = "__"
"""Between a namespace (or an MCP server's label) and its member in a flattened name."""
FUNCTION_NAME_LENGTH: Final = 64
"""The longest function name OpenAI's APIs take (``[A-Za-z0-9_-]``)."""
_NAME_CHARS: Final = re.compile(r"[A-Za-z0-9_-]+")
_NOT_IN_NAMES: Final = re.compile(r"[^A-Za-z0-9_-]")
_HASH_LENGTH: Final = 8
WEB_SEARCH_FUNCTION: Final = "web_search"
"""The usual function name of the gateway's web search."""
TOOL_SEARCH_FUNCTION: Final = "tool_search"
"""The usual function name of a ``tool_search`` tool (either execution)."""
_APART: Final = "gateway_"
"""What a gateway tool's name is offered after when another tool has its usual name."""


def safe_name(name: str, limit: int) -> str:
    """``name`` if it is 1 to ``limit`` characters of ``[A-Za-z0-9_-]``, else a respelling
    unique to it: its other characters as ``_``, cut to leave room for a hash of the whole
    name, so that two names never meet in one spelling."""
    if 0 < len(name) <= limit and _NAME_CHARS.fullmatch(name):
        return name
    digest = hashlib.sha256(name.encode()).hexdigest()[:_HASH_LENGTH]
    return f"{_NOT_IN_NAMES.sub('_', name)[: limit - _HASH_LENGTH - 1]}_{digest}"


def model_name(name: str, namespace: str | None = None) -> str:
    """The function name the model sees for a tool (or a namespace's member): a client's
    function as declared; a flattened name, respelled if a strict model API would refuse
    it (its characters outside ``[A-Za-z0-9_-]`` as ``_``, cut to leave room for a hash
    of the whole, so two names never meet in one spelling)."""
    if not namespace:
        return name
    return safe_name(f"{namespace}{SEPARATOR}{name}", FUNCTION_NAME_LENGTH)


def apart_name(usual: str, taken: Container[str]) -> str:
    """The function name a gateway tool of the ``usual`` name is offered by beside the
    model-visible names ``taken``: ``usual``, else ``gateway_<usual>`` (numbered from
    ``_2`` while that is taken too; respelled, as :func:`safe_name` does, past the length
    strict model APIs take), so no other tool is replaced or shadowed by it."""
    if usual not in taken:
        return usual
    name, number = safe_name(_APART + usual, FUNCTION_NAME_LENGTH), 1
    while name in taken:
        number += 1
        name = safe_name(f"{_APART}{usual}_{number}", FUNCTION_NAME_LENGTH)
    return name


@immutable
class GatewayNames:
    """The names a request's gateway tools are offered by, for the calls of earlier turns
    (:func:`.history.model_items`): each offered tool's by its usual name, and any other's
    (a tool no longer offered) as :func:`apart_name` would offer it beside the names
    ``taken``. Built by :meth:`.catalog.Catalog.names`."""

    offered: Mapping[str, str] = field(default_factory=dict)
    """Usual name -> offered name, for every gateway tool offered."""
    taken: frozenset[str] = frozenset()
    """Every model-visible name of the request's tools."""

    def of(self, usual: str) -> str:
        """The name the gateway tool of the ``usual`` name is (or would be) offered by."""
        found = self.offered.get(usual)
        return found if found is not None else apart_name(usual, self.taken)
