"""No upstream holds a request forever: first-byte, read and total deadlines, and the
byte budget, through the real gateway in front of a misbehaving fake model server."""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path

import openai
import pytest
from openai import OpenAI

from tests.e2e.configured import RunningGateway, configured_gateway

MODEL = "fake-model"
BUDGET = 256 * 1024


@pytest.fixture(scope="module")
def strict(
    fake_upstream: str, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[RunningGateway]:
    backend = {
        "url": fake_upstream,
        "read_timeout": 1.0,
        "first_byte_timeout": 0.8,
        "total_timeout": 2.5,
        "max_response_bytes": BUDGET,
    }
    with configured_gateway(tmp_path_factory.mktemp("strict"), backend) as gateway:
        yield gateway


@pytest.fixture
def sdk(strict: RunningGateway) -> Iterator[OpenAI]:
    with OpenAI(base_url=strict.url + "/v1", api_key="x", max_retries=0, timeout=30) as client:
        yield client


def refused(sdk: OpenAI, text: str) -> tuple[openai.APIStatusError, float]:
    started = time.monotonic()
    with pytest.raises(openai.APIStatusError) as caught:
        sdk.responses.create(model=MODEL, input=text)
    return caught.value, time.monotonic() - started


def test_a_trickling_upstream_is_ended_by_total_timeout(sdk: OpenAI) -> None:
    # One byte every 0.2 s never trips read_timeout (1 s): only the whole-call deadline can.
    error, elapsed = refused(sdk, "hi [[trickle:200]]")
    assert error.status_code == 504
    assert error.code == "upstream_timeout"
    assert "total_timeout" in error.message
    assert 2.0 < elapsed < 6


def test_silence_before_the_headers_is_ended_by_first_byte_timeout(sdk: OpenAI) -> None:
    error, elapsed = refused(sdk, "hi [[silence:5000]]")
    assert (error.status_code, error.code) == (504, "upstream_timeout")
    assert "first_byte_timeout" in error.message
    assert elapsed < 3


def test_silence_after_the_headers_is_ended_by_read_timeout(sdk: OpenAI) -> None:
    error, elapsed = refused(sdk, "hi [[stall:5000]]")
    assert (error.status_code, error.code) == (504, "upstream_timeout")
    assert "read_timeout" in error.message
    assert elapsed < 3


def test_a_stream_past_total_timeout_fails_and_is_stored(
    sdk: OpenAI, strict: RunningGateway
) -> None:
    started = time.monotonic()
    events = list(
        sdk.responses.create(model=MODEL, input="[[words:100]] [[slow:300]]", stream=True)
    )
    assert time.monotonic() - started < 6
    assert sum(e.type == "response.output_text.delta" for e in events) >= 2
    assert events[-1].type == "response.failed"
    failed = events[-1].response  # type: ignore[union-attr]
    assert failed.error is not None
    assert "total_timeout" in failed.error.message
    stored = strict.stored(failed.id)
    assert stored["status"] == "failed"
    assert stored["error"]["code"] == "upstream_timeout"
    assert sdk.responses.retrieve(failed.id).status == "failed"


def test_a_reply_over_max_response_bytes_fails(sdk: OpenAI) -> None:
    error, _ = refused(sdk, f"[[huge:{4 * BUDGET}]]")
    assert (error.status_code, error.code) == (502, "upstream_response_too_large")


def test_a_stream_over_max_response_bytes_fails_and_stores_little(
    sdk: OpenAI, strict: RunningGateway
) -> None:
    events = list(sdk.responses.create(model=MODEL, input="[[huge:20000000]]", stream=True))
    assert events[-1].type == "response.failed"
    failed = events[-1].response  # type: ignore[union-attr]
    assert strict.stored(failed.id)["error"]["code"] == "upstream_response_too_large"
    assert len(sdk.responses.retrieve(failed.id).output_text) <= BUDGET
    assert strict.database.stat().st_size < 4 * BUDGET + 1024 * 1024


HUGE = 100 * 1024 * 1024


@pytest.mark.parametrize("api", ["chat", "responses"])
def test_huge_replies_keep_memory_bounded(fake_upstream: str, tmp_path: Path, api: str) -> None:
    """100 MB replies are refused without being held in memory. Non-streamed: the default
    16 MiB budget (the declared length alone refuses it). Streamed: a 4 MiB budget, since
    what does get through becomes output that the run holds and encodes several times."""
    backend = {"url": fake_upstream, "api": api}
    with (
        configured_gateway(tmp_path, backend) as gateway,
        OpenAI(base_url=gateway.url + "/v1", api_key="x", max_retries=0, timeout=60) as client,
    ):
        with pytest.raises(openai.APIStatusError) as caught:
            client.responses.create(model=MODEL, input=f"[[huge:{HUGE}]]")
        assert caught.value.code == "upstream_response_too_large"
        peak_mib = gateway.peak_rss_kib() / 1024
    assert peak_mib < 300, f"peak RSS {peak_mib:.0f} MiB"
    streamed = {**backend, "max_response_bytes": 4 * 1024 * 1024}
    with (
        configured_gateway(tmp_path, streamed) as gateway,
        OpenAI(base_url=gateway.url + "/v1", api_key="x", max_retries=0, timeout=60) as client,
    ):
        events = list(client.responses.create(model=MODEL, input=f"[[huge:{HUGE}]]", stream=True))
        assert events[-1].type == "response.failed"
        peak_mib = gateway.peak_rss_kib() / 1024
    assert peak_mib < 300, f"peak RSS {peak_mib:.0f} MiB"
