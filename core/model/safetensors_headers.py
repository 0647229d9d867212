"""Read safetensors headers without touching tensor data.

A safetensors file is an 8-byte little-endian header length, a JSON header naming every
tensor's dtype, shape and byte range, then the data. The header alone gives exact byte
counts, which is all the planner needs: a 1 TB model is measured in milliseconds.
"""

from __future__ import annotations

import math
import struct
from dataclasses import dataclass
from pathlib import Path

from core.jsonfile import FileProblem, open_regular
from core.model.validate import parse_json, show

# safetensors' own limit: a header larger than this is a corrupt (or hostile) file.
MAX_HEADER_BYTES = 100 * 1024 * 1024

# Bytes per element of each safetensors dtype (sub-byte formats are packed by the writer).
DTYPE_BYTES: dict[str, float] = {
    "BOOL": 1,
    "U8": 1,
    "I8": 1,
    "F8_E4M3": 1,
    "F8_E5M2": 1,
    "F8_E8M0": 1,
    "U16": 2,
    "I16": 2,
    "F16": 2,
    "BF16": 2,
    "U32": 4,
    "I32": 4,
    "F32": 4,
    "U64": 8,
    "I64": 8,
    "F64": 8,
    "F4": 0.5,
    "F6_E2M3": 0.75,
    "F6_E3M2": 0.75,
    "C64": 8,
}
# No tensor has more elements than this (2**62 bytes is 4 EiB): a larger shape is a
# corrupt header, and refusing it keeps every size an ordinary integer.
MAX_ELEMENTS = 2**62
MAX_DIMENSIONS = 64
FLOAT_DTYPES = {"F16": "float16", "BF16": "bfloat16", "F32": "float32", "F64": "float64"}


class HeaderError(Exception):
    """A safetensors file whose header is missing, malformed or promises absent data."""


@dataclass(frozen=True)
class TensorEntry:
    """One tensor as its file's header describes it."""

    dtype: str
    shape: tuple[int, ...]
    nbytes: int

    @property
    def numel(self) -> int:
        return math.prod(self.shape)


@dataclass(frozen=True)
class SafetensorsHeader:
    """A file's tensors, the size the header implies (8 + header + data), and the file's
    own size."""

    tensors: dict[str, TensorEntry]
    declared_size: int
    file_size: int = 0
    header_size: int = 0  # 8 + the JSON header

    @property
    def header_only(self) -> bool:
        """The file stops right after its header: the layout of tensors without a byte of
        their data (MacMesh's own copies of the Hub's headers, a model described to plan
        it), not a download cut in the middle of the data."""
        return self.file_size == self.header_size < self.declared_size


def read_header(path: Path, *, check_data: bool = True) -> SafetensorsHeader:
    """Parse ``path``'s header; with ``check_data`` also require every byte range to exist.

    ``check_data=False`` is for header-only fixtures (a model's layout without its
    gigabytes); a real file that stops short of its data is truncated, and that is an error.
    """
    try:
        file_size = path.stat().st_size
        with open_regular(path, 1 << 62) as handle:  # a FIFO is refused, never waited on
            prefix = handle.read(8)
            if len(prefix) < 8:
                raise HeaderError(
                    f"{path.name} is {file_size} bytes long: too short to hold a header"
                )
            (length,) = struct.unpack("<Q", prefix)
            if length > MAX_HEADER_BYTES or 8 + length > file_size:
                raise HeaderError(
                    f"{path.name} announces a {length}-byte header but the file is "
                    f"{file_size} bytes: it is truncated or not a safetensors file"
                )
            raw = handle.read(length)
    except FileProblem as problem:
        raise HeaderError(f"cannot read {path.name}: {problem.what}") from None
    except OSError as error:
        raise HeaderError(f"cannot read {path.name}: {error.strerror or error}") from error
    try:
        header = parse_json(raw, f"{path.name} has a header that")
    except ValueError as error:
        raise HeaderError(str(error)) from None
    if not isinstance(header, dict):
        raise HeaderError(f"{path.name} has a header that is not a JSON object")
    tensors = {}
    data_end = 0
    for name, entry in header.items():
        if name == "__metadata__":
            continue
        tensor, end = _entry(path, name, entry)
        tensors[name] = tensor
        data_end = max(data_end, end)
    parsed = SafetensorsHeader(
        tensors=tensors,
        declared_size=8 + length + data_end,
        file_size=file_size,
        header_size=8 + length,
    )
    if check_data:
        check_complete(path, parsed)
    return parsed


def check_complete(path: Path, header: SafetensorsHeader) -> None:
    """HeaderError unless ``path`` holds every byte its header describes."""
    if header.declared_size > header.file_size:
        raise HeaderError(
            f"{path.name} is {header.file_size} bytes but its header describes "
            f"{header.declared_size}: the file is truncated (an interrupted download or copy)"
        )


def _entry(path: Path, name: str, entry: object) -> tuple[TensorEntry, int]:
    """One tensor's entry, checked: a known dtype, a shape of non-negative integers, a
    byte range of exactly the size they imply."""
    tensor = f"{path.name}: tensor {show(name)}"
    if not isinstance(entry, dict) or not {"dtype", "shape", "data_offsets"} <= entry.keys():
        raise HeaderError(f"{tensor} has a malformed header entry (dtype, shape, data_offsets)")
    dtype, shape, offsets = entry["dtype"], entry["shape"], entry["data_offsets"]
    if not isinstance(dtype, str) or dtype not in DTYPE_BYTES:
        raise HeaderError(f"{tensor} has an unknown dtype {show(dtype)}")
    if (
        not isinstance(shape, list)
        or len(shape) > MAX_DIMENSIONS
        or not all(_natural(d) for d in shape)
        or math.prod(shape) > MAX_ELEMENTS
    ):
        raise HeaderError(
            f"{tensor} has an impossible shape {_show_list(shape)}: "
            "it must be a list of non-negative integers"
        )
    if not isinstance(offsets, list) or len(offsets) != 2 or not all(map(_natural, offsets)):
        raise HeaderError(f"{tensor} has an impossible byte range {_show_list(offsets)}")
    start, end = offsets
    if end < start:
        raise HeaderError(f"{tensor} has an impossible byte range [{start}, {end}]")
    size = math.ceil(math.prod(shape) * DTYPE_BYTES[dtype])
    if end - start != size:
        raise HeaderError(
            f"{tensor} ({dtype}{shape}) should take {size} bytes, its header says {end - start}"
        )
    return TensorEntry(dtype=dtype, shape=tuple(shape), nbytes=end - start), end


def _natural(value: object) -> bool:
    """A JSON integer, 0 or more, and small enough to be a size (not 1e400, not true)."""
    return isinstance(value, int) and not isinstance(value, bool) and 0 <= value <= MAX_ELEMENTS


def _show_list(value: object) -> str:
    if isinstance(value, list) and len(value) <= 8:
        return "[" + ", ".join(show(v) for v in value) + "]"
    return show(value)
