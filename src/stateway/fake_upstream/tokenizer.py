"""The fake's tokenizer endpoints, at the server root as vLLM and llama.cpp serve them.

A token is a whitespace-separated word, as in the fake's ``usage``, so a count of the
same messages equals the ``prompt_tokens`` a generation reports. Five behaviours
(``--tokenizer``):

- ``vllm`` (default): ``POST /tokenize`` with ``{"messages"}`` (the chat request's
  messages) or ``{"prompt"}`` answers ``{"count", "max_model_len", "tokens"}``;
- ``llama.cpp``: ``POST /tokenize`` tokenizes only ``{"content"}`` (``{"tokens": []}``
  without it) and ``POST /apply-template`` renders ``{"messages"}`` as ``{"prompt"}``, one
  line ``<|ROLE|>TEXT`` per message; both need ``model``, as llama-server's router mode
  (several models) does: a single-model server ignores it;
- ``sglang``: ``POST /tokenize`` takes only ``{"prompt"}``, as SGLang's does in releases
  whose request has no ``messages``, and refuses a chat body (a 400, as its validation
  refuses one);
- ``lmstudio``: neither route exists, answered as LM Studio answers any route it does not
  serve: a 200 whose body is only an error (:func:`unserved`);
- ``none``: neither route exists (404), like OpenAI's or Ollama's servers.
"""

from __future__ import annotations

from typing import Any, Final, Literal

from stateway.fake_upstream.chat import parse_chat_request
from stateway.fake_upstream.conversation import content_text
from stateway.fake_upstream.errors import invalid_request

Dialect = Literal["vllm", "llama.cpp", "sglang", "lmstudio", "none"]
DIALECTS: Final = ("vllm", "llama.cpp", "sglang", "lmstudio", "none")
TOKENIZE_PATH: Final = "/tokenize"
TEMPLATE_PATH: Final = "/apply-template"
MAX_MODEL_LEN: Final = 32768


def tokenize(dialect: Dialect, body: dict[str, Any]) -> dict[str, Any]:
    """The answer to ``POST /tokenize`` (for ``vllm``, ``llama.cpp`` or ``sglang``)."""
    if dialect == "llama.cpp":
        _routed(body)
        content = body.get("content")
        return {"tokens": _tokens(content) if isinstance(content, str) else []}
    if "messages" in body and dialect == "vllm":
        count = parse_chat_request({"model": "tokenizer", **body}).conversation.prompt_tokens
        return {"count": count, "max_model_len": MAX_MODEL_LEN, "tokens": list(range(count))}
    prompt = body.get("prompt")
    if not isinstance(prompt, str):
        wanted = "a 'prompt'" if dialect == "sglang" else "either 'messages' or a 'prompt'"
        raise invalid_request(f"The request needs {wanted}.", "prompt")
    tokens = _tokens(prompt)
    return {"count": len(tokens), "max_model_len": MAX_MODEL_LEN, "tokens": tokens}


def unserved(method: str, path: str) -> dict[str, Any]:
    """LM Studio's answer, with a 200, to a route it does not serve
    (lmstudio-ai/lmstudio-bug-tracker#618)."""
    return {"error": f"Unexpected endpoint or method. ({method} {path})"}


def apply_template(body: dict[str, Any]) -> dict[str, Any]:
    """llama.cpp's ``POST /apply-template``: the messages rendered as one prompt."""
    _routed(body)
    messages = body.get("messages")
    if not isinstance(messages, list) or not messages:
        raise invalid_request("Missing required parameter: 'messages'.", "messages")
    lines = []
    for message in messages:
        if not isinstance(message, dict):
            raise invalid_request("Each message must be an object.", "messages")
        lines.append(f"<|{message.get('role')}|>{content_text(message.get('content'))}")
    return {"prompt": "\n".join(lines)}


def _routed(body: dict[str, Any]) -> None:
    """llama-server's router mode refuses a body that names no model (its words)."""
    if not isinstance(body.get("model"), str):
        raise invalid_request("model name is missing from the request", "model")


def _tokens(text: str) -> list[int]:
    return list(range(len(text.split())))
