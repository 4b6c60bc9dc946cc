"""Stored responses as their owner asks for them: retrieved, deleted, their input items
listed, and stored items shown as ``include`` asks (:mod:`.included`).

A response generating in this process is answered from its run where that is fresher
than its row (not yet stored, or stored only as in progress); a ``DELETE`` of one stops
its run, here or, through the shared signals, in the process that runs it.
"""

from __future__ import annotations

from typing import overload

from stateway.core.cancel_signals import DeleteSignals
from stateway.core.commands import ListInputItems
from stateway.core.errors import ResponseNotFound
from stateway.core.included import included_items
from stateway.core.items import Item
from stateway.core.ports import ItemPage, ResponseStore, Sealer
from stateway.core.principal import Principal
from stateway.core.response import UNFINISHED, ResponseState, load_state
from stateway.core.results import Deleted
from stateway.core.run_registry import RunRegistry
from stateway.core.runs import CancelReason
from stateway.core.settling import Settler


class StoredResponses:
    def __init__(
        self,
        store: ResponseStore,
        runs: RunRegistry,
        sealer: Sealer | None,
        deletes: DeleteSignals | None,
        settler: Settler,
    ) -> None:
        """``deletes``: the signals to other processes' runs (None: one process);
        ``settler``: the ends of runs here whose save failed, not stored yet."""
        self._store = store
        self._runs = runs
        self._sealer = sealer
        self._deletes = deletes
        self._settler = settler

    async def get(self, principal: Principal, response_id: str) -> ResponseState:
        run = self._runs.of(principal.tenant_id, response_id)
        if run is not None and not run.state.store:
            run = None
        if run is not None and not run.has_row:
            return run.snapshot()  # generating here; stored when it ends
        unsaved = self._settler.pending(principal.tenant_id, response_id)  # read first
        record = await self._store.get(principal.tenant_id, response_id)  # deleted: None
        if record is None:
            raise ResponseNotFound(response_id)
        if run is not None and record.status in UNFINISHED:
            return run.snapshot()  # generating here: fresher than its in-progress row
        if unsaved is not None and record.status in UNFINISHED:
            return unsaved  # ended here, its save failed: its row is ended later
        return load_state(record.tenant_id, record.body, record.output_items)

    async def delete(self, principal: Principal, response_id: str) -> Deleted:
        tenant_id = principal.tenant_id
        run = self._runs.of(tenant_id, response_id)
        unfinished = False
        if run is None and self._deletes is not None:  # whether a run elsewhere may hold it
            record = await self._store.get(tenant_id, response_id)
            unfinished = record is not None and record.status in UNFINISHED
        if not await self._store.delete(tenant_id, response_id):
            raise ResponseNotFound(response_id)
        if run is not None:
            run.cancel(CancelReason.DELETED)  # its final save leaves the row deleted
        elif unfinished and self._deletes is not None:
            # A run of another process stops as if deleted there (its final save leaves
            # the row deleted too); anywhere else, the signal is ignored. The response is
            # deleted already: a signal that cannot be sent (Redis away for longer than
            # the resends) leaves such a run to its end, as without shared signals, rather
            # than failing the DELETE.
            await self._deletes.send(tenant_id, response_id)
        return Deleted(response_id)

    async def input_items(self, principal: Principal, command: ListInputItems) -> ItemPage:
        page = await self._store.list_input_items(
            principal.tenant_id,
            command.response_id,
            after=command.after,
            limit=command.limit,
            order=command.order,
        )
        if page is None:
            raise ResponseNotFound(command.response_id)
        return self.included(page, command.include, principal)

    @overload
    def included(
        self, found: ItemPage, include: tuple[str, ...] | None, principal: Principal
    ) -> ItemPage: ...

    @overload
    def included(
        self, found: Item, include: tuple[str, ...] | None, principal: Principal
    ) -> Item: ...

    def included(
        self, found: ItemPage | Item, include: tuple[str, ...] | None, principal: Principal
    ) -> ItemPage | Item:
        """Stored items as ``include`` shows them (:mod:`.included`): a page's, or one."""
        tenant_id = principal.tenant_id
        if isinstance(found, ItemPage):
            items = included_items(found.items, include, self._sealer, tenant_id)
            return ItemPage(items, found.has_more)
        [item] = included_items([found], include, self._sealer, tenant_id)
        return item
