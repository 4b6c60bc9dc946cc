"""``metadata`` as the hosted API limits it, on responses and conversations alike: an
object of at most 16 string values, keys up to 64 characters, values up to 512."""

from __future__ import annotations

from typing import Any, Final

from stateway.core.errors import InvalidRequest

MAX_METADATA_PAIRS: Final = 16
MAX_METADATA_KEY: Final = 64
MAX_METADATA_VALUE: Final = 512


def decode_metadata(value: Any) -> dict[str, str]:
    if not isinstance(value, dict):
        raise InvalidRequest(
            "Invalid type for 'metadata': expected an object of strings.",
            param="metadata",
            code="invalid_type",
        )
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
            raise InvalidRequest(
                f"Invalid type for 'metadata.{key}': expected a string.",
                param=f"metadata.{key}",
                code="invalid_type",
            )
        if len(key) > MAX_METADATA_KEY:
            raise InvalidRequest(
                f"Metadata keys must be at most {MAX_METADATA_KEY} characters.",
                param="metadata",
                code="invalid_value",
            )
        if len(text) > MAX_METADATA_VALUE:
            raise InvalidRequest(
                f"Metadata values must be at most {MAX_METADATA_VALUE} characters.",
                param=f"metadata.{key}",
                code="invalid_value",
            )
    return value
