"""The reference stays true to the code. The configuration's: README's example files load
as they are (a renamed or removed key is refused there as in a user's file), every setting
the models take is documented in README or docs/, every default a settings table gives
is the code's, every ``STATEWAY_*`` variable README's table lists sets the one setting its
row names (and the one it would be without it: the documented default), as do those of
the settings tables' ``env var`` columns, while every variable the code reads has a row
there. The observability's: README's metrics table is what ``GET /metrics`` exposes
(names, types, labels, outcomes), and every error code a table gives is one of the
code's. The command line's: README's synopsis shows each command's options, no more."""

from __future__ import annotations

import base64
import re
import tomllib
import typing
from pathlib import Path
from typing import Any

import pytest
from pydantic import BaseModel

from stateway.config import Config

ROOT = Path(__file__).resolve().parent.parent
README = (ROOT / "README.md").read_text(encoding="utf-8")
DOCS = README + "".join(
    path.read_text(encoding="utf-8")
    for path in sorted((ROOT / "docs").glob("*.md"))
    if path.name != "benchmarks.md"  # measurements of their day, not a reference
)
KEY = base64.b64encode(bytes(32)).decode()


def _examples() -> list[dict[str, Any]]:
    """README's TOML blocks that are gateway configuration (not a client's, not a
    fragment of a table declared elsewhere)."""
    blocks = re.findall(r"```toml\n(.*?)```", README, re.DOTALL)
    files = [tomllib.loads(block.replace('"…"', f'"{KEY}"')) for block in blocks]
    return [data for data in files if "server" in data or isinstance(data.get("routes"), list)]


@pytest.mark.parametrize("data", _examples(), ids=lambda data: "+".join(data))
def test_readmes_example_configuration_loads(data: dict[str, Any]) -> None:
    if "backends" not in data:  # a routes example names its candidates' backends
        named = {c["backend"] for route in data["routes"] for c in route["candidates"]}
        data["backends"] = [{"name": name, "url": "http://127.0.0.1:8000/v1"} for name in named]
    Config.model_validate(data)


def _settings(model: type[BaseModel], prefix: str = "") -> list[str]:
    """Every setting's dotted name, nested tables' included."""
    names = []
    for name, field in model.model_fields.items():
        names.append(prefix + name)
        for kind in _kinds(field.annotation):
            if isinstance(kind, type) and issubclass(kind, BaseModel):
                names += _settings(kind, f"{prefix}{name}.")
    return names


def _kinds(annotation: object) -> list[object]:
    """``annotation`` and what it is made of (``X | None``, ``dict[str, X]``, ...)."""
    found, pending = [], [annotation]
    while pending:
        kind = pending.pop()
        found.append(kind)
        pending += typing.get_args(kind)
    return found


@pytest.mark.parametrize("setting", _settings(Config))
def test_every_setting_is_documented(setting: str) -> None:
    key = setting.rsplit(".", 1)[-1]
    assert re.search(rf"\b{key}\b", DOCS), f"{setting} is in no README or docs/ page"


# The reference's tables: each documented default is the code's, each documented variable
# sets the setting it names, and each variable the code reads has a row.

MIB = 1024 * 1024
_UNITS = {"KiB": 1024, "MiB": MIB, "s": 1}


def _tables(text: str) -> list[tuple[str, list[list[str]]]]:
    """Each Markdown table as (the text before it, its rows of cells; the header first)."""
    tables, lines = [], text.splitlines()
    index = 0
    while index < len(lines):
        if lines[index].startswith("|") and index + 1 < len(lines) and "---" in lines[index + 1]:
            start = index
            rows = []
            while index < len(lines) and lines[index].startswith("|"):
                if "---" not in lines[index]:
                    rows.append(_cells(lines[index]))
                index += 1
            tables.append(("\n".join(lines[:start]), rows))
        index += 1
    return tables


def _cells(line: str) -> list[str]:
    """A table row's cells: split at each ``|`` standing apart (an empty cell included;
    ``a|b`` inside a cell is text)."""
    return [cell.strip() for cell in re.split(r"(?:^|\s)\|(?=\s|$)", line.strip())[1:-1]]


