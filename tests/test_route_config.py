"""``[[routes]]``, ``[aliases]`` and ``[health]``: accepted, and each mistake named."""

from __future__ import annotations

from pathlib import Path

import pytest

from stateway.config import ConfigError, Overrides, load_config

BACKENDS = """
[[backends]]
name = "a"
url = "http://a/v1"
[[backends]]
name = "b"
url = "http://b/v1"
api = "responses"
"""

ROUTE = """
[aliases]
"smart" = "assistant"
[health]
failure_threshold = 2
cooldown = 1.5
[[routes]]
name = "assistant"
affinity = "none"
[[routes.candidates]]
backend = "a"
model = "a-model"
weight = 3
capabilities = { images = false, context_window = 8192 }
[[routes.candidates]]
backend = "b"
model = "b-model"
priority = 1
"""


def load(tmp_path: Path, text: str) -> object:
    path = tmp_path / "stateway.toml"
    path.write_text(text)
    return load_config(Overrides(config=str(path)), {})


def test_routes_aliases_and_health_load(tmp_path: Path) -> None:
    config = load(tmp_path, BACKENDS + ROUTE)
    [assistant] = config.routes  # type: ignore[attr-defined]
    a, b = assistant.candidates
    assert (a.backend, a.model, a.weight, a.priority) == ("a", "a-model", 3, 0)
    assert (a.capabilities.images, a.capabilities.context_window) == (False, 8192)
    assert (b.weight, b.priority, b.capabilities.images) == (1, 1, True)
    assert assistant.affinity == "none"
    assert config.aliases == {"smart": "assistant"}  # type: ignore[attr-defined]
    assert config.health.failure_threshold == 2  # type: ignore[attr-defined]
    assert config.catch_all_backends == []  # type: ignore[attr-defined]


def test_upstream_flag_is_one_catch_all_route(tmp_path: Path) -> None:
    path = tmp_path / "stateway.toml"
    path.write_text(BACKENDS + ROUTE)
    config = load_config(Overrides(config=str(path), upstream="http://c/v1"), {})
    assert [b.name for b in config.catch_all_backends] == ["default"]
    assert config.routes == []
    assert config.aliases == {}


def test_a_file_without_backends_keeps_its_routes_and_aliases(tmp_path: Path) -> None:
    """Over the embedded default upstream (no ``[[backends]]``, no ``--upstream``) the
    file's aliases apply and its routes are checked, not silently dropped."""
    config = load(tmp_path, '[aliases]\n"smart" = "qwen3-8b"\n')
    assert config.aliases == {"smart": "qwen3-8b"}  # type: ignore[attr-defined]
    assert [b.name for b in config.catch_all_backends] == ["default"]  # type: ignore[attr-defined]
    with pytest.raises(ConfigError, match="unknown backend 'a'"):
        load(tmp_path, ROUTE)


@pytest.mark.parametrize(
    ("change", "named"),
    [
        (('backend = "b"', 'backend = "nope"'), "unknown backend 'nope'"),
        (("weight = 3", "weight = 0"), "weight"),
        (
            ('"smart" = "assistant"', '"smart" = "smarter"\n"smarter" = "smart"'),
            "alias 'smart': cycle smart -> smarter -> smart",
        ),
        (('"smart" = "assistant"', '"smart" = "missing"'), "unknown target 'missing'"),
        (
            ('"smart" = "assistant"', '"assistant" = "assistant"'),
            "alias 'assistant': the name is also served by route 'assistant'",
        ),
        (('affinity = "none"', 'affinity = "sticky"'), "affinity"),
        (("priority = 1", "priority = 1\nspeed = 2"), "speed"),
    ],
)
def test_each_mistake_is_rejected_naming_the_value(
    tmp_path: Path, change: tuple[str, str], named: str
) -> None:
    with pytest.raises(ConfigError) as rejected:
        load(tmp_path, BACKENDS + ROUTE.replace(*change))
    assert named in str(rejected.value)


def test_an_alias_may_name_any_model_a_catch_all_backend_serves(tmp_path: Path) -> None:
    catch_all = '[[backends]]\nname = "c"\nurl = "http://c/v1"\n'
    config = load(tmp_path, catch_all + '[aliases]\n"gpt-4o" = "Qwen/Qwen3-8B"\n')
    assert config.aliases == {"gpt-4o": "Qwen/Qwen3-8B"}  # type: ignore[attr-defined]


def test_a_name_served_twice_and_two_defaults_are_rejected(tmp_path: Path) -> None:
    twice = BACKENDS.replace('url = "http://a/v1"', 'url = "http://a/v1"\nmodels = ["assistant"]')
    with pytest.raises(ConfigError, match="also served by backend 'a'"):
        load(tmp_path, twice + ROUTE)
    second = ROUTE + '[[routes]]\nname = "other"\ndefault = true\n'
    second += '[[routes.candidates]]\nbackend = "a"\nmodel = "x"\n'
    doubled = second.replace('affinity = "none"', 'affinity = "none"\ndefault = true')
    with pytest.raises(
        ConfigError, match=r"only one route may be the default; these are: assistant, other$"
    ):
        load(tmp_path, BACKENDS + doubled)
    catch_all = BACKENDS + '[[backends]]\nname = "c"\nurl = "http://c/v1"\n' + second
    with pytest.raises(ConfigError, match="backend 'c' also serves every model"):
        load(tmp_path, catch_all)


def test_candidates_must_offer_the_same_gateway_tools(tmp_path: Path) -> None:
    tools = 'gateway_tools = [{type = "mcp", server_label = "calc", server_url = "http://m"}]\n'
    text = BACKENDS.replace('api = "responses"\n', 'api = "responses"\n' + tools) + ROUTE
    with pytest.raises(ConfigError, match="different gateway_tools"):
        load(tmp_path, text)
