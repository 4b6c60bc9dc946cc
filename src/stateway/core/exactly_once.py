"""Exactly-once commands: claim before running, remember the outcome, answer retries.

A surface that received a command id wraps its work in :func:`attempt`::

    async with attempt(results, key, digest, param="Idempotency-Key") as once:
        if once.outcome is not None:
            return replay(once.outcome)          # a retry: the first attempt's answer
        answer = await run_the_command()
        once.remember(answer_bytes)              # or remember(response_id=...) for a stream
        return answer

The claim is taken before the command runs, so a retry arriving meanwhile waits for this
attempt's outcome (:meth:`CommandResults.claim`) instead of running it a second time. An
attempt that raises, or remembers nothing, lets its claim go: the next retry runs the
command again (a failure is not an outcome; see ADR 0011). A command that ran keeps its
answer (or its error) when its outcome cannot be stored (Redis away): that is logged, and
a retry runs it again once the claim has expired.
"""

from __future__ import annotations

import asyncio
import hashlib
import logging
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager

from stateway.core.coordination import CommandKey, CommandResults, Outcome
from stateway.core.errors import IdempotencyKeyReused, StorageError

log = logging.getLogger(__name__)


def fingerprint(*parts: bytes) -> str:
    """A digest of a request (its route, its body...): each part is length-prefixed, so
    no two different sequences of parts digest alike."""
    digest = hashlib.sha256()
    for part in parts:
        digest.update(len(part).to_bytes(8, "big"))
        digest.update(part)
    return digest.hexdigest()


class Attempt:
    __slots__ = ("fingerprint", "key", "outcome", "remembered")

    def __init__(self, key: CommandKey, digest: str, outcome: Outcome | None) -> None:
        self.key = key
        self.fingerprint = digest
        self.outcome = outcome
        """Set for a retry: what the first attempt answered. None: run the command."""
        self.remembered: Outcome | None = None

    def remember(self, body: bytes = b"", *, response_id: str | None = None) -> None:
        """What retries of this command will get: ``body`` byte for byte, or the stream of
        response ``response_id`` replayed from its log. Kept as a copy of its own size (a
        body ``orjson.dumps`` wrote holds its whole ~4 KiB buffer, and outcomes are kept
        by the thousand)."""
        self.remembered = Outcome(self.fingerprint, bytes(memoryview(body)), response_id)


@asynccontextmanager
async def attempt(
    results: CommandResults,
    key: CommandKey,
    digest: str,
    *,
    param: str,
    waiting: Callable[[], None] | None = None,
) -> AsyncIterator[Attempt]:
    """Claim ``key`` (waiting for an attempt under way: ``waiting`` is told when it
    begins to), yield the :class:`Attempt`, then store what it remembered or let the
    claim go. ``param`` names the command id in a 409 ``idempotency_key_reused``."""
    try:
        outcome = await results.claim(key, digest, waiting)
    except IdempotencyKeyReused:
        raise IdempotencyKeyReused(param) from None
    current = Attempt(key, digest, outcome)
    if outcome is not None:
        yield current
        return
    try:
        yield current
    except BaseException:
        await asyncio.shield(_settle(results, key, None))
        raise
    await _settle(results, key, current.remembered)


async def _settle(results: CommandResults, key: CommandKey, outcome: Outcome | None) -> None:
    """Store ``outcome``, or let the claim go (None). The command has run by now: a store
    that cannot be reached (Redis away) is logged, not raised, so the command's own answer
    or error stands; the claim left behind expires (``claim_ttl``) and a retry then runs
    again, as after a holder that died."""
    try:
        if outcome is None:
            await results.release(key)
        else:
            await results.complete(key, outcome)
    except StorageError as exc:
        lost = "its outcome is not kept" if outcome is not None else "its claim is left to expire"
        log.warning("a command ended, but %s: %s", lost, exc)
