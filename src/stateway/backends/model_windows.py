"""What a model server advertises of its models' context windows (``[[backends]]
discover_context_window``; :mod:`stateway.core.routing.windows` asks and keeps it).

- vLLM and SGLang list each model in ``GET /v1/models`` with ``max_model_len`` (the
  server's ``--max-model-len`` or ``--context-length``: prompt and output together); a
  LoRA adapter is listed without one (null), naming its base model as ``parent``, whose
  window it takes.
- Anthropic lists each model with ``max_input_tokens`` (as this gateway does in its shape).
- llama.cpp's listing has, in ``meta``, ``n_ctx_train``: the window the model was trained
  for, not the one it serves. That is one slot's context, ``--ctx-size`` divided among the
  ``--parallel`` slots as the server divides it: what one request may fill. Current builds
  list it too, as ``meta.n_ctx``; a server of one model serves it whatever a request
  names, so its window is that of any model name, and the router mode's listing of several
  (each its own server) has each loaded model's. Older builds tell it only in
  ``GET /props`` at the server's root (``default_generation_settings.n_ctx``, beside
  ``total_slots``), asked of a llama.cpp listing without it.
  llama.cpp reads a named ``tool_choice`` as ``auto``: a listing tells the servers that
  do not (:func:`forces_named_choice`, :mod:`stateway.backends.named_choice`), and
  llama.cpp's own (:func:`serves_llama_cpp`), whose Messages endpoint keeps only a tool
  choice's kind (:mod:`stateway.backends.anthropic_tool_choice`); hosted OpenAI's tells
  a server taking custom tools as sent (:func:`takes_custom_tools`; the others take
  functions alone).
- OpenAI's listing, and other servers', say nothing: no window. Ollama's and LM Studio's
  own APIs are not asked (Ollama's ``/api/show`` and LM Studio's ``/api/v0/models`` tell
  the most a model takes, not the context it is loaded with: Ollama's ``num_ctx``): such
  a backend declares its ``context_window``.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, Final

from stateway.backends.upstream_http import UpstreamClient
from stateway.core.backend import AdvertisedWindows

_FIELDS = ("max_model_len", "max_input_tokens")
"""An entry's window, by the first of these it has."""


async def listed_windows(client: UpstreamClient, listing: Sequence[object]) -> AdvertisedWindows:
    """The windows ``listing`` (the ``data`` of the server's ``GET /models``) advertises,
    or, for llama.cpp's listing, its ``/props``. Raises what ``client`` raises."""
    models = _models(listing)
    if models or not any(_llama_cpp(entry) for entry in listing):
        return AdvertisedWindows(models)
    slots = _slot_windows(listing)
    if slots:
        if len(listing) == 1:  # one model, served whatever a request names
            return AdvertisedWindows(server=next(iter(slots.values())))
        return AdvertisedWindows(slots)
    props = await client.get_json("/props", root=True)
    settings = props.get("default_generation_settings") if isinstance(props, dict) else None
    return AdvertisedWindows(server=_window(settings, "n_ctx"))


async def server_windows(client: UpstreamClient) -> AdvertisedWindows:
    """The windows the server behind ``client`` advertises (one page of its listing)."""
    _, body = await client.model_page()
    return await listed_windows(client, body["data"])


def _models(listing: Sequence[object]) -> dict[str, int]:
    entries = [e for e in listing if isinstance(e, dict) and isinstance(e.get("id"), str)]
    windows: dict[str, int] = {}
    for entry in entries:
        window = next((w for f in _FIELDS if (w := _window(entry, f)) is not None), None)
        if window is not None:
            windows[entry["id"]] = window
    for entry in entries:  # adapters, once their base models are known
        parent = entry.get("parent")
        if entry["id"] not in windows and isinstance(parent, str) and parent in windows:
            windows[entry["id"]] = windows[parent]
    return windows


def _slot_windows(listing: Sequence[object]) -> dict[str, int]:
    """One slot's window of each model a llama.cpp listing tells it of (``meta.n_ctx``)."""
    windows: dict[str, int] = {}
    for entry in listing:
        if _llama_cpp(entry) and isinstance(entry, dict) and isinstance(entry.get("id"), str):
            window = _window(entry["meta"], "n_ctx")
            if window is not None:
                windows[entry["id"]] = window
    return windows


OPENAI_OWNERS: Final = frozenset({"system", "openai", "openai-internal"})
"""The ``owned_by`` of hosted OpenAI's own models in its listing."""
NAMED_CHOICE_OWNERS: Final = frozenset({"vllm", "sglang"}) | OPENAI_OWNERS
"""The ``owned_by`` of a listing's entries that tell a server forcing a named
``tool_choice`` as named: vLLM's, SGLang's, hosted OpenAI's (its own models')."""


def forces_named_choice(listing: Sequence[object]) -> bool:
    """Whether ``listing`` (a ``GET /models``'s ``data``) is that of a server known to force
    a named ``tool_choice`` sent as named (:mod:`stateway.backends.named_choice`): vLLM's
    or SGLang's (an entry with ``max_model_len``, an adapter's null included, or owned by
    either), hosted OpenAI's. Not llama.cpp's ``llama-server``, which reads one as
    ``auto``, nor a server unknown: a proxy in front of one (llama-swap lists its models
    as its own) may be either."""
    return any(
        isinstance(entry, dict)
        and ("max_model_len" in entry or entry.get("owned_by") in NAMED_CHOICE_OWNERS)
        for entry in listing
    )


def takes_custom_tools(listing: Sequence[object]) -> bool:
    """Whether ``listing`` (a ``GET /models``'s ``data``) is hosted OpenAI's, whose Chat
    Completions takes a ``custom`` tool, and a ``custom`` or ``allowed_tools``
    ``tool_choice``: an entry owned by it. vLLM, SGLang and llama.cpp take functions
    alone (a custom tool is a 400), and a server unknown may be any of them."""
    return any(isinstance(e, dict) and e.get("owned_by") in OPENAI_OWNERS for e in listing)


def serves_llama_cpp(listing: Sequence[object]) -> bool:
    """Whether ``listing`` (a ``GET /models``'s ``data``) is that of llama.cpp's
    ``llama-server``: an entry ``owned_by`` it (its router mode lists a model not loaded
    without ``meta``) or with its ``meta.n_ctx_train``. Not a proxy in front of one, which
    lists its models as its own (llama-swap)."""
    return any(
        _llama_cpp(entry) or (isinstance(entry, dict) and entry.get("owned_by") == "llamacpp")
        for entry in listing
    )


def _llama_cpp(entry: object) -> bool:
    meta = entry.get("meta") if isinstance(entry, dict) else None
    return isinstance(meta, dict) and "n_ctx_train" in meta


def _window(fields: object, name: str) -> int | None:
    """``fields[name]`` when it is a window: a whole number of tokens, 1 or more."""
    value: Any = fields.get(name) if isinstance(fields, Mapping) else None
    if isinstance(value, int) and not isinstance(value, bool) and value >= 1:
        return value
    return None
