"""The gateway as one process runs it: the store, the core's ``Gateway`` over the first
generation, the coordination adapters (in process or Redis), leases, telemetry, and the
server key (sealing, and each tenant's cache salt)."""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from functools import partial

from stateway import __version__
from stateway.app.generation import compile_generation
from stateway.config import (
    Config,
    ConfigError,
    Overrides,
)
from stateway.coordination.factory import build_coordination, build_fanout, build_limits
from stateway.core.accounting import UsageBackfill, UsageLedger
from stateway.core.conversations.ports import ConversationPurger, ConversationStore
from stateway.core.coordination import CancelSignals, CommandResults, EventFanout
from stateway.core.errors import StorageNotWritable
from stateway.core.gateway import Gateway
from stateway.core.generations import Generation
from stateway.core.hops import Hop
from stateway.core.leases import LeaseKeeper
from stateway.core.limits import RateLimits
from stateway.core.loop import Loop
from stateway.core.ownership import ProcessIdentity, fail_abandoned
from stateway.core.ports import (
    CacheSalts,
    OwnerLeases,
    ResponseEraser,
    ResponsePurger,
    ResponseStore,
    Sealer,
)
from stateway.core.retention import RetentionSweeper
from stateway.core.run_registry import RunRegistry
from stateway.core.runs import CancelReason
from stateway.core.settling import Settler
from stateway.identity.keys import KeyStore
from stateway.protocols.responses.event_log import decode_event_json
from stateway.protocols.responses.stream import encode_event_json
from stateway.reload import Compiled, Reloader
from stateway.sealing import AesGcmSealer, TenantCacheSalts, load_sealing_key
from stateway.storage.sql import SqlConversationStore, SqlResponseStore, open_store
from stateway.storage.sql.accounting import SqlUsageLedger
from stateway.storage.sql.api_keys import SqlKeyStore
from stateway.storage.sql.leases import SqlOwnerLeases
from stateway.storage.sql.retention import (
    SqlConversationPurger,
    SqlResponseEraser,
    SqlResponsePurger,
)
from stateway.storage.sql.secrets import SqlSecrets
from stateway.storage.sql.usage_backfill import SqlUsageBackfill
from stateway.surfaces.websocket.endpoint import WebSocketResponses
from stateway.telemetry.metrics import PrometheusMetrics
from stateway.telemetry.observability import Observability
from stateway.telemetry.storage import TimedStore
from stateway.telemetry.tracing import open_tracing

log = logging.getLogger(__name__)


