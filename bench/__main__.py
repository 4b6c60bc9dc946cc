"""``python -m bench``: run the benchmark, print the tables, write JSON and the doc."""

from __future__ import annotations

import argparse
from pathlib import Path

from bench.report import render_results, write_doc, write_json
from bench.runner import Settings, log, run

ROOT = Path(__file__).resolve().parent.parent
RESULTS_DIR = ROOT / "bench" / "results"
DOC = ROOT / "docs" / "benchmarks.md"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m bench",
        description="Latency, throughput and memory of the gateway against direct calls"
        " and a bare pass-through hop. Writes bench/results/latest.json and the results"
        " section of docs/benchmarks.md.",
    )
    parser.add_argument(
        "--quick",
        action="store_true",
        help="a short smoke run (small counts, 3 s wrk runs); does not update the doc",
    )
    parser.add_argument("--requests", type=int, help="c=1 requests per scenario (2000)")
    parser.add_argument("--duration", type=float, help="seconds per wrk run (10)")
    parser.add_argument("--rss-requests", type=int, help="requests in each memory run (10000)")
    parser.add_argument(
        "--overload-streams", type=int, help="concurrent streams in the overload run (10000)"
    )
    parser.add_argument(
        "--profile",
        choices=("auto", "always", "never"),
        help="py-spy the gateway scenarios that missed a target (auto, the default),"
        " all of them, or none (the default with --quick)",
    )
    parser.add_argument("--profile-seconds", type=float, help="seconds per py-spy recording (10)")
    parser.add_argument("--no-doc", action="store_true", help="do not update docs/benchmarks.md")
    args = parser.parse_args(argv)

    quick = args.quick
    settings = Settings(
        quick=quick,
        requests=args.requests or (300 if quick else 2000),
        warmup=30 if quick else 200,
        duration=args.duration or (3.0 if quick else 10.0),
        wrk_warmup=1.0 if quick else 2.0,
        connections=32,
        rss_requests=args.rss_requests or (1000 if quick else 10_000),
        rss_warmup=100 if quick else 500,
        overload_streams=args.overload_streams or (2000 if quick else 10_000),
        overload_seconds=30.0 if quick else 90.0,
        profile=args.profile or ("never" if quick else "auto"),
        profile_seconds=args.profile_seconds or (3.0 if quick else 10.0),
        results_dir=RESULTS_DIR,
    )
    results = run(settings)
    section = render_results(results)
    print(section)
    json_path = RESULTS_DIR / ("quick.json" if quick else "latest.json")
    write_json(json_path, results)
    log(f"wrote {json_path.relative_to(ROOT)}")
    if not (quick or args.no_doc):
        write_doc(DOC, section)
        log(f"wrote {DOC.relative_to(ROOT)}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