def _literal(cell: str) -> object:
    """A documented default as a value: ``60``, ``12 MiB``, ``false``, ``"never"``;
    None for a description (``none``, ``the vendor's API``, ...)."""
    cell = cell.replace("`", "").strip()
    if match := re.fullmatch(r"(-?\d[\d,]*(?:\.\d+)?)(?: (KiB|MiB|s))?(?: \(.*\))?", cell):
        number = float(match[1].replace(",", "")) * _UNITS.get(match[2] or "s", 1)
        return int(number) if number.is_integer() else number
    if cell in ("true", "false"):
        return cell == "true"
    if match := re.fullmatch(r'"([^"]+)"|([^\s"]+)', cell):
        word = match[1] or match[2]
        return None if word in ("none", "all", "required") else word
    return None


def _model(section: str) -> type[BaseModel]:
    for kind in _kinds(Config.model_fields[section].annotation):
        if isinstance(kind, type) and issubclass(kind, BaseModel):
            return kind
    raise AssertionError(f"[{section}] is not a table")


def _settings_rows() -> list[tuple[str, str, dict[str, str]]]:
    """(section, key, the row's cells by its header) for every settings table of README
    and docs/."""
    found = []
    for before, rows in _tables(DOCS):
        header = rows[0]
        if "default" not in header or header[0] not in ("key", "`[admin]`"):
            continue
        sections = re.findall(r"\[([a-z_]+)(?:\.<label>)?\]", before + header[0])
        context = next(s for s in reversed(sections) if s in Config.model_fields)
        for row in rows[1:]:
            named = re.fullmatch(r"`(?:\[([a-z_]+)\] )?([a-z_]+)`", row[0])
            assert named, f"unreadable settings row: {row}"
            found.append((named[1] or context, named[2], dict(zip(header, row, strict=True))))
    return found


def _documented_defaults() -> list[tuple[str, str, str]]:
    """(section, key, documented default) for every settings table of README and docs/."""
    found = [(section, key, cells["default"]) for section, key, cells in _settings_rows()]
    for setting in re.findall(r"\| `\[([a-z_]+)\] ([a-z_]+)` \(default ([^)]+)\)", DOCS):
        found.append(setting)
    return found


@pytest.mark.parametrize(
    ("section", "key", "documented"), _documented_defaults(), ids=lambda v: str(v)
)
def test_every_documented_default_is_the_codes(section: str, key: str, documented: str) -> None:
    fields = _model(section).model_fields
    assert key in fields, f"[{section}] {key} is documented but no setting of the code"
    field = fields[key]
    default = None if field.is_required() else field.get_default(call_default_factory=True)
    expected = _literal(documented)
    if expected is None:  # described, not given: the code has no value of its own either
        assert not default, f"[{section}] {key}: documented as {documented!r}, is {default!r}"
    else:
        assert default == expected, f"[{section}] {key}: documented {documented!r}, is {default!r}"


_ENV_TABLE = [
    row
    for _, rows in _tables(README)
    if rows[0][:3] == ["flag", "environment", "default"]
    for row in rows[1:]
]
_ENV_ROWS = [(re.sub(r"`", "", row[1]), row[2]) for row in _ENV_TABLE]
_SAMPLES = {  # a value other than the default, for variables documented without one
    "STATEWAY_HOST": "127.0.0.2",
    "STATEWAY_UPSTREAM": "http://127.0.0.1:9/v1",
    "STATEWAY_UPSTREAM_API": "responses",
    "STATEWAY_UPSTREAM_API_KEY_ENV": "PATH",
    "STATEWAY_DATABASE": "sqlite:///elsewhere.db",
    "STATEWAY_SEALING_KEY": base64.b64encode(bytes(range(32))).decode(),
    "STATEWAY_ALLOWED_HOSTS": "gateway.internal",
    "STATEWAY_CORS_ORIGINS": "http://localhost:5173",
    "STATEWAY_MCP_ALLOWED_HOSTS": "mcp.internal",
    "STATEWAY_WEB_SEARCH_PROVIDER": "brave",
    "STATEWAY_SEARXNG_URL": "http://127.0.0.1:8888",
    "STATEWAY_WEB_SEARCH_BASE_URL": "http://127.0.0.1:8889",
    "STATEWAY_REDIS_URL": "redis://127.0.0.1:6379/0",
    "STATEWAY_REDIS_KEY_PREFIX": "other:",
    "STATEWAY_REQUESTS_PER_MINUTE": "60",
    "STATEWAY_TOKENS_PER_MINUTE": "6000",
    "STATEWAY_CONCURRENT_REQUESTS": "8",
    "STATEWAY_RETENTION": "30d",
    "STATEWAY_LOG_FORMAT": "json",
    "STATEWAY_LOG_LEVEL": "debug",
}
_NOT_SETTINGS = {
    "STATEWAY_CONFIG": "names the file itself",
    "STATEWAY_ADMIN_KEY": "the credential, read where [admin] api_key_env says",
}


