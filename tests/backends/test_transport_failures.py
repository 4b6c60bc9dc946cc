"""A transport failure on the HTTP leg to a model server, told as the core's upstream error
in words naming the server and the bound it passed, never the client library's classes."""

from __future__ import annotations

import errno
import logging

import aiohttp
import pytest

from stateway.backends.transport_failures import TransportFailures
from stateway.backends.upstream_target import UpstreamTarget
from stateway.core.errors import UpstreamError, UpstreamTimeout, UpstreamUnavailable

TARGET = UpstreamTarget(
    "gpu-1", "http://127.0.0.1:9", connect_timeout=2.5, read_timeout=30, total_timeout=90
)


def told(exc: BaseException, *, listing: float | None = None, asked: str = "") -> UpstreamError:
    with pytest.raises(UpstreamError) as raised, TransportFailures(TARGET, listing, asked):
        raise exc
    assert raised.value.__cause__ is exc
    return raised.value


def test_a_connection_not_accepted_names_the_connect_timeout() -> None:
    error = told(aiohttp.ConnectionTimeoutError())
    assert isinstance(error, UpstreamTimeout)
    assert error.message == "The model server 'gpu-1' did not accept a connection within 2.5 s."


def test_silence_names_the_read_timeout() -> None:
    error = told(aiohttp.SocketTimeoutError())
    assert isinstance(error, UpstreamTimeout)
    assert error.message == "The model server 'gpu-1' sent nothing for 30 s (read_timeout)."


def test_a_call_past_its_deadline_names_the_total_timeout() -> None:
    error = told(TimeoutError())
    assert error.message == "The model server 'gpu-1' did not finish within 90 s (total_timeout)."


@pytest.mark.parametrize(
    ("asked", "what"),
    [("/models", "list its models"), ("/props", "answer GET /props")],
)
def test_a_listing_past_its_own_deadline_names_what_it_asked(asked: str, what: str) -> None:
    error = told(TimeoutError(), listing=3, asked=asked)
    assert error.message == f"The model server 'gpu-1' did not {what} within 3 s."


def test_an_unreachable_server_is_named() -> None:
    refused = ConnectionRefusedError(errno.ECONNREFUSED, "Connection refused")
    error = told(aiohttp.ClientConnectorError(None, refused))  # type: ignore[arg-type]
    assert isinstance(error, UpstreamUnavailable)
    assert (error.message, error.retryable) == ("The model server 'gpu-1' is unreachable.", True)


def test_a_body_cut_short_names_the_server() -> None:
    error = told(aiohttp.ClientPayloadError("Response payload is not completed"))
    assert error.code == "upstream_stream_cut"
    assert error.message == "The model server 'gpu-1' closed the stream before finishing."


def test_a_connection_failure_the_words_do_not_cover_is_logged_with_its_detail(
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.WARNING, "stateway.backends.transport_failures")
    error = told(aiohttp.ClientOSError(errno.EPIPE, "Broken pipe"))
    assert error.message == "The connection to model server 'gpu-1' failed."
    [record] = caplog.records
    assert record.getMessage() == (
        "the connection to model server gpu-1 failed: ClientOSError(32, 'Broken pipe')"
    )


def test_what_is_no_transport_failure_passes_as_it_is() -> None:
    with pytest.raises(ValueError, match="not ours"), TransportFailures(TARGET, None, ""):
        raise ValueError("not ours")
