"""Where each setting's value came from, so that a refused one is named with its source.

An operator told ``server.max_body_bytes`` is wrong looks for it in the configuration
file, where it may not be: it may have come from ``STATEWAY_MAX_BODY_BYTES``, or from a
flag. :class:`Origins` records the variables and flags that set settings (over the file's
values), and :meth:`Origins.describe` names each refused setting with its source: the
variable or flag, else the file and, where it can be found, the line it is on. A key its
table does not take is told the nearest one it does (``prot``: ``port``), if one is near.

tomllib keeps no positions, so the line is found in the file's text: the table holding
the setting (``[server]``, the second ``[[backends]]``, ``[mcp_servers."docs"]``), then
the line in it whose key opens the setting's path (``port =``, ``server = {``,
``loop.max_rounds =``); a setting that is missing from its table is named with the
table's line. A setting on no line found is named with the file alone.
"""

from __future__ import annotations

import difflib
import re
import typing
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from pydantic import BaseModel, ValidationError

from stateway.coordination_config import COORDINATION_ENV, RATE_LIMITS_ENV
from stateway.server_config import SERVER_ENV
from stateway.storage_config import STORAGE_ENV
from stateway.telemetry_config import TELEMETRY_ENV
from stateway.tool_config import TOOL_ENV
from stateway.websocket_config import WebSocketConfig

Location = tuple[str | int, ...]

_HEADER = re.compile(r"^\s*(?P<open>\[\[?)\s*(?P<name>[^\]]+?)\s*\]\]?\s*(?:#.*)?$")
_NAME_PART = re.compile(r'"(?:[^"\\]|\\.)*"|\'[^\']*\'|[^.\s]+')


def setting_variables() -> dict[str, Location]:
    """Every ``STATEWAY_*`` variable that sets one setting over the file's, with it (the
    flags' variables, and ``[security]``'s, are :mod:`stateway.config`'s)."""
    variables: dict[str, Location] = {var: ("storage", key) for key, var in STORAGE_ENV.items()}
    variables |= {var: ("server", key) for key, (var, _) in SERVER_ENV.items()}
    variables |= {var: ("coordination", key) for key, var in COORDINATION_ENV.items()}
    variables |= {var: ("rate_limits", key) for key, var in RATE_LIMITS_ENV.items()}
    variables |= {var: (table, key) for var, (table, key) in TELEMETRY_ENV.items()}
    variables |= {var: (table, key) for var, (table, key, _) in TOOL_ENV.items()}
    variables |= {
        f"STATEWAY_WEBSOCKET_{key.upper()}": ("websocket", key)
        for key in WebSocketConfig.model_fields
    }
    return variables


@dataclass(slots=True)
class Origins:
    """The file's path and text (None: no file), and the settings set over it."""

    path: str | None = None
    text: str = ""
    set_by: dict[Location, str] = field(default_factory=dict)
    """Setting → the variable or flag that set it."""

    def note_variables(self, env: Mapping[str, str], variables: Mapping[str, Location]) -> None:
        """The settings ``variables`` set, those of them given (non-empty) in ``env``."""
        for var, setting in variables.items():
            if env.get(var):
                self.set_by[setting] = var

    def describe(self, exc: ValidationError, model: type[BaseModel]) -> str:
        """``exc``, raised validating ``model``: each refused setting on a line, with its
        source; an unknown key with the nearest key its table takes, if one is near."""
        lines = []
        for error in exc.errors(include_url=False):
            location: Location = tuple(error["loc"])
            where = ".".join(str(part) for part in location) or "config"
            said = error["msg"]
            if error["type"] == "extra_forbidden" and isinstance(location[-1], str):
                table = table_at(model, location[:-1])
                keys = [] if table is None else list(table.model_fields)
                near = difflib.get_close_matches(location[-1], keys, n=1, cutoff=0.6)
                said += f"; did you mean {near[0]}?" if near else ""
            source = self.source(location)
            lines.append(f"{where}: {said}" + (f" ({source})" if source else ""))
        return "invalid configuration:\n  " + "\n  ".join(lines)

    def source(self, location: Location) -> str | None:
        """Where the setting at ``location`` came from, as the error names it."""
        if not location:
            return None
        for setting, given_by in self.set_by.items():
            if location[: len(setting)] == setting:
                return f"set by {given_by}"
        if self.path is None:
            return None
        line = setting_line(self.text, location)
        return self.path if line is None else f"{self.path}, line {line}"


def table_at(model: type[BaseModel], location: Sequence[str | int]) -> type[BaseModel] | None:
    """The table (model) at ``location`` in ``model``'s (``("backends", 0)``:
    :class:`~stateway.backend_config.BackendConfig`), None if there is none there."""
    table = model
    parts = list(location)
    while parts:
        part = parts.pop(0)
        field = table.model_fields.get(part) if isinstance(part, str) else None
        if field is None:
            return None
        kinds = [field.annotation]
        for kind in kinds:  # ``X | None``, ``list[X]``, ``dict[str, X]``: X
            kinds += typing.get_args(kind)
        tables = [k for k in kinds if isinstance(k, type) and issubclass(k, BaseModel)]
        if not tables:
            return None
        table = tables[0]
        if parts and any(typing.get_origin(k) in (list, dict) for k in kinds):
            parts.pop(0)  # the entry's index or key
    return table


def setting_line(text: str, location: Sequence[str | int]) -> int | None:
    """The line (from 1) of ``text``, a TOML file, that holds the setting at ``location``
    (``("backends", 1, "api")``): the line of its key in the table holding it, else that
    table's header; None if neither is found."""
    lines = text.splitlines()
    tables = _tables(lines)
    start, path = max(
        (table for table in tables if tuple(location[: len(table[1])]) == table[1]),
        key=lambda table: len(table[1]),
    )
    rest = location[len(path) :]
    if rest and isinstance(rest[0], str):
        key = re.compile(rf"^\s*(?:{re.escape(rest[0])}|[\"']{re.escape(rest[0])}[\"'])\s*[=.]")
        for number in range(start + 1, len(lines)):
            if _HEADER.match(lines[number]):  # the next table's
                break
            if key.match(lines[number]):
                return number + 1
    return start + 1 if path else None


def _tables(lines: list[str]) -> list[tuple[int, Location]]:
    """Each table header's line index and the location of the table it opens (an array
    of tables' with its index: ``[[backends]]`` the second time is ``("backends", 1)``),
    after the root table (``-1``, ``()``)."""
    tables: list[tuple[int, Location]] = [(-1, ())]
    arrays: dict[Location, int] = {}  # an array of tables → the index of its latest table

    def resolved(names: Sequence[str]) -> Location:
        """``names`` with the latest index of each array of tables they pass through."""
        path: Location = ()
        for name in names:
            path += (name,)
            if path in arrays:
                path += (arrays[path],)
        return path

    for number, line in enumerate(lines):
        header = _HEADER.match(line)
        if header is None:
            continue
        names = [part.strip("\"'") for part in _NAME_PART.findall(header["name"])]
        if header["open"] == "[[":
            array = (*resolved(names[:-1]), names[-1])
            arrays[array] = arrays.get(array, -1) + 1
            tables.append((number, (*array, arrays[array])))
        else:
            tables.append((number, resolved(names)))
    return tables