@pytest.mark.parametrize(("var", "documented"), _ENV_ROWS, ids=lambda v: str(v))
def test_every_documented_variable_sets_its_setting(var: str, documented: str) -> None:
    from stateway.config import Overrides, load_config

    if var == "—":  # a flag without a variable
        return
    if var in _NOT_SETTINGS:
        assert var in ("STATEWAY_CONFIG", Config().admin.api_key_env)
        return
    base = load_config(Overrides(), {})
    default = _literal(documented)
    if default is not None:  # setting the documented default changes nothing
        assert load_config(Overrides(), {var: str(default).lower()}) == base, (
            f"{var}: documented default {documented} is not the default"
        )
    sample = _sample(var, documented)
    assert load_config(Overrides(), {var: sample}) != base, f"{var}={sample} sets nothing"


def _sample(var: str, documented: str) -> str:
    """A value of ``var`` other than its documented default."""
    default = _literal(documented)
    return _SAMPLES.get(var) or (
        str(default * 2)
        if isinstance(default, int | float) and not isinstance(default, bool)
        else "true"
    )


def _flat(values: object, prefix: str = "") -> dict[str, object]:
    """A dumped configuration by dotted setting name (a list, such as ``backends``, whole)."""
    if not isinstance(values, dict):
        return {prefix.removesuffix("."): values}
    return {
        name: value
        for key, nested in values.items()
        for name, value in _flat(nested, f"{prefix}{key}.").items()
    }


def _changed_by(var: str, value: str) -> set[str]:
    """The settings ``var=value`` changes from the defaults."""
    from stateway.config import Overrides, load_config

    before = _flat(load_config(Overrides(), {}).model_dump())
    after = _flat(load_config(Overrides(), {var: value}).model_dump())
    return {name for name in before | after if before.get(name, ...) != after.get(name, ...)}


_NAMED_SETTING = re.compile(r"`\[([a-z_]+)\] ([a-z_]+)`")


@pytest.mark.parametrize("row", _ENV_TABLE, ids=lambda row: row[1].strip("`"))
def test_each_variable_sets_the_setting_its_row_names(row: list[str]) -> None:
    """A variable's row names the file's setting it stands for, ``([section] key)``, as
    the flags that have one do; setting the variable changes that setting and no other."""
    flag, var, documented, meaning = row[0], row[1].strip("`"), row[2], row[3]
    named = {f"{section}.{key}" for section, key in _NAMED_SETTING.findall(meaning)}
    if var in _NOT_SETTINGS or var == "—" or (flag != "—" and not named):
        return  # the file itself, the credential; a flag's variable setting no one key
    assert len(named) == 1, f"{var}: its row should name the one setting it sets: {named}"
    assert _changed_by(var, _sample(var, documented)) == named


_ENV_COLUMNS = [
    (section, key, cells["env var"].strip("`"))
    for section, key, cells in _settings_rows()
    if "env var" in cells
]


@pytest.mark.parametrize(("section", "key", "var"), _ENV_COLUMNS, ids=lambda v: str(v))
def test_the_settings_tables_name_each_settings_variable(section: str, key: str, var: str) -> None:
    """The ``env var`` column of a settings table (docs/tools.md, docs/web-search.md): the
    variable sets that setting, and a setting shown without one has none."""
    setting = f"{section}.{key}"
    variables = {
        documented: _changed_by(documented, _sample(documented, default))
        for documented, default in _ENV_ROWS
        if documented.startswith("STATEWAY_") and documented not in _NOT_SETTINGS
    }
    setters = {documented for documented, changed in variables.items() if setting in changed}
    assert setters == ({var} if var != "—" else set()), f"{setting} is set by {setters or 'none'}"


def test_every_variable_read_is_documented() -> None:
    source = "".join(path.read_text() for path in (ROOT / "src").rglob("*.py"))
    read = set(re.findall(r'"(STATEWAY_[A-Z_]+)"', source))
    internal = {var for var in read if var.startswith("STATEWAY_TESTING_")}
    documented = {var for var, _ in _ENV_ROWS}
    assert read - internal - documented == set()


