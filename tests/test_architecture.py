"""ARCHITECTURE.md stays true to the tree: every module its layer listing and its "where
to change what" table name exists where they say, and the names a row gives a module in
parentheses (``core/routing/plan.py`` (``Plan.order``, ...)) are that module's. And the
layering it draws holds where it is easiest to break: the core imports nothing outside
itself, the backends and the MCP client import the core (and what they share), not each
other, the protocols only the core, and the surfaces never the store, the backends or
each other (what surfaces share has a package of its own); nor do the layers reach
around that through a library: the core imports no web framework or wire models, the
surfaces no database, upstream or Redis client; and a surface calls nothing of the
gateway but its one door, ``Gateway.execute`` (with ``Gateway.once`` around it), and
neither steers nor interrupts a run it was handed but through a command.
The names a row places in a module (``Run.before_end`` in ``core/runs.py``) are that
module's too."""

from __future__ import annotations

import ast
import io
import re
import sys
import tokenize
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
PACKAGE = ROOT / "src" / "stateway"
TEXT = (ROOT / "ARCHITECTURE.md").read_text(encoding="utf-8")
LISTING = TEXT.split("```")[1]
TABLE = [line for line in TEXT.splitlines() if line.startswith("| ") and "`" in line]

_PATH = re.compile(r"^[\w.-]+(/[\w.-]+)*/?$")
_MODULE = re.compile(r"(?<![\w/.])((?:\w+/)*\w+\.py)\b")
_NAMED = re.compile(r"`([\w./-]+\.py)` \(([^()]*)\)")


def _is_path(token: str) -> bool:
    return bool(_PATH.match(token)) and ("/" in token or token.endswith(".py"))


def _resolve(token: str, near: list[Path]) -> Path | None:
    """``token`` under the package, the repository, or a directory named earlier."""
    for base in (PACKAGE, ROOT, *near):
        if (base / token).exists():
            return base / token
    return None


def _code(path: Path) -> str:
    """``path``'s source without its comments and docstrings: what it names, not what its
    prose mentions."""
    source = path.read_text(encoding="utf-8")
    docstrings = {
        node.lineno
        for node in ast.walk(ast.parse(source))
        if isinstance(node, ast.Expr)
        and isinstance(node.value, ast.Constant)
        and isinstance(node.value.value, str)
    }
    kept = [
        token.string
        for token in tokenize.generate_tokens(io.StringIO(source).readline)
        if token.type != tokenize.COMMENT
        and not (token.type == tokenize.STRING and token.start[0] in docstrings)
    ]
    return " ".join(kept)


def _listed_modules() -> list[tuple[str, str]]:
    """(layer, module) for every ``*.py`` the layer listing names."""
    found, layer = [], ""
    for line in LISTING.splitlines():
        first = re.match(r"^(\S+)", line)
        if first and first.group(1) not in ("|", "v"):
            layer = first.group(1).rstrip("/")
        found += [(layer, name) for name in _MODULE.findall(line)]
    return found


@pytest.mark.parametrize(("layer", "module"), _listed_modules())
def test_every_module_the_layer_listing_names_is_in_its_layer(layer: str, module: str) -> None:
    home = PACKAGE / layer if (PACKAGE / layer).is_dir() else PACKAGE
    candidates = [home / module, PACKAGE / module, home.parent / module]
    found = any(path.exists() for path in candidates) or any(home.rglob(Path(module).name))
    assert found, f"ARCHITECTURE.md lists {module} under {layer}/, which has no such module"


@pytest.mark.parametrize("row", TABLE, ids=lambda row: row[2:40])
def test_every_path_a_table_row_names_exists(row: str) -> None:
    near: list[Path] = []
    for token in re.findall(r"`([^`]+)`", row):
        if not _is_path(token):
            continue
        path = _resolve(token.rstrip("/"), near)
        if path is None and "/" not in token:  # a sibling of a path named before it
            path = next(PACKAGE.rglob(token), None)
        assert path is not None, f"ARCHITECTURE.md names {token}, which does not exist"
        near.append(path if path.is_dir() else path.parent)


@pytest.mark.parametrize("row", TABLE, ids=lambda row: row[2:40])
def test_the_names_a_row_gives_a_module_are_in_it(row: str) -> None:
    near: list[Path] = []
    for module, named in _NAMED.findall(row):
        path = _resolve(module, near)
        assert path is not None, f"ARCHITECTURE.md names {module}, which does not exist"
        near.append(path.parent)
        if "/" in named or ".py" in named or named.startswith(("or ", "and ")):
            continue  # the parenthesis names other modules' things, or alternatives
        code = _code(path)
        for token in re.findall(r"`([^`\[]+)`", named):  # a config table's key is no name
            for name in re.findall(r"[A-Za-z_]\w*", token.split("(")[0]):
                assert re.search(rf"\b{name}\b", code), f"{module} has no {name} ({row[:60]})"


