"""``SqlResponseStore``: the :class:`~stateway.core.ports.ResponseStore` port over SQL.

Each method opens one pooled connection, runs the prebuilt statements of
:mod:`~stateway.storage.sql.queries` and maps rows to records. JSON travels as text
written and read by orjson, on both databases. Database failures leave as
:class:`~stateway.core.errors.StorageError` (see :mod:`~stateway.storage.sql.errors`).

Transactions: :meth:`save` (a run's in-progress row with its input) and :meth:`finish`
(its end, with its output and, for a background run, the rest of its event log) are each
atomic per response, with what a conversation turn writes to its conversation
(:mod:`~stateway.storage.sql.conversation_queries`), as is each batch of
:meth:`append_events`; writes that arrive together share one transaction
(:mod:`~stateway.storage.sql.group_commit`); an end finding its row ended already (another
process failed it) writes nothing. A turn's :meth:`save` then reads whether its
row went in (a refused claim writes nothing). :meth:`delete` runs in its own transaction.
Reads are not wrapped in one: :meth:`load_context` is a single statement, and :meth:`get`
and :meth:`list_input_items` run two over rows that never change once written (bar
``deleted_at``: a delete landing between them is simply ordered after the read);
:meth:`read_events` reads the response's status before its events, so a finished status
comes with the events committed with it. On PostgreSQL reads use autocommit, sparing the
``BEGIN`` and ``ROLLBACK`` round trips a transaction would add to each; SQLite's driver
only opens transactions for writes anyway.

Pages of input items: ``after`` is an item id; the page starts after the first item, in
the requested order, that has this id. Item ids are client-chosen labels, not keys, so
the same id may appear twice. When no input item has the id, the page is empty
(``has_more`` false) rather than silently restarting from the beginning.
"""

from __future__ import annotations

import logging
import time
from typing import Any, Final, Literal

import orjson
from sqlalchemy.ext.asyncio import AsyncEngine

from stateway.core.items import Item
from stateway.core.ports import EventBatch, EventLog, ItemPage, ResponseRecord, StoredChain
from stateway.storage.sql import conversation_queries as cq
from stateway.storage.sql import queries, references
from stateway.storage.sql.accounting import usage_columns
from stateway.storage.sql.conversation_rows import appended_rows, claim_row, end_row, refusal
from stateway.storage.sql.engine import MAX_CONNECTIONS, create_engine
from stateway.storage.sql.errors import storage_errors
from stateway.storage.sql.group_commit import GroupCommitter, Rows
from stateway.storage.sql.ping import Ping
from stateway.storage.sql.refusals import WriteRefusals
from stateway.storage.sql.schema import ERASED, INPUT, OUTPUT, indexable_id
from stateway.storage.sql.writer import Watcher, writer_for

log = logging.getLogger(__name__)

WRITE_ORDER: Final = (
    cq.CLAIM,
    queries.INSERT_RESPONSE,
    cq.INSERT_TURN_RESPONSE,
    queries.FINISH_RESPONSE,
    queries.INSERT_ITEMS,
    queries.INSERT_EVENTS,
    cq.INSERT_TURN_ITEMS,
    cq.APPEND_TURN_ITEMS,
    cq.END_TURN,
    queries.INSERT_PROBE,
    queries.CLEAR_PROBES,
)
"""Every statement a save runs, in the order a shared transaction runs them: a turn's
claim before the row it lets in, its items appended before it lets go; a write probe's
(:mod:`~.ping`) last."""


def open_store(
    url: str, *, timeout: float | None = None, max_connections: int = MAX_CONNECTIONS
) -> SqlResponseStore:
    """A store for the database at ``url``, each PostgreSQL statement waiting ``timeout``
    seconds at most for its answer, over ``max_connections`` PostgreSQL connections at
    most (:func:`~stateway.storage.sql.engine.create_engine`). Opens no connection and
    does not migrate: call :func:`~stateway.storage.sql.migrator.migrate` first."""
    return SqlResponseStore(create_engine(url, timeout=timeout, max_connections=max_connections))


