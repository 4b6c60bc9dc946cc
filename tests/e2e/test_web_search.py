"""Web search end to end: the real gateway with SearXNG (the fake speaks its API) in front
of the fake model, driven by the ``openai`` SDK, over both upstream API shapes."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from openai import OpenAI

from stateway.launch import start_gateway
from tests.support.fake_search import FakeSearch

SEARCH = '[[tool:web_search:{"query":"stateway gateway"}]]'


@pytest.fixture(scope="module", params=["chat", "responses"])
def sdk(
    request: pytest.FixtureRequest,
    fake_upstream: str,
    searching: FakeSearch,
    tmp_path_factory: pytest.TempPathFactory,
) -> Iterator[OpenAI]:
    database = f"sqlite:///{tmp_path_factory.mktemp('db') / 'stateway.db'}"
    args = ["--upstream", fake_upstream, "--upstream-api", request.param, "--database", database]
    with (
        start_gateway(args, env=searching.gateway_env("searxng")) as url,
        OpenAI(base_url=url + "/v1", api_key="sk-test", max_retries=0) as client,
    ):
        yield client


def test_a_search_runs_inside_the_response_and_the_answer_cites_its_sources(
    sdk: OpenAI, searching: FakeSearch
) -> None:
    response = sdk.responses.create(model="m", input=SEARCH, tools=[{"type": "web_search"}])
    assert response.status == "completed"
    call, message = response.output
    assert call.type == "web_search_call"
    assert call.status == "completed"
    assert call.action.type == "search"
    assert call.action.query == "stateway gateway"
    assert [q.query for q in searching.queries][-1] == "stateway gateway"
    assert message.type == "message"
    text = message.content[0]
    assert text.type == "output_text"
    cited = {a.url for a in text.annotations if a.type == "url_citation"}
    assert cited
    assert cited <= {s.url for s in call.action.sources or []}
    for annotation in text.annotations:
        assert text.text[annotation.start_index : annotation.end_index] == annotation.url
    assert response.tools[0].type == "web_search"
    assert response.tool_usage is not None
    assert response.tool_usage.web_search.num_requests == 1
    assert sdk.responses.retrieve(response.id).tool_usage == response.tool_usage


def test_a_search_leaves_out_the_domains_its_filters_block(sdk: OpenAI) -> None:
    """``filters.blocked_domains`` (the Messages search's, not hosted's) is honoured, not
    ignored: no hit on the blocked site or its subdomains reaches the model or the client."""
    tool: Any = {"type": "web_search", "filters": {"blocked_domains": ["example.com"]}}
    response = sdk.responses.create(model="m", input=SEARCH, tools=[tool])
    call = response.output[0]
    assert call.type == "web_search_call"
    assert call.action.type == "search"
    urls = [s.url for s in call.action.sources or []]
    assert urls
    assert not [url for url in urls if "//example.com/" in url or ".example.com/" in url]
    assert "example.com/" not in response.output_text.replace("notexample.com/", "")
    assert response.tools[0].filters is not None


def test_streaming_gives_one_continuous_stream_and_the_same_response(sdk: OpenAI) -> None:
    with sdk.responses.stream(model="m", input=SEARCH, tools=[{"type": "web_search"}]) as stream:
        events = list(stream)
        final = stream.get_final_response()
    assert [e.sequence_number for e in events] == list(range(len(events)))
    kinds = [e.type for e in events]
    assert kinds.count("response.created") == 1
    assert (
        kinds.index("response.web_search_call.in_progress")
        < kinds.index("response.web_search_call.searching")
        < kinds.index("response.web_search_call.completed")
        < kinds.index("response.output_text.delta")
    )
    added = [e.output_index for e in events if e.type == "response.output_item.added"]
    assert added == [0, 1]
    stored = sdk.responses.retrieve(final.id)
    assert [i.type for i in stored.output] == ["web_search_call", "message"]
    assert stored.output[1].content[0].annotations == final.output[1].content[0].annotations
    assert final.tool_usage is not None
    assert final.tool_usage.web_search.num_requests == 1
    created = next(e for e in events if e.type == "response.created")
    assert created.response.tool_usage is None  # as first announced: nothing run yet


def test_a_stream_announces_each_citation_before_its_text_is_done(sdk: OpenAI) -> None:
    """As hosted, and as the Open Responses events have it: one
    ``response.output_text.annotation.added`` per annotation of the part, numbered in
    order, before ``response.output_text.done`` (stream readers such as the AI SDK take
    their sources from these events)."""
    with sdk.responses.stream(model="m", input=SEARCH, tools=[{"type": "web_search"}]) as stream:
        events = list(stream)
        final = stream.get_final_response()
    message = final.output[1]
    annotations = message.content[0].annotations
    assert annotations
    added = [e for e in events if e.type == "response.output_text.annotation.added"]
    assert [e.annotation_index for e in added] == list(range(len(annotations)))
    assert [e.annotation.model_dump() for e in added] == [a.model_dump() for a in annotations]
    assert {(e.item_id, e.output_index, e.content_index) for e in added} == {(message.id, 1, 0)}
    kinds = [e.type for e in events]
    last_delta = len(kinds) - 1 - kinds[::-1].index("response.output_text.delta")
    done = kinds.index("response.output_text.done")
    assert all(last_delta < events.index(e) < done for e in added)


def test_a_failing_provider_becomes_a_failed_call_and_the_model_still_answers(
    sdk: OpenAI, searching: FakeSearch
) -> None:
    searching.status = 503
    try:
        response = sdk.responses.create(model="m", input=SEARCH, tools=[{"type": "web_search"}])
    finally:
        searching.reset()
    assert response.status == "completed"
    call, message = response.output
    assert call.status == "failed"
    assert "Error:" in message.content[0].text
    assert response.tool_usage is not None
    assert response.tool_usage.web_search.num_requests == 0  # a failed search is not billed


def test_a_later_turn_replays_the_search_the_model_saw(sdk: OpenAI) -> None:
    first = sdk.responses.create(model="m", input=SEARCH, tools=[{"type": "web_search"}])
    second = sdk.responses.create(
        model="m", input="[[echo]]", previous_response_id=first.id, tools=[{"type": "web_search"}]
    )
    transcript = second.output_text
    assert "web_search" in transcript
    assert "Result 1 about stateway gateway." in transcript


def test_a_hosted_searchs_page_actions_sent_back_reach_the_model_as_what_they_did(
    sdk: OpenAI,
) -> None:
    """Hosted output sent back as input (``store: false``, or Codex's history): a page
    opened and a pattern looked for reach either upstream as that page and pattern."""
    hosted = [
        {"type": "message", "role": "user", "content": "what does it cost?"},
        {
            "type": "web_search_call",
            "id": "ws_open",
            "status": "completed",
            "action": {"type": "open_page", "url": "https://a.test/pricing"},
        },
        {
            "type": "web_search_call",
            "id": "ws_find",
            "status": "completed",
            "action": {"type": "find_in_page", "url": "https://a.test/pricing", "pattern": "Pro"},
        },
        {"type": "message", "role": "user", "content": "[[echo]]"},
    ]
    response = sdk.responses.create(
        model="m", input=hosted, tools=[{"type": "web_search"}], store=False
    )
    transcript = response.output_text
    assert "The page https://a.test/pricing was opened." in transcript
    assert "'Pro' was looked for in the page https://a.test/pricing." in transcript
    assert '"query":""' not in transcript.replace(" ", "")


def test_a_chat_client_asks_for_a_search_with_web_search_options(
    sdk: OpenAI, searching: FakeSearch
) -> None:
    """Over a Chat upstream too, where the request would otherwise be forwarded as it is:
    the search runs in a hidden round and its citations are the message's annotations."""
    completion = sdk.chat.completions.create(
        model="m", messages=[{"role": "user", "content": SEARCH}], web_search_options={}
    )
    message = completion.choices[0].message
    assert searching.queries[-1].query == "stateway gateway"
    assert message.content is not None
    assert message.content.startswith("Tool said: [1] stateway gateway (1)")
    assert message.tool_calls is None
    assert completion.choices[0].finish_reason == "stop"
    assert message.annotations
    for annotation in message.annotations:
        cited = annotation.url_citation
        assert message.content[cited.start_index : cited.end_index] == cited.url

    chunks = sdk.chat.completions.create(
        model="m",
        messages=[{"role": "user", "content": SEARCH}],
        web_search_options={},
        stream=True,
    )
    deltas = [c.choices[0].delta for c in chunks if c.choices]
    assert "".join(d.content or "" for d in deltas) == message.content
    cited = [(d.model_extra or {}).get("annotations") for d in deltas]  # not in the SDK's delta
    assert [a for a in cited if a] == [[a.model_dump() for a in message.annotations]]


def test_the_answer_after_a_mixed_round_cites_its_search(sdk: OpenAI) -> None:
    """A search beside a client call: the search runs, the client's call goes back, and
    the answer that the client's output brings cites the search's sources."""
    local = {"type": "function", "name": "open_url", "parameters": {"type": "object"}}
    tools: Any = [{"type": "web_search"}, local]
    first = sdk.responses.create(model="m", input=SEARCH + '[[tool:open_url:{"n":1}]]', tools=tools)
    search, opened = first.output
    assert search.type == "web_search_call"
    assert opened.type == "function_call"
    url = (search.action.sources or [])[0].url  # type: ignore[union-attr]
    second = sdk.responses.create(
        model="m",
        previous_response_id=first.id,
        input=[{"type": "function_call_output", "call_id": opened.call_id, "output": url}],
        tools=tools,
    )
    text = second.output[0].content[0]  # type: ignore[union-attr]
    assert url in text.text
    assert [a.url for a in text.annotations] == [url]  # type: ignore[union-attr]


MINE: Any = {
    "type": "function",
    "name": "web_search",
    "description": "The client's own search.",
    "parameters": {"type": "object", "properties": {"terms": {"type": "string"}}},
}
"""A client's function called ``web_search``, which hosted takes beside its web search
(a function and a hosted tool never share a name)."""
BOTH = '[[tool:gateway_web_search:{"query":"stateway gateway"}]][[tool:web_search:{"terms":"x"}]]'
"""The model calling the gateway's search (offered apart, as ``gateway_web_search``) and
the client's function."""


def test_a_client_function_named_web_search_is_offered_beside_the_gateways_search(
    sdk: OpenAI, searching: FakeSearch
) -> None:
    first = sdk.responses.create(model="m", input=BOTH, tools=[{"type": "web_search"}, MINE])
    search, mine = first.output
    assert search.type == "web_search_call"
    assert search.status == "completed"
    assert searching.queries[-1].query == "stateway gateway"
    assert mine.type == "function_call"
    assert (mine.name, mine.arguments) == ("web_search", '{"terms":"x"}')
    assert [t.type for t in first.tools] == ["web_search", "function"]
    second = sdk.responses.create(
        model="m",
        previous_response_id=first.id,
        input=[
            {"type": "function_call_output", "call_id": mine.call_id, "output": "mine"},
            {"role": "user", "content": "[[echo]]"},
        ],
        tools=[{"type": "web_search"}, MINE],
    )
    transcript = second.output_text  # each call under the name it was offered by
    assert 'assistant->gateway_web_search({"query":"stateway gateway"})' in transcript
    assert 'assistant->web_search({"terms":"x"})' in transcript


def test_a_chat_client_function_named_web_search_is_its_own_beside_the_search(
    sdk: OpenAI, searching: FakeSearch
) -> None:
    sent = len(searching.queries)
    completion = sdk.chat.completions.create(
        model="m",
        messages=[{"role": "user", "content": BOTH}],
        tools=[{"type": "function", "function": {k: v for k, v in MINE.items() if k != "type"}}],
        web_search_options={},
    )
    assert len(searching.queries) == sent + 1
    [call] = completion.choices[0].message.tool_calls or []
    assert call.type == "function"
    assert (call.function.name, call.function.arguments) == ("web_search", '{"terms":"x"}')
    assert completion.choices[0].finish_reason == "tool_calls"
