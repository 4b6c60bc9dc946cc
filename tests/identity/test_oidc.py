"""OIDC tokens verified against a loopback issuer: what is accepted, what each bad token
gets, key rotation with a rate-limited refetch, and an issuer that is down."""

from __future__ import annotations

import asyncio
import json
import logging
import threading
import time
from collections.abc import Iterator

import pytest
from cryptography.hazmat.primitives.asymmetric import ec, rsa
from jwt.algorithms import ECAlgorithm
from starlette.types import ASGIApp, Receive, Scope, Send

from stateway.core.errors import IdentityUnavailable, Unauthorized
from stateway.identity import oidc
from stateway.identity.oidc import JWKS_MAX_AGE, OidcVerifier
from stateway.identity.oidc_documents import MAX_DOCUMENT
from stateway.identity.oidc_settings import OidcSettings
from tests.support.mcp_server import hanging_server, serve_app, serve_misbehaving
from tests.support.oidc_issuer import AUDIENCE, JWKS_PATH, TENANT_CLAIM, OidcIssuer


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


@pytest.fixture
def issuer() -> Iterator[OidcIssuer]:
    with OidcIssuer() as running:
        yield running


def verifier(
    issuer: OidcIssuer,
    clock: Clock | None = None,
    cooldown: float = 1.0,
    wall: Clock | None = None,
) -> OidcVerifier:
    settings = OidcSettings(issuer.url, AUDIENCE, TENANT_CLAIM, refetch_cooldown=cooldown)
    return OidcVerifier(settings, clock=clock or Clock(), wall=wall or time.time)


async def unavailable(
    caplog: pytest.LogCaptureFixture, oidc: OidcVerifier, token: str
) -> list[str]:
    """What the verifier logged of ``token``, met with :class:`IdentityUnavailable`."""
    with (
        caplog.at_level(logging.WARNING, "stateway.identity.oidc"),
        pytest.raises(IdentityUnavailable),
    ):
        await oidc.verify(token)
    return caplog.messages


async def test_a_valid_token_names_its_tenant_subject_and_expiry(issuer: OidcIssuer) -> None:
    expires = int(time.time()) + 300
    verified = await verifier(issuer).verify(issuer.token(org="acme", sub="ann", exp=expires))

    assert (verified.tenant_id, verified.subject, verified.expires_at) == ("acme", "ann", expires)
    assert (issuer.discovery_fetches, issuer.jwks_fetches) == (1, 1)


async def test_the_key_set_is_fetched_once_for_many_tokens(issuer: OidcIssuer) -> None:
    checking = verifier(issuer)
    for subject in ("a", "b", "c"):
        await checking.verify(issuer.token(sub=subject))

    assert (issuer.discovery_fetches, issuer.jwks_fetches) == (1, 1)


async def test_the_key_set_is_not_fetched_again_before_it_is_old(issuer: OidcIssuer) -> None:
    """Past the refetch cooldown, a known key still serves new tokens until the key set's
    age is up."""
    clock = Clock()
    checking = verifier(issuer, clock, cooldown=1.0)
    await checking.verify(issuer.token(sub="first"))
    clock.now += JWKS_MAX_AGE - 1

    await checking.verify(issuer.token(sub="second"))

    assert issuer.jwks_fetches == 1


async def test_tokens_arriving_together_share_one_fetch(issuer: OidcIssuer) -> None:
    """The first tokens wait for one fetch of the key set, with no cooldown to stop a
    second: the later ones find the keys it fetched."""
    checking = verifier(issuer, cooldown=0.0)

    verified = await asyncio.gather(*(checking.verify(issuer.token(sub=f"u{n}")) for n in range(3)))

    assert [token.subject for token in verified] == ["u0", "u1", "u2"]
    assert issuer.jwks_fetches == 1


async def test_a_subject_of_the_longest_length_is_taken(issuer: OidcIssuer) -> None:
    subject = "s" * oidc.MAX_SUBJECT

    assert (await verifier(issuer).verify(issuer.token(sub=subject))).subject == subject
    with pytest.raises(Unauthorized, match="'sub' claim is not a valid subject"):
        await verifier(issuer).verify(issuer.token(sub=subject + "s"))


