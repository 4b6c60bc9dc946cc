"""A made-up llama model small enough to write at test time (~300 KB), which
``llama-server`` loads and runs as it runs any: its tokenizer, chat template, sampling,
grammars and wire are the real server's; only the weights are crafted.

It is a bigram model: its one layer adds nothing (zero output projections), so each
token's logits depend on that token alone (its embedding through the output matrix).
Each token of the reply is given its own direction, and the output row of the token
that follows it points that way, so whatever it is asked the model, sampled greedily,
writes :data:`REPLY_TEXT` after the chat template's generation prompt (which ends in a
newline): ``<think>`` (its reasoning, :data:`REASONING`), then :data:`REPLY`, then
``<|im_end|>``, its end of turn (or, where a grammar forbids ending it, a
``<tool_call>``). One more direction, shared by every token, ranks the rest when a grammar
forbids the token that would follow: the end of turn first, then the closing quote and the
JSON characters that close what is open, so a constrained reply (a required tool call, a
JSON schema) ends as soon as its grammar lets it.

The vocabulary is SentencePiece's shape (llama.cpp's ``llama`` tokenizer): the 256
byte tokens (what the model writes is written byte by byte), the ChatML markers,
``<think>`` and ``<tool_call>`` tags, the reply's words, and every pair of printable ASCII
characters and ``▁`` (a space): a prompt is read two characters a token.

It is built to read long prompts fast: agent clients send 50-100 KB (instructions, dozens
of tools), and attention's cost grows with the square of the prompt's tokens. So a
prompt's tokens are halved (the pairs; a space alone was three byte tokens), and the one
attention head is two wide, the least rotary embeddings take (the layer adds nothing, so
only its cost counts): ~25,000 tokens in a few seconds on one thread.
"""

from __future__ import annotations

import itertools
from array import array
from pathlib import Path
from typing import Final

from tests.llama_server.gguf_file import Tensor, Value, write_gguf

REASONING: Final = "Thinking"
REPLY: Final = "Hello from llama"
REPLY_TEXT: Final = f"<think>{REASONING}</think>{REPLY}"
"""What the model writes, as llama-server's ``--reasoning-format none`` shows it."""
CONTEXT_TRAINED: Final = 131072
"""The window the model claims it was trained for (``n_ctx_train``): llama-server caps a
slot's window at it, and an agent client's prompt needs tens of thousands of tokens."""

CHAT_TEMPLATE: Final = """\
{%- if tools %}<|im_start|>system
{% if messages[0].role == 'system' %}{{ messages[0].content }}
{% endif %}You may call these tools:
{% for tool in tools %}{{ tool | tojson }}
{% endfor %}Call one as <tool_call>{"name": NAME, "arguments": ARGUMENTS}</tool_call>.<|im_end|>
{% elif messages[0].role == 'system' %}<|im_start|>system
{{ messages[0].content }}<|im_end|>
{% endif %}
{%- for message in messages %}
{%- if message.role == 'user' or (message.role == 'system' and not loop.first) %}\
<|im_start|>{{ message.role }}
{{ message.content }}<|im_end|>
{% elif message.role == 'assistant' %}<|im_start|>assistant
{% if message.reasoning_content %}<think>{{ message.reasoning_content }}</think>{% endif %}
{{- message.content or '' }}
{%- for call in message.tool_calls or [] %}<tool_call>{"name": "{{ call.function.name }}", \
"arguments": {{ call.function.arguments | tojson }}}</tool_call>{% endfor %}<|im_end|>
{% elif message.role == 'tool' %}<|im_start|>tool
{{ message.content }}<|im_end|>
{% endif %}
{%- endfor %}
{%- if add_generation_prompt %}<|im_start|>assistant
{% endif %}"""
"""ChatML, with tools described in the system turn and called in ``<tool_call>`` tags
(the shape of Qwen's templates, from which llama-server's template analysis learns how
calls and reasoning are written)."""

_N_EMBD = 64
_N_HEAD = 1
_HEAD_WIDTH = 2
"""A head's width (keys, values and rotary dimensions alike): the least llama.cpp takes."""
_N_FF = 128
_SHARED = _N_EMBD - 1
"""The direction every token has: the ranking used when a grammar forbids the next."""

_UNKNOWN, _CONTROL, _USER_DEFINED, _BYTE, _NORMAL = 2, 3, 4, 6, 1
_SPECIAL = {
    "<|im_start|>": _CONTROL,
    "<|im_end|>": _CONTROL,
    "<think>": _USER_DEFINED,
    "</think>": _USER_DEFINED,
    "<tool_call>": _USER_DEFINED,
    "</tool_call>": _USER_DEFINED,
}
_WORDS = ("Thinking", "Hello", "▁from", "▁llama")
_CHARACTERS = ("▁", *(chr(code) for code in range(0x21, 0x7F)))
"""What a prompt's pairs are made of: a space (SentencePiece's ``▁``) and printable ASCII.
No newline: the generation prompt's last token, which the reply follows, stays its own."""
_CHAIN = ("<0x0A>", "<think>", "Thinking", "</think>", "Hello", "▁from", "▁llama", "<|im_end|>")
"""Each token followed by the next: the reply after the generation prompt's newline."""
_RANKS = {
    "<|im_end|>": 1.0,
    '"': 0.9,
    "</tool_call>": 0.85,
    "}": 0.8,
    "]": 0.7,
    ":": 0.6,
    "{": 0.5,
    "0": 0.4,
    ",": 0.1,
}
"""The tokens preferred, best first, among those a grammar allows (others rank 0): the
closing quote first, since a string's grammar allows any character."""
_CALL = ("▁llama", "<tool_call>")
"""The reply's last word is followed by a call where the end of the turn is not allowed
(a required tool call)."""
_FOLLOW = 8.0
_OWN = 4.0


