"""Run ownership: which process runs an ``in_progress`` response, and start-up recovery.

Every in-progress row names its owner as ``HOST/PIDNS PID START``: START is the process's
start time (clock ticks since boot, from ``/proc`` on Linux), so that a pid reused by
another process is not mistaken for the owner, and PIDNS its PID namespace (the machine's
boot id and the inode of ``/proc/self/ns/pid``), in which alone its pid means anything:
containers sharing the
host's network (``docker run --network host``, Kubernetes' ``hostNetwork``) share its
hostname, each with pids of its own. At start-up, before serving, :func:`fail_abandoned`
marks ``failed`` (code ``server_restarted``, no ``completed_at``) every response left
unfinished (``queued`` or ``in_progress``) by a process of this host and PID namespace that
is gone, with the output its event log shows, if it has one
(:mod:`stateway.core.logged_output`). An owner named without a namespace (``HOST PID
START``, as older versions wrote it, or where ``/proc`` cannot tell) is judged by its pid
on a host of its name, as it was.

Responses of a process that is still alive (a sibling serving the same database) are never
touched here, nor are those of another host: those are judged by their owner's lease
(:mod:`stateway.core.leases`), which any surviving process watches while it serves.
"""

from __future__ import annotations

import asyncio
import logging
import os
import socket
from dataclasses import dataclass
from pathlib import Path
from typing import Final

from stateway.core.errors import (
    GatewayError,
    ServerRestarted,
    StorageError,
    StorageFull,
    StorageReadOnly,
    StorageRejected,
    StorageWriteFailed,
)
from stateway.core.journal import EventDecoder, EventEncoder
from stateway.core.ports import EventBatch, ResponseRecord, ResponseStore
from stateway.core.response import UNFINISHED, ResponseState, load_state, turn_end
from stateway.core.settling import store_failed

log = logging.getLogger(__name__)

_PROC: Final = Path("/proc")
_UNSTORED: Final = frozenset(
    {
        ServerRestarted.code,
        StorageError.code,
        StorageFull.code,
        StorageReadOnly.code,
        StorageWriteFailed.code,
    }
)
"""The error codes of a response that may have sent its watchers events never stored."""
_DIED: Final = frozenset({ServerRestarted.code})
"""The error code of a response whose process died while it ran."""


@dataclass(frozen=True, slots=True)
class ProcessIdentity:
    host: str
    pid: int
    started: str
    """The process's start time as the OS reports it; empty where it cannot be read."""
    pid_namespace: str = ""
    """The process's PID namespace (``BOOT:INODE``, see :func:`_pid_namespace`); empty
    where it cannot be read (and in identities stored by older versions)."""

    @classmethod
    def current(cls) -> ProcessIdentity:
        pid = os.getpid()
        return cls(socket.gethostname(), pid, _start_time(pid) or "", _pid_namespace())

    @classmethod
    def parse(cls, text: str) -> ProcessIdentity | None:
        place, _, rest = text.partition(" ")
        host, _, namespace = place.partition("/")
        pid, _, started = rest.partition(" ")
        return cls(host, int(pid), started, namespace) if host and pid.isdigit() else None

    def __str__(self) -> str:
        place = f"{self.host}/{self.pid_namespace}" if self.pid_namespace else self.host
        return f"{place} {self.pid} {self.started}"

    def sees_pids_of(self, other: ProcessIdentity) -> bool:
        """Whether ``other``'s pid names a process here: same host, same PID namespace
        (or ``other`` names none, as older versions did not)."""
        if other.host != self.host:
            return False
        return not other.pid_namespace or other.pid_namespace == self.pid_namespace

    def is_alive(self) -> bool:
        """Whether this process (of this host) still runs: same pid, same start time."""
        if self.started:
            return _start_time(self.pid) == self.started
        try:  # no start time recorded (no /proc): the pid alone decides
            os.kill(self.pid, 0)
        except ProcessLookupError:
            return False
        except PermissionError:  # someone else's process: alive
            return True
        return True


def _pid_namespace() -> str:
    """``BOOT:INODE``: this machine's boot id and the inode of this process's PID namespace
    (``/proc/self/ns/pid`` links to ``pid:[INODE]``), the inode alone being the same for
    the initial namespace of every Linux machine (two hosts of one name would share it);
    empty without ``/proc``."""
    try:
        link = os.readlink(_PROC / "self" / "ns" / "pid")
        boot = (_PROC / "sys" / "kernel" / "random" / "boot_id").read_text().strip()
    except OSError:
        return ""
    inode = link.partition("[")[2].rstrip("]")
    return f"{boot}:{inode}" if inode.isdigit() and boot and " " not in boot else ""


def _start_time(pid: int) -> str | None:
    """Field 22 of ``/proc/PID/stat``; None when there is no such process (or no /proc),
    or when it is a zombie: it has exited and only waits to be reaped."""
    try:
        stat = (_PROC / str(pid) / "stat").read_text()
    except OSError:
        return None
    # The command name (field 2) is in parentheses and may hold spaces: split after it.
    fields = stat[stat.rindex(")") + 2 :].split()
    return None if fields[0] in ("Z", "X") else fields[19]


