"""Serving the fake upstream with uvicorn on a socket we bind, announcing its URL.

``serve`` binds the socket itself (port 0 picks a free port), runs uvicorn on it (uvloop
and httptools when installed, access log off, log level warning) and, once listening,
prints exactly one line to stdout: ``fake-upstream listening on http://HOST:PORT/v1``.
"""

from __future__ import annotations

from stateway.fake_upstream.app import build_app
from stateway.fake_upstream.chat import ReasoningField
from stateway.fake_upstream.listing import Windows
from stateway.fake_upstream.tokenizer import Dialect
from stateway.serving import AnnouncingServer, bind_socket, server_config, socket_url

ANNOUNCEMENT = "fake-upstream listening on "


def serve(
    host: str = "127.0.0.1",
    port: int = 8000,
    api_key: str | None = None,
    *,
    model_names: list[str] | None = None,
    keep_alive: int | None = None,
    system_first: bool = False,
    text_only: bool = False,
    content_required: bool = False,
    reasoning_efforts: tuple[str, ...] | None = None,
    reasoning_field: ReasoningField = "reasoning_content",
    tokenizer: Dialect = "vllm",
    windows: Windows | None = None,
    min_output_tokens: int = 1,
) -> None:
    """Run the fake upstream until interrupted (SIGINT/SIGTERM). ``keep_alive``: seconds an
    idle connection stays open (uvicorn's default, 5 s, when None); ``system_first``: the
    Chat wire refuses a system message anywhere but first; ``text_only``: an image;
    ``content_required``: a message whose content is null (LM Studio's refusal);
    ``reasoning_efforts``: the
    only ``reasoning_effort`` values it takes (None: any); ``reasoning_field``: the Chat
    wire's reasoning field; ``windows``: the context window its listing tells of;
    ``min_output_tokens``: the least ``max_output_tokens`` its Responses wire takes."""
    sock = bind_socket(host, port)
    app = build_app(
        api_key,
        model_names,
        system_first=system_first,
        text_only=text_only,
        content_required=content_required,
        reasoning_efforts=reasoning_efforts,
        reasoning_field=reasoning_field,
        tokenizer=tokenizer,
        windows=windows,
        min_output_tokens=min_output_tokens,
    )
    config = server_config(app, lifespan=False, graceful_shutdown=2)
    if keep_alive is not None:
        config.timeout_keep_alive = keep_alive
    server = AnnouncingServer(config, f"{ANNOUNCEMENT}{socket_url(sock)}/v1")
    with sock:
        server.run(sockets=[sock])
