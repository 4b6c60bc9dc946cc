"""One round of inference as the core sees it: a request to a backend and the deltas back.

Backends translate these to and from their upstream wire. Deltas are deliberately
small: one is built per streamed upstream chunk.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Final

from stateway.core.deadline import FirstOutput
from stateway.core.generation_settings import GenerationSettings
from stateway.core.immutable import immutable
from stateway.core.items import Item
from stateway.core.tools.model_names import GatewayNames
from stateway.core.usage import Usage


@dataclass(slots=True)
class InferenceRequest:
    model: str
    """The model name as the upstream knows it."""
    instructions: str | None
    items: list[Item]
    """The whole context, oldest first: earlier turns, then this request's input."""
    settings: GenerationSettings
    stream: bool
    """Whether the client streams; a backend may answer non-streamed requests in one piece."""
    tools: list[Item] = field(default_factory=list)
    """The function tools the model is offered this round (the catalog's model view)."""
    tool_choice: str | dict[str, Any] = "auto"
    """This round's choice, in model-visible names (``{"type": "function", "name": ...}``)."""
    native_tools: list[Item] = field(default_factory=list)
    """Tools sent as declared, to a backend that ``carries_unknown_types`` only."""
    names: GatewayNames = field(default_factory=GatewayNames)
    """The function names of the gateway's tools in this round: in ``tools`` (those
    offered) and for their calls among ``items`` (``web_search_call``, ``mcp_call``,
    ``tool_search_call``): each its usual name unless another tool has it
    (:meth:`~stateway.core.tools.catalog.Catalog.names`)."""
    grammar: Item | None = None
    """The grammar ``format`` of the custom tool ``tool_choice`` forces, if it has one: a
    backend with guided decoding constrains the tool's input with it."""
    first_output: FirstOutput | None = None
    """The attempt's wait for its first output (set by the round for each attempt): a
    backend with ``first_token_timeout`` bounds it."""
    cache_salt: str | None = None
    """The tenant's ``cache_salt`` (:class:`~stateway.core.ports.CacheSalts`): a backend
    with ``cache_salt = "tenant"`` sends it, so the call shares no prefix cache with
    another tenant's. None: the gateway has none to give."""
    answered: Answered | None = None
    """Set by the round for an attempt a trace records (only then): the backend notes in
    it what its upstream said of the answer besides its deltas."""


@dataclass(slots=True)
class Answered:
    """What an upstream says of an answer besides its deltas: its id and the model that
    wrote it. Asked for only while a trace records the attempt; a backend notes them once
    per answer, where its wire has them."""

    response_id: str | None = None
    model: str | None = None

    def note(self, response_id: object, model: object) -> None:
        """Keep the id and model an upstream sent, where they are strings."""
        if isinstance(response_id, str) and response_id:
            self.response_id = response_id
        if isinstance(model, str) and model:
            self.model = model


@immutable
class TextDelta:
    text: str
    logprobs: list[Item] | None = None
    """The text's tokens with their log probabilities, when the request included
    ``message.output_text.logprobs`` and the upstream gave them (:mod:`..logprobs`)."""


@immutable
class RefusalDelta:
    """The model declining to answer (Chat's ``refusal``, a Responses ``refusal`` part):
    a ``refusal`` part of the assistant message, not its text."""

    text: str


@immutable
class MessageStart:
    """An upstream that marks its messages (Responses) starts one: the text that follows
    is a new message, labelled with the upstream's ``phase`` when it gave one."""

    phase: str | None = None


@immutable
class Citation:
    """Where the text being written comes from, as an Anthropic upstream cites a document
    that enabled citations (a ``citations`` entry of its text block: ``char_location``,
    ``page_location``, ``content_block_location``, ...): kept, as it came, on the message's
    ``output_text`` part."""

    citation: Item


@immutable
class Annotation:
    """An annotation of the text being written, as a Responses upstream gives one (a
    hosted tool's ``url_citation``, ``file_citation``, ``container_file_citation``,
    ``file_path``), its text indices into the message's text: kept on the message's
    ``output_text`` part, after any an earlier delta gave."""

    annotation: Item


@immutable
class ReasoningDelta:
    text: str


@immutable
class SummaryBreak:
    """The reasoning's summary goes on in another part (a Responses upstream's next
    ``summary_index``): the reasoning's one text gets ``text`` between the two, and its
    item's summary, when one is asked for, keeps each part apart, as the upstream gave
    them."""

    text: str


@immutable
class ReasoningSignature:
    """The opaque seal an upstream put on the reasoning just streamed (an Anthropic thinking
    block's ``signature``): kept as the reasoning item's ``encrypted_content``, which ends
    that item (see :mod:`stateway.core.reasoning`)."""

    signature: str


@immutable
class ToolCallDelta:
    index: int
    """Which call of this round the fragment belongs to."""
    call_id: str | None
    name: str | None
    arguments: str


@immutable
class UsageReport:
    usage: Usage


PAUSED: Final = "paused"
"""The finish reason of an upstream that paused a long turn of its own tools (Anthropic's
``pause_turn``): the turn is not over, and goes on when its output is sent back."""


WINDOW_FILLED: Final = "model_context_window_exceeded"
"""The stop reason of an answer that filled the model's window: its output tokens lowered
to what the window left beside the prompt, or its prompt and output reaching the window
(:attr:`~stateway.core.generation_settings.GenerationSettings.max_output_tokens_fit_window`):
Anthropic's word for it, which a Messages client is answered."""


@immutable
class Finish:
    reason: str
    """``stop``, ``length``, ``tool_calls``, ``content_filter`` or :data:`PAUSED`."""
    stop_sequence: str | None = None
    """The client's stop sequence that ended the output, when the upstream says which."""
    stop_reason: str | None = None
    """The upstream's own word for it where ``reason`` says less, as it came: an Anthropic
    upstream's ``model_context_window_exceeded``, ``pause_turn`` or ``refusal`` (a
    Messages client is answered it)."""
    stop_details: dict[str, Any] | None = None
    """What it said of it (Anthropic's ``stop_details``: a refusal's category), as it
    came."""
    safeguard_results: list[Any] | None = None
    """An Anthropic upstream's ``safeguard_results`` (its checks of the answer's tool
    calls, which Claude Code's auto mode asked for), as they came."""


@immutable
class OutputItem:
    """A whole output item of a type the gateway does not model (``shell_call``,
    ``image_generation_call``, ...), from an upstream that speaks Responses natively:
    passed on to the client as it came."""

    item: Item


@immutable
class CallBegun:
    """A call item an upstream that speaks Responses natively began, whose input streams
    before its whole :class:`OutputItem` ends it: a ``custom_tool_call`` (its
    ``output_item.added``), its input to come in :class:`CallInput` pieces."""

    item: Item


@immutable
class CallInput:
    """A piece of the input of the call an upstream began (:class:`CallBegun`), as it
    sent it (a ``response.custom_tool_call_input.delta``)."""

    text: str


Delta = (
    TextDelta
    | RefusalDelta
    | MessageStart
    | Citation
    | Annotation
    | ReasoningDelta
    | SummaryBreak
    | ReasoningSignature
    | ToolCallDelta
    | UsageReport
    | Finish
    | OutputItem
    | CallBegun
    | CallInput
)
