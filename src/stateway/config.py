"""One typed configuration: TOML file, then ``STATEWAY_*`` environment, then flags.

Everything is validated before anything starts; :func:`load_config` raises
:class:`ConfigError` with a readable message. A single ``--upstream`` (or
``STATEWAY_UPSTREAM``) replaces the file's backends, routes and aliases with one
catch-all backend; a file without backends gets that backend at the default URL.

Example file::

    [server]
    host = "0.0.0.0"
    port = 8080

    [storage]
    database = "postgresql://stateway@db/stateway"

    [security]
    sealing_key = "..."                # base64 of 32 bytes (default: kept in the database)

    [[backends]]
    name = "vllm"
    url = "http://127.0.0.1:8000/v1"
    api = "chat"                       # or "responses", "anthropic"
    models = ["qwen3-8b"]              # or {"public-name" = "upstream-name"}
    context_window = 32768             # for truncation "auto" and compaction thresholds

    [[backends]]
    name = "openai"
    url = "https://api.openai.com/v1"
    api_key_env = "OPENAI_API_KEY"
    models = []                        # empty: serves every other model name
"""

from __future__ import annotations

import codecs
import os
import tomllib
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import platformdirs
from pydantic import Field, ValidationError, field_validator, model_validator

from stateway.auth_config import AuthConfig
from stateway.backend_config import BackendConfig
from stateway.config_origins import Location, Origins, setting_variables
from stateway.config_section import Section, VariableName
from stateway.coordination_config import (
    CoordinationConfig,
    RateLimitsConfig,
    apply_coordination_env,
)
from stateway.route_config import HealthConfig, RouteConfig, StageConfig, check_routes
from stateway.sealing.keys import parse_key
from stateway.server_config import HOST_ENV, PORT_ENV, ServerConfig, apply_server_env
from stateway.storage_config import StorageConfig, apply_storage_env
from stateway.surfaces.auth.credentials import MAX_CREDENTIAL, sendable
from stateway.telemetry_config import LoggingConfig, TracingConfig, apply_telemetry_env
from stateway.tool_config import (
    McpConfig,
    McpServerConfig,
    ToolsConfig,
    WebSearchConfig,
    apply_tool_env,
)
from stateway.websocket_config import WebSocketConfig, apply_websocket_env

DEFAULT_UPSTREAM = "http://127.0.0.1:8000/v1"


class ConfigError(Exception):
    """The configuration is invalid; the message says where and why."""


class SecurityConfig(Section):
    sealing_key: str | None = Field(default=None, repr=False)
    """Base64 of 32 bytes: the key sealing ``encrypted_content``. Default: generated on
    first start and kept in the database (``gateway_secrets``)."""

    @field_validator("sealing_key")
    @classmethod
    def _usable_key(cls, key: str | None) -> str | None:
        if key is not None:
            parse_key(key)  # its ValueError says what is wrong, without the key
        return key


class LoopConfig(Section):
    max_rounds: int = Field(default=8, ge=1, le=128)


class AdminConfig(Section):
    reload_endpoint: bool = False
    """Serve ``POST /admin/config/reload`` (``SIGHUP`` reloads either way)."""
    api_key_env: VariableName = "STATEWAY_ADMIN_KEY"
    """The environment variable holding the admin credential (a bearer token); the admin
    routes are served only when it is set."""


