"""The JSON Schemas checked into ``schemas/`` are what the wire models generate."""

from __future__ import annotations

from pathlib import Path

import pytest

from stateway.schemas import DOCUMENTS, main, render

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


def test_the_command_writes_every_document_into_the_directory_given(tmp_path: Path) -> None:
    main([str(tmp_path)])
    assert {path.name: path.read_bytes() for path in tmp_path.iterdir()} == {
        name: render(name) for name in DOCUMENTS
    }


def test_the_command_answers_help_with_its_usage(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    with pytest.raises(SystemExit) as exited:
        main(["--help"])
    assert exited.value.code == 0
    assert "python -m stateway.schemas" in capsys.readouterr().out
    assert list(tmp_path.iterdir()) == []  # no folder named --help, nothing written
