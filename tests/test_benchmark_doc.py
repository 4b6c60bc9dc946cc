"""docs/benchmarks.md's fixed sections say what ``make bench`` does: its counts, warm-ups,
wrk flags, targets and options are the bench package's, and "How to run" names every
benchmark script. Read from the code (the settings ``python -m bench`` builds, without
running anything), so a changed default cannot leave the doc behind."""

from __future__ import annotations

import inspect
import re
from collections.abc import Callable
from pathlib import Path

import bench.__main__ as bench_main
import pytest
from bench import targets
from bench.latency import measure_latency
from bench.memory import LEAVING_INPUT, measure_memory, measure_memory_with_disconnects
from bench.overload import SLOW_INPUT
from bench.runner import Settings
from bench.scenarios import GATEWAY_STORE_FALSE, GATEWAY_STORE_TRUE

ROOT = Path(__file__).resolve().parent.parent
_DOC = (ROOT / "docs" / "benchmarks.md").read_text(encoding="utf-8")
_FIXED = _DOC.split("\n## Hardening", 1)[0]
"""The fixed sections: everything above the first dated one."""
_HOW_TO_RUN = _FIXED.split("\n## How to run\n", 1)[1]
_TIMES = "\N{MULTIPLICATION SIGN}"
_NOT_BENCHMARKS = {"passthrough"}
"""Scripts of the bench package that are parts of others (the floor hop), not benchmarks."""


class _Stop(Exception):
    pass


def _settings(monkeypatch: pytest.MonkeyPatch) -> Settings:
    """The settings a full ``python -m bench`` run would use."""
    captured: list[Settings] = []

    def run(settings: Settings) -> None:
        captured.append(settings)
        raise _Stop

    monkeypatch.setattr(bench_main, "run", run)
    with pytest.raises(_Stop):
        bench_main.main([])
    return captured[0]


def _flat(text: str) -> str:
    return " ".join(text.split())


def _default(function: Callable[..., object], name: str) -> object:
    return inspect.signature(function).parameters[name].default


def test_the_method_gives_the_full_runs_counts(monkeypatch: pytest.MonkeyPatch) -> None:
    s = _settings(monkeypatch)
    method = _flat(_FIXED)
    expected = [
        f"warms up ({s.warmup} requests)",
        f"sends {s.requests:,} sequential requests",
        f"in {_default(measure_latency, 'rounds')} rounds",
        f"`wrk -t1 -c{s.connections} -d{s.duration:g}s --timeout 10s`",
        f"(after a {s.wrk_warmup:g} s warm-up)",
        f"after a {s.rss_warmup}-request warm-up",
        f"after {s.rss_requests:,} requests",
        f"{_default(measure_memory, 'concurrency')} connections",
        f"from {_default(measure_memory_with_disconnects, 'concurrency')} connections",
        f"`{LEAVING_INPUT.removesuffix(' hello')}`",
        f"{s.overload_streams:,} streams opened at once",
        f"`{SLOW_INPUT.removesuffix(' hello')}`",
        f"not ended within {s.overload_seconds:g} s",
    ]
    assert [e for e in expected if e not in method] == []


def test_the_targets_table_gives_the_codes_limits() -> None:
    table = _FIXED.split("\n### Targets", 1)[1].split("\n### ", 1)[0]
    expected = [
        f"≤ {targets.LATENCY_FACTOR_STORE_FALSE:g} {_TIMES} the floor's",
        f"≤ {targets.LATENCY_LIMIT_STORE_TRUE_MS:g} ms",
        f"≥ {targets.THROUGHPUT_SHARE[GATEWAY_STORE_FALSE]:g}% of the floor's",
        f"≥ {targets.THROUGHPUT_SHARE[GATEWAY_STORE_TRUE]:g}% of the floor's",
        f"≤ {targets.LATENCY_FACTOR_CHAT:g} {_TIMES} the floor's",
        f"≥ {targets.THROUGHPUT_SHARE_CHAT:g}% of the floor's",
        f"≤ {targets.LATENCY_FACTOR_MESSAGES:g} {_TIMES} store:false's",
        f"≥ {targets.THROUGHPUT_SHARE_MESSAGES:g}% of store:false's",
        f"< {targets.RSS_GROWTH_LIMIT_MB:g} MB",
        f"≤ {targets.OVERLOAD_PEAK_LIMIT_MB:g} MB",
    ]
    assert [e for e in expected if e not in table] == []


def test_how_to_run_names_every_option() -> None:
    source = (ROOT / "bench" / "__main__.py").read_text(encoding="utf-8")
    options = re.findall(r'add_argument\(\s*"(--[a-z-]+)"', source)
    assert options
    assert [o for o in options if f"`{o}" not in _HOW_TO_RUN] == []


def test_how_to_run_names_every_benchmark_script() -> None:
    scripts = sorted(
        path.stem
        for path in (ROOT / "bench").glob("*.py")
        if path.stem not in {"__main__", *_NOT_BENCHMARKS}
        and 'if __name__ == "__main__":' in path.read_text(encoding="utf-8")
    )
    assert scripts
    assert [s for s in scripts if f"python -m bench.{s} " not in _HOW_TO_RUN] == []