class SqlResponseStore:
    """Responses and items in SQLite or PostgreSQL. Owns ``engine``: :meth:`aclose`
    disposes it."""

    def __init__(self, engine: AsyncEngine) -> None:
        self.engine = engine
        self._reader = (
            engine.execution_options(isolation_level="AUTOCOMMIT")
            if engine.dialect.name == "postgresql"
            else engine
        )
        self.refusals = WriteRefusals()
        """The lasting refusal a write last met: every write of this store's engine passes
        it to :func:`~.errors.storage_errors`, its ping reads it."""
        self._writes = GroupCommitter(
            writer_for(engine), WRITE_ORDER, self.refusals, guarded=(queries.FINISH_RESPONSE,)
        )
        self._ping = Ping(engine, self._reader, self._writes, self.refusals)

    @property
    def write_watchers(self) -> list[Watcher]:
        """Told the SQL of each statement that writes responses and items, before it runs
        (on SQLite on the writer's own connection, not ``engine``'s: see
        :mod:`~stateway.storage.sql.writer`)."""
        return self._writes.writer.watchers

    @property
    def reader(self) -> AsyncEngine:
        """The engine reads go through (autocommit on PostgreSQL)."""
        return self._reader

    async def save(self, record: ResponseRecord) -> None:
        model, input_tokens, output_tokens = usage_columns(record.body)
        response_row = {
            "tenant_id": record.tenant_id,
            "id": record.id,
            "previous_response_id": record.previous_response_id,
            "status": record.status,
            "created_at": record.created_at,
            "deleted_at": None,
            "body": _dumps(record.body),
            "owner": record.owner,
            "served_by": _hint(record.served_by),
            "model": model,
            "input_tokens": input_tokens,
            "output_tokens": output_tokens,
        }
        item_rows = _item_rows(record, INPUT, record.input_items)
        item_rows += _item_rows(record, OUTPUT, record.output_items)
        turn = record.turn
        if turn is None:
            await self._writes.write(
                {queries.INSERT_RESPONSE: [response_row], queries.INSERT_ITEMS: item_rows}
            )
            return
        response_row["conversation_id"] = turn.conversation_id
        await self._writes.write(
            {
                cq.CLAIM: [claim_row(record.tenant_id, record.id, turn)],
                cq.INSERT_TURN_RESPONSE: [response_row],
                cq.INSERT_TURN_ITEMS: item_rows,
            }
        )
        await self._check_claimed(record.tenant_id, record.id, turn.conversation_id)

    async def finish(self, record: ResponseRecord) -> bool:
        """The end over a row still in progress, or nothing at all: :data:`FINISH_RESPONSE
        <.queries.FINISH_RESPONSE>` is guarded (:mod:`~.group_commit`)."""
        model, input_tokens, output_tokens = usage_columns(record.body)
        update = {
            "tenant": record.tenant_id,
            "response": record.id,
            "new_status": record.status,
            "new_body": _dumps(record.body),
            "new_served_by": _hint(record.served_by),
            "new_model": model,
            "new_input_tokens": input_tokens,
            "new_output_tokens": output_tokens,
        }
        rows: Rows = {
            queries.FINISH_RESPONSE: [update],
            queries.INSERT_ITEMS: _item_rows(record, OUTPUT, record.output_items),
        }
        if record.events is not None:
            rows[queries.INSERT_EVENTS] = [_event_row(record.tenant_id, record.id, record.events)]
        turn = record.turn
        if turn is not None:
            rows[cq.APPEND_TURN_ITEMS] = appended_rows(
                record.tenant_id, turn.conversation_id, turn.items, record.id
            )
            rows[cq.END_TURN] = [end_row(record.tenant_id, record.id, turn)]
        return await self._writes.write(rows)

    async def _check_claimed(self, tenant_id: str, response_id: str, conversation_id: str) -> None:
        """Raise why a turn's claim was refused, told by its row being missing."""
        key = {"tenant": tenant_id, "response": response_id}
        with storage_errors("taking a conversation"):
            async with self._reader.connect() as connection:
                if (await connection.execute(queries.RESPONSE_IS_LIVE, key)).first() is None:
                    raise await refusal(connection, tenant_id, conversation_id)

    async def append_events(self, tenant_id: str, response_id: str, batch: EventBatch) -> None:
        await self._writes.write(
            {queries.INSERT_EVENTS: [_event_row(tenant_id, response_id, batch)]}
        )

    async def read_events(self, tenant_id: str, response_id: str, after: int) -> EventLog | None:
        if not _storable(response_id):
            return None
        key = {"tenant": tenant_id, "response": response_id, "after": after}
        with storage_errors("reading an event log"):
            async with self._reader.connect() as connection:
                head = (await connection.execute(queries.SELECT_EVENT_LOG_HEAD, key)).first()
                if head is None:
                    return None
                rows = (await connection.execute(queries.SELECT_EVENTS, key)).all()
        status, body = head
        payloads: list[bytes] = []
        end = 0
        for first, lines in rows:
            batch = lines.encode().split(b"\n")
            end = first + len(batch)
            if first <= after:  # the batch holding event ``after + 1``: skip what precedes it
                batch = batch[after + 1 - first :]
            payloads += batch
        return EventLog(
            status=status,
            background=bool(orjson.loads(body).get("background")),
            last=end - 1,
            events=EventBatch(end - len(payloads), payloads),
        )

    async def in_progress(self) -> list[ResponseRecord]:
        with storage_errors("finding responses in progress"):
            async with self._reader.connect() as connection:
                rows = (await connection.execute(queries.SELECT_IN_PROGRESS)).all()
        return [
            ResponseRecord(
                tenant_id=row.tenant_id,
                id=row.id,
                previous_response_id=row.previous_response_id,
                status=row.status,
                created_at=row.created_at,
                body=orjson.loads(row.body),
                owner=row.owner,
            )
            for row in rows
        ]

    async def get(self, tenant_id: str, response_id: str) -> ResponseRecord | None:
        if not _storable(response_id):
            return None
        key = {"tenant": tenant_id, "response": response_id}
        with storage_errors("reading a response"):
            async with self._reader.connect() as connection:
                row = (await connection.execute(queries.SELECT_RESPONSE, key)).one_or_none()
                if row is None:
                    return None
                bodies = (await connection.execute(queries.SELECT_OUTPUT_ITEMS, key)).scalars()
                output_items: list[Item] = [orjson.loads(body) for body in bodies]
        previous_response_id, status, created_at, body = row
        return ResponseRecord(
            tenant_id=tenant_id,
            id=response_id,
            previous_response_id=previous_response_id,
            status=status,
            created_at=created_at,
            body=orjson.loads(body),
            output_items=output_items,
        )

    async def load_context(self, tenant_id: str, response_id: str) -> StoredChain | None:
        if not _storable(response_id):
            return None
        key = {"tenant": tenant_id, "response": response_id}
        with storage_errors("loading a previous_response_id chain"):
            async with self._reader.connect() as connection:
                rows = (await connection.execute(queries.LOAD_CONTEXT, key)).all()
        if not rows:
            return None
        # A response without items contributes one NULL row (outer join): skip those.
        # Rows come oldest response first: the last one is the requested response's.
        items = [orjson.loads(body) for body, _, _ in rows if body is not None]
        _, status, served_by = rows[-1]
        if rows[0][1] == ERASED:  # an erasure clears the link: the walk's first, if any
            log.warning(
                "response %s continues from a deleted response whose content was erased "
                "before it was stored (a run longer than the erasure's grace): its context "
                "starts after it",
                response_id,
            )
        return StoredChain(items, status, served_by)

    async def find_items(self, tenant_id: str, item_ids: list[str]) -> dict[str, Item]:
        """Looked up where each kind of item lives (:data:`.references.FIND_ITEMS`), the
        ids still missing only; an id no index holds names nothing (one holding a NUL
        byte, one too long: :func:`.schema.indexable_id`)."""
        ids = [item_id for item_id in item_ids if indexable_id(item_id)]
        if not ids:
            return {}
        found: dict[str, Item] = {}
        with storage_errors("resolving item references"):
            async with self._reader.connect() as connection:
                for query in references.FIND_ITEMS:
                    values = {"tenant": tenant_id, "ids": [i for i in ids if i not in found]}
                    if not values["ids"]:
                        break
                    for item_id, body in (await connection.execute(query, values)).all():
                        found[item_id] = orjson.loads(body)
        return found

    async def delete(self, tenant_id: str, response_id: str) -> bool:
        if not _storable(response_id):
            return False
        values = {"tenant": tenant_id, "response": response_id, "now": time.time()}
        with storage_errors("deleting a response", self.refusals):
            async with self.engine.begin() as connection:
                result = await connection.execute(queries.SOFT_DELETE, values)
        return result.rowcount == 1

    async def list_input_items(
        self,
        tenant_id: str,
        response_id: str,
        *,
        after: str | None,
        limit: int,
        order: Literal["asc", "desc"],
    ) -> ItemPage | None:
        """One page of the response's input items; None when the response is unknown or
        deleted. ``limit`` must be positive."""
        if limit < 1:
            raise ValueError(f"limit must be positive, not {limit}")
        if not _storable(response_id):
            return None
        page = queries.INPUT_ITEMS_PAGE[order, after is not None]
        # One row beyond the page tells whether there is more.
        values = {"tenant": tenant_id, "response": response_id, "limit": limit + 1}
        if after is not None:
            values["after"] = after
        with storage_errors("listing input items"):
            async with self._reader.connect() as connection:
                live = await connection.execute(queries.RESPONSE_IS_LIVE, values)
                if live.first() is None:
                    return None
                if after is not None and not _storable(after):
                    return ItemPage(items=[], has_more=False)  # an unknown cursor
                bodies = (await connection.execute(page, values)).scalars().all()
        return ItemPage(
            items=[orjson.loads(body) for body in bodies[:limit]],
            has_more=len(bodies) > limit,
        )

    async def ping(self) -> None:
        """Whether the database answers, and takes writes (:mod:`~.ping`)."""
        await self._ping.check()

    async def aclose(self) -> None:
        await self._writes.aclose()
        await self.engine.dispose()


