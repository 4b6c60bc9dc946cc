"""A Chat backend's ``reasoning_fields``: the assistant message fields a model's earlier
reasoning goes back in, as the backend's config names them (both by default; one for a
server that refuses the other; none at all)."""

from __future__ import annotations

from contextlib import aclosing
from typing import Any

import orjson
import pytest
from aiohttp import web
from pydantic import ValidationError

from stateway.app.generation import BACKEND_APIS
from stateway.backend_config import BackendConfig
from stateway.backends.upstream_http import UpstreamClient
from stateway.backends.upstream_target import UpstreamTarget
from stateway.core.generation_settings import GenerationSettings
from stateway.core.inference import InferenceRequest
from tests.backends.conftest import Loopback

ANSWER = {"choices": [{"index": 0, "message": {"role": "assistant", "content": "5"}}]}
ITEMS = [
    {"type": "message", "role": "user", "content": [{"type": "input_text", "text": "add"}]},
    {"type": "reasoning", "content": [{"type": "reasoning_text", "text": "hmm"}]},
    {"type": "function_call", "call_id": "c1", "name": "add", "arguments": "{}"},
    {"type": "function_call_output", "call_id": "c1", "output": "5"},
]


async def sent_assistant(loopback: Loopback, **config: Any) -> dict[str, Any]:
    received: list[bytes] = []

    async def answer(incoming: web.Request) -> web.Response:
        received.append(await incoming.read())
        return web.json_response(ANSWER)

    url = await loopback.serve(answer)
    settings = BackendConfig(name="up", url=url, **config)
    backend = BACKEND_APIS["chat"](
        loopback.adopt(UpstreamClient(UpstreamTarget("up", url))), settings
    )
    request = InferenceRequest(
        model="m", instructions=None, items=ITEMS, settings=GenerationSettings(), stream=False
    )
    async with aclosing(backend.infer(request)) as deltas:
        async for _ in deltas:
            pass
    [raw] = received
    [assistant] = [m for m in orjson.loads(raw)["messages"] if m["role"] == "assistant"]
    return dict(assistant)


@pytest.mark.parametrize(
    ("fields", "sent"),
    [
        (None, {"reasoning_content": "hmm", "reasoning": "hmm"}),
        (["reasoning"], {"reasoning": "hmm"}),
        (["reasoning_content"], {"reasoning_content": "hmm"}),
        ([], {}),
    ],
)
async def test_earlier_reasoning_goes_back_in_the_fields_the_backend_names(
    loopback: Loopback, fields: list[str] | None, sent: dict[str, str]
) -> None:
    config = {} if fields is None else {"reasoning_fields": fields}
    assistant = await sent_assistant(loopback, **config)
    assert {k: v for k, v in assistant.items() if k.startswith("reasoning")} == sent
    assert assistant["tool_calls"][0]["id"] == "c1"


async def test_earlier_reasoning_goes_back_in_its_fields_not_in_think_tags(
    loopback: Loopback,
) -> None:
    """A backend reading reasoning from ``<think>`` tags sends it back as any other: in
    the fields, the content without tags."""
    assistant = await sent_assistant(loopback, think_tags=True)
    assert (assistant["reasoning_content"], assistant["reasoning"]) == ("hmm", "hmm")
    assert "<think>" not in orjson.dumps(assistant).decode()


def test_only_the_fields_servers_read_are_taken() -> None:
    with pytest.raises(ValidationError, match="reasoning_fields"):
        BackendConfig(name="up", url="http://x", reasoning_fields=["thinking"])
