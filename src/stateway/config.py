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

import os
import tomllib
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import platformdirs
from pydantic import Field, ValidationError, field_validator, model_validator

from stateway.auth_config import AuthConfig
from stateway.backend_config import BackendConfig
from stateway.config_section import Section
from stateway.coordination_config import (
    CoordinationConfig,
    RateLimitsConfig,
    apply_coordination_env,
)
from stateway.route_config import HealthConfig, RouteConfig, StageConfig, check_routes
from stateway.sealing.keys import parse_key
from stateway.storage_config import StorageConfig, apply_storage_env
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


LOOPBACK_NAMES: tuple[str, ...] = ("127.0.0.1", "localhost", "::1", "[::1]")
"""Host names a loopback-bound server answers to by default (DNS-rebinding guard)."""


class ServerConfig(Section):
    host: str = "127.0.0.1"
    port: int = Field(default=8080, ge=0, le=65535)
    max_body_bytes: int = Field(default=32 * 1024 * 1024, ge=1024)
    """Requests with a larger body are refused with 413."""
    request_body_timeout: float = Field(default=30.0, gt=0)
    """The longest a client may take to send a whole request body (408 after; a 400 on
    the Messages routes, as hosted Anthropic answers it)."""
    max_header_bytes: int = Field(default=64 * 1024, ge=1024)
    """Requests with a larger header block (request line included) are refused with 431."""
    header_timeout: float = Field(default=30.0, gt=0)
    """The longest a client may take to send a request's headers (closed after)."""
    keep_alive_timeout: int = Field(default=75, ge=1)
    """Seconds a connection idle between requests is kept open. Longer than clients' own
    idle expiry (httpx, so the openai and anthropic SDKs: 5 s) and load balancers' (60 s
    on AWS's): else the gateway may close a connection just as a client reuses it, and
    that request fails ("Server disconnected")."""
    send_timeout: float = Field(default=60.0, gt=0)
    """The longest a client may take none of the output waiting for it (a stream it
    stopped reading, its connection kept open): the connection is then dropped, as if the
    client had left (nginx's ``send_timeout``)."""
    max_input_items: int = Field(default=10_000, ge=1)
    """Input items one request may carry (400 beyond)."""
    drain_timeout: float = Field(default=30.0, ge=0)
    """On SIGTERM: how long in-flight requests may finish before they are ended."""
    max_queued_requests: int = Field(default=1024, ge=0)
    """Requests that may wait for an upstream connection slot at once; beyond this, new
    requests are refused up front with 503 ``overloaded``."""
    allowed_hosts: list[str] | None = None
    """``Host`` header names accepted (without port; ``"*"`` accepts any). Default: the
    loopback names when bound to a loopback address, any host otherwise."""

    @property
    def effective_allowed_hosts(self) -> frozenset[str] | None:
        """The accepted host names, or None when any host is accepted."""
        if self.allowed_hosts is not None:
            hosts = frozenset(h.lower() for h in self.allowed_hosts)
            return None if "*" in hosts else hosts
        if self.host in LOOPBACK_NAMES or self.host.startswith("127."):
            return frozenset(LOOPBACK_NAMES) | {self.host}
        return None


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
    api_key_env: str = Field(default="STATEWAY_ADMIN_KEY", min_length=1)
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

_ENV = {
    "config": "STATEWAY_CONFIG",
    "host": "STATEWAY_HOST",
    "port": "STATEWAY_PORT",
    "upstream": "STATEWAY_UPSTREAM",
    "upstream_api": "STATEWAY_UPSTREAM_API",
    "upstream_api_key_env": "STATEWAY_UPSTREAM_API_KEY_ENV",
    "database": "STATEWAY_DATABASE",
}