def _dumps(value: Any) -> str:
    return orjson.dumps(value).decode()


def _storable(key: str) -> bool:
    """Whether ``key`` can be a column value on both databases: PostgreSQL text refuses NUL.
    No stored id contains one, so a key that does matches nothing."""
    return "\x00" not in key


def _hint(served_by: str | None) -> str | None:
    """A ``served_by`` the column can hold: a request's model names the candidate, and one
    holding NUL is no hint (its response still saves)."""
    return served_by if served_by is not None and _storable(served_by) else None


def _event_row(tenant_id: str, response_id: str, batch: EventBatch) -> dict[str, Any]:
    """One row per batch: its first event's number, its payloads one per line (JSON that
    orjson wrote has no raw line break)."""
    return {
        "tenant_id": tenant_id,
        "response_id": response_id,
        "sequence_number": batch.first,
        "body": b"\n".join(batch.payloads).decode(),
    }


def _item_rows(record: ResponseRecord, role: str, items: list[Item]) -> list[dict[str, Any]]:
    rows = []
    for position, item in enumerate(items):
        item_id = item.get("id")
        rows.append(
            {
                "tenant_id": record.tenant_id,
                "response_id": record.id,
                "role": role,
                "position": position,
                "item_id": item_id if indexable_id(item_id) else None,
                "body": _dumps(item),
            }
        )
    return rows
