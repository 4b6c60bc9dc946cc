"""What a credential proves: API keys (unknown, revoked, expired, cached), the admin
credential, no auth configured, and expiry re-checked later (ending a connection)."""

from __future__ import annotations

from dataclasses import replace

import pytest

from stateway.core.errors import CredentialRevoked, Forbidden, Unauthorized
from stateway.core.principal import Credential, Principal
from stateway.identity.key_cache import KeyCache
from stateway.identity.keys import ApiKey, key_digest, new_key
from stateway.identity.oidc import VerifiedToken
from stateway.surfaces.auth.authenticator import (
    ANONYMOUS,
    IDENTITY,
    Authenticator,
    Identity,
    current_principal,
    principal_of,
)
from tests.identity.test_key_cache import Clock, Store

ADMIN = "admin-secret"


def bearer(credential: str) -> list[tuple[bytes, bytes]]:
    return [(b"authorization", f"Bearer {credential}".encode())]


async def keyed(store: Store, tenant: str = "acme", **fields: float) -> tuple[str, ApiKey]:
    key = new_key()
    record = replace(ApiKey(f"key_{tenant}", tenant, None, key_digest(key), 0.0), **fields)
    await store.add(record)
    return key, record


def with_keys(store: Store, clock: Clock | None = None, now: float = 100.0) -> Authenticator:
    cache = KeyCache(store, 2.0, clock=clock or Clock())
    return Authenticator(keys=cache, admin_key=ADMIN, clock=lambda: now)


async def test_a_key_acts_for_its_tenant_as_its_id() -> None:
    store = Store()
    key, record = await keyed(store, expires_at=500.0)

    identity = await with_keys(store).identify(bearer(key))

    principal = Principal("acme", record.id, Credential.API_KEY)
    assert identity == Identity(
        principal,
        authenticated=True,
        expires_at=500.0,
    )
    assert identity.expired == "This API key has expired."  # its words once past its expiry
    assert principal.scope == record.id  # as before tokens were set apart


async def test_a_keys_connection_is_checked_again_as_often_as_configured() -> None:
    store = Store()
    key, _ = await keyed(store)
    authenticator = Authenticator(keys=KeyCache(store, 2.0, clock=Clock()), recheck_every=0.5)

    identity = await authenticator.identify(bearer(key))

    assert identity.recheck is not None
    assert identity.recheck_every == 0.5


class Verifier:
    """An identity provider that vouches for every token."""

    async def verify(self, token: str) -> VerifiedToken:
        return VerifiedToken("acme", f"user of {token}", 500.0)


async def test_a_token_acts_for_its_tenant_claim_as_its_subject_until_it_expires() -> None:
    authenticator = Authenticator(oidc=Verifier())  # type: ignore[arg-type]

    identity = await authenticator.identify(bearer("a.b.c"))

    assert identity == Identity(
        Principal("acme", "user of a.b.c", Credential.TOKEN),
        authenticated=True,
        expires_at=500.0,
    )
    assert identity.expired == "The token has expired."
    assert identity.recheck is None  # nothing to revoke: only its expiry ends it


async def test_with_tokens_only_a_key_is_unknown() -> None:
    authenticator = Authenticator(oidc=Verifier())  # type: ignore[arg-type]

    with pytest.raises(Unauthorized) as refused:
        await authenticator.identify(bearer(new_key()))

    assert refused.value.message == "Incorrect API key provided."


async def test_x_api_key_is_accepted_as_well() -> None:
    store = Store()
    key, _ = await keyed(store)

    identity = await with_keys(store).identify([(b"x-api-key", key.encode())])

    assert identity.principal == Principal("acme", "key_acme", Credential.API_KEY)


@pytest.mark.parametrize(
    ("fields", "message"),
    [
        ({"revoked_at": 50.0}, "This API key has been revoked."),
        ({"expires_at": 100.0}, "This API key has expired."),
    ],
)
async def test_a_revoked_or_expired_key_is_unauthorized(
    fields: dict[str, float], message: str
) -> None:
    store = Store()
    key, _ = await keyed(store, **fields)

    with pytest.raises(Unauthorized) as refused:
        await with_keys(store).identify(bearer(key))

    assert refused.value.message == message


