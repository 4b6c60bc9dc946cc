"""A GGUF file written from metadata and float32 tensors: the format llama.cpp loads
models from (version 3, little-endian), enough of it for a made-up model.

A file is a header (magic, version, the tensor and key counts), the metadata keys (each
a length-prefixed name, a type and a value; lists as arrays of one type), one entry per
tensor (name, dimensions innermost first, type, offset into the data), then the tensors'
data, each at a multiple of the alignment (32 bytes, the format's default).
"""

from __future__ import annotations

import struct
from array import array
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

_MAGIC = b"GGUF"
_VERSION = 3
_ALIGNMENT = 32
_F32 = 0
"""ggml's tensor type of float32 data."""

_UINT32, _INT32, _FLOAT32, _BOOL, _STRING, _ARRAY = 4, 5, 6, 7, 8, 9

Value = bool | int | float | str | Sequence[str] | Sequence[int] | Sequence[float]


@dataclass(frozen=True)
class Tensor:
    """A float32 tensor: ``shape`` innermost dimension first (ggml's ``ne``), ``data`` in
    row-major order of the reversed shape (so a ``[n_in, n_out]`` matrix is ``n_out`` rows
    of ``n_in``)."""

    name: str
    shape: tuple[int, ...]
    data: array[float]


def write_gguf(path: Path, metadata: Mapping[str, Value], tensors: Sequence[Tensor]) -> None:
    """Write ``metadata`` (in order) and ``tensors`` to ``path`` as a GGUF file.

    Integers are written as uint32 (int32 in a list), floats as float32; a list takes the
    type of its first element."""
    header = _MAGIC + struct.pack("<IQQ", _VERSION, len(tensors), len(metadata))
    keys = b"".join(_string(key) + _value(value) for key, value in metadata.items())
    entries, blobs, offset = [], [], 0
    for tensor in tensors:
        size = 1
        for dimension in tensor.shape:
            size *= dimension
        assert len(tensor.data) == size, f"{tensor.name}: {len(tensor.data)} values, not {size}"
        entry = _string(tensor.name) + struct.pack("<I", len(tensor.shape))
        entry += struct.pack(f"<{len(tensor.shape)}Q", *tensor.shape)
        entries.append(entry + struct.pack("<IQ", _F32, offset))
        blob = tensor.data.tobytes()
        blob += bytes(-len(blob) % _ALIGNMENT)
        blobs.append(blob)
        offset += len(blob)
    head = header + keys + b"".join(entries)
    path.write_bytes(head + bytes(-len(head) % _ALIGNMENT) + b"".join(blobs))


def _string(text: str) -> bytes:
    raw = text.encode()
    return struct.pack("<Q", len(raw)) + raw


def _value(value: Value) -> bytes:
    if isinstance(value, bool):
        return struct.pack("<I?", _BOOL, value)
    if isinstance(value, int):
        return struct.pack("<II", _UINT32, value)
    if isinstance(value, float):
        return struct.pack("<If", _FLOAT32, value)
    if isinstance(value, str):
        return struct.pack("<I", _STRING) + _string(value)
    return _list(value)


def _list(values: Sequence[str] | Sequence[int] | Sequence[float]) -> bytes:
    first = values[0]
    if isinstance(first, str):
        items = b"".join(_string(str(item)) for item in values)
        return struct.pack("<IIQ", _ARRAY, _STRING, len(values)) + items
    if isinstance(first, int):
        return struct.pack(f"<IIQ{len(values)}i", _ARRAY, _INT32, len(values), *values)
    return struct.pack(f"<IIQ{len(values)}f", _ARRAY, _FLOAT32, len(values), *values)
