"""``python -m bench.translator``: how much of the gateway's cost is translation itself.

The floor (:mod:`bench.passthrough`) forwards bytes; the gateway's Responses frontend
translates, and also decodes and checks, routes, keeps a run and its events, reports
telemetry and answers in the full Response shape. Between the two sits this hop: the
least a Python hop that *translates* costs. It is the floor's stack (uvicorn with
httptools and uvloop, one aiohttp session configured like the floor's) with the
translation and nothing else: it parses a ``store:false`` non-stream Responses body with
orjson, sends the Chat Completions body for it, parses the reply and answers a Response
object with the fields a client reads (ids, status, output message, usage), no checks.

``python -m bench.translator`` starts the fake, the floor, this hop and a gateway
(``stateway serve --upstream-api chat``, SQLite) and, in ``--rounds`` alternated rounds,
loads each with ``wrk -t1 -c32`` for ``--duration`` seconds (after a warm-up); it prints
each hop's requests/s and CPU ms per request (user + system, ``/proc``), medians over the
rounds, and each as a share of the floor's throughput. ``--serve --upstream URL`` runs
just the hop. Not part of ``make bench``: a yardstick for where the plain Responses path's
gap to the floor comes from.
"""

from __future__ import annotations

import argparse
import secrets
import statistics
import sys
import tempfile
import time
from contextlib import AbstractContextManager
from pathlib import Path

import orjson

from bench import processes
from bench.load import run_wrk, wrk_path
from bench.passthrough import Hop, Receive, Scope, Send, request_body, serve
from bench.procfs import cpu_times
from bench.scenarios import Scenario, chat_body, responses_body

ANNOUNCEMENT = "bench-translator listening on "


class Translator(Hop):
    """``POST /v1/responses`` (non-stream) as one Chat Completions call, nothing else."""

    def __init__(self, upstream_base_url: str) -> None:
        self.url = upstream_base_url.rstrip("/") + "/chat/completions"

    async def handle(self, scope: Scope, receive: Receive, send: Send) -> None:
        body = await request_body(receive)
        if body is None:
            return
        request = orjson.loads(body)
        given = request["input"]
        messages = [{"role": "user", "content": given}] if isinstance(given, str) else given
        chat = {"model": request["model"], "messages": messages}
        assert self.session is not None
        async with self.session.post(self.url, data=orjson.dumps(chat)) as upstream:
            reply = orjson.loads(await upstream.read())
        choice = reply["choices"][0]
        usage = reply.get("usage") or {}
        text = {"type": "output_text", "text": choice["message"]["content"], "annotations": []}
        answer = orjson.dumps(
            {
                "id": "resp_" + secrets.token_hex(24),
                "object": "response",
                "created_at": int(time.time()),
                "status": "completed",
                "model": request["model"],
                "output": [
                    {
                        "type": "message",
                        "id": "msg_" + secrets.token_hex(24),
                        "status": "completed",
                        "role": "assistant",
                        "content": [text],
                    }
                ],
                "usage": {
                    "input_tokens": usage.get("prompt_tokens", 0),
                    "output_tokens": usage.get("completion_tokens", 0),
                    "total_tokens": usage.get("total_tokens", 0),
                },
                "store": False,
            }
        )
        headers = [(b"content-type", b"application/json"), (b"content-length", b"%d" % len(answer))]
        await send({"type": "http.response.start", "status": 200, "headers": headers})
        await send({"type": "http.response.body", "body": answer})


def translator(upstream_base_url: str, log_dir: Path) -> AbstractContextManager[processes.Server]:
    command = [sys.executable, "-m", "bench.translator", "--serve"]
    command += ["--upstream", upstream_base_url, "--port", "0"]
    return processes.start_server("translator", command, ANNOUNCEMENT, log_dir)


def measure(
    servers: dict[str, tuple[processes.Server, Scenario]], rounds: int, duration: float
) -> dict[str, list[tuple[float, float]]]:
    """Per hop, each round's (requests/s, CPU ms per request)."""
    results: dict[str, list[tuple[float, float]]] = {}
    for _ in range(rounds):
        for name, (server, scenario) in servers.items():
            run_wrk(scenario, connections=32, duration=2, warmup=0)  # warm-up
            user, system = cpu_times(server.pid)
            stats = run_wrk(scenario, connections=32, duration=duration, warmup=0)
            user_after, system_after = cpu_times(server.pid)
            if stats.error_count:
                raise SystemExit(f"bench.translator: {name}: errors {stats.errors}")
            cpu_ms = (user_after - user + system_after - system) * 1000 / stats.requests
            results.setdefault(name, []).append((stats.requests_per_s, cpu_ms))
    return results


def report(results: dict[str, list[tuple[float, float]]]) -> None:
    rounds = len(next(iter(results.values())))
    print(f"\nc=32, non-stream, median of {rounds} rounds\n")
    print("| hop | requests/s | CPU ms / request | % of the floor's requests/s |")
    print("|---|--:|--:|--:|")
    floor = statistics.median(rps for rps, _ in results["floor"])
    for name, samples in results.items():
        rps = statistics.median(r for r, _ in samples)
        cpu = statistics.median(c for _, c in samples)
        print(f"| {name} | {rps:,.0f} | {cpu:.3f} | {100 * rps / floor:.1f}% |")


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--serve", action="store_true", help="only run the hop")
    parser.add_argument("--upstream", help="with --serve: the upstream's .../v1 base URL")
    parser.add_argument("--port", type=int, default=0)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--duration", type=float, default=8.0, help="seconds per wrk run")
    args = parser.parse_args()
    if args.serve:
        if not args.upstream:
            parser.error("--serve needs --upstream")
        serve(Translator(args.upstream), ANNOUNCEMENT, port=args.port)
        return
    wrk_path()
    with tempfile.TemporaryDirectory() as directory:
        logs = Path(directory)
        with (
            processes.fake_upstream(logs) as fake,
            processes.passthrough(fake.url, logs) as floor,
            translator(fake.url, logs) as hop,
            processes.gateway("gateway", fake.url, logs / "stateway.db", logs) as gateway,
        ):
            responses = responses_body(stream=False, store=False)

            def at(server: processes.Server, path: str, body: bytes) -> Scenario:
                base = server.url.rstrip("/").removesuffix("/v1")
                return Scenario(server.name, False, base, path, body)

            servers = {
                "floor": (floor, at(floor, "/v1/chat/completions", chat_body(stream=False))),
                "translator": (hop, at(hop, "/v1/responses", responses)),
                "gateway store:false": (gateway, at(gateway, "/v1/responses", responses)),
            }
            results = measure(servers, args.rounds, args.duration)
    report(results)


if __name__ == "__main__":
    main()
