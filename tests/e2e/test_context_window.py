"""``truncation`` against a backend's ``context_window``, and the upstream's own
context-length refusal passed through, over every storage and upstream API shape."""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import anthropic
import openai
import pytest
from openai import OpenAI

from stateway.launch import start_gateway

MODEL = "fake-model"
WINDOW = 160
"""The gateway's window in estimated tokens (4 bytes of item JSON each): the last turn
(45) and one earlier turn (100) fit, two do not."""
LAST = "[[context:30]] [[echo]]"
"""The fake model holds 30 words: the whole history (62 words) does not fit."""


@pytest.fixture(
    scope="module",
    params=[
        "sqlite-chat",
        "sqlite-responses",
        pytest.param("postgres-chat", marks=pytest.mark.postgres),
        pytest.param("postgres-responses", marks=pytest.mark.postgres),
    ],
)
def windowed(
    request: pytest.FixtureRequest, fake_upstream: str, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[OpenAI]:
    database_kind, api = request.param.split("-")
    directory = tmp_path_factory.mktemp("windowed")
    if database_kind == "sqlite":
        database = f"sqlite:///{directory / 'stateway.db'}"
    else:
        database = request.getfixturevalue("postgres_url")
    config = Path(directory) / "stateway.toml"
    config.write_text(
        f'[[backends]]\nname = "small"\nurl = "{fake_upstream}"\napi = "{api}"\n'
        f"models = []\ncontext_window = {WINDOW}\n"
    )
    with (
        start_gateway(["--config", str(config), "--database", database]) as url,
        OpenAI(base_url=url + "/v1", api_key="sk-test", max_retries=0) as client,
    ):
        yield client


def history() -> list[dict[str, Any]]:
    turns: list[dict[str, Any]] = []
    for number in range(5):
        turns.append({"role": "user", "content": f"turn{number} " + "word " * 10})
        turns.append({"role": "assistant", "content": f"ok{number}"})
    return turns


def test_truncation_auto_drops_the_oldest_turns(windowed: OpenAI) -> None:
    response = windowed.responses.create(
        model=MODEL,
        input=[*history(), {"role": "user", "content": LAST}],
        instructions="Be brief.",
        truncation="auto",
    )
    assert response.truncation == "auto"
    lines = response.output_text.splitlines()
    assert lines[0].endswith("Be brief.")  # instructions are never dropped
    seen = [line.split()[1] for line in lines if line.startswith("user: turn")]
    assert seen == ["turn4"]
    assert lines[-2:] == ["assistant: ok4", f"user: {LAST}"]


def test_without_truncation_a_context_over_the_window_is_refused(windowed: OpenAI) -> None:
    """By the gateway, which knows the window (the upstream's own refusal, without a
    configured window, is in test_compaction.py)."""
    body = {"model": MODEL, "input": [*history(), {"role": "user", "content": LAST}]}
    with pytest.raises(openai.BadRequestError) as refused:
        windowed.responses.create(**body)  # type: ignore[call-overload]
    assert refused.value.code == "context_length_exceeded"
    with pytest.raises(openai.BadRequestError) as streamed:
        list(windowed.responses.create(**body, stream=True))  # type: ignore[call-overload]
    assert streamed.value.code == "context_length_exceeded"


def test_truncation_auto_applies_to_a_stored_chain(windowed: OpenAI) -> None:
    first = windowed.responses.create(model=MODEL, input=history()[:-1], truncation="auto")
    with pytest.raises(openai.BadRequestError) as refused:
        windowed.responses.create(model=MODEL, input=LAST, previous_response_id=first.id)
    assert refused.value.code == "context_length_exceeded"
    response = windowed.responses.create(
        model=MODEL, input=LAST, previous_response_id=first.id, truncation="auto"
    )
    # the last earlier turn (turn4 and its long answer) no longer fits beside this one
    assert response.output_text.splitlines() == [f"user: {LAST}"]


def test_threshold_defaults_to_the_context_window(windowed: OpenAI) -> None:
    # one turn (100) and a question (about 40): past 80% of the window (128), within it
    turn = [*history()[:2], {"role": "user", "content": "[[echo]]"}]
    response = windowed.responses.create(
        model=MODEL, input=turn, context_management=[{"type": "compaction"}]
    )
    assert [item.type for item in response.output] == ["compaction", "message"]
    plain = windowed.responses.create(model=MODEL, input=turn)
    assert [item.type for item in plain.output] == ["message"]


def test_input_tokens_count_what_truncation_keeps(windowed: OpenAI) -> None:
    whole = [*history(), {"role": "user", "content": LAST}]
    kept = windowed.responses.input_tokens.count(model=MODEL, input=whole, truncation="auto")
    assert kept.input_tokens == 12 + 2  # the fake's words: turn4 and the question
    counted = windowed.responses.input_tokens.count(model=MODEL, input=whole)
    assert counted.input_tokens == 62, "over the window, counted all the same"
    with pytest.raises(openai.BadRequestError) as refused:  # no candidate's window takes it
        windowed.responses.create(model=MODEL, input=whole)
    assert refused.value.code == "context_length_exceeded"


def test_an_answer_s_output_tokens_do_not_count_toward_the_window(windowed: OpenAI) -> None:
    """Stored with the answer for the client, they are not sent again: a short chain whose
    answer carries 20 alternatives per token still fits, and nothing is truncated."""
    first = windowed.responses.create(
        model=MODEL,
        input="[[words:10]] hi",
        include=["message.output_text.logprobs"],
        top_logprobs=20,
    )
    assert first.output[0].content[0].logprobs  # type: ignore[union-attr]
    response = windowed.responses.create(
        model=MODEL, input="[[echo]]", previous_response_id=first.id, truncation="auto"
    )
    assert response.output_text.splitlines()[0] == "user: [[words:10]] hi"
    windowed.responses.create(model=MODEL, input="again", previous_response_id=first.id)


def test_an_anthropic_upstream_s_too_long_refusal_is_context_length_exceeded(
    fake_upstream: str, tmp_path: Path
) -> None:
    """Anthropic's refusal has no code, only its wording ("prompt is too long: ...")."""
    database = f"sqlite:///{tmp_path / 'stateway.db'}"
    args = ["--upstream", fake_upstream, "--upstream-api", "anthropic", "--database", database]
    with (
        start_gateway(args) as url,
        OpenAI(base_url=url + "/v1", api_key="sk-test", max_retries=0) as client,
    ):
        for stream in (False, True):
            with pytest.raises(openai.BadRequestError) as refused:
                client.responses.create(
                    model=MODEL, input="[[context:3]] " + "word " * 20, stream=stream
                )
            assert refused.value.code == "context_length_exceeded"
            assert "prompt is too long" in refused.value.message


def test_a_messages_client_gets_anthropic_s_wording_for_a_context_too_long(
    windowed: OpenAI,
) -> None:
    base_url = str(windowed.base_url).removesuffix("/v1/")
    messages = [*history(), {"role": "user", "content": LAST}]
    claude = anthropic.Anthropic(base_url=base_url, api_key="sk-test", max_retries=0)
    with claude, pytest.raises(anthropic.BadRequestError) as refused:
        claude.messages.create(model=MODEL, max_tokens=100, messages=messages)  # type: ignore[arg-type]
    message = refused.value.body["error"]["message"]  # type: ignore[index]
    assert re.fullmatch(rf"prompt is too long: \d+ tokens > {WINDOW} maximum", message), message


def test_llama_cpp_s_2025_refusal_in_a_stream_is_context_length_exceeded(
    fake_upstream: str, tmp_path: Path
) -> None:
    """llama-server's builds of 2025 refused a streamed prompt over its context after a 200,
    as an ``error:`` line and ``[DONE]``: not an empty answer, but the refusal, which
    clients such as Codex compact on."""
    database = f"sqlite:///{tmp_path / 'stateway.db'}"
    args = ["--upstream", fake_upstream, "--upstream-api", "chat", "--database", database]
    with (
        start_gateway(args) as url,
        OpenAI(base_url=url + "/v1", api_key="sk-test", max_retries=0) as client,
        pytest.raises(openai.BadRequestError) as refused,
    ):
        client.responses.create(
            model=MODEL, input="[[context:3]] [[llamacpp]] " + "word " * 20, stream=True
        )
    assert refused.value.code == "context_length_exceeded"
    assert "exceeds the available context size" in refused.value.message


def test_a_messages_client_is_told_llama_cpp_s_numbers_as_anthropic_tells_them(
    fake_upstream: str, tmp_path: Path
) -> None:
    """llama-server states the prompt's tokens and its window in fields of the refusal
    (``n_prompt_tokens``, ``n_ctx``): Claude Code reads them from Anthropic's words."""
    database = f"sqlite:///{tmp_path / 'stateway.db'}"
    args = ["--upstream", fake_upstream, "--upstream-api", "chat", "--database", database]
    prompt = "[[context:3]] [[llamacpp]] " + "word " * 20
    with (
        start_gateway(args) as url,
        anthropic.Anthropic(base_url=url, api_key="sk-test", max_retries=0) as claude,
        pytest.raises(anthropic.BadRequestError) as refused,
    ):
        claude.messages.create(
            model=MODEL, max_tokens=100, messages=[{"role": "user", "content": prompt}]
        )
    message = refused.value.body["error"]["message"]  # type: ignore[index]
    assert re.fullmatch(r"prompt is too long: \d+ tokens > 3 maximum", message), message
