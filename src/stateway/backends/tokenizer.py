"""Counting input tokens with the model server's own tokenizer endpoint.

Both servers serve it at their root (not under ``/v1``):

- vLLM: ``POST /tokenize`` with ``{"model", "messages", "add_generation_prompt", "tools"}``
  renders the chat template and answers ``{"count", "max_model_len", "tokens"}``.
- llama.cpp: ``POST /tokenize`` takes only ``{"content"}`` (it answers ``{"tokens": []}``
  to a body without it), so the messages are first rendered by ``POST /apply-template``
  (``{"messages"}`` → ``{"prompt"}``), then tokenized with special tokens. Both bodies
  name the ``model``: llama-server's router mode (several models) refuses them without
  it, and passes the first ``/tokenize`` (which has it) to the model's own server.

The caller renders the request as the Chat Completions body it would send
(:func:`~stateway.backends.chat_request.to_upstream`); a server answering ``/tokenize``
without a ``count`` is taken for llama.cpp from then on. A 404 means there is no tokenizer
to ask (OpenAI, Ollama): the count is None, and the gateway estimates instead; so does a
200 whose body is only an error (LM Studio's answer to any route it does not serve), and a
400 to the chat body, a ``/tokenize`` that takes no chat (SGLang's, in releases whose
request has a ``prompt`` and no ``messages``). Other failures are the upstream's errors,
as for any call (llama.cpp's ``/apply-template`` refusing the messages too).
"""

from __future__ import annotations

from typing import Any

import orjson

from stateway.backends.upstream_http import UpstreamClient
from stateway.backends.upstream_status import reports_error
from stateway.core.errors import UpstreamError, UpstreamRejected


class _Unserved(Exception):
    """A tokenizer route answered with a 200 whose body is only an error: not served."""


class UpstreamTokenizer:
    def __init__(self, client: UpstreamClient) -> None:
        self._client = client
        self._llama_cpp = False
        """Set once the server answered ``/tokenize`` in llama.cpp's way."""

    async def count(self, body: dict[str, Any]) -> int | None:
        """The input tokens of a Chat Completions request ``body``; None without a
        tokenizer endpoint."""
        chat: dict[str, Any] = {"model": body["model"], "messages": body["messages"]}
        if body.get("tools"):
            chat["tools"] = body["tools"]
        try:
            if not self._llama_cpp:
                chat_body = {**chat, "add_generation_prompt": True}
                reply = await self._post("/tokenize", chat_body, "tokens")
                count = reply.get("count")
                if isinstance(count, int) and not isinstance(count, bool):
                    return count
                if not isinstance(reply.get("tokens"), list):
                    raise self._malformed("/tokenize")
                self._llama_cpp = True
            return await self._count_llama_cpp(chat)
        except UpstreamRejected as exc:
            # a 400 while not taken for llama.cpp: the chat body's /tokenize refused it
            if exc.status == 404 or (exc.status == 400 and not self._llama_cpp):
                return None
            raise
        except _Unserved:
            return None

    async def _count_llama_cpp(self, chat: dict[str, Any]) -> int:
        prompt = (await self._post("/apply-template", chat, "prompt")).get("prompt")
        if not isinstance(prompt, str):
            raise self._malformed("/apply-template")
        body = {"model": chat["model"], "content": prompt, "add_special": True}
        tokens = (await self._post("/tokenize", body, "tokens")).get("tokens")
        if not isinstance(tokens, list):
            raise self._malformed("/tokenize")
        return len(tokens)

    async def _post(self, path: str, body: dict[str, Any], field: str) -> dict[str, Any]:
        """The JSON object ``path`` answers, which holds ``field`` unless it is only an
        error (:class:`_Unserved`)."""
        async with self._client.post(path, body, root=True) as reply:
            raw = await reply.read()
        try:
            answer = orjson.loads(raw)
        except orjson.JSONDecodeError:
            answer = None
        if not isinstance(answer, dict):
            raise self._malformed(path)
        if reports_error(answer, field):
            raise _Unserved(path)
        return answer

    def _malformed(self, path: str) -> UpstreamError:
        name = self._client.target.name
        return UpstreamError(f"The model server '{name}' answered {path} with a malformed body.")
