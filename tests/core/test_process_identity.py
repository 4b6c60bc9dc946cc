"""A run's owner as ``/proc`` tells it (its start time, its PID namespace), the form it is
stored in, and whether it still runs: read from a ``/proc`` of the test's making where
the real one cannot show the case (a zombie, a command name holding ``) ``)."""

from __future__ import annotations

import os
import signal
import subprocess
from pathlib import Path

import pytest

from stateway.core import ownership
from stateway.core.ownership import ProcessIdentity, _pid_namespace, _start_time

PID = 4321


def fake_proc(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setattr(ownership, "_PROC", tmp_path)
    return tmp_path


def write_stat(proc: Path, command: str, state: str) -> None:
    """``/proc/PID/stat``: the pid, the command in parentheses, the state (field 3), then
    fields 4 to 52, each its number times ten (the start time, field 22, is ``220``)."""
    (proc / str(PID)).mkdir()
    rest = " ".join(str(field * 10) for field in range(4, 53))
    (proc / str(PID) / "stat").write_text(f"{PID} ({command}) {state} {rest}\n")


@pytest.mark.parametrize("command", ["sleep", "a) S (b", "tmux: server)"])
def test_the_start_time_is_field_22_whatever_the_command_name(
    command: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    write_stat(fake_proc(tmp_path, monkeypatch), command, "S")
    assert _start_time(PID) == "220"


@pytest.mark.parametrize("state", ["Z", "X"])
def test_a_process_that_exited_and_waits_to_be_reaped_has_no_start_time(
    state: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    write_stat(fake_proc(tmp_path, monkeypatch), "worker", state)
    assert _start_time(PID) is None


def test_no_such_process_has_no_start_time(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    fake_proc(tmp_path, monkeypatch)
    assert _start_time(PID) is None


def test_this_process_is_named_by_its_start_time() -> None:
    stat = Path(f"/proc/{os.getpid()}/stat").read_text()
    me = ProcessIdentity.current()
    assert (me.pid, me.started) == (os.getpid(), stat.rpartition(") ")[2].split()[19])


def test_without_proc_this_process_is_named_by_its_pid_alone(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    fake_proc(tmp_path, monkeypatch)
    me = ProcessIdentity.current()
    assert (me.pid, me.started, me.pid_namespace) == (os.getpid(), "", "")
    assert str(me).endswith(f" {os.getpid()} ")


def namespace_files(proc: Path, link: str, boot: str) -> None:
    (proc / "self" / "ns").mkdir(parents=True)
    (proc / "self" / "ns" / "pid").symlink_to(link)
    (proc / "sys" / "kernel" / "random").mkdir(parents=True)
    (proc / "sys" / "kernel" / "random" / "boot_id").write_text(f"{boot}\n")


def test_the_pid_namespace_is_the_boot_id_and_the_namespace_s_inode(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    namespace_files(fake_proc(tmp_path, monkeypatch), "pid:[4026531836]", "8d6b-41f2")
    assert _pid_namespace() == "8d6b-41f2:4026531836"


@pytest.mark.parametrize(
    ("link", "boot"),
    [
        ("pid:[4026531836]", "8d6b 41f2"),  # a space would split the stored owner
        ("pid:[4026531836]", ""),
        ("pid:[ns]", "8d6b-41f2"),
        ("pid", "8d6b-41f2"),
    ],
)
def test_a_pid_namespace_that_cannot_be_told_is_none(
    link: str, boot: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    namespace_files(fake_proc(tmp_path, monkeypatch), link, boot)
    assert _pid_namespace() == ""


def test_without_proc_there_is_no_pid_namespace(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    fake_proc(tmp_path, monkeypatch)
    assert _pid_namespace() == ""


def test_an_identity_without_a_namespace_is_stored_as_older_versions_wrote_it() -> None:
    assert str(ProcessIdentity("host-1", 12, "340")) == "host-1 12 340"
    assert str(ProcessIdentity("host-1", 12, "340", "boot:7")) == "host-1/boot:7 12 340"


def test_without_a_start_time_the_pid_alone_says_whether_it_runs() -> None:
    me = ProcessIdentity.current()
    assert ProcessIdentity(me.host, os.getpid(), "").is_alive()
    assert not ProcessIdentity(me.host, 2**22 + 17, "").is_alive()


def test_asking_whether_a_process_runs_sends_it_no_signal() -> None:
    child = subprocess.Popen(["sleep", "60"])
    try:
        assert ProcessIdentity(ProcessIdentity.current().host, child.pid, "").is_alive()
    finally:
        child.terminate()
        child.wait()
    # A signal sent by the check (a SIGHUP, say) would have ended it before SIGTERM did.
    assert child.returncode == -signal.SIGTERM


def test_another_user_s_process_runs(monkeypatch: pytest.MonkeyPatch) -> None:
    def refused(pid: int, sig: int) -> None:
        raise PermissionError(1, "Operation not permitted")

    monkeypatch.setattr(os, "kill", refused)
    assert ProcessIdentity("host-1", 1, "").is_alive()
