"""``python -m bench.auth``: what authentication adds per request.

Measured in process, on what the authentication middleware runs for each request: the
``Authenticator`` identifying a request's headers (five ordinary headers and the
credential), so that a few microseconds are not lost in the noise of a socket round trip.

- **no auth**: a gateway without ``[auth]`` (every caller the default tenant);
- **API key**: a key found in the key cache (the database asked once per ``key_cache_ttl``);
- **token, remembered**: an OIDC token verified before (a client reusing its token);
- **token, first use**: a new RS256 (and ES256) token each request, against a cached JWKS
  (one signature verification each).

The issuer is the tests' loopback one (``tests/support/oidc_issuer.py``); its JWKS is
fetched once, before timing. The issue's target: at most 0.1 ms with a cached key or key
set.
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import statistics
import time
from collections.abc import Callable

from tests.identity.test_key_cache import Store
from tests.support.oidc_issuer import AUDIENCE, TENANT_CLAIM, OidcIssuer

from stateway.identity.key_cache import KeyCache
from stateway.identity.keys import ApiKey, key_digest, new_key
from stateway.identity.oidc import OidcSettings, OidcVerifier
from stateway.surfaces.auth.authenticator import Authenticator

Headers = list[tuple[bytes, bytes]]
_COMMON: Headers = [
    (b"host", b"127.0.0.1:8080"),
    (b"user-agent", b"OpenAI/Python 3.57.0"),
    (b"accept", b"application/json"),
    (b"content-type", b"application/json"),
    (b"content-length", b"40"),
]


def bearer(credential: str) -> Headers:
    return [*_COMMON, (b"authorization", f"Bearer {credential}".encode())]


async def timed(authenticator: Authenticator, headers: Callable[[], Headers], n: int) -> float:
    """The median microseconds of ``n`` identifications (in batches of 100)."""
    samples = []
    gc.disable()
    try:
        for _ in range(n // 100):
            batch = [headers() for _ in range(100)]
            started = time.perf_counter()
            for one in batch:
                await authenticator.identify(one)
            samples.append((time.perf_counter() - started) / 100 * 1e6)
    finally:
        gc.enable()
    return statistics.median(samples)


async def measure(n: int) -> dict[str, float]:
    store = Store()
    key = new_key()
    await store.add(ApiKey("key_bench", "acme", None, key_digest(key), 0.0))
    keys = Authenticator(keys=KeyCache(store, 60.0))
    results = {"no auth": await timed(Authenticator(), lambda: bearer("sk-test"), n)}
    results["API key"] = await timed(keys, lambda: bearer(key), n)
    with OidcIssuer() as issuer:
        ec = issuer.add_key("ec")
        settings = OidcSettings(issuer.url, AUDIENCE, TENANT_CLAIM)
        tokens = Authenticator(oidc=OidcVerifier(settings))
        remembered = bearer(issuer.token())
        await tokens.identify(remembered)  # the JWKS fetched once
        results["token, remembered"] = await timed(tokens, lambda: remembered, n)
        fresh = iter(range(10**9))
        results["RS256 token, first use"] = await timed(
            tokens, lambda: bearer(issuer.token(sub=f"u{next(fresh)}")), n // 10
        )
        results["ES256 token, first use"] = await timed(
            tokens, lambda: bearer(issuer.token(kid=ec, sub=f"u{next(fresh)}")), n // 10
        )
    return results


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--requests", type=int, default=20_000)
    args = parser.parse_args()
    results = asyncio.run(measure(args.requests))
    print("| identification | median µs per request |\n|---|--:|")
    for name, micros in results.items():
        print(f"| {name} | {micros:.1f} |")


if __name__ == "__main__":
    main()
