"""The query syntaxes of Anthropic's tool search variants: a regular expression, or words
ranked by BM25, over each deferred tool's name, description and arguments."""

from __future__ import annotations

import asyncio
import time
from typing import Any

import pytest

from stateway.core.tools import pattern_search, search_syntax, tool_search
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
    searching = search_syntax.search(syntax, query, catalog.deferred(), catalog.namespaces)
    hits = asyncio.run(searching)
    return [str(hit.tool["name"]) for hit in hits]


SLOW = pattern_search.compile_pattern("(a|aa)+$")
"""Exponential time against ``a`` * n + ``!``."""

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
        ("(weather", "The pattern is not a valid regular expression: missing ) at position 8"),
        ("a" * 201, "The pattern is 201 characters long; at most 200 are allowed."),
    ],
)
def test_a_bad_pattern_fails_the_search(pattern: str, problem: str) -> None:
    with pytest.raises(ToolFailure) as failed:
        found("regex", pattern, TOOLS)
    assert failed.value.error.message.startswith(problem)


def test_a_bad_pattern_fails_for_its_input() -> None:
    with pytest.raises(ToolFailure) as failed:
        found("regex", "(weather", TOOLS)
    assert failed.value.error.cause == "invalid_tool_input"
    assert tool_search.error_of(failed.value.error) == (
        "invalid_tool_input: " + failed.value.error.message
    )


def test_a_pattern_too_slow_to_match_is_given_up_and_fails_the_search() -> None:
    """``re`` would hold the GIL for minutes, and could not be stopped: every request the
    process serves would stall."""
    texts = [("x", "a" * 60 + "!")]
    started = time.monotonic()
    with pytest.raises(ToolFailure) as failed:
        asyncio.run(pattern_search.matching(SLOW, texts, 5, time_limit=0.5))
    # Matched out, the pattern takes hours; the bound leaves room for a loaded machine.
    assert time.monotonic() - started < 30
    assert failed.value.error.cause == "execution_time_exceeded"
    assert failed.value.error.message == (
        "The pattern took longer than 0.5 s to match; write a simpler one."
    )


def test_the_time_limit_is_the_whole_search_s() -> None:
    """Each tool's text alone is matched within the limit, all of them not."""
    texts = [(f"t{n}", "a" * 26 + "!") for n in range(40)]
    with pytest.raises(ToolFailure) as failed:
        asyncio.run(pattern_search.matching(SLOW, texts, 5, time_limit=0.3))
    assert failed.value.error.cause == "execution_time_exceeded"


def test_a_search_waiting_for_a_thread_spends_its_time_limit_waiting() -> None:
    """Slow patterns holding both threads fail a quick search queued behind them, rather
    than keeping it (and the response) waiting for as long as they come."""
    slow = pattern_search.compile_pattern("(a|aa)+$")
    quick = pattern_search.compile_pattern("weather")

    async def searches() -> list[object]:
        return await asyncio.gather(
            *(
                pattern_search.matching(slow, [("x", "a" * 60 + "!")], 5, time_limit=1.0)
                for _ in range(pattern_search.WORKERS)
            ),
            pattern_search.matching(quick, [("weather", "")], 5, time_limit=0.3),
            return_exceptions=True,
        )

    *slowed, queued = asyncio.run(searches())
    assert all(isinstance(failed, ToolFailure) for failed in slowed)
    assert isinstance(queued, ToolFailure)
    assert queued.error.cause == "execution_time_exceeded"


def test_the_event_loop_runs_on_while_a_slow_pattern_is_matched() -> None:
    async def ticking() -> int:
        ticks = 0

        async def tick() -> None:
            nonlocal ticks
            while True:
                await asyncio.sleep(0.01)
                ticks += 1

        ticker = asyncio.create_task(tick())
        with pytest.raises(ToolFailure):
            await pattern_search.matching(SLOW, [("x", "a" * 60 + "!")], 5, time_limit=0.5)
        ticker.cancel()
        return ticks

    assert asyncio.run(ticking()) >= 10


@pytest.mark.parametrize(
    "pattern",
    [
        "a{1000000}",
        "a{1000000,}",
        "a{1000000}?",
        "(?:a{1000}){1000}",
        "(?:(?:a{100}){100}){100}",
        "(?x)a{1 000 000}",
        "(?x)a{1#}\n000000}",
        "{1 1}{1000000}",  # not verbose: '{1 1}' is text, the last '}' repeated
    ],
)
def test_a_pattern_whose_repeats_would_compile_to_a_huge_program_fails_the_search(
    pattern: str,
) -> None:
    """The regex package writes a repeat's minimum count out in full as it compiles:
    ``a{4294967294}`` (13 characters) takes gigabytes and seconds, on the event loop."""
    with pytest.raises(ToolFailure) as failed:
        found("regex", pattern, TOOLS)
    assert failed.value.error.cause == "invalid_tool_input"
    assert "repeat" in failed.value.error.message


@pytest.mark.parametrize(
    "pattern",
    [r"\d{4}-\d{2}-\d{2}", "[0-9a-f]{64}", "za{0,1000000}q", "(?:z|q){2,}x{5}", r"z\{1000000"],
)
def test_a_pattern_with_modest_or_unbounded_repeats_is_taken(pattern: str) -> None:
    assert found("regex", pattern, TOOLS) == []


def test_a_pattern_is_not_kept_in_the_regex_packages_cache() -> None:
    """500 distinct patterns of a megabyte each would stay in memory."""
    from regex import _main  # the cache is the package's own; nothing public lists it

    pattern = "(?i)kept_nowhere_[a-z]{3}"
    found("regex", pattern, TOOLS)
    assert not any(pattern in key for key in _main._cache)


def test_a_pattern_of_200_characters_is_taken() -> None:
    assert found("regex", "x" * 200, TOOLS) == []


def test_words_are_ranked_by_bm25() -> None:
    assert found("bm25", "weather for a city", TOOLS)[:2] == ["forecast", "get_weather"]
    assert found("bm25", "slack channel", TOOLS) == ["send_message"]
    assert found("bm25", "nothing matches", TOOLS) == []
    assert found("bm25", "anything", []) == []


def test_a_long_words_query_over_many_tools_takes_no_time() -> None:
    """BM25 runs on the event loop: the model's query (of up to its max_tokens) read once,
    not once per tool (100 KB over 1,000 tools took 9 s, every request stalled)."""
    many = [fn(f"tool_{n}", f"Does thing {n} with widgets.", x="An x") for n in range(1000)]
    query = " ".join(f"word{n}" for n in range(12_000)) + " widgets"
    started = time.monotonic()
    assert len(found("bm25", query, many)) == 5
    assert time.monotonic() - started < 2


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
    loaded = asyncio.run(tool_search.search_as_declared(regex, arguments, catalog.deferred(), {}))
    assert [tool["name"] for tool in loaded] == ["get_weather"]  # case-sensitive
    words_search = tool_search.search_as_declared(words, arguments, catalog.deferred(), {})
    assert asyncio.run(words_search) == []


def test_a_search_output_takes_its_calls_id() -> None:
    call = tool_search.call_item(None, "server")
    output = tool_search.output_item([], None, call)
    assert output["id"] == "tso_" + call["id"].removeprefix("tsc_")
