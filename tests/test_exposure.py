"""Secure by default: loopback detection, URL transports, and the exposure decision."""

from __future__ import annotations

import pytest

from stateway.exposure import ExposureRefused, check_exposure, check_url_transport, is_loopback


@pytest.mark.parametrize(
    "host", ["127.0.0.1", "127.0.0.2", "::1", "[::1]", "localhost", "LOCALHOST", "ip6-localhost"]
)
def test_loopback_hosts(host: str) -> None:
    assert is_loopback(host)


@pytest.mark.parametrize(
    "host", ["0.0.0.0", "::", "10.0.0.1", "192.168.1.2", "example.com", "localhost.example", ""]
)
def test_other_hosts(host: str) -> None:
    assert not is_loopback(host)


@pytest.mark.parametrize(
    "url", ["https://idp.example", "http://127.0.0.1:9000", "http://localhost/realms/x"]
)
def test_https_anywhere_and_http_on_loopback_are_accepted(url: str) -> None:
    assert check_url_transport(url, "issuer") == url


@pytest.mark.parametrize(
    "url", ["http://idp.example", "ftp://127.0.0.1", "idp.example", "https://"]
)
def test_other_urls_are_refused_naming_the_setting(url: str) -> None:
    with pytest.raises(ValueError, match="issuer must be an https:// URL"):
        check_url_transport(url, "issuer")


def test_a_refused_urls_password_is_not_shown() -> None:
    with pytest.raises(ValueError, match="issuer must be an https:// URL") as refused:
        check_url_transport("http://admin:hunter22@idp.example/realms/x", "issuer")
    assert "hunter22" not in str(refused.value)
    assert "idp.example/realms/x" in str(refused.value)


def test_loopback_needs_no_auth() -> None:
    assert check_exposure("127.0.0.1", auth_configured=False, insecure_no_auth=False) is None


def test_any_address_is_fine_with_auth() -> None:
    assert check_exposure("0.0.0.0", auth_configured=True, insecure_no_auth=False) is None


def test_a_public_address_without_auth_is_refused_naming_auth() -> None:
    with pytest.raises(ExposureRefused) as refused:
        check_exposure("0.0.0.0", auth_configured=False, insecure_no_auth=False)

    assert str(refused.value) == (
        "refusing to serve 0.0.0.0 without auth: anyone who can reach it could use it. "
        "Configure auth ([auth] api_keys = true with keys from `stateway keys create`, "
        "or an [auth.oidc] table), bind a loopback address, or pass --insecure-no-auth "
        "on a trusted network"
    )


def test_insecure_no_auth_allows_it_with_a_warning_about_auth() -> None:
    warning = check_exposure("0.0.0.0", auth_configured=False, insecure_no_auth=True)

    assert warning == (
        "serving 0.0.0.0 without auth (--insecure-no-auth): anyone who can reach it "
        "acts as the default tenant; configure [auth] to require credentials"
    )
