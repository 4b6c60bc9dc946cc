"""The ``stateway`` process: stop signals, Ctrl+C while starting, a port in use, a closed
output pipe, and the ``fake-upstream`` subcommand."""

import json
import os
import signal
import socket
import subprocess
import sys
import urllib.error
import urllib.request
from pathlib import Path

import pytest

from stateway.launch import child_env, start_announced
from tests.cli.commands import stateway


def test_fake_upstream_subcommand_serves() -> None:
    command = [sys.executable, "-m", "stateway", "fake-upstream", "--port", "0"]
    with (
        start_announced(command, "listening on ") as url,
        urllib.request.urlopen(url.removesuffix("/v1") + "/health") as health,
    ):
        assert health.status == 200


def test_fake_upstream_subcommand_takes_a_strict_chat_template() -> None:
    command = [sys.executable, "-m", "stateway", "fake-upstream", "--port", "0"]
    messages = [{"role": "user", "content": "hi"}, {"role": "system", "content": "late"}]
    body = json.dumps({"model": "m", "messages": messages}).encode()
    with start_announced([*command, "--system-first"], "listening on ") as url:
        request = urllib.request.Request(
            url + "/chat/completions", data=body, headers={"content-type": "application/json"}
        )
        with pytest.raises(urllib.error.HTTPError) as refused:
            urllib.request.urlopen(request)
        refused.value.close()
    assert refused.value.code == 400


def interruptible(command: list[str]) -> subprocess.Popen[str]:
    """``command`` started with SIGINT at its default, as from a terminal: a runner that
    starts the suite in the background (``cmd &`` in a script) has it ignored, which a
    child inherits, and uvicorn's re-raised SIGINT would then end it with status 0."""
    return subprocess.Popen(
        command,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=child_env(),
        preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL),
    )


@pytest.mark.parametrize("sent", [signal.SIGINT, signal.SIGTERM])
def test_a_stop_signal_ends_serve_by_that_signal_without_a_traceback(
    tmp_path: Path, sent: signal.Signals
) -> None:
    """As uvicorn does: a shell or Docker reports SIGTERM as status 143, systemd counts it
    a clean stop."""
    command = [
        sys.executable, "-m", "stateway", "serve", "--port", "0",
        "--database", f"sqlite:///{tmp_path}/int.db", "--upstream", "http://127.0.0.1:9/v1",
    ]  # fmt: skip
    process = interruptible(command)
    assert process.stdout is not None
    while "listening on" not in process.stdout.readline():
        assert process.poll() is None
    process.send_signal(sent)
    _, stderr = process.communicate(timeout=30)
    assert process.returncode == -sent
    assert "Traceback" not in stderr
    assert "KeyboardInterrupt" not in stderr


_INTERRUPTED_AT = {
    # importing what serving runs: the second or more before anything is served
    "imports": """
import importlib.abc
class Interrupting(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path, target=None):
        if name == "stateway.subcommands":
            os.kill(os.getpid(), signal.SIGINT)
        return None
sys.meta_path.insert(0, Interrupting())
""",
    # migrating: the database is waited for
    "migrating": """
from stateway import subcommands
migrate = subcommands.migrate
async def interrupted(url):
    os.kill(os.getpid(), signal.SIGINT)
    await migrate(url)
subcommands.migrate = interrupted
""",
    # the last of start-up before uvicorn takes the signals (the loop's, meanwhile)
    "before uvicorn": """
from stateway import subcommands
subcommands._tune_gc = lambda: os.kill(os.getpid(), signal.SIGINT)
""",
}


@pytest.mark.parametrize("moment", list(_INTERRUPTED_AT))
def test_ctrl_c_while_serve_starts_ends_it_by_sigint_without_a_traceback(
    tmp_path: Path, moment: str
) -> None:
    """An operator who sees a wrong flag and presses Ctrl+C at once gets their prompt back
    quietly, whenever in start-up it lands."""
    arguments = [
        "serve", "--port", "0", "--database", f"sqlite:///{tmp_path}/int.db",
        "--upstream", "http://127.0.0.1:9/v1",
    ]  # fmt: skip
    script = (
        "import os, signal, sys\n"
        + _INTERRUPTED_AT[moment]
        + f"from stateway import cli\nsys.exit(cli.main({arguments!r}))\n"
    )
    process = interruptible([sys.executable, "-c", script])
    stdout, stderr = process.communicate(timeout=60)
    assert "listening on" not in stdout
    assert "Traceback" not in stderr
    assert "KeyboardInterrupt" not in stderr
    assert process.returncode == -signal.SIGINT


@pytest.mark.parametrize("command", ["serve", "fake-upstream"])
def test_a_port_in_use_is_a_readable_error(tmp_path: Path, command: str) -> None:
    """The second ``make fake-upstream``, or vLLM already on its port: no traceback."""
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        arguments = [command, "--port", str(port)]
        if command == "serve":
            arguments += ["--database", f"sqlite:///{tmp_path}/x.db"]
        result = stateway(*arguments)
    assert result.returncode == 1
    assert "Traceback" not in result.stderr
    assert result.stderr.splitlines()[-1] == (
        f"stateway: cannot listen on 127.0.0.1:{port}: Address already in use (another "
        "process listens there: stop it, or choose another port; 0 picks a free one)"
    )


def test_sigint_ends_the_fake_upstream_without_a_traceback() -> None:
    command = [sys.executable, "-m", "stateway", "fake-upstream", "--port", "0"]
    process = interruptible(command)
    assert process.stdout is not None
    while "listening on" not in process.stdout.readline():
        assert process.poll() is None
    process.send_signal(signal.SIGINT)
    _, stderr = process.communicate(timeout=30)
    assert process.returncode == -signal.SIGINT
    assert "Traceback" not in stderr


def test_output_into_a_closed_pipe_ends_quietly() -> None:
    """``stateway check-config | head -1``, ``stateway keys list | head``: a reader that
    left before the output ends is no traceback."""
    read, write = os.pipe()
    os.close(read)  # the reader gone before anything is written
    with os.fdopen(write, "w") as stdout:
        result = subprocess.run(
            [sys.executable, "-m", "stateway", "check-config"],
            stdout=stdout,
            stderr=subprocess.PIPE,
            text=True,
            env=child_env(),
            timeout=60,
            check=False,
        )
    assert "Traceback" not in result.stderr
    assert "BrokenPipeError" not in result.stderr
    assert result.returncode == 1
