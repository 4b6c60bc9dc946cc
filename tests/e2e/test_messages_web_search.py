"""Anthropic's web search server tool on the Messages frontend, end to end: the real gateway
runs the searches with its provider (SearXNG, faked) for a model that has no search of its
own, and answers with the blocks Anthropic's own searches produce (what Claude Code's
WebSearch tool reads), driven by the ``anthropic`` SDK."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import anthropic
import pytest
from anthropic import Anthropic
from anthropic.types import Message

from stateway.launch import start_gateway
from tests.support.fake_search import FakeSearch

SEARCH = '[[tool:web_search:{"query":"stateway gateway"}]] find it'
WEB_SEARCH: dict[str, Any] = {
    "type": "web_search_20250305",
    "name": "web_search",
    "max_uses": 3,
    "blocked_domains": ["notexample.com"],
}
FORCED: dict[str, Any] = {"type": "tool", "name": "web_search"}


@pytest.fixture(scope="module", params=["chat", "anthropic"])
def claude(
    request: pytest.FixtureRequest,
    fake_upstream: str,
    searching: FakeSearch,
    tmp_path_factory: pytest.TempPathFactory,
) -> Iterator[Anthropic]:
    database = f"sqlite:///{tmp_path_factory.mktemp('db') / 'stateway.db'}"
    args = ["--upstream", fake_upstream, "--upstream-api", request.param, "--database", database]
    with (
        start_gateway(args, env=searching.gateway_env("searxng")) as url,
        Anthropic(base_url=url, api_key="client-key", max_retries=0) as sdk,
    ):
        yield sdk


def _check_search_blocks(content: list[Any]) -> None:
    assert [block.type for block in content] == [
        "server_tool_use",
        "web_search_tool_result",
        "text",
    ]
    use, result, text = content
    assert use.id.startswith("srvtoolu_")
    assert use.name == "web_search"
    assert use.input == {"query": "stateway gateway"}
    assert result.tool_use_id == use.id
    urls = [hit.url for hit in result.content]
    assert urls
    assert all(hit.type == "web_search_result" for hit in result.content)
    assert not [url for url in urls if "notexample.com" in url]  # blocked_domains
    assert result.content[0].title == "stateway gateway (1)"
    assert result.content[0].encrypted_content == "Result 1 about stateway gateway."
    assert text.text
    cited = text.citations or []
    assert cited  # the answer names the hits it used, cited as Anthropic cites them
    for citation in cited:
        assert citation.type == "web_search_result_location"
        assert citation.url in urls
        assert citation.url in text.text
        hit = next(hit for hit in result.content if hit.url == citation.url)
        assert citation.cited_text == hit.encrypted_content
        assert citation.encrypted_index


def _forced_search(claude: Anthropic, prompt: str) -> Message:
    """``prompt`` asked with the web search tool forced."""
    return claude.messages.create(
        model="m",
        max_tokens=1024,
        messages=[{"role": "user", "content": prompt}],
        tools=[WEB_SEARCH],
        tool_choice=FORCED,
    )


def test_a_search_is_run_by_the_gateway_and_shown_as_anthropic_shows_it(
    claude: Anthropic, searching: FakeSearch
) -> None:
    message = _forced_search(claude, SEARCH)
    _check_search_blocks(message.content)
    assert searching.queries[-1].query == "stateway gateway"
    assert message.stop_reason == "end_turn"
    assert message.usage.server_tool_use is not None
    assert message.usage.server_tool_use.web_search_requests == 1


def test_a_streamed_search_gives_the_same_blocks_and_the_query_as_a_json_delta(
    claude: Anthropic,
) -> None:
    events: list[Any] = []
    with claude.messages.stream(
        model="m",
        max_tokens=1024,
        messages=[{"role": "user", "content": SEARCH}],
        tools=[WEB_SEARCH],  # type: ignore[list-item]
        tool_choice=FORCED,  # type: ignore[arg-type]
    ) as stream:
        events.extend(stream)
        message = stream.get_final_message()
    _check_search_blocks(message.content)
    starts = [e.content_block.type for e in events if e.type == "content_block_start"]
    assert starts == ["server_tool_use", "web_search_tool_result", "text"]
    deltas = [e.delta for e in events if e.type == "content_block_delta" and e.index == 0]
    assert [d.partial_json for d in deltas] == ['{"query":"stateway gateway"}']
    assert [e.index for e in events if e.type == "content_block_stop"] == [0, 1, 2]
    assert message.usage.server_tool_use is not None
    assert message.usage.server_tool_use.web_search_requests == 1


def test_a_later_turn_sends_the_search_back_and_the_model_sees_its_results(
    claude: Anthropic,
) -> None:
    first = _forced_search(claude, SEARCH)
    second = claude.messages.create(
        model="m",
        max_tokens=1024,
        messages=[
            {"role": "user", "content": SEARCH},
            {"role": "assistant", "content": [b.model_dump() for b in first.content]},
            {"role": "user", "content": "[[echo]]"},
        ],
        tools=[WEB_SEARCH],
    )
    transcript = "".join(b.text for b in second.content if b.type == "text")
    assert "Result 1 about stateway gateway." in transcript


@pytest.mark.parametrize("streamed", [False, True])
def test_the_answer_a_tool_result_brings_cites_the_search_made_beside_its_call(
    claude: Anthropic, streamed: bool
) -> None:
    """A search and a client's ``tool_use`` in one turn: the client's ``tool_result``
    continues that turn, and the answer naming a hit cites it (as the Responses API's
    answer does, and as Anthropic cites the searches in its context)."""
    opener: dict[str, Any] = {"name": "open_url", "input_schema": {"type": "object"}}
    tools: Any = [WEB_SEARCH, opener]
    prompt = SEARCH + '[[tool:open_url:{"n":1}]]'
    first = claude.messages.create(
        model="m", max_tokens=1024, messages=[{"role": "user", "content": prompt}], tools=tools
    )
    use, result, opened = first.content
    assert (use.type, result.type, opened.type) == (
        "server_tool_use",
        "web_search_tool_result",
        "tool_use",
    )
    hit = result.content[0]
    history: Any = [
        {"role": "user", "content": prompt},
        {"role": "assistant", "content": [b.model_dump() for b in first.content]},
        {
            "role": "user",
            "content": [{"type": "tool_result", "tool_use_id": opened.id, "content": hit.url}],
        },
    ]
    if streamed:
        with claude.messages.stream(
            model="m", max_tokens=1024, messages=history, tools=tools
        ) as stream:
            second = stream.get_final_message()
    else:
        second = claude.messages.create(model="m", max_tokens=1024, messages=history, tools=tools)
    [text] = second.content
    assert text.type == "text"
    assert hit.url in text.text
    [citation] = text.citations or []
    assert citation.type == "web_search_result_location"
    assert (citation.url, citation.title) == (hit.url, hit.title)
    assert citation.cited_text == hit.encrypted_content
    assert citation.encrypted_index
    assert second.usage.server_tool_use is None  # no search ran in this request


def _failed_search(claude: Anthropic, prompt: str) -> tuple[list[Any], str]:
    """A forced search that fails: its two blocks, and the code its result shows."""
    use, result, *_ = _forced_search(claude, prompt).content
    assert (use.type, result.type) == ("server_tool_use", "web_search_tool_result")
    assert result.content.type == "web_search_tool_result_error"
    return [use, result], result.content.error_code


@pytest.mark.parametrize(
    ("status", "code"), [(429, "too_many_requests"), (503, "unavailable"), (400, "unavailable")]
)
def test_a_provider_failure_names_its_cause(
    claude: Anthropic, searching: FakeSearch, status: int, code: str
) -> None:
    """A search the provider rate limits is ``too_many_requests``; any other failure of
    the provider's is ``unavailable``."""
    searching.status = status
    try:
        _, shown = _failed_search(claude, SEARCH)
    finally:
        searching.reset()
    assert shown == code


