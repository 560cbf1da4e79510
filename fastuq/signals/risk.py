"""UAAD's step signals packed for its kernel (DESIGN.md, "UAAD"): the ragged node columns
``step_h``, ``step_q``, ``step_d`` (``[round][agent][step]`` per trajectory, each in [0, 1])
checked and padded into time-major arrays ``[T, N, S]``, the agents' steps of a round side by
side on the slot axis ``S``.

Only the packing and the checks live here (whole-column NumPy over Arrow buffers, no
per-record Python): the step risk ``u = w_h h + w_q q + w_d d``, its maximum over a round,
the derivation of h, q and d from round signals where a corpus has no step columns, and the
routing are the kernel's (:mod:`fastuq.kernels.uaad`: kernel, twin and reference).
"""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from fastuq.errors import RecordError
from fastuq.io.arrow_lists import combined, list_lengths, offsets

__all__ = ["STEP_COLUMNS", "pack_steps"]

#: The step-signal columns, in the order of the weights ``(w_h, w_q, w_d)``.
STEP_COLUMNS = ("step_h", "step_q", "step_d")


def _name(ids, n: int) -> str:
    return repr(ids[n]) if ids is not None else str(n)


def _slots(widest: int) -> int:
    """Step slots allocated for a round of ``widest`` steps: the next power of two (at
    least 1), so that chunks of similar width share one compiled kernel shape."""
    return 1 << max(int(widest) - 1, 0).bit_length()


def pack_steps(
    columns: dict[str, pa.Array], *, dtype=np.float64, ids=None,
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """``(step_h, step_q, step_d, step_mask, round_mask)``: the three step columns padded to
    ``[T, N, S]`` (``S``: the most steps in any round, all its agents together, rounded up
    to a power of two; padding 0 and ``step_mask`` false) and the rounds ``[T, N]``.

    Args:
      columns: the three columns by name, each ``list<list<list<number>>>`` (one list per
        trajectory of rounds of agents of steps; a null agent or an empty list has no steps).
      dtype: the float dtype of the step arrays.
      ids: trajectory ids for messages.

    Raises :class:`RecordError` naming the trajectory, round, agent, step and field where
    the three columns differ in shape or a value is missing, not finite or outside [0, 1],
    and naming the trajectory and round of an executed round without any step (no agent
    has a step there): its risk is unknown, and is neither taken as 0 nor derived from
    other columns (a corpus without the step columns derives every round's risk in the
    kernel).
    """
    cols = [combined(columns[name]) for name in STEP_COLUMNS]
    n = len(cols[0])
    levels = []  # per column: (round lengths [N], agent lengths [R], step lengths [S], values)
    for name, col in zip(STEP_COLUMNS, cols, strict=True):
        if len(col) != n:
            raise ValueError(f"{name} has {len(col)} trajectories, {STEP_COLUMNS[0]} {n}")
        r_len = list_lengths(col)[0]
        rounds = pc.list_flatten(col)
        a_len = list_lengths(rounds)[0]
        nodes = pc.list_flatten(rounds)
        s_len = list_lengths(nodes)[0]
        values = pc.list_flatten(nodes)
        levels.append((name, r_len, a_len, s_len, values))
    base = levels[0]
    for name, r_len, a_len, s_len, _ in levels[1:]:
        for k, (mine, ref, what) in enumerate(((r_len, base[1], "rounds"),
                                               (a_len, base[2], "agents"),
                                               (s_len, base[3], "steps"))):
            if not np.array_equal(mine, ref):
                j = int(np.argmax(mine != ref))
                owner = _owner_of(k, j, base[1], base[2])
                raise RecordError(
                    f"trajectory {_name(ids, owner[0])}{_where(owner)}: {name} has "
                    f"{int(mine[j])} {what} but {base[0]} has {int(ref[j])} (field {name})",
                    row=owner[0])
    packed_values = []
    for name, r_len, a_len, s_len, values in levels:
        valid = values.is_valid().to_numpy(zero_copy_only=False)
        v = values.fill_null(np.nan).to_numpy(zero_copy_only=False).astype(np.float64)
        with np.errstate(invalid="ignore"):
            bad = ~valid | ~np.isfinite(v) | (v < 0) | (v > 1)
        if bad.any():
            j = int(np.argmax(bad))
            node = np.searchsorted(offsets(s_len), j, side="right") - 1
            owner = _owner_of(2, int(node), r_len, a_len)
            step = j - int(offsets(s_len)[node])
            raise RecordError(
                f"trajectory {_name(ids, owner[0])}{_where(owner)}, step {step}: {name} = "
                f"{None if not valid[j] else v[j]} is not a number in [0, 1] (field {name})",
                row=owner[0])
        packed_values.append(v)
    _, r_len, a_len, s_len, _ = base
    # steps per round (all its agents): sum of the node step counts over each round's agents
    node_round = np.repeat(np.arange(a_len.size), a_len)
    round_steps = np.bincount(node_round, weights=s_len, minlength=a_len.size).astype(np.int64)
    empty = round_steps == 0  # no agent of the round has a step
    if empty.any():
        owner = _owner_of(1, int(np.argmax(empty)), r_len, a_len)
        raise RecordError(
            f"trajectory {_name(ids, owner[0])}{_where(owner)}: no step signals (every "
            f"agent's {', '.join(STEP_COLUMNS)} list is null or empty), so the round has no "
            f"risk; give its steps, or leave out the three step columns to derive every "
            f"round's risk from agreement, token_entropy and answers (field step_h)",
            row=owner[0])
    t_max = int(r_len.max()) if n else 0
    width = _slots(int(round_steps.max()) if round_steps.size else 0)
    # each value's (trajectory, round, slot): its round's global index, then its place in it
    value_round = np.repeat(np.arange(round_steps.size), round_steps)
    slot = np.arange(value_round.size) - offsets(round_steps)[:-1][value_round]
    round_traj = np.repeat(np.arange(n), r_len)
    round_t = np.arange(round_steps.size) - offsets(r_len)[:-1][round_traj]
    rows, ts = round_traj[value_round], round_t[value_round]
    step_mask = np.zeros((t_max, n, width), bool)
    step_mask[ts, rows, slot] = True
    out = []
    for v in packed_values:
        arr = np.zeros((t_max, n, width), dtype)
        arr[ts, rows, slot] = v
        out.append(arr)
    round_mask = np.arange(t_max)[:, None] < r_len[None, :]
    return out[0], out[1], out[2], step_mask, round_mask


def _owner_of(level: int, j: int, r_len: np.ndarray, a_len: np.ndarray) -> tuple[int, ...]:
    """``(trajectory, round[, agent])`` owning entry ``j`` of level 0 (rounds per
    trajectory), 1 (agents per round) or 2 (steps per node)."""
    if level == 0:
        return (j,)
    r_off = offsets(r_len)
    if level == 1:
        n = int(np.searchsorted(r_off, j, side="right") - 1)
        return (n, j - int(r_off[n]))
    a_off = offsets(a_len)
    r = int(np.searchsorted(a_off, j, side="right") - 1)
    n = int(np.searchsorted(r_off, r, side="right") - 1)
    return (n, r - int(r_off[n]), j - int(a_off[r]))


def _where(owner: tuple[int, ...]) -> str:
    parts = []
    if len(owner) > 1:
        parts.append(f"round {owner[1]}")
    if len(owner) > 2:
        parts.append(f"agent {owner[2]}")
    return (", " + ", ".join(parts)) if parts else ""
