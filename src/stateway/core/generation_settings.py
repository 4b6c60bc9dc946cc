"""Generation settings: what a create asks of the model besides its input (sampling,
output bounds, tools and their choice, reasoning, caching, a vendor's own fields), decoded
from any of the three wires into one shape, echoed on the response and mapped to each
upstream API by its backend. :class:`~stateway.core.commands.CreateResponse` carries them.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from stateway.core.items import Item

INTERLEAVED_THINKING = "interleaved-thinking-2025-05-14"
"""The ``anthropic-beta`` feature under which Messages' ``thinking.budget_tokens`` is the
whole turn's budget (thinking between tool calls too), so it may exceed ``max_tokens``."""
SUMMARIZED = "summarized"
"""The ``reasoning_display`` that shows thinking's text, summarized (Anthropic's
``thinking.display``)."""


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
    output_effort: str | None = None
    """Messages' ``output_config.effort`` (a per-message change included; a level
    Anthropic does not know as its default), whatever the thinking: Anthropic applies it
    to the whole answer (text and tool calls as well as thinking), thinking or not, so an
    Anthropic upstream is sent it as asked. Other upstreams get it only as adaptive
    thinking's ``reasoning_effort``."""
    reasoning_disabled: bool = False
    """Messages' ``thinking.type: "disabled"`` (or ``between_tools``): an Anthropic
    upstream is told ``{"type": "disabled"}``, since newer models think when ``thinking``
    is left out. Chat and Responses upstreams are asked nothing for it (their servers'
    defaults), as before: older vLLM releases and OpenAI models before gpt-5.1 refuse the
    effort ``none``; a client of theirs that wants ``none`` says so itself."""
    reasoning_display: str | None = None
    """Messages' ``thinking.display``: ``omitted`` shows thinking blocks without their
    text, which travels sealed in their signature; sent on to an Anthropic upstream.
    ``summarized`` too for a Responses client that asked for a summary (``SUMMARIZED``):
    Claude models from Opus 4.7 on omit the text unless asked for it so.
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
