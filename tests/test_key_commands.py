"""``stateway keys`` in process: create, list (both ways), revoke, and what each refuses."""

from __future__ import annotations

import asyncio
import json
from datetime import UTC, datetime
from pathlib import Path

import pytest

from stateway import cli
from stateway.core.ids import new_id
from stateway.identity.keys import ApiKey, key_digest, looks_like_key, new_key
from stateway.key_commands import expiry
from stateway.storage.sql import create_engine
from stateway.storage.sql.api_keys import SqlKeyStore


def keys(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, str, str]:
    code = cli.main(["keys", *args])
    out, err = capsys.readouterr()
    return code, out, err


@pytest.fixture
def database(tmp_path: Path) -> str:
    return f"sqlite:///{tmp_path}/keys.db"


def test_create_list_and_revoke(capsys: pytest.CaptureFixture[str], database: str) -> None:
    code, out, err = keys(
        capsys, "create", "--tenant", "acme", "--name", "ci", "--database", database
    )
    assert code == 0
    key = out.strip()
    assert out == key + "\n"
    assert looks_like_key(key)
    assert "tenant acme" in err
    keys(capsys, "create", "--tenant", "globex", "--expires", "2h", "--database", database)

    code, out, _ = keys(capsys, "list", "--json", "--database", database)
    listed = json.loads(out)
    assert [(k["tenant"], k["name"], k["status"]) for k in listed] == [
        ("acme", "ci", "active"),
        ("globex", None, "active"),
    ]
    assert listed[0]["expires_at"] is None
    assert listed[1]["expires_at"].endswith("Z")
    assert key not in out

    code, out, _ = keys(capsys, "revoke", listed[0]["id"], "--database", database)
    assert (code, out) == (0, f"revoked {listed[0]['id']} (tenant acme)\n")
    code, out, _ = keys(capsys, "list", "--database", database)
    lines = out.splitlines()
    assert lines[0] == f"{listed[0]['id']} acme 'ci' revoked"
    assert lines[1].startswith(f"{listed[1]['id']} globex active expires ")


def test_a_key_created_for_a_configuration_without_api_keys_says_it_is_not_asked_for(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, database: str
) -> None:
    """The first-hour mistake: keys created, ``[auth] api_keys`` never set, and every
    caller still served without one."""
    code, out, err = keys(capsys, "create", "--tenant", "acme", "--database", database)
    assert code == 0
    assert looks_like_key(out.strip())
    assert err.endswith(
        "\nnote: [auth] api_keys is not true in this configuration, so a gateway serving it "
        "serves every caller without a key; set it in the file (--config) that serving reads\n"
    )

    config = tmp_path / "stateway.toml"
    config.write_text(f'[auth]\napi_keys = true\n[storage]\ndatabase = "{database}"\n')
    code, out, err = keys(capsys, "create", "--tenant", "acme", "--config", str(config))
    assert code == 0
    assert "api_keys" not in err


def test_an_empty_listing_says_so(capsys: pytest.CaptureFixture[str], database: str) -> None:
    code, out, err = keys(capsys, "list", "--database", database)
    assert (code, out) == (0, "")
    assert err == "no API keys in SQLite database at " + database.removeprefix("sqlite:///") + "\n"
    code, out, err = keys(capsys, "list", "--json", "--database", database)
    assert (code, out, err) == (0, "[]\n", "")


def test_revoking_an_unknown_key_is_exit_1(
    capsys: pytest.CaptureFixture[str], database: str
) -> None:
    code, out, err = keys(capsys, "revoke", "key_nothing", "--database", database)

    assert (code, out) == (1, "")
    assert err == "stateway: no API key has the id 'key_nothing'\n"


@pytest.mark.parametrize(
    ("args", "problem"),
    [
        (["--tenant", "a b"], "not a valid tenant id"),
        (["--tenant", "acme", "--expires", "0d"], "must live a while"),
        (["--tenant", "acme", "--expires", "tomorrow"], "expected a duration"),
        (["--tenant", "acme", "--expires", "9999999d"], "later than the year 9999"),
        (["--tenant", "acme", "--expires", "99999999999999999999w"], "later than the year 9999"),
        # 9999-12-31 in its own zone, 10000-01-01 in UTC: ``keys list`` could not show it.
        (
            ["--tenant", "acme", "--expires", "9999-12-31T23:59:59-14:00"],
            "later than the year 9999",
        ),
    ],
)
def test_a_bad_create_is_exit_2_and_prints_no_key(
    capsys: pytest.CaptureFixture[str], database: str, args: list[str], problem: str
) -> None:
    code, out, err = keys(capsys, "create", *args, "--database", database)

    assert (code, out) == (2, "")
    assert problem in err


