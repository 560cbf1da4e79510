"""Packing ragged per-trajectory sequences into padded time-major arrays with a round mask.

Built from list offsets with whole-array gathers, never a per-record Python loop.
"""

from __future__ import annotations

from collections.abc import Sequence
from itertools import chain

import numpy as np

__all__ = ["pack_offsets", "pack_ragged", "ragged_to_flat"]


def pack_offsets(
    values: np.ndarray,
    offsets: np.ndarray,
    *,
    t_max: int | None = None,
    n_padded: int | None = None,
    dtype: np.dtype | type = np.float64,
    fill: float = np.nan,
) -> tuple[np.ndarray, np.ndarray]:
    """Scatter a flat ragged column into ``[T, N]`` (time-major) with a prefix round mask.

    Args:
      values: ``[offsets[-1] - offsets[0]]`` flat values, trajectory after trajectory (an
        Arrow list column's ``values`` sliced at its offsets).
      offsets: ``[N + 1]`` int offsets into ``values`` (as Arrow's list offsets; need not
        start at 0).
      t_max: rounds to allocate (default: the longest trajectory; must be at least that).
      n_padded: trajectories to allocate (default ``N``); rows past ``N`` are padding.
      dtype: output dtype; fill: value of padded slots.

    Returns:
      ``(padded [T, n_padded], round_mask [T, n_padded] bool)``.
    """
    offsets = np.asarray(offsets, np.int64)
    lengths = np.diff(offsets)
    n = lengths.size
    longest = int(lengths.max()) if n else 0
    t_max = longest if t_max is None else int(t_max)
    if t_max < longest:
        raise ValueError(f"t_max={t_max} is shorter than the longest trajectory ({longest})")
    n_padded = n if n_padded is None else int(n_padded)
    out = np.full((t_max, n_padded), fill, dtype)
    mask = np.zeros((t_max, n_padded), bool)
    mask[:, :n] = np.arange(t_max)[:, None] < lengths[None, :]
    values = np.asarray(values)
    base = offsets[:-1] - offsets[0]
    # One gather per round: round t of trajectory n sits at base[n] + t where it exists.
    for t in range(t_max):
        has = mask[t, :n]
        out[t, :n][has] = values[base[has] + t]
    return out, mask


def ragged_to_flat(rows: Sequence[Sequence[float | None]]) -> tuple[np.ndarray, np.ndarray]:
    """Flatten Python sequences (one per trajectory) to ``(values float64, offsets [N + 1])``;
    ``None`` becomes NaN."""
    lengths = np.fromiter((len(r) for r in rows), np.int64, count=len(rows))
    offsets = np.zeros(lengths.size + 1, np.int64)
    np.cumsum(lengths, out=offsets[1:])
    flat = np.array(list(chain.from_iterable(rows)), dtype=np.float64)
    return flat, offsets


def pack_ragged(
    rows: Sequence[Sequence[float | None]], *, t_max: int | None = None
) -> tuple[np.ndarray, np.ndarray]:
    """Pack Python sequences (one per trajectory) into ``([T, N] float64, round_mask [T, N])``."""
    flat, offsets = ragged_to_flat(rows)
    return pack_offsets(flat, offsets, t_max=t_max)
