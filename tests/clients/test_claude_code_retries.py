"""Claude Code's own retries (``CLAUDE_CODE_MAX_RETRIES=2`` here, its default being 10)
against the gateway's errors: an answer the same request would meet again
(``x-should-retry: false``: the gateway's credentials refused by its model server) is
sent once; an overloaded upstream (a 529 ``overloaded_error``) is retried."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.clients.claude_code import MESSAGES_PATH, run_claude
from tests.clients.offline import OfflineGateway

pytestmark = pytest.mark.clients

RETRIES = {"CLAUDE_CODE_MAX_RETRIES": "2"}


def statuses(requests: list[dict[str, object]]) -> list[object]:
    return [r["status"] for r in requests if r["path"] == MESSAGES_PATH]


def test_a_refusal_the_same_request_meets_again_is_sent_once(
    claude_binary: Path, claude_gateway: OfflineGateway, tmp_path: Path
) -> None:
    run = run_claude(claude_binary, claude_gateway, "Hi [[error:401]]", tmp_path, extra_env=RETRIES)
    assert statuses(run.requests) == [502], run.describe()
    assert run.result is not None, run.describe()
    assert run.result["is_error"] is True, run.describe()


def test_an_overloaded_upstream_is_retried(
    claude_binary: Path, claude_gateway: OfflineGateway, tmp_path: Path
) -> None:
    run = run_claude(claude_binary, claude_gateway, "Hi [[error:529]]", tmp_path, extra_env=RETRIES)
    assert statuses(run.requests) == [529, 529, 529], run.describe()