def _vocabulary() -> list[tuple[str, int]]:
    """The vocabulary: each token's text and SentencePiece type, by id."""
    vocabulary = [("<unk>", _UNKNOWN), ("<s>", _CONTROL), ("</s>", _CONTROL)]
    vocabulary += [(f"<0x{byte:02X}>", _BYTE) for byte in range(256)]
    vocabulary += list(_SPECIAL.items())
    vocabulary += [(word, _NORMAL) for word in (*_WORDS, "▁")]
    return vocabulary + [(a + b, _NORMAL) for a in _CHARACTERS for b in _CHARACTERS]


def write_tiny_model(path: Path) -> Path:
    """Write the model to ``path`` (a ``.gguf`` file); returns ``path``."""
    vocabulary = _vocabulary()
    ids = {text: index for index, (text, _) in enumerate(vocabulary)}
    for text in _RANKS:
        if len(text) == 1:  # a character: its byte's token
            ids[text] = ids[f"<0x{ord(text):02X}>"]
    direction = {ids[text]: index for index, text in enumerate(_CHAIN[:-1])}
    embeddings = array("f", bytes(4 * _N_EMBD * len(vocabulary)))
    output = array("f", bytes(4 * _N_EMBD * len(vocabulary)))
    for token in range(len(vocabulary)):
        embeddings[token * _N_EMBD + _SHARED] = 1.0
    for token, dimension in direction.items():
        embeddings[token * _N_EMBD + dimension] = _OWN
    for before, after in itertools.pairwise(_CHAIN):
        output[ids[after] * _N_EMBD + direction[ids[before]]] = _FOLLOW
    output[ids[_CALL[1]] * _N_EMBD + direction[ids[_CALL[0]]]] = _FOLLOW / 2
    for text, rank in _RANKS.items():
        output[ids[text] * _N_EMBD + _SHARED] = rank
    vocab_size = len(vocabulary)
    tensors = [
        Tensor("token_embd.weight", (_N_EMBD, vocab_size), embeddings),
        Tensor("output_norm.weight", (_N_EMBD,), _ones(_N_EMBD)),
        Tensor("output.weight", (_N_EMBD, vocab_size), output),
        *_layer(0),
    ]
    write_gguf(path, _metadata(vocabulary, ids), tensors)
    return path


def _layer(index: int) -> list[Tensor]:
    """A layer that adds nothing to the residual stream (zero output projections)."""
    name = f"blk.{index}"
    into, out_of = (_N_EMBD, _HEAD_WIDTH), (_HEAD_WIDTH, _N_EMBD)
    return [
        Tensor(f"{name}.attn_norm.weight", (_N_EMBD,), _ones(_N_EMBD)),
        *(Tensor(f"{name}.attn_{part}.weight", into, _zeros(into)) for part in "qkv"),
        Tensor(f"{name}.attn_output.weight", out_of, _zeros(out_of)),
        Tensor(f"{name}.ffn_norm.weight", (_N_EMBD,), _ones(_N_EMBD)),
        Tensor(f"{name}.ffn_gate.weight", (_N_EMBD, _N_FF), _zeros((_N_EMBD, _N_FF))),
        Tensor(f"{name}.ffn_up.weight", (_N_EMBD, _N_FF), _zeros((_N_EMBD, _N_FF))),
        Tensor(f"{name}.ffn_down.weight", (_N_FF, _N_EMBD), _zeros((_N_FF, _N_EMBD))),
    ]


def _metadata(vocabulary: list[tuple[str, int]], ids: dict[str, int]) -> dict[str, Value]:
    return {
        "general.architecture": "llama",
        "general.name": "stateway tiny",
        "llama.context_length": CONTEXT_TRAINED,
        "llama.embedding_length": _N_EMBD,
        "llama.block_count": 1,
        "llama.feed_forward_length": _N_FF,
        "llama.attention.head_count": _N_HEAD,
        "llama.attention.head_count_kv": _N_HEAD,
        "llama.attention.key_length": _HEAD_WIDTH,
        "llama.attention.value_length": _HEAD_WIDTH,
        "llama.rope.dimension_count": _HEAD_WIDTH,
        "llama.attention.layer_norm_rms_epsilon": 1e-5,
        "tokenizer.ggml.model": "llama",
        "tokenizer.ggml.tokens": [text for text, _ in vocabulary],
        "tokenizer.ggml.scores": [0.0] * len(vocabulary),
        "tokenizer.ggml.token_type": [kind for _, kind in vocabulary],
        "tokenizer.ggml.bos_token_id": ids["<s>"],
        "tokenizer.ggml.eos_token_id": ids["<|im_end|>"],
        "tokenizer.ggml.unknown_token_id": ids["<unk>"],
        "tokenizer.ggml.add_bos_token": False,
        "tokenizer.ggml.add_space_prefix": False,
        "tokenizer.chat_template": CHAT_TEMPLATE,
    }


def _ones(count: int) -> array[float]:
    return array("f", [1.0] * count)


def _zeros(shape: tuple[int, int]) -> array[float]:
    return array("f", bytes(4 * shape[0] * shape[1]))
