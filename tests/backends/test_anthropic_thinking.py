"""Which thinking each model behind an Anthropic backend takes, as its listing tells."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import pytest
from aiohttp import web

from stateway.backends.anthropic_thinking import ThinkingTypes
from tests.backends.conftest import Loopback
from tests.backends.test_anthropic import backend, collect, request, user


def entry(model: str, **types: bool) -> dict[str, Any]:
    """A listing entry as Anthropic's: ``capabilities.thinking.types``, each supported or not."""
    kinds = {kind: {"supported": supported} for kind, supported in types.items()}
    thinking = {"supported": True, "types": kinds}
    return {"type": "model", "id": model, "capabilities": {"thinking": thinking}}


LISTING = [
    entry("opus-new", enabled=False, adaptive=True, disabled=True),
    entry("sonnet-old", enabled=True, adaptive=False, disabled=True),
    entry("sonnet-both", enabled=True, adaptive=True, disabled=True),
    {"type": "model", "id": "bare"},
    {"type": "model", "id": "odd", "capabilities": {"thinking": {"types": "x"}}},
    "not an entry",
]


def listing_server(sent: list[dict[str, Any]]) -> Any:
    """An Anthropic server listing :data:`LISTING` and answering "hi" to each request,
    kept in ``sent``."""

    async def answer(http: web.Request) -> web.StreamResponse:
        if http.path.endswith("/models"):
            return web.json_response({"data": LISTING, "has_more": False})
        sent.append(await http.json())
        message = {"content": [{"type": "text", "text": "hi"}], "stop_reason": "end_turn"}
        return web.json_response({**message, "usage": {}})

    return answer


@pytest.mark.parametrize(
    ("model", "configured", "asked"),
    [
        ("opus-new", "enabled", "adaptive"),  # refuses budget_tokens: adaptive only
        ("opus-new", "adaptive", "adaptive"),
        ("sonnet-old", "adaptive", "enabled"),  # takes no adaptive thinking
        ("sonnet-old", "enabled", "enabled"),
        ("sonnet-both", "enabled", "enabled"),  # takes both: as configured
        ("sonnet-both", "adaptive", "adaptive"),
        ("bare", "enabled", "enabled"),  # the listing tells nothing: as configured
        ("odd", "adaptive", "adaptive"),
        ("unlisted", "enabled", "enabled"),
    ],
)
def test_a_model_is_asked_for_the_thinking_its_listing_says_it_takes(
    model: str, configured: Any, asked: str
) -> None:
    types = ThinkingTypes()
    assert types.asked(model, configured) == configured  # nothing learned yet
    types.learn(LISTING)
    assert types.asked(model, configured) == asked


async def test_an_effort_reaches_a_model_taking_only_adaptive_thinking_as_adaptive(
    loopback: Loopback,
) -> None:
    """Claude models from Opus 4.7 on refuse ``budget_tokens`` (adaptive thinking only):
    once the listing told so (the window discovery reads it), a reasoning effort reaches
    such a model as adaptive thinking whatever the backend's ``thinking``."""
    sent: list[dict[str, Any]] = []
    answer = listing_server(sent)
    claude = backend(loopback, await loopback.serve(answer))
    await claude.advertised_windows()
    asked = request([user("q")], reasoning_effort="high")
    await collect(claude, replace(asked, model="opus-new"))
    await collect(claude, replace(asked, model="sonnet-old"))
    assert sent[0]["thinking"] == {"type": "adaptive"}
    assert sent[0]["output_config"] == {"effort": "high"}
    assert sent[1]["thinking"] == {"type": "enabled", "budget_tokens": 2048}


async def test_another_backend_of_the_server_learns_it_from_the_listing_one_reads(
    loopback: Loopback,
) -> None:
    """The window discovery reads one backend's listing per server: another backend on it
    (another key, a route's own settings) follows that one's, and asks an adaptive-only
    model for adaptive thinking too."""
    sent: list[dict[str, Any]] = []
    answer = listing_server(sent)
    url = await loopback.serve(answer)
    leader, follower = backend(loopback, url), backend(loopback, url)
    follower.follow(leader)
    await leader.advertised_windows()
    await collect(
        follower, replace(request([user("q")], reasoning_effort="high"), model="opus-new")
    )
    assert sent[0]["thinking"] == {"type": "adaptive"}
