"""A checkpoint's weight size in memory, read from its safetensors headers without loading a tensor.

A ``*.safetensors`` file starts with an 8-byte little-endian length and a JSON header that gives every tensor's
dtype, shape and byte range; only those bytes are read. With ``model.safetensors.index.json`` only the files its
``weight_map`` names count (a folder may also hold a consolidated copy). The byte ranges are what is stored, so a
quantized checkpoint's packed tensors (``I32``, ``U8``, ``F8_*``, ``F4``) come out as they will sit in memory; a
float tensor that vLLM casts to another float width (``dtype: float16`` over a float32 checkpoint) is counted at
that width. A checkpoint without safetensors (``*.bin``, ``*.pt``, ``*.gguf``) counts its files' size.
"""

from __future__ import annotations

import json
import math
import struct
from collections.abc import Iterable
from pathlib import Path
from typing import Any, Final

__all__ = ["FLOAT_DTYPE_BYTES", "CheckpointUnreadable", "checkpoint_weight_bytes", "safetensors_tensors"]

#: Bytes per element of the float dtypes a cast applies to, under both safetensors' and torch's names.
FLOAT_DTYPE_BYTES: Final = {
    "F64": 8, "F32": 4, "F16": 2, "BF16": 2,
    "float64": 8, "float32": 4, "float": 4, "float16": 2, "half": 2, "bfloat16": 2,
}  # fmt: skip
#: The safetensors format's own cap on a header (its Rust reader refuses larger ones).
_MAX_HEADER_BYTES: Final = 100_000_000
_INDEX: Final = "model.safetensors.index.json"
_OTHER_WEIGHTS: Final = ("*.bin", "*.pt", "*.pth", "*.gguf")


class CheckpointUnreadable(ValueError):
    """A safetensors file whose header is not what the format says (truncated, too large, not JSON)."""


def checkpoint_weight_bytes(folder: Path, *, cast_to: str | None = None) -> int:
    """The weights of the checkpoint in ``folder`` as they will sit in memory.

    Args:
        folder: The model folder (the one holding ``config.json``).
        cast_to: The float dtype vLLM loads float tensors as (``float16``, ``bfloat16``, ``float32``); None: as
            stored (``dtype: auto``, or a quantized model, whose scales keep their own dtype).

    Raises:
        CheckpointUnreadable: A safetensors header cannot be read.
    """
    files = _safetensors_files(folder)
    if not files:
        return sum(path.stat().st_size for pattern in _OTHER_WEIGHTS for path in folder.glob(pattern))
    target = FLOAT_DTYPE_BYTES.get(cast_to) if cast_to else None
    total = 0
    for path in files:
        for dtype, shape, stored in safetensors_tensors(path):
            if target is not None and dtype in FLOAT_DTYPE_BYTES:
                total += math.prod(shape) * target
            else:
                total += stored
    return total


def _safetensors_files(folder: Path) -> list[Path]:
    index = folder / _INDEX
    if index.is_file():
        try:
            weight_map = json.loads(index.read_text(encoding="utf-8"))["weight_map"]
            names = sorted({str(name) for name in weight_map.values()})
        except (OSError, ValueError, KeyError, TypeError, AttributeError) as exc:
            raise CheckpointUnreadable(f"{index}: not a safetensors index ({exc})") from None
        # The index names files beside it; a name that climbs out of the folder is not read.
        return [folder / name for name in names if Path(name).name == name and (folder / name).is_file()]
    return sorted(folder.glob("*.safetensors"))


def safetensors_tensors(path: Path) -> Iterable[tuple[str, list[int], int]]:
    """``(dtype, shape, stored bytes)`` of every tensor in one safetensors file, from its header alone."""
    with path.open("rb") as file:
        head = file.read(8)
        if len(head) < 8:
            raise CheckpointUnreadable(f"{path}: shorter than a safetensors header")
        (length,) = struct.unpack("<Q", head)
        size = path.stat().st_size
        if length > _MAX_HEADER_BYTES or length > size - 8:
            raise CheckpointUnreadable(f"{path}: header length {length} does not fit the file ({size} bytes)")
        raw = file.read(length)
    try:
        header: Any = json.loads(raw)
    except ValueError as exc:
        raise CheckpointUnreadable(f"{path}: header is not JSON ({exc})") from None
    if not isinstance(header, dict):
        raise CheckpointUnreadable(f"{path}: header is not a JSON object")
    for name, entry in header.items():
        if name == "__metadata__":
            continue
        try:
            begin, end = entry["data_offsets"]
            yield str(entry["dtype"]), [int(n) for n in entry["shape"]], int(end) - int(begin)
        except (KeyError, TypeError, ValueError):
            raise CheckpointUnreadable(f"{path}: tensor {name!r} has no dtype, shape and data_offsets") from None
