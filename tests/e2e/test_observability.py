"""Observability end to end, through the real ``stateway serve`` over SQLite and
PostgreSQL in front of the real fake upstream: a scripted workload, then ``/metrics``
scraped (names, labels, tokens equal to the summed ``usage``), ``x-request-id`` on every
kind of answer, JSON log lines carrying it, and ``/v1/usage`` matching the responses."""

from __future__ import annotations

import re
import sys
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx2
import openai
import orjson
import pytest
from openai import OpenAI
from prometheus_client.parser import text_string_to_metric_families

from stateway.launch import GATEWAY_ANNOUNCEMENT, launch

REQUEST_ID = re.compile(r"req_[0-9a-f]{32}")


@dataclass
class Served:
    url: str
    log: Path
    started: int
    """Unix seconds before the workload (whole, for ``/v1/usage``)."""
    suffix: str
    """Makes this gateway's model names its own (PostgreSQL is shared)."""


@pytest.fixture(
    scope="module", params=["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)]
)
def served(
    request: pytest.FixtureRequest, fake_upstream: str, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Served]:
    folder = tmp_path_factory.mktemp("observed")
    if request.param == "sqlite":
        database = f"sqlite:///{folder / 'stateway.db'}"
    else:
        database = request.getfixturevalue("postgres_url")
    command = [sys.executable, "-m", "stateway", "serve", "--port", "0"]
    command += ["--upstream", fake_upstream, "--database", database]
    log = folder / "stderr.log"
    env = {"STATEWAY_LOG_FORMAT": "json"}
    with (
        log.open("w") as stderr,
        launch(command, GATEWAY_ANNOUNCEMENT, env=env, stderr=stderr, timeout=60) as launched,
    ):
        yield Served(launched.url, log, int(time.time()), uuid.uuid4().hex[:8])


def scrape(url: str) -> dict[str, dict[tuple[tuple[str, str], ...], float]]:
    reply = httpx2.get(url + "/metrics")
    assert reply.status_code == 200
    assert reply.headers["content-type"].startswith("text/plain")
    assert REQUEST_ID.fullmatch(reply.headers["x-request-id"])
    samples: dict[str, dict[tuple[tuple[str, str], ...], float]] = {}
    for family in text_string_to_metric_families(reply.text):
        for sample in family.samples:
            samples.setdefault(sample.name, {})[tuple(sorted(sample.labels.items()))] = sample.value
    return samples


def tokens(usage: Any, names: tuple[str, str]) -> tuple[int, int]:
    return getattr(usage, names[0]), getattr(usage, names[1])


@pytest.fixture(scope="module")
def workload(served: Served) -> dict[str, Any]:
    """Relayed Chat Completions first (their report comes as the relay closes), then
    Responses; each answer's usage summed by model, and the request ids seen."""
    chat_model, responses_model = f"obs-chat-{served.suffix}", f"obs-resp-{served.suffix}"
    summed = {chat_model: [0, 0], responses_model: [0, 0]}
    ids: list[str] = []
    client = OpenAI(base_url=served.url + "/v1", api_key="sk-test", max_retries=0)
    with client:
        messages: Any = [{"role": "user", "content": "count my tokens"}]
        raw = client.chat.completions.with_raw_response.create(model=chat_model, messages=messages)
        ids.append(raw.headers["x-request-id"])
        completion = raw.parse()
        for i, n in enumerate(tokens(completion.usage, ("prompt_tokens", "completion_tokens"))):
            summed[chat_model][i] += n
        stream = client.chat.completions.create(
            model=chat_model,
            messages=messages,
            stream=True,
            stream_options={"include_usage": True},
        )
        ids.append(stream.response.headers["x-request-id"])
        usage = [chunk.usage for chunk in stream if chunk.usage is not None]
        for i, n in enumerate(tokens(usage[-1], ("prompt_tokens", "completion_tokens"))):
            summed[chat_model][i] += n
        raw_response = client.responses.with_raw_response.create(
            model=responses_model, input="hello there"
        )
        ids.append(raw_response.headers["x-request-id"])
        response = raw_response.parse()
        for i, n in enumerate(tokens(response.usage, ("input_tokens", "output_tokens"))):
            summed[responses_model][i] += n
        events = client.responses.create(model=responses_model, input="and stream it", stream=True)
        ids.append(events.response.headers["x-request-id"])
        [completed] = [e for e in events if e.type == "response.completed"]
        for i, n in enumerate(tokens(completed.response.usage, ("input_tokens", "output_tokens"))):
            summed[responses_model][i] += n
    missing = httpx2.get(served.url + "/v1/responses/resp_missing")
    assert missing.status_code == 404
    ids.append(missing.headers["x-request-id"])
    samples = scrape(served.url)  # now: the other tests send requests of their own
    return {"summed": summed, "ids": ids, "samples": samples}


def test_metrics_after_a_workload(served: Served, workload: dict[str, Any]) -> None:
    samples = workload["samples"]
    requests = samples["stateway_requests_total"]
    assert requests[(("route", "/v1/chat/completions"), ("status", "200"))] == 2
    assert requests[(("route", "/v1/responses"), ("status", "200"))] == 2
    assert requests[(("route", "/v1/responses/{response_id}"), ("status", "404"))] == 1
    durations = samples["stateway_request_duration_seconds_count"]
    assert durations[(("route", "/v1/responses"),)] == 2
    for model, (input_tokens, output_tokens) in workload["summed"].items():
        key = (("model", model), ("tenant", "default"))
        assert input_tokens > 0
        assert samples["stateway_input_tokens_total"][key] == input_tokens
        assert samples["stateway_output_tokens_total"][key] == output_tokens
    attempts = samples["stateway_upstream_attempts_total"]
    assert attempts == {(("backend", "default"), ("outcome", "ok")): 4}
    first_tokens = samples["stateway_time_to_first_token_seconds_count"]
    responses_model = f"obs-resp-{served.suffix}"
    assert first_tokens[(("model", responses_model),)] == 2
    assert samples["stateway_active_runs"] == {(): 0}
    assert samples["stateway_upstream_queue_depth"] == {(): 0}
    assert samples["stateway_websocket_connections"] == {(): 0}
    storage = samples["stateway_storage_duration_seconds_count"]
    assert storage[(("operation", "save"),)] >= 1  # the streamed response's row
    assert storage[(("operation", "finish"),)] >= 1


def test_every_kind_of_answer_has_a_unique_request_id(
    served: Served, workload: dict[str, Any]
) -> None:
    replies = [
        httpx2.get(served.url + "/health"),
        httpx2.get(served.url + "/ready"),
        httpx2.get(served.url + "/v1/models"),
        httpx2.get(served.url + "/no/such/route"),
        httpx2.post(
            served.url + "/v1/responses", content=b"{", headers={"content-type": "application/json"}
        ),
        httpx2.get(served.url + "/health", headers={"x-request-id": "mine"}),
    ]
    with httpx2.stream(
        "POST",
        served.url + "/v1/responses",
        json={"model": "m", "input": "sse", "stream": True},
    ) as sse:
        assert sse.headers["content-type"].startswith("text/event-stream")
        sse.read()
        replies.append(sse)
    assert [r.status_code for r in replies] == [200, 200, 200, 404, 400, 200, 200]
    ids = [r.headers["x-request-id"] for r in replies] + workload["ids"]
    assert all(REQUEST_ID.fullmatch(i) for i in ids)
    assert len(set(ids)) == len(ids)


def test_json_log_lines_carry_the_request_id(served: Served) -> None:
    """A failed upstream attempt is logged (a WARNING, from the run's task) and so is the
    5xx answer: both lines carry the request's id, the answer's ``x-request-id``."""
    client = OpenAI(base_url=served.url + "/v1", api_key="sk-test", max_retries=0)
    with client, pytest.raises(openai.APIStatusError) as failed:
        client.responses.create(model="m", input="[[error:500]]")
    request_id = failed.value.response.headers["x-request-id"]
    assert REQUEST_ID.fullmatch(request_id)
    lines = [line for line in served.log.read_text().splitlines() if line.strip()]
    entries = [orjson.loads(line) for line in lines]  # every line is one JSON object
    assert all({"time", "level", "logger", "message"} <= set(e) for e in entries)
    ours = [e for e in entries if e.get("request_id") == request_id]
    assert {e["logger"] for e in ours} >= {"stateway.routing", "stateway.surfaces.http.errors"}
    assert all(e["level"] == "warning" for e in ours)


def test_a_relayed_chat_answers_failed_attempt_is_logged(served: Served) -> None:
    """A Chat Completions request forwarded untouched is an upstream attempt too: the
    upstream's 503, relayed as it came, is a WARNING on ``stateway.routing`` naming the
    route, the candidate and the status, carrying the request's id."""
    client = OpenAI(base_url=served.url + "/v1", api_key="sk-test", max_retries=0)
    with client, pytest.raises(openai.APIStatusError) as failed:
        client.chat.completions.create(
            model="obs-relay", messages=[{"role": "user", "content": "[[error:503]]"}]
        )
    assert failed.value.status_code == 503
    request_id = failed.value.response.headers["x-request-id"]
    deadline = time.monotonic() + 10  # the error body's length is known: it ends the relay
    while True:  # after the client has it all
        lines = served.log.read_text().splitlines()
        ours = [e for e in map(orjson.loads, lines) if e.get("request_id") == request_id]
        if ours or time.monotonic() > deadline:
            break
        time.sleep(0.02)
    [entry] = ours
    assert (entry["logger"], entry["level"]) == ("stateway.routing", "warning")
    assert "route obs-relay relayed attempt " in entry["message"]
    assert "status=503" in entry["message"]


def test_usage_matches_the_stored_responses(served: Served, workload: dict[str, Any]) -> None:
    reply = httpx2.get(served.url + "/v1/usage", params={"start_time": served.started})
    assert reply.status_code == 200
    model = f"obs-resp-{served.suffix}"
    buckets = [b for b in reply.json()["data"] if b["model"] == model]
    assert [b["tenant"] for b in buckets] == ["default"]
    [bucket] = buckets
    input_tokens, output_tokens = workload["summed"][model]
    assert (bucket["responses"], bucket["input_tokens"], bucket["output_tokens"]) == (
        2,
        input_tokens,
        output_tokens,
    )
    assert bucket["date"] == time.strftime("%Y-%m-%d", time.gmtime(served.started))
    relayed = [b for b in reply.json()["data"] if b["model"].startswith("obs-chat-")]
    assert relayed == []  # relayed Chat Completions are not stored
