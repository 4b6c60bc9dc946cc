"""In-memory stand-ins for the core's ports."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncGenerator, Awaitable, Callable, Mapping
from typing import Any, Literal

from stateway.core.errors import GatewayError, StorageError
from stateway.core.inference import Delta, InferenceRequest
from stateway.core.items import Item
from stateway.core.ports import EventBatch, EventLog, ItemPage, ResponseRecord, StoredChain
from stateway.core.response import UNFINISHED
from stateway.core.tools.history import REWRITTEN_ITEM_TYPES
from stateway.core.tools.ports import McpServer, McpTool, SearchHit, SearchQuery, ToolFailure


class ScriptedBackend:
    """Yields a fixed list of deltas (an exception in the list is raised at that point)."""

    name = "scripted"
    api = "chat"
    address: tuple[str, int] | None = None
    carried_item_types = frozenset(
        {"message", "function_call", "function_call_output", "reasoning"}
    )
    carried_part_types = {
        "user": frozenset({"input_text", "input_image"}),
        "system": frozenset({"input_text"}),
        "developer": frozenset({"input_text"}),
        "assistant": frozenset({"output_text"}),
        "tool_output": frozenset({"input_text"}),
    }
    inlines_text_files = False
    carries_unknown_types = False
    min_output_tokens = 1
    cache_salted = False
    """A subclass forwarding Chat Completions is a ChatForwarder: its bodies unsalted."""
    takes_named_choice = True
    """... and a named ``tool_choice`` forwarded as it came."""
    takes_custom_tools = True
    """... and so are custom tools."""
    places: int | None = None
    """Calls it takes before a call is refused at once (None: any number)."""
    seat: asyncio.Event | None = None
    """A call waits for it before it is seated (its connection slot taken, as the upstream
    client tells the call's ``first_output``); None: seated at once."""

    def full(self, pending: int = 0) -> bool:
        return self.places is not None and pending >= self.places

    def __init__(
        self, script: list[Delta | GatewayError], gate: asyncio.Event | None = None
    ) -> None:
        self.script = script
        self.gate = gate
        self.requests: list[InferenceRequest] = []
        self.started = asyncio.Event()
        self.closed = asyncio.Event()
        self.token_count: int | GatewayError | None = None
        """What ``count_tokens`` answers (None: no tokenizer; an error is raised)."""
        self.counted: list[InferenceRequest] = []
        self.count_gate: asyncio.Event | None = None
        """``count_tokens`` waits for it (``started`` once it asks, ``closed`` once it
        ends, answered or abandoned)."""

    async def infer(self, request: InferenceRequest) -> AsyncGenerator[Delta, None]:
        self.requests.append(request)
        self.started.set()
        try:
            if self.seat is not None:
                await self.seat.wait()
            waiting = request.first_output
            if waiting is not None and waiting.seated is not None:
                waiting.seated()
            for step in self.script:
                if isinstance(step, GatewayError):
                    raise step
                yield step
            if self.gate is not None:
                await self.gate.wait()
        finally:
            self.closed.set()

    async def list_models(self) -> list[str]:
        return ["scripted-model"]

    async def count_tokens(self, request: InferenceRequest) -> int | None:
        self.counted.append(request)
        if self.count_gate is not None:
            self.started.set()
            try:
                await self.count_gate.wait()
            finally:
                self.closed.set()
        if isinstance(self.token_count, GatewayError):
            raise self.token_count
        return self.token_count

    async def aclose(self) -> None:
        pass


class MemoryStore:
    """``on_save`` sees every write (``save`` and ``finish``); ``fail_save`` makes the
    in-progress write raise :class:`StorageError`, ``fail_final`` the write of a run's end
    (a ``finish``, or a ``save`` of a response no longer in progress); a ``save_gate``
    holds every ``save`` until it is set. Event logs: ``appends`` records each batch
    appended (outside a ``finish``), ``fail_events`` makes appending them raise, an
    ``events_gate`` holds appends until it is set; ``fail_get`` makes reading a response
    raise."""

    def __init__(
        self,
        on_save: Callable[[ResponseRecord], None] | None = None,
        *,
        fail_save: bool = False,
        fail_final: bool = False,
        save_gate: asyncio.Event | None = None,
    ) -> None:
        self.records: dict[tuple[str, str], ResponseRecord] = {}
        self.deleted: set[tuple[str, str]] = set()
        self.on_save = on_save
        self.fail_save = fail_save
        self.fail_final = fail_final
        self.save_gate = save_gate
        self.batches: dict[tuple[str, str], list[EventBatch]] = {}
        self.appends: list[EventBatch] = []
        self.fail_events = False
        self.events_gate: asyncio.Event | None = None
        self.fail_get = False

    async def save(self, record: ResponseRecord) -> None:
        if self.on_save is not None:
            self.on_save(record)
        if self.save_gate is not None:
            await self.save_gate.wait()
        if self.fail_save or (self.fail_final and record.status not in UNFINISHED):
            raise StorageError("Storage failed while saving a response.")
        self.records[(record.tenant_id, record.id)] = record

    async def finish(self, record: ResponseRecord) -> bool:
        if self.fail_final and record.status not in UNFINISHED:  # a queued run's start goes
            raise StorageError("Storage failed while saving a response.")
        if self.on_save is not None:
            self.on_save(record)
        key = (record.tenant_id, record.id)
        stored = self.records.get(key)
        if stored is None or stored.status not in UNFINISHED:
            return False  # ended elsewhere: nothing written
        self._log(key, record.events)
        stored.status, stored.body = record.status, record.body
        stored.output_items, stored.served_by = record.output_items, record.served_by
        return True

    async def in_progress(self) -> list[ResponseRecord]:
        return [r for r in self.records.values() if r.status in UNFINISHED]

    async def append_events(self, tenant_id: str, response_id: str, batch: EventBatch) -> None:
        if self.events_gate is not None:
            await self.events_gate.wait()
        if self.fail_events:
            raise StorageError("Storage failed while saving a response.")
        if (tenant_id, response_id) not in self.records:
            raise StorageError("Storage failed while saving a response.")  # the foreign key
        self._log((tenant_id, response_id), batch)
        self.appends.append(batch)

    async def read_events(self, tenant_id: str, response_id: str, after: int) -> EventLog | None:
        record = await self.get(tenant_id, response_id)
        if record is None:
            return None
        logged = self.events.get((tenant_id, response_id), [])
        return EventLog(
            status=record.status,
            background=bool(record.body.get("background")),
            last=len(logged) - 1,
            events=EventBatch(after + 1, logged[after + 1 :]),
        )

    @property
    def events(self) -> dict[tuple[str, str], list[bytes]]:
        """Each response's logged payloads, by sequence number."""
        return {
            key: [payload for batch in batches for payload in batch.payloads]
            for key, batches in self.batches.items()
        }

    def _log(self, key: tuple[str, str], batch: EventBatch | None) -> None:
        if batch is None:
            return
        batches = self.batches.setdefault(key, [])
        if any(b.first == batch.first for b in batches):
            raise StorageError("Storage failed while saving a response.")  # the primary key
        batches.append(batch)
        batches.sort(key=lambda b: b.first)

    async def get(self, tenant_id: str, response_id: str) -> ResponseRecord | None:
        if self.fail_get:
            raise StorageError("Storage failed while reading a response.")
        key = (tenant_id, response_id)
        return None if key in self.deleted else self.records.get(key)

    async def load_context(self, tenant_id: str, response_id: str) -> StoredChain | None:
        record = await self.get(tenant_id, response_id)
        if record is None:
            return None
        chain: list[ResponseRecord] = []
        current: ResponseRecord | None = record
        while current is not None:
            chain.append(current)
            prev = current.previous_response_id
            current = self.records.get((tenant_id, prev)) if prev else None
        items: list[Item] = []
        for r in reversed(chain):
            items += r.input_items + (r.output_items if r.status != "failed" else [])
        return StoredChain(items, record.status, record.served_by)

    async def find_items(self, tenant_id: str, item_ids: list[str]) -> dict[str, Item]:
        found: dict[str, Item] = {}
        live = [
            r for key, r in self.records.items() if key[0] == tenant_id and key not in self.deleted
        ]
        for role in ("output_items", "input_items"):
            for record in sorted(live, key=lambda r: r.created_at, reverse=True):
                for item in reversed(getattr(record, role)):
                    item_id = item.get("id")
                    if item_id in item_ids and item_id not in found:
                        found[item_id] = item
        return found

    async def delete(self, tenant_id: str, response_id: str) -> bool:
        if await self.get(tenant_id, response_id) is None:
            return False
        self.deleted.add((tenant_id, response_id))
        return True

    async def list_input_items(
        self,
        tenant_id: str,
        response_id: str,
        *,
        after: str | None,
        limit: int,
        order: Literal["asc", "desc"],
    ) -> ItemPage | None:
        record = await self.get(tenant_id, response_id)
        if record is None:
            return None
        items = list(record.input_items if order == "asc" else reversed(record.input_items))
        if after is not None:  # the items past the cursor; none past an unknown one
            ids = [item.get("id") for item in items]
            items = items[ids.index(after) + 1 :] if after in ids else []
        return ItemPage(items[:limit], len(items) > limit)

    async def ping(self) -> None:
        pass

    async def aclose(self) -> None:
        pass


class HeldReads(MemoryStore):
    """A store whose reads of the responses in ``held`` wait (for ever): ``reading`` is set
    once one waits, ``abandoned`` once one was cancelled."""

    def __init__(self) -> None:
        super().__init__()
        self.held: set[str] = set()
        self.reading = asyncio.Event()
        self.abandoned = False

    async def get(self, tenant_id: str, response_id: str) -> ResponseRecord | None:
        if response_id in self.held:
            self.reading.set()
            try:
                await asyncio.Event().wait()
            except asyncio.CancelledError:
                self.abandoned = True
                raise
        return await super().get(tenant_id, response_id)


class RoundsBackend(ScriptedBackend):
    """One script per round (the last repeats): a model that calls tools, then answers."""

    carried_item_types = ScriptedBackend.carried_item_types | REWRITTEN_ITEM_TYPES

    def __init__(self, rounds: list[list[Delta | GatewayError]]) -> None:
        super().__init__(rounds[0])
        self.rounds = rounds

    async def infer(self, request: InferenceRequest) -> AsyncGenerator[Delta, None]:
        self.script = self.rounds[min(len(self.requests), len(self.rounds) - 1)]
        async for delta in super().infer(request):
            yield delta


class FakeMcp:
    """An in-memory MCP client: ``tools`` per server label; ``answers`` maps a tool name to
    a function of its arguments (raise ToolFailure to fail; ``sleep`` to hang)."""

    def __init__(
        self,
        tools: dict[str, list[McpTool]],
        answers: dict[str, Callable[[Mapping[str, Any]], Awaitable[str]]] | None = None,
        *,
        unreachable: frozenset[str] = frozenset(),
    ) -> None:
        self.tools = tools
        self.answers = answers or {}
        self.unreachable = unreachable
        self.listed: list[McpServer] = []
        self.calls: list[tuple[str, str, Mapping[str, Any]]] = []
        self.called_servers: list[McpServer] = []
        self.running = 0
        self.most_at_once = 0
        self.called = asyncio.Event()

    async def list_tools(self, server: McpServer) -> list[McpTool]:
        self.listed.append(server)
        if server.label in self.unreachable:
            raise ToolFailure(f"MCP server '{server.label}' is unreachable.")
        return self.tools[server.label]

    async def call_tool(self, server: McpServer, name: str, arguments: Mapping[str, Any]) -> str:
        self.calls.append((server.label, name, arguments))
        self.called_servers.append(server)
        self.called.set()
        self.running += 1
        self.most_at_once = max(self.most_at_once, self.running)
        try:
            await asyncio.sleep(0.01)
            return await self.answers[name](arguments)
        finally:
            self.running -= 1

    async def aclose(self) -> None:
        pass


class FakeSearch:
    name = "fake"

    def __init__(self, hits: list[SearchHit], *, fail: bool = False) -> None:
        self.hits = hits
        self.fail = fail
        self.queries: list[SearchQuery] = []

    async def search(self, query: SearchQuery) -> list[SearchHit]:
        self.queries.append(query)
        if self.fail:
            raise ToolFailure("search provider 'fake' answered 503")
        return self.hits[: query.max_results]

    async def aclose(self) -> None:
        pass
