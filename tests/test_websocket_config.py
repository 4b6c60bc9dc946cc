"""``[websocket]``: defaults, the file, ``STATEWAY_WEBSOCKET_*`` and the frame limit."""

from __future__ import annotations

from pathlib import Path

import pytest

from stateway.config import ConfigError, Overrides, load_config
from stateway.reload import STARTUP_SECTIONS

MIB = 1024 * 1024


def test_defaults_and_the_frame_limit_follows_the_body_limit() -> None:
    config = load_config(Overrides(), {})
    ws = config.websocket
    assert (ws.max_requests, ws.max_lanes) == (64, 128)
    assert (ws.max_queued_bytes, ws.max_checkpoint_bytes) == (12 * MIB, 32 * MIB)
    assert ws.outbox_bytes == MIB
    assert ws.frame_limit(config.server.max_body_bytes) == config.server.max_body_bytes
    assert "websocket" in STARTUP_SECTIONS


def test_file_then_environment(tmp_path: Path) -> None:
    path = tmp_path / "stateway.toml"
    path.write_text("[websocket]\nmax_lanes = 4\nmax_frame_bytes = 4096\n")
    env = {"STATEWAY_CONFIG": str(path), "STATEWAY_WEBSOCKET_MAX_LANES": "9"}
    ws = load_config(Overrides(), env).websocket
    assert ws.max_lanes == 9
    assert ws.frame_limit(1) == 4096
    with pytest.raises(ConfigError, match=r"websocket\.outbox_bytes"):
        load_config(Overrides(), {"STATEWAY_WEBSOCKET_OUTBOX_BYTES": "10"})