_PLACED = re.compile(r"`([A-Za-z_][\w.]*)(?:\(\))?` in `([\w./-]+\.py)`")


@pytest.mark.parametrize("row", TABLE, ids=lambda row: row[2:40])
def test_a_name_a_row_places_in_a_module_is_in_it(row: str) -> None:
    near: list[Path] = []
    for token in re.findall(r"`([^`]+)`", row):
        if _is_path(token) and (path := _resolve(token.rstrip("/"), near)) is not None:
            near.append(path if path.is_dir() else path.parent)
    for name, module in _PLACED.findall(row):
        path = _resolve(module, near) or next(PACKAGE.rglob(module), None)
        assert path is not None, f"ARCHITECTURE.md names {module}, which does not exist"
        code = _code(path)
        for part in name.split("."):
            assert re.search(rf"\b{part}\b", code), f"{module} has no {part} ({row[:60]})"


_MAY_IMPORT = {
    "core": ("stateway.core",),
    "backends": ("stateway.backends", "stateway.core", "stateway.redaction"),
    "mcp_client": (
        "stateway.mcp_client",
        "stateway.core.tools.ports",
        "stateway.redaction",
        "stateway.mcp_session_logs",
    ),
    "protocols": ("stateway.protocols", "stateway.core"),
    "surfaces": (
        "stateway.surfaces",
        "stateway.protocols",
        "stateway.core",
        "stateway.identity",
        "stateway.mcp_session_logs",
        "stateway.websocket_config",
    ),
}
"""What of stateway each package's modules may import (a module, or a package and all it
holds): the core nothing outside itself; an adapter the core, and no other adapter: the
backends and the MCP client, which both send credentials, share :mod:`stateway.redaction`,
and the MCP client reaches the core only through its port (the MCP surface and client
share :mod:`stateway.mcp_session_logs`). The protocols translate wires to the core's
commands and nothing else; the surfaces reach the core through commands (and the
identities their credentials prove), never the store, the backends or another adapter."""


def _stateway_imports(path: Path) -> set[str]:
    """The ``stateway`` modules ``path`` imports, wherever the import stands (a function's,
    ``TYPE_CHECKING``'s), a relative import's resolved."""
    found = set()
    package = path.relative_to(PACKAGE.parent).with_suffix("").parts[:-1]
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.ImportFrom):
            base = package[: len(package) - node.level + 1] if node.level else ()
            found.add(".".join((*base, *([node.module] if node.module else []))))
        elif isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
    return {name for name in found if name.split(".")[0] == "stateway"}


@pytest.mark.parametrize(
    ("layer", "path"),
    [(layer, path) for layer in _MAY_IMPORT for path in sorted((PACKAGE / layer).rglob("*.py"))],
    ids=lambda value: str(value.relative_to(PACKAGE)) if isinstance(value, Path) else value,
)
def test_a_package_imports_only_what_its_layer_may(layer: str, path: Path) -> None:
    allowed = _MAY_IMPORT[layer]
    for name in _stateway_imports(path):
        ok = any(name == prefix or name.startswith(prefix + ".") for prefix in allowed)
        assert ok, f"{path.relative_to(PACKAGE)} imports {name}, outside what {layer}/ may"


_MAY_USE = {
    "core": ("orjson", "regex"),
    "backends": ("aiohttp", "orjson"),
    "protocols": ("orjson", "pydantic", "pydantic_core"),
    "surfaces": ("anyio", "mcp", "mcp_types", "orjson", "pydantic", "starlette"),
}
"""What beyond the standard library and ``stateway`` each layer's modules may import: the
core no web framework, wire models, HTTP client, database or Redis; the backends their
HTTP client and nothing of storage or clients; the protocols their wire models; the
surfaces their frameworks, never the store's, the upstreams' or Redis's clients."""


def _foreign_imports(path: Path) -> set[str]:
    """The top-level modules ``path`` imports from neither the standard library nor
    ``stateway``."""
    found = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.ImportFrom) and not node.level and node.module:
            found.add(node.module.split(".")[0])
        elif isinstance(node, ast.Import):
            found.update(alias.name.split(".")[0] for alias in node.names)
    return found - set(sys.stdlib_module_names) - {"stateway"}


@pytest.mark.parametrize(
    ("layer", "path"),
    [(layer, path) for layer in _MAY_USE for path in sorted((PACKAGE / layer).rglob("*.py"))],
    ids=lambda value: str(value.relative_to(PACKAGE)) if isinstance(value, Path) else value,
)
def test_a_layer_imports_only_the_libraries_it_may(layer: str, path: Path) -> None:
    outside = _foreign_imports(path) - set(_MAY_USE[layer])
    assert not outside, f"{path.relative_to(PACKAGE)} imports {sorted(outside)}, outside {layer}/'s"


