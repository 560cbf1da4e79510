"""Small vectorized helpers over Arrow list arrays, shared by the schema checks, the readers,
the packers, the signal builders and the simulator.

A list level is described by its ``lengths`` (``[n]`` int64, nulls as 0): ``offsets`` are
where each list starts and ends in the flat values, ``starts`` where it starts, ``parents``
which list each flat value belongs to and ``ramp`` its position within that list.
"""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

__all__ = ["combined", "list_array", "list_lengths", "offsets", "offsets32", "parents", "ramp",
           "starts"]


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
    if len(arr) and not arr.null_count and (pa.types.is_list(arr.type)
                                           or pa.types.is_large_list(arr.type)):
        # no nulls: the lengths are the differences of the offsets (a null list may own a
        # segment of the values, so only without nulls)
        off = np.frombuffer(arr.buffers()[1], np.int32 if pa.types.is_list(arr.type)
                            else np.int64, count=len(arr) + 1, offset=arr.offset *
                            (4 if pa.types.is_list(arr.type) else 8))
        return np.diff(off).astype(np.int64, copy=False), np.ones(len(arr), bool)
    lens = pc.list_value_length(arr)
    valid = lens.is_valid().to_numpy(zero_copy_only=False)
    return lens.fill_null(0).to_numpy(zero_copy_only=False).astype(np.int64), valid


def offsets(lengths: np.ndarray, dtype=np.int64) -> np.ndarray:
    """``[len(lengths) + 1]`` list offsets (0, then the running total)."""
    out = np.zeros(lengths.size + 1, dtype)
    np.cumsum(lengths, out=out[1:])
    return out


def offsets32(lengths: np.ndarray) -> np.ndarray:
    """:func:`offsets` as int32, the offsets of an Arrow ``list``; ValueError when the values
    would not fit them."""
    out = offsets(lengths)
    if out[-1] > np.iinfo(np.int32).max:
        raise ValueError("column too large for 32-bit list offsets: read it in smaller chunks")
    return out.astype(np.int32)


def list_array(lengths: np.ndarray, values: pa.Array, valid: np.ndarray | None = None
               ) -> pa.ListArray:
    """An Arrow ``list`` array of ``values`` cut by ``lengths``, null where ``valid`` is false
    (no validity bitmap when every list is valid)."""
    mask = None if valid is None or valid.all() else pa.array(~valid)
    return pa.ListArray.from_arrays(pa.array(offsets32(lengths)), values, mask=mask)


def starts(lengths: np.ndarray) -> np.ndarray:
    """``[len(lengths)]`` exclusive cumulative sum: where each group starts."""
    out = np.zeros(lengths.size, np.int64)
    np.cumsum(lengths[:-1], out=out[1:])
    return out


def parents(lengths: np.ndarray) -> np.ndarray:
    """``[sum(lengths)]`` int64: the group each element belongs to (0 repeated ``lengths[0]``
    times, then 1 ...), as Arrow's ``list_parent_indices``."""
    return np.repeat(np.arange(lengths.size, dtype=np.int64), lengths)


def ramp(lengths: np.ndarray, *, parent: np.ndarray | None = None,
         start: np.ndarray | None = None) -> np.ndarray:
    """``[sum(lengths)]``: position of each element within its group.

    ``parent`` (:func:`parents`) and ``start`` (:func:`starts`) of ``lengths``, when the caller
    holds them already: a gather through ``parent`` is cheaper than the ``np.repeat`` that
    is run without it."""
    if start is None:
        start = starts(lengths)
    if parent is None:
        total = int(lengths.sum())
        return np.arange(total, dtype=np.int64) - np.repeat(start, lengths)
    return np.arange(parent.size, dtype=np.int64) - start[parent]
