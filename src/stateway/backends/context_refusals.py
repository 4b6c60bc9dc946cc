"""A refusal of a prompt longer than the model's context, as each server words it.

A prompt longer than the model's context is told apart by structure, as each server
reports it, and becomes ``context_length_exceeded`` (which clients such as Codex act on):
OpenAI's ``code``, llama.cpp's ``type`` ``exceed_context_size_error`` (with the prompt's
tokens and the window in ``n_prompt_tokens`` and ``n_ctx``), vLLM's ``param``
``input_tokens`` (its ``code`` is the number 400). Some refusals have no structure to tell
them by, and are told by their fixed wording: an Anthropic-shaped error
(``"type": "error"``) whose message starts ``prompt is too long`` (what Claude Code itself
looks for), and an error without a code that says ``maximum context length is N tokens``
(OpenAI's old wording, which vLLM keeps in every version's refusal, with ``param`` null or
``max_tokens``), ``longer than the maximum model length`` (vLLM's engine), ``exceeds the
available context size`` (llama.cpp's, of its builds before that type, and its whole error
body as Ollama passes it on, as text), SGLang's (``is longer than the model's context
length``, ``exceeds the model's maximum context length``, its scheduler's ``Input length (N
tokens) exceeds the maximum allowed length``; its ``code`` is the number 400), Ollama's
(``longer than the context length currently available``, ``the input length exceeds the
context length``) and LM Studio's (``does not fit in context length``, ``tokens to keep
from the initial prompt is greater than the context length`` and older words), none with a
code for it (:data:`_CONTEXT_WORDS`, :data:`_STATED_WORDS`). When a refusal states the
input tokens and the window (llama.cpp's fields, or a message saying them, with the output
tokens too when it says them: vLLM's, SGLang's), the error carries the numbers
(:class:`~stateway.core.errors.UpstreamContextTooLong`): a Messages request asking more
output tokens than the window has room for is asked again for the room
(:mod:`stateway.core.rounds`), and a Messages client is told the numbers as Anthropic
tells them. vLLM's renderer (0.16 on) counts a prompt only one token past the room the
output tokens leave (``your prompt contains at least N input tokens``, 0.16's and 0.17's
``You passed N input tokens``): such a count is the request's, not the prompt's, and is
marked so (``at_least``).
"""

from __future__ import annotations

import re
from typing import NamedTuple, TypeGuard

from stateway.core.errors import CONTEXT_LENGTH_EXCEEDED, UpstreamContextTooLong, UpstreamRejected

_CONTEXT_TYPES = frozenset({"exceed_context_size_error"})
_CONTEXT_PARAMS = frozenset({"input_tokens"})
_WINDOW = re.compile(r"maximum context length is (\d+) tokens")
_CONTEXT_WORDS = (
    "longer than the maximum model length",  # vLLM's engine
    "exceeds the available context size",  # llama.cpp's, before its type (#15780, 2025-09)
    "does not fit in context length",  # LM Studio's
    "tokens to keep from the initial prompt is greater than the context length",  # LM Studio's
    "when context the overflows",  # LM Studio's before 0.3.16 ("Trying to keep the first N")
    "Cannot truncate prompt with n_keep",  # LM Studio's 0.4
    "is longer than the model's context length",  # SGLang's, the input alone
    "exceeds the model's maximum context length",  # SGLang's, the input and the output
    "longer than the context length currently available",  # Ollama's, without context shift
    "the input length exceeds the context length",  # Ollama's, without truncation
)
"""Fixed words of refusals of a prompt over the context that have no structure to say it."""
_INPUT = re.compile(
    r"(\d+) in the messages|prompt contains (?:at least )?(\d+) input tokens"
    r"|request has (\d+) input tokens"
)
_AT_LEAST = "prompt contains at least"
"""vLLM's words (since 0.18) for a prompt count it stopped one token past the room the
output tokens asked for leave: at least so many, whatever the prompt's length."""
_OUTPUT = re.compile(r"(\d+) in the completion|requested (\d+) output tokens|too large: (\d+)")
_STATED_WORDS = tuple(
    re.compile(words)
    for words in (
        # vLLM's engine, of a prompt (images counted) over ``max_model_len``
        r"prompt \(length (?P<tokens>\d+)\) is longer than the maximum model length of "
        r"(?P<window>\d+)",
        # SGLang's tokenizer manager: the input alone, then with the output asked for
        r"input \((?P<tokens>\d+) tokens\) is longer than the model's context length "
        r"\((?P<window>\d+) tokens\)",
        r"maximum context length of (?P<window>\d+) tokens\. You requested a total of \d+ "
        r"tokens: (?P<tokens>\d+) tokens from the input messages and (?P<requested>\d+) tokens",
        # SGLang's scheduler, of an input over what one request may fill
        r"Input length \((?P<tokens>\d+) tokens\) exceeds the maximum allowed length "
        r"\((?P<window>\d+) tokens\)",
        # llama.cpp's, in words only where a server passes its error on as text (Ollama)
        r"request \((?P<tokens>\d+) tokens\) exceeds the available context size "
        r"\((?P<window>\d+) tokens\)",
        # LM Studio's
        r"input has (?P<tokens>\d+) tokens, but the context length only supports "
        r"(?P<window>\d+) tokens",
    )
)
"""Words of refusals of a prompt over the context that say its tokens and the window (and
the output tokens asked for, when those are what overflow it)."""
_PASSED = re.compile(
    r"You passed (?P<tokens>\d+) input tokens and requested (?P<requested>\d+) output "
    r"tokens\. However, the model's context length is only (?P<window>\d+) tokens"
)
"""vLLM 0.16's and 0.17's refusal of a prompt that does not fit beside the output tokens
asked for: its count, as its successors' ``at least`` (:data:`_AT_LEAST`), stops one
token past the room they leave."""


