"""Profile a gateway process under load with py-spy and summarise where its time goes.

Two py-spy recordings per scenario, one after the other, under the same wrk load:

* ``--gil``: samples only the thread holding the GIL, i.e. Python CPU work (event loop
  and, when they hold it, the aiosqlite worker threads);
* ``--native``: every thread's stack including C frames (uvloop, httptools, sqlite3,
  libc), which shows time spent in C and in waits such as SQLite's busy handler.

The raw (collapsed-stack) files are kept under ``bench/results/``; the summary lists the
top functions by self time (the sampled leaf frame) and by total time (anywhere on the
stack), and the share of samples per package and per thread.
"""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
import tempfile
import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

from bench.load import parse_output, start_background_wrk
from bench.scenarios import Scenario

_FRAME = re.compile(r"^(?P<function>.*?) \((?P<file>[^()]*?)(?::\d+)?\)$")
_ROOT_SHARE = 0.9
"""Frames on at least this share of their thread's samples are plumbing, not findings."""
_PLUMBING_FILES = frozenset(
    {
        "<frozen runpy>",
        "stateway/__main__.py",
        "stateway/cli.py",
        "stateway/subcommands.py",
        "uvloop/__init__.py",
        "asyncio/runners.py",
        "threading.py",
    }
)
_PLUMBING_NATIVE = frozenset(
    {"loop.c", "loop-watcher.c", "core.c", "linux.c", "queue.h", "object.h", "_asynciomodule.c"}
)
"""Event-loop machinery (uvloop, libuv, asyncio's C tasks) under every callback."""
_NO_FRAME = "(no Python frame: C code)"
_OUTSIDE = "(outside stateway)"


@dataclass(slots=True)
class ProfileSummary:
    """The digest of one py-spy recording."""

    scenario: str
    mode: str
    seconds: float
    samples: int
    raw_path: str
    top_self: list[tuple[str, float]] = field(default_factory=list)
    top_total: list[tuple[str, float]] = field(default_factory=list)
    packages_self: list[tuple[str, float]] = field(default_factory=list)
    packages_total: list[tuple[str, float]] = field(default_factory=list)
    threads: list[tuple[str, float]] = field(default_factory=list)
    stateway_sites: list[tuple[str, float]] = field(default_factory=list)
    """Samples by the innermost ``stateway`` frame on the stack: the gateway's own code
    plus what it calls; "(outside stateway)" is server, framework and loop machinery."""
    error: str | None = None


@dataclass(slots=True)
class ProfileRun:
    """Both recordings of one scenario, and the load wrk drove meanwhile."""

    scenario: str
    requests_per_s: float | None
    summaries: list[ProfileSummary]


def py_spy_path() -> str | None:
    found = shutil.which("py-spy") or shutil.which("py-spy", path=str(Path(sys.executable).parent))
    return found


def profile_under_load(
    scenario: Scenario, pid: int, *, seconds: float, out_dir: Path, connections: int = 32
) -> ProfileRun:
    """Drive ``scenario`` with wrk and record ``pid`` twice (``--gil``, ``--native``)."""
    py_spy = py_spy_path()
    modes = ("gil", "native")
    slug = re.sub(r"[^a-z0-9]+", "-", scenario.key.lower()).strip("-")
    if py_spy is None:
        missing = "py-spy is not installed: pip install -e '.[bench]' (or pip install py-spy)"
        return ProfileRun(
            scenario.key,
            None,
            [ProfileSummary(scenario.key, m, 0, 0, "", error=missing) for m in modes],
        )
    summaries: list[ProfileSummary] = []
    with tempfile.TemporaryDirectory(prefix="bench-profile-") as tmp:
        load = start_background_wrk(
            scenario, connections=connections, duration=2 * seconds + 4, script_dir=Path(tmp)
        )
        try:
            time.sleep(1.5)
            for mode in modes:
                raw = out_dir / f"profile-{slug}-{mode}.txt"
                summaries.append(_record(py_spy, pid, mode, seconds, raw, scenario.key))
        finally:
            output, _ = load.communicate(timeout=4 * seconds + 60)
    try:
        done = parse_output(output)
        rps: float | None = round(done["requests"] / (done["duration_us"] / 1e6), 1)
    except RuntimeError:
        rps = None
    return ProfileRun(scenario.key, rps, summaries)


