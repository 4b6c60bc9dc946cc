"""``/v1/responses/input_tokens`` in front of model servers that tokenize like llama.cpp,
or not at all (then the count is the gateway's estimate, and says so)."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from openai import OpenAI

from stateway.fake_upstream.launch import start_fake_upstream
from stateway.launch import start_gateway

MODEL = "fake-model"


@pytest.fixture(
    scope="module",
    params=["llama.cpp-chat", "llama.cpp-responses", "none-chat", "none-responses"],
)
def counted(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[tuple[str, OpenAI]]:
    tokenizer, api = request.param.split("-")
    database = f"sqlite:///{tmp_path_factory.mktemp('db') / 'stateway.db'}"
    with (
        start_fake_upstream(tokenizer=tokenizer) as upstream,
        start_gateway(
            ["--upstream", upstream, "--upstream-api", api, "--database", database]
        ) as url,
        OpenAI(base_url=url + "/v1", api_key="sk-test", max_retries=0) as client,
    ):
        yield tokenizer, client


def test_count_by_the_servers_tokenizer_or_the_estimate(counted: tuple[str, OpenAI]) -> None:
    tokenizer, client = counted
    raw = client.responses.input_tokens.with_raw_response.count(
        model=MODEL, input="one two three", instructions="be kind"
    )
    if tokenizer == "llama.cpp":  # "<|system|>be", "kind", "<|user|>one", "two", "three"
        assert raw.headers["stateway-token-count"] == "upstream"
        assert raw.parse().input_tokens == 5
    else:  # about four bytes of the request's JSON a token
        assert raw.headers["stateway-token-count"] == "estimate"
        assert 20 < raw.parse().input_tokens < 60
