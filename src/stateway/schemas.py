"""The JSON Schema documents generated from the wire models, checked into ``schemas/``.

Each document is a function of pydantic models: the MCP tools' inputs and annotations
(``mcp-tools.json``) and WebSocket mode's frames (``websocket-frames.json``). A test
fails when a checked-in file drifts from its models; regenerate every file with
``python -m stateway.schemas`` (from the repository's root).
"""

from __future__ import annotations

import argparse
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any, Final

import orjson

from stateway.protocols.responses.frames import frame_schemas
from stateway.surfaces.mcp.schema import tool_schemas

DOCUMENTS: Final[dict[str, Callable[[], dict[str, Any]]]] = {
    "mcp-tools.json": tool_schemas,
    "websocket-frames.json": frame_schemas,
}
"""File name in ``schemas/`` -> what generates it."""


def render(name: str) -> bytes:
    """The bytes of document ``name`` as it must be checked in."""
    document = DOCUMENTS[name]()
    return orjson.dumps(document, option=orjson.OPT_INDENT_2 | orjson.OPT_SORT_KEYS) + b"\n"


def write_all(directory: Path) -> None:
    for name in DOCUMENTS:
        (directory / name).write_bytes(render(name))


def main(argv: Sequence[str] | None = None) -> None:
    """``python -m stateway.schemas [DIRECTORY]``: write every document into DIRECTORY."""
    parser = argparse.ArgumentParser(
        prog="python -m stateway.schemas",
        description="Regenerate the JSON Schema documents checked into schemas/.",
    )
    parser.add_argument(
        "directory", nargs="?", default="schemas", type=Path, help="where to write them"
    )
    write_all(parser.parse_args(argv).directory)


if __name__ == "__main__":
    main()
