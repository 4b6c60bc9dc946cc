"""Stages discovered from entry points, with a test package installed on the path."""

from __future__ import annotations

from pathlib import Path

import pytest

from stateway.config import Config, ConfigError
from stateway.core.stages.shipped import ParamClamp, ToolFilter
from stateway.route_config import StageConfig
from stateway.stage_loader import load_chain, load_stage

MODULE = """
class Labeler:
    def __init__(self, label="x"):
        self.label = label

    def session_open(self, context):
        context.labels["who"] = self.label


class Idle:
    pass
"""


@pytest.fixture
def installed(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A distribution ``teststages`` declaring entry points in ``stateway.stages``."""
    (tmp_path / "teststages_mod.py").write_text(MODULE)
    (tmp_path / "teststages_broken.py").write_text("raise RuntimeError('broken on import')\n")
    info = tmp_path / "teststages-1.0.dist-info"
    info.mkdir()
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: teststages\nVersion: 1.0\n")
    (info / "entry_points.txt").write_text(
        "[stateway.stages]\n"
        "labeler = teststages_mod:Labeler\n"
        "idle = teststages_mod:Idle\n"
        "broken = teststages_broken:Thing\n"
        "[stateway.other]\n"
        "elsewhere = teststages_mod:Labeler\n"
    )
    monkeypatch.syspath_prepend(str(tmp_path))
    return tmp_path


def test_an_installed_package_s_stage_is_found_and_built(installed: Path) -> None:
    stage = load_stage(StageConfig(name="labeler", options={"label": "ops"}), "stages")
    assert stage.impl.label == "ops"
    assert stage.handles("session_open")
    assert stage.on_error == "closed"


def test_the_shipped_stages_are_registered() -> None:
    clamp = load_stage(StageConfig(name="param_clamp", options={"max_output_tokens": 9}), "x")
    assert isinstance(clamp.impl, ParamClamp)
    assert isinstance(load_stage(StageConfig(name="tool_filter"), "x").impl, ToolFilter)


@pytest.mark.parametrize(
    ("name", "options", "message"),
    [
        ("nope", {}, "stage 'nope': no entry point"),
        ("broken", {}, "stage 'broken' failed to load"),
        ("labeler", {"colour": "red"}, "stage 'labeler': options refused"),
        ("idle", {}, "stage 'idle' handles no stage point"),
    ],
)
def test_a_bad_stage_is_a_config_error_naming_it(
    installed: Path, name: str, options: dict[str, object], message: str
) -> None:
    with pytest.raises(ConfigError, match=message):
        load_stage(StageConfig(name=name, options=options), "route 'r'")


def test_a_route_chain_loads_global_and_route_stages(installed: Path) -> None:
    config = Config.model_validate(
        {
            "backends": [{"name": "a", "url": "http://a/v1"}],
            "stages": [{"name": "labeler"}],
            "routes": [
                {
                    "name": "r",
                    "candidates": [{"backend": "a", "model": "m"}],
                    "stages": [{"name": "nope", "on_error": "open"}],
                }
            ],
        }
    )
    (route,) = config.routes
    with pytest.raises(ConfigError, match="route 'r': stage 'nope'"):
        load_chain(config, route.stages, f"route '{route.name}'")


def test_an_entry_point_of_another_group_is_no_stage(installed: Path) -> None:
    with pytest.raises(ConfigError) as refused:
        load_chain(Config.model_validate({"stages": [{"name": "elsewhere"}]}))
    assert str(refused.value) == (
        "stages: stage 'elsewhere': no entry point in group stateway.stages"
    )


def test_a_route_runs_the_global_stages_then_its_own(installed: Path) -> None:
    config = Config.model_validate({"stages": [{"name": "labeler", "options": {"label": "g"}}]})
    route = [StageConfig(name="labeler", options={"label": "r"}, on_error="open")]
    chain = load_chain(config, route, "route 'r'")
    assert [(s.name, s.impl.label, s.on_error) for s in chain.stages] == [
        ("labeler", "g", "closed"),
        ("labeler", "r", "open"),
    ]


def test_a_name_two_packages_declare_loads_the_first_found(installed: Path) -> None:
    info = installed / "teststages2-1.0.dist-info"
    info.mkdir()
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: teststages2\nVersion: 1.0\n")
    (info / "entry_points.txt").write_text("[stateway.stages]\nlabeler = teststages_mod:Labeler\n")
    assert load_stage(StageConfig(name="labeler"), "stages").impl.label == "x"