class Stated(NamedTuple):
    """What a context refusal states: the prompt's tokens and the window (in fields of its
    own, llama.cpp's ``n_prompt_tokens`` and ``n_ctx``, or in words), the output tokens
    asked for when its words say them, and whether the count stopped short of the
    prompt's end (``at_least``)."""

    tokens: int
    window: int
    requested: int | None = None
    at_least: bool = False


_OVER_WINDOW = re.compile(
    r"max_(?:completion_)?tokens=(?P<requested>\d+) cannot be greater than "
    r"max_model_len=(?:max_total_tokens=)?(?P<window>\d+)"
)
"""vLLM's refusal (0.16 on) of output tokens beyond the whole window, before it counts the
prompt (``max_tokens=N cannot be greater than max_model_len=M``; some builds say
``max_model_len=max_total_tokens=M``)."""


def output_over_window(message: str) -> tuple[int, int] | None:
    """The output tokens asked for and the window, when ``message`` refuses the one for
    being more than the other (:data:`_OVER_WINDOW`)."""
    said = _OVER_WINDOW.search(message)
    return None if said is None else (int(said["requested"]), int(said["window"]))


def structured_as_too_long(error: dict[str, object]) -> bool:
    """Whether an error without a string ``code`` refuses a prompt over the context by its
    structure: llama.cpp's ``type``, vLLM's ``param``."""
    kind, param = error.get("type"), error.get("param")
    return (isinstance(kind, str) and kind in _CONTEXT_TYPES) or (
        isinstance(param, str) and param in _CONTEXT_PARAMS
    )


def too_long(detail: str, message: str, stated: Stated | None) -> UpstreamRejected:
    """A context refusal, with its numbers when its fields (``stated``) or its message say
    them, naming ``input`` as hosted does (a Chat client's ``messages``), whatever field
    the server named."""
    stated = stated or _stated_in_words(message)
    if stated is not None:
        return UpstreamContextTooLong(
            detail,
            tokens=stated.tokens,
            window=stated.window,
            requested=stated.requested,
            at_least=stated.at_least,
        )
    window, tokens = _WINDOW.search(message), _INPUT.search(message)
    if window is None or tokens is None:
        return UpstreamRejected(detail, status=400, code=CONTEXT_LENGTH_EXCEEDED, param="input")
    output = _OUTPUT.search(message)
    return UpstreamContextTooLong(
        detail,
        tokens=_number(tokens),
        window=int(window.group(1)),
        requested=None if output is None else _number(output),
        at_least=tokens.group(0).startswith(_AT_LEAST),
    )


def _number(match: re.Match[str]) -> int:
    """The one group of an alternation that matched."""
    return int(next(group for group in match.groups() if group is not None))


def stated_in_fields(error: object) -> Stated | None:
    """The prompt's tokens and the window an error object states in fields (llama.cpp's
    ``n_prompt_tokens`` and ``n_ctx``), when it states both (0 where it knows neither)."""
    if not isinstance(error, dict):
        return None
    tokens, window = error.get("n_prompt_tokens"), error.get("n_ctx")
    if _positive(tokens) and _positive(window):
        return Stated(tokens, window)
    return None


def _positive(value: object) -> TypeGuard[int]:
    return isinstance(value, int) and not isinstance(value, bool) and value > 0


def _stated_in_words(message: str) -> Stated | None:
    """The numbers a context refusal says in words (:data:`_STATED_WORDS`, :data:`_PASSED`),
    if it does."""
    passed = _PASSED.search(message)
    if passed is not None:
        numbers = (int(passed["tokens"]), int(passed["window"]), int(passed["requested"]))
        return Stated(*numbers, at_least=True)
    for words in _STATED_WORDS:
        said = words.search(message)
        if said is not None:
            requested = said.groupdict().get("requested")
            return Stated(
                int(said["tokens"]),
                int(said["window"]),
                None if requested is None else int(requested),
            )
    return None


def says_too_long(message: str) -> bool:
    """Whether an error without a code refuses a prompt over the context, in the fixed
    words of a server that says so only in words."""
    return (
        bool(_WINDOW.search(message))
        or any(words in message for words in _CONTEXT_WORDS)
        or _stated_in_words(message) is not None
    )