class Config(Section):
    server: ServerConfig = ServerConfig()
    storage: StorageConfig = StorageConfig()
    security: SecurityConfig = SecurityConfig()
    loop: LoopConfig = LoopConfig()
    tools: ToolsConfig = ToolsConfig()
    mcp: McpConfig = McpConfig()
    mcp_servers: dict[str, McpServerConfig] = Field(default_factory=dict)
    web_search: WebSearchConfig = WebSearchConfig()
    backends: list[BackendConfig] = Field(default_factory=list)
    routes: list[RouteConfig] = Field(default_factory=list)
    aliases: dict[str, str] = Field(default_factory=dict)
    health: HealthConfig = HealthConfig()
    stages: list[StageConfig] = Field(default_factory=list)
    """Feature stages every route runs (before its own)."""
    coordination: CoordinationConfig = CoordinationConfig()
    rate_limits: RateLimitsConfig = RateLimitsConfig()
    admin: AdminConfig = AdminConfig()
    logging: LoggingConfig = LoggingConfig()
    tracing: TracingConfig = TracingConfig()
    auth: AuthConfig = AuthConfig()
    websocket: WebSocketConfig = WebSocketConfig()

    @property
    def catch_all_backends(self) -> list[BackendConfig]:
        """Backends serving every model name: no ``models``, and named by no route."""
        named = {c.backend for route in self.routes for c in route.candidates}
        return [b for b in self.backends if b.catch_all and b.name not in named]

    @model_validator(mode="after")
    def _unambiguous_backends(self) -> Config:
        names = [b.name for b in self.backends]
        duplicates = sorted({n for n in names if names.count(n) > 1})
        if duplicates:
            raise ValueError(f"backend names must be unique; repeated: {', '.join(duplicates)}")
        claimed: dict[str, str] = {}
        for backend in self.backends:
            for model in backend.model_map:
                if model in claimed:
                    raise ValueError(
                        f"model '{model}' is served by both backend '{claimed[model]}' and "
                        f"backend '{backend.name}'; a model name must route to one backend"
                    )
                claimed[model] = backend.name
        catch_alls = [b.name for b in self.catch_all_backends]
        if len(catch_alls) > 1:
            raise ValueError(
                f"only one backend may serve every model (empty 'models'); these do: "
                f"{', '.join(catch_alls)}"
            )
        models = {b.name: b.model_map for b in self.backends}
        offered = {b.name: b.gateway_tools for b in self.backends}
        check_routes(self.routes, self.aliases, models, catch_alls, offered)
        return self

    @property
    def database_url(self) -> str:
        if self.storage.database:
            return self.storage.database
        path = Path(platformdirs.user_data_dir("stateway")) / "stateway.db"
        return f"sqlite:///{path}"


@dataclass(slots=True, frozen=True)
class Overrides:
    """Command-line values; None means not given."""

    config: str | None = None
    host: str | None = None
    port: int | None = None
    upstream: str | None = None
    upstream_api: str | None = None
    upstream_api_key_env: str | None = None
    database: str | None = None


SEALING_KEY_ENV = "STATEWAY_SEALING_KEY"
"""Sets ``[security] sealing_key`` (over the file's)."""

FLAG_VARIABLES = {
    "config": "STATEWAY_CONFIG",
    "host": HOST_ENV,
    "port": PORT_ENV,
    "upstream": "STATEWAY_UPSTREAM",
    "upstream_api": "STATEWAY_UPSTREAM_API",
    "upstream_api_key_env": "STATEWAY_UPSTREAM_API_KEY_ENV",
    "database": "STATEWAY_DATABASE",
}
"""The variables of the flags' settings (``--upstream``'s: ``STATEWAY_UPSTREAM``)."""
_ENV = FLAG_VARIABLES


def load_config(
    flags: Overrides, environ: Mapping[str, str] | None = None, *, reloading: bool = False
) -> Config:
    """The configuration: the file ``flags`` (or the environment) name, the environment
    and the flags. ``reloading``: an empty file is refused rather than taken for the
    defaults (:func:`_read_text`). Raises :class:`ConfigError`."""
    env = os.environ if environ is None else environ
    values = {key: getattr(flags, key) for key in _ENV}
    for key, var in _ENV.items():
        if values[key] is None and env.get(var):
            values[key] = env[var]
    path = values["config"]
    origins = Origins(path, _read_text(path, reloading=reloading) if path else "")
    data: dict[str, Any] = _parse_file(path, origins.text) if path else {}
    _check_tables(data)  # before the environment is overlaid onto them
    try:
        apply_server_env(data, env, host=values["host"], port=values["port"])
        apply_tool_env(data, env)
    except ValueError as exc:
        raise ConfigError(str(exc)) from None
    apply_storage_env(data, env)
    apply_coordination_env(data, env)
    apply_telemetry_env(data, env)
    apply_websocket_env(data, env)
    if env.get(SEALING_KEY_ENV):
        data["security"] = {**data.get("security", {}), "sealing_key": env[SEALING_KEY_ENV]}
    origins.note_variables(
        env, setting_variables() | {SEALING_KEY_ENV: ("security", "sealing_key")}
    )
    if values["database"] is not None:
        data["storage"] = {**data.get("storage", {}), "database": values["database"]}
    if values["upstream"] is None and data.get("backends"):
        for flag in ("upstream_api", "upstream_api_key_env"):
            if values[flag] is not None:
                raise ConfigError(
                    f"--{flag.replace('_', '-')} applies to --upstream, but the configuration "
                    "file declares its backends; set it on a backend there instead"
                )
    else:  # one catch-all backend
        if values["upstream"] is not None:  # --upstream replaces routes and aliases too
            data.pop("routes", None)
            data.pop("aliases", None)
        data["backends"] = [
            {
                "name": "default",
                "url": values["upstream"] or DEFAULT_UPSTREAM,
                "api": values["upstream_api"] or "chat",
                "api_key_env": values["upstream_api_key_env"],
            }
        ]
        for key in ("upstream", "upstream_api", "upstream_api_key_env"):
            _note_given(origins, flags, values, key)
    for key in ("host", "port", "database"):
        _note_given(origins, flags, values, key)
    try:
        return Config.model_validate(data)
    except ValidationError as exc:
        raise ConfigError(origins.describe(exc, Config)) from None


