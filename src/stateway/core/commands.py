"""Commands: what a surface asks of the gateway, already translated from the wire.

Each surface decodes its protocol into one of these and calls ``Gateway.execute``. A
conversation's commands are :mod:`stateway.core.conversations.commands`; :data:`Command`
is every one.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Literal

import orjson

from stateway.core.conversations.commands import ConversationCommand
from stateway.core.immutable import immutable
from stateway.core.items import Item
from stateway.core.tools.changes import ToolChange

if TYPE_CHECKING:
    from stateway.core.runs import Run

INTERLEAVED_THINKING = "interleaved-thinking-2025-05-14"
"""The ``anthropic-beta`` feature under which Messages' ``thinking.budget_tokens`` is the
whole turn's budget (thinking between tool calls too), so it may exceed ``max_tokens``."""


@dataclass(slots=True)
class GenerationSettings:
    """Request settings echoed on the response and mapped upstream."""

    temperature: float | None = None
    top_p: float | None = None
    max_output_tokens: int | None = None
    max_output_tokens_per_call: bool = False
    """``max_output_tokens`` bounds each call to the model, not the whole response
    (Messages' ``max_tokens``: Anthropic applies it to every call a request with server
    tools makes, so its usage may exceed it). Otherwise it bounds every round of the
    tool loop together, as Responses' ``max_output_tokens`` does."""
    max_output_tokens_fit_window: bool = False
    """A ``max_output_tokens`` that the model's window cannot hold beside the prompt is
    lowered to what it can, when the upstream refuses it so, and the answer that fills
    the window stops with :data:`~stateway.core.inference.WINDOW_FILLED` (Messages'
    ``max_tokens``, as Anthropic's models since Claude Sonnet 4.5 take it). Otherwise the
    refusal is the client's (Responses and Chat, as hosted OpenAI refuses it)."""
    window_filled_refused: bool = False
    """An answer that filled the model's window before it ended
    (:data:`~stateway.core.inference.WINDOW_FILLED`) fails the response as a context too
    long (``context_length_exceeded``), its cut item not announced, rather than ending it
    ``incomplete`` (Responses: its API has no reason for a full window, and its hosted
    models' windows hold the input and the whole output, so a request whose answer cannot
    fit is refused; a client keeping the cut answer would send it back over the window).
    Otherwise a ``length`` finish is what it is (Chat, as every OpenAI-compatible server
    finishes it; Messages says it with its stop reason)."""
    max_tool_calls: int | None = None
    tools: list[Item] = field(default_factory=list)
    tool_choice: str | dict[str, Any] = "auto"
    parallel_tool_calls: bool = True
    text_format: dict[str, Any] = field(default_factory=lambda: {"type": "text"})
    verbosity: str | None = None
    reasoning_effort: str | None = None
    reasoning_summary: str | None = None
    metadata: dict[str, str] = field(default_factory=dict)
    user: str | None = None
    safety_identifier: str | None = None
    prompt_cache_key: str | None = None
    prompt_cache_retention: str | None = None
    """How long an upstream that caches prompts keeps this one (OpenAI's ``in_memory`` or
    ``24h``; Responses' and Chat's field): sent to OpenAI-shaped upstreams, which take it
    on both wires; for an Anthropic upstream ``24h`` asks its marks for an hour."""
    include: list[str] = field(default_factory=list)
    truncation: str = "disabled"
    service_tier: str | None = None
    image: dict[str, str] | None = None
    """The image options in effect, as Responses' request-level ``image`` has them (the
    Response echoes them; a Responses upstream is sent them):
    ``{"context_compression": "disabled"}`` when the request sent ``image``, as the
    gateway compresses no image context; None when it sent none (nothing to echo). Per
    request: a follow-up by ``previous_response_id`` does not inherit them."""
    top_logprobs: int | None = None
    presence_penalty: float | None = None
    frequency_penalty: float | None = None
    stop_sequences: list[str] = field(default_factory=list)
    """Texts that end the output when generated (Chat's ``stop``, Messages'
    ``stop_sequences``); a Responses upstream has no such field, so the gateway ends its
    text at them itself (:mod:`stateway.backends.stop_sequences`)."""
    top_k: int | None = None
    reasoning_budget: int | None = None
    """Tokens the model may think for (Messages' ``thinking.budget_tokens``); None: a
    backend that needs a budget derives one from ``reasoning_effort``."""
    reasoning_adaptive: bool = False
    """Messages' ``thinking.type: "adaptive"``: the model decides how long to think (at
    ``reasoning_effort``); an Anthropic upstream is asked so, whatever its backend's
    ``thinking`` setting (newer models refuse ``enabled`` thinking)."""
    reasoning_disabled: bool = False
    """Messages' ``thinking.type: "disabled"`` (or ``between_tools``): an Anthropic
    upstream is told ``{"type": "disabled"}``, since newer models think when ``thinking``
    is left out. Chat and Responses upstreams are asked nothing for it (their servers'
    defaults), as before: older vLLM releases and OpenAI models before gpt-5.1 refuse the
    effort ``none``; a client of theirs that wants ``none`` says so itself."""
    reasoning_display: str | None = None
    """Messages' ``thinking.display``: ``omitted`` shows thinking blocks without their
    text, which travels sealed in their signature; sent on to an Anthropic upstream.
    ``hidden``: the client did not enable thinking, so none is shown (a model that reasons
    anyway is not told; its reasoning is not the client's)."""
    cache_control: dict[str, Any] | None = None
    """Messages' top-level ``cache_control`` (automatic prompt caching): sent on to an
    Anthropic upstream; other upstreams cache prefixes on their own."""
    client_cache_marks: bool = False
    """The client marks what is cached itself, Anthropic's way (a Messages client:
    ``cache_control`` where it wants a breakpoint, none meaning no caching): an Anthropic
    upstream gets no mark the gateway would add for OpenAI's implicit caching
    (:mod:`stateway.backends.anthropic_caching`)."""
    vendor_fields: dict[str, Any] = field(default_factory=dict)
    """A Chat Completions client's fields the gateway does not model: a server's own
    parameters (vLLM's ``chat_template_kwargs``, ``min_p``, ``repetition_penalty``), sent
    as they came to a Chat upstream (where the forwarded fast path would have carried
    them), unless the gateway sets that field itself; other upstream APIs do not get them."""
    anthropic_beta: list[str] = field(default_factory=list)
    """A Messages client's ``anthropic-beta`` features: sent on to an Anthropic upstream
    (after its backend's own), which they are meant for; other upstreams never see them."""
    safeguards: list[Any] | None = None
    """Messages' ``safeguards`` (Claude Code's auto mode): sent on to an Anthropic upstream
    that runs them (Anthropic's API), whose ``safeguard_results`` come back; none else."""
    continue_final_message: bool = False
    """Messages' prefill: a conversation that ends with an assistant message is continued
    from where that message ends, the output holding only what follows. An Anthropic
    upstream does so on its own; a Chat upstream is asked with vLLM's
    ``continue_final_message`` (llama.cpp continues such a message unasked); a Responses
    upstream answers in a new message."""
    seed: int | None = None
    """Chat's ``seed``: sampling made repeatable, where the upstream can (Chat upstreams)."""
    context_management: list[dict[str, Any]] = field(default_factory=list)
    """Normalized ``context_management`` entries (``{"type": "compaction",
    "compact_threshold": N | None}``, and Messages' ``"pause_after_compaction": bool``):
    see :mod:`stateway.core.compaction`."""
    context_edits: Sequence[dict[str, Any]] = ()
    """Messages' clearing edits of ``context_management`` (``clear_thinking_20251015``,
    ``clear_tool_uses_20250919``), in their order, checked and with every field given
    (Anthropic's defaults for those the client left out): see
    :mod:`stateway.core.compaction.clearing`."""
    prompt_cache_options: dict[str, Any] | None = None
    """``prompt_cache_options`` (``mode``, ``ttl``) of Chat, or of Responses (without its
    ``prewarm``, the gateway's own, and ``comparison_response_id``): sent where
    ``prompt_cache_retention`` goes; an Anthropic upstream gets them as its marks
    (:mod:`stateway.backends.anthropic_caching`)."""
    summary_prompt: str | None = None
    """The instruction a compaction within the response asks for its summary with, in
    place of :data:`~stateway.core.compaction.prompt.SUMMARY_PROMPT` (Messages'
    compaction requests: their ``instructions``, else the standalone prompt)."""
    summary_shown: bool = False
    """A compaction item the response outputs carries its summary in the clear as
    ``content`` beside its seal (Messages: a ``compaction`` block's ``content`` and
    ``signature``); otherwise it is sealed only, as Responses shows it."""


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
    | WatchResponse
    | ForwardChat
    | ReloadConfig
    | GetConfigStatus
    | CompactResponse
    | GetUsage
)
