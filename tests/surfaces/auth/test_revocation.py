"""The re-check of a streaming request's API key: a timer between checks, the revocation
reported once, nothing at all for a credential that cannot be revoked."""

from __future__ import annotations

import asyncio

from stateway.core.commands import Principal
from stateway.core.errors import CredentialRevoked
from stateway.surfaces.auth.authenticator import ANONYMOUS, IDENTITY, Identity
from stateway.surfaces.auth.revocation import RevocationWatch


class Key:
    def __init__(self) -> None:
        self.checks = 0
        self.revoked = False
        self.checked_thrice = asyncio.Event()

    async def check(self) -> None:
        self.checks += 1
        if self.checks == 3:
            self.checked_thrice.set()
        if self.revoked:
            raise CredentialRevoked("This API key has been revoked.")


def scope_of(identity: Identity) -> dict[str, object]:
    return {"type": "http", IDENTITY: identity}


async def test_a_revoked_key_is_reported_once_then_checked_no_more() -> None:
    key = Key()
    identity = Identity(Principal("acme", "key_1"), recheck=key.check, recheck_every=0.01)
    told: list[CredentialRevoked] = []
    reported = asyncio.Event()

    def revoked(error: CredentialRevoked) -> None:
        told.append(error)
        reported.set()

    watch = RevocationWatch.start(scope_of(identity), revoked)
    assert watch is not None
    await asyncio.wait_for(key.checked_thrice.wait(), 5)
    assert told == []
    key.revoked = True
    await asyncio.wait_for(reported.wait(), 5)
    checks = key.checks
    await asyncio.sleep(0.05)  # five intervals: a watch still checking would have
    assert key.checks == checks
    assert [error.message for error in told] == ["This API key has been revoked."]
    watch.stop()


async def test_between_checks_a_watch_holds_a_timer_not_a_task() -> None:
    key = Key()
    identity = Identity(Principal("acme", "key_1"), recheck=key.check, recheck_every=60)
    tasks = len(asyncio.all_tasks())
    watch = RevocationWatch.start(scope_of(identity), lambda error: None)
    assert watch is not None
    assert len(asyncio.all_tasks()) == tasks
    watch.stop()
    assert key.checks == 0


async def test_no_watch_without_a_key_to_revoke() -> None:
    admin = Identity(None, admin=True, authenticated=True)
    token = Identity(Principal("acme", "user"), authenticated=True, expires_at=2e9)
    for identity in (ANONYMOUS, admin, token):
        assert RevocationWatch.start(scope_of(identity), lambda error: None) is None
    assert RevocationWatch.start({"type": "http"}, lambda error: None) is None
