"""A pydantic validation error in a Messages body as Anthropic words it: the error that
got furthest into the body, ``path: message``, the path as the client wrote it, never the
gateway's own names for the body's parts (its wire models' class names, the tags it gives
a union's alternatives).

Furthest is through the most list items, then the most fields: of a union's alternatives
the one the value is of (an object judged by its fields, a ``keep`` of
``{"type": "thinking_turns", "value": 0}`` by its ``value``, not for not being ``"all"``).
"""

from __future__ import annotations

import pydantic
from pydantic_core import ErrorDetails

from stateway.core.errors import InvalidRequest
from stateway.protocols.messages.blocks import (
    BLOCK_TYPES,
    TOOL_CHANGE_TARGETS,
    WebSearchToolResultError,
)
from stateway.protocols.messages.edit_params import EDIT_TYPES, OTHER_EDIT
from stateway.protocols.messages.errors import field_error

NOT_AN_OBJECT = "Input should be a valid dictionary"
"""pydantic's words for a value that is no object where one belongs, without the class
name it adds for a model (``... or instance of MessageParam``)."""


def invalid_body(exc: pydantic.ValidationError, at: tuple[int | str, ...] = ()) -> InvalidRequest:
    """The error that got furthest into the body, as ``path: message`` (Anthropic's way);
    ``at``: where in the body the validated value is."""
    error = max(exc.errors(include_url=False), key=_reach)
    param = _param((*at, *error["loc"]), value=error["type"] == "model_type")
    if error["type"] == "missing":
        return field_error(param, "Field required", "missing_required_parameter")
    if error["type"] in ("model_type", "model_attributes_type") and not error["loc"]:
        return InvalidRequest("The request body must be a JSON object.", code="invalid_type")
    if error["type"] == "model_type":
        return field_error(param, NOT_AN_OBJECT, "invalid_type")
    if error["type"] == "union_tag_not_found":
        return field_error(f"{param}.type", "Field required", "missing_required_parameter")
    if error["type"] == "union_tag_invalid":
        ctx = error.get("ctx") or {}
        if error["loc"][-1] == "source":  # the Files API's file sources among them
            expected = ctx.get("expected_tags")
            problem = f"source type '{ctx.get('tag')}' is not supported; expected {expected}."
            return field_error(f"{param}.type", problem)
        if error["loc"][0] == "context_management":  # an edit, or its trigger
            return field_error(f"{param}.type", error["msg"])
        if error["loc"][-1] == "tool":  # a tool change's (a removal takes no definition)
            expected = ctx.get("expected_tags")
            problem = f"tool type '{ctx.get('tag')}' is not supported here; expected {expected}."
            return field_error(f"{param}.type", problem)
        return field_error(f"{param}.type", f"unknown content block type '{ctx.get('tag')}'.")
    code = "invalid_type" if error["type"].endswith("_type") else "invalid_value"
    return field_error(param, error["msg"], code)


def _reach(error: ErrorDetails) -> tuple[int, int]:
    """How far into the body ``error`` got: through how many list items, then fields (a
    union's tag error names its ``type``)."""
    loc = error["loc"]
    fields = len(_param(loc).split(".")) + error["type"].startswith("union_tag")
    return sum(isinstance(part, int) for part in loc), fields


def _param(loc: tuple[int | str, ...], *, value: bool = False) -> str:
    """``messages.0.content.1.tool_use_id`` from pydantic's location, whose union
    alternatives (``list[...]``, ``str``) and type tags (after an index, ``source``,
    ``trigger``, a tool change's ``tool`` or a tagged union, with a field after them) are
    not fields: the last part is always one (``system.0.text``, a list of text blocks that
    is no tagged union), unless ``value``: the location is a value's, which a tagged
    union may have validated by its tag (a non-object edit, as the ``other`` one)."""
    parts: list[str] = []
    previous: int | str | None = None
    for position, part in enumerate(loc):
        tags = _tags(previous, part)
        previous = part
        tag = part in tags and (value or position < len(loc) - 1)
        if isinstance(part, int):
            parts.append(str(part))
        elif not ("[" in part or part in _UNION_ALTERNATIVES or tag):
            parts.append(part)
    return ".".join(parts)


def _tags(previous: int | str | None, part: int | str) -> frozenset[int | str]:
    """The type tags ``part`` may be one of, after ``previous``."""
    if isinstance(previous, int):
        return _INDEXED_TAGS
    if previous is None:
        return frozenset()
    if previous.startswith("tagged-union["):  # its tag comes next, whatever it is
        return frozenset({part})
    return _TAGS.get(previous, frozenset())


_UNION_ALTERNATIVES = frozenset({"str", "int", "float", "bool", WebSearchToolResultError.__name__})
"""pydantic's names for the alternatives of a union that is no tagged union: its scalars',
and its models' class names (a web search result's ``content``, a list or an error)."""
_INDEXED_TAGS: frozenset[int | str] = BLOCK_TYPES | EDIT_TYPES | {OTHER_EDIT}
"""The tags of the tagged unions listed by index: content blocks, ``context_management``'s
edits."""
_TAGS: dict[str, frozenset[int | str]] = {
    "source": frozenset({"base64", "url", "text", "content"}),
    "trigger": frozenset({"input_tokens", "tool_uses"}),
    "tool": TOOL_CHANGE_TARGETS,
}
"""The tags of the tagged unions a field holds, by the field."""
