"""The query syntaxes of a gateway tool search beside its own words search
(:func:`.tool_search.search`): those of Anthropic's tool search server tool, which the
Messages frontend declares as a ``tool_search`` tool with a ``syntax``.

- ``regex`` (``tool_search_tool_regex``): the ``query`` is a Python regular expression
  (``re.search``'s syntax, matched by the ``regex`` package, which reads it too; at most
  :data:`MAX_PATTERN` characters, as Anthropic bounds it),
  matched against each deferred tool's text (:func:`searched_text`); tools whose name
  matches come first, then those whose other text does, each in declaration order.
- ``bm25`` (``tool_search_tool_bm25``): the ``query`` is natural language, and the tools
  are ranked by Okapi BM25 over the same text (ties in declaration order).

Either loads at most :data:`MAX_FOUND` tools, as Anthropic's returns "3-5" per search. A
query that is no valid pattern, or too long, fails the search
(:class:`~.ports.ToolFailure`, its ``cause`` Anthropic's code, ``invalid_tool_input``):
its output says why, and the search loads nothing; so does a pattern that takes too long
to match (:mod:`.pattern_search`: ``execution_time_exceeded``).
"""

from __future__ import annotations

import math
import re
from collections import Counter
from typing import Any, Final, Literal

from stateway.core.items import Item
from stateway.core.tools.catalog import Entry
from stateway.core.tools.ports import ToolError, ToolFailure

Syntax = Literal["regex", "bm25"]
SYNTAXES: Final[frozenset[str]] = frozenset({"regex", "bm25"})
MAX_PATTERN: Final = 200
"""The longest regular expression a regex search takes, as Anthropic's."""
MAX_FOUND: Final = 5
"""At most this many tools are loaded by one search of these syntaxes."""
INVALID_TOOL_INPUT: Final = "invalid_tool_input"
"""The cause of a search failed for its query (Anthropic's code)."""
_K1: Final = 1.2
_B: Final = 0.75
_WORD = re.compile(r"[a-z0-9]+")
_CAMEL = re.compile(r"(?<=[a-z0-9])(?=[A-Z])")


def syntax_of(tool: Item) -> Syntax | None:
    """The declared ``tool_search`` tool's query syntax, None for the gateway's own words."""
    value = tool.get("syntax")
    return value if value in ("regex", "bm25") else None


async def search(
    syntax: Syntax, query: str, deferred: list[Entry], namespaces: dict[str, Item]
) -> list[Entry]:
    """The deferred tools ``query`` finds, best first, at most :data:`MAX_FOUND`."""
    if syntax == "regex":
        return await _regex(query, deferred, namespaces)
    return _bm25(query, deferred, namespaces)


def searched_text(candidate: Entry, namespaces: dict[str, Item]) -> tuple[str, str]:
    """What a search reads of a tool: its name (a namespace member's with its namespace's),
    and the rest: its description, its namespace's, and its parameters' names and
    descriptions (Anthropic's search reads "tool names, descriptions, argument names, and
    argument descriptions")."""
    tool = candidate.tool
    if candidate.kind == "mcp":  # its function's: a server's tool is declared by no one
        tool = {**candidate.function, "name": candidate.name}
    name = str(tool.get("name") or "")
    if candidate.namespace is not None:
        name = f"{candidate.namespace}__{name}"
    elif candidate.kind == "mcp":
        name = f"{candidate.server_label}__{name}"
    rest = [str(tool.get("description") or "")]
    group = namespaces.get(candidate.namespace or "") or {}
    rest.append(str(group.get("description") or ""))
    properties = (tool.get("parameters") or {}).get("properties")
    if isinstance(properties, dict):
        for key, schema in properties.items():
            rest.append(str(key))
            if isinstance(schema, dict) and isinstance(schema.get("description"), str):
                rest.append(schema["description"])
    return name, "\n".join(part for part in rest if part)


async def _regex(query: str, deferred: list[Entry], namespaces: dict[str, Item]) -> list[Entry]:
    """Matched off the event loop, with a time limit (:mod:`.pattern_search`: a pattern
    may take exponential time), once it is known to compile.

    The ``regex`` package is loaded by the first such search, not at start-up: its
    parser's many objects would stay in memory, and in every full garbage collection,
    of a process that never runs one."""
    import regex

    from stateway.core.tools import pattern_search

    if len(query) > MAX_PATTERN:
        raise _invalid(
            f"The pattern is {len(query)} characters long; at most {MAX_PATTERN} are allowed."
        )
    try:
        pattern = pattern_search.compile_pattern(query)
    except (regex.error, RecursionError, OverflowError) as exc:
        raise _invalid(f"The pattern is not a valid regular expression: {exc}.") from None
    if not deferred:
        return []
    texts = [searched_text(candidate, namespaces) for candidate in deferred]
    found = await pattern_search.matching(pattern, texts, MAX_FOUND)
    return [deferred[index] for index in found][:MAX_FOUND]


def _invalid(message: str) -> ToolFailure:
    return ToolFailure(ToolError(message, cause=INVALID_TOOL_INPUT))


def _bm25(query: str, deferred: list[Entry], namespaces: dict[str, Item]) -> list[Entry]:
    documents = [_terms(*searched_text(candidate, namespaces)) for candidate in deferred]
    if not documents:
        return []
    average = sum(len(document) for document in documents) / len(documents) or 1.0
    frequency: Counter[str] = Counter(term for document in documents for term in set(document))
    counts = [Counter(document) for document in documents]
    asked = frozenset(_terms(query))  # read once: the model's query may be long
    scored = []
    for order, (document, count) in enumerate(zip(documents, counts, strict=True)):
        score = 0.0
        for term in asked.intersection(count):  # a tool's few terms, not all the query's
            found = count[term]
            idf = math.log(1 + (len(documents) - frequency[term] + 0.5) / (frequency[term] + 0.5))
            norm = _K1 * (1 - _B + _B * len(document) / average)
            score += idf * found * (_K1 + 1) / (found + norm)
        if score > 0:
            scored.append((-score, order))
    return [deferred[order] for _, order in sorted(scored)[:MAX_FOUND]]


def _terms(*texts: Any) -> list[str]:
    out: list[str] = []
    for text in texts:
        out += _WORD.findall(_CAMEL.sub(" ", str(text)).lower())
    return out
