"""Derived numbers (added latency, throughput ratios) and the issue's targets, PASS or MISS.

Targets, for one gateway process on this machine:

* c=1, store:false: added median latency at most twice the floor's added median;
* c=1, store:true: added median latency at most 1 ms (issue 7; it was 2 ms before);
* c=32, store:false: throughput at least 80% of the floor's (issue 7; it was 70% before);
* c=32, store:true: throughput at least 50% of the floor's;
* Chat Completions fast path (``gateway chat``): added median latency at c=1 at most 1.3
  times the floor's, throughput at c=32 at least 80% of the floor's;
* Messages frontend (``gateway messages``) against the Responses frontend on the same
  store:false gateway: added median latency at c=1 at most 1.1 times its, throughput at
  c=32 at least 90% of its;
* RSS growth over the memory run below 20 MB, also with half the clients leaving
  mid-stream;
* 10,000 concurrent streams (store:true, slow upstream): each completes or is refused up
  front with 503 ``overloaded``, none fails mid-way; peak RSS at most 500 MB.

Latency and throughput targets are checked for non-stream and stream separately.
"""

from __future__ import annotations

from dataclasses import dataclass

from bench.latency import LatencyStats
from bench.load import LoadStats
from bench.memory import MemoryStats
from bench.overload import OverloadStats
from bench.scenarios import (
    DIRECT,
    FLOOR,
    GATEWAY_CHAT,
    GATEWAY_MESSAGES,
    GATEWAY_STORE_FALSE,
    GATEWAY_STORE_TRUE,
    MODES,
    TARGETS,
    mode_name,
    scenario_key,
)

LATENCY_FACTOR_STORE_FALSE = 2.0
LATENCY_LIMIT_STORE_TRUE_MS = 1.0
THROUGHPUT_SHARE = {GATEWAY_STORE_FALSE: 80.0, GATEWAY_STORE_TRUE: 50.0}
LATENCY_FACTOR_CHAT = 1.3
THROUGHPUT_SHARE_CHAT = 80.0
LATENCY_FACTOR_MESSAGES = 1.1
THROUGHPUT_SHARE_MESSAGES = 90.0
"""Messages against the Responses frontend (store:false): within 10% either way."""
RSS_GROWTH_LIMIT_MB = 20.0
RSS_GROWTH_LIMIT_MIB = RSS_GROWTH_LIMIT_MB * 1e6 / 2**20
"""RSS is read in KiB; the limit of 20 MB is 19.07 MiB."""
OVERLOAD_PEAK_LIMIT_MB = 500.0
OVERLOAD_PEAK_LIMIT_MIB = OVERLOAD_PEAK_LIMIT_MB * 1e6 / 2**20


def key(target: str, stream: bool) -> str:
    return scenario_key(target, stream)


@dataclass(frozen=True, slots=True)
class Added:
    """Latency a hop adds over direct calls: difference of medians, of p99s, of TTFB medians."""

    median_ms: float
    p99_ms: float
    ttfb_median_ms: float


@dataclass(frozen=True, slots=True)
class Ratios:
    """Throughput as a share of direct calls and of the floor, percent."""

    of_direct_pct: float
    of_floor_pct: float


@dataclass(frozen=True, slots=True)
class Verdict:
    """One target: what was measured against what limit, and whether it passed."""

    name: str
    scenario: str | None
    measured: str
    limit: str
    passed: bool

    @property
    def label(self) -> str:
        return "PASS" if self.passed else "MISS"


def added_latency(latency: dict[str, LatencyStats]) -> dict[str, Added]:
    added = {}
    for stream in MODES:
        direct = latency[key(DIRECT, stream)]
        for target in TARGETS[1:]:
            stats = latency[key(target, stream)]
            added[key(target, stream)] = Added(
                median_ms=round(stats.median_ms - direct.median_ms, 3),
                p99_ms=round(stats.p99_ms - direct.p99_ms, 3),
                ttfb_median_ms=round(stats.ttfb_median_ms - direct.ttfb_median_ms, 3),
            )
    return added


def throughput_ratios(load: dict[str, LoadStats]) -> dict[str, Ratios]:
    ratios = {}
    for stream in MODES:
        direct = load[key(DIRECT, stream)].requests_per_s
        floor = load[key(FLOOR, stream)].requests_per_s
        for target in TARGETS:
            rps = load[key(target, stream)].requests_per_s
            ratios[key(target, stream)] = Ratios(
                of_direct_pct=round(100 * rps / direct, 1) if direct else 0.0,
                of_floor_pct=round(100 * rps / floor, 1) if floor else 0.0,
            )
    return ratios


