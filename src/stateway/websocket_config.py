"""The ``[websocket]`` section of the configuration: WebSocket mode's per-connection caps.

::

    [websocket]
    max_requests = 64                  # active + queued requests per connection
    max_queued_bytes = 12582912        # bytes of request frames waiting to start
    max_lanes = 128                    # named lanes (stream_ids) with requests
    max_checkpoint_bytes = 33554432    # bytes of responses kept for continuation
    max_pending_steers = 16            # steers queued per response (response.steer)
    outbox_bytes = 1048576             # events a connection may trail its runs by
    max_frame_bytes = 33554432         # default: [server] max_body_bytes
    compression = false                # permessage-deflate, when a client offers it

A frame past a cap is answered with a 429 error frame and changes nothing. Every key
has a ``STATEWAY_WEBSOCKET_<KEY>`` variable. Read once at start-up (docs/websocket.md).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Final

from pydantic import Field

from stateway.config_section import Section

MIB: Final = 1024 * 1024


class WebSocketConfig(Section):
    max_requests: int = Field(default=64, ge=1)
    """Requests a connection may have running or waiting in its lanes."""
    max_queued_bytes: int = Field(default=12 * MIB, ge=1024)
    """Bytes of request frames a connection may have waiting to start."""
    max_lanes: int = Field(default=128, ge=1)
    """Named lanes (distinct ``stream_id``s) a connection holds with requests; the default
    lane is not counted (as hosted)."""
    max_checkpoint_bytes: int = Field(default=32 * MIB, ge=0)
    """Bytes of the responses a connection keeps (its last one per lane, stored or not) to
    continue them with ``previous_response_id``, each counted with what keeping it costs
    besides its JSON; past it the oldest are let go."""
    max_pending_steers: int = Field(default=16, ge=1)
    """Steers (``response.steer``) accepted for one response and not committed yet; past
    it a steer fails with ``too_many_pending_steers``. Also the steers a response fails
    (each returning its input in its stream) before it answers more with a 429."""
    outbox_bytes: int = Field(default=1 * MIB, ge=1024)
    """Bytes of events a connection may trail its runs by while its client does not read;
    past it the connection is closed with 4429 (the runs go on)."""
    max_frame_bytes: int | None = Field(default=None, ge=1024)
    """The largest client frame answered (a larger one gets a 413 error frame); default:
    ``[server] max_body_bytes``."""

    compression: bool = False
    """Accept permessage-deflate when a client offers it (the ``openai`` SDK only when
    given a ``max_size`` or ``compression`` in ``websocket_connection_options``, not by
    default; Codex does not). Off by default, as in most WebSocket servers:
    each connection's compressor holds ~44 KiB (most of an idle connection's memory) and
    every event frame costs a compression; turn it on for clients on slow links sending
    large histories."""

    def frame_limit(self, max_body_bytes: int) -> int:
        return self.max_frame_bytes if self.max_frame_bytes is not None else max_body_bytes


def apply_websocket_env(data: dict[str, Any], env: Mapping[str, str]) -> None:
    """Set ``data``'s ``[websocket]`` keys from ``STATEWAY_WEBSOCKET_*`` (validated with
    the rest of the configuration)."""
    for key in WebSocketConfig.model_fields:
        value = env.get(f"STATEWAY_WEBSOCKET_{key.upper()}")
        if value:
            data["websocket"] = {**data.get("websocket", {}), key: value}
