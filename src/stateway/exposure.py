"""Who can reach the gateway: whether an address is loopback, and whether serving
beyond loopback is allowed.

Secure by default: without auth configured (``[auth] api_keys = true`` or an
``[auth.oidc]`` table) the gateway binds loopback addresses only. Binding any other
address without auth is refused at start-up unless ``--insecure-no-auth`` says the
network is trusted, which is then logged as a warning. Letting any web page call it
(``[server] cors_origins = ["*"]``) without auth is warned of too: a page a browser
opens reaches a loopback gateway.
"""

from __future__ import annotations

import ipaddress
from collections.abc import Collection
from urllib.parse import urlsplit

from stateway.redaction import masked_url

LOOPBACK_NAMES = frozenset({"localhost", "localhost.", "ip6-localhost"})


def is_loopback(host: str) -> bool:
    """Whether ``host`` (an address or a name, IPv6 in brackets or not) is loopback;
    a name other than ``localhost`` is not (it may resolve anywhere)."""
    name = host.strip().removeprefix("[").removesuffix("]").lower()
    if name in LOOPBACK_NAMES:
        return True
    try:
        return ipaddress.ip_address(name).is_loopback
    except ValueError:
        return False


def check_url_transport(url: str, what: str) -> str:
    """``url`` when it is ``https://``, or ``http://`` on a loopback host; else
    :class:`ValueError` naming ``what``."""
    parts = urlsplit(url)
    if parts.scheme == "https" and parts.hostname:
        return url
    if parts.scheme == "http" and parts.hostname and is_loopback(parts.hostname):
        return url
    shown = masked_url(url)  # an issuer's or a JWKS URL's password, if it has one
    raise ValueError(f"{what} must be an https:// URL (plain http:// only on loopback): {shown}")


class ExposureRefused(Exception):
    """Serving this address without auth is not allowed; the message says what to do."""


def check_exposure(host: str, auth_configured: bool, insecure_no_auth: bool) -> str | None:
    """None when serving ``host`` is fine as it is; a warning to log when it is allowed
    only by ``--insecure-no-auth``. Raises :class:`ExposureRefused` otherwise."""
    if auth_configured or is_loopback(host):
        return None
    if insecure_no_auth:
        return (
            f"serving {host} without auth (--insecure-no-auth): anyone who can reach it "
            "acts as the default tenant; configure [auth] to require credentials"
        )
    raise ExposureRefused(
        f"refusing to serve {host} without auth: anyone who can reach it could use it. "
        "Configure auth ([auth] api_keys = true with keys from `stateway keys create`, "
        "or an [auth.oidc] table), bind a loopback address, or pass --insecure-no-auth "
        "on a trusted network"
    )


def cors_warning(origins: Collection[str], auth_configured: bool) -> str | None:
    """A warning to log when any web page may call the gateway without auth; else None."""
    if "*" not in origins or auth_configured:
        return None
    return (
        'cors_origins = ["*"] without auth: any web page a browser opens may call the '
        "gateway as the default tenant; list the pages' origins, or configure [auth]"
    )