@pytest.mark.parametrize("credential", ["sk-sw-" + "A" * 43, "sk-test", "x.y", "a.b.c"])
async def test_an_unknown_key_is_unauthorized(credential: str) -> None:
    with pytest.raises(Unauthorized) as refused:
        await with_keys(Store()).identify(bearer(credential))

    assert refused.value.message == "Incorrect API key provided."
    assert refused.value.to_dict()["code"] == "invalid_api_key"


async def test_no_credential_is_unauthorized_when_auth_is_configured() -> None:
    with pytest.raises(Unauthorized, match="Missing credentials"):
        await with_keys(Store()).identify([])


async def test_a_revocation_reaches_a_cached_key_after_the_ttl() -> None:
    store, clock = Store(), Clock()
    key, record = await keyed(store)
    authenticator = with_keys(store, clock)
    await authenticator.identify(bearer(key))
    store.keys[record.digest] = replace(record, revoked_at=1.0)

    await authenticator.identify(bearer(key))  # cached: still accepted
    clock.now = 2.0
    with pytest.raises(Unauthorized, match="revoked"):
        await authenticator.identify(bearer(key))


async def test_a_connection_sees_its_key_revoked_after_the_ttl() -> None:
    """What a WebSocket session asks before each request frame: its key, checked again."""
    store, clock = Store(), Clock()
    key, record = await keyed(store)
    scope = {IDENTITY: await with_keys(store, clock).identify(bearer(key))}
    store.keys[record.digest] = replace(record, revoked_at=1.0)

    assert await current_principal(scope) == Principal(
        "acme", record.id, Credential.API_KEY
    )  # cached
    clock.now = 2.0
    with pytest.raises(CredentialRevoked, match="revoked"):  # its connection is closed
        await current_principal(scope)
    del store.keys[record.digest]
    clock.now = 4.0
    with pytest.raises(CredentialRevoked, match="Incorrect API key"):
        await current_principal(scope)


async def test_without_auth_every_caller_is_the_default_tenant_whatever_it_sends() -> None:
    authenticator = Authenticator(admin_key=ADMIN)

    assert not authenticator.required
    for headers in ([], bearer("sk-test"), [(b"authorization", b"Basic x")]):
        assert await authenticator.identify(headers) == ANONYMOUS


async def test_the_admin_credential_opens_the_admin_routes_and_no_tenant() -> None:
    store = Store()
    identity = await with_keys(store).identify([(b"x-api-key", ADMIN.encode())])

    assert identity == Identity(None, admin=True, authenticated=True)
    with pytest.raises(Forbidden):
        principal_of({IDENTITY: identity})


async def test_without_auth_the_admin_credential_acts_for_the_default_tenant() -> None:
    identity = await Authenticator(admin_key=ADMIN).identify(bearer(ADMIN))

    assert identity == Identity(Principal(subject="admin"), admin=True, authenticated=True)
    assert principal_of({IDENTITY: identity}).tenant_id == "default"


async def test_a_principal_is_refused_once_its_credential_expired() -> None:
    """In the words of its refusal at admission, as the error that ends its connection."""
    token = Identity(Principal("t", "s"), authenticated=True, expires_at=150.0)
    key = replace(token, principal=Principal("t", "s", Credential.API_KEY))

    assert await current_principal({IDENTITY: token}, now=149.9) == Principal("t", "s")
    assert await current_principal({IDENTITY: ANONYMOUS}, now=1e12) == Principal()
    for identity, words in ((token, "The token has expired."), (key, "This API key has expired.")):
        with pytest.raises(CredentialRevoked) as expired:
            await current_principal({IDENTITY: identity}, now=150.0)
        assert (expired.value.code, expired.value.message) == ("invalid_api_key", words)


async def test_without_auth_or_an_admin_key_any_credential_is_ignored() -> None:
    """Nothing is read of the headers then (no credential could change the answer)."""
    authenticator = Authenticator()
    twice = [(b"authorization", b"Bearer a"), (b"authorization", b"Bearer b")]
    for headers in ([], bearer("sk-test"), [(b"authorization", b"Basic x")], twice):
        assert await authenticator.identify(headers) == ANONYMOUS
