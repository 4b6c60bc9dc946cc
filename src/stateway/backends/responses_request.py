"""The stateless Responses request body for an inference request (:func:`to_upstream`), as
the Responses backend (:mod:`stateway.backends.openai_responses`) sends it and counts it.

Canonical items are already Responses items, so they go as they are, ids included (a
stateless upstream does not look them up), with ``store: false``: the whole context every
round. What only a Messages client marks (a tool result's ``is_error``, ``cache_control``,
a document's ``context``, ``citations`` and ``source``, a text's ``citations`` and
``search_result``, an image's ``in_document``), and a Chat client's message ``name``, are
left out: this wire has no field for them. Tools of types the gateway does not model, and
the ``shell`` and ``apply_patch`` tools and their items, are sent untouched.

An item of a type the gateway does not model goes without the ``item_`` id the gateway
gave it (as a page cursor): hosted OpenAI holds an input item's id to its type's prefix,
which the gateway does not know for such a type.

Reasoning's ``encrypted_content`` is always asked for (``include``). A reasoning item
sealed by a Responses upstream is sent back as that upstream gave it (its summary and
blob, without the text read from it); another upstream's seal (an Anthropic signature) is
not sent, nor a reasoning item left with nothing but its id.
"""

from __future__ import annotations

from typing import Any

from stateway.core import logprobs
from stateway.core.inference import InferenceRequest
from stateway.core.items import ID_IS_REFERENCE, ID_PREFIXES, UNMODELLED_PREFIX, Item
from stateway.core.reasoning import SEALED_BY_RESPONSES, responses_seal
from stateway.core.tools import client_hosted
from stateway.core.tools.history import model_items

_ENCRYPTED = "reasoning.encrypted_content"
_UNMODELLED_ID = UNMODELLED_PREFIX + "_"
_IDS_SENT = frozenset(ID_PREFIXES) | ID_IS_REFERENCE
"""The types whose ids always go: modelled ones (of their own prefixes), and a reference
id (a ``local_shell_call_output``'s names its call)."""


def to_upstream(request: InferenceRequest, maker: str = SEALED_BY_RESPONSES) -> dict[str, Any]:
    """The request's body; its reasoning carries the blobs behind ``maker`` only (its
    backend's: :func:`~stateway.core.reasoning.responses_maker`)."""
    settings = request.settings
    body: dict[str, Any] = {
        "model": request.model,
        "input": [
            sent
            for item in model_items(request.items, client_hosted.ITEM_TYPES, request.names)
            if not _bare(sent := _item(item, maker))
        ],
        "store": False,
        "stream": request.stream,
    }
    if request.instructions:
        body["instructions"] = request.instructions
    if request.tools or request.native_tools:
        body["tools"] = [*map(_without_cache, request.tools), *request.native_tools]
        body["tool_choice"] = request.tool_choice
        body["parallel_tool_calls"] = settings.parallel_tool_calls
    reasoning = {
        k: v
        for k, v in (("effort", settings.reasoning_effort), ("summary", settings.reasoning_summary))
        if v is not None
    }
    text: dict[str, Any] = {}
    if settings.text_format.get("type", "text") != "text":
        text["format"] = settings.text_format
    if settings.verbosity is not None:
        text["verbosity"] = settings.verbosity
    optional = {
        "temperature": settings.temperature,
        "top_p": settings.top_p,
        "max_output_tokens": settings.max_output_tokens,
        "user": settings.user,
        "safety_identifier": settings.safety_identifier,
        "prompt_cache_key": settings.prompt_cache_key,
        "prompt_cache_retention": settings.prompt_cache_retention,
        "prompt_cache_options": settings.prompt_cache_options,
        "metadata": settings.metadata or None,
        "service_tier": settings.service_tier,
        "image": settings.image,
        "reasoning": reasoning or None,
        "text": text or None,
    }
    body.update((k, v) for k, v in optional.items() if v is not None)
    body["include"] = [_ENCRYPTED]
    if logprobs.INCLUDE in settings.include:  # logprobs.wanted, inline: once per round
        body["include"].append(logprobs.INCLUDE)
        if settings.top_logprobs:
            body["top_logprobs"] = settings.top_logprobs
    return body


def _item(item: Item, maker: str) -> Item:
    """Items go as they are, ids included (a stateless upstream does not look them up).
    An assistant message is an output message on this wire, which needs a ``status``.
    What a Messages client marks that this wire has no field for (a tool result's
    ``is_error``, a part's ``cache_control``, a document's ``context``, ``citations`` and
    ``source``, a text's ``citations`` and ``search_result``, an image's ``in_document``),
    and a Chat client's message ``name``, are left out. A reasoning item carries only its
    Responses upstream's seal, if that upstream's. An item of a type the gateway does not
    model goes without the id the gateway gave it."""
    kind = item.get("type")
    if kind == "reasoning" and "encrypted_content" in item:
        return _reasoning(item, maker)
    if kind not in _IDS_SENT and str(item.get("id")).startswith(_UNMODELLED_ID):
        item = {k: v for k, v in item.items() if k != "id"}
    if "is_error" in item or "cache_control" in item:
        item = {k: v for k, v in item.items() if k not in _MESSAGES_ONLY}
    if "name" in item and kind == "message":
        item = {k: v for k, v in item.items() if k != "name"}
    for key in ("content", "output"):
        parts = item.get(key)
        if isinstance(parts, list) and any(map(_messages_only, parts)):
            item = {**item, key: [_part(part) for part in parts]}
    if kind == "message" and item.get("role") == "assistant" and "status" not in item:
        return {**item, "status": "completed"}
    return item


_MESSAGES_ONLY = frozenset({"is_error", "cache_control"})
_MESSAGES_ONLY_PARTS = frozenset(
    {"cache_control", "context", "citations", "source", "search_result", "in_document"}
)


def _reasoning(item: Item, maker: str) -> Item:
    """A reasoning item sealed by this Responses upstream as it gave it (its summary and
    blob: the text was read from the summary); without another's seal (another upstream's,
    or another server's or account's blob, which it would refuse)."""
    blob = responses_seal(item, maker)
    if blob is None:
        return {k: v for k, v in item.items() if k != "encrypted_content"}
    return {**item, "content": [], "encrypted_content": blob}


def _bare(item: Item) -> bool:
    """Whether ``item`` is reasoning with nothing left for this upstream (another's seal
    and no text: a foreign ``redacted_thinking``): not sent, a bare reasoning item being
    an id hosted OpenAI looks up, and refuses with ``store: false``."""
    if item.get("type") != "reasoning" or "encrypted_content" in item:
        return False
    parts = [*(item.get("summary") or ()), *(item.get("content") or ())]
    return not any(isinstance(part, dict) and part.get("text") for part in parts)


def _messages_only(part: Any) -> bool:
    return isinstance(part, dict) and not _MESSAGES_ONLY_PARTS.isdisjoint(part)


def _part(part: Any) -> Any:
    if _messages_only(part):
        return {k: v for k, v in part.items() if k not in _MESSAGES_ONLY_PARTS}
    return part


def _without_cache(part: Any) -> Any:
    if isinstance(part, dict) and "cache_control" in part:
        return {k: v for k, v in part.items() if k != "cache_control"}
    return part
