"""The function names a model sees for declared tools.

A client's own function keeps its name. A namespace's member, or an MCP server's tool, is
flattened to ``<namespace>__<member>`` (``<server_label>__<tool>``); a flattened name that
strict model APIs would refuse (OpenAI's function names are ``[A-Za-z0-9_-]``, at most 64
characters; an MCP tool may be called ``files.read``) is respelled with a hash of it
(:func:`safe_name`), the same in every turn, so two names never meet in one spelling.

The gateway's web search is the function ``web_search``, unless a client's own tool is
called that (hosted Responses takes a function of that name beside its web search, which is
no function there; a Chat or Messages client may declare one beside a backend's
``gateway_tools``): then it is offered apart, as ``gateway_web_search``
(:func:`search_name`), and an earlier search reaches the model under that name too.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Container
from typing import Final

SEPARATOR: Final = "__"
"""Between a namespace (or an MCP server's label) and its member in a flattened name."""
FUNCTION_NAME_LENGTH: Final = 64
"""The longest function name OpenAI's APIs take (``[A-Za-z0-9_-]``)."""
_NAME_CHARS: Final = re.compile(r"[A-Za-z0-9_-]+")
_NOT_IN_NAMES: Final = re.compile(r"[^A-Za-z0-9_-]")
_HASH_LENGTH: Final = 8
WEB_SEARCH_FUNCTION: Final = "web_search"
"""The function name of the gateway's web search, when no client's tool takes it."""
_SEARCH_APART: Final = "gateway_web_search"
"""The gateway's web search beside a client's tool called ``web_search``."""


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


def search_name(taken: Container[str]) -> str:
    """The function name the gateway's web search is offered (and its earlier searches
    shown) under, beside the model-visible names ``taken`` by a request's other tools:
    ``web_search``, else ``gateway_web_search`` (numbered from ``_2`` while that is taken
    too), so a client's tool is never replaced or shadowed by it."""
    if WEB_SEARCH_FUNCTION not in taken:
        return WEB_SEARCH_FUNCTION
    name, number = _SEARCH_APART, 1
    while name in taken:
        number += 1
        name = f"{_SEARCH_APART}_{number}"
    return name
