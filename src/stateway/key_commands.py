"""``stateway keys create | list | revoke``: API keys in the database a gateway uses.

``create`` prints the new key alone on stdout (it is shown this once: only its digest is
stored); ``list`` prints the keys (``--json``: a JSON array of objects with ``id``,
``tenant``, ``name``, ``status``, ``created_at``, ``expires_at``, ``revoked_at``; never a
key; none: a note on stderr naming the database); ``revoke ID`` revokes one. ``create``
notes on stderr when the configuration does not set ``[auth] api_keys``: its key would
not be asked for. Each upgrades the database's schema first, like
``stateway migrate``. A running gateway sees a change within ``[auth] key_cache_ttl``.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
import time
from collections.abc import Awaitable, Callable
from datetime import UTC, datetime
from typing import Any, TextIO

from stateway.config import Config, ConfigError, Overrides, load_config
from stateway.core.errors import StorageError
from stateway.core.ids import new_id
from stateway.durations import duration_seconds
from stateway.identity.keys import ApiKey, KeyStore, checked_tenant, key_digest, new_key
from stateway.storage.sql import create_engine, describe_url, migrate
from stateway.storage.sql.api_keys import SqlKeyStore

_LATEST = datetime(9999, 12, 31, 23, 59, 59, tzinfo=UTC).timestamp()
"""The latest expiry a key may have: the last second an ISO 8601 time can name."""


def add_parser(commands: Any) -> None:
    """The ``keys`` command and its subcommands, on ``stateway``'s subparsers."""
    keys = commands.add_parser("keys", help="manage API keys ([auth] api_keys = true)")
    actions = keys.add_subparsers(dest="keys_command", required=True)
    create = actions.add_parser("create", help="create a key and print it (once)")
    create.add_argument("--tenant", required=True, help="the tenant the key acts for")
    create.add_argument("--name", help="a label for the key (shown by list)")
    create.add_argument(
        "--expires", help="when it expires: a duration (30d, 12h, 90m) or an ISO 8601 time"
    )
    listing = actions.add_parser("list", help="list the keys (never the keys themselves)")
    listing.add_argument("--json", action="store_true", help="as a JSON array")
    revoke = actions.add_parser("revoke", help="revoke a key by its id")
    revoke.add_argument("id", help="the key's id (key_...)")
    for action in (create, listing, revoke):
        action.add_argument("--config", help="TOML configuration file")
        action.add_argument("--database", help="sqlite:///file.db or postgresql://user@host/db")


def run(args: argparse.Namespace) -> int:
    try:
        config = load_config(Overrides(config=args.config, database=args.database))
        work = _ACTIONS[args.keys_command](args, sys.stdout, config)
        asyncio.run(_against(config.database_url, work))
    except (ConfigError, ValueError) as exc:  # what was asked is wrong
        print(f"stateway: {exc}", file=sys.stderr)
        return 2
    except LookupError as exc:  # no such key
        print(f"stateway: {exc.args[0]}", file=sys.stderr)
        return 1
    except StorageError as exc:  # which database it is, then what it said
        print(f"stateway: {describe_url(config.database_url)}: {exc}", file=sys.stderr)
        return 1
    return 0


Work = Callable[[KeyStore], Awaitable[None]]


async def _against(database_url: str, work: Work) -> None:
    await migrate(database_url)
    engine = create_engine(database_url)
    try:
        await work(SqlKeyStore(engine))
    finally:
        await engine.dispose()


def _create(args: argparse.Namespace, out: TextIO, config: Config) -> Work:
    tenant = checked_tenant(args.tenant)
    now = time.time()
    expires_at = None if args.expires is None else expiry(args.expires, now)

    async def create(store: KeyStore) -> None:
        key = new_key()
        record = ApiKey(new_id("key"), tenant, args.name, key_digest(key), now, expires_at)
        await store.add(record)
        print(key, file=out)
        print(
            f"created API key {record.id} for tenant {tenant}; it is shown only now",
            file=sys.stderr,
        )
        if not config.auth.api_keys:  # created, and not asked for: say so
            print(
                "note: [auth] api_keys is not true in this configuration, so a gateway "
                "serving it serves every caller without a key; set it in the file "
                "(--config) that serving reads",
                file=sys.stderr,
            )

    return create


def _list(args: argparse.Namespace, out: TextIO, config: Config) -> Work:
    async def listing(store: KeyStore) -> None:
        now = time.time()
        keys = [_described(key, now) for key in await store.list()]
        if args.json:
            print(json.dumps(keys), file=out)
            return
        if not keys:  # a typo'd --database finds none: say where none were found
            print(f"no API keys in {describe_url(config.database_url)}", file=sys.stderr)
        for key in keys:
            expires = f" expires {key['expires_at']}" if key["expires_at"] else ""
            name = f" {key['name']!r}" if key["name"] else ""
            print(f"{key['id']} {key['tenant']}{name} {key['status']}{expires}", file=out)

    return listing


def _revoke(args: argparse.Namespace, out: TextIO, config: Config) -> Work:
    async def revoke(store: KeyStore) -> None:
        key = await store.revoke(args.id, time.time())
        if key is None:
            raise LookupError(f"no API key has the id {args.id!r}")
        print(f"revoked {key.id} (tenant {key.tenant_id})", file=out)

    return revoke


_ACTIONS: dict[str, Callable[[argparse.Namespace, TextIO, Config], Work]] = {
    "create": _create,
    "list": _list,
    "revoke": _revoke,
}


def expiry(value: str, now: float) -> float:
    """``value`` as a Unix time: a duration from ``now`` (``30d``, ``12h``, ``90m``,
    ``45s``, ``2w``) or an ISO 8601 time (UTC unless it says otherwise)."""
    seconds = duration_seconds(value)
    if seconds is not None:
        if seconds <= 0:
            raise ValueError(f"--expires {value!r}: a key must live a while")
        at = now + seconds
    else:
        at = _moment(value)
        if at <= now:
            raise ValueError(f"--expires {value!r} is in the past")
    if at > _LATEST:  # ``keys list`` could not show it
        raise ValueError(f"--expires {value!r}: later than the year 9999")
    return at


def _moment(value: str) -> float:
    """The ISO 8601 time ``value`` as a Unix time (UTC unless it says otherwise)."""
    try:
        moment = datetime.fromisoformat(value.strip())
    except ValueError:
        raise ValueError(
            f"--expires {value!r}: expected a duration (30d, 12h, 90m) or an ISO 8601 time"
        ) from None
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=UTC)
    return moment.timestamp()


def _described(key: ApiKey, now: float) -> dict[str, Any]:
    status = (
        "revoked" if key.revoked_at is not None else "expired" if key.expired(now) else "active"
    )
    return {
        "id": key.id,
        "tenant": key.tenant_id,
        "name": key.name,
        "status": status,
        "created_at": _iso(key.created_at),
        "expires_at": _iso(key.expires_at),
        "revoked_at": _iso(key.revoked_at),
    }


def _iso(moment: float | None) -> str | None:
    if moment is None:
        return None
    # A time beyond what a datetime holds (a key stored before expiry() refused it)
    # must not make the whole listing fail.
    return (
        datetime.fromtimestamp(min(moment, _LATEST), UTC)
        .isoformat(timespec="seconds")
        .replace("+00:00", "Z")
    )
