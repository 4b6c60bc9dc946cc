"""``stateway migrate``, and ``serve`` meeting its database: bad URLs, unreachable or
unwritable databases, stored keys it cannot use, ends it cannot store."""

import json
import socket
import sqlite3
import subprocess
import sys
from pathlib import Path

import pytest

from stateway import __version__, cli
from stateway.launch import child_env, launch
from stateway.storage.sql.migrator import HEAD_REVISION
from tests.cli.commands import stateway


def test_migrate_creates_the_schema(tmp_path: Path) -> None:
    database = f"sqlite:///{tmp_path}/m.db"
    first = stateway("migrate", "--database", database)
    assert first.returncode == 0, first.stderr
    assert (tmp_path / "m.db").exists()
    assert stateway("migrate", "--database", database).returncode == 0


def test_migrate_needs_the_database_not_the_serving_secrets(tmp_path: Path) -> None:
    """A migration job (a deploy step, an init container) is given the database, not the
    upstream keys, MCP headers or admin credential the file names: those are checked when
    serving (and by check-config), while the file itself is still validated."""
    path = tmp_path / "gateway.toml"
    text = f"[storage]\ndatabase = 'sqlite:///{tmp_path}/m.db'\n"
    text += "[admin]\nreload_endpoint = true\napi_key_env = 'STATEWAY_TEST_UNSET_ADMIN'\n"
    text += "[mcp_servers.docs]\nurl = 'http://127.0.0.1:9/mcp'\n"
    text += "headers_env = { Authorization = 'STATEWAY_TEST_UNSET_MCP' }\n"
    text += "[[backends]]\nname = 'openai'\nurl = 'https://api.openai.com/v1'\n"
    text += "api_key_env = 'STATEWAY_TEST_UNSET_KEY'\n"
    path.write_text(text)
    result = stateway("migrate", "--config", str(path))
    assert result.returncode == 0, result.stderr
    assert (tmp_path / "m.db").exists()
    path.write_text(text + "bogus = 1\n")
    rejected = stateway("migrate", "--config", str(path))
    assert rejected.returncode == 2
    assert "backends.0.bogus" in rejected.stderr


def test_serve_refuses_a_bad_database_url() -> None:
    result = stateway("serve", "--port", "0", "--database", "mysql://x/y")
    assert result.returncode != 0
    assert "Traceback" not in result.stderr


@pytest.mark.parametrize(
    "command",
    [
        ["serve", "--port", "0"],
        ["check-config"],
        ["migrate"],
        ["keys", "list"],
        ["backup", "state.dump"],
    ],
    ids=lambda command: command[0],
)
def test_several_hosts_without_their_ports_are_refused_before_anything_runs(
    tmp_path: Path, command: list[str]
) -> None:
    """Checked with the configuration: ``migrate`` (``serve``, ``keys``) failed with
    SQLAlchemy's traceback, ``check-config`` called it valid, ``backup`` printed a
    pg_dump command for it."""
    url = "postgresql://u:hunter2@/db?host=h1&host=h2"
    args = [str(tmp_path / arg) if arg.endswith(".dump") else arg for arg in command]
    result = stateway(*args, "--database", url)

    assert result.returncode == 2
    assert result.stderr.startswith("stateway: invalid configuration:\n  storage.database: ")
    assert (
        "The database URL names several hosts; give each its port, in a host parameter of its"
        " own: ?host=h1:5432&host=h2:5432 (set by --database)\n"
    ) in result.stderr
    assert "Traceback" not in result.stderr
    assert "hunter2" not in result.stderr + result.stdout


def test_unreachable_database_is_a_readable_error() -> None:
    result = stateway("migrate", "--database", "postgresql://nobody@127.0.0.1:9/none")
    assert result.returncode == 1
    assert result.stderr.startswith(
        "stateway: PostgreSQL database none on 127.0.0.1:9 as nobody: Storage failed while"
        " migrating the database. ("
    )
    assert "Traceback" not in result.stderr


def test_an_unwritable_database_directory_is_a_readable_error(tmp_path: Path) -> None:
    blocker = tmp_path / "file"
    blocker.write_text("")
    result = stateway("migrate", "--database", f"sqlite:///{blocker}/sub/x.db")
    assert result.returncode == 1
    assert result.stderr.startswith(
        f"stateway: SQLite database at {blocker}/sub/x.db: cannot create its directory "
        f"{blocker}/sub (Not a directory: {blocker}/sub)"
    )
    assert "Traceback" not in result.stderr


def test_serve_announces_database_upstreams_and_address(tmp_path: Path) -> None:
    command = [
        sys.executable, "-m", "stateway", "serve", "--port", "0",
        "--database", f"sqlite:///{tmp_path}/banner.db", "--upstream", "http://127.0.0.1:9/v1",
    ]  # fmt: skip
    process = subprocess.Popen(
        command, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True, env=child_env()
    )
    try:
        assert process.stdout is not None
        lines = []
        for line in process.stdout:
            lines.append(line.strip())
            if "listening on http://127.0.0.1:" in line:
                break
    finally:
        process.terminate()
        process.wait(timeout=30)
    assert f"database: SQLite database at {tmp_path}/banner.db" in lines
    assert "upstream default: http://127.0.0.1:9/v1 (chat API; every model)" in lines
    assert lines[-1].startswith(f"stateway {__version__} listening on http://127.0.0.1:")


