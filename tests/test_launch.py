"""Starting stateway's servers as subprocesses (``stateway.launch``): the URL their
announcement line gives, a process that ends or stays silent instead, and the
environment that makes this ``stateway`` importable in the child."""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest

import stateway
from stateway.launch import child_env, launch

SOURCE_ROOT = str(Path(stateway.__file__).resolve().parent.parent)


def python(code: str) -> list[str]:
    return [sys.executable, "-c", code]


def test_the_url_follows_the_announcement_on_its_first_line_holding_it() -> None:
    said = "print('starting'); print('x listening on http://h:1 listening on http://h:2 ')"
    with launch(python(said), "listening on ") as launched:
        assert launched.url == "http://h:1 listening on http://h:2"
        assert launched.pid > 0


def test_a_process_ending_without_its_announcement_is_an_error_naming_it() -> None:
    command = python("print('no announcement'); raise SystemExit(3)")
    with pytest.raises(RuntimeError) as failed, launch(command, "listening on "):
        pass
    assert str(failed.value) == f"{' '.join(command)} exited early with code 3"


def test_a_process_not_announcing_in_time_is_an_error_naming_it() -> None:
    command = python("import time; time.sleep(5)")  # silent past the timeout, then ends
    with pytest.raises(RuntimeError) as failed, launch(command, "listening on ", timeout=0.5):
        pass
    assert str(failed.value) == f"{' '.join(command)} did not start within 0.5s"


def test_the_child_imports_this_stateway_before_its_own_path(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("PYTHONPATH", "/elsewhere")
    assert child_env({"EXTRA": "1"})["PYTHONPATH"] == SOURCE_ROOT + os.pathsep + "/elsewhere"
    assert child_env({"EXTRA": "1"})["EXTRA"] == "1"
    monkeypatch.delenv("PYTHONPATH")
    assert child_env()["PYTHONPATH"] == SOURCE_ROOT
