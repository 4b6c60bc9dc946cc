"""What each ``stateway`` command does: serve, check-config, migrate, backup, keys,
fake-upstream (:mod:`stateway.cli` is the entry, importing this once it has noted a
``SIGHUP``)."""

from __future__ import annotations

import argparse
import asyncio
import gc
import logging
import math
import os
import signal
import sys
import time
from collections.abc import Callable, Coroutine
from typing import TYPE_CHECKING, Any

from stateway import __version__, backup_command, key_commands
from stateway.cli import end_by
from stateway.config import Config, ConfigError, Overrides, load_config
from stateway.core.errors import StorageError
from stateway.durations import duration_text
from stateway.exposure import ExposureRefused, check_exposure, cors_warning
from stateway.hangup import StartupHangup
from stateway.header_guard import HeaderLimits
from stateway.redaction import masked_url
from stateway.serving import (
    DRAIN_GRACE,
    AnnouncingServer,
    Drain,
    ListenFailed,
    bind_socket,
    server_config,
    socket_url,
)
from stateway.storage.sql import describe_url, migrate
from stateway.stray_variables import stray_variables
from stateway.telemetry.logs import configure_logging, quietened

if TYPE_CHECKING:
    import socket

    from stateway.app.gateway import GatewayParts
    from stateway.identity.keys import KeyStore
    from stateway.reload import Compiled


def main(arguments: list[str], hangup: StartupHangup | None) -> int:
    """Run the command ``arguments`` name; ``hangup``: noting a ``SIGHUP`` (``serve``)."""
    if arguments[:1] == ["fake-upstream"]:  # parsed by the fake's own parser
        return _fake_upstream(arguments[1:])
    parser = _parser()
    args = parser.parse_args(arguments)
    if args.command is None:
        parser.print_help()
        return 2
    if args.command == "keys":
        return key_commands.run(args)
    if args.command == "backup":
        return backup_command.run(args)
    flags = _overrides(args)
    try:
        if args.command == "migrate":
            # The file validated, its database alone used: a migration job is given no
            # upstream key, MCP header or admin credential (serving checks those).
            config = load_config(flags)
            return _reported(config, lambda: _migrate(config))
        from stateway.app import compile_generation

        # Built exactly as serving and every reload build it (nothing is opened yet):
        # every backend, key, stage and gateway tool, unpublished.
        compiled = compile_generation(flags)
    except ConfigError as exc:
        print(f"stateway: {exc}", file=sys.stderr)
        return 2
    for warning in stray_variables(compiled.config, os.environ):
        print(f"stateway: warning: {warning}", file=sys.stderr)
    if args.command == "check-config":
        return _check(compiled.config, insecure_no_auth=args.insecure_no_auth)
    assert hangup is not None, "serving notes a SIGHUP from the start"
    return _reported(
        compiled.config,
        lambda: _serve(compiled, flags, hangup, insecure_no_auth=args.insecure_no_auth),
    )


def _check(config: Config, *, insecure_no_auth: bool) -> int:
    """check-config's answer for a compiled configuration: what serving would still refuse
    before opening anything (a public address without auth, tracing that cannot export)
    is refused here alike, so that a configuration said valid is one that serves."""
    from stateway.telemetry.tracing import check_tracing

    try:
        warning = check_exposure(config.server.host, config.auth.configured, insecure_no_auth)
        check_tracing(config.tracing)
    except (ExposureRefused, ConfigError) as exc:
        print(f"stateway: {exc}", file=sys.stderr)
        return 2
    browsers = cors_warning(config.server.cors_origins, config.auth.configured)
    if browsers is not None:
        print(f"stateway: warning: {browsers}", file=sys.stderr)
    _describe(config, sys.stdout, beyond_loopback=warning is not None)
    print("configuration is valid")
    return 0


def _migrate(config: Config) -> int:
    _run(migrate(config.database_url))
    print(f"database {describe_url(config.database_url)} is at the latest schema")
    return 0


def _reported(config: Config, command: Callable[[], int]) -> int:
    """``command``'s status, or what stopped it said readably: a failure of the database
    it opened, or of what it found there."""
    try:
        return command()
    except ConfigError as exc:  # found at start-up: an unusable stored sealing key
        print(f"stateway: {exc}", file=sys.stderr)
        return 2
    except StorageError as exc:  # which database it is, then what it said
        print(f"stateway: {describe_url(config.database_url)}: {exc}", file=sys.stderr)
        return 1
    except OSError as exc:  # e.g. the database directory cannot be created
        print(f"stateway: {exc}", file=sys.stderr)
        return 1


