"""The ``[auth]`` section: when auth counts as configured, and what is refused."""

from __future__ import annotations

from pathlib import Path

import pytest

from stateway.config import Config, ConfigError, Overrides, load_config
from stateway.reload import restart_required

EMPTY_ENV: dict[str, str] = {}


def loaded(tmp_path: Path, text: str) -> Config:
    path = tmp_path / "stateway.toml"
    path.write_text(text)
    return load_config(Overrides(config=str(path)), EMPTY_ENV)


def test_without_an_auth_section_auth_is_not_configured(tmp_path: Path) -> None:
    config = load_config(Overrides(), EMPTY_ENV)

    assert not config.auth.configured
    assert not config.auth.api_keys
    assert config.auth.oidc is None


def test_api_keys_configure_auth(tmp_path: Path) -> None:
    config = loaded(tmp_path, "[auth]\napi_keys = true\n")

    assert config.auth.configured


def test_an_oidc_table_configures_auth_with_its_names(tmp_path: Path) -> None:
    text = (
        "[auth.oidc]\nissuer = 'https://idp.example'\naudience = 'stateway'\n"
        "tenant_claim = 'org'\njwks_refetch_cooldown = 2.5\n"
    )
    config = loaded(tmp_path, text)

    oidc = config.auth.oidc
    assert config.auth.configured
    assert (oidc.issuer, oidc.audience, oidc.tenant_claim) == (
        "https://idp.example",
        "stateway",
        "org",
    )
    assert oidc.settings.refetch_cooldown == 2.5


@pytest.mark.parametrize(
    ("text", "where"),
    [
        (
            "[auth.oidc]\nissuer = 'http://idp.example'\naudience = 'a'\ntenant_claim = 'org'\n",
            "issuer",
        ),
        ("[auth.oidc]\nissuer = 'https://idp.example'\ntenant_claim = 'org'\n", "audience"),
        ("[auth.oidc]\nissuer = 'https://idp.example'\naudience = 'a'\n", "tenant_claim"),
        (
            "[auth.oidc]\nissuer = 'https://i.example'\naudience = 'a'\ntenant_claim = 'o'\n"
            "jwks_refetch_cooldown = -1\n",
            "jwks_refetch_cooldown",
        ),
        (
            "[auth.oidc]\nissuer = 'https://i.example'\naudience = 'a'\ntenant_claim = 'o'\n"
            "jwks_refetch_cooldown = 0\n",
            "jwks_refetch_cooldown",
        ),
        (
            "[auth.oidc]\nissuer = 'https://i.example'\naudience = 'a'\ntenant_claim = 'o'\n"
            "jwks_refetch_cooldown = 0.5\n",
            "jwks_refetch_cooldown",
        ),
        ("[auth]\napi_keys = 'maybe'\n", "api_keys"),
        ("[auth]\nkeys = true\n", "keys"),
    ],
)
def test_a_bad_auth_section_is_refused_naming_the_setting(
    tmp_path: Path, text: str, where: str
) -> None:
    with pytest.raises(ConfigError, match=f"auth.*{where}"):
        loaded(tmp_path, text)


def test_changing_auth_needs_a_restart(tmp_path: Path) -> None:
    before = load_config(Overrides(), EMPTY_ENV)
    after = loaded(tmp_path, "[auth]\napi_keys = true\n")

    assert restart_required(before, after) == ("auth.api_keys",)
