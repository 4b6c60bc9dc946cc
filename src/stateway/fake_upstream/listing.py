"""The fake's model listing (``GET /v1/models``, in OpenAI's shape or, to a request with
``anthropic-version``, Anthropic's) and, as llama.cpp, ``GET /props``: what a model server
tells of its models, their context window included when one is set, in one server's way:

- ``--max-model-len N`` as vLLM (and SGLang) tell it: each OpenAI-shaped entry's
  ``max_model_len``; an Anthropic-shaped entry's ``max_input_tokens``, as Anthropic's (and
  the app keeps it, refusing longer prompts: :mod:`~stateway.fake_upstream.answer`);
- ``--ctx-size N`` (with ``--parallel P``) as llama.cpp tells it: the window of one slot,
  ``N`` divided among the ``P`` slots as llama-server divides it, in its one listing (in
  OpenAI's shape, to an Anthropic client too) as ``meta.n_ctx``, beside ``n_ctx_train``
  (the trained window, :data:`N_CTX_TRAIN`, larger than the one served), and in ``GET
  /props`` as ``default_generation_settings.n_ctx`` (beside ``total_slots``), where its
  older builds tell it alone.

Without either no window is told, and ``/props`` is a 404 (as OpenAI's servers have none).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Final

import orjson

from stateway.fake_upstream.chat_tools import ToolServer

N_CTX_TRAIN: Final = 131072


@dataclass(frozen=True, slots=True)
class Windows:
    """The context window the fake tells of, and how."""

    max_model_len: int | None = None
    ctx_size: int | None = None
    parallel: int = 1
    renderer: bool = False
    """``max_model_len`` kept as vLLM's renderer (0.16 on) keeps it: its count of a prompt
    stops one token past the room ``max_tokens`` leaves (:mod:`~stateway.fake_upstream.answer`)."""

    @property
    def server(self) -> ToolServer:
        """The server whose Chat tools the fake takes as it does: the one its window is
        told as (:mod:`~stateway.fake_upstream.chat_tools`)."""
        if self.max_model_len is not None:
            return "vllm"
        return "openai" if self.ctx_size is None else "llama.cpp"

    @property
    def slot(self) -> int | None:
        """One slot's window (llama.cpp's ``n_ctx``); None without ``ctx_size``."""
        return None if self.ctx_size is None else self.ctx_size // self.parallel

    def props(self) -> bytes | None:
        """llama.cpp's ``GET /props`` answer; None without ``ctx_size`` (a 404)."""
        if self.ctx_size is None:
            return None
        settings: dict[str, Any] = {"n_ctx": self.slot, "params": {}}
        props = {"default_generation_settings": settings, "total_slots": self.parallel}
        return orjson.dumps({**props, "model_path": "/models/fake-model.gguf"})


def listings(names: list[str], windows: Windows) -> tuple[bytes, bytes]:
    """``GET /v1/models`` in OpenAI's shape, and in Anthropic's."""
    openai = [{**_entry(name), **_told(windows)} for name in names]
    anthropic: list[dict[str, Any]] = [
        {
            "type": "model",
            "id": name,
            "display_name": name,
            "created_at": "2026-01-01T00:00:00Z",
        }
        for name in names
    ]
    if windows.max_model_len is not None:
        anthropic = [{**entry, "max_input_tokens": windows.max_model_len} for entry in anthropic]
    paged = {"data": anthropic, "has_more": False, "first_id": names[0], "last_id": names[-1]}
    listing = orjson.dumps({"object": "list", "data": openai})
    if windows.ctx_size is not None:  # llama-server has one listing, whoever asks
        return listing, listing
    return listing, orjson.dumps(paged)


def _entry(name: str) -> dict[str, Any]:
    return {"id": name, "object": "model", "created": 0, "owned_by": "stateway-fake"}


def _told(windows: Windows) -> dict[str, Any]:
    """What an OpenAI-shaped entry adds, as the server it plays adds it."""
    if windows.max_model_len is not None:
        return {"root": "fake-model", "parent": None, "max_model_len": windows.max_model_len}
    if windows.slot is not None:
        meta = {"n_vocab": 32000, "n_ctx": windows.slot, "n_ctx_train": N_CTX_TRAIN}
        return {"owned_by": "llamacpp", "meta": meta}
    return {}
