"""The gateway's own 503s: the wait each asks (``Retry-After``), told not to be retried
when the wait is past what the SDKs wait out or the request must not run again, and a
storage failure's words for the client and for the log."""

from __future__ import annotations

from stateway.core.errors import (
    ServerRestarted,
    StorageError,
    StorageFull,
    Unavailable,
)
from stateway.core.errors.gateway_error import MAX_RETRY_WAIT


def test_a_wait_given_is_the_one_asked() -> None:
    error = Unavailable("Busy.", retry_after=30)
    assert (error.retry_after, error.retryable) == (30, True)
    assert error.headers == {"Retry-After": "30"}


def test_the_longest_wait_the_sdks_wait_out_is_still_retried() -> None:
    longest = int(MAX_RETRY_WAIT)
    assert Unavailable("Busy.", retry_after=longest).headers == {"Retry-After": str(longest)}
    past = Unavailable("Busy.", retry_after=longest + 1)
    assert not past.retryable
    assert past.headers == {"Retry-After": str(longest + 1), "x-should-retry": "false"}


def test_told_final_it_asks_no_wait_however_often_it_is_told() -> None:
    error = StorageError("Storage is unavailable.")
    error.told_retryable(False)
    error.told_retryable(False)
    assert not error.retryable
    assert error.headers == {"x-should-retry": "false"}


def test_a_storage_error_shows_the_databases_reason_only_in_the_log() -> None:
    plain = StorageError("Storage is unavailable.")
    assert str(plain) == plain.message == "Storage is unavailable."
    plain.reason = "connection refused"
    assert str(plain) == "Storage is unavailable. (connection refused)"


def test_a_storage_error_restated_keeps_its_kind_and_reason() -> None:
    full = StorageFull("Saving the response failed.")
    full.reason = "disk full"
    restated = full.restated("Saving the conversation failed.")
    assert type(restated) is StorageFull
    assert restated.reason == "disk full"
    assert restated.message.startswith("Saving the conversation failed. The database is out")


def test_a_restarted_servers_words() -> None:
    assert ServerRestarted().to_dict() == {
        "message": "The server stopped before the response finished; it was not completed.",
        "type": "server_error",
        "param": None,
        "code": "server_restarted",
    }
