"""An OpenID Connect issuer on loopback, for tests: its discovery document and JWKS
over plain HTTP, signing keys it can add and rotate, tokens it signs, and a switch that
takes it down (every request answered 503).

It runs in a thread of the test process (``http.server``), so a gateway in a subprocess
and a verifier in process alike can reach it::

    with OidcIssuer() as issuer:
        token = issuer.token(org="acme")            # RS256, signed by the current key
        issuer.rotate()                             # a new key; the old one unpublished
        issuer.down = True
        assert issuer.jwks_fetches == 1
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import json
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from types import TracebackType
from typing import Any

import jwt
from cryptography.hazmat.primitives.asymmetric import ec, rsa
from cryptography.hazmat.primitives.asymmetric.types import PrivateKeyTypes
from jwt.algorithms import ECAlgorithm, RSAAlgorithm

AUDIENCE = "stateway"
TENANT_CLAIM = "org"
JWKS_PATH = "/jwks"
SHUTDOWN_POLL = 0.02
"""Seconds between the server's looks for a shutdown: the wait each issuer's end costs
(``http.server``'s default, half a second, was most of a test's time)."""

SigningKey = rsa.RSAPrivateKey | ec.EllipticCurvePrivateKey


class OidcIssuer:
    def __init__(self) -> None:
        self.down = False
        self.named: str | None = None
        """The issuer its discovery document names, when not its own URL."""
        self.kids_published = True
        """Whether its key set names each key's ``kid`` (RFC 7517 makes it optional)."""
        self.prefix = ""
        """The path its URL ends in (``/realms/acme``: an issuer hosted under a path)."""
        self.redirect_to: str | None = None
        """Where its discovery document's URL redirects (302), when it does."""
        self.discovery_fetches = 0
        self.jwks_fetches = 0
        self.accepted: list[str | None] = []
        """Each request's ``Accept`` header, in order."""
        self._keys: dict[str, SigningKey] = {}
        self._count = 0
        self._lock = threading.Lock()
        self.current = self.add_key()
        self._server = ThreadingHTTPServer(("127.0.0.1", 0), self._handler())
        self._server.daemon_threads = True
        self._thread = threading.Thread(
            target=self._server.serve_forever,
            args=(SHUTDOWN_POLL,),
            daemon=True,
        )

    @property
    def url(self) -> str:
        host, port = self._server.server_address[:2]
        return f"http://{host!s}:{port}{self.prefix}"

    def __enter__(self) -> OidcIssuer:
        self._thread.start()
        return self

    def __exit__(
        self,
        kind: type[BaseException] | None,
        error: BaseException | None,
        trace: TracebackType | None,
    ) -> None:
        self._server.shutdown()
        self._server.server_close()

    def add_key(self, kind: str = "rsa") -> str:
        """Publish a new signing key (``rsa``: RS256, ``ec``: ES256); its kid."""
        private: SigningKey = (
            rsa.generate_private_key(public_exponent=65537, key_size=2048)
            if kind == "rsa"
            else ec.generate_private_key(ec.SECP256R1())
        )
        with self._lock:
            self._count += 1
            kid = f"key-{self._count}"
            self._keys[kid] = private
        return kid

    def rotate(self, kind: str = "rsa") -> str:
        """A new current key; every other key unpublished. Its kid."""
        kid = self.add_key(kind)
        with self._lock:
            self._keys = {kid: self._keys[kid]}
        self.current = kid
        return kid

    def claims(self, **overrides: Any) -> dict[str, Any]:
        now = int(time.time())
        claims: dict[str, Any] = {
            "iss": self.url,
            "aud": AUDIENCE,
            "sub": "user-1",
            TENANT_CLAIM: "acme",
            "iat": now,
            "exp": now + 600,
        }
        claims.update(overrides)
        return {name: value for name, value in claims.items() if value is not None}

    def token(
        self,
        *,
        kid: str | None = None,
        key: PrivateKeyTypes | None = None,
        named: bool = True,
        **claims: Any,
    ) -> str:
        """A token signed by ``kid`` (default: the current key), or by ``key`` (any key,
        published or not) under ``kid``'s name; ``claims`` override the defaults (None
        removes one). ``named=False``: its header names no ``kid``."""
        kid = kid or self.current
        signer = key if key is not None else self._keys[kid]
        alg = "ES256" if isinstance(signer, ec.EllipticCurvePrivateKey) else "RS256"
        headers = {"kid": kid} if named else None
        return jwt.encode(self.claims(**claims), signer, algorithm=alg, headers=headers)

    def unsigned_token(self, **claims: Any) -> str:
        """A token with ``alg: none`` and no signature."""
        return _compact({"alg": "none", "typ": "JWT"}, self.claims(**claims), b"")

    def hmac_token(self, secret: bytes, **claims: Any) -> str:
        """A token signed with HS256 under ``secret`` (say, a public key, to confuse a
        verifier into using it as a shared secret), naming the current key."""
        header = {"alg": "HS256", "typ": "JWT", "kid": self.current}
        signing_input = _signing_input(header, self.claims(**claims))
        signature = hmac.new(secret, signing_input.encode(), hashlib.sha256).digest()
        return signing_input + "." + _b64(signature)

    def public_pem(self) -> bytes:
        from cryptography.hazmat.primitives import serialization

        public = self._keys[self.current].public_key()
        return public.public_bytes(
            serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo
        )

    def jwks(self) -> dict[str, Any]:
        with self._lock:
            keys = list(self._keys.items())
        published = []
        for kid, private in keys:
            if isinstance(private, rsa.RSAPrivateKey):
                jwk = RSAAlgorithm.to_jwk(private.public_key(), as_dict=True)
                jwk["alg"] = "RS256"
            else:
                jwk = ECAlgorithm.to_jwk(private.public_key(), as_dict=True)
                jwk["alg"] = "ES256"
            named = {"kid": kid} if self.kids_published else {}
            published.append({**jwk, **named, "use": "sig"})
        return {"keys": published}

    def discovery(self) -> dict[str, Any]:
        return {
            "issuer": self.named or self.url,
            "jwks_uri": self.url + JWKS_PATH,
            "id_token_signing_alg_values_supported": ["RS256", "ES256"],
        }

    def _handler(self) -> type[BaseHTTPRequestHandler]:
        issuer = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                issuer.accepted.append(self.headers.get("Accept"))
                if issuer.down:
                    self._answer(503, {"error": "down"})
                elif issuer.redirect_to and self.path.endswith("/openid-configuration"):
                    self.send_response(302)
                    self.send_header("Location", issuer.redirect_to)
                    self.send_header("Content-Length", "0")
                    self.end_headers()
                elif self.path == issuer.prefix + "/.well-known/openid-configuration":
                    issuer.discovery_fetches += 1
                    self._answer(200, issuer.discovery())
                elif self.path == issuer.prefix + JWKS_PATH:
                    issuer.jwks_fetches += 1
                    self._answer(200, issuer.jwks())
                else:
                    self._answer(404, {"error": "not found"})

            def _answer(self, status: int, body: dict[str, Any]) -> None:
                data = json.dumps(body).encode()
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def log_message(self, format: str, *args: Any) -> None:
                """Quiet."""

        return Handler


def _b64(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode()


def _signing_input(header: dict[str, Any], claims: dict[str, Any]) -> str:
    return _b64(json.dumps(header).encode()) + "." + _b64(json.dumps(claims).encode())


def _compact(header: dict[str, Any], claims: dict[str, Any], signature: bytes) -> str:
    return _signing_input(header, claims) + "." + _b64(signature)
