"""The upstream key never leaks, even when the model server echoes it (lower-cased, or its
first characters) in a JSON or plain-text error body or in a mid-stream error: not to the
client, not in a later GET, not into the database file, not into the gateway's log."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import aiohttp
import orjson
import pytest

from stateway.fake_upstream.launch import start_fake_upstream
from tests.e2e.configured import RunningGateway, configured_gateway

KEY = "sk-Qz7WvN3k9M-4x8PrT5yLw2HjB"
"""Random-looking, so no stretch of it is an ordinary word found in answers."""
RUN = 8


def reveals(text: str | bytes) -> bool:
    """Whether ``text`` holds any 8-character stretch of the key, in any letter case."""
    folded = (text.decode("utf-8", "replace") if isinstance(text, bytes) else text).lower()
    return any(KEY[i : i + RUN].lower() in folded for i in range(len(KEY) - RUN + 1))


@pytest.fixture(scope="module", params=["api_key_env", "headers", "anthropic", "responses"])
def gateway(
    tmp_path_factory: pytest.TempPathFactory, request: pytest.FixtureRequest
) -> Iterator[RunningGateway]:
    """The key configured as the backend's key (of a Chat, Anthropic or Responses
    upstream), or sent in its configured ``headers`` (a proxy's token, or a key put there
    by hand)."""
    directory = tmp_path_factory.mktemp("scrub")
    with start_fake_upstream(api_key=KEY) as upstream:
        backend: dict[str, object] = {"url": upstream}
        if request.param == "headers":
            backend["headers"] = {"Authorization": f"Bearer {KEY}"}
        else:
            backend["api_key_env"] = "UPSTREAM_KEY"
        if request.param in ("anthropic", "responses"):
            backend["api"] = request.param
        with configured_gateway(directory, backend, env={"UPSTREAM_KEY": KEY}) as running:
            yield running


async def exchange(gateway: RunningGateway, method: str, path: str, body: object = None) -> str:
    """The whole answer (status line, headers and body) as text."""
    async with (
        aiohttp.ClientSession() as session,
        session.request(method, gateway.url + path, json=body) as response,
    ):
        raw = await response.read()
        headers = "".join(f"{k}: {v}\n" for k, v in response.headers.items())
        return f"{response.status}\n{headers}\n{raw.decode()}"


@pytest.mark.parametrize(
    "directives",
    [
        "[[leak:json]]",
        "[[leak:json]] [[error:500]]",
        "[[leak:text]]",
        "[[leak:text]] [[error:503]]",
    ],
)
@pytest.mark.parametrize("stream", [False, True])
async def test_upstream_error_bodies_echoing_the_key(
    gateway: RunningGateway, directives: str, stream: bool
) -> None:
    body = {"model": "fake-model", "input": f"hi {directives}", "stream": stream}
    answer = await exchange(gateway, "POST", "/v1/responses", body)
    assert "***" in answer  # the fake did echo the key, and the gateway masked it
    assert not reveals(answer)


@pytest.mark.parametrize("directives", ["[[leak:json]]", "[[leak:text]] [[error:503]]"])
@pytest.mark.parametrize("stream", [False, True])
async def test_relayed_chat_error_bodies_echoing_the_key(
    gateway: RunningGateway, directives: str, stream: bool
) -> None:
    messages = [{"role": "user", "content": f"hi {directives}"}]
    body = {"model": "fake-model", "messages": messages, "stream": stream}
    answer = await exchange(gateway, "POST", "/v1/chat/completions", body)
    assert "***" in answer
    assert not reveals(answer)


async def test_a_mid_stream_error_echoing_the_key(gateway: RunningGateway) -> None:
    body = {"model": "fake-model", "input": "[[words:3]] [[leak:stream]]", "stream": True}
    answer = await exchange(gateway, "POST", "/v1/responses", body)
    assert "response.output_text.delta" in answer
    assert "***" in answer
    assert not reveals(answer)
    created = next(
        line for line in answer.splitlines() if line.startswith("data: ") and "created" in line
    )
    response_id = orjson.loads(created.removeprefix("data: "))["response"]["id"]
    stored = await exchange(gateway, "GET", f"/v1/responses/{response_id}")
    assert '"failed"' in stored
    assert "***" in stored
    assert not reveals(stored)


def test_the_key_is_in_neither_the_database_nor_the_log(gateway: RunningGateway) -> None:
    """Runs after the leaking requests above (the module's gateway saw them all)."""
    files = [gateway.database, *gateway.database.parent.glob("gateway.db-*"), gateway.log]
    stored = b"".join(Path(path).read_bytes() for path in files if Path(path).exists())
    assert b"***" in stored  # scrubbed messages were stored and logged
    assert not reveals(stored)
