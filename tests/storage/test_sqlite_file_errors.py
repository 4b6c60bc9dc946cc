"""A SQLite path the gateway cannot use: ``stateway migrate`` (which every start-up runs
first) says why in one line, exit 1, naming the file and what the system said of it,
rather than SQLite's "unable to open database file".

Run without root's power over file permissions (``unprivileged``), as a deployment runs."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from stateway.launch import child_env
from tests.e2e.test_read_only_database import unprivileged


def migrate(database: Path) -> subprocess.CompletedProcess[str]:
    command = [*unprivileged(), sys.executable, "-m", "stateway", "migrate"]
    return subprocess.run(
        [*command, "--database", f"sqlite:///{database}"],
        capture_output=True,
        text=True,
        env=child_env(),
        timeout=60,
        check=False,
    )


def refusal(database: Path) -> str:
    result = migrate(database)
    assert result.returncode == 1, result.stderr
    assert "Traceback" not in result.stderr
    assert result.stderr.count("\n") == 1, result.stderr
    prefix = f"stateway: SQLite database at {database}: "
    assert result.stderr.startswith(prefix), result.stderr
    return result.stderr.removeprefix(prefix).strip()


def test_a_new_file_in_a_directory_it_may_not_write_is_refused_saying_so(tmp_path: Path) -> None:
    directory = tmp_path / "locked"
    directory.mkdir(mode=0o555)
    database = directory / "stateway.db"

    assert refusal(database) == f"cannot create it (Permission denied: {database})"
    assert not database.exists()


def test_a_file_it_may_not_read_is_refused_saying_so(tmp_path: Path) -> None:
    database = tmp_path / "stateway.db"
    database.touch(mode=0o000)

    said = refusal(database)

    assert said.startswith("Storage failed while migrating the database."), said
    assert said.endswith(f"(PermissionError: [Errno 13] Permission denied: '{database}')")


def test_a_directory_in_the_files_place_is_refused_saying_so(tmp_path: Path) -> None:
    database = tmp_path / "stateway.db"
    database.mkdir()

    said = refusal(database)

    assert said.startswith("Storage failed while migrating the database."), said
    assert said.endswith(f"(IsADirectoryError: [Errno 21] Is a directory: '{database}')")


def test_a_file_in_a_directory_it_may_not_write_is_refused_naming_the_directory(
    tmp_path: Path,
) -> None:
    """The file writable, its directory not: SQLite cannot make its write-ahead log
    beside it, and refuses even to read (``SQLITE_READONLY_DIRECTORY``)."""
    directory = tmp_path / "locked"
    directory.mkdir()
    database = directory / "stateway.db"
    assert migrate(database).returncode == 0
    directory.chmod(0o555)

    said = refusal(database)

    assert said.startswith("Storage failed while migrating the database."), said
    assert "the directory holding it" in said, said