def test_serve_refuses_an_unusable_stored_sealing_key(tmp_path: Path) -> None:
    database = f"sqlite:///{tmp_path}/s.db"
    assert stateway("migrate", "--database", database).returncode == 0
    with sqlite3.connect(tmp_path / "s.db") as db:
        db.execute("INSERT INTO gateway_secrets VALUES ('sealing_key', 'c2hvcnQ=', 0)")
    result = stateway("serve", "--port", "0", "--database", database)
    assert result.returncode == 2
    assert "sealing key stored in the database is unusable" in result.stderr
    assert "Traceback" not in result.stderr


def _left_running(path: Path) -> None:
    """A response a dead process of this host left in progress in the database at
    ``path``, its instructions a prompt the log must not show."""
    dead = f"{socket.gethostname()} 999999999 0"
    body = {"id": "resp_left", "created_at": 1, "model": "m", "status": "in_progress"}
    body["instructions"] = "a secret prompt"
    with sqlite3.connect(path) as db:
        db.execute(
            "INSERT INTO responses (tenant_id, id, status, created_at, body, owner)"
            " VALUES ('default', 'resp_left', 'in_progress', 1, ?, ?)",
            (json.dumps(body), dead),
        )


def _refusing(path: Path, table: str) -> None:
    """Every insert and update of ``table`` in the database at ``path`` refused."""
    with sqlite3.connect(path) as db:
        for when in ("INSERT", "UPDATE"):
            db.execute(
                f"CREATE TRIGGER refused_{when} BEFORE {when} ON {table}"
                " BEGIN SELECT RAISE(ABORT, 'refused'); END"
            )


def test_a_storage_failure_as_serving_starts_is_a_readable_error(tmp_path: Path) -> None:
    """The write serving starts with refused (this process's lease): the database and
    what it said, as any start-up failure of the database, without a traceback or the
    statement and its parameters."""
    path = tmp_path / "s.db"
    database = f"sqlite:///{path}"
    assert stateway("migrate", "--database", database).returncode == 0
    _refusing(path, "run_owners")

    result = stateway("serve", "--port", "0", "--database", database)

    assert result.returncode == 1, result.stderr
    assert result.stderr.endswith(
        f"stateway: SQLite database at {path}: Storage rejected the data while registering"
        " a run owner. (IntegrityError: refused)\n"
    )
    assert "Traceback" not in result.stderr
    assert "INSERT" not in result.stderr
    assert "UPDATE" not in result.stderr


def test_a_left_response_whose_end_is_refused_is_logged_and_serving_starts(
    tmp_path: Path,
) -> None:
    """A response a dead process of this host left running, whose end the database
    refuses for its data (refused again at every start): it is left in progress, named in
    an error line without a traceback, the statement or its parameters (a prompt), and
    serving starts."""
    path = tmp_path / "s.db"
    database = f"sqlite:///{path}"
    assert stateway("migrate", "--database", database).returncode == 0
    _left_running(path)
    _refusing(path, "responses")
    command = [sys.executable, "-m", "stateway", "serve", "--port", "0", "--database", database]
    log_path = tmp_path / "stderr.log"
    with log_path.open("w") as stderr, launch(command, "listening on ", stderr=stderr):
        pass
    logged = log_path.read_text()
    assert "the database refused the end of response resp_left" in logged
    assert "Traceback" not in logged
    assert "a secret prompt" not in logged
    assert "INSERT" not in logged
    assert "UPDATE" not in logged


def test_a_sqlite_file_that_cannot_be_opened_is_a_readable_error(tmp_path: Path) -> None:
    # aiosqlite's worker thread, left behind by a failed connect, printed a traceback
    # about a closed event loop after the message (most runs: checked several times).
    (tmp_path / "directory.db").mkdir()
    for _ in range(4):
        result = stateway("migrate", "--database", f"sqlite:///{tmp_path}/directory.db")
        assert result.returncode == 1
        assert result.stderr.startswith(
            f"stateway: SQLite database at {tmp_path}/directory.db: Storage failed while migrating"
        )
        assert "Traceback" not in result.stderr


def test_a_database_failure_names_the_database_then_says_what_it_said(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """One clean line: which database, then its error (whatever punctuation ends it)."""
    database = f"sqlite:///{tmp_path}/newer.db"
    assert cli.main(["migrate", "--database", database]) == 0
    with sqlite3.connect(tmp_path / "newer.db") as db:
        db.execute("UPDATE alembic_version SET version_num = '9999_future'")
    capsys.readouterr()

    assert cli.main(["migrate", "--database", database]) == 1
    assert capsys.readouterr().err == (
        f"stateway: SQLite database at {tmp_path}/newer.db: The database is at schema revision"
        f" '9999_future', which stateway {__version__} does not know (its newest is"
        f" '{HEAD_REVISION}'): a newer stateway has migrated it. Serve it with that version"
        " (a schema is never downgraded on start-up).\n"
    )
