"""Messages' ``max_tokens`` beyond what the model's window leaves beside the prompt, over
a vLLM-like server (the fake keeping ``--max-model-len``, words counted as tokens) that
refuses such a request: the gateway asks again for the room there is, as Anthropic's models
take it since Claude Sonnet 4.5, and an answer that fills the window stops with
``model_context_window_exceeded``. Claude Code asks for 32,000 output tokens whatever the
window: without this, every request near a small window was refused once first. A
request's hidden rounds (a gateway tool's) are counted first and asked for their own room:
refused once, not once a round. Responses
and Chat keep the refusal, as hosted OpenAI refuses it. A llama-server generates whatever
``max_tokens`` asks until the window is full, a ``length`` finish like any other: an answer
whose prompt and output reach the window it advertised stops so too. A Responses client,
whose API has no reason for a full window, gets that answer refused as vLLM's refusal is
(a failed response, ``context_length_exceeded``, nothing of the cut answer announced done);
a Chat client its ``length`` finish."""

from __future__ import annotations

import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Unpack

import anthropic
import openai
import pytest

from stateway.fake_upstream.launch import FakeOptions, start_fake_upstream
from stateway.launch import start_gateway
from tests.e2e.routing import fake_requests
from tests.support.mcp_server import serve_mcp

WINDOW = 60
"""The fake's window, in words."""
ASKED = 32000
"""Claude Code's ``max_tokens``."""


@contextmanager
def served(directory: Path, **fake: Unpack[FakeOptions]) -> Iterator[str]:
    """The gateway over a fake upstream started with ``fake``, on the Chat wire."""
    database = f"sqlite:///{directory / 'stateway.db'}"
    with (
        start_fake_upstream(**fake) as upstream,
        start_gateway(
            ["--upstream", upstream, "--upstream-api", "chat", "--database", database]
        ) as url,
    ):
        yield url


