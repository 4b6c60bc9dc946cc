"""``[logging]`` and ``[tracing]``: defaults, the file, the environment over it, refusals;
both read at start-up only (a reload reports a change as needing a restart)."""

from __future__ import annotations

from pathlib import Path

import pytest

from stateway.config import ConfigError, Overrides, load_config
from stateway.reload import restart_required


def write(tmp_path: Path, text: str) -> str:
    path = tmp_path / "stateway.toml"
    path.write_text(text)
    return str(path)


def test_text_logs_and_no_tracing_by_default() -> None:
    config = load_config(Overrides(), {})
    assert (config.logging.format, config.logging.level) == ("text", "info")
    assert config.tracing.enabled is False


def test_the_environment_sets_them_over_the_file(tmp_path: Path) -> None:
    path = write(
        tmp_path, '[logging]\nformat = "text"\nlevel = "debug"\n[tracing]\nenabled = false\n'
    )
    env = {"STATEWAY_LOG_FORMAT": "JSON", "STATEWAY_TRACING": "true"}
    config = load_config(Overrides(config=path), env)
    assert (config.logging.format, config.logging.level) == ("json", "debug")
    assert config.tracing.enabled is True
    assert load_config(Overrides(config=path), {}).logging.format == "text"


@pytest.mark.parametrize(
    ("env", "where"),
    [
        ({"STATEWAY_LOG_FORMAT": "xml"}, "logging.format"),
        ({"STATEWAY_LOG_LEVEL": "loud"}, "logging.level"),
        ({"STATEWAY_TRACING": "perhaps"}, "tracing.enabled"),
    ],
)
def test_bad_values_are_refused_by_name(env: dict[str, str], where: str) -> None:
    with pytest.raises(ConfigError, match=where):
        load_config(Overrides(), env)


def test_a_changed_log_format_needs_a_restart() -> None:
    started = load_config(Overrides(), {})
    loaded = load_config(Overrides(), {"STATEWAY_LOG_FORMAT": "json", "STATEWAY_TRACING": "1"})
    assert restart_required(started, loaded) == ("logging.format", "tracing.enabled")