def test_the_json_listing_gives_each_keys_status_and_times(
    capsys: pytest.CaptureFixture[str], database: str
) -> None:
    keys(capsys, "create", "--tenant", "acme", "--database", database)  # makes the schema
    engine = create_engine(database)
    old, revoked = (
        ApiKey("key_old", "acme", None, key_digest(new_key()), 1000.0, 2000.0),
        ApiKey("key_revoked", "globex", "ci", key_digest(new_key()), 1500.0, None),
    )

    async def stored() -> None:
        store = SqlKeyStore(engine)
        try:
            await store.add(old)
            await store.add(revoked)
            await store.revoke("key_revoked", 3000.0)
        finally:
            await engine.dispose()

    asyncio.run(stored())
    code, out, err = keys(capsys, "list", "--json", "--database", database)

    assert (code, err) == (0, "")
    *stored_ones, made = json.loads(out)  # oldest first
    assert made["id"].startswith("key_")
    assert stored_ones == [
        {
            "id": "key_old",
            "tenant": "acme",
            "name": None,
            "status": "expired",
            "created_at": "1970-01-01T00:16:40Z",
            "expires_at": "1970-01-01T00:33:20Z",
            "revoked_at": None,
        },
        {
            "id": "key_revoked",
            "tenant": "globex",
            "name": "ci",
            "status": "revoked",
            "created_at": "1970-01-01T00:25:00Z",
            "expires_at": None,
            "revoked_at": "1970-01-01T00:50:00Z",
        },
    ]


def test_a_key_stored_with_a_far_expiry_does_not_break_the_listing(
    capsys: pytest.CaptureFixture[str], database: str
) -> None:
    keys(capsys, "create", "--tenant", "acme", "--database", database)  # makes the schema
    engine = create_engine(database)

    async def far() -> None:
        try:
            await SqlKeyStore(engine).add(
                ApiKey(new_id("key"), "acme", "far", key_digest(new_key()), 0.0, 1e15)
            )
        finally:
            await engine.dispose()

    asyncio.run(far())
    code, out, err = keys(capsys, "list", "--json", "--database", database)

    assert (code, err) == (0, "")
    [far] = [key for key in json.loads(out) if key["name"] == "far"]
    assert far["expires_at"] == "9999-12-31T23:59:59Z"


def test_an_unreachable_database_is_exit_1(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, err = keys(capsys, "list", "--database", "postgresql://nobody@127.0.0.1:1/none")

    assert (code, out) == (1, "")
    database = "PostgreSQL database none on 127.0.0.1:1 as nobody"
    assert err.startswith(f"stateway: {database}: Storage failed while migrating the database.")
    assert "Traceback" not in err


@pytest.mark.parametrize("command", [["list"], ["create", "--tenant", "acme"], ["revoke", "k"]])
def test_a_sqlite_directory_that_cannot_be_made_is_exit_1(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, command: list[str]
) -> None:
    (tmp_path / "file").write_text("")  # where the database's directory would be
    database = f"sqlite:///{tmp_path}/file/sub/keys.db"

    code, out, err = keys(capsys, *command, "--database", database)

    assert (code, out) == (1, "")
    assert err == (
        f"stateway: SQLite database at {tmp_path}/file/sub/keys.db: cannot create its "
        f"directory {tmp_path}/file/sub (Not a directory: {tmp_path}/file/sub)\n"
    )


@pytest.mark.parametrize(
    ("value", "seconds"),
    [("45s", 45), ("90m", 5400), ("12h", 43200), ("30d", 2592000), ("2w", 1209600)],
)
def test_durations(value: str, seconds: int) -> None:
    assert expiry(value, 1000.0) == 1000.0 + seconds


def test_a_duration_may_be_one_second_or_end_in_the_last_second_of_9999() -> None:
    assert expiry("1s", 1000.0) == 1001.0
    latest = datetime(9999, 12, 31, 23, 59, 59, tzinfo=UTC).timestamp()
    assert expiry("1s", latest - 1) == latest


def test_iso_times_are_utc_unless_they_say() -> None:
    assert expiry("2030-01-01T00:00:00", 0.0) == 1893456000.0
    assert expiry("2030-01-01T01:00:00+01:00", 0.0) == 1893456000.0
    with pytest.raises(ValueError, match="in the past"):
        expiry("2030-01-01T00:00:00Z", 1893456000.0)
