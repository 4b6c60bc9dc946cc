"""``stateway backup``: the copy, what it refuses, and what a failure leaves (nothing).
Run by the test's process (:func:`stateway.cli.main`), but where a test needs a process
without root's power over file permissions. A copy made while a gateway serves, and
gateways started on it: ``tests/e2e/test_backup_restore.py``."""

import os
import signal
import sqlite3
import subprocess
import sys
from collections.abc import Callable, Iterator
from contextlib import closing
from pathlib import Path

import pytest

from stateway import cli
from stateway.launch import child_env
from stateway.storage.sql import backup as copying
from stateway.storage.sql.migrator import HEAD_REVISION
from tests.e2e.test_read_only_database import unprivileged

SECRET = ("sealing_key", "c2VhbGVk", 0)


@pytest.fixture
def database(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> Path:
    """A gateway's database (migrated, a sealing key stored) in a directory of its own."""
    path = tmp_path / "data" / "stateway.db"
    assert cli.main(["migrate", "--database", f"sqlite:///{path}"]) == 0
    with opened(path) as db:
        db.execute("INSERT INTO gateway_secrets VALUES (?, ?, ?)", SECRET)
    capsys.readouterr()
    return path


def opened(path: Path) -> closing[sqlite3.Connection]:
    """The SQLite database at ``path``, each statement committed, closed after the block."""
    return closing(sqlite3.connect(path, isolation_level=None))


def backup(database: Path, *args: str) -> int:
    return cli.main(["backup", *args, "--database", f"sqlite:///{database}"])


def secrets(path: Path) -> list[tuple[str, str, int]]:
    db = sqlite3.connect(f"file:{path}?mode=ro", uri=True)
    try:
        assert db.execute("PRAGMA integrity_check").fetchone() == ("ok",)
        return db.execute("SELECT * FROM gateway_secrets").fetchall()
    finally:
        db.close()


@pytest.fixture
def open_umask() -> Iterator[None]:
    """Files made meanwhile readable by anyone unless made otherwise."""
    before = os.umask(0)
    try:
        yield
    finally:
        os.umask(before)


@pytest.mark.usefixtures("open_umask")
def test_a_backup_is_a_private_copy_said_in_one_line(
    database: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    target = tmp_path / "copy.db"

    assert backup(database, str(target)) == 0

    said = capsys.readouterr()
    size = target.stat().st_size
    assert said.out == (
        f"backed up SQLite database at {database} to {target} ({size} bytes, schema revision"
        f" {HEAD_REVISION})\n"
    )
    assert said.err == ""
    assert target.stat().st_mode & 0o777 == 0o600
    assert sorted(p.name for p in tmp_path.iterdir()) == ["copy.db", "data"]
    assert secrets(target) == [SECRET]  # the sealing key comes along


def test_the_commits_still_in_the_log_are_copied(
    database: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A writer holds the database open, its last commit in the ``-wal`` file alone (no
    checkpoint: as a serving gateway's recent writes are): copying the file would miss
    that commit, the backup holds it."""
    later = ("cache_salt", "bGF0ZXI=", 1)
    with opened(database) as writer:
        writer.execute("PRAGMA wal_autocheckpoint=0")
        writer.execute("INSERT INTO gateway_secrets VALUES (?, ?, ?)", later)
        naive = tmp_path / "naive.db"
        naive.write_bytes(database.read_bytes())
        assert secrets(naive) == [SECRET]  # the file alone: the commit is in the log

        assert backup(database, str(tmp_path / "copy.db")) == 0

    assert capsys.readouterr().err == ""
    assert secrets(tmp_path / "copy.db") == [SECRET, later]


def test_an_existing_file_is_refused_unless_forced(
    database: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    target = tmp_path / "copy.db"
    target.write_text("an earlier backup")
    target.chmod(0o644)

    assert backup(database, str(target)) == 2
    assert capsys.readouterr().err == f"stateway: {target} exists; give --force to replace it\n"
    assert target.read_text() == "an earlier backup"

    assert backup(database, "--force", str(target)) == 0
    assert capsys.readouterr().out.startswith(f"backed up SQLite database at {database} to ")
    assert secrets(target) == [SECRET]
    assert target.stat().st_mode & 0o777 == 0o600


def test_forced_over_a_symlink_the_link_itself_is_replaced(
    database: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """As ``mv`` does (the copy is renamed to the target): the link becomes the backup, and
    the file it pointed to is left as it was (README, Backing up and restoring)."""
    pointed = tmp_path / "elsewhere.db"
    pointed.write_text("an earlier backup")
    target = tmp_path / "latest.db"
    target.symlink_to(pointed)

    assert backup(database, str(target)) == 2
    assert capsys.readouterr().err == f"stateway: {target} exists; give --force to replace it\n"
    assert backup(database, "--force", str(target)) == 0

    assert not target.is_symlink()
    assert secrets(target) == [SECRET]
    assert pointed.read_text() == "an earlier backup"
    to_the_database = tmp_path / "live.db"
    to_the_database.symlink_to(database)
    capsys.readouterr()
    assert backup(database, "--force", str(to_the_database)) == 2  # never in its place
    assert "is the database itself" in capsys.readouterr().err
    assert to_the_database.is_symlink()


def test_the_database_itself_or_a_directory_is_refused_even_forced(
    database: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    before = database.read_bytes()
    for itself in (database, database.parent / ".." / "data" / "stateway.db"):
        assert backup(database, "--force", str(itself)) == 2
        said = capsys.readouterr().err
        assert said == f"stateway: {itself} is the database itself; give another path\n"
    assert database.read_bytes() == before

    assert backup(database, "--force", str(tmp_path)) == 2
    said = capsys.readouterr().err
    assert said == f"stateway: {tmp_path} is a directory; give the backup's file name\n"


def test_a_copy_that_fails_leaves_nothing_and_an_earlier_file_as_it_was(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """The copy fails once it has begun writing (the file is not a database, found as
    the copy reads it): the temporary file beside the target goes."""
    broken = tmp_path / "data" / "stateway.db"
    broken.parent.mkdir()
    broken.write_bytes(b"no database here " * 512)
    target = tmp_path / "copy.db"

    assert backup(broken, str(target)) == 1
    assert capsys.readouterr().err == (
        f"stateway: cannot back up {broken} (file is not a database); nothing was written to"
        f" {target}\n"
    )
    assert list(tmp_path.iterdir()) == [broken.parent]

    target.write_text("an earlier backup")
    assert backup(broken, "--force", str(target)) == 1
    assert target.read_text() == "an earlier backup"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["copy.db", "data"]


def test_writes_between_the_copys_steps_neither_restart_it_nor_come_into_it(
    database: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The copy is made a few pages at a time (where a signal is handled), all in one
    read of the database: a gateway's commit between two steps is not in it, and does
    not start it again (under steady writes it would never end)."""
    steps: list[int] = []

    def written_meanwhile(_status: int, remaining: int, _total: int) -> None:
        steps.append(remaining)
        assert len(steps) < 10_000, "the copy keeps starting again"
        with opened(database) as db:
            db.execute("INSERT INTO gateway_secrets VALUES (?, ?, ?)", (f"k{len(steps)}", "", 0))

    monkeypatch.setattr(copying, "STEP_PAGES", 1)
    monkeypatch.setattr(copying, "_stepped", written_meanwhile)
    target = tmp_path / "copy.db"

    assert backup(database, str(target)) == 0

    assert len(steps) > 1
    assert steps == sorted(steps, reverse=True)
    assert secrets(target) == [SECRET]  # as the database was when the copy began
    assert len(secrets(database)) == 1 + len(steps)


STOPPED_BY = """
import os, signal, sys
from stateway import cli
from stateway.storage.sql import backup
signal.signal(signal.SIGINT, signal.default_int_handler)  # a background job's is ignored
def stop(*args):
    os.kill(os.getpid(), {signum})
    return {hook}(*args)
{hook} = backup.{hook}
backup.STEP_PAGES = 1
backup.{hook} = stop
sys.exit(cli.main(sys.argv[1:]))
"""
"""``stateway backup`` sent ``signum`` when the copy calls ``hook`` (mid-copy, between
two steps; or once copied, as its schema revision is read)."""


@pytest.mark.parametrize("hook", ["_stepped", "_revision"], ids=["mid-copy", "copied"])
@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGHUP, signal.SIGINT])
def test_a_signal_stops_the_copy_and_leaves_nothing(
    database: Path, tmp_path: Path, signum: signal.Signals, hook: str
) -> None:
    """Ctrl+C, a service manager's or a timeout's SIGTERM, a closed terminal's SIGHUP: the
    copy stops between two steps (a large database is not copied to its end first), its
    temporary file beside the target is removed, and the command ends by that signal."""
    target = tmp_path / "out" / "copy.db"
    target.parent.mkdir()
    script = STOPPED_BY.format(signum=int(signum), hook=hook)
    command = [sys.executable, "-c", script, "backup", str(target)]
    command += ["--database", f"sqlite:///{database}"]

    result = subprocess.run(
        command, capture_output=True, text=True, env=child_env(), timeout=60, check=False
    )

    assert result.returncode == -signum, result.stderr
    assert result.stdout == ""
    assert "Traceback" not in result.stderr
    assert list(target.parent.iterdir()) == []


def unprivileged_backup(database: Path, target: Path) -> subprocess.CompletedProcess[str]:
    """``stateway backup`` by a process of its own, without root's power over file
    permissions (as a deployment runs it)."""
    command = [*unprivileged(), sys.executable, "-m", "stateway", "backup"]
    command += [str(target), "--database", f"sqlite:///{database}"]
    return subprocess.run(
        command, capture_output=True, text=True, env=child_env(), timeout=60, check=False
    )


def test_a_directory_it_may_not_write_is_said_and_left_empty(
    database: Path, tmp_path: Path
) -> None:
    locked = tmp_path / "locked"
    locked.mkdir(mode=0o555)

    result = unprivileged_backup(database, locked / "copy.db")

    assert result.returncode == 1, result.stderr
    assert result.stderr == (
        f"stateway: cannot write in {locked} (Permission denied); nothing was written to"
        f" {locked}/copy.db\n"
    )
    assert list(locked.iterdir()) == []


def alone(database: Path) -> None:
    """The files SQLite keeps beside ``database`` (empty: it is not open) removed."""
    for each in database.parent.iterdir():
        if each != database:
            each.unlink()


def test_a_read_only_database_is_copied(database: Path, tmp_path: Path) -> None:
    alone(database)
    database.chmod(0o444)

    result = unprivileged_backup(database, tmp_path / "copy.db")

    assert result.returncode == 0, result.stderr
    assert secrets(tmp_path / "copy.db") == [SECRET]


def test_a_database_it_may_not_read_is_said(database: Path, tmp_path: Path) -> None:
    """Unreadable, or in a directory it may not write, where SQLite must make the file
    it reads a database in write-ahead logging with (as the gateway leaves it)."""
    database.chmod(0)
    result = unprivileged_backup(database, tmp_path / "copy.db")
    assert result.returncode == 1, result.stderr
    assert result.stderr == (
        f"stateway: cannot read the database {database} (Permission denied: {database});"
        f" nothing was written to {tmp_path}/copy.db\n"
    )

    database.chmod(0o444)
    alone(database)
    database.parent.chmod(0o555)
    result = unprivileged_backup(database, tmp_path / "copy.db")
    assert result.returncode == 1, result.stderr
    assert result.stderr == (
        f"stateway: cannot back up {database}: SQLite makes its shared-memory file (-shm)"
        f" beside it to read it, and may not write in {database.parent}; run as a user who"
        f" may (the gateway's); nothing was written to {tmp_path}/copy.db\n"
    )
    assert sorted(p.name for p in tmp_path.iterdir()) == ["data"]


def test_a_missing_database_is_said_not_made(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    missing = tmp_path / "typo.db"
    target = tmp_path / "copy.db"

    assert backup(missing, str(target)) == 1

    assert capsys.readouterr().err == (
        f"stateway: the database {missing} is missing (no such file); nothing was written to"
        f" {target}\n"
    )
    assert list(tmp_path.iterdir()) == []


def test_a_file_holding_no_gateway_schema_is_refused(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    other = tmp_path / "other.db"
    with opened(other) as db:
        db.execute("CREATE TABLE notes (text)")
    target = tmp_path / "copy.db"

    assert backup(other, str(target)) == 1

    said = capsys.readouterr().err
    assert said.startswith(f"stateway: {other} holds no stateway schema: not a gateway's ")
    assert not target.exists()
    assert not [p for p in tmp_path.iterdir() if p.name.endswith(".partial")]


def test_an_older_schema_is_copied_as_it_is_and_said(
    database: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    older = f"{int(HEAD_REVISION) - 1:04d}"
    with opened(database) as db:
        db.execute("UPDATE alembic_version SET version_num = ?", (older,))
    target = tmp_path / "copy.db"

    assert backup(database, str(target)) == 0

    said = capsys.readouterr()
    assert f"schema revision {older})" in said.out
    assert said.err == (
        f"stateway: note: the database is at schema revision {older}, older than this"
        f" release's {HEAD_REVISION}: copied as it is; a gateway of this release started on"
        " the copy upgrades it\n"
    )
    with opened(target) as db:
        assert db.execute("SELECT version_num FROM alembic_version").fetchone() == (older,)


def test_postgresql_is_refused_with_the_pg_dump_command_that_backs_it_up(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Nothing is opened: the refusal comes before any connection (port 9 has no server)."""
    url = "postgresql://gateway:hunter2@127.0.0.1:9/state"
    target = tmp_path / "state.dump"

    code = cli.main(["backup", str(target), "--database", url])

    assert code == 2
    said = capsys.readouterr().err
    assert said == (
        "stateway: PostgreSQL database state on 127.0.0.1:9 as gateway: stateway backup"
        " copies SQLite databases only; back up PostgreSQL with its own tools: pg_dump"
        f" --format=custom --file={target} --host=127.0.0.1 --port=9 --username=gateway"
        " state (restore with pg_restore)\n"
    )
    assert "hunter2" not in said
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize(
    ("query", "command"),
    [
        pytest.param(
            "?sslmode=verify-full&target_session_attrs=read-write&passfile=/etc/pg%20pass",
            "PGSSLMODE=verify-full PGTARGETSESSIONATTRS=read-write PGPASSFILE='/etc/pg pass'"
            " pg_dump --format=custom --file={target} --host=db.example --port=5433"
            " --username=gateway state",
            id="parameters",
        ),
        pytest.param(
            "?host=db1:5433&host=db2:5432&krbsrvname=pg",
            "PGKRBSRVNAME=pg pg_dump --format=custom --file={target} --host=db1,db2"
            " --port=5433,5432 --username=gateway state",
            id="hosts",
        ),
        pytest.param(
            "?host=/run/postgresql",
            "pg_dump --format=custom --file={target} --host=/run/postgresql"
            " --username=gateway state",
            id="socket",
        ),
        pytest.param(
            "?host=[::1]:5433",
            "pg_dump --format=custom --file={target} --host=::1 --port=5433"
            " --username=gateway state",
            id="ipv6",  # libpq takes no brackets: "could not translate host name"
        ),
        pytest.param(
            "?host=::1",
            "pg_dump --format=custom --file={target} --host=::1 --username=gateway state",
            id="ipv6-without-port",
        ),
    ],
)
def test_the_pg_dump_command_connects_as_the_gateway_does(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], query: str, command: str
) -> None:
    """The URL's parameters (a certificate checked, a primary asked for, a password file)
    and its hosts, as libpq's environment and pg_dump's options: a command run as
    printed must not connect with less (``sslmode`` ``prefer`` takes any certificate)."""
    where = "" if "host=" in query else "db.example:5433"
    url = f"postgresql://gateway:hunter2@{where}/state{query}"
    target = tmp_path / "state.dump"

    assert cli.main(["backup", str(target), "--database", url]) == 2

    said = capsys.readouterr().err
    assert said.endswith(f": {command.format(target=target)} (restore with pg_restore)\n")
    assert "hunter2" not in said


def test_in_memory_sqlite_is_refused(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert cli.main(["backup", str(tmp_path / "copy.db"), "--database", "sqlite:///:memory:"]) == 2
    assert "In-memory SQLite is not supported" in capsys.readouterr().err
    assert list(tmp_path.iterdir()) == []


def test_the_database_is_found_in_the_configuration_file(
    database: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    config = tmp_path / "stateway.toml"
    config.write_text(f'[storage]\ndatabase = "sqlite:///{database}"\n')
    target = tmp_path / "copy.db"

    assert cli.main(["backup", str(target), "--config", str(config)]) == 0

    assert secrets(target) == [SECRET]


def test_a_hard_link_to_the_database_is_the_database_itself(
    database: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    linked = tmp_path / "linked.db"
    os.link(database, linked)
    assert backup(database, "--force", str(linked)) == 2
    assert capsys.readouterr().err == (
        f"stateway: {linked} is the database itself; give another path\n"
    )


def test_a_directory_given_as_the_database_is_said_to_be_no_file(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(copying.BackupFailed) as failed:
        copying.back_up(tmp_path, tmp_path / "copy.db")
    assert str(failed.value) == f"the database {tmp_path} is not a file"


def test_a_file_there_is_refused_unless_replace_is_asked(database: Path, tmp_path: Path) -> None:
    target = tmp_path / "copy.db"
    target.write_text("an earlier backup")
    with pytest.raises(copying.TargetExists):
        copying.back_up(database, target)
    assert target.read_text() == "an earlier backup"


def test_the_words_for_a_file_holding_no_gateway_schema(tmp_path: Path) -> None:
    other = tmp_path / "other.db"
    with opened(other) as db:
        db.execute("CREATE TABLE notes (text)")
    with pytest.raises(copying.BackupFailed) as failed:
        copying.back_up(other, tmp_path / "copy.db")
    assert str(failed.value) == (
        f"{other} holds no stateway schema: not a gateway's database (one is made by"
        " `stateway migrate` or `stateway serve`)"
    )


@pytest.mark.parametrize(
    ("error", "said"),
    [(OSError(5, "Input/output error"), "Input/output error"), (OSError(), "OSError")],
)
def test_a_copy_that_cannot_be_synced_is_said_and_leaves_nothing(
    database: Path,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    error: OSError,
    said: str,
) -> None:
    monkeypatch.setattr(copying.os, "fsync", raising(error))
    target = tmp_path / "copy.db"
    with pytest.raises(copying.BackupFailed) as failed:
        copying.back_up(database, target)
    assert str(failed.value) == f"cannot write in {tmp_path} ({said})"
    assert not [p for p in tmp_path.iterdir() if p.name != "data"]


def raising(error: OSError) -> Callable[..., None]:
    """A stand-in for an ``os`` call that fails with ``error``."""

    def call(*_args: object) -> None:
        raise error

    return call


def no_links(errno_: int) -> object:
    def link(_source: object, _target: object) -> None:
        raise OSError(errno_, os.strerror(errno_), str(_target))

    return link


def test_without_hard_links_the_copy_is_renamed_into_place(
    database: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(copying.os, "link", no_links(1))  # EPERM, as FAT or SMB say
    target = tmp_path / "copy.db"
    assert copying.back_up(database, target).path == target
    assert secrets(target) == [SECRET]


def test_a_file_made_at_the_target_meanwhile_is_not_replaced(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Made after the target was checked, before the copy is placed (``_place`` called as
    ``back_up`` calls it then): by a link's refusal, or checked again without links."""
    partial, target = tmp_path / "partial", tmp_path / "copy.db"
    partial.write_text("the copy")
    target.write_text("made meanwhile")
    for link in (os.link, no_links(1)):
        monkeypatch.setattr(copying.os, "link", link)
        with pytest.raises(copying.TargetExists) as refused:
            copying._place(partial, target, replace=False)
        assert str(refused.value) == f"{target} exists; give --force to replace it"
    assert target.read_text() == "made meanwhile"


@pytest.mark.parametrize(
    ("error", "said"),
    [
        (OSError(5, "Input/output error", "copy.db"), "Input/output error: copy.db"),
        (OSError(5, "Input/output error"), "Input/output error"),
        (OSError(), "OSError"),
    ],
    ids=["named", "unnamed", "unsaid"],
)
def test_a_link_failing_otherwise_is_said_naming_the_file(
    database: Path,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    error: OSError,
    said: str,
) -> None:
    monkeypatch.setattr(copying.os, "link", raising(error))
    target = tmp_path / "copy.db"
    with pytest.raises(copying.BackupFailed) as failed:
        copying.back_up(database, target)
    assert str(failed.value) == f"cannot write {target} ({said})"
    assert not target.exists()


@pytest.mark.parametrize(
    ("hosts", "option"),
    [
        ("host=db:abc", "--host=db:abc"),
        ("host=/run/pg:5432", "--host=/run/pg:5432"),
    ],
    ids=["no-port", "socket-directory"],
)
def test_a_hosts_port_is_only_digits_and_never_a_directorys(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], hosts: str, option: str
) -> None:
    target = tmp_path / "state.dump"
    url = f"postgresql://gateway@/state?{hosts}"
    assert cli.main(["backup", str(target), "--database", url]) == 2
    said = capsys.readouterr().err
    assert f"--file={target} {option} --username=gateway state (" in said


def test_the_help_says_what_backup_and_its_options_do(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit):
        cli.main(["--help"])
    listed = " ".join(capsys.readouterr().out.split())  # as argparse wraps it
    assert "backup copy the SQLite database, consistently, while a gateway serves it" in listed
    with pytest.raises(SystemExit):
        cli.main(["backup", "--help"])
    told = " ".join(capsys.readouterr().out.split())
    for option in (
        "path the file to write (refused if it exists)",
        "--force replace PATH if it exists",
        "--config CONFIG TOML configuration file",
        "--database DATABASE sqlite:///file.db",
    ):
        assert option in told
