"""The query syntaxes of Anthropic's tool search variants: a regular expression, or words
ranked by BM25, over each deferred tool's name, description and arguments."""

from __future__ import annotations

from typing import Any

import pytest

from stateway.core.tools import search_syntax, tool_search
from stateway.core.tools.catalog import Catalog
from stateway.core.tools.ports import ToolFailure


def fn(name: str, description: str = "", **properties: str) -> dict[str, Any]:
    schema = {key: {"type": "string", "description": text} for key, text in properties.items()}
    return {
        "type": "function",
        "name": name,
        "description": description,
        "parameters": {"type": "object", "properties": schema},
        "defer_loading": True,
    }


def found(syntax: search_syntax.Syntax, query: str, tools: list[dict[str, Any]]) -> list[str]:
    catalog = Catalog(tools, defer=True)
    hits = search_syntax.search(syntax, query, catalog.deferred(), catalog.namespaces)
    return [str(hit.tool["name"]) for hit in hits]


TOOLS = [
    fn("send_message", "Post to a Slack channel.", channel="The channel's name"),
    fn("get_weather", "Current weather.", city="A city"),
    fn("forecast", "Weather for the days ahead.", city="A city"),
    fn("list_orders", "A customer's orders.", customer="The customer id"),
]


def test_a_pattern_finds_names_first_then_the_rest_in_declaration_order() -> None:
    assert found("regex", "(?i)weather", TOOLS) == ["get_weather", "forecast"]
    assert found("regex", "forecast|weather", TOOLS) == ["get_weather", "forecast"]


def test_a_pattern_reads_argument_names_and_descriptions() -> None:
    assert found("regex", "customer id", TOOLS) == ["list_orders"]
    assert found("regex", "^channel$", TOOLS) == []  # the text is searched, not each word
    assert found("regex", "channel", TOOLS) == ["send_message"]


def test_a_search_loads_at_most_five_tools() -> None:
    many = [fn(f"tool_{n}") for n in range(8)]
    assert found("regex", "tool", many) == [f"tool_{n}" for n in range(5)]
    assert len(found("bm25", "tool", many)) == 5


@pytest.mark.parametrize(
    ("pattern", "problem"),
    [
        ("(weather", "The pattern is not a valid regular expression: missing ), "),
        ("a" * 201, "The pattern is 201 characters long; at most 200 are allowed."),
    ],
)
def test_a_bad_pattern_fails_the_search(pattern: str, problem: str) -> None:
    with pytest.raises(ToolFailure) as failed:
        found("regex", pattern, TOOLS)
    assert failed.value.error.message.startswith(problem)


def test_a_pattern_of_200_characters_is_taken() -> None:
    assert found("regex", "x" * 200, TOOLS) == []


def test_words_are_ranked_by_bm25() -> None:
    assert found("bm25", "weather for a city", TOOLS)[:2] == ["forecast", "get_weather"]
    assert found("bm25", "slack channel", TOOLS) == ["send_message"]
    assert found("bm25", "nothing matches", TOOLS) == []
    assert found("bm25", "anything", []) == []


@pytest.mark.parametrize("syntax", ["regex", "bm25"])
def test_the_function_of_a_syntax_takes_a_query_only(syntax: str) -> None:
    catalog = Catalog(TOOLS, defer=True)
    declared = {"type": "tool_search", "execution": "server", "syntax": syntax}
    entry = tool_search.entry(declared, catalog.deferred(), catalog.namespaces)
    parameters = entry.function["parameters"]
    assert list(parameters["properties"]) == ["query"]
    assert parameters["required"] == ["query"]
    assert "- get_weather: Current weather." in entry.function["description"]


def test_the_declared_syntax_decides_the_search() -> None:
    catalog = Catalog(TOOLS, defer=True)
    arguments = {"query": "w.ather"}
    regex = {"type": "tool_search", "syntax": "regex"}
    words = {"type": "tool_search"}
    loaded = tool_search.search_as_declared(regex, arguments, catalog.deferred(), {})
    assert [tool["name"] for tool in loaded] == ["get_weather"]  # case-sensitive
    assert tool_search.search_as_declared(words, arguments, catalog.deferred(), {}) == []


def test_a_search_output_takes_its_calls_id() -> None:
    call = tool_search.call_item(None, "server")
    output = tool_search.output_item([], None, call)
    assert output["id"] == "tso_" + call["id"].removeprefix("tsc_")
