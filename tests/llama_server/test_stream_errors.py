"""A real llama-server failing a stream part-way, relayed to a Chat Completions client: it
ends the stream with ``data: {"error": ...}`` in its own shape and no ``[DONE]``; the
client gets the gateway's error line, which the OpenAI SDK raises, after the output.

Its own server: one with ``--context-shift``, which fails an answer of several choices
(``n``) once it outgrows the slot (a shared prompt's context cannot be shifted), asked
not to stop at the model's end of turn (``ignore_eos``) so that it does."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import openai
import pytest
from openai import OpenAI

from tests.e2e.configured import configured_gateway
from tests.llama_server.server import MODEL, llama_server

pytestmark = pytest.mark.llama_server

SHIFTING = ("--ctx-size", "512", "--parallel", "2", "--context-shift")


@pytest.fixture(scope="module")
def shifting(
    llama_server_binary: Path, tiny_model: Path, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[OpenAI]:
    """The SDK on a gateway in front of a llama-server that shifts its context."""
    with (
        llama_server(llama_server_binary, tiny_model, SHIFTING) as url,
        configured_gateway(
            tmp_path_factory.mktemp("shifting"), {"url": url + "/v1", "api": "chat"}
        ) as gateway,
        OpenAI(base_url=gateway.url + "/v1", api_key="sk-test", max_retries=0) as sdk,
    ):
        yield sdk


def test_a_stream_failing_part_way_ends_with_the_error_the_sdk_raises(shifting: OpenAI) -> None:
    stream = shifting.chat.completions.create(
        model=MODEL,
        messages=[{"role": "user", "content": "Hi"}],
        stream=True,
        n=2,
        extra_body={"ignore_eos": True},
    )
    text: list[str] = []

    def read() -> None:
        for chunk in stream:
            text.extend(choice.delta.content or "" for choice in chunk.choices)

    with pytest.raises(openai.APIError) as caught:
        read()
    assert "".join(text)  # the output before the failure was relayed
    assert isinstance(caught.value.body, dict)
    assert caught.value.body["code"] == "upstream_error"  # the gateway's, not the server's 500
    assert caught.value.message == (
        "Model server 'default' failed mid-stream: context shift cannot be used for shared prompt"
    )