def backend_api_key(backend: BackendConfig, environ: Mapping[str, str] | None = None) -> str | None:
    """The upstream key, read from the environment variable the backend names."""
    if backend.api_key_env is None:
        return None
    env = os.environ if environ is None else environ
    key = env.get(backend.api_key_env)
    if not key:
        raise ConfigError(
            f"backend '{backend.name}': environment variable {backend.api_key_env} is not set"
        )
    return key


def admin_key(config: Config, environ: Mapping[str, str] | None = None) -> str | None:
    """The admin credential, or None when its variable is unset; unset while
    ``reload_endpoint`` is true is a :class:`ConfigError`, and so is a key no request
    could send (:func:`~stateway.surfaces.auth.credentials.sendable`)."""
    env = os.environ if environ is None else environ
    variable = f"environment variable {config.admin.api_key_env} (admin.api_key_env)"
    key = env.get(config.admin.api_key_env) or None
    if key is None and config.admin.reload_endpoint:
        raise ConfigError(f"admin.reload_endpoint is true but {variable} is not set")
    if key is not None and not sendable(key):
        raise ConfigError(
            f"{variable} holds a key no request can send: a credential is 1 to"
            f" {MAX_CREDENTIAL} visible ASCII characters (no space, no line break)"
        )
    return key


def _read_text(path: str, *, reloading: bool = False) -> str:
    """The file's text (UTF-8, with or without a byte order mark). An empty file is the
    defaults at start-up; on a reload it is refused (the running configuration kept): a
    file caught mid-write by an editor or a deploy tool that truncates it first reads
    empty, and would otherwise replace every route with the defaults. A file of comments
    alone still serves them."""
    try:
        with open(path, "rb") as handle:
            # Less a byte order mark, which Windows editors open UTF-8 with and tomllib
            # would refuse as "Invalid statement (at line 1, column 1)".
            raw = handle.read().removeprefix(codecs.BOM_UTF8)
    except OSError as exc:
        raise ConfigError(f"cannot read config file {path}: {exc.strerror}") from None
    if reloading and not raw.strip():
        raise ConfigError(
            f"config file {path} is empty; the running configuration is kept (a file "
            "caught mid-write?). A file of comments alone serves the defaults."
        )
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError as exc:  # TOML is UTF-8
        raise ConfigError(
            f"config file {path} is not valid TOML: not UTF-8 (byte {exc.start})"
        ) from None


def _parse_file(path: str, text: str) -> dict[str, Any]:
    """The tables of the file at ``path``, whose text is ``text``."""
    try:
        return tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise ConfigError(f"config file {path} is not valid TOML: {exc}") from None


_GIVEN: dict[str, Location] = {
    "host": ("server", "host"),
    "port": ("server", "port"),
    "database": ("storage", "database"),
    "upstream": ("backends", 0, "url"),
    "upstream_api": ("backends", 0, "api"),
    "upstream_api_key_env": ("backends", 0, "api_key_env"),
}
"""The setting each flag (or its variable) gives."""


def _note_given(origins: Origins, flags: Overrides, values: dict[str, Any], key: str) -> None:
    """Note the flag, or else its variable, that gave ``key``'s setting, if either did."""
    if getattr(flags, key) is not None:
        origins.set_by[_GIVEN[key]] = f"--{key.replace('_', '-')}"
    elif values[key] is not None:
        origins.set_by[_GIVEN[key]] = _ENV[key]


_TABLES = tuple(
    name
    for name, field in Config.model_fields.items()
    if isinstance(field.annotation, type) and issubclass(field.annotation, Section)
)
"""The top-level keys that must be tables (the environment and flags are overlaid onto
them as dictionaries)."""


def _check_tables(data: dict[str, Any]) -> None:
    """A readable error for a section given as a value (``server = 5``) rather than a
    table, which the overlays would otherwise fail on."""
    for name in _TABLES:
        if name in data and not isinstance(data[name], dict):
            raise ConfigError(
                f"invalid configuration:\n  {name}: must be a table ([{name}]), "
                f"not {type(data[name]).__name__}"
            )