def _serve(
    compiled: Compiled, flags: Overrides, hangup: StartupHangup, *, insecure_no_auth: bool = False
) -> int:
    config = compiled.config
    configure_logging(config.logging.format, config.logging.level)
    try:
        warning = check_exposure(config.server.host, config.auth.configured, insecure_no_auth)
    except ExposureRefused as exc:
        print(f"stateway: {exc}", file=sys.stderr)
        return 2
    for said in (warning, cors_warning(config.server.cors_origins, config.auth.configured)):
        if said is not None:
            logging.getLogger("stateway").warning("%s", said)
    try:
        sock = bind_socket(config.server.host, config.server.port)
    except ListenFailed as exc:
        print(f"stateway: {exc}", file=sys.stderr)
        return 1

    async def serve() -> None:
        from stateway.app import open_gateway

        await migrate(config.database_url)
        parts = await open_gateway(compiled, flags)
        try:  # every way out gives the lease back and closes the store (once served, the
            # app's shutdown did already: closing them again is harmless)
            await parts.recover()  # its StorageError reported as the database's, not the lifespan's
            await _warn_without_active_keys(config, parts.keys)
            await _serve_parts(parts, hangup, sock, beyond_loopback=warning is not None)
        finally:
            if parts.leases is not None:
                await parts.leases.aclose()
            await parts.store.aclose()

    with sock:
        try:
            _run(serve())
        except KeyboardInterrupt:  # the SIGINT uvicorn drained on, raised again as it ends
            end_by(signal.SIGINT)
    return 0


async def _serve_parts(
    parts: GatewayParts, hangup: StartupHangup, sock: socket.socket, *, beyond_loopback: bool
) -> None:
    """Serve the opened and recovered gateway ``parts`` on ``sock`` until shut down."""
    from stateway.app import build_app
    from stateway.app.upstream_check import check_generation

    config = parts.config
    app = build_app(parts)
    # Reloads are explicit: SIGHUP (or the admin route); a file edit alone does nothing.
    reload = parts.reloader.reload_signalled
    asyncio.get_running_loop().add_signal_handler(signal.SIGHUP, reload)
    if hangup.seen:  # while starting up: the file it was sent for is read now
        reload()
    _tune_gc()
    sessions = None if parts.websockets is None else parts.websockets.drain
    drain = Drain(
        config.server.drain_timeout,
        parts.end_runs,
        parts.settle_runs,
        sessions,
        in_flight=lambda: len(parts.runs),
    )
    graceful = math.ceil(drain.timeout) + DRAIN_GRACE
    frames = config.websocket.frame_limit(config.server.max_body_bytes)
    uvicorn_config = server_config(
        app,
        lifespan=True,
        graceful_shutdown=graceful,
        own_logging=config.logging.format == "json",
        ws_max_size=2 * frames,  # up to twice the limit is answered with an error frame
        ws_compression=config.websocket.compression,
        headers=HeaderLimits(
            config.server.max_header_bytes,
            config.server.header_timeout,
            max_drain_bytes=config.server.max_body_bytes,
        ),
        keep_alive=config.server.keep_alive_timeout,
        send_timeout=config.server.send_timeout,
        refused=parts.telemetry,
        log_level=quietened(config.logging.level),
    )
    _describe(config, sys.stdout, beyond_loopback=beyond_loopback)
    announcement = f"stateway {__version__} listening on {socket_url(sock)}"
    server = AnnouncingServer(uvicorn_config, announcement, drain=drain)
    generations = parts.gateway.generations
    urls = {backend.name: backend.shown_url for backend in config.backends}
    # Beside serving, leasing its generation: a SIGHUP meanwhile leaves its pools open.
    check = asyncio.create_task(check_generation(generations, generations.acquire(), urls))
    try:
        # A Ctrl+C since the last await (the loop cancels this task for it) lands
        # here, not in uvicorn's start-up, which would log it as a lifespan failure.
        await asyncio.sleep(0)
        await server.serve(sockets=[sock])
    finally:
        check.cancel()


async def _warn_without_active_keys(config: Config, keys: KeyStore | None) -> None:
    """``[auth] api_keys`` on and no key to pass it: the first request's 401 would be the
    first sign, so serving says so as it starts."""
    if not config.auth.api_keys or keys is None:
        return
    now = time.time()
    if any(key.revoked_at is None and not key.expired(now) for key in await keys.list()):
        return
    logging.getLogger("stateway").warning(
        "no active API key in the database: every request is refused (401) until one is "
        "made with `stateway keys create --tenant TENANT` (the same --config or --database)"
    )


def _fake_upstream(arguments: list[str]) -> int:
    from stateway.fake_upstream.__main__ import main as run_fake

    try:
        run_fake(arguments, prog="stateway fake-upstream")
    except KeyboardInterrupt:  # uvicorn raises the SIGINT it stopped on again
        end_by(signal.SIGINT)
    except ListenFailed as exc:
        print(f"stateway: {exc}", file=sys.stderr)
        return 1
    return 0


def _tune_gc() -> None:
    """Collect less often on the request path: every request allocates thousands of
    short-lived objects, so CPython's default (a young collection every 700 net
    allocations) runs many times per request. Everything alive after start-up is frozen
    out of the collector's view."""
    gc.collect()
    gc.freeze()
    gc.set_threshold(20_000, 50, 100)


