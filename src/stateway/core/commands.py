"""Commands: what a surface asks of the gateway, already translated from the wire.

Each surface decodes its protocol into one of these and calls ``Gateway.execute``. A
conversation's commands are :mod:`stateway.core.conversations.commands`; :data:`Command`
is every one.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Literal

import orjson

from stateway.core.conversations.commands import ConversationCommand
from stateway.core.generation_settings import GenerationSettings
from stateway.core.immutable import immutable
from stateway.core.items import Item
from stateway.core.tools.changes import ToolChange

if TYPE_CHECKING:
    from stateway.core.events import Notice
    from stateway.core.runs import Run


@dataclass(slots=True)
class ThreadTurn:
    """A turn of a Messages thread (:mod:`stateway.core.threads`): server-held state that
    a later request continues by naming this turn's response."""

    previous_response_id: str | None = None
    """The response this turn continues (None: the thread's first turn)."""
    system: list[Item] | None = None
    """The system message items that lead the thread's context, held with each turn's
    response rather than appended to its conversation, so that a turn may replace them;
    None: the previous turn's (set so by :mod:`stateway.core.threads`)."""
    tools_given: bool = True
    """False: the request declared no tools, and the thread's are offered."""
    tool_changes: list[ToolChange] = field(default_factory=list)
    """The new turn's tool changes mid-conversation, when it declared no tools: applied to
    the thread's (:func:`stateway.core.tools.changes.tools_in_effect`) once they are known;
    a turn that declares tools has them applied to its own as it is decoded."""
    resumes: bool = False
    """True: a continue sending no messages, which goes on from its previous turn, handed
    back unfinished (``pause_turn``, ``compaction``); refused after one that ended
    otherwise."""


@dataclass(slots=True)
class CreateResponse:
    model: str
    input: list[Item]
    instructions: str | None = None
    previous_response_id: str | None = None
    conversation_id: str | None = None
    """A turn of this conversation: its items are the context; the turn is appended."""
    store: bool = True
    stream: bool = False
    settings: GenerationSettings = field(default_factory=GenerationSettings)
    background: bool = False
    """Run detached from the request, with a persisted event log (requires ``store``)."""
    hidden_rounds: bool = False
    """The client's API can neither declare nor show the gateway's own tools (Chat
    Completions, Messages): the route's configured ``gateway_tools`` are offered, and run
    in rounds the client does not see (:mod:`stateway.core.hidden`)."""
    replayable: bool = False
    """A streamed create sent with a command id: its events are journaled like a
    background run's (and stored with it when ``store``), so that a retry can stream the
    same response from its log, from this process or another (:mod:`.exactly_once`)."""
    journaled: bool = False
    """A streamed create whose events are journaled for its watchers (resumable from any
    sequence number while it runs) but whose log is stored only if a watcher asks, by
    :meth:`RunJournal.keep() <stateway.core.journal.RunJournal.keep>`: WebSocket mode,
    whose connection keeps the logs it still streams when it closes (4429, the client
    gone), so the client can resume after the run ended. ``replayable`` wins."""
    generate: bool = True
    """False: a prewarm. The context is rehydrated and checked, and the response ends
    ``completed`` with no output, without asking any model (WebSocket mode's
    ``"generate": false``, or ``prompt_cache_options.prewarm``)."""
    prior: list[Item] | None = None
    """The items before ``input``, already resolved by the surface (a WebSocket
    connection's checkpoint of ``previous_response_id``, kept even when not stored):
    used instead of reading the chain from the store."""
    prior_stored: bool = True
    """False: ``prior`` is not in the store (the checkpoint of a response that was not
    stored). A stored run then stores it with its own input, so that its stored chain
    holds the whole context it ran on (its ``previous_response_id`` names nothing stored)."""
    thread: ThreadTurn | None = None
    """A turn of a Messages thread: its conversation found (or made) and its system and
    tools inherited by :mod:`stateway.core.threads` before it is admitted."""
    session: str | None = None
    """The client's session, as a request header names it (Claude Code's
    ``X-Claude-Code-Session-Id``): one more name the request's chain is known by for cache
    affinity (:func:`~stateway.core.routing.affinity.chain_names`), for a client that sends
    its whole conversation every turn. Not stored."""
    attach: Callable[[Run], None] | None = None
    """Drive the run in the caller's own task instead of a task of its own: ``execute``
    returns once the run has ended, and ``attach`` is called with the run as it starts
    (a surface routes its client leaving to :meth:`Run.cancel` there). For a
    non-streamed answer whose run need not outlive its request; a background run is
    detached whatever this says."""