@pytest.fixture(scope="module")
def gateway(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    with served(tmp_path_factory.mktemp("room"), max_model_len=WINDOW) as url:
        yield url


@pytest.fixture(scope="module")
def llama_gateway(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """The gateway over a fake keeping one slot's window as llama-server keeps it, learned
    from its listing (``meta.n_ctx``)."""
    with served(tmp_path_factory.mktemp("slot"), ctx_size=WINDOW) as url:
        with anthropic.Anthropic(base_url=url, api_key="sk-test", max_retries=0) as client:
            for _ in range(200):  # learned beside serving (bounded)
                if client.models.retrieve("fake-model").max_input_tokens == WINDOW:
                    break
                time.sleep(0.05)
        yield url


@pytest.fixture(scope="module")
def renderer_gateway(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """The gateway over a fake refusing as vLLM's renderer refuses (0.18 on): its count of
    the prompt stops one token past the room ``max_tokens`` leaves."""
    directory = tmp_path_factory.mktemp("renderer")
    with served(directory, max_model_len=WINDOW, vllm_renderer=True) as url:
        yield url


def responses_refusal(url: str) -> openai.BadRequestError:
    """The refusal of a Responses request asking Claude Code's output tokens."""
    client = openai.OpenAI(base_url=f"{url}/v1", api_key="sk-test", max_retries=0)
    with client, pytest.raises(openai.BadRequestError) as refused:
        client.responses.create(
            model="fake-model", input="[[words:500]] hello", max_output_tokens=ASKED
        )
    return refused.value


def long_story(
    url: str, stream: bool, max_tokens: int = ASKED, first: str = ""
) -> anthropic.types.Message:
    """The answer to a prompt asking for 500 words (after ``first``), streamed or not."""
    client = anthropic.Anthropic(base_url=url, api_key="sk-test", max_retries=0, timeout=30)
    body: Any = {
        "model": "fake-model",
        "max_tokens": max_tokens,
        "messages": [{"role": "user", "content": f"{first}[[words:500]] write a long story"}],
    }
    with client:
        if not stream:
            answer: anthropic.types.Message = client.messages.create(**body)
            return answer
        with client.messages.stream(**body) as events:
            return events.get_final_message()


@pytest.fixture
def claude(gateway: str) -> Iterator[anthropic.Anthropic]:
    # a timeout of its own: the SDK refuses 32,000 output tokens unstreamed without one
    client = anthropic.Anthropic(base_url=gateway, api_key="sk-test", max_retries=0, timeout=30)
    with client:
        yield client


def test_an_answer_filling_the_window_stops_at_it(claude: anthropic.Anthropic) -> None:
    message = claude.messages.create(
        model="fake-model",
        max_tokens=ASKED,
        messages=[{"role": "user", "content": "[[words:500]] write a long story"}],
    )

    assert message.stop_reason == "model_context_window_exceeded"
    assert message.usage.output_tokens == WINDOW - message.usage.input_tokens
    assert len(message.content[0].text.split()) == message.usage.output_tokens  # type: ignore[union-attr]


def test_a_streamed_answer_filling_the_window_stops_at_it(claude: anthropic.Anthropic) -> None:
    with claude.messages.stream(
        model="fake-model",
        max_tokens=ASKED,
        messages=[{"role": "user", "content": "[[words:500]] write a long story"}],
    ) as stream:
        message = stream.get_final_message()

    assert message.stop_reason == "model_context_window_exceeded"
    assert message.usage.output_tokens == WINDOW - message.usage.input_tokens


def test_an_answer_within_the_room_ends_as_usual(claude: anthropic.Anthropic) -> None:
    message = claude.messages.create(
        model="fake-model",
        max_tokens=ASKED,
        messages=[{"role": "user", "content": "[[words:3]] hello"}],
    )

    assert (message.stop_reason, message.usage.output_tokens) == ("end_turn", 3)


def test_max_tokens_the_client_lowered_itself_still_bounds_the_answer(
    claude: anthropic.Anthropic,
) -> None:
    message = claude.messages.create(
        model="fake-model",
        max_tokens=5,
        messages=[{"role": "user", "content": "[[words:500]] write a long story"}],
    )

    assert (message.stop_reason, message.usage.output_tokens) == ("max_tokens", 5)


def test_a_prompt_over_the_window_is_still_refused(claude: anthropic.Anthropic) -> None:
    words = " ".join(f"w{n}" for n in range(WINDOW + 10))
    with pytest.raises(anthropic.BadRequestError) as refused:
        claude.messages.create(
            model="fake-model", max_tokens=ASKED, messages=[{"role": "user", "content": words}]
        )

    body: Any = refused.value.body
    assert (
        body["error"]["message"] == f"prompt is too long: {WINDOW + 10} tokens > {WINDOW} maximum"
    )


def test_responses_keeps_the_refusal(gateway: str) -> None:
    assert responses_refusal(gateway).code == "context_length_exceeded"


@pytest.mark.parametrize("stream", [False, True])
def test_an_answer_filling_a_llama_server_s_window_stops_at_it(
    llama_gateway: str, stream: bool
) -> None:
    message = long_story(llama_gateway, stream)
    short = long_story(llama_gateway, stream, max_tokens=5)

    assert message.stop_reason == "model_context_window_exceeded"
    assert message.usage.input_tokens + message.usage.output_tokens == WINDOW
    assert (short.stop_reason, short.usage.output_tokens) == ("max_tokens", 5)


@pytest.mark.parametrize("stream", [False, True])
def test_a_responses_answer_filling_a_llama_server_s_window_is_refused(
    llama_gateway: str, stream: bool
) -> None:
    client = openai.OpenAI(base_url=f"{llama_gateway}/v1", api_key="sk-test", max_retries=0)
    body: Any = {"model": "fake-model", "input": "[[words:500]] write a long story"}
    with client:
        if stream:
            with client.responses.stream(**body) as stream_events:
                events = list(stream_events)
            kinds = [event.type for event in events]
            [response] = [e.response for e in events if e.type == "response.failed"]
        else:
            response = client.responses.create(**body)
        short = client.responses.create(**body, max_output_tokens=16)

    assert response.error is not None  # a code outside the SDK's list, as hosted sends it
    assert (response.status, str(response.error.code)) == ("failed", "context_length_exceeded")
    assert response.usage is not None
    assert response.usage.input_tokens + response.usage.output_tokens == WINDOW
    if stream:
        assert "response.output_text.delta" in kinds
        assert "response.output_item.done" not in kinds
    assert short.incomplete_details is not None
    assert (short.status, short.incomplete_details.reason) == ("incomplete", "max_output_tokens")


def test_a_chat_answer_filling_a_llama_server_s_window_stops_at_length(
    llama_gateway: str,
) -> None:
    client = openai.OpenAI(base_url=f"{llama_gateway}/v1", api_key="sk-test", max_retries=0)
    with client:
        completion = client.chat.completions.create(
            model="fake-model",
            messages=[{"role": "user", "content": "[[words:500]] write a long story"}],
        )

    assert completion.choices[0].finish_reason == "length"
    assert completion.usage is not None
    assert completion.usage.total_tokens == WINDOW


def test_a_prompt_vllm_counted_only_to_the_room_asked_is_counted_by_its_tokenizer(
    renderer_gateway: str,
) -> None:
    """vLLM's renderer refuses with ``your prompt contains at least N input tokens``, N
    one past the room asked for whatever the prompt: the room it seems to leave would be
    refused alike. The gateway asks the server's ``/tokenize`` for the prompt's count."""
    client = anthropic.Anthropic(base_url=renderer_gateway, api_key="sk-test", max_retries=0)
    story = "[[words:500]] write a long story about " + "a dragon " * 10
    with client:
        message = client.messages.create(
            model="fake-model",
            max_tokens=WINDOW - 10,  # within the window: room for ten prompt tokens, not more
            messages=[{"role": "user", "content": story}],
        )

    assert message.stop_reason == "model_context_window_exceeded"
    assert message.usage.input_tokens > 10
    assert message.usage.input_tokens + message.usage.output_tokens == WINDOW


@pytest.mark.parametrize("stream", [False, True])
def test_max_tokens_over_the_whole_window_is_asked_again_for_the_room(
    renderer_gateway: str, stream: bool
) -> None:
    """vLLM (0.16 on) refuses output tokens beyond the whole window before it counts the
    prompt (``max_tokens=32000 cannot be greater than max_model_len=60``), as it refuses
    Claude Code's 32,000 on a model of a smaller window: the gateway counts the prompt with
    the server's ``/tokenize`` and asks for the room there is."""
    message = long_story(renderer_gateway, stream)

    assert message.stop_reason == "model_context_window_exceeded"
    assert message.usage.input_tokens + message.usage.output_tokens == WINDOW


def test_responses_passes_max_tokens_over_the_whole_window_on(renderer_gateway: str) -> None:
    refused = responses_refusal(renderer_gateway)

    assert refused.code == "upstream_rejected"
    assert f"max_tokens={ASKED} cannot be greater than max_model_len={WINDOW}" in str(
        refused.message
    )


@pytest.fixture(scope="module", params=[False, True], ids=["vllm", "renderer"])
def tools_gateway(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[tuple[str, str]]:
    """The gateway over a vLLM-like fake (refusing as vLLM's renderer refuses, or not) whose
    backend offers the MCP server ``calc`` as its gateway tool, a Messages request's hidden
    rounds; with the fake's URL, whose request log shows what each round asked."""
    directory = tmp_path_factory.mktemp("tools")
    fake: FakeOptions = {"max_model_len": WINDOW, "vllm_renderer": request.param}
    with serve_mcp() as mcp, start_fake_upstream(**fake) as upstream:
        config = directory / "stateway.toml"
        config.write_text(
            f'[mcp_servers.calc]\nurl = "{mcp.url}"\n'
            f'[[backends]]\nname = "fake"\nurl = "{upstream}"\napi = "chat"\n'
            'gateway_tools = [{type = "mcp", server_label = "calc"}]\n'
        )
        args = ["--config", str(config), "--database", f"sqlite:///{directory / 'gw.db'}"]
        with start_gateway(args) as url:
            yield url, upstream


@pytest.mark.parametrize("stream", [False, True])
def test_hidden_rounds_are_refused_their_output_tokens_once(
    tools_gateway: tuple[str, str], stream: bool
) -> None:
    """A gateway tool's round, then the answer: the server refused the first round's
    32,000 output tokens, so the second, its prompt longer by the call and its result, is
    counted first and asked for the room it leaves, not refused again."""
    url, upstream = tools_gateway
    marker = f"calc{stream:d} "
    message = long_story(url, stream, first=f'[[tool:calc__add:{{"a":2,"b":3}}]] {marker}')

    asked = [entry["body"]["max_tokens"] for entry in fake_requests(upstream, marker)]
    assert len(asked) == 3  # refused once, then each round asked its room
    assert asked[0] == ASKED
    assert asked[2] < asked[1] < WINDOW
    assert message.stop_reason == "model_context_window_exceeded"
    [text] = [block for block in message.content if block.type == "text"]
    assert len(text.text.split()) == asked[2]
    # two rounds summed: each prompt and the room asked beside it fill the window; the
    # first answered with its call (a token), the second with the room's words
    assert message.usage.input_tokens == 2 * WINDOW - asked[1] - asked[2]
    assert message.usage.output_tokens == 1 + asked[2]
