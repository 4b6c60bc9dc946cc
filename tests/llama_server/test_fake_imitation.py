"""The fake upstream's imitation of llama-server (``--ctx-size``, ``--parallel``,
``--tokenizer llama.cpp``, ``[[llamacpp]]``), checked against the real one: what each says
of its window, its tokenizer routes, and its refusal of a prompt over the window, field by
field where the gateway reads them."""

from __future__ import annotations

import json
import re
import urllib.error
import urllib.request
from collections.abc import Iterator
from typing import Any

import pytest

from stateway.fake_upstream.launch import start_fake_upstream
from tests.llama_server.server import CTX_SIZE, MODEL, PARALLEL, SLOT_WINDOW

pytestmark = pytest.mark.llama_server

REFUSAL = re.compile(
    r"request \(\d+ tokens\) exceeds the available context size \(\d+ tokens\), try increasing it"
)
OVER = "w " * SLOT_WINDOW
"""A prompt past the window: the tiny model reads two characters a token."""


@pytest.fixture(scope="module")
def fake() -> Iterator[str]:
    """The fake playing the llama-server of these tests; its root URL."""
    options = {"ctx_size": CTX_SIZE, "parallel": PARALLEL, "tokenizer": "llama.cpp"}
    with start_fake_upstream(**options) as url:  # type: ignore[arg-type]
        yield url.removesuffix("/v1")


@pytest.fixture(params=["real", "fake"])
def server(request: pytest.FixtureRequest) -> str:
    """Each server's root URL: the real llama-server, and the fake playing it."""
    return str(request.getfixturevalue("llama" if request.param == "real" else "fake"))


def call(url: str, body: dict[str, Any] | None = None) -> tuple[int, Any]:
    """The status and JSON answer of a GET (a POST of ``body``, when given)."""
    data = None if body is None else json.dumps(body).encode()
    ask = urllib.request.Request(url, data, {"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(ask, timeout=10) as answer:
            return answer.status, json.loads(answer.read())
    except urllib.error.HTTPError as refused:
        with refused:
            return refused.code, json.loads(refused.read())


def test_the_window_of_a_slot_is_listed_and_in_props(server: str) -> None:
    status, listing = call(server + "/v1/models")
    assert status == 200
    [entry] = listing["data"]
    assert entry["owned_by"] == "llamacpp"
    assert entry["meta"]["n_ctx"] == SLOT_WINDOW
    assert entry["meta"]["n_ctx_train"] > SLOT_WINDOW
    status, props = call(server + "/props")
    assert (props["default_generation_settings"]["n_ctx"], props["total_slots"]) == (
        SLOT_WINDOW,
        PARALLEL,
    )


def test_the_tokenizer_routes_answer_alike(server: str) -> None:
    messages = [{"role": "user", "content": "Hi there"}]
    status, rendered = call(server + "/apply-template", {"model": MODEL, "messages": messages})
    assert status == 200
    assert list(rendered) == ["prompt"]
    assert "Hi there" in rendered["prompt"]
    content = {"model": MODEL, "content": rendered["prompt"], "add_special": True}
    status, tokenized = call(server + "/tokenize", content)
    assert status == 200
    assert list(tokenized) == ["tokens"]
    assert all(isinstance(token, int) for token in tokenized["tokens"])
    assert tokenized["tokens"]
    # a chat body (vLLM's) is no content: no tokens, which tells the gateway it is llama.cpp
    assert call(server + "/tokenize", {"model": MODEL, "messages": messages}) == (
        200,
        {"tokens": []},
    )


def test_a_prompt_over_the_window_is_refused_alike(server: str, fake: str) -> None:
    scripted = "[[context:10]] [[llamacpp]] " if server == fake else ""
    body = {"model": MODEL, "messages": [{"role": "user", "content": scripted + OVER}]}
    status, refusal = call(server + "/v1/chat/completions", body)
    assert status == 400
    assert_refusal(refusal)


def test_a_streamed_prompt_over_the_window_is_refused_before_the_stream(llama: str) -> None:
    """As a whole one (the fake's ``[[llamacpp]]`` stream plays llama-server's builds of
    2025, which refused it after a 200, in an ``error:`` line)."""
    body = {"model": MODEL, "messages": [{"role": "user", "content": OVER}], "stream": True}
    status, refusal = call(llama + "/v1/chat/completions", body)
    assert status == 400
    assert_refusal(refusal)


def assert_refusal(refusal: dict[str, Any]) -> None:
    """llama-server's refusal of a prompt over its window, as the gateway reads it."""
    error = refusal["error"]
    assert (error["code"], error["type"]) == (400, "exceed_context_size_error")
    assert REFUSAL.fullmatch(error["message"])
    assert error["n_prompt_tokens"] > error["n_ctx"] > 0
