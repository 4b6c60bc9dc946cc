"""Fixtures of the llama-server tests: the pinned ``llama-server`` (built once into a cache
outside the repository by ``scripts/install-llama-server``), the tiny model, one server for
the session and a gateway in front of it."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from anthropic import Anthropic
from openai import OpenAI

from tests.e2e.configured import RunningGateway, configured_gateway
from tests.llama_server.server import built_llama_server, llama_server
from tests.llama_server.tiny_model import write_tiny_model


@pytest.fixture(scope="session")
def llama_server_binary() -> Path:
    return built_llama_server()


@pytest.fixture(scope="session")
def tiny_model(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return write_tiny_model(tmp_path_factory.mktemp("model") / "tiny.gguf")


@pytest.fixture(scope="session")
def llama(llama_server_binary: Path, tiny_model: Path) -> Iterator[str]:
    """The server's ``http://127.0.0.1:PORT``."""
    with llama_server(llama_server_binary, tiny_model) as url:
        yield url


@pytest.fixture(scope="session")
def gateway(llama: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[RunningGateway]:
    """The gateway with llama-server as its one Chat Completions backend."""
    directory = tmp_path_factory.mktemp("gateway")
    with configured_gateway(directory, {"url": llama + "/v1", "api": "chat"}) as running:
        yield running


@pytest.fixture(scope="session")
def responses_gateway(
    llama: str, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[RunningGateway]:
    """A gateway with llama-server's own ``/v1/responses`` as its one backend
    (``api = "responses"``)."""
    directory = tmp_path_factory.mktemp("responses-gateway")
    with configured_gateway(directory, {"url": llama + "/v1", "api": "responses"}) as running:
        yield running


@pytest.fixture(scope="session")
def messages_gateway(
    llama: str, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[RunningGateway]:
    """A gateway with llama-server's own ``/v1/messages`` as its one backend
    (``api = "anthropic"``)."""
    directory = tmp_path_factory.mktemp("messages-gateway")
    with configured_gateway(directory, {"url": llama + "/v1", "api": "anthropic"}) as running:
        yield running


@pytest.fixture
def client(gateway: RunningGateway) -> Iterator[OpenAI]:
    with OpenAI(base_url=gateway.url + "/v1", api_key="sk-test", max_retries=0) as sdk:
        yield sdk


@pytest.fixture
def claude(gateway: RunningGateway) -> Iterator[Anthropic]:
    with Anthropic(base_url=gateway.url, api_key="sk-test", max_retries=0) as sdk:
        yield sdk
