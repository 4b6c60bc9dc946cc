"""Context windows learned from the model servers (``discover_context_window``): the real
gateway in front of the real fake telling its window as vLLM does (``max_model_len``) and
as llama.cpp does (``/props``, per slot), with no ``context_window`` configured. The
learned window is the model's ``max_input_tokens`` and what ``truncation: "auto"`` and the
context check use; a configured one wins; turned off, none; a server down at start-up is
learned once it is up, and a reload keeps what was learned."""

from __future__ import annotations

import socket
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import anthropic
import openai
import pytest
from openai import OpenAI

from stateway.fake_upstream.launch import start_fake_upstream
from stateway.launch import start_gateway
from tests.e2e.configured import RunningGateway
from tests.e2e.reloading import await_status, serving, sighup, status

WINDOW = 160
"""In estimated tokens: the last turn and one earlier turn fit, two do not (as in
test_context_window.py, where the same window is configured)."""
LAST = "[[echo]]"
HISTORY = [
    message
    for number in range(5)
    for message in (
        {"role": "user", "content": f"turn{number} " + "word " * 10},
        {"role": "assistant", "content": f"ok{number}"},
    )
]


@pytest.fixture(scope="module")
def vllm() -> Iterator[str]:
    with start_fake_upstream(max_model_len=WINDOW) as url:
        yield url


@pytest.fixture(scope="module")
def llama_cpp() -> Iterator[str]:
    """``-c 640 --parallel 4``: 160 tokens a request (its listing says 131072 trained)."""
    with start_fake_upstream(ctx_size=4 * WINDOW, parallel=4) as url:
        yield url


def backend(name: str, url: str, settings: str = "") -> str:
    models = f'{{ "{name}-model" = "fake-model" }}'
    return f'[[backends]]\nname = "{name}"\nurl = "{url}"\nmodels = {models}\n{settings}'


@pytest.fixture(scope="module")
def gateway(vllm: str, llama_cpp: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    config = tmp_path_factory.mktemp("discovered") / "stateway.toml"
    config.write_text(
        backend("vllm", vllm)
        + backend("llama", llama_cpp)
        + backend("off", vllm, "discover_context_window = false\n")
        + backend("configured", vllm, "context_window = 1000\n")
    )
    database = f"sqlite:///{config.parent / 'stateway.db'}"
    with start_gateway(["--config", str(config), "--database", database]) as url:
        yield url


def windows(url: str) -> dict[str, int | None]:
    with anthropic.Anthropic(base_url=url, api_key="sk-test", max_retries=0) as claude:
        return {model.id: model.max_input_tokens for model in claude.models.list()}


def learned(url: str, done: Callable[[dict[str, int | None]], bool]) -> dict[str, int | None]:
    """The listing's windows once ``done`` holds (polled, bounded: learning runs beside
    serving, in another process)."""
    for _ in range(200):
        seen = windows(url)
        if done(seen):
            return seen
        time.sleep(0.05)
    raise AssertionError(f"never learned: {seen}")


def both_learned(seen: dict[str, int | None]) -> bool:
    return seen["vllm-model"] is not None and seen["llama-model"] is not None


def ask(url: str, model: str, **fields: Any) -> Any:
    with OpenAI(base_url=url + "/v1", api_key="sk-test", max_retries=0) as client:
        return client.responses.create(
            model=model, input=[*HISTORY, {"role": "user", "content": LAST}], **fields
        )


def turns_seen(response: Any) -> list[str]:
    lines = response.output_text.splitlines()
    return [line.split()[1] for line in lines if line.startswith("user: turn")]


def test_the_model_listing_shows_each_learned_window(gateway: str) -> None:
    assert learned(gateway, both_learned) == {
        "vllm-model": WINDOW,
        "llama-model": WINDOW,  # one slot's, not the trained window nor the whole -c
        "off-model": None,  # discover_context_window = false: as before
        "configured-model": 1000,  # the configuration wins
    }


@pytest.mark.parametrize("model", ["vllm-model", "llama-model"])
def test_truncation_auto_fits_the_learned_window(gateway: str, model: str) -> None:
    learned(gateway, both_learned)
    assert turns_seen(ask(gateway, model, truncation="auto")) == ["turn4"]


def test_a_learned_window_is_the_servers_to_enforce(gateway: str) -> None:
    """The gateway's estimate (four bytes of JSON a token) can overshoot a code-heavy
    context by a third: a context it estimates past the learned window still goes to
    the model server, which counts exactly (and refuses, as vLLM does, what does not
    fit). A configured window is checked before asking."""
    learned(gateway, both_learned)
    assert turns_seen(ask(gateway, "vllm-model")) == [f"turn{number}" for number in range(5)]
    with (
        OpenAI(base_url=gateway + "/v1", api_key="sk-test", max_retries=0) as client,
        pytest.raises(openai.BadRequestError) as refused,
    ):
        client.responses.create(model="configured-model", input="many words " * 800)
    assert refused.value.code == "context_length_exceeded"
    assert "(it has 1000)" in refused.value.message  # the gateway's check, not the fake's


@pytest.mark.parametrize("model", ["off-model", "configured-model"])
def test_without_a_learned_window_nothing_is_dropped(gateway: str, model: str) -> None:
    learned(gateway, both_learned)
    seen = turns_seen(ask(gateway, model, truncation="auto"))
    assert seen == [f"turn{number}" for number in range(5)]


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def test_a_server_down_at_start_up_is_learned_once_up_and_kept_over_a_reload(
    tmp_path: Path,
) -> None:
    port = free_port()
    url = f"http://127.0.0.1:{port}/v1"
    text = f"[health]\nprobe_interval = 0.2\n{backend('late', url)}"
    with serving(tmp_path, text) as gateway:
        assert windows(gateway.url) == {"late-model": None}  # served meanwhile, unknown
        with start_fake_upstream(port=port, max_model_len=WINDOW):
            assert learned(gateway.url, lambda seen: seen["late-model"] is not None) == {
                "late-model": WINDOW
            }
            assert turns_seen(ask(gateway.url, "late-model", truncation="auto")) == ["turn4"]
        reload_while_down(gateway, tmp_path, text + "# reloaded\n")
        assert windows(gateway.url) == {"late-model": WINDOW}  # not lost with the server down


def reload_while_down(gateway: RunningGateway, directory: Path, text: str) -> None:
    generation = status(gateway)["generation"]
    sighup(gateway, directory, text)
    await_status(gateway, lambda current: current["generation"] == generation + 1)
