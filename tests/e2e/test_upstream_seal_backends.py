"""A Responses upstream's blob sealing its reasoning (OpenAI's ``encrypted_content``, for
its account alone) goes back to the backend that made it only: a later turn on another
Responses backend (a model switched, a failover candidate) is sent the reasoning without
it, where that backend's server would refuse it."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import httpx2
import pytest

from tests.e2e.configured import RunningGateway, configured_gateway

PLAN = "private plan XYZ"


@pytest.fixture(scope="module")
def gateway(
    fake_upstream: str, second_upstream: str, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[RunningGateway]:
    other = (
        '[[backends]]\nname = "other"\napi = "responses"\n'
        f'url = "{second_upstream}"\nmodels = {{"other-model" = "fake-model"}}\n'
    )
    backend = {"url": fake_upstream, "api": "responses"}
    with configured_gateway(tmp_path_factory.mktemp("seals"), backend, tables=other) as served:
        yield served


def create(gateway: RunningGateway, body: dict[str, Any]) -> dict[str, Any]:
    answer = httpx2.post(gateway.url + "/v1/responses", json=body, timeout=60)
    assert answer.status_code == 200, answer.text
    result: dict[str, Any] = answer.json()
    return result


def test_a_blob_goes_back_to_its_own_backend_only(gateway: RunningGateway) -> None:
    first = create(
        gateway,
        {
            "model": "fake-model",
            "input": f"[[reason:{PLAN}]] [[hidden]] hi",
            "include": ["reasoning.encrypted_content"],
            "store": False,
        },
    )
    [reasoning] = [item for item in first["output"] if item["type"] == "reasoning"]
    assert PLAN not in str(reasoning)  # hidden: the blob is all the model continues from

    def echoed(model: str) -> str:
        turns = [
            {"role": "user", "content": "hi"},
            reasoning,
            {"role": "user", "content": "[[echo]]"},
        ]
        later = {"model": model, "store": False, "input": turns}
        text: str = create(gateway, later)["output"][-1]["content"][0]["text"]
        return text

    assert PLAN in echoed("fake-model")  # its own backend opens its blob
    assert PLAN not in echoed("other-model")  # another server is not sent it