_SHARED_BY_SURFACES = ("auth", "asgi")
"""The packages under ``surfaces/`` that are no surface but what the surfaces share:
authentication, and the ASGI pieces every route stands on (the Host and Origin checks,
JSON answers, a bounded body). Every other package there is a surface."""


@pytest.mark.parametrize(
    "path",
    sorted((PACKAGE / "surfaces").rglob("*.py")),
    ids=lambda path: str(path.relative_to(PACKAGE)),
)
def test_a_surface_imports_no_other_surface(path: Path) -> None:
    """The surfaces are siblings: each imports its own modules and what they share, never
    another surface's (what two of them need moves to a shared package); the shared
    packages import no surface."""
    parts = path.relative_to(PACKAGE / "surfaces").parts
    own = parts[0] if len(parts) > 1 and parts[0] not in _SHARED_BY_SURFACES else None
    for name in _stateway_imports(path):
        package = name.split(".")[2] if name.startswith("stateway.surfaces.") else None
        ok = package is None or package == own or package in _SHARED_BY_SURFACES
        assert ok, f"{path.relative_to(PACKAGE)} imports {name}, another surface's"


DOORS = frozenset({"execute", "once"})
"""What a surface may call on the core's :class:`~stateway.core.gateway.Gateway`: the one
command handler, and the claim of a command id around it (``Gateway.once``). Its other
attributes (the run registry, the generations and, through them, the routes' backends)
are the composition root's and the core's own."""


def _gateway_uses(path: Path) -> set[str]:
    """The attributes ``path`` reads of anything named ``gateway`` (``gateway``,
    ``self._gateway``, ``self._endpoint.gateway``)."""
    found = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if not isinstance(node, ast.Attribute):
            continue
        owner = node.value
        name = owner.id if isinstance(owner, ast.Name) else getattr(owner, "attr", None)
        if isinstance(name, str) and name.lstrip("_") == "gateway":
            found.add(node.attr)
    return found


@pytest.mark.parametrize(
    "path",
    sorted((PACKAGE / "surfaces").rglob("*.py")),
    ids=lambda path: str(path.relative_to(PACKAGE)),
)
def test_a_surface_reaches_the_core_through_its_one_door(path: Path) -> None:
    """Every surface builds a command and calls ``Gateway.execute``: none reaches past it
    into the gateway's runs or generations (and their backends), which the import rules
    above cannot see."""
    other = _gateway_uses(path) - DOORS
    assert not other, f"{path.relative_to(PACKAGE)} uses Gateway.{sorted(other)}"


_RUN_CONTROLS = frozenset({"steered", "note", "finishing", "cancel_reason", "interrupted"})
"""What of a :class:`~stateway.core.runs.Run` steers it or writes its log: set by the core
alone. A surface tells a run of input queued for it (``SteerResponse``) or stops it at
once (``InterruptResponse``) through ``Gateway.execute``."""
_SURFACE_CANCELS = frozenset({"CLIENT_GONE"})
"""The one reason a surface cancels a run it was handed itself: its client left (an
attached or streamed run's request ended). Every other cancel is a command."""


def _run_controls(path: Path) -> set[str]:
    """What ``path`` uses of a run's controls: its steering attributes, any
    :class:`~stateway.core.runs.CancelReason` but a client's leaving, the run registry."""
    found = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Attribute) and node.attr in _RUN_CONTROLS:
            found.add(f".{node.attr}")
        if (
            isinstance(node, ast.Attribute)
            and isinstance(node.value, ast.Name)
            and node.value.id == "CancelReason"
            and node.attr not in _SURFACE_CANCELS
        ):
            found.add(f"CancelReason.{node.attr}")
    imported = _stateway_imports(path)
    found.update(name for name in imported if name.startswith("stateway.core.run_registry"))
    return found


@pytest.mark.parametrize(
    "path",
    sorted((PACKAGE / "surfaces").rglob("*.py")),
    ids=lambda path: str(path.relative_to(PACKAGE)),
)
def test_a_surface_steers_and_interrupts_runs_through_commands(path: Path) -> None:
    """A surface holds the runs its creates started (to stream them, and to cancel one
    whose client left), but neither steers one, writes into its log nor stops it for any
    other reason: a WebSocket ``response.steer`` and ``response.interrupt`` are commands
    too, which the core applies to a run of the tenant's that this process runs."""
    used = _run_controls(path)
    assert not used, f"{path.relative_to(PACKAGE)} uses {sorted(used)} of a run"