@dataclass(slots=True)
class GatewayParts:
    store: ResponseStore
    runs: RunRegistry
    gateway: Gateway
    owner: ProcessIdentity
    config: Config
    """As started with (the start-up tables stay so until a restart)."""
    reloader: Reloader
    results: CommandResults | None = None
    """Outcomes of command ids (in process, or Redis)."""
    signals: CancelSignals | None = None
    """Cancels between processes (Redis only)."""
    fanout: EventFanout | None = None
    """Background runs' events between processes (Redis only)."""
    leases: LeaseKeeper | None = None
    """This process's lease on its runs, and the judge of the others' (SQL stores)."""
    limits: RateLimits | None = None
    """``[rate_limits]``, when any is set."""
    telemetry: Observability = field(default_factory=lambda: Observability(PrometheusMetrics()))
    """Metrics (``/metrics``), and traces when ``[tracing] enabled``."""
    keys: KeyStore | None = None
    """The API keys (the database's), when the gateway runs over a database."""
    websockets: WebSocketResponses | None = None
    """WebSocket mode's sessions, set by :func:`build_app` (drained at shutdown)."""
    settler: Settler | None = None
    """Stores, later, the failed ends of runs whose final save failed (every generation's
    loop shares it; closed at shutdown)."""
    retention: RetentionSweeper | None = None
    """Deletes stored responses older than ``[storage] retention``, when it is set, and
    erases deleted conversations and deleted responses' content (on a database: always)."""
    recovered: bool = False
    """Whether :meth:`recover` is done."""
    hop: Hop | None = None
    """This process's ``Via`` entry on what its backends send: a request carrying it is
    refused as a loop (None: none is looked for)."""

    async def recover(self) -> None:
        """Before serving, once: mark failed the responses a dead process of this host
        left in progress, then register this process's lease (and beat). ``stateway
        serve`` calls it before its server starts, so that a database failing these
        writes is reported as any other start-up failure of it is; the app's lifespan
        calls it for an app served otherwise (done already: nothing).

        A database that answers but takes no writes (read-only, full, locked by another
        process: :class:`~stateway.core.errors.StorageNotWritable`) does not stop the
        start: the gateway serves what needs no storing (``store: false``), its
        readiness fails naming why until a write lands, and its lease is registered by
        the first beat the database takes, or before the first stored run's row naming
        this process, whichever comes first (a dead process's responses left here are
        then failed by lease, as another host's are). An error line says so."""
        if self.recovered:
            return
        try:
            await fail_abandoned(self.store, self.owner, encode_event_json, decode_event_json)
            if self.leases is not None:
                await self.leases.start()
        except StorageNotWritable as refused:
            log.error(
                "the database takes no writes: %s; serving only what needs no storing"
                " (store: false), not ready (GET /ready) until a write lands",
                refused,
            )
            if self.leases is not None:
                self.leases.start_unregistered()
        self.recovered = True

    async def end_runs(self) -> int:
        """End every run (and relayed answer) as ``server_shutting_down``; later ones end
        as they start. Returns how many it ended."""
        return await self.runs.end_all(CancelReason.SHUTTING_DOWN)

    async def settle_runs(self) -> None:
        """Return once no run is in flight (background runs included)."""
        await self.runs.settle()


def _configured_store(config: Config) -> SqlResponseStore:
    """A store over the configured database, within its ``[storage]`` bounds."""
    return open_store(
        config.database_url,
        timeout=config.storage.database_timeout,
        max_connections=config.storage.max_connections,
    )


async def open_gateway(compiled: Compiled, flags: Overrides) -> GatewayParts:
    """The gateway as ``stateway serve`` runs it: over the configured database, with its
    server key loaded once (configured, else the database's, generated on first start;
    ``[security]`` is read at start-up only): the key of its sealer and, through a
    sub-key, of each tenant's cache salt."""
    config = compiled.config
    store = _configured_store(config)
    try:  # refused after the database opened (its key, tracing that cannot export): closed
        key = await open_server_key(config, store)
        parts = build_gateway(
            compiled,
            flags,
            store,
            SqlConversationStore(store),
            sealer=AesGcmSealer(key),
            salts=TenantCacheSalts(key),
            leases=SqlOwnerLeases(store),
            usage=SqlUsageLedger(store.reader),
            purger=SqlResponsePurger(store),
            conversation_purger=SqlConversationPurger(store),
            response_eraser=SqlResponseEraser(store),
            usage_backfill=SqlUsageBackfill(store),
        )
    except BaseException:
        await store.aclose()
        raise
    parts.keys = SqlKeyStore(store.engine)
    return parts


async def open_server_key(config: Config, store: SqlResponseStore) -> bytes:
    """The key sealing ``encrypted_content`` (and deriving cache salts). Raises
    :class:`ConfigError` for a stored key that is unusable, ``StorageError`` when the
    database cannot be read."""
    try:
        return await load_sealing_key(config.security.sealing_key, SqlSecrets(store.engine))
    except ValueError as exc:
        raise ConfigError(str(exc)) from None


