"""The lasting refusal of writes the store last met: what its readiness reads.

A database can answer every read while refusing every write, for a cause that outlasts
the write: out of space, read-only (:class:`~stateway.core.errors.StorageNotWritable`,
named by :func:`~stateway.storage.sql.errors.refusal`). Any write of the store may be the
first to meet it, or the only one for a while: a response's save (the group committer's
transactions), and each write in a transaction of its own: a conversation's (created, its
items added, its metadata updated, deleted), a response's delete, a lease's heartbeat, a
retention sweep. Each passes the store's :class:`WriteRefusals` to
:func:`~stateway.storage.sql.errors.storage_errors`, where a failure is named and so the
one place a refusal is kept; the ping (:mod:`~stateway.storage.sql.ping`) then fails, and
tries a write of its own each time, until one lands.

Only a save or a probe committing clears it (:meth:`WriteRefusals.landed`, by the group
committer): a probe takes a new page, as a save may. Another write landing says less: a
heartbeat rewrites its row in place, which a full file lets land while it has no page
for a save.
"""

from __future__ import annotations

from stateway.core.errors import StorageNotWritable


class WriteRefusals:
    def __init__(self) -> None:
        self.last: StorageNotWritable | None = None
        """The refusal a write last met, until a save or probe commits; None meanwhile."""

    def refused(self, refusal: StorageNotWritable) -> None:
        self.last = refusal

    def landed(self) -> None:
        self.last = None
