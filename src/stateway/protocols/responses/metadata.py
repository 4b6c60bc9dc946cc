"""``metadata`` as the hosted API limits it, on responses and conversations alike: an
object of at most 16 string values, keys up to 64 characters, values up to 512."""

from __future__ import annotations

from typing import Any, Final

from stateway.core.errors import InvalidRequest
from stateway.protocols.validation import string_too_long, wrong_type

MAX_METADATA_PAIRS: Final = 16
MAX_METADATA_KEY: Final = 64
MAX_METADATA_VALUE: Final = 512


def decode_metadata(value: Any) -> dict[str, str]:
    if not isinstance(value, dict):
        raise wrong_type("metadata", "an object", value)
    if len(value) > MAX_METADATA_PAIRS:
        raise InvalidRequest(
            f"Invalid 'metadata': too many properties. Expected an object with at most "
            f"{MAX_METADATA_PAIRS} properties, but got an object with {len(value)} "
            "properties instead.",
            param="metadata",
            code="object_above_max_properties",
        )
    for key, text in value.items():
        if not isinstance(text, str):
            raise wrong_type(f"metadata.{key}", "a string", text)
        if len(key) > MAX_METADATA_KEY:
            raise InvalidRequest(
                f"Invalid property name in 'metadata': '{key}' is too long. Expected a string "
                f"with maximum length {MAX_METADATA_KEY}, but got a string with length "
                f"{len(key)} instead.",
                param=f"metadata.{key}",
                code="property_name_above_max_length",
            )
        if len(text) > MAX_METADATA_VALUE:
            raise string_too_long(f"metadata.{key}", MAX_METADATA_VALUE, len(text))
    return value
