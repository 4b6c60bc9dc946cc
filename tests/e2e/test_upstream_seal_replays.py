"""An upstream's own seal on reasoning (an Anthropic thinking signature, a Responses
upstream's ``encrypted_content``) reaches clients sealed over for their tenant: every
tenant reaches the upstream with the gateway's credentials, so one tenant's seal, replayed
by another, must not reach the upstream at all."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from typing import Any

import httpx2
import pytest

from tests.e2e.authenticated import AuthGateway, auth_gateway, create_key

MODEL = "fake-model"
SECRET = "alice private plan XYZ"


@pytest.fixture(scope="module", params=["responses", "anthropic"])
def gateway(
    request: pytest.FixtureRequest, fake_upstream: str, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[tuple[AuthGateway, str, str]]:
    directory = tmp_path_factory.mktemp("upseal")
    database = f"sqlite:///{directory / 'stateway.db'}"
    env = {"STATEWAY_UPSTREAM_API": request.param}
    with auth_gateway(directory, fake_upstream, database, env=env) as gateway:
        suffix = uuid.uuid4().hex[:8]
        alice = create_key(database, f"alice-{suffix}")
        bob = create_key(database, f"bob-{suffix}")
        yield gateway, alice, bob


def post(gateway: AuthGateway, key: str, path: str, body: dict[str, Any]) -> httpx2.Response:
    headers = {"authorization": f"Bearer {key}"}
    return httpx2.post(gateway.url + path, json=body, headers=headers, timeout=60)


def test_another_tenants_upstream_seal_is_refused(gateway: tuple[AuthGateway, str, str]) -> None:
    served, alice, bob = gateway
    asked = {
        "model": MODEL,
        "input": f"[[reason:{SECRET}]] [[hidden]] hi",
        "include": ["reasoning.encrypted_content"],
        "store": False,
    }
    made = post(served, alice, "/v1/responses", asked)
    assert made.status_code == 200, made.text
    [reasoning] = [i for i in made.json()["output"] if i["type"] == "reasoning"]
    blob = reasoning["encrypted_content"]
    assert blob.startswith("sw1.")  # never the upstream's own
    sent = {"type": "reasoning", "id": reasoning["id"], "summary": [], "encrypted_content": blob}
    if reasoning.get("content"):
        sent["content"] = reasoning["content"]
    user = {"role": "user", "content": "[[echo]]"}
    body = {
        "model": MODEL,
        "store": False,
        "input": [{"role": "user", "content": "hi"}, sent, user],
    }
    assert post(served, alice, "/v1/responses", body).status_code == 200
    for path in ("/v1/responses", "/v1/responses/input_tokens"):
        refused = post(served, bob, path, body)
        assert refused.status_code == 400, (path, refused.text)
        assert refused.json()["error"]["code"] == "invalid_encrypted_content"
        assert refused.json()["error"]["param"] == "input[1].encrypted_content"
        assert SECRET not in refused.text


def test_another_tenants_signature_is_refused_in_anthropics_shape(
    gateway: tuple[AuthGateway, str, str],
) -> None:
    served, alice, bob = gateway
    asked = {
        "model": MODEL,
        "max_tokens": 2048,
        "thinking": {"type": "enabled", "budget_tokens": 1024},
        "messages": [{"role": "user", "content": f"[[reason:{SECRET}]] [[hidden]] hi"}],
    }
    made = post(served, alice, "/v1/messages", asked)
    assert made.status_code == 200, made.text
    thinking = [b for b in made.json()["content"] if b["type"] in ("thinking", "redacted_thinking")]
    assert thinking
    for block in thinking:
        assert (block.get("signature") or block.get("data")).startswith("sw1.")
    body = {
        **asked,
        "messages": [
            *asked["messages"],
            {"role": "assistant", "content": [*thinking, {"type": "text", "text": "ok"}]},
            {"role": "user", "content": "[[echo]]"},
        ],
    }
    assert post(served, alice, "/v1/messages", body).status_code == 200
    refused = post(served, bob, "/v1/messages", body)
    assert refused.status_code == 400, refused.text
    error = refused.json()
    assert error["type"] == "error"
    assert error["error"]["type"] == "invalid_request_error"
    assert "signature" in error["error"]["message"]
    assert SECRET not in refused.text