def build_gateway(
    compiled: Compiled,
    flags: Overrides,
    store: ResponseStore | None = None,
    conversations: ConversationStore | None = None,
    *,
    sealer: Sealer | None = None,
    salts: CacheSalts | None = None,
    leases: OwnerLeases | None = None,
    usage: UsageLedger | None = None,
    purger: ResponsePurger | None = None,
    conversation_purger: ConversationPurger | None = None,
    response_eraser: ResponseEraser | None = None,
    usage_backfill: UsageBackfill | None = None,
) -> GatewayParts:
    """``compiled`` as generation 1, reloaded from ``flags``; over the configured
    database, or over ``store`` (and ``conversations``: none, and no conversation exists;
    ``leases``: none, and no run is judged by its lease; ``usage``: none, and
    ``/v1/usage`` is a 404; ``purger``: none, and no retention applies;
    ``conversation_purger``: none, and deleted conversations are only hidden;
    ``response_eraser``: none, and deleted responses are only hidden;
    ``usage_backfill``: none, and rows stored without usage columns keep being read out of
    their bodies) when given.
    ``sealer`` None: sealing is off; ``salts`` None: no call carries a ``cache_salt``
    (``open_gateway`` always gives both)."""
    config = compiled.config
    if store is None:
        sql_store = _configured_store(config)
        store, conversations = sql_store, SqlConversationStore(sql_store)
        leases = SqlOwnerLeases(sql_store)
        usage = SqlUsageLedger(sql_store.reader)
        purger = SqlResponsePurger(sql_store)
        conversation_purger = SqlConversationPurger(sql_store)
        response_eraser = SqlResponseEraser(sql_store)
        usage_backfill = SqlUsageBackfill(sql_store)
    runs = RunRegistry()
    owner = ProcessIdentity.current()
    telemetry = Observability(PrometheusMetrics(), open_tracing(config.tracing, __version__))
    telemetry.metrics.sample(lambda: len(runs), lambda: compiled.waiting_room.waiting)
    telemetry.metrics.name_models(compiled.router.names())
    served: ResponseStore = TimedStore(store, telemetry.metrics.storage_observed)

    def loop(generation: Compiled) -> Loop:
        return Loop(
            served,
            generation.config.loop.max_rounds,
            owner,
            generation.tools,
            sealer,
            telemetry=telemetry,
            settler=settler,
            lease=keeper,
        )

    results, signals = build_coordination(config.coordination)
    fanout = build_fanout(config.coordination)
    settler = Settler(served, encode_event_json, fanout=fanout)
    limits = build_limits(config)
    keeper = None
    if leases is not None:
        timeout = config.coordination.lease_timeout
        keeper = LeaseKeeper(
            store,
            leases,
            str(owner),
            encode_event_json,
            decode_event_json,
            timeout,
            fanout=fanout,
            runs=runs,
        )
    gateway = Gateway(
        served,
        compiled.router,
        loop(compiled),
        runs,
        conversations=conversations,
        encoder=encode_event_json,
        results=results,
        signals=signals,
        sealer=sealer,
        fanout=fanout,
        limits=limits,
        telemetry=telemetry,
        usage=usage,
        settler=settler,
        salts=salts,
    )

    def publish(generation: Compiled) -> Generation:
        telemetry.metrics.name_models(generation.router.names())
        return gateway.generations.publish(generation.router, loop(generation))

    recompile = partial(compile_generation, flags, compiled)
    reloader = Reloader(compiled, recompile, publish, gateway.generations)
    telemetry.metrics.sample_config(reloader.status)
    gateway.reloads = reloader
    retention = config.storage.retention
    sweeper = None
    tidying = (conversation_purger, response_eraser, usage_backfill) != (None, None, None)
    if (purger is not None and retention is not None) or tidying:
        sweeper = RetentionSweeper(
            purger,
            retention,
            conversations=conversation_purger,
            eraser=response_eraser,
            backfill=usage_backfill,
            deleted=telemetry.metrics.responses_deleted,
            purged=telemetry.metrics.conversations_purged,
            erased=telemetry.metrics.responses_erased,
        )
    return GatewayParts(
        store,
        runs,
        gateway,
        owner,
        config,
        reloader,
        results,
        signals,
        fanout,
        keeper,
        limits,
        telemetry,
        settler=settler,
        retention=sweeper,
        hop=compiled.hop,
    )
