"""Throughput at concurrency 32 with ``wrk`` (C, one thread: light on the shared CPU).

A generated Lua script sets the POST body and headers and, in ``done``, prints one JSON
line with wrk's own counts, errors (non-2xx answers included) and latency percentiles.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from bench.procfs import CpuWindow
from bench.scenarios import Scenario

_MARK = "BENCH_WRK_JSON "
_LUA = """\
wrk.method = "POST"
wrk.body = [===[@BODY@]===]
wrk.headers["Content-Type"] = "application/json"

done = function(summary, latency, requests)
  local e = summary.errors
  io.write(string.format(
    '@MARK@{"requests":%d,"duration_us":%d,"bytes":%d,'
    .. '"errors":{"connect":%d,"read":%d,"write":%d,"status":%d,"timeout":%d},'
    .. '"latency_us":{"mean":%.1f,"max":%d,"p50":%d,"p90":%d,"p99":%d,"p999":%d}}\\n',
    summary.requests, summary.duration, summary.bytes,
    e.connect, e.read, e.write, e.status, e.timeout,
    latency.mean, latency.max, latency:percentile(50), latency:percentile(90),
    latency:percentile(99), latency:percentile(99.9)))
end
"""


@dataclass(slots=True)
class LoadStats:
    """One wrk run: requests/s, latency percentiles (ms), errors and CPU use (cores)."""

    connections: int
    duration_s: float
    requests: int
    requests_per_s: float
    bytes_per_request: float
    latency_ms: dict[str, float]
    errors: dict[str, int]
    cpu_cores: dict[str, float] = field(default_factory=dict)

    @property
    def error_count(self) -> int:
        return sum(self.errors.values())


def wrk_path() -> str:
    path = shutil.which("wrk")
    if path is None:
        raise SystemExit(
            "bench: wrk is not installed. `make bench` installs it (apt-get install -y wrk);"
            " or install it yourself, e.g. `sudo apt-get install wrk`."
        )
    return path


def run_wrk(
    scenario: Scenario,
    *,
    connections: int,
    duration: float,
    warmup: float,
    cpu: CpuWindow | None = None,
) -> LoadStats:
    """Warm up for ``warmup`` seconds, then measure for ``duration`` seconds."""
    with tempfile.TemporaryDirectory(prefix="bench-wrk-") as tmp:
        script = Path(tmp) / "post.lua"
        script.write_text(lua_script(scenario.body))
        if warmup > 0:
            _wrk(scenario.url, script, connections, warmup)
        if cpu is not None:
            cpu.start(time.monotonic())
        raw = _wrk(scenario.url, script, connections, duration)
        cpu_cores = cpu.stop(time.monotonic()) if cpu is not None else {}
    seconds = raw["duration_us"] / 1e6
    latency = {k: round(v / 1000, 3) for k, v in raw["latency_us"].items()}
    return LoadStats(
        connections=connections,
        duration_s=round(seconds, 3),
        requests=raw["requests"],
        requests_per_s=round(raw["requests"] / seconds, 1),
        bytes_per_request=round(raw["bytes"] / max(raw["requests"], 1), 1),
        latency_ms=latency,
        errors=raw["errors"],
        cpu_cores=cpu_cores,
    )


def start_background_wrk(
    scenario: Scenario, *, connections: int, duration: float, script_dir: Path
) -> subprocess.Popen[str]:
    """A wrk run left going (for profiling under load); the caller waits for it."""
    script = script_dir / "profile-load.lua"
    script.write_text(lua_script(scenario.body))
    return subprocess.Popen(
        _command(scenario.url, script, connections, duration),
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )


def lua_script(body: bytes) -> str:
    text = body.decode()
    if "]===]" in text:
        raise ValueError("the body cannot be quoted in the Lua script")
    return _LUA.replace("@BODY@", text).replace("@MARK@", _MARK)


def parse_output(output: str) -> dict[str, Any]:
    for line in output.splitlines():
        if line.startswith(_MARK):
            parsed: dict[str, Any] = json.loads(line[len(_MARK) :])
            return parsed
    raise RuntimeError(f"wrk printed no summary:\n{output[-2000:]}")


def _wrk(url: str, script: Path, connections: int, duration: float) -> dict[str, Any]:
    command = _command(url, script, connections, duration)
    result = subprocess.run(
        command, capture_output=True, text=True, timeout=duration + 60, check=False
    )
    if result.returncode != 0:
        raise RuntimeError(f"wrk failed ({result.returncode}): {result.stderr[-2000:]}")
    return parse_output(result.stdout)


def _command(url: str, script: Path, connections: int, duration: float) -> list[str]:
    return [
        wrk_path(),
        "-t1",
        f"-c{connections}",
        f"-d{max(1, round(duration))}s",
        "--timeout",
        "10s",
        "-s",
        str(script),
        url,
    ]