@immutable
class ForwardChat:
    """A Chat Completions request. When its route's backend speaks Chat Completions and
    offers no gateway tools, and the request asks for none, ``body`` goes upstream
    untouched (the model name replaced when the route renames it) and the upstream's
    answer comes back as bytes; otherwise it runs as the :class:`CreateResponse` that
    ``translate`` decodes."""

    model: str
    body: bytes
    fields: dict[str, Any]
    """``body`` parsed: a JSON object."""
    translate: Callable[[], Awaitable[CreateResponse]]
    """Validate the whole request and decode it (raises ``InvalidRequest``)."""
    needs_gateway: bool = False
    """It asks for what only the gateway's own run gives (``web_search_options``: the
    gateway's web search), so it is translated even where it could be forwarded."""

    @property
    def reports_usage(self) -> bool:
        """Whether the upstream's answer, relayed as it is, says what it used: a stream
        only when its client asked (``stream_options.include_usage``)."""
        if self.fields.get("stream") is not True:
            return True
        options = self.fields.get("stream_options")
        return isinstance(options, dict) and options.get("include_usage") is True

    def body_for(self, upstream_model: str) -> bytes:
        """The body to forward to an upstream that knows the model as ``upstream_model``."""
        if upstream_model == self.model:
            return self.body
        return orjson.dumps({**self.fields, "model": upstream_model})

    def salted_body_for(self, upstream_model: str, cache_salt: str) -> bytes:
        """:meth:`body_for`, carrying ``cache_salt`` (its tenant's, for an upstream whose
        prefix cache is kept per tenant): spliced in as the object's last member, the
        client's bytes otherwise as they came. A body that names ``cache_salt`` itself
        (however spelt: the parsed fields tell) is encoded again with the gateway's value
        in its place, so no parser, whichever of a repeated name it keeps, takes the
        client's; so is one whose model is renamed (once, both changes together)."""
        if "cache_salt" in self.fields or upstream_model != self.model:
            return orjson.dumps({**self.fields, "model": upstream_model, "cache_salt": cache_salt})
        body = self.body
        end = body.rindex(b"}")  # only blanks follow the object's end
        member = b'"cache_salt":' + orjson.dumps(cache_salt)
        return b"".join((body[:end], b"," if self.fields else b"", member, body[end:]))


@dataclass(slots=True, frozen=True)
class CountTokens:
    """How many input tokens ``request`` would use upstream, without running it."""

    request: CreateResponse


@dataclass(slots=True, frozen=True)
class GetResponse:
    response_id: str
    include: tuple[str, ...] | None = None
    """The ``include`` the output is shown with (:mod:`.included`); None: as stored."""


@dataclass(slots=True, frozen=True)
class DeleteResponse:
    response_id: str


@dataclass(slots=True, frozen=True)
class CancelResponse:
    """Cancel a background response that is still running."""

    response_id: str


@dataclass(slots=True, frozen=True)
class InterruptResponse:
    """Stop a response this process runs for the tenant, at once (a WebSocket
    ``response.interrupt``): it ends ``incomplete`` (``interrupted``) with the items it had
    completed. One that has ended, or runs elsewhere or for another tenant, is left as it
    is (nothing is answered)."""

    response_id: str


@dataclass(slots=True, frozen=True)
class SteerResponse:
    """Tell a response this process runs for the tenant of a steer (a WebSocket
    ``response.steer``, whose input its connection keeps): ``notice`` logged in its stream,
    between its own events (:meth:`Run.note <stateway.core.runs.Run.note>`), and, with
    ``stop`` (input was queued for it), the run stopped at its next safe boundary
    (:attr:`Run.steered <stateway.core.runs.Run.steered>`) for a successor to take it."""

    response_id: str
    notice: Notice
    stop: bool = False


@dataclass(slots=True, frozen=True)
class WatchResponse:
    """Stream a background response's event log: the events after ``starting_after``
    (all of them when None), then its live ones until the terminal event."""

    response_id: str
    starting_after: int | None = None
    replay: bool = False
    """A retried streamed create: its log is streamed whether or not it is a background
    response (it was journaled because it carried a command id)."""
    refuse_at_end: bool = False
    """A watch from the last event of a response that has ended is refused rather than
    given nothing (a WebSocket ``response.resume``: a socket has no end of stream to tell
    its client that nothing follows; over HTTP the stream just ends)."""


@dataclass(slots=True, frozen=True)
class ListInputItems:
    response_id: str
    after: str | None = None
    limit: int = 20
    order: Literal["asc", "desc"] = "desc"
    include: tuple[str, ...] | None = None
    """The ``include`` the items are shown with (:mod:`.included`); None: as stored."""


@dataclass(slots=True, frozen=True)
class ListModels:
    model: str | None = None
    """List this one model only (``GET /v1/models/{id}``): a 404 unless it is listed, or
    a configured route (a name, an alias, a default route that is no catch-all) serves it."""


@dataclass(slots=True, frozen=True)
class CheckReadiness:
    pass


@dataclass(slots=True, frozen=True)
class ReloadConfig:
    """Compile the configuration into a new generation and serve new admissions from it
    (:mod:`stateway.core.generations`); an admin command."""


@dataclass(slots=True, frozen=True)
class GetConfigStatus:
    """The current config generation and how the last reload went; an admin command."""


@dataclass(slots=True, frozen=True)
class GetUsage:
    """The usage of one tenant, or of every tenant (``tenant_id`` None: an admin's
    question; the surface decides who may ask it), between two times."""

    tenant_id: str | None
    start_time: float | None = None
    """Unix seconds: responses created at or after it (None: from the first)."""
    end_time: float | None = None
    """Unix seconds: responses created before it (None: up to now)."""


@dataclass(slots=True)
class CompactResponse:
    """``POST /v1/responses/compact``: summarize a context into one sealed ``compaction``
    item (see :mod:`stateway.core.compaction`)."""

    model: str
    input: list[Item]
    instructions: str | None = None
    previous_response_id: str | None = None
    settings: GenerationSettings = field(default_factory=GenerationSettings)
    """The summary call's caching and service tier (the rest is the gateway's own ask)."""


Command = (
    CreateResponse
    | GetResponse
    | DeleteResponse
    | ListInputItems
    | ListModels
    | CheckReadiness
    | ConversationCommand
    | CountTokens
    | CancelResponse
    | InterruptResponse
    | SteerResponse
    | WatchResponse
    | ForwardChat
    | ReloadConfig
    | GetConfigStatus
    | CompactResponse
    | GetUsage
)
