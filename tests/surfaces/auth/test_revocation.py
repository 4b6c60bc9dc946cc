"""The watch over a streaming request's credential: an API key's re-check (a timer between
checks, the revocation reported once), an expiry's timer, nothing at all for a credential
that can neither be revoked nor expire."""

from __future__ import annotations

import asyncio
import time

import pytest

from stateway.core.errors import CredentialRevoked
from stateway.core.principal import Credential, Principal
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


async def test_a_watch_stops_between_checks_and_stopping_again_is_harmless() -> None:
    key = Key()
    checked = asyncio.Event()
    check = key.check

    async def checked_once() -> None:
        await check()
        checked.set()

    identity = Identity(Principal("acme", "key_1"), recheck=checked_once, recheck_every=0.2)
    watch = RevocationWatch.start(scope_of(identity), lambda error: None)
    assert watch is not None
    await asyncio.wait_for(checked.wait(), 5)  # the check held; the next one is 0.2 s away

    watch.stop()
    watch.stop()
    await asyncio.sleep(0.3)
    assert key.checks == 1


async def test_a_watch_stopped_during_a_check_cancels_it() -> None:
    started = asyncio.Event()
    cancelled = asyncio.Event()

    async def slow_check() -> None:
        started.set()
        try:
            await asyncio.Event().wait()  # the key store does not answer
        except asyncio.CancelledError:
            cancelled.set()
            raise

    identity = Identity(Principal("acme", "key_1"), recheck=slow_check, recheck_every=0.01)
    watch = RevocationWatch.start(scope_of(identity), lambda error: None)
    assert watch is not None
    await asyncio.wait_for(started.wait(), 5)

    watch.stop()
    watch.stop()
    await asyncio.wait_for(cancelled.wait(), 5)


async def test_between_checks_a_watch_holds_a_timer_not_a_task() -> None:
    key = Key()
    identity = Identity(Principal("acme", "key_1"), recheck=key.check, recheck_every=60)
    tasks = len(asyncio.all_tasks())
    watch = RevocationWatch.start(scope_of(identity), lambda error: None)
    assert watch is not None
    assert len(asyncio.all_tasks()) == tasks
    watch.stop()
    assert key.checks == 0


@pytest.mark.parametrize(
    ("expired", "rechecked"),
    [("The token has expired.", False), ("This API key has expired.", True)],
)
async def test_an_expiring_credential_is_ended_at_its_expiry_in_its_refusals_words(
    expired: str, rechecked: bool
) -> None:
    """A timer at its expiry (no check runs): a token's words, or an API key's (whose
    rechecks then stop)."""
    key = Key()
    expires_at = time.time() + 0.2
    credential = Credential.API_KEY if rechecked else Credential.TOKEN
    identity = Identity(
        Principal("acme", "key_1", credential),
        authenticated=True,
        expires_at=expires_at,
        recheck=key.check if rechecked else None,
        recheck_every=0.01,
    )
    told: list[tuple[float, CredentialRevoked]] = []
    reported = asyncio.Event()

    def ended(error: CredentialRevoked) -> None:
        told.append((time.time(), error))
        reported.set()

    tasks = len(asyncio.all_tasks())
    watch = RevocationWatch.start(scope_of(identity), ended)
    assert watch is not None
    assert len(asyncio.all_tasks()) == tasks  # timers, not tasks
    await asyncio.wait_for(reported.wait(), 5)
    checks = key.checks
    await asyncio.sleep(0.05)  # five intervals: a key still checked would have been
    assert key.checks == checks
    assert (key.checks > 0) == rechecked
    [(when, error)] = told
    assert when >= expires_at - 0.01  # at its expiry (a loop timer's resolution aside)
    assert (error.code, error.message) == ("invalid_api_key", expired)
    watch.stop()


async def test_a_credential_expired_already_is_ended_at_once() -> None:
    token = Identity(Principal("acme", "user"), authenticated=True, expires_at=time.time() - 1)
    told: list[CredentialRevoked] = []
    watch = RevocationWatch.start(scope_of(token), told.append)
    assert watch is not None
    for _ in range(3):  # its timer's turn of the loop: no wait at all
        await asyncio.sleep(0)
    assert [error.message for error in told] == ["The token has expired."]


async def test_a_stopped_watch_reports_no_expiry() -> None:
    token = Identity(Principal("acme", "user"), authenticated=True, expires_at=time.time() + 0.02)
    told: list[CredentialRevoked] = []
    watch = RevocationWatch.start(scope_of(token), told.append)
    assert watch is not None
    watch.stop()
    await asyncio.sleep(0.05)
    assert told == []


async def test_no_watch_for_a_credential_that_can_neither_be_revoked_nor_expire() -> None:
    admin = Identity(None, admin=True, authenticated=True)
    for identity in (ANONYMOUS, admin, Identity(Principal("acme", "user"), authenticated=True)):
        assert RevocationWatch.start(scope_of(identity), lambda error: None) is None
    assert RevocationWatch.start({"type": "http"}, lambda error: None) is None
