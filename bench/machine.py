"""What the numbers were measured on: CPU, cores, memory, kernel, Python and libraries."""

from __future__ import annotations

import os
import platform
import shutil
import sqlite3
import subprocess
from importlib import metadata
from typing import Any

LIBRARIES = (
    "stateway",
    "uvicorn",
    "starlette",
    "aiohttp",
    "sqlalchemy",
    "aiosqlite",
    "uvloop",
    "httptools",
    "orjson",
    "pydantic",
)


def describe_machine() -> dict[str, Any]:
    return {
        "cpu": _cpu_model(),
        "cores": os.cpu_count(),
        "memory_gib": round(_mem_total_kib() / 1024 / 1024, 1),
        "kernel": platform.release(),
        "python": platform.python_version(),
        "sqlite": sqlite3.sqlite_version,
        "wrk": _wrk_version(),
        "libraries": {name: _version(name) for name in LIBRARIES},
        "load_average_at_start": [round(x, 2) for x in os.getloadavg()],
        "commit": _git_commit(),
    }


def _cpu_model() -> str:
    try:
        output = subprocess.run(
            ["lscpu"], capture_output=True, text=True, timeout=10, check=False
        ).stdout
    except OSError:
        output = ""
    for line in output.splitlines():
        if line.startswith("Model name:"):
            return line.split(":", 1)[1].strip()
    with open("/proc/cpuinfo") as cpuinfo:
        for line in cpuinfo:
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    return platform.processor() or "unknown"


def _mem_total_kib() -> int:
    with open("/proc/meminfo") as meminfo:
        for line in meminfo:
            if line.startswith("MemTotal:"):
                return int(line.split()[1])
    return 0


def _version(name: str) -> str | None:
    try:
        return metadata.version(name)
    except metadata.PackageNotFoundError:
        return None


def _wrk_version() -> str | None:
    wrk = shutil.which("wrk")
    if wrk is None:
        return None
    result = subprocess.run([wrk, "-v"], capture_output=True, text=True, timeout=10, check=False)
    first = (result.stdout or result.stderr).splitlines()
    return first[0].split(" [")[0] if first else None


def _git_commit() -> str | None:
    """The checked-out commit (read only: no git command that writes, not even status)."""
    try:
        head = subprocess.run(
            ["git", "rev-parse", "--short", "HEAD"],
            capture_output=True,
            text=True,
            timeout=10,
            check=True,
        ).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        return None
    return head or None