def _describe(config: Config, out: Any, *, beyond_loopback: bool = False) -> None:
    """What the configuration serves; ``beyond_loopback``: served without auth on a public
    address (``--insecure-no-auth``), which the auth line says instead of loopback only."""
    print(f"database: {describe_url(config.database_url)}", file=out)
    if config.storage.retention is not None:
        kept = duration_text(config.storage.retention)
        print(f"retention: stored responses kept {kept}", file=out)
    coordination = config.coordination
    if coordination.redis_url is not None:
        shown = masked_url(coordination.redis_url)
        print(f"redis: {shown} (key prefix {coordination.key_prefix!r})", file=out)
    catch_all = {backend.name for backend in config.catch_all_backends}
    for backend in config.backends:
        models = ", ".join(backend.model_map)
        if not models:  # the catch-all, unless a route names it (README "Routes")
            models = "every model" if backend.name in catch_all else "its routes' models"
        shown = f"upstream {backend.name}: {backend.shown_url} ({backend.api} API; {models})"
        print(shown, file=out)
    for route in config.routes:
        candidates = ", ".join(
            f"{c.backend}/{c.model} (weight {c.weight:g}, priority {c.priority})"
            for c in route.candidates
        )
        print(f"route {route.name}{' (default)' if route.default else ''}: {candidates}", file=out)
    for alias, target in config.aliases.items():
        print(f"alias {alias} -> {target}", file=out)
    limits = _limits_description(config)
    if limits:
        print(f"rate limits per principal: {limits}", file=out)
    print(f"auth: {_auth_description(config, beyond_loopback)}", file=out)
    origins = config.server.cors_origins
    if origins:
        pages = "any web page" if "*" in origins else "the web pages of " + ", ".join(origins)
        print(f"browsers: {pages} may call (CORS)", file=out)
    out.flush()


def _limits_description(config: Config) -> str:
    """The ``[rate_limits]`` set, or nothing."""
    limits = config.rate_limits
    described = [
        f"{value} {what}"
        for value, what in (
            (limits.requests_per_minute, "requests/min"),
            (limits.tokens_per_minute, "tokens/min"),
            (limits.concurrent_requests, "concurrent requests"),
        )
        if value is not None
    ]
    return ", ".join(described)


def _auth_description(config: Config, beyond_loopback: bool) -> str:
    auth = config.auth
    accepted = ["API keys"] if auth.api_keys else []
    if auth.oidc is not None:
        oidc = auth.oidc
        accepted.append(f"OIDC tokens from {oidc.issuer} (tenant claim '{oidc.tenant_claim}')")
    reach = "any address: --insecure-no-auth" if beyond_loopback else "loopback only"
    return " and ".join(accepted) or f"none (every caller is the default tenant; {reach})"


def _run(coroutine: Coroutine[Any, Any, None]) -> None:
    try:
        import uvloop
    except ImportError:  # pragma: no cover - uvloop ships with uvicorn[standard]
        asyncio.run(coroutine)
    else:
        uvloop.run(coroutine)


def _overrides(args: argparse.Namespace) -> Overrides:
    return Overrides(
        config=args.config,
        host=getattr(args, "host", None),
        port=getattr(args, "port", None),
        upstream=getattr(args, "upstream", None),
        upstream_api=getattr(args, "upstream_api", None),
        upstream_api_key_env=getattr(args, "upstream_api_key_env", None),
        database=getattr(args, "database", None),
    )


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="stateway", description="The stateful agentic gateway.")
    parser.add_argument("--version", action="version", version=f"stateway {__version__}")
    commands = parser.add_subparsers(dest="command")
    serve = commands.add_parser("serve", help="serve the gateway")
    _common(serve)
    _listen(serve)
    _upstream(serve)
    _insecure_no_auth(serve, "serve")
    check = commands.add_parser("check-config", help="validate the configuration and exit")
    _common(check)
    _listen(check)
    _upstream(check)
    _insecure_no_auth(check, "accept serving")
    migrate_cmd = commands.add_parser("migrate", help="upgrade the database schema")
    _common(migrate_cmd)
    backup_command.add_parser(commands)
    key_commands.add_parser(commands)
    # Listed here; main() hands its arguments to the fake's own parser.
    commands.add_parser("fake-upstream", help="run the deterministic fake model server")
    return parser


def _common(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--config", help="TOML configuration file")
    parser.add_argument("--database", help="sqlite:///file.db or postgresql://user@host/db")


def _listen(parser: argparse.ArgumentParser) -> None:
    """Where serving listens (``serve``, and ``check-config``, which checks serve's
    command line)."""
    parser.add_argument("--host", help="listen address (default 127.0.0.1)")
    parser.add_argument("--port", type=int, help="listen port (default 8080; 0 picks a free one)")


def _insecure_no_auth(parser: argparse.ArgumentParser, verb: str) -> None:
    parser.add_argument(
        "--insecure-no-auth",
        action="store_true",
        help=f"{verb} a non-loopback address without auth (a trusted network only)",
    )


def _upstream(parser: argparse.ArgumentParser) -> None:
    """The one catch-all upstream that replaces a file's backends (``serve``,
    ``check-config``)."""
    parser.add_argument("--upstream", help="model server base URL including /v1")
    parser.add_argument(
        "--upstream-api", choices=["chat", "responses", "anthropic"], help="upstream API shape"
    )
    parser.add_argument(
        "--upstream-api-key-env", help="environment variable holding the upstream key"
    )