async def test_an_elliptic_curve_key_signs_too(issuer: OidcIssuer) -> None:
    kid = issuer.add_key("ec")

    verified = await verifier(issuer).verify(issuer.token(kid=kid, org="ec-org"))

    assert verified.tenant_id == "ec-org"


async def test_keys_of_two_types_under_one_kid_each_check_their_algorithms_tokens(
    issuer: OidcIssuer, monkeypatch: pytest.MonkeyPatch
) -> None:
    """RFC 7517 lets keys of different types share a ``kid`` (equivalent alternatives):
    a token is checked with the one of its own algorithm, whichever is listed first."""
    elliptic = ec.generate_private_key(ec.SECP256R1())
    jwk = ECAlgorithm.to_jwk(elliptic.public_key(), as_dict=True)
    alternative = {**jwk, "kid": issuer.current, "use": "sig", "alg": "ES256"}
    published = issuer.jwks()["keys"]
    monkeypatch.setattr(issuer, "jwks", lambda: {"keys": [*published, alternative]})
    checking = verifier(issuer)

    assert (await checking.verify(issuer.token(key=elliptic, sub="ec"))).subject == "ec"
    assert (await checking.verify(issuer.token(sub="rsa"))).subject == "rsa"


async def test_a_token_naming_no_key_is_checked_with_the_only_published_one(
    issuer: OidcIssuer,
) -> None:
    verified = await verifier(issuer).verify(issuer.token(named=False, sub="no-kid"))

    assert verified.subject == "no-kid"


async def test_a_key_set_naming_no_key_serves_tokens_naming_none(issuer: OidcIssuer) -> None:
    """A provider with one signing key may name it nowhere (``kid`` is optional in a JWK)."""
    issuer.kids_published = False

    verified = await verifier(issuer).verify(issuer.token(named=False, sub="no-kids"))

    assert verified.subject == "no-kids"


async def test_a_token_naming_no_key_is_refused_when_several_are_published(
    issuer: OidcIssuer,
) -> None:
    issuer.add_key()

    with pytest.raises(Unauthorized) as refused:
        await verifier(issuer).verify(issuer.token(named=False))

    assert refused.value.message == (
        "The token is signed with a key the identity provider does not publish."
    )


@pytest.mark.parametrize(
    ("claims", "message"),
    [
        ({"exp": int(time.time()) - 10}, "The token has expired."),
        ({"aud": "someone-else"}, "The token is not meant for this gateway (audience)."),
        ({"iss": "http://127.0.0.1:1"}, "The token was issued by another issuer."),
        ({"exp": None}, "The token is not valid."),
        ({"exp": 10**400}, "The token is not valid."),  # no time: past any float
        ({"sub": None}, "The token is not valid."),
        ({"nbf": int(time.time()) + 3600}, "The token is not valid yet."),
        ({"org": None}, "The token's 'org' claim names no valid tenant."),
        ({"org": "a/b"}, "The token's 'org' claim names no valid tenant."),
        ({"org": ["acme"]}, "The token's 'org' claim names no valid tenant."),
        ({"sub": ""}, "The token's 'sub' claim is not a valid subject."),
    ],
)
async def test_a_bad_token_is_unauthorized(
    issuer: OidcIssuer, claims: dict[str, object], message: str
) -> None:
    with pytest.raises(Unauthorized) as refused:
        await verifier(issuer).verify(issuer.token(**claims))

    assert refused.value.message == message
    assert refused.value.status == 401


@pytest.mark.parametrize("claim", ["iat", "nbf"])
async def test_a_token_from_an_issuer_whose_clock_runs_ahead_is_taken(
    issuer: OidcIssuer, claim: str
) -> None:
    """An issuer's clock a few seconds ahead (or less than one: ``iat`` is in whole
    seconds, rounded down there) dates a token just issued in the future here: it is taken,
    within ``CLOCK_SKEW``."""
    ahead = int(time.time()) + 5

    verified = await verifier(issuer).verify(issuer.token(**{claim: ahead}))

    assert verified.subject == "user-1"


