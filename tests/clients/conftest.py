"""Fixtures of the real-client tests: the pinned clients (installed once into a cache
outside the repository by ``scripts/install-clients``) and one offline gateway per upstream
wire, shared by the session."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import ExitStack
from pathlib import Path

import pytest

from tests.clients.offline import (
    STRICT_TEMPLATE,
    GatewayPool,
    OfflineGateway,
    fake_search,
    install_client,
    loopback_namespace,
    offline_gateway,
)


@pytest.fixture(scope="session")
def namespace() -> Iterator[str]:
    with loopback_namespace() as path:
        yield path


@pytest.fixture(scope="session")
def gateways(namespace: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[GatewayPool]:
    """Gateways with a web search provider configured (the fake search API, in the
    namespace), one per upstream wire, shared."""
    with ExitStack() as stack:
        search = stack.enter_context(fake_search(namespace))
        yield GatewayPool(
            namespace, stack, lambda api: tmp_path_factory.mktemp(f"gateway-{api}"), search
        )


@pytest.fixture(scope="session", params=["chat", "responses"])
def gateway(request: pytest.FixtureRequest, gateways: GatewayPool) -> OfflineGateway:
    """The gateway over a Chat Completions or a stateless Responses fake upstream (what
    Codex speaks to its provider)."""
    return gateways.get(request.param)


@pytest.fixture(scope="session", params=["chat", "anthropic"])
def claude_gateway(request: pytest.FixtureRequest, gateways: GatewayPool) -> OfflineGateway:
    """The gateway over a Chat Completions (a strict chat template) or a Messages fake
    upstream: a vLLM-style server and Anthropic's own wire."""
    return gateways.get(request.param)


@pytest.fixture(scope="session")
def gateway_without_search(
    namespace: str, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[OfflineGateway]:
    """The gateway as configured by default: no web search provider."""
    directory = tmp_path_factory.mktemp("gateway-without-search")
    with offline_gateway(namespace, "responses", directory) as running:
        yield running


@pytest.fixture(scope="session")
def text_only_gateway(
    namespace: str, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[OfflineGateway]:
    """The gateway over a Chat upstream whose model takes no images (``--text-only``: a
    request holding one is refused as vLLM refuses it for such a model)."""
    directory = tmp_path_factory.mktemp("gateway-text-only")
    options = (*STRICT_TEMPLATE, "--text-only")
    with offline_gateway(namespace, "chat", directory, fake_options=options) as running:
        yield running


@pytest.fixture(scope="session")
def vllm_gateway(
    namespace: str, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[OfflineGateway]:
    """The gateway over a Chat upstream naming reasoning as vLLM does now
    (``--reasoning-field reasoning``: written as ``reasoning``, and read back from an
    assistant message's ``reasoning`` only)."""
    directory = tmp_path_factory.mktemp("gateway-vllm")
    options = (*STRICT_TEMPLATE, "--reasoning-field", "reasoning")
    with offline_gateway(namespace, "chat", directory, fake_options=options) as running:
        yield running


@pytest.fixture(scope="session")
def codex_binary(namespace: str) -> Path:
    """Installed only where the offline namespace can be made: no download for tests that
    would skip anyway."""
    return install_client("codex")


@pytest.fixture(scope="session")
def claude_binary(namespace: str) -> Path:
    """Installed only where the offline namespace can be made."""
    return install_client("claude")
