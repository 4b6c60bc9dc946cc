"""Running the ``stateway`` command as a user does: a process of its own."""

import subprocess
import sys

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
