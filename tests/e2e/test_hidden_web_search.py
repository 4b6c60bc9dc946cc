"""Web search as a backend's ``gateway_tools``, end to end: Chat Completions and Messages
clients, which declare no search, get the gateway's searches in hidden rounds (SearXNG,
faked) behind the real gateway, over each upstream API shape, driven by the ``openai`` and
``anthropic`` SDKs."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import pytest
from anthropic import Anthropic
from openai import OpenAI

from stateway.launch import start_gateway
from tests.support.fake_search import FakeSearch

SEARCH = '[[tool:web_search:{"query":"stateway gateway"}]]'
MESSAGES: Any = [{"role": "user", "content": SEARCH}]
BOTH = '[[tool:gateway_web_search:{"query":"stateway gateway"}]][[tool:web_search:{"terms":"x"}]]'
"""The model calling the gateway's search (offered as ``gateway_web_search`` beside a
client's tool called ``web_search``) and the client's tool."""
SCHEMA: Any = {"type": "object", "properties": {"terms": {"type": "string"}}}


@dataclass
class Setup:
    sdk: OpenAI
    claude: Anthropic
    searching: FakeSearch


@pytest.fixture(scope="module", params=["chat", "responses", "anthropic"])
def setup(
    request: pytest.FixtureRequest,
    fake_upstream: str,
    searching: FakeSearch,
    tmp_path_factory: pytest.TempPathFactory,
) -> Iterator[Setup]:
    directory = tmp_path_factory.mktemp("hidden-search")
    config = directory / "stateway.toml"
    config.write_text(
        f'[[backends]]\nname = "local"\nurl = "{fake_upstream}"\napi = "{request.param}"\n'
        'gateway_tools = [{type = "web_search"}]\n'
    )
    args = ["--config", str(config), "--database", f"sqlite:///{directory / 'gw.db'}"]
    with (
        start_gateway(args, env=searching.gateway_env("searxng")) as url,
        OpenAI(base_url=url + "/v1", api_key="k", max_retries=0) as sdk,
        Anthropic(base_url=url, api_key="k", max_retries=0) as claude,
    ):
        yield Setup(sdk, claude, searching)


def _annotations(setup: Setup) -> tuple[str, list[dict[str, Any]]]:
    """The answer's text and its annotations, not streamed."""
    completion = setup.sdk.chat.completions.create(model="m", messages=MESSAGES)
    message = completion.choices[0].message
    assert message.content is not None
    assert message.annotations
    return message.content, [a.model_dump() for a in message.annotations]


def test_a_hidden_search_answer_carries_its_citations(setup: Setup) -> None:
    content, annotations = _annotations(setup)
    assert setup.searching.queries[-1].query == "stateway gateway"
    for annotation in annotations:
        cited = annotation["url_citation"]
        assert annotation["type"] == "url_citation"
        assert content[cited["start_index"] : cited["end_index"]] == cited["url"]
        assert cited["title"]


def test_a_streamed_hidden_search_answer_carries_them_once_after_its_text(setup: Setup) -> None:
    """As hosted search models stream them: one chunk whose ``delta.annotations`` holds
    every citation, after the text (the SDK's delta has no field for it: read as an
    extra), so that the SDK's accumulated message has them as the completion does."""
    content, annotations = _annotations(setup)
    chunks = list(setup.sdk.chat.completions.create(model="m", messages=MESSAGES, stream=True))
    deltas = [c.choices[0].delta for c in chunks if c.choices]
    carrying = [i for i, d in enumerate(deltas) if (d.model_extra or {}).get("annotations")]
    assert len(carrying) == 1
    [at] = carrying
    assert (deltas[at].model_extra or {})["annotations"] == annotations
    assert not any(d.content for d in deltas[at:])
    assert "".join(d.content or "" for d in deltas) == content
    with setup.sdk.chat.completions.stream(model="m", messages=MESSAGES) as stream:
        final = stream.get_final_completion()
    accumulated = final.choices[0].message
    assert accumulated.content == content
    assert [a.model_dump() for a in accumulated.annotations or []] == annotations


def test_a_stream_without_citations_has_no_annotations(setup: Setup) -> None:
    chunks = list(
        setup.sdk.chat.completions.create(
            model="m", messages=[{"role": "user", "content": "hi"}], stream=True
        )
    )
    assert not any(
        "annotations" in (c.choices[0].delta.model_extra or {}) for c in chunks if c.choices
    )


def test_a_chat_clients_tool_named_web_search_stays_its_own(setup: Setup) -> None:
    sent = len(setup.searching.queries)
    completion = setup.sdk.chat.completions.create(
        model="m",
        messages=[{"role": "user", "content": BOTH}],
        tools=[{"type": "function", "function": {"name": "web_search", "parameters": SCHEMA}}],
    )
    assert len(setup.searching.queries) == sent + 1
    [call] = completion.choices[0].message.tool_calls or []
    assert call.type == "function"
    assert (call.function.name, call.function.arguments) == ("web_search", '{"terms":"x"}')


def test_a_messages_clients_tool_named_web_search_stays_its_own(setup: Setup) -> None:
    sent = len(setup.searching.queries)
    message = setup.claude.messages.create(
        model="m",
        max_tokens=1024,
        messages=[{"role": "user", "content": BOTH}],
        tools=[{"name": "web_search", "input_schema": SCHEMA}],
    )
    assert len(setup.searching.queries) == sent + 1
    [use] = message.content
    assert use.type == "tool_use"
    assert (use.name, use.input) == ("web_search", {"terms": "x"})
    assert message.stop_reason == "tool_use"


def test_the_model_sees_its_search_under_the_name_it_called(setup: Setup) -> None:
    """The round after a search shows the model its call as the function it called, not
    the client's tool of the search's usual name."""
    prompt = '[[tool:gateway_web_search:{"query":"stateway gateway"}]][[echo]]'
    message = setup.claude.messages.create(
        model="m",
        max_tokens=1024,
        messages=[{"role": "user", "content": prompt}],
        tools=[{"name": "web_search", "input_schema": SCHEMA}],
    )
    [text] = message.content
    assert text.type == "text"
    assert 'assistant->gateway_web_search({"query":"stateway gateway"})' in text.text
    assert "Result 1 about stateway gateway." in text.text
