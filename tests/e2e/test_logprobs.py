"""Output text log probabilities (``include: ["message.output_text.logprobs"]``) through
the official ``openai`` SDK, over Chat Completions and Responses upstreams.

The fake model gives each word of its reply as one token whose logprob is ``-0.01`` per
character, its ``top_logprobs`` alternatives (itself first) falling by 1 each; it gives
none unless asked, so a test that sees tokens also proves they were asked for upstream.
"""

from __future__ import annotations

from typing import Any

import orjson
from openai import OpenAI
from openai.types.responses import Response, ResponseOutputMessage, ResponseOutputText

from tests.e2e.test_upstream_mapping import clear, upstream_requests

MODEL = "fake-model"
INCLUDE = "message.output_text.logprobs"


def _text_part(response: Response) -> ResponseOutputText:
    [message] = [item for item in response.output if item.type == "message"]
    assert isinstance(message, ResponseOutputMessage)
    [part] = message.content
    assert isinstance(part, ResponseOutputText)
    return part


def _check_tokens(tokens: list[Any], text: str, top: int) -> None:
    """The tokens spell ``text``; each has its UTF-8 bytes, the fake's logprob and ``top``
    alternatives led by itself."""
    assert tokens, "no tokens"
    assert "".join(token.token for token in tokens) == text
    for token in tokens:
        assert token.bytes == list(token.token.encode())
        assert token.logprob == -0.01 * len(token.token)
        assert len(token.top_logprobs) == top
        if top:
            assert token.top_logprobs[0].token == token.token
            assert token.top_logprobs[0].logprob == token.logprob
            assert token.top_logprobs[-1].logprob == token.logprob - (top - 1)


def test_included_logprobs_come_with_the_text_and_are_stored(client: OpenAI) -> None:
    response = client.responses.create(
        model=MODEL, input="tell me about naïve cafés", include=[INCLUDE], top_logprobs=2
    )
    part = _text_part(response)
    assert part.logprobs is not None
    _check_tokens(part.logprobs, part.text, 2)
    assert response.top_logprobs == 2

    stored = client.responses.retrieve(response.id, include=[INCLUDE])
    assert _text_part(stored).logprobs == part.logprobs


def test_the_tokens_of_an_earlier_answer_are_not_sent_to_the_model_again(
    client: OpenAI, fake_upstream: str
) -> None:
    """They were the model's output: the next turn's upstream request carries the answer's
    text only (a Responses upstream would otherwise get every token and alternative)."""
    first = client.responses.create(
        model=MODEL, input="[[words:30]] one", include=[INCLUDE], top_logprobs=20
    )
    assert _text_part(first).logprobs
    clear(fake_upstream)
    client.responses.create(model=MODEL, input="next", previous_response_id=first.id)
    [sent] = upstream_requests(fake_upstream)
    context = orjson.dumps(sent["body"].get("input") or sent["body"]["messages"]).decode()
    assert _text_part(first).text in context
    assert "top_logprobs" not in context


def test_logprobs_without_alternatives(client: OpenAI) -> None:
    response = client.responses.create(model=MODEL, input="plain", include=[INCLUDE])
    part = _text_part(response)
    assert part.logprobs is not None
    _check_tokens(part.logprobs, part.text, 0)


def test_top_logprobs_alone_gives_no_tokens_as_on_the_hosted_api(client: OpenAI) -> None:
    response = client.responses.create(model=MODEL, input="plain", top_logprobs=3)
    assert _text_part(response).logprobs == []
    assert response.top_logprobs == 3


def test_each_streamed_delta_carries_its_own_tokens(client: OpenAI) -> None:
    with client.responses.stream(
        model=MODEL, input="stream these words", include=[INCLUDE], top_logprobs=1
    ) as stream:
        events = list(stream)
        final = stream.get_final_response()
    deltas = [event for event in events if event.type == "response.output_text.delta"]
    assert len(deltas) > 1
    for delta in deltas:
        assert "".join(token.token for token in delta.logprobs) == delta.delta
    [done] = [event for event in events if event.type == "response.output_text.done"]
    assert [t.token for t in done.logprobs] == [t.token for d in deltas for t in d.logprobs]
    [added] = [event for event in events if event.type == "response.content_part.added"]
    assert added.part.logprobs == []  # type: ignore[union-attr]

    part = _text_part(final)
    assert part.logprobs is not None
    _check_tokens(part.logprobs, part.text, 1)
    assert part.text == done.text


def test_a_stream_without_the_include_has_empty_token_lists(client: OpenAI) -> None:
    with client.responses.stream(model=MODEL, input="stream these words") as stream:
        events = list(stream)
    deltas = [event for event in events if event.type == "response.output_text.delta"]
    assert deltas
    assert all(delta.logprobs == [] for delta in deltas)


# Chat Completions: relayed as they came over a Chat upstream (the fast path), carried
# through the translation over a Responses upstream.


def test_chat_logprobs_come_with_the_completion(client: OpenAI) -> None:
    completion = client.chat.completions.create(
        model=MODEL,
        messages=[{"role": "user", "content": "tell me about naïve cafés"}],
        logprobs=True,
        top_logprobs=2,
    )
    choice = completion.choices[0]
    assert choice.logprobs is not None
    assert choice.logprobs.content is not None
    assert choice.message.content is not None
    _check_tokens(choice.logprobs.content, choice.message.content, 2)


def test_chat_stream_chunks_carry_their_tokens(client: OpenAI) -> None:
    stream = client.chat.completions.create(
        model=MODEL,
        messages=[{"role": "user", "content": "stream these words"}],
        logprobs=True,
        top_logprobs=1,
        stream=True,
    )
    chunks = [chunk for chunk in stream if chunk.choices and chunk.choices[0].delta.content]
    assert len(chunks) > 1
    tokens = []
    for chunk in chunks:
        [choice] = chunk.choices
        assert choice.logprobs is not None
        assert choice.logprobs.content is not None
        assert "".join(t.token for t in choice.logprobs.content) == choice.delta.content
        tokens += choice.logprobs.content
    _check_tokens(tokens, "".join(chunk.choices[0].delta.content or "" for chunk in chunks), 1)


def test_chat_without_logprobs_has_none(client: OpenAI) -> None:
    completion = client.chat.completions.create(
        model=MODEL, messages=[{"role": "user", "content": "plain"}]
    )
    assert completion.choices[0].logprobs is None
