"""The ``apply_patch`` tool: the client edits its files as the model asks.

An ``apply_patch_call``'s ``operation`` is one file's change: ``create_file`` (``path``,
``diff``: the new file's lines, each prefixed with ``+``), ``update_file`` (``path``,
``diff``: a V4A diff) or ``delete_file`` (``path``). The client applies it and answers
with an ``apply_patch_call_output`` (``status``: ``completed`` or ``failed``; ``output``:
optional text). A model that is not offered the tool natively is offered a function
``apply_patch`` whose arguments are the operation (:data:`FUNCTION`, its description saying
what a V4A diff is), and the operation it writes is read leniently (:func:`operations`):
a patch of several files in one call (the V4A envelope) is one call per file.
The wrapping both share with the shell tools: :mod:`.client_hosted`.
"""

from __future__ import annotations

from typing import Any, Final

from stateway.core.items import Item

APPLY_PATCH: Final = "apply_patch"
APPLY_PATCH_CALL: Final = "apply_patch_call"
APPLY_PATCH_CALL_OUTPUT: Final = "apply_patch_call_output"
CREATE: Final = "create_file"
UPDATE: Final = "update_file"
DELETE: Final = "delete_file"
OPERATIONS: Final = (CREATE, UPDATE, DELETE)
OUTPUT_STATUSES: Final = ("completed", "failed")

FUNCTION: Final[Item] = {
    "type": "function",
    "name": APPLY_PATCH,
    "description": "Create, update or delete one file in the user's workspace; whether it "
    "worked is returned. A diff is in the V4A format: to create a file, its lines, each "
    "prefixed with '+'. To update one, one section per change: a line '@@' (or '@@ ' and "
    "a line of the file that locates the change, such as its function's signature), then "
    "the lines around and in the change, each prefixed with ' ' (kept: about three lines "
    "before and after the change), '-' (removed) or '+' (added). No file headers.",
    "parameters": {
        "type": "object",
        "properties": {
            "type": {
                "type": "string",
                "enum": list(OPERATIONS),
                "description": "What to do to the file.",
            },
            "path": {"type": "string", "description": "The file's path in the workspace."},
            "diff": {
                "type": "string",
                "description": "The V4A diff (create_file and update_file only).",
            },
        },
        "required": ["type", "path"],
    },
}
"""The function the tool is offered as."""
OPENED: Final[Item] = {"type": UPDATE, "path": "", "diff": ""}
"""The ``operation`` of a call as it opens, before the model's arguments are whole."""

_KINDS: Final = {
    **{kind: kind for kind in OPERATIONS},
    **{"create": CREATE, "add": CREATE, "add_file": CREATE, "update": UPDATE, "delete": DELETE},
}
"""The operation types, and how a model may shorten them (V4A says ``Add File``)."""
_HEADERS: Final = {
    "*** Add File: ": CREATE,
    "*** Update File: ": UPDATE,
    "*** Delete File: ": DELETE,
}
"""The V4A envelope's file headers (``*** Begin Patch`` ... ``*** End Patch``)."""
_ENVELOPE: Final = "*** Begin Patch"
_END: Final = "*** End Patch"


def operations(args: dict[str, Any], text: str | None) -> list[Item]:
    """The call's operations from the model's arguments: ``args``, the JSON object they
    are (empty when they are none), or ``text``, when they are not JSON at all. One, but
    for a patch in the V4A envelope of several files: one per file, as if the model had
    made a call for each (the arguments' own type and path are the first file's). The
    hosted item's own shape (the operation under ``operation``) is read too, a type
    without its ``_file`` and a ``file_path`` for a ``path``, a diff given as a list of
    lines, a new file's text not marked with ``+``, and the envelope as plain text or as
    the ``diff``. Whatever is missing is empty (a type not known is ``update_file``): the
    call still reaches the client, which refuses what it cannot apply."""
    nested = args.get("operation")
    if isinstance(nested, dict):
        args = nested
    raw_diff = args.get("diff")
    if isinstance(raw_diff, list):
        raw_diff = "\n".join(str(line) for line in raw_diff)
    diff = raw_diff if isinstance(raw_diff, str) else ""
    if text is not None:
        diff = text
    kind = _KINDS.get(str(args.get("type", "")).strip().lower())
    path = next((args[key] for key in ("path", "file_path") if args.get(key) is not None), "")
    sections = _sections(diff)
    if not sections:
        return [_operation(kind, str(path), diff)]
    (first_kind, first_path, first_diff), *rest = sections
    first = _operation(kind or first_kind, str(path or first_path), first_diff)
    return [first, *(_operation(*section) for section in rest)]


def _operation(kind: str | None, path: str, diff: str) -> Item:
    found: Item = {"type": kind or UPDATE, "path": path}
    lines = diff.split("\n")
    if found["type"] == CREATE and diff and not any(line.startswith("+") for line in lines):
        diff = "\n".join(f"+{line}" for line in lines)  # the new file's text, unmarked
    if found["type"] != DELETE:
        found["diff"] = diff
    return found


def _sections(diff: str) -> list[tuple[str, str, str]]:
    """The type, path and diff of each file of a patch in the V4A envelope."""
    lines = diff.strip().splitlines()
    if not lines or not lines[0].startswith((_ENVELOPE, *_HEADERS)):
        return []
    sections: list[tuple[str, str, str]] = []
    for at, line in enumerate(lines):
        header = next((h for h in _HEADERS if line.startswith(h)), None)
        if header is None:
            continue
        body: list[str] = []
        for following in lines[at + 1 :]:
            if following.startswith(_END) or following.startswith(tuple(_HEADERS)):
                break
            body.append(following)
        sections.append((_HEADERS[header], line.removeprefix(header).strip(), "\n".join(body)))
    return sections


def call_arguments(item: Item) -> Item:
    """An apply_patch call's ``operation`` as the function arguments the model wrote."""
    raw = item.get("operation")
    return dict(raw) if isinstance(raw, dict) else {}


def output_text(item: Item) -> str:
    """An ``apply_patch_call_output`` as the model is told it: its status, then its text."""
    status = "failed" if item.get("status") == "failed" else "completed"
    output = item.get("output")
    return f"{status}\n{output}" if isinstance(output, str) and output else status
