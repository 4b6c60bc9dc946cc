"""OIDC end to end: the real gateway verifying tokens from an issuer on loopback (its
discovery document and JWKS), driven by the official SDKs: the tenant from the claim,
key rotation, expired and wrong-audience tokens, ``alg: none``, a wrong key, and an
issuer that is down (503) in each frontend's shape; no token in the log."""

from __future__ import annotations

import asyncio
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import anthropic
import httpx2
import openai
import pytest
from cryptography.hazmat.primitives.asymmetric import rsa
from websockets.exceptions import ConnectionClosed

from stateway.app import TESTING_JWKS_COOLDOWN_ENV
from tests.e2e.authenticated import AuthGateway, auth_gateway
from tests.e2e.routing import fake_requests
from tests.support.oidc_issuer import AUDIENCE, TENANT_CLAIM, OidcIssuer

MODEL = "fake-model"
SENT: list[str] = []


NO_COOLDOWN = {TESTING_JWKS_COOLDOWN_ENV: "0"}
"""A rotated key, or the issuer back up, seen at once, not a cooldown later."""


def oidc_tables(issuer: OidcIssuer) -> str:
    return (
        f"[auth.oidc]\nissuer = '{issuer.url}'\naudience = '{AUDIENCE}'\n"
        f"tenant_claim = '{TENANT_CLAIM}'\n"
    )


@pytest.fixture(scope="module")
def issuer() -> Iterator[OidcIssuer]:
    with OidcIssuer() as running:
        yield running


