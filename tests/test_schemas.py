"""The JSON Schemas checked into ``schemas/`` are what the wire models generate."""

from __future__ import annotations

from pathlib import Path

import pytest

from stateway.schemas import DOCUMENTS, render

CHECKED_IN = Path(__file__).parents[1] / "schemas"


@pytest.mark.parametrize("name", sorted(DOCUMENTS))
def test_the_checked_in_schema_is_what_the_models_generate(name: str) -> None:
    assert (CHECKED_IN / name).read_bytes() == render(name), (
        f"schemas/{name} drifted from its models; regenerate it with `python -m stateway.schemas`"
    )


def test_every_client_frame_names_its_type_and_the_error_frame_its_status() -> None:
    frames = DOCUMENTS["websocket-frames.json"]()
    assert sorted(frames["client"]) == [
        "response.create",
        "response.interrupt",
        "response.processed",
        "response.resume",
        "response.steer",
    ]
    error = frames["server"]["error"]
    assert set(error["required"]) == {"type", "status", "error"}