def _record(
    py_spy: str, pid: int, mode: str, seconds: float, raw: Path, scenario: str
) -> ProfileSummary:
    command = [py_spy, "record", "-p", str(pid), "-d", str(round(seconds)), "-r", "100"]
    command += ["-f", "raw", "-o", str(raw), f"--{mode}"]
    result = subprocess.run(
        command, capture_output=True, text=True, timeout=seconds + 60, check=False
    )
    if result.returncode != 0 or not raw.exists():
        error = (result.stderr or result.stdout).strip()[-500:]
        return ProfileSummary(scenario, mode, seconds, 0, str(raw), error=f"py-spy: {error}")
    return summarise(raw.read_text(), scenario=scenario, mode=mode, seconds=seconds, raw=raw)


def summarise(
    collapsed: str, *, scenario: str, mode: str, seconds: float, raw: Path, top: int = 15
) -> ProfileSummary:
    """Digest py-spy's collapsed stacks (``frame;frame;... COUNT`` per line)."""
    stacks: list[tuple[list[str], int]] = []
    for line in collapsed.splitlines():
        stack, _, number = line.rpartition(" ")
        if stack and number.isdigit():
            stacks.append((stack.split(";"), int(number)))
    total = sum(count for _, count in stacks)
    summary = ProfileSummary(scenario, mode, seconds, total, str(raw))
    if total == 0:
        summary.error = "py-spy recorded no samples"
        return summary
    self_time: Counter[str] = Counter()
    total_time: Counter[str] = Counter()
    package_self: Counter[str] = Counter()
    package_total: Counter[str] = Counter()
    threads: Counter[str] = Counter()
    sites: Counter[str] = Counter()
    frame_thread: Counter[tuple[str, str]] = Counter()
    for frames, count in stacks:
        keys = [_function_key(frame) for frame in frames]
        thread = _thread(keys)
        threads[thread] += count
        self_time[keys[-1]] += count
        own = [
            k for k in keys if _file(k).startswith("stateway/") and _file(k) not in _PLUMBING_FILES
        ]
        sites[own[-1] if own else _OUTSIDE] += count
        package_self[_package(keys[-1])] += count
        for key in set(keys):
            total_time[key] += count
            frame_thread[(key, thread)] += count
        for package in {_package(key) for key in keys if _file(key) not in _PLUMBING_FILES}:
            package_total[package] += count
    plumbing = {
        key
        for (key, thread), count in frame_thread.items()
        if count >= _ROOT_SHARE * threads[thread] or _file(key) in _PLUMBING_FILES
    }
    plumbing |= {key for key in total_time if _file(key) in _PLUMBING_NATIVE}

    def shares(counter: Counter[str], skip: set[str] | None = None) -> list[tuple[str, float]]:
        items = [(k, c) for k, c in counter.most_common() if not skip or k not in skip]
        return [(k, round(100 * c / total, 1)) for k, c in items[:top]]

    summary.top_self = shares(self_time)
    summary.top_total = shares(total_time, plumbing)
    summary.packages_self = shares(package_self)
    summary.packages_total = shares(package_total)
    summary.threads = shares(threads)
    summary.stateway_sites = shares(sites)
    return summary


def _function_key(frame: str) -> str:
    """``function (file)`` without the line number; native addresses grouped by library."""
    match = _FRAME.match(frame)
    if match is None:
        return frame or _NO_FRAME
    function, file = match["function"], match["file"]
    if function.startswith("0x"):
        return f"[{file}]"
    return f"{function} ({file})"


def _file(key: str) -> str:
    match = _FRAME.match(key)
    return match["file"] if match else key.strip("[]")


def _package(key: str) -> str:
    if key == _NO_FRAME:
        return key
    file = _file(key)
    if file.endswith(".py"):
        parts = file.split("/")
        if parts[0] == "stateway" and len(parts) > 2:
            return "/".join(parts[:2])
        return parts[0].removesuffix(".py")
    if ".so" in file:
        return "native: " + file.split(".so")[0].split(".cpython")[0]
    if file.endswith(".h"):
        return "native: (inlined header)"
    return "native: " + _C_SOURCES.get(file, file)


_C_SOURCES = {
    "loop.c": "uvloop",
    "core.c": "libuv",
    "linux.c": "libuv",
    "stream.c": "libuv",
    "cursor.c": "_sqlite3",
    "connection.c": "_sqlite3",
    "statement.c": "_sqlite3",
}


def _thread(keys: list[str]) -> str:
    for index, key in enumerate(keys):
        if key.startswith("Thread.run (") and index + 1 < len(keys):
            return "worker: " + keys[index + 1].split(" (")[0]
    return "main (event loop)"
