"""``python -m stateway.fake_upstream``: run the fake OpenAI-compatible model server."""

from __future__ import annotations

import argparse
from collections.abc import Sequence

from stateway.fake_upstream.chat import REASONING_FIELDS
from stateway.fake_upstream.listing import Windows
from stateway.fake_upstream.server import serve
from stateway.fake_upstream.tokenizer import DIALECTS
from stateway.serving import ListenFailed


def main(argv: Sequence[str] | None = None, prog: str = "python -m stateway.fake_upstream") -> None:
    """Parse the fake's options and serve it; ``stateway fake-upstream`` hands its
    arguments over to this one parser."""
    parser = argparse.ArgumentParser(
        prog=prog,
        description="Deterministic OpenAI-compatible fake model server, scripted by [[...]] "
        "directives in the last user message.",
    )
    parser.add_argument("--host", default="127.0.0.1", help="interface to bind")
    parser.add_argument("--port", type=int, default=8000, help="port to bind (0: any free port)")
    parser.add_argument("--api-key", default=None, help="require 'Authorization: Bearer KEY'")
    parser.add_argument(
        "--model",
        action="append",
        dest="models",
        help="model name listed by /v1/models (repeatable; default: fake-model)",
    )
    parser.add_argument(
        "--keep-alive",
        type=int,
        default=None,
        help="seconds an idle keep-alive connection stays open (default: 5)",
    )
    parser.add_argument(
        "--system-first",
        action="store_true",
        help="refuse a Chat request with a system message anywhere but first (400), as many "
        "open models' chat templates do",
    )
    parser.add_argument(
        "--text-only",
        action="store_true",
        help="refuse a Chat request holding an image (400), as vLLM refuses one for a model "
        "that takes no images ('MODEL is not a multimodal model')",
    )
    parser.add_argument(
        "--content-required",
        action="store_true",
        help="refuse a Chat request holding a message whose content is null or missing "
        "(400), in LM Studio's words: an assistant message of tool calls alone, as the spec "
        "sends it",
    )
    parser.add_argument(
        "--reasoning-effort",
        action="append",
        dest="reasoning_efforts",
        help="a reasoning_effort the Chat wire takes (repeatable; default: any); others get "
        "a 400, as vLLM releases that take only low, medium and high refuse them",
    )
    parser.add_argument(
        "--reasoning-field",
        choices=REASONING_FIELDS,
        default="reasoning_content",
        help="the Chat wire's reasoning field, both ways: reasoning_content (default; read "
        "back from either field) as llama.cpp and older vLLM name it, or reasoning, as vLLM "
        "names it now, reading back only that",
    )
    parser.add_argument(
        "--tokenizer",
        choices=DIALECTS,
        default="vllm",
        help="how /tokenize answers: as vLLM (default), as llama.cpp, as SGLang (a prompt "
        "only: a chat body is a 400), as LM Studio (a 200 that is only an error, as it "
        "answers a route it does not serve), or not at all",
    )
    parser.add_argument(
        "--max-model-len",
        type=int,
        default=None,
        help="tell this context window as vLLM does: max_model_len in each /v1/models entry "
        "(max_input_tokens in Anthropic's shape); and keep it as vLLM does, whatever the "
        "script: a longer prompt is refused, and on the Chat wire one whose max_tokens do "
        "not fit beside it",
    )
    parser.add_argument(
        "--vllm-renderer",
        action="store_true",
        help="keep --max-model-len as vLLM's renderer (0.16 on) does: a Chat request whose "
        "max_tokens do not fit beside the prompt is refused counting the prompt only one "
        "token past the room they leave (at least so many), max_tokens over the window "
        "before any count",
    )
    parser.add_argument(
        "--ctx-size",
        type=int,
        default=None,
        help="tell this context window as llama.cpp does: divided among the --parallel "
        "slots, in the listing's meta.n_ctx (beside the trained window, n_ctx_train) and "
        "in GET /props",
    )
    parser.add_argument(
        "--parallel", type=int, default=1, help="llama.cpp's slots sharing --ctx-size"
    )
    parser.add_argument(
        "--min-output-tokens",
        type=int,
        default=1,
        help="refuse a Responses request's smaller max_output_tokens (400), as hosted OpenAI "
        "refuses one under 16 (default: any positive one, as vLLM takes)",
    )
    args = parser.parse_args(argv)
    serve(
        args.host,
        args.port,
        args.api_key,
        model_names=args.models,
        keep_alive=args.keep_alive,
        system_first=args.system_first,
        text_only=args.text_only,
        content_required=args.content_required,
        reasoning_efforts=tuple(args.reasoning_efforts) if args.reasoning_efforts else None,
        reasoning_field=args.reasoning_field,
        tokenizer=args.tokenizer,
        windows=Windows(args.max_model_len, args.ctx_size, args.parallel, args.vllm_renderer),
        min_output_tokens=args.min_output_tokens,
    )


if __name__ == "__main__":
    try:
        main()
    except ListenFailed as exc:  # its port taken, say: said, no traceback
        raise SystemExit(f"fake-upstream: {exc}") from None
