"""Small vectorized helpers over Arrow list arrays, shared by the schema checks, the readers
and the packers."""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

__all__ = ["combined", "list_lengths", "offsets", "ramp", "starts"]


def combined(col: pa.ChunkedArray | pa.Array) -> pa.Array:
    """One contiguous array for a column (no copy when it already is one chunk)."""
    if isinstance(col, pa.ChunkedArray):
        if col.num_chunks == 1:
            return col.chunk(0)
        if col.num_chunks == 0:
            return pa.array([], col.type)
        return col.combine_chunks()
    return col


def list_lengths(arr: pa.Array) -> tuple[np.ndarray, np.ndarray]:
    """``(lengths int64 with nulls as 0, valid bool)`` of a list array."""
    lens = pc.list_value_length(arr)
    valid = lens.is_valid().to_numpy(zero_copy_only=False)
    return lens.fill_null(0).to_numpy(zero_copy_only=False).astype(np.int64), valid


def offsets(lengths: np.ndarray, dtype=np.int64) -> np.ndarray:
    """``[len(lengths) + 1]`` list offsets (0, then the running total)."""
    out = np.zeros(lengths.size + 1, dtype)
    np.cumsum(lengths, out=out[1:])
    return out


def starts(lengths: np.ndarray) -> np.ndarray:
    """``[len(lengths)]`` exclusive cumulative sum: where each group starts."""
    out = np.zeros(lengths.size, np.int64)
    np.cumsum(lengths[:-1], out=out[1:])
    return out


def ramp(lengths: np.ndarray) -> np.ndarray:
    """``[sum(lengths)]``: position of each element within its group."""
    total = int(lengths.sum())
    return np.arange(total, dtype=np.int64) - np.repeat(starts(lengths), lengths)