async def fail_abandoned(
    store: ResponseStore, me: ProcessIdentity, encode: EventEncoder, decode: EventDecoder
) -> int:
    """Mark ``failed`` every response left unfinished by a dead process of this host (and
    PID namespace);
    return how many. All are written together (one shared transaction per batch). The
    event log of a background response, or of a journaled stream (a keyed or WebSocket
    create), gives the response the output it logged (read by ``decode``) and gets the
    terminal event it never had (made by ``encode``), after the last event it stored, so
    that watchers replaying it see it end. One whose end the database refuses even
    without its output (:class:`~stateway.core.errors.StorageRejected`: refused again at
    every start) is left in progress with an error line, not counted: the start goes on,
    as an outage's does not."""
    abandoned = [r for r in await store.in_progress() if _abandoned(r, me)]
    if not abandoned:
        return 0
    ended = await asyncio.gather(*(_fail_abandoned(store, r, encode, decode) for r in abandoned))
    failed = sum(ended)
    if failed:
        log.warning(
            "marked %d response(s) left in progress by a stopped process as failed "
            "(server_restarted)",
            failed,
        )
    return failed


async def _fail_abandoned(
    store: ResponseStore, record: ResponseRecord, encode: EventEncoder, decode: EventDecoder
) -> bool:
    """Whether ``record`` was failed: False when the database refused its end."""
    try:
        await fail_owned(store, record, encode, decode)
    except StorageRejected as exc:
        log.error(
            "the database refused the end of response %s, left in progress by a stopped"
            " process, even without its output: it is left in progress (%s)",
            record.id,
            exc,
        )
        return False
    return True


def _abandoned(record: ResponseRecord, me: ProcessIdentity) -> bool:
    owner = ProcessIdentity.parse(record.owner) if record.owner else None
    if owner is None or not me.sees_pids_of(owner):
        return False  # unknown owner, or another host's (or PID namespace's): not ours
    return owner != me and not owner.is_alive()


async def fail_owned(
    store: ResponseStore, record: ResponseRecord, encode: EventEncoder, decode: EventDecoder
) -> EventBatch | None:
    """Mark ``record`` (unfinished, its owner gone) ``failed`` with ``server_restarted``,
    with the output its log shows (:mod:`.logged_output`: what a cancel would have kept;
    none without a log); return the terminal event appended to its log (a background
    response's, or a journaled stream's: a keyed create, a WebSocket create), if any. Its
    usage stays unknown (null), and a conversation turn adds nothing to its conversation,
    as a cancelled one does not (:func:`~.response.turn_end`), and lets it go with the
    same write: a lock whose holder has ended is free anyway, but only while that row is
    stored (the retention purges it in time). An output the database refuses
    (:class:`~stateway.core.errors.StorageRejected`: refused again however often it is
    sent) is left out, so that the row is failed all the same."""
    state = load_state(record.tenant_id, record.body, [])
    state.fail(ServerRestarted())
    state.completed_at = None
    turn = turn_end(state, [])
    try:
        return await store_failed(store, state, encode, turn, decode=decode)
    except StorageRejected as exc:
        if not state.output:
            raise
        log.error(
            "the database refused the logged output of response %s (%s): failing it without",
            record.id,
            exc,
        )
    state.output = []
    return await store_failed(store, state, encode, turn)


def end_as_stored(state: ResponseState, stored: ResponseRecord | None) -> GatewayError | None:
    """Make ``state``, a run's end the store did not take because another process ended
    its row first (its lease judged lapsed: ``failed``, ``server_restarted``), the end
    stored: what its clients are told is what a retrieve and the watchers elsewhere were,
    its output included (none, unless the judge rebuilt it from the run's log). Return the
    error a non-stream client is answered with: the stored failure (only judging, or
    start-up marking, ends another process's row, with ``server_restarted``); None for a
    stored end that is not a failure. A row no longer readable (deleted since) is taken
    as judged."""
    if stored is None or stored.status in UNFINISHED:
        state.fail(ServerRestarted())
        state.output, state.completed_at, state.incomplete_reason = [], None, None
        return ServerRestarted()
    ended = load_state(stored.tenant_id, stored.body, stored.output_items)
    state.status, state.error = ended.status, ended.error
    state.incomplete_reason, state.completed_at = ended.incomplete_reason, ended.completed_at
    state.output, state.usage = ended.output, ended.usage
    return ServerRestarted() if ended.status == "failed" else None


async def died_running(store: ResponseStore, tenant_id: str, response_id: str) -> bool:
    """Whether the response failed because its process died while it ran (its watchers
    there may have been sent events that were never stored)."""
    return await _failed_with(store, tenant_id, response_id, _DIED)


async def sent_unstored(store: ResponseStore, tenant_id: str, response_id: str) -> bool:
    """Whether the response's watchers may have been sent events that were never stored:
    it failed because its process died while it ran (:func:`died_running`), or because its
    end could not be stored (a storage error: its log's batches may have failed too, and
    its end was stored later, after the last event stored, by the settler or by another
    process's judging). Its stored terminal event may then be numbered below events a
    watcher was sent: such a watcher past it is given it (it is how the response ended),
    not refused as past the end of the log."""
    return await _failed_with(store, tenant_id, response_id, _UNSTORED)


async def _failed_with(
    store: ResponseStore, tenant_id: str, response_id: str, codes: frozenset[str]
) -> bool:
    """Whether the stored response failed with an error of one of ``codes``."""
    record = await store.get(tenant_id, response_id)
    if record is None or record.status != "failed":
        return False
    error = record.body.get("error")
    return isinstance(error, dict) and error.get("code") in codes