# The command line's reference: README's synopsis shows every option of each command.


def _synopsis() -> dict[str, str]:
    """README's synopsis of each command (``keys create``, ...), continuation lines joined;
    check-config's ``[...same upstream flags]`` are serve's."""
    block = re.search(r"## Command line\n\n```\n(.*?)```", README, re.DOTALL)
    assert block, "README's Command line section opens with its synopsis"
    entry = re.compile(r"^stateway ([a-z-]+(?: [a-z]+)?) (.*?)(?=^stateway |\Z)", re.M | re.S)
    synopsis = dict(entry.findall(block[1]))
    synopsis["check-config"] += " ".join(re.findall(r"--upstream[a-z-]*", synopsis["serve"]))
    return synopsis


_COMMANDS = [
    "serve",
    "check-config",
    "migrate",
    "backup",
    "keys create",
    "keys list",
    "keys revoke",
    "fake-upstream",
]


@pytest.mark.parametrize("command", _COMMANDS)
def test_the_command_line_synopsis_shows_every_option(
    command: str, capsys: pytest.CaptureFixture[str]
) -> None:
    from stateway import cli

    with pytest.raises(SystemExit):
        cli.main([*command.split(), "--help"])
    options = set(re.findall(r"(?<![\w-])--[a-z][a-z-]*", capsys.readouterr().out)) - {"--help"}
    shown = set(re.findall(r"(?<![\w-])--[a-z][a-z-]*", _synopsis()[command]))
    assert options == shown, f"stateway {command}: README's synopsis differs from --help"


# The observability reference: README's metrics table is what GET /metrics exposes, and
# every error code a table of README or docs/ gives is one the code answers with.


def _metric_rows() -> list[list[str]]:
    tables = [rows for _, rows in _tables(README) if rows[0][:3] == ["metric", "type", "labels"]]
    assert len(tables) == 1, "README has one metrics table"
    return tables[0][1:]


def test_the_metrics_table_is_what_is_exposed() -> None:
    from prometheus_client.parser import text_string_to_metric_families

    from stateway.core.telemetry import RunReport
    from stateway.core.usage import Usage
    from stateway.telemetry.metrics import PrometheusMetrics

    metrics = PrometheusMetrics()  # every kind of event once, so every series shows
    metrics.sample(lambda: 0, lambda: 0)
    metrics.request_ended("/health", 200, 0.001)
    metrics.run_ended(RunReport("t", "m", Usage(1, 1), [{"backend": "b", "outcome": "ok"}], 0.1))
    metrics.tool_called("mcp", "ok")
    metrics.websocket_opened()
    metrics.storage_observed("get", 0.001)
    body, _ = metrics.exposition()
    exposed = {
        family.name: (family.type, {label for s in family.samples for label in s.labels} - {"le"})
        for family in text_string_to_metric_families(body.decode())
    }
    documented = {
        name.removesuffix("_total"): (row[1], set(re.findall(r"`([a-z_]+)`", row[2])))
        for row in _metric_rows()
        for name in re.findall(r"`(stateway_[a-z_]+)`", row[0])
    }
    assert documented == exposed


def test_the_metrics_table_names_every_outcome() -> None:
    from stateway.core.routing.attempts import Outcome
    from stateway.core.telemetry import ToolOutcome

    described = {
        row[0].strip("`"): set(re.findall(r"`([a-z_]+)`", row[3])) for row in _metric_rows()
    }
    assert described["stateway_upstream_attempts_total"] == set(typing.get_args(Outcome))
    assert set(typing.get_args(ToolOutcome)) <= described["stateway_tool_calls_total"]


SOURCE = "".join(path.read_text() for path in (ROOT / "src").rglob("*.py"))


def _documented_codes() -> list[str]:
    """The error codes of every table of README and docs/ with a ``code`` column."""
    codes = set()
    for _, rows in _tables(DOCS):
        if "`code`" in rows[0]:
            column = rows[0].index("`code`")
            for row in rows[1:]:
                codes |= set(re.findall(r"`([a-z]+(?:_[a-z0-9]+)+)`", row[column]))
    return sorted(codes)


@pytest.mark.parametrize("code", _documented_codes())
def test_every_documented_error_code_is_the_codes(code: str) -> None:
    assert f'"{code}"' in SOURCE, f"{code} is documented but no string of src/"
