"""Packing ragged per-trajectory sequences into padded time-major arrays with a round mask.

Built from list offsets with whole-array gathers, never a per-record Python loop.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from itertools import chain

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from fastuq.io.arrow_lists import combined, list_lengths, offsets, starts

__all__ = ["NodeLayout", "node_layout", "pack_lists", "pack_nodes", "pack_offsets",
           "pack_ragged", "ragged_to_flat"]


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
    mask = np.zeros((t_max, n_padded), bool)
    mask[:, :n] = np.arange(t_max)[:, None] < lengths[None, :]
    values = np.asarray(values)
    total = int(offsets[-1] - offsets[0]) if n else 0
    # Trajectory-major first ([n_padded, T], the layout of the flat values), then one
    # transposed copy to time-major: value e of trajectory k, round t, lands at k * T + t.
    if n and n == n_padded and int(lengths.min()) == t_max:  # every trajectory has T rounds
        by_traj = values[:total].reshape(n, t_max)
    else:
        by_traj = np.full((n_padded, t_max), fill, dtype)
        if total:
            base = offsets[:-1] - offsets[0]
            shift = np.arange(n, dtype=np.int64) * t_max - base
            where = np.arange(total, dtype=np.int64) + np.repeat(shift, lengths)
            by_traj.reshape(-1)[where] = values[:total]
    out = np.empty((t_max, n_padded), dtype)
    out[...] = by_traj.T
    return out, mask


def ragged_to_flat(rows: Sequence[Sequence[float | None]]) -> tuple[np.ndarray, np.ndarray]:
    """Flatten Python sequences (one per trajectory) to ``(values float64, offsets [N + 1])``;
    ``None`` becomes NaN."""
    lengths = np.fromiter((len(r) for r in rows), np.int64, count=len(rows))
    flat = np.array(list(chain.from_iterable(rows)), dtype=np.float64)
    return flat, offsets(lengths)


def pack_ragged(
    rows: Sequence[Sequence[float | None]], *, t_max: int | None = None
) -> tuple[np.ndarray, np.ndarray]:
    """Pack Python sequences (one per trajectory) into ``([T, N] float64, round_mask [T, N])``."""
    flat, offsets = ragged_to_flat(rows)
    return pack_offsets(flat, offsets, t_max=t_max)


def pack_lists(
    col: pa.Array, *, dtype=np.float64, t_max: int | None = None, n_padded: int | None = None
) -> tuple[np.ndarray, np.ndarray]:
    """An Arrow ``list<number>`` column (one list per trajectory, one value per executed
    round) to ``([T, N] dtype, round_mask [T, N])``. A null list has no rounds; a null element
    becomes NaN (and is reported by validation as a missing measurement)."""
    col = combined(col)
    lengths, _ = list_lengths(col)
    values = pc.list_flatten(col).to_numpy(zero_copy_only=False)
    return pack_offsets(values, offsets(lengths), dtype=dtype, t_max=t_max, n_padded=n_padded)


@dataclass(frozen=True)
class NodeLayout:
    """Where every slot of a node column lands in its padded ``[T, N, A]`` arrays.

    ``round_len [N]``: executed rounds per trajectory; ``slot_len [R]``: slots per executed
    round (``R = round_len.sum()``); ``shape``: ``(T, n_padded, A)``; ``position [S]``
    (int64): the flat index into a C-ordered array of ``shape`` of every slot of
    ``pc.list_flatten(pc.list_flatten(col))`` (``S = slot_len.sum()``); ``round_mask
    [T, n_padded]`` (``shape`` and ``round_mask`` trajectory-major, ``[n_padded, T, A]``
    and ``[n_padded, T]``, for a layout of ``order="trajectory"``). Columns with the same
    lists (``seq_logprob``, ``n_tokens`` and ``answers`` of one chunk, typically) share one
    layout (:func:`node_layout`'s ``known``).
    """

    round_len: np.ndarray
    slot_len: np.ndarray
    shape: tuple[int, int, int]
    position: np.ndarray
    round_mask: np.ndarray

    def fits(self, round_len: np.ndarray, slot_len: np.ndarray,
             shape: tuple[int, int, int]) -> bool:
        """Whether a column with these list lengths, packed to ``shape``, has this layout."""
        return (shape == self.shape and np.array_equal(round_len, self.round_len)
                and np.array_equal(slot_len, self.slot_len))


def node_layout(
    col: pa.Array,
    *,
    t_max: int | None = None,
    n_agents: int | None = None,
    n_padded: int | None = None,
    known: Sequence[NodeLayout] = (),
    order: str = "time",
) -> NodeLayout:
    """The :class:`NodeLayout` of a ``list<list<...>>`` node column (sizes as
    :func:`pack_nodes`); one of ``known`` when it fits (no new index is built then).

    ``order="time"`` (default): the arrays are time-major ``[T, n_padded, A]``, slot ``k``
    of round ``t`` of trajectory ``n`` at ``(t * n_padded + n) * A + k``.
    ``order="trajectory"``: trajectory-major ``[n_padded, T, A]`` (the layout of the Arrow
    lists, and of a pack's stored arrays), at ``(n * T + t) * A + k``; ``round_mask`` is
    then ``[n_padded, T]``. With ``row_base[r]`` of every executed round (one ``np.repeat``
    over the trajectories), ``position = arange(S) + repeat(row_base, slot_len)``: two
    repeats and two aranges, no per-slot 3-index arithmetic.

    Raises:
      ValueError: ``t_max`` or ``n_agents`` smaller than the column needs, or an unknown
        ``order``.
    """
    if order not in ("time", "trajectory"):
        raise ValueError(f"order must be 'time' or 'trajectory', got {order!r}")
    col = combined(col)
    n = len(col)
    round_len, _ = list_lengths(col)
    rows = pc.list_flatten(col)  # one entry per executed (trajectory, round)
    slot_len, _ = list_lengths(rows)
    longest_t = int(round_len.max()) if n else 0
    longest_a = int(slot_len.max()) if len(slot_len) else 0
    t_max = longest_t if t_max is None else int(t_max)
    n_agents = longest_a if n_agents is None else int(n_agents)
    n_padded = n if n_padded is None else int(n_padded)
    if t_max < longest_t or n_agents < longest_a:
        raise ValueError(
            f"node column needs at least {longest_t} rounds x {longest_a} agents, "
            f"got {t_max} x {n_agents}"
        )
    time_major = order == "time"
    shape = (t_max, n_padded, n_agents) if time_major else (n_padded, t_max, n_agents)
    for layout in known:
        if layout.fits(round_len, slot_len, shape):
            return layout
    # round r = t-th of trajectory n starts at t * step_t + n * step_n, t = r - traj_start[n]
    step_t = n_padded * n_agents if time_major else n_agents
    step_n = n_agents if time_major else t_max * n_agents
    traj = np.arange(n, dtype=np.int64) * step_n - starts(round_len) * step_t
    row_base = np.arange(len(slot_len), dtype=np.int64) * step_t
    row_base += np.repeat(traj, round_len)
    row_base -= starts(slot_len)  # slot e of round r is its (e - start of r)-th slot
    position = np.repeat(row_base, slot_len)
    position += np.arange(position.size, dtype=np.int64)
    if time_major:
        round_mask = np.zeros((t_max, n_padded), bool)
        round_mask[:, :n] = np.arange(t_max)[:, None] < round_len[None, :]
    else:
        round_mask = np.zeros((n_padded, t_max), bool)
        round_mask[:n] = np.arange(t_max)[None, :] < round_len[:, None]
    return NodeLayout(round_len, slot_len, shape, position, round_mask)


def pack_nodes(
    col: pa.Array,
    *,
    dtype=np.float64,
    t_max: int | None = None,
    n_agents: int | None = None,
    n_padded: int | None = None,
    fill: float = np.nan,
    leaf_values: np.ndarray | None = None,
    layout: NodeLayout | None = None,
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """An Arrow ``list<list<number>>`` node column (``[round][agent]`` per trajectory) to
    padded time-major arrays.

    Args:
      col: N trajectories; each a list of executed rounds, each round a list with one slot
        per agent of the initial team (null where the agent did not speak).
      t_max, n_agents, n_padded: sizes to allocate (defaults: the largest present, N).
      dtype, fill: the values' dtype and the value of empty slots.
      leaf_values: ``[S]`` values to pack instead of the column's own, one per slot of
        ``pc.list_flatten(pc.list_flatten(col))`` (nulls included), e.g. the vote classes
        of a string column; a slot is valid where the column's own value is non-null.
      layout: the column's :class:`NodeLayout` (:func:`node_layout` of this column with
        these sizes), when the caller holds it; built here otherwise. A trajectory-major
        layout gives trajectory-major arrays (``[n_padded, T, A]``, ``[n_padded, T]``).

    Returns:
      ``values [T, n_padded, A]``, ``node_mask [T, n_padded, A]`` (true where the slot holds a
      value) and ``round_mask [T, n_padded]`` (true where the round executed).
    """
    col = combined(col)
    if layout is None:
        layout = node_layout(col, t_max=t_max, n_agents=n_agents, n_padded=n_padded)
    flat = pc.list_flatten(pc.list_flatten(col))
    if len(flat) != layout.position.size:
        raise ValueError(f"layout has {layout.position.size} slots, the column {len(flat)}")
    position = layout.position
    valid = None
    if flat.null_count:
        valid = flat.is_valid().to_numpy(zero_copy_only=False)
        position = position[valid]
    values = np.full(layout.shape, fill, dtype)
    node_mask = np.zeros(layout.shape, bool)
    if leaf_values is None:
        data = (flat if valid is None else flat.drop_null()).to_numpy(zero_copy_only=False)
    else:
        leaf_values = np.asarray(leaf_values)
        if leaf_values.shape != (len(flat),):
            raise ValueError(f"leaf_values must have one value per slot ({len(flat)}), got "
                             f"shape {leaf_values.shape}")
        data = leaf_values if valid is None else leaf_values[valid]
    values.reshape(-1)[position] = data
    node_mask.reshape(-1)[position] = True
    return values, node_mask, layout.round_mask.copy()