def load_config(
    flags: Overrides, environ: Mapping[str, str] | None = None, *, reloading: bool = False
) -> Config:
    """The configuration: the file ``flags`` (or the environment) name, the environment
    and the flags. ``reloading``: an empty file is refused rather than taken for the
    defaults (:func:`_read_file`). Raises :class:`ConfigError`."""
    env = os.environ if environ is None else environ
    values = {key: getattr(flags, key) for key in _ENV}
    for key, var in _ENV.items():
        if values[key] is None and env.get(var):
            values[key] = env[var]
    path = values["config"]
    data: dict[str, Any] = _read_file(path, reloading=reloading) if path else {}
    _check_tables(data)  # before the environment is overlaid onto them
    server = dict(data.get("server", {}))
    for key in ("host", "port"):
        if values[key] is not None:
            server[key] = _port(values[key]) if key == "port" else values[key]
    for key, (var, parse) in _SERVER_ENV.items():
        if env.get(var):
            server[key] = parse(env[var], var)
    data["server"] = server
    try:
        apply_tool_env(data, env)
    except ValueError as exc:
        raise ConfigError(str(exc)) from None
    apply_storage_env(data, env)
    apply_coordination_env(data, env)
    apply_telemetry_env(data, env)
    apply_websocket_env(data, env)
    if env.get(SEALING_KEY_ENV):
        data["security"] = {**data.get("security", {}), "sealing_key": env[SEALING_KEY_ENV]}
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
    try:
        return Config.model_validate(data)
    except ValidationError as exc:
        raise ConfigError(_describe(exc)) from None


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
    ``reload_endpoint`` is true is a :class:`ConfigError`."""
    env = os.environ if environ is None else environ
    key = env.get(config.admin.api_key_env) or None
    if key is None and config.admin.reload_endpoint:
        raise ConfigError(
            f"admin.reload_endpoint is true but environment variable "
            f"{config.admin.api_key_env} (admin.api_key_env) is not set"
        )
    return key


def _read_file(path: str, *, reloading: bool = False) -> dict[str, Any]:
    """The file's tables. An empty file is the defaults at start-up; on a reload it is
    refused (the running configuration kept): a file caught mid-write by an editor or a
    deploy tool that truncates it first reads empty, and would otherwise replace every
    route with the defaults. A file of comments alone still serves them."""
    try:
        with open(path, "rb") as handle:
            raw = handle.read()
        if reloading and not raw.strip():
            raise ConfigError(
                f"config file {path} is empty; the running configuration is kept (a file "
                "caught mid-write?). A file of comments alone serves the defaults."
            )
        return tomllib.loads(raw.decode("utf-8"))
    except OSError as exc:
        raise ConfigError(f"cannot read config file {path}: {exc.strerror}") from None
    except tomllib.TOMLDecodeError as exc:
        raise ConfigError(f"config file {path} is not valid TOML: {exc}") from None
    except UnicodeDecodeError as exc:  # TOML is UTF-8; tomllib lets the decode error out
        raise ConfigError(
            f"config file {path} is not valid TOML: not UTF-8 (byte {exc.start})"
        ) from None


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


def _port(value: Any) -> int:
    """The flag's (an int already), or ``STATEWAY_PORT``'s."""
    return value if isinstance(value, int) else _int(value, _ENV["port"])


def _int(value: str, name: str) -> int:
    try:
        return int(value)
    except ValueError:
        raise ConfigError(f"{name} must be an integer, got {value!r}") from None


def _describe(exc: ValidationError) -> str:
    lines = []
    for error in exc.errors(include_url=False):
        where = ".".join(str(part) for part in error["loc"]) or "config"
        lines.append(f"{where}: {error['msg']}")
    return "invalid configuration:\n  " + "\n  ".join(lines)


def _hosts(value: str, name: str) -> list[str]:
    return [host.strip() for host in value.split(",") if host.strip()]


def _float(value: str, name: str) -> float:
    try:
        return float(value)
    except ValueError:
        raise ConfigError(f"{name} must be a number, got {value!r}") from None


_SERVER_ENV: dict[str, tuple[str, Callable[[str, str], Any]]] = {
    "max_body_bytes": ("STATEWAY_MAX_BODY_BYTES", _int),
    "request_body_timeout": ("STATEWAY_REQUEST_BODY_TIMEOUT", _float),
    "max_header_bytes": ("STATEWAY_MAX_HEADER_BYTES", _int),
    "header_timeout": ("STATEWAY_HEADER_TIMEOUT", _float),
    "keep_alive_timeout": ("STATEWAY_KEEP_ALIVE_TIMEOUT", _int),
    "send_timeout": ("STATEWAY_SEND_TIMEOUT", _float),
    "max_input_items": ("STATEWAY_MAX_INPUT_ITEMS", _int),
    "drain_timeout": ("STATEWAY_DRAIN_TIMEOUT", _float),
    "max_queued_requests": ("STATEWAY_MAX_QUEUED_REQUESTS", _int),
    "allowed_hosts": ("STATEWAY_ALLOWED_HOSTS", _hosts),
}
"""``[server]`` keys settable from the environment, with their variable and parser."""