def evaluate(
    added: dict[str, Added],
    ratios: dict[str, Ratios],
    memory: MemoryStats | None,
    *,
    disconnects: MemoryStats | None = None,
    overload: OverloadStats | None = None,
) -> list[Verdict]:
    verdicts = []
    for stream in MODES:
        mode = mode_name(stream)
        floor = added[key(FLOOR, stream)].median_ms
        gateway = added[key(GATEWAY_STORE_FALSE, stream)].median_ms
        limit = LATENCY_FACTOR_STORE_FALSE * floor
        verdicts.append(
            Verdict(
                f"c=1 added median, store:false, {mode}: <= 2x floor's",
                key(GATEWAY_STORE_FALSE, stream),
                f"+{gateway:.3f} ms",
                f"<= +{limit:.3f} ms (floor +{floor:.3f} ms)",
                gateway <= limit,
            )
        )
    for stream in MODES:
        gateway = added[key(GATEWAY_STORE_TRUE, stream)].median_ms
        verdicts.append(
            Verdict(
                f"c=1 added median, store:true, {mode_name(stream)}: "
                f"<= {LATENCY_LIMIT_STORE_TRUE_MS:g} ms",
                key(GATEWAY_STORE_TRUE, stream),
                f"+{gateway:.3f} ms",
                f"<= +{LATENCY_LIMIT_STORE_TRUE_MS:.3f} ms",
                gateway <= LATENCY_LIMIT_STORE_TRUE_MS,
            )
        )
    for target, share in THROUGHPUT_SHARE.items():
        for stream in MODES:
            measured = ratios[key(target, stream)].of_floor_pct
            store = "true" if target == GATEWAY_STORE_TRUE else "false"
            mode = mode_name(stream)
            verdicts.append(
                Verdict(
                    f"c=32 throughput, store:{store}, {mode}: >= {share:.0f}% of floor",
                    key(target, stream),
                    f"{measured:.1f}%",
                    f">= {share:.0f}%",
                    measured >= share,
                )
            )
    verdicts += _chat(added, ratios)
    verdicts += _messages(added, ratios)
    if memory is not None:
        verdicts.append(_growth(memory, ""))
    if disconnects is not None:
        verdicts.append(_growth(disconnects, ", 50% leaving mid-stream"))
    if overload is not None:
        verdicts += _overload(overload)
    return verdicts


def _chat(added: dict[str, Added], ratios: dict[str, Ratios]) -> list[Verdict]:
    """The Chat Completions fast path against the floor."""
    verdicts = []
    for stream in MODES:
        mode = mode_name(stream)
        floor = added[key(FLOOR, stream)].median_ms
        chat = added[key(GATEWAY_CHAT, stream)].median_ms
        limit = LATENCY_FACTOR_CHAT * floor
        verdicts.append(
            Verdict(
                f"c=1 added median, chat fast path, {mode}: <= {LATENCY_FACTOR_CHAT}x floor's",
                key(GATEWAY_CHAT, stream),
                f"+{chat:.3f} ms",
                f"<= +{limit:.3f} ms (floor +{floor:.3f} ms)",
                chat <= limit,
            )
        )
    for stream in MODES:
        measured = ratios[key(GATEWAY_CHAT, stream)].of_floor_pct
        share = THROUGHPUT_SHARE_CHAT
        verdicts.append(
            Verdict(
                f"c=32 throughput, chat fast path, {mode_name(stream)}: >= {share:.0f}% of floor",
                key(GATEWAY_CHAT, stream),
                f"{measured:.1f}%",
                f">= {share:.0f}%",
                measured >= share,
            )
        )
    return verdicts


def _messages(added: dict[str, Added], ratios: dict[str, Ratios]) -> list[Verdict]:
    """The Messages frontend against the Responses frontend, both store:false."""
    verdicts = []
    for stream in MODES:
        mode = mode_name(stream)
        responses = added[key(GATEWAY_STORE_FALSE, stream)].median_ms
        messages = added[key(GATEWAY_MESSAGES, stream)].median_ms
        limit = LATENCY_FACTOR_MESSAGES * responses
        verdicts.append(
            Verdict(
                f"c=1 added median, messages, {mode}: <= {LATENCY_FACTOR_MESSAGES}x store:false's",
                key(GATEWAY_MESSAGES, stream),
                f"+{messages:.3f} ms",
                f"<= +{limit:.3f} ms (store:false +{responses:.3f} ms)",
                messages <= limit,
            )
        )
    for stream in MODES:
        responses = ratios[key(GATEWAY_STORE_FALSE, stream)].of_direct_pct
        messages = ratios[key(GATEWAY_MESSAGES, stream)].of_direct_pct
        measured = round(100 * messages / responses, 1) if responses else 0.0
        share = THROUGHPUT_SHARE_MESSAGES
        verdicts.append(
            Verdict(
                f"c=32 throughput, messages, {mode_name(stream)}: >= {share:.0f}% of store:false's",
                key(GATEWAY_MESSAGES, stream),
                f"{measured:.1f}%",
                f">= {share:.0f}%",
                measured >= share,
            )
        )
    return verdicts


def _growth(memory: MemoryStats, how: str) -> Verdict:
    return Verdict(
        f"RSS growth over {memory.requests:,} requests{how}: < {RSS_GROWTH_LIMIT_MB:.0f} MB",
        None,
        f"{memory.growth_mib:+.1f} MiB",
        f"< {RSS_GROWTH_LIMIT_MB:.0f} MB ({RSS_GROWTH_LIMIT_MIB:.2f} MiB)",
        memory.growth_mib < RSS_GROWTH_LIMIT_MIB,
    )


def _overload(stats: OverloadStats) -> list[Verdict]:
    streams = f"{stats.streams:,} concurrent streams"
    answered = stats.completed + stats.refused
    return [
        Verdict(
            f"{streams}: each completes or is refused up front (503), none fails mid-way",
            None,
            f"{stats.completed:,} completed, {stats.refused:,} refused,"
            f" {stats.failed_midway:,} failed mid-way, {stats.other:,} other",
            f"{stats.streams:,} completed or refused",
            answered == stats.streams,
        ),
        Verdict(
            f"{streams}: peak RSS <= {OVERLOAD_PEAK_LIMIT_MB:.0f} MB",
            None,
            f"{stats.peak_rss_mib:.0f} MiB",
            f"<= {OVERLOAD_PEAK_LIMIT_MB:.0f} MB ({OVERLOAD_PEAK_LIMIT_MIB:.0f} MiB)",
            stats.peak_rss_mib <= OVERLOAD_PEAK_LIMIT_MIB,
        ),
    ]
