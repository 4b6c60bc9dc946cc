"""The ``parameters`` of a function tool, a field of both OpenAI wires (the Responses API's
``tools[N].parameters``, Chat Completions' ``tools[N].function.parameters``): checked alike
whatever the upstream, for the mistakes an upstream would reject late (or a model would
choke on). Full JSON Schema validation is the upstream's."""

from __future__ import annotations

from typing import Any

from stateway.core.errors import InvalidRequest


def check_parameters(schema: dict[str, Any], path: str) -> None:
    """The top level of ``schema`` (at ``path`` in the body) is an object schema with
    object ``properties`` and a ``required`` list of strings; a 400 naming the field at
    fault otherwise."""
    kind = schema.get("type")
    if kind is not None and kind != "object":
        raise _invalid(f"the top-level 'type' must be 'object', got {kind!r}.", path, "type")
    properties = schema.get("properties")
    if properties is not None and not (
        isinstance(properties, dict) and all(isinstance(p, dict) for p in properties.values())
    ):
        raise _invalid("'properties' must map names to schemas.", path, "properties")
    required = schema.get("required")
    if required is not None and not (
        isinstance(required, list) and all(isinstance(name, str) for name in required)
    ):
        raise _invalid("'required' must be a list of property names.", path, "required")


def _invalid(reason: str, path: str, key: str) -> InvalidRequest:
    return InvalidRequest(
        f"Invalid schema for '{path}': {reason}",
        param=f"{path}.{key}",
        code="invalid_function_parameters",
    )
