"""UAAD's per-round risk (DESIGN.md, "UAAD"): the largest step risk of each round.

Step risk ``u = w_h h + w_q q + w_d d`` with ``h`` the normalised token entropy of the step,
``q`` the answer-level inconsistency (1 - the dominant cluster share) and ``d`` the
cross-agent divergence, each in [0, 1]. The round's risk is the maximum over its agents'
steps.

Two sources, whole-column NumPy over Arrow buffers (no per-record Python):

* :func:`round_risk_from_steps`: the canonical ragged node columns ``step_h``, ``step_q``,
  ``step_d`` (``[round][agent][step]`` per trajectory, the three of identical shape);
* :func:`round_risk_derived`: one step per round, derived from what a debate corpus has:
  ``q_t = 1 - agreement_t``, ``h_t = min(token_entropy_t / entropy_max, 1)`` (the mean token
  entropy of the round in nats over the largest it can be: ``ln k`` for entropies of
  renormalised top-k distributions) and ``d_t`` = the share of pairs of the round's
  answering agents whose answers differ (the vote classes agreement counts; 0 with fewer
  than two answers).
"""

from __future__ import annotations

import math

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from fastuq.engine.errors import RecordError
from fastuq.io.arrow_lists import combined, list_lengths, offsets
from fastuq.io.pack import pack_offsets

__all__ = ["DEFAULT_ENTROPY_MAX", "STEP_COLUMNS", "class_votes", "pair_disagreement",
           "round_risk_derived", "round_risk_from_steps"]

#: The step-signal columns, in the order of the weights ``(w_h, w_q, w_d)``.
STEP_COLUMNS = ("step_h", "step_q", "step_d")
#: Default ``entropy_max``: ln 5, the largest entropy of a renormalised top-5 distribution
#: (top-5 is what most APIs return).
DEFAULT_ENTROPY_MAX = math.log(5.0)


def _segment_max(values: np.ndarray, lengths: np.ndarray, empty: float) -> np.ndarray:
    """Max of each consecutive segment of ``values`` (``lengths`` per segment); ``empty``
    for a segment of length 0."""
    out = np.full(lengths.size, empty, values.dtype if values.size else np.float64)
    full = lengths > 0
    if full.any():
        starts = offsets(lengths)[:-1][full]
        out[full] = np.maximum.reduceat(values, starts)
    return out


def _name(ids, n: int) -> str:
    return repr(ids[n]) if ids is not None else str(n)


def round_risk_from_steps(
    columns: dict[str, pa.Array], weights: tuple[float, float, float], *, dtype=np.float64,
    ids=None,
) -> tuple[np.ndarray, np.ndarray]:
    """Round risk from ``step_h``, ``step_q``, ``step_d``: ``(risk [T, N], round_mask [T, N])``.

    Args:
      columns: the three columns by name, each ``list<list<list<number>>>`` (one list per
        trajectory of rounds of agents of steps; a null agent or an empty list has no steps).
      weights: ``(w_h, w_q, w_d)``.
      ids: trajectory ids for messages.

    Raises :class:`RecordError` naming the trajectory, round, agent, step and field where
    the three columns differ in shape or a value is missing, not finite or outside [0, 1],
    and naming the trajectory and round of an executed round without any step (no agent
    has a step there): its risk is unknown, and is neither taken as 0 nor derived from
    other columns (a corpus without the step columns derives every round's risk, see
    :func:`round_risk_derived`).
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
    total = np.zeros(len(base[4]), np.float64)
    for (name, r_len, a_len, s_len, values), w in zip(levels, weights, strict=True):
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
        total += w * v
    node_max = _segment_max(total, base[3], -np.inf)
    round_max = _segment_max(node_max, base[2], -np.inf)
    empty = ~np.isfinite(round_max)  # no agent of the round has a step
    if empty.any():
        owner = _owner_of(1, int(np.argmax(empty)), base[1], base[2])
        raise RecordError(
            f"trajectory {_name(ids, owner[0])}{_where(owner)}: no step signals (every "
            f"agent's {', '.join(STEP_COLUMNS)} list is null or empty), so the round has no "
            f"risk; give its steps, or leave out the three step columns to derive every "
            f"round's risk from agreement, token_entropy and answers (field step_h)",
            row=owner[0])
    return pack_offsets(round_max, offsets(base[1]), dtype=dtype)


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


def class_votes(answer_class: np.ndarray) -> np.ndarray:
    """``[T, N, A]`` int32: the votes of the class each slot voted for (the slot's own
    included), 0 where the slot cast no vote; ``answer_class [T, N, A]``, -1: no vote."""
    cls = np.asarray(answer_class)
    votes = cls >= 0
    count = np.zeros(cls.shape, np.int32)
    for b in range(cls.shape[2]):
        count += (cls == cls[:, :, b:b + 1]) & votes[:, :, b:b + 1]
    return count * votes


def pair_disagreement(answer_class: np.ndarray) -> np.ndarray:
    """``d [T, N]``: the share of pairs of a round's answering agents whose vote classes
    differ, from ``answer_class [T, N, A]`` (-1: no vote); 0 with fewer than two votes."""
    same = class_votes(answer_class)
    m = (np.asarray(answer_class) >= 0).sum(axis=2)
    pairs_same = (same.sum(axis=2) - m) / 2.0  # minus the slot itself
    pairs = m * (m - 1) / 2.0
    with np.errstate(invalid="ignore", divide="ignore"):
        return np.where(m >= 2, 1.0 - pairs_same / np.maximum(pairs, 1), 0.0)


def round_risk_derived(
    agreement: np.ndarray, token_entropy: np.ndarray, answer_class: np.ndarray,
    round_mask: np.ndarray, weights: tuple[float, float, float], entropy_max: float,
) -> np.ndarray:
    """Round risk ``[T, N]`` derived from the round signals (see the module docstring); 0 in
    masked rounds. ``agreement``, ``token_entropy``: ``[T, N]`` checked values;
    ``answer_class``: ``[T, N, A]``."""
    w_h, w_q, w_d = weights
    h = np.minimum(np.asarray(token_entropy, np.float64) / entropy_max, 1.0)
    q = 1.0 - np.asarray(agreement, np.float64)
    d = pair_disagreement(answer_class)
    return np.where(round_mask, w_h * h + w_q * q + w_d * d, 0.0)