@pytest.mark.parametrize("claim", ["iat", "nbf"])
async def test_a_token_dated_past_the_clock_skew_is_not_valid_yet(
    issuer: OidcIssuer, claim: str
) -> None:
    ahead = int(time.time()) + oidc.CLOCK_SKEW + 60

    with pytest.raises(Unauthorized) as refused:
        await verifier(issuer).verify(issuer.token(**{claim: ahead}))

    assert refused.value.message == "The token is not valid yet."


async def test_the_clock_skew_does_not_extend_a_token(issuer: OidcIssuer) -> None:
    """A token ends at its ``exp``, as its streams are ended then: the skew allowed for
    its start is not added to its end."""
    with pytest.raises(Unauthorized) as refused:
        await verifier(issuer).verify(issuer.token(exp=int(time.time()) - 1))

    assert refused.value.message == "The token has expired."


async def test_alg_none_is_refused_before_any_fetch(issuer: OidcIssuer) -> None:
    with pytest.raises(Unauthorized, match="signing algorithm is not accepted"):
        await verifier(issuer).verify(issuer.unsigned_token())

    assert issuer.jwks_fetches == 0


async def test_hmac_under_the_public_key_is_refused(issuer: OidcIssuer) -> None:
    token = issuer.hmac_token(issuer.public_pem())

    with pytest.raises(Unauthorized, match="signing algorithm is not accepted"):
        await verifier(issuer).verify(token)


@pytest.mark.parametrize("token", ["not-a-token", "a.b.c"])
async def test_a_token_that_is_no_jwt_is_told_so(issuer: OidcIssuer, token: str) -> None:
    with pytest.raises(Unauthorized) as refused:
        await verifier(issuer).verify(token)

    assert refused.value.message == "The bearer token is not a well-formed JWT."


async def test_an_algorithm_not_accepted_is_refused_naming_those_that_are(
    issuer: OidcIssuer,
) -> None:
    with pytest.raises(Unauthorized) as refused:
        await verifier(issuer).verify(issuer.unsigned_token())

    assert refused.value.message == (
        "The token's signing algorithm is not accepted; use one of RS256, RS384, RS512, "
        "PS256, PS384, PS512, ES256, ES384, ES512, EdDSA."
    )


async def test_a_jwks_uri_that_never_answers_is_bounded_by_the_timeout(
    issuer: OidcIssuer, monkeypatch: pytest.MonkeyPatch
) -> None:
    with hanging_server() as url:
        monkeypatch.setattr(issuer, "discovery", lambda: {"issuer": issuer.url, "jwks_uri": url})
        settings = OidcSettings(issuer.url, AUDIENCE, TENANT_CLAIM, timeout=0.2)
        started = time.monotonic()
        with pytest.raises(IdentityUnavailable):
            await OidcVerifier(settings).verify(issuer.token())

    assert time.monotonic() - started < 3


