"""The output text's tokens (``message.output_text.logprobs``) from a real llama-server.

llama-server refuses ``logprobs`` with tools in a streamed Chat Completions request (a 400,
``logprobs is not supported with tools + stream``), and gives them with tools when not
streamed. The gateway streams its upstream call whenever it streams its answer (and for
every background response), so a round asking for both is asked whole instead, once the
server has refused it streamed: the client gets its stream and its tokens."""

from __future__ import annotations

import pytest
from openai import OpenAI
from openai.types.responses import Response

from tests.llama_server.server import MODEL
from tests.llama_server.test_tools import WEATHER
from tests.llama_server.tiny_model import REPLY

pytestmark = pytest.mark.llama_server

LOGPROBS = "message.output_text.logprobs"


def _spelled(response: Response) -> str:
    message = next(item for item in response.output if item.type == "message")
    return "".join(token.token for part in message.content for token in part.logprobs or ())  # type: ignore[union-attr]


def test_a_streamed_response_with_tools_has_its_text_s_tokens(client: OpenAI) -> None:
    for _ in range(2):  # refused streamed once, then asked whole from the start
        events = list(
            client.responses.create(
                model=MODEL, input="Hi", tools=[WEATHER], include=[LOGPROBS], stream=True
            )
        )
        done = events[-1]
        assert done.type == "response.completed", done
        assert done.response.output_text == REPLY
        assert _spelled(done.response) == REPLY
        deltas = [e for e in events if e.type == "response.output_text.delta"]
        assert "".join(t.token for e in deltas for t in e.logprobs) == REPLY


def test_a_background_response_with_tools_has_its_text_s_tokens(client: OpenAI) -> None:
    """A client that does not stream: the gateway streams a background run's upstream."""
    started = client.responses.create(
        model=MODEL, input="Hi", tools=[WEATHER], include=[LOGPROBS], background=True
    )
    events = list(client.responses.retrieve(started.id, stream=True, include=[LOGPROBS]))
    done = events[-1]
    assert done.type == "response.completed", done
    assert _spelled(done.response) == REPLY


@pytest.mark.parametrize("top", [None, 2])
def test_each_token_lists_the_alternatives_asked_for(client: OpenAI, top: int | None) -> None:
    """llama-server lists 20 alternatives of each token when a request names no
    ``top_logprobs`` (and none at all when it names 0); the hosted API lists as many as
    asked, none by default."""
    response = client.responses.create(
        model=MODEL,
        input="Hi",
        include=[LOGPROBS],
        **({} if top is None else {"top_logprobs": top}),
    )
    message = next(item for item in response.output if item.type == "message")
    tokens = [token for part in message.content for token in part.logprobs or ()]  # type: ignore[union-attr]
    assert tokens
    assert {len(token.top_logprobs) for token in tokens} == {top or 0}