def test_a_search_without_a_query_fails_as_invalid_tool_input(
    claude: Anthropic, searching: FakeSearch
) -> None:
    sent = len(searching.queries)
    _, code = _failed_search(claude, '[[tool:web_search:{"query":"  "}]] find it')
    assert code == "invalid_tool_input"
    assert len(searching.queries) == sent  # never sent


def test_a_failed_search_sent_back_keeps_its_code_and_the_model_sees_it(
    claude: Anthropic, searching: FakeSearch
) -> None:
    searching.status = 429
    try:
        blocks, _ = _failed_search(claude, SEARCH)
    finally:
        searching.reset()
    history: list[Any] = [
        {"role": "user", "content": SEARCH},
        {"role": "assistant", "content": [b.model_dump() for b in blocks]},
        {"role": "user", "content": "[[echo]]"},
    ]
    with claude.messages.stream(
        model="m", max_tokens=1024, messages=history, tools=[WEB_SEARCH]
    ) as stream:
        second = stream.get_final_message()
    transcript = "".join(b.text for b in second.content if b.type == "text")
    assert "Error: too_many_requests" in transcript


def test_another_anthropic_tool_type_is_a_400_naming_it(claude: Anthropic) -> None:
    with pytest.raises(anthropic.BadRequestError) as caught:
        claude.messages.create(
            model="m",
            max_tokens=100,
            messages=[{"role": "user", "content": "hi"}],
            tools=[{"type": "computer_20250124", "name": "computer"}],  # type: ignore[list-item]
        )
    assert "tools.0.type" in caught.value.message
    assert "computer_20250124" in caught.value.message


def test_a_client_tool_named_as_the_server_tool_is_a_400_as_hosted(claude: Anthropic) -> None:
    """Anthropic's tool names are unique across every kind of tool."""
    mine: Any = {"name": "web_search", "input_schema": {"type": "object"}}
    with pytest.raises(anthropic.BadRequestError) as caught:
        claude.messages.create(
            model="m",
            max_tokens=100,
            messages=[{"role": "user", "content": SEARCH}],
            tools=[WEB_SEARCH, mine],
        )
    error: Any = caught.value.body
    assert error["error"]["type"] == "invalid_request_error"
    assert error["error"]["message"].startswith("tools.1.name: tool names must be unique")