@pytest.fixture(scope="module")
def gateway(
    issuer: OidcIssuer, fake_upstream: str, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[AuthGateway]:
    directory = tmp_path_factory.mktemp("oidc")
    database = f"sqlite:///{directory / 'stateway.db'}"
    tables = oidc_tables(issuer)
    with auth_gateway(directory, fake_upstream, database, tables, NO_COOLDOWN) as running:
        yield running


def as_openai(gateway: AuthGateway, token: str) -> openai.OpenAI:
    SENT.append(token)
    return openai.OpenAI(base_url=gateway.url + "/v1", api_key=token, max_retries=0)


def as_anthropic(gateway: AuthGateway, token: str) -> anthropic.Anthropic:
    SENT.append(token)
    return anthropic.Anthropic(base_url=gateway.url, auth_token=token, max_retries=0)


def test_a_token_acts_for_its_claimed_tenant(gateway: AuthGateway, issuer: OidcIssuer) -> None:
    with as_openai(gateway, issuer.token(org="org-one", sub="ann")) as one:
        response = one.responses.create(model=MODEL, input="hi [[words:2]]")
        assert one.responses.retrieve(response.id).id == response.id
    with (
        as_openai(gateway, issuer.token(org="org-two", sub="bo")) as two,
        pytest.raises(openai.NotFoundError),
    ):
        two.responses.retrieve(response.id)
    with as_anthropic(gateway, issuer.token(org="org-one")) as claude:
        message = claude.messages.create(
            model=MODEL, max_tokens=10, messages=[{"role": "user", "content": "hi [[words:2]]"}]
        )
        assert message.type == "message"


@pytest.mark.parametrize(
    "bad",
    [
        "expired",
        "wrong audience",
        "alg none",
        "wrong key",
        "no tenant",
        "garbage",
    ],
)
def test_a_bad_token_is_a_401_in_each_frontends_shape(
    gateway: AuthGateway, issuer: OidcIssuer, bad: str
) -> None:
    stranger = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    token = {
        "expired": lambda: issuer.token(exp=1_000_000_000),
        "wrong audience": lambda: issuer.token(aud="another-service"),
        "alg none": lambda: issuer.unsigned_token(),
        "wrong key": lambda: issuer.token(key=stranger),
        "no tenant": lambda: issuer.token(org=None),
        "garbage": lambda: "eyJ.not.a-token",
    }[bad]()

    with as_openai(gateway, token) as client, pytest.raises(openai.AuthenticationError) as refused:
        client.responses.create(model=MODEL, input="hi")
    assert refused.value.status_code == 401
    assert refused.value.code == "invalid_api_key"
    with (
        as_anthropic(gateway, token) as claude,
        pytest.raises(anthropic.AuthenticationError) as denied,
    ):
        claude.messages.create(
            model=MODEL, max_tokens=5, messages=[{"role": "user", "content": "x"}]
        )
    assert denied.value.body["error"]["type"] == "authentication_error"  # type: ignore[index]


def test_a_rotated_key_is_accepted_at_once(gateway: AuthGateway, issuer: OidcIssuer) -> None:
    with as_openai(gateway, issuer.token()) as before:
        before.models.list()
    fetches = issuer.jwks_fetches
    issuer.rotate()

    with as_openai(gateway, issuer.token(sub="after")) as after:
        assert after.models.list().data
    assert issuer.jwks_fetches == fetches + 1


def test_an_issuer_that_is_down_is_a_503_in_each_frontends_shape(
    fake_upstream: str, tmp_path: Path
) -> None:
    with OidcIssuer() as down:
        down.down = True
        database = f"sqlite:///{tmp_path / 'stateway.db'}"
        tables = oidc_tables(down)
        with auth_gateway(tmp_path, fake_upstream, database, tables, NO_COOLDOWN) as gateway:
            token = down.token()
            with as_openai(gateway, token) as client:
                with pytest.raises(openai.InternalServerError) as unavailable:
                    client.responses.create(model=MODEL, input="hi")
                assert unavailable.value.status_code == 503
                assert unavailable.value.code == "identity_provider_unavailable"
                with (
                    as_anthropic(gateway, token) as claude,
                    pytest.raises(anthropic.APIStatusError) as failed,
                ):
                    claude.messages.create(
                        model=MODEL, max_tokens=5, messages=[{"role": "user", "content": "x"}]
                    )
                assert failed.value.status_code == 503
                assert failed.value.body["type"] == "error"  # type: ignore[index]

                down.down = False
                assert client.responses.create(model=MODEL, input="hi [[words:1]]").id
            assert token not in gateway.log.read_text()


EXPIRED = "The token has expired."


async def test_a_websocket_is_closed_at_its_tokens_expiry(
    gateway: AuthGateway, issuer: OidcIssuer
) -> None:
    """The upgrade is authenticated once; at the token's expiry the connection gets the
    401 error frame, in the words an expired token is refused with, and is closed with
    1008, as a revoked API key's is, though no frame comes."""
    expires = int(time.time()) + 3
    token = issuer.token(exp=expires)
    SENT.append(token)
    client = openai.AsyncOpenAI(base_url=gateway.url + "/v1", api_key=token, max_retries=0)
    async with client.responses.connect() as connection:
        await connection.response.create(model=MODEL, input="hi [[words:2]]")
        first = await connection.recv()
        while first.type != "response.completed":
            first = await connection.recv()
        # nothing is sent: the expiry's timer ends it
        refused = await asyncio.wait_for(connection.recv(), 10)
        with pytest.raises(ConnectionClosed) as closed:
            await asyncio.wait_for(connection.recv(), 10)
    assert expires <= time.time() < expires + 1.0
    assert first.response.status == "completed"
    assert refused.type == "error"
    assert (refused.status, refused.error.code) == (401, "invalid_api_key")
    assert refused.error.message == EXPIRED
    assert closed.value.rcvd is not None
    assert (closed.value.rcvd.code, closed.value.rcvd.reason) == (1008, EXPIRED)


async def test_a_steered_response_cut_off_by_its_tokens_expiry_has_no_successor(
    gateway: AuthGateway, issuer: OidcIssuer, fake_upstream: str
) -> None:
    """A steer accepted while the token held, on a response still streaming at its
    expiry: the connection is ended then (the 401 error frame, 1008), the response runs
    on to its end, and the steered input never reaches a model (no successor starts)."""
    expires = int(time.time()) + 3
    token = issuer.token(exp=expires)
    SENT.append(token)
    marker = f"steered-before-expiry-{uuid.uuid4().hex}"
    client = openai.AsyncOpenAI(base_url=gateway.url + "/v1", api_key=token, max_retries=0)
    async with client.responses.connect() as connection:
        # about 6 s of output: it ends after the token's expiry
        await connection.response.create(
            model=MODEL, input="[[slow:300]] [[words:20]]", stream_id="s"
        )
        created = await connection.recv()
        assert created.type == "response.created"
        await connection.response.steer(input=marker, previous_response_id=created.response.id)
        events = [await connection.recv()]
        while events[-1].type != "error":  # within 10 s: before the response's end
            events.append(await asyncio.wait_for(connection.recv(), 10))
        with pytest.raises(ConnectionClosed) as closed:
            await asyncio.wait_for(connection.recv(), 10)
    types = [event.type for event in events]
    assert "response.steer.accepted" in types
    assert "response.completed" not in types  # cut off at the expiry
    refused = events[-1]
    assert (refused.status, refused.error.code, refused.error.message) == (
        401,
        "invalid_api_key",
        EXPIRED,
    )
    assert closed.value.rcvd is not None
    assert closed.value.rcvd.code == 1008
    other = issuer.token()
    SENT.append(other)
    async with openai.AsyncOpenAI(
        base_url=gateway.url + "/v1", api_key=other, max_retries=0
    ) as reader:
        response = await reader.responses.retrieve(created.response.id)
        while response.status in ("queued", "in_progress"):
            await asyncio.sleep(0.2)
            response = await reader.responses.retrieve(created.response.id)
    assert response.status == "completed"  # the run went on; its steer had no successor
    assert fake_requests(fake_upstream, marker) == []


def test_probes_need_no_token(gateway: AuthGateway) -> None:
    assert httpx2.get(gateway.url + "/health").status_code == 200


def test_zz_no_token_reached_the_log(gateway: AuthGateway) -> None:
    assert SENT
    log = gateway.log.read_text()
    for token in SENT:
        assert token not in log
        for part in token.split("."):
            assert len(part) < 8 or part not in log
