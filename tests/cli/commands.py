"""Running the ``stateway`` command as a user does: a process of its own
(:func:`stateway`), or, for a command that opens nothing, its own code run by the test's
process (:func:`stateway_here`)."""

import io
import os
import subprocess
import sys
from contextlib import redirect_stderr, redirect_stdout
from unittest.mock import patch

from stateway import cli
from stateway.launch import child_env


def stateway(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "stateway", *args],
        capture_output=True,
        text=True,
        env=child_env(env),
        timeout=60,
        check=False,
    )


def stateway_here(
    *args: str, env: dict[str, str] | None = None
) -> subprocess.CompletedProcess[str]:
    """``stateway ARGS`` as :func:`stateway` runs it, but by this process: the command's
    own code (:func:`stateway.cli.main`, as ``python -m stateway`` runs it), with ``env``
    added to the environment meanwhile and what it prints captured. For ``check-config``,
    which only reads its configuration and says what it found: a process of its own spends
    a second or two importing first, and each test checking a configuration ran several."""
    out, err = io.StringIO(), io.StringIO()
    with patch.dict(os.environ, env or {}), redirect_stdout(out), redirect_stderr(err):
        try:
            code = cli.main(list(args))
        except SystemExit as exit:  # argparse's refusal, as the process would end
            code = exit.code if isinstance(exit.code, int) else 1
    return subprocess.CompletedProcess(["stateway", *args], code, out.getvalue(), err.getvalue())
