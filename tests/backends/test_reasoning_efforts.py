import orjson
import pytest
from aiohttp import web

from stateway.backends.chat_forwarder import OpenAIChatBackend
from stateway.backends.chat_request import to_upstream
from stateway.backends.reasoning_efforts import LADDER, effort_levels
from stateway.backends.upstream_http import UpstreamClient
from stateway.backends.upstream_target import UpstreamTarget
from tests.backends.conftest import Loopback
from tests.backends.test_openai_chat import request, user

VLLM = ("low", "medium", "high")
"""What vLLM's Chat request model took before the OpenAI SDK's wider set."""


def test_unconfigured_every_effort_goes_as_asked() -> None:
    assert effort_levels(None) == {}
    assert effort_levels(LADDER) == {}


def test_each_effort_goes_at_the_nearest_taken_level_the_lower_of_two() -> None:
    assert effort_levels(VLLM) == {
        "none": "low",
        "minimal": "low",
        "xhigh": "high",
        "max": "high",
    }
    assert effort_levels(("high", "low")) == {
        "none": "low",
        "minimal": "low",
        "medium": "low",  # as near as high: the lower
        "xhigh": "high",
        "max": "high",
    }
    assert effort_levels(("none", "medium", "max")) == {
        "minimal": "medium",  # reasoning asked for is never sent as none
        "low": "medium",
        "high": "medium",
        "xhigh": "max",
    }
    assert effort_levels(("high",)) == {e: "high" for e in LADDER if e != "high"}


@pytest.mark.parametrize(
    ("asked", "sent"), [("xhigh", "high"), ("max", "high"), ("minimal", "low"), ("none", "low")]
)
def test_a_chat_body_carries_the_level_the_server_takes(asked: str, sent: str) -> None:
    body = to_upstream(request([user("x")], reasoning_effort=asked), efforts=effort_levels(VLLM))
    assert body["reasoning_effort"] == sent


def test_taken_unset_and_unknown_efforts_go_as_they_are() -> None:
    levels = effort_levels(VLLM)
    assert (
        to_upstream(request([user("x")], reasoning_effort="medium"), efforts=levels)[
            "reasoning_effort"
        ]
        == "medium"
    )
    assert "reasoning_effort" not in to_upstream(request([user("x")]), efforts=levels)
    unknown = to_upstream(request([user("x")], reasoning_effort="turbo"), efforts=levels)
    assert unknown["reasoning_effort"] == "turbo"  # a Chat client's own string: the server judges
    assert to_upstream(request([user("x")], reasoning_effort="max"))["reasoning_effort"] == "max"


async def test_the_fast_path_rewrites_only_an_effort_the_server_does_not_take(
    loopback: Loopback,
) -> None:
    """A body whose effort the server takes (or that has none) goes in the very bytes the
    client sent; another is re-encoded with the nearest level."""
    received: list[bytes] = []

    async def answer(request: web.Request) -> web.Response:
        received.append(await request.read())
        return web.json_response({"choices": []})

    url = await loopback.serve(answer)
    client = loopback.adopt(UpstreamClient(UpstreamTarget("vllm", url)))
    backend = OpenAIChatBackend(client, reasoning_efforts=VLLM)
    spaced = b'{ "model": "m",  "messages": [], "reasoning_effort": "medium" }'
    bare = b'{"model": "m", "messages": []}'
    for body in (spaced, bare, b'{"model": "m", "reasoning_effort": "max", "top_k": 2}'):
        relay = await backend.forward_chat(body, orjson.loads(body))
        await relay.aclose()
    assert received[:2] == [spaced, bare]
    assert orjson.loads(received[2]) == {"model": "m", "reasoning_effort": "high", "top_k": 2}