def dripping(body: bytes, pause: float, count: int) -> ASGIApp:
    """An app answering ``body``, then ``count`` spaces (JSON's whitespace) ``pause``
    seconds apart: each read is quick, the whole answer slow."""

    async def app(scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            return
        headers = [(b"content-type", b"application/json")]
        await send({"type": "http.response.start", "status": 200, "headers": headers})
        await send({"type": "http.response.body", "body": body, "more_body": True})
        for _ in range(count):
            await asyncio.sleep(pause)
            await send({"type": "http.response.body", "body": b" ", "more_body": True})
        await send({"type": "http.response.body", "body": b""})

    return app


async def test_a_key_set_sent_slowly_is_bounded_by_the_timeout_in_all(
    issuer: OidcIssuer, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """The timeout bounds a whole fetch, not each read: a provider trickling its key set
    (a byte every 50 ms, for 2 s) does not hold the tokens waiting for it past 0.5 s."""
    app = dripping(json.dumps(issuer.jwks()).encode(), pause=0.05, count=40)
    with serve_app(app, lifespan=False, graceful_shutdown=0) as url:
        document = {"issuer": issuer.url, "jwks_uri": url + "/jwks"}
        monkeypatch.setattr(issuer, "discovery", lambda: document)
        settings = OidcSettings(issuer.url, AUDIENCE, TENANT_CLAIM, timeout=0.5)
        logged = await unavailable(caplog, OidcVerifier(settings), issuer.token())

    assert logged == [
        f"oidc: the identity provider {issuer.url} gave no key set: "
        "the key set took longer than 0.5s"
    ]


async def test_a_key_set_past_the_size_limit_is_unusable(
    issuer: OidcIssuer, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """A key set is a few kilobytes; one past ``MAX_DOCUMENT`` is not read into memory."""
    body = json.dumps(issuer.jwks()).encode() + b" " * MAX_DOCUMENT
    with serve_misbehaving(body=body) as url:
        monkeypatch.setattr(issuer, "discovery", lambda: {"issuer": issuer.url, "jwks_uri": url})
        logged = await unavailable(caplog, verifier(issuer), issuer.token())

    assert logged == [
        f"oidc: the identity provider {issuer.url} gave no key set: "
        f"the key set is larger than {MAX_DOCUMENT} bytes"
    ]


@pytest.mark.parametrize(
    ("key_set", "reason"),
    [
        ({"keys": "none"}, "the key set has no 'keys' list"),
        ({"keys": [{"kty": "RSA", "alg": ["RS256"]}]}, "no signing key of an accepted"),
        ({"keys": [{"kty": "oct", "k": "c2VjcmV0", "alg": "HS256"}]}, "no signing key of an"),
        ({"keys": ["RS256"]}, "the key set has no signing key of an accepted algorithm"),
    ],
)
async def test_a_key_set_with_no_usable_key_makes_tokens_unavailable(
    issuer: OidcIssuer,
    monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
    key_set: dict[str, object],
    reason: str,
) -> None:
    """Whatever the provider's key set holds, a token meets a 503 saying the provider
    could not be used, not a 500; a shared secret (``oct``) is never a key."""
    monkeypatch.setattr(issuer, "jwks", lambda: key_set)

    logged = await unavailable(caplog, verifier(issuer), issuer.token())

    assert reason in logged[0]


async def test_a_discovery_document_redirected_is_not_followed(
    issuer: OidcIssuer, caplog: pytest.LogCaptureFixture
) -> None:
    """The documents are the issuer's own URL's: a redirect (elsewhere, or down to plain
    HTTP) is not followed."""
    issuer.redirect_to = issuer.url + "/elsewhere"

    logged = await unavailable(caplog, verifier(issuer), issuer.token())

    assert logged == [
        f"oidc: the identity provider {issuer.url} gave no key set: "
        "the discovery document was answered with HTTP 302"
    ]


async def test_a_token_signed_with_another_key_under_a_published_kid_is_refused(
    issuer: OidcIssuer,
) -> None:
    stranger = rsa.generate_private_key(public_exponent=65537, key_size=2048)

    with pytest.raises(Unauthorized) as refused:
        await verifier(issuer).verify(issuer.token(key=stranger))

    assert refused.value.message == "The token's signature does not verify."


@pytest.mark.parametrize(
    "token", ["not-a-token", "a.b.c", "e30.e30.", "eyJhbGciOiJSUzI1NiJ9.%%%.sig"]
)
async def test_a_malformed_token_is_unauthorized(issuer: OidcIssuer, token: str) -> None:
    with pytest.raises(Unauthorized):
        await verifier(issuer).verify(token)


async def test_a_rotated_key_is_fetched_on_its_first_token(issuer: OidcIssuer) -> None:
    clock = Clock()
    checking = verifier(issuer, clock, cooldown=1.0)
    await checking.verify(issuer.token())
    issuer.rotate()
    clock.now += 1.0  # the cooldown since the first fetch is over

    verified = await checking.verify(issuer.token(sub="after-rotation"))

    assert verified.subject == "after-rotation"
    assert issuer.jwks_fetches == 2


async def test_unknown_kids_refetch_at_most_once_per_cooldown(issuer: OidcIssuer) -> None:
    clock = Clock()
    checking = verifier(issuer, clock, cooldown=1.0)
    await checking.verify(issuer.token())
    stranger = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    clock.now += 5.0

    for n in range(5):
        with pytest.raises(Unauthorized) as refused:
            await checking.verify(issuer.token(kid=f"made-up-{n}", key=stranger))
        assert refused.value.message == (
            "The token is signed with a key the identity provider does not publish."
        )

    assert issuer.jwks_fetches == 2  # the first token's, and one for the made-up kids
    clock.now += 1.0
    with pytest.raises(Unauthorized):
        await checking.verify(issuer.token(kid="made-up-later", key=stranger))
    assert issuer.jwks_fetches == 3


async def test_a_new_key_within_the_cooldown_waits_for_it(issuer: OidcIssuer) -> None:
    clock = Clock()
    checking = verifier(issuer, clock, cooldown=30.0)
    await checking.verify(issuer.token())
    kid = issuer.add_key()

    with pytest.raises(Unauthorized):
        await checking.verify(issuer.token(kid=kid))
    clock.now += 30.0
    assert (await checking.verify(issuer.token(kid=kid))).tenant_id == "acme"


async def test_the_key_set_is_fetched_again_once_old(issuer: OidcIssuer) -> None:
    clock = Clock()
    checking = verifier(issuer, clock)
    await checking.verify(issuer.token())
    clock.now += JWKS_MAX_AGE

    await checking.verify(issuer.token(sub="another"))

    assert issuer.jwks_fetches == 2


async def test_an_issuer_that_is_down_makes_tokens_unavailable_not_unauthorized(
    issuer: OidcIssuer, caplog: pytest.LogCaptureFixture
) -> None:
    issuer.down = True
    clock = Clock()
    checking = verifier(issuer, clock, cooldown=1.0)

    with (
        caplog.at_level(logging.WARNING, "stateway.identity.oidc"),
        pytest.raises(IdentityUnavailable) as unavailable,
    ):
        await checking.verify(issuer.token())
    assert unavailable.value.status == 503
    assert unavailable.value.message == (
        "The identity provider could not be reached to check the token."
    )
    assert caplog.messages == [
        f"oidc: the identity provider {issuer.url} gave no key set: "
        "the discovery document was answered with HTTP 503"
    ]
    with pytest.raises(IdentityUnavailable):  # within the cooldown: not asked again
        await checking.verify(issuer.token())
    assert issuer.discovery_fetches == 0

    issuer.down = False
    clock.now += 1.0
    assert (await checking.verify(issuer.token())).tenant_id == "acme"


@pytest.mark.parametrize(("cooldown", "wait"), [(2.5, "3"), (0.0, "1"), (1.0, "1")])
async def test_an_issuer_that_is_down_asks_to_wait_out_the_cooldown(
    issuer: OidcIssuer, cooldown: float, wait: str
) -> None:
    """A token sent again before the cooldown passes meets the same failure, the provider
    unasked: the 503 asks that long a wait, in whole seconds (at least one)."""
    issuer.down = True
    with pytest.raises(IdentityUnavailable) as unavailable:
        await verifier(issuer, Clock(), cooldown=cooldown).verify(issuer.token())
    assert unavailable.value.headers == {"Retry-After": wait}


async def test_a_cooldown_past_the_sdks_retries_is_told_not_retried(issuer: OidcIssuer) -> None:
    """A wait longer than the SDKs retry after (the ``anthropic`` SDK, Claude Code's,
    would sleep any through): told, with the answer not to retry, as a long rate limit."""
    issuer.down = True
    with pytest.raises(IdentityUnavailable) as unavailable:
        await verifier(issuer, Clock(), cooldown=600.0).verify(issuer.token())
    assert unavailable.value.headers == {"Retry-After": "600", "x-should-retry": "false"}
    assert not unavailable.value.retryable


async def test_keys_fetched_before_serve_while_the_issuer_is_down(issuer: OidcIssuer) -> None:
    clock = Clock()
    checking = verifier(issuer, clock)
    await checking.verify(issuer.token())
    issuer.down = True
    clock.now += JWKS_MAX_AGE  # due for a refetch, which fails

    assert (await checking.verify(issuer.token(sub="still"))).subject == "still"
    stranger = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    clock.now += 5.0
    with pytest.raises(IdentityUnavailable):  # an unknown kid cannot be looked up
        await checking.verify(issuer.token(kid="new", key=stranger))


async def test_a_refetch_failing_slowly_is_not_repeated_by_the_tokens_it_kept_waiting(
    issuer: OidcIssuer, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The cooldown runs from the end of a failed fetch: one that took longer than the
    cooldown does not send each token that waited for it to fetch again in turn (a
    provider that answers slowly would hold every token for one fetch apiece)."""
    clock = Clock()
    checking = verifier(issuer, clock, cooldown=1.0)
    await checking.verify(issuer.token())
    clock.now += JWKS_MAX_AGE  # due for a refetch

    def slow_and_empty() -> dict[str, object]:
        clock.now += 5.0  # the fetch takes longer than the cooldown, then fails
        return {"keys": []}

    monkeypatch.setattr(issuer, "jwks", slow_and_empty)
    verified = await asyncio.gather(*(checking.verify(issuer.token(sub=f"u{n}")) for n in range(3)))

    assert [token.subject for token in verified] == ["u0", "u1", "u2"]
    assert issuer.jwks_fetches == 2


async def test_a_known_key_serves_while_the_key_set_is_fetched_again(
    issuer: OidcIssuer, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A key set due for a refetch keeps serving the keys it holds to the tokens arriving
    while the refetch is under way: a provider slow to answer holds up one token (the
    one that asked), not every token until it answers."""
    clock = Clock()
    settings = OidcSettings(issuer.url, AUDIENCE, TENANT_CLAIM, timeout=30.0)
    checking = OidcVerifier(settings, clock=clock)
    await checking.verify(issuer.token())
    clock.now += JWKS_MAX_AGE  # due for a refetch
    entered, release = threading.Event(), threading.Event()
    key_set = issuer.jwks()

    def held() -> dict[str, object]:
        entered.set()
        release.wait(30)
        return key_set

    monkeypatch.setattr(issuer, "jwks", held)
    first = asyncio.create_task(checking.verify(issuer.token(sub="first")))
    await asyncio.to_thread(entered.wait, 30)  # the refetch is under way

    assert (await checking.verify(issuer.token(sub="second"))).subject == "second"
    assert not first.done()
    release.set()
    assert (await first).subject == "first"


async def test_a_discovery_document_naming_another_issuer_is_unusable(
    issuer: OidcIssuer,
) -> None:
    issuer.named = "http://127.0.0.1:1"

    with pytest.raises(IdentityUnavailable):
        await verifier(issuer).verify(issuer.token())
    assert issuer.jwks_fetches == 0


@pytest.mark.parametrize(("configured", "named"), [("/", ""), ("", "/")])
async def test_an_issuer_is_the_same_with_or_without_a_trailing_slash(
    issuer: OidcIssuer, configured: str, named: str
) -> None:
    """The discovery document is under the issuer's URL less its trailing slash, and may
    spell the issuer either way; a token's ``iss`` is as the document spells it."""
    issuer.prefix = "/realms/acme"
    issuer.named = issuer.url + named
    settings = OidcSettings(issuer.url + configured, AUDIENCE, TENANT_CLAIM)

    verified = await OidcVerifier(settings).verify(issuer.token(iss=issuer.url + named))

    assert verified.subject == "user-1"
    assert issuer.discovery_fetches == 1


@pytest.mark.parametrize(
    ("document", "reason"),
    [
        (["not", "an", "object"], "the discovery document is not a JSON object"),
        ({"issuer": "URL"}, "the discovery document has no jwks_uri"),
        ({"issuer": "http://127.0.0.1:1"}, "the discovery document names another issuer: "),
    ],
)
async def test_an_unusable_discovery_document_is_logged_saying_why(
    issuer: OidcIssuer,
    monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
    document: object,
    reason: str,
) -> None:
    if isinstance(document, dict):
        document = {
            name: issuer.url if value == "URL" else value for name, value in document.items()
        }
    monkeypatch.setattr(issuer, "discovery", lambda: document)

    logged = await unavailable(caplog, verifier(issuer), issuer.token())

    assert logged[0].startswith(
        f"oidc: the identity provider {issuer.url} gave no key set: {reason}"
    )


async def test_a_provider_that_never_answers_is_bounded_by_the_timeout(
    issuer: OidcIssuer,
) -> None:
    with hanging_server() as url:
        checking = OidcVerifier(OidcSettings(url, AUDIENCE, TENANT_CLAIM, timeout=0.2))
        started = time.monotonic()
        with pytest.raises(IdentityUnavailable):
            await checking.verify(issuer.token())

    assert time.monotonic() - started < 3


async def test_a_jwks_uri_over_plain_http_elsewhere_than_loopback_is_unusable(
    issuer: OidcIssuer, monkeypatch: pytest.MonkeyPatch
) -> None:
    document = {"issuer": issuer.url, "jwks_uri": "http://idp.example/jwks"}
    monkeypatch.setattr(issuer, "discovery", lambda: document)

    with pytest.raises(IdentityUnavailable):
        await verifier(issuer).verify(issuer.token())


async def test_a_remembered_token_still_expires(issuer: OidcIssuer) -> None:
    wall = Clock()
    wall.now = float(int(time.time()))
    checking = verifier(issuer, wall=wall)
    token = issuer.token(exp=int(wall.now) + 60)  # expired at exactly that second
    await checking.verify(token)
    assert (await checking.verify(token)).subject == "user-1"  # remembered

    wall.now += 60
    with pytest.raises(Unauthorized) as refused:
        await checking.verify(token)
    assert refused.value.message == "The token has expired."


async def test_a_fetch_of_the_key_set_forgets_the_verified_tokens(issuer: OidcIssuer) -> None:
    clock = Clock()
    checking = verifier(issuer, clock, cooldown=1.0)
    old = issuer.token()
    await checking.verify(old)
    issuer.rotate()  # the old key is no longer published
    clock.now += 1.0
    await checking.verify(issuer.token(sub="new"))  # fetches the new key set

    with pytest.raises(Unauthorized, match="does not publish"):
        await checking.verify(old)


async def test_the_verified_tokens_remembered_are_bounded(
    issuer: OidcIssuer, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Each distinct token is remembered until it expires: past ``MAX_VERIFIED`` of them,
    the oldest is forgotten (and checked again if it comes back)."""
    monkeypatch.setattr(oidc, "MAX_VERIFIED", 2)
    checking = verifier(issuer)
    for n in range(5):
        await checking.verify(issuer.token(sub=f"user-{n}"))
    assert len(checking._verified) == 2


async def test_a_key_set_moved_elsewhere_is_found_by_discovering_it_again(
    issuer: OidcIssuer, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A provider moving its key set (a new ``jwks_uri``, the old one gone) is followed
    once the cooldown lets a fetch through: a failed fetch of the key set reads the
    discovery document again, rather than the URL it named once, for the process's life."""
    clock = Clock()
    checking = verifier(issuer, clock, cooldown=1.0)
    moved = {"issuer": issuer.url, "jwks_uri": issuer.url + "/gone"}
    monkeypatch.setattr(issuer, "discovery", lambda: moved)
    with pytest.raises(IdentityUnavailable):
        await checking.verify(issuer.token())

    moved["jwks_uri"] = issuer.url + JWKS_PATH
    clock.now += 1.0

    assert (await checking.verify(issuer.token())).tenant_id == "acme"


async def test_a_key_set_that_is_not_json_is_unusable(
    issuer: OidcIssuer, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    with serve_misbehaving(body=b"<html>sign in</html>", content_type="text/html") as url:
        monkeypatch.setattr(issuer, "discovery", lambda: {"issuer": issuer.url, "jwks_uri": url})
        logged = await unavailable(caplog, verifier(issuer), issuer.token())

    assert logged == [
        f"oidc: the identity provider {issuer.url} gave no key set: the key set is not JSON"
    ]


async def test_a_key_set_that_cannot_be_reached_says_so(
    issuer: OidcIssuer, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    gone = {"issuer": issuer.url, "jwks_uri": "http://127.0.0.1:1/jwks"}  # nothing listens
    monkeypatch.setattr(issuer, "discovery", lambda: gone)

    logged = await unavailable(caplog, verifier(issuer), issuer.token())

    assert logged[0].startswith(
        f"oidc: the identity provider {issuer.url} gave no key set: "
        "the key set could not be fetched: Cannot connect to host 127.0.0.1:1"
    )


async def test_the_documents_are_asked_for_as_json(issuer: OidcIssuer) -> None:
    await verifier(issuer).verify(issuer.token())

    assert issuer.accepted == ["application/json", "application/json"]
