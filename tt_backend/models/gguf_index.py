"""A GGUF file's metadata scalars and tensor table, read without parsing its metadata arrays.

`gguf.GGUFReader` builds a numpy view for every element of every metadata array; on the default
model (a 49152-token vocabulary and its 48900 merges as string arrays) that took 2.2 s of each
engine build, before the first tensor. This reads the same header (GGUF v2 and v3, little-endian,
as llama.cpp's `gguf.h` and ggml's docs/gguf.md lay it out) and steps over array contents: a
string array costs one length read per element. Each tensor's bytes are a read-only view of the
mapped file. `tests/unit/test_gguf_index.py` checks it against `gguf.GGUFReader`.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass
from pathlib import Path

import numpy as np
from gguf.constants import GGML_QUANT_SIZES, GGMLQuantizationType, GGUFValueType

_MAGIC = b"GGUF"
_DEFAULT_ALIGNMENT = 32
_SCALARS: dict[GGUFValueType, str] = {
    GGUFValueType.UINT8: "<B", GGUFValueType.INT8: "<b", GGUFValueType.UINT16: "<H",
    GGUFValueType.INT16: "<h", GGUFValueType.UINT32: "<I", GGUFValueType.INT32: "<i",
    GGUFValueType.FLOAT32: "<f", GGUFValueType.BOOL: "<?", GGUFValueType.UINT64: "<Q",
    GGUFValueType.INT64: "<q", GGUFValueType.FLOAT64: "<d",
}

Scalar = str | int | float | bool


@dataclass(frozen=True)
class GgufTensor:
    name: str
    type_name: str
    """ggml's name of its type: F32, Q8_0, Q4_K, ..."""
    shape: tuple[int, ...]
    """ggml's order: the fastest-varying dimension first."""
    data: np.ndarray
    """Its bytes (uint8), a read-only view of the mapped file."""


@dataclass(frozen=True)
class GgufIndex:
    version: int
    fields: dict[str, Scalar]
    """The metadata's scalar values (arrays are skipped)."""
    tensors: tuple[GgufTensor, ...]

    @classmethod
    def read(cls, path: Path) -> GgufIndex:
        mapped = np.memmap(path, dtype=np.uint8, mode="r")
        cursor = _Cursor(memoryview(mapped.data), path)
        if cursor.take(4) != _MAGIC:
            raise ValueError(f"{path}: not a GGUF file (no GGUF magic)")
        version = cursor.unpack("<I")
        if version not in (2, 3):
            raise ValueError(f"{path}: GGUF version {version} is not read here (2 and 3 are)")
        tensor_count, field_count = cursor.unpack("<Q"), cursor.unpack("<Q")
        fields: dict[str, Scalar] = {}
        for _ in range(field_count):
            key = cursor.string()
            value = cursor.value(GGUFValueType(cursor.unpack("<I")))
            if value is not None:
                fields[key] = value
        infos = []
        for _ in range(tensor_count):
            name = cursor.string()
            shape = tuple(cursor.unpack("<Q") for _ in range(cursor.unpack("<I")))
            infos.append((name, GGMLQuantizationType(cursor.unpack("<I")), shape, cursor.unpack("<Q")))
        alignment = int(fields.get("general.alignment", _DEFAULT_ALIGNMENT))
        start = -(-cursor.at // alignment) * alignment
        tensors = []
        for name, kind, shape, offset in infos:
            block, block_bytes = GGML_QUANT_SIZES[kind]
            elements = int(np.prod(shape, dtype=np.int64))
            if elements % block:
                raise ValueError(f"{path}: tensor {name} holds {elements} values, "
                                 f"not whole {kind.name} blocks")
            begin = start + offset
            end = begin + elements // block * block_bytes
            if end > len(mapped):
                raise ValueError(f"{path}: tensor {name} runs past the end of the file")
            tensors.append(GgufTensor(name, kind.name, shape, mapped[begin:end]))
        return cls(version, fields, tuple(tensors))


class _Cursor:
    def __init__(self, buffer: memoryview, path: Path) -> None:
        self.buffer, self.path, self.at = buffer, path, 0

    def take(self, n: int) -> bytes:
        if self.at + n > len(self.buffer):
            raise ValueError(f"{self.path}: the GGUF header ends early (at byte {self.at})")
        chunk = bytes(self.buffer[self.at:self.at + n])
        self.at += n
        return chunk

    def unpack(self, fmt: str) -> int:
        return int(self.scalar(fmt))

    def scalar(self, fmt: str) -> Scalar:
        try:
            (value,) = struct.unpack_from(fmt, self.buffer, self.at)
        except struct.error:
            raise ValueError(f"{self.path}: the GGUF header ends early (at byte {self.at})") from None
        self.at += struct.calcsize(fmt)
        return value

    def string(self) -> str:
        return self.take(self.unpack("<Q")).decode("utf-8")

    def value(self, kind: GGUFValueType) -> Scalar | None:
        """A scalar's value; an array is stepped over (None)."""
        if kind == GGUFValueType.STRING:
            return self.string()
        if kind == GGUFValueType.ARRAY:
            item, count = GGUFValueType(self.unpack("<I")), self.unpack("<Q")
            if item == GGUFValueType.STRING:
                for _ in range(count):
                    length = self.unpack("<Q")  # (read before `at` is: unpack moves it)
                    self.at += length
            elif item == GGUFValueType.ARRAY:
                for _ in range(count):
                    self.value(item)
            else:
                self.at += count * struct.calcsize(_SCALARS[item])
            if self.at > len(self.buffer):
                raise ValueError(f"{self.path}: the GGUF header ends early (in an array)")
            return None
        return self.scalar(_SCALARS[kind])
