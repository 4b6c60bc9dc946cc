"""What a user installs: the sdist, and the wheel built from it as ``pip install`` builds
one, held to the source tree. Every file of ``src/stateway`` is needed at run time (the
modules, ``py.typed``, the migrations Alembic reads from ``storage/sql/migrations``), so
the wheel must ship each one; the sdist carries the package's sources, not the test suite
(which needs the whole repository to run).

The builds run in a copy of the project, so nothing is written into the checkout.
"""

from __future__ import annotations

import configparser
import importlib
import shutil
import subprocess
import sys
import tarfile
import zipfile
from dataclasses import dataclass
from importlib.metadata import version
from pathlib import Path

import pytest

ROOT = Path(__file__).parents[1]
PACKAGE = ROOT / "src" / "stateway"

NOT_THE_PROJECT = shutil.ignore_patterns(
    ".git",
    ".venv",
    "__pycache__",
    "*.egg-info",
    "build",
    "dist",
    "mutants",
    ".*_cache",
    ".hypothesis",
    "*.db",
    "*.db-*",
    "*.log",
    "*.pid",
)
"""What a checkout holds besides the project's own files (``.gitignore``'s, and builds')."""

SDIST_FILES = {"PKG-INFO", "setup.cfg", "pyproject.toml", "README.md", "MANIFEST.in", "LICENSE"}
"""The sdist's files beside ``src/`` (the first two written by the build)."""


@dataclass(frozen=True)
class Built:
    sdist: set[str]
    """Paths of the sdist's files, below its ``stateway-VERSION/`` directory."""
    wheel: set[str]
    entry_points: configparser.ConfigParser
    """The wheel's ``entry_points.txt``."""


@pytest.fixture(scope="module")
def built(tmp_path_factory: pytest.TempPathFactory) -> Built:
    major = int(version("setuptools").split(".")[0])
    assert major >= 77, "the dev extra's setuptools>=77 is not installed: run `make install`"
    work = tmp_path_factory.mktemp("packaging")
    project = work / "project"
    shutil.copytree(ROOT, project, ignore=NOT_THE_PROJECT)
    with tarfile.open(work / _build("build_sdist", project, work)) as archive:
        sdist = {member.name.split("/", 1)[1] for member in archive.getmembers() if member.isfile()}
        archive.extractall(work / "unpacked", filter="data")
    (unpacked,) = (work / "unpacked").iterdir()
    with zipfile.ZipFile(work / _build("build_wheel", unpacked, work)) as archive:
        wheel = set(archive.namelist())
        (listing,) = (name for name in wheel if name.endswith(".dist-info/entry_points.txt"))
        entry_points = configparser.ConfigParser(delimiters=("=",))
        entry_points.read_string(archive.read(listing).decode())
    return Built(sdist=sdist, wheel=wheel, entry_points=entry_points)


def _build(hook: str, source: Path, into: Path) -> str:
    """Run a PEP 517 hook of the declared backend in ``source``, as a frontend does
    without build isolation; it answers the name of the file it wrote into ``into``."""
    script = f"import sys; from setuptools import build_meta; print(build_meta.{hook}(sys.argv[1]))"
    done = subprocess.run(
        [sys.executable, "-c", script, str(into)],
        cwd=source,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    return done.stdout.strip().splitlines()[-1]


def _package_files() -> set[str]:
    """``stateway/...`` paths of the package's files, as a wheel names them."""
    return {
        path.relative_to(PACKAGE.parent).as_posix()
        for path in PACKAGE.rglob("*")
        if path.is_file() and "__pycache__" not in path.parts
    }


def test_the_wheel_ships_every_file_of_the_package(built: Built) -> None:
    missing = _package_files() - built.wheel
    assert not missing, f"add them to [tool.setuptools.package-data]: {sorted(missing)}"


def test_the_wheel_holds_the_package_and_its_metadata_only(built: Built) -> None:
    (metadata,) = {path.split("/", 1)[0] for path in built.wheel} - {"stateway"}
    assert metadata.endswith(".dist-info")
    assert {path for path in built.wheel if path.startswith("stateway/")} == _package_files()


def test_the_wheel_and_the_sdist_carry_the_license_text(built: Built) -> None:
    """``license = "Apache-2.0"`` names it; its terms go along (the license asks a
    redistribution to carry them)."""
    (text,) = (path for path in built.wheel if path.endswith(".dist-info/licenses/LICENSE"))
    assert text
    assert "LICENSE" in built.sdist


def test_every_entry_point_of_the_wheel_names_an_object_of_the_package(built: Built) -> None:
    assert dict(built.entry_points["console_scripts"]) == {"stateway": "stateway.cli:main"}
    for group in built.entry_points.sections():
        for target in built.entry_points[group].values():
            module, _, attribute = target.partition(":")
            assert callable(getattr(importlib.import_module(module), attribute)), target


def test_the_sdist_holds_the_package_sources_and_not_the_test_suite(built: Built) -> None:
    assert {f"src/{path}" for path in _package_files()} <= built.sdist
    beside = {path for path in built.sdist if not path.startswith("src/")}
    assert beside == SDIST_FILES
