"""What stopping a saved debate after each round gives, and the sums a policy grid needs
(DESIGN.md, "UAAD"): the answer slot of each round under the final-answer rule
(:func:`round_answer_slots`), each round's correctness and cumulative calls
(:func:`round_outcomes`), the stop rounds of a threshold policy (:func:`stop_rounds`) and the
one-pass grid sums over a whole grid (:func:`grid_sums`, :func:`uaad_grid_sums`). The
policies and the replay that uses them: :mod:`fastuq.decisions.replay`.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pyarrow as pa

__all__ = ["CALLS", "STOP_METRICS", "Outcomes", "grid_sums", "metric_stack", "metrics_at",
           "round_answer_slots", "round_outcomes", "stop_rounds", "uaad_grid_sums"]


#: Per-stop quantities summed over trajectories (rows of the metric stack).
STOP_METRICS = ("correct", "calls", "flips", "stop", "calls_uaad")
CALLS = ("team", "nodes")
@dataclass(frozen=True)
class Outcomes:
    """What stopping after each round gives, per trajectory.

    correct: ``[T, N]`` bool, the round's answer is correct (False in unexecuted rounds).
    calls: ``[T, N]`` float64, model calls to stop after the round (cumulative).
    last: ``[N]`` int64, the last executed round.
    n_agents: ``[N]`` float64, the initial team size.
    """

    correct: np.ndarray
    calls: np.ndarray
    last: np.ndarray
    n_agents: np.ndarray


def round_answer_slots(batch) -> np.ndarray:
    """``[T, N]`` int64: the slot whose answer is each round's answer under the final-answer
    rule, :func:`fastuq.signals.final_answer_slot` of the batch's vote classes and its
    ``active`` agents (-1: no active agent answers; also in unexecuted rounds)."""
    from fastuq.signals.final import final_answer_slot

    cls, _ = batch.answer_classes()
    return final_answer_slot(cls, batch.active())


def round_outcomes(batch, calls: str = "team") -> Outcomes:
    """Per-round answers checked against ``reference``, and the calls to each round, for a
    :class:`~fastuq.engine.batch.Batch` with ``answers`` and ``reference``.

    The round's answer: :func:`fastuq.signals.final_answer_slot` of the round (the majority
    of the vote classes agreement counts among the agents that are active, the ``active``
    column, and answer; ties to the lowest slot), that slot's string; at the last executed
    round, the corpus's ``final_answer`` instead where the corpus has that column (a null
    there: no answer), so that the full debate's verdicts are the import's. Answers are
    checked against the reference by :func:`fastuq.answers.check_coded` (the verdicts of
    :func:`~fastuq.answers.check_answers`; with math-verify when the batch was built with
    ``math``), each distinct (answer, reference) pair once; the rest is whole-array NumPy. A
    trajectory without a reference is checked as wrong in every round (:func:`replay`
    refuses or skips it first).
    """
    import pyarrow.compute as pc

    from fastuq.answers import check_coded

    if calls not in CALLS:
        raise ValueError(f"calls must be one of {CALLS}, got {calls!r}")
    for name in ("answers", "reference"):
        if name not in batch.table.column_names:
            raise ValueError(f"{batch.source or 'corpus'}: replay needs a {name} column (the "
                             f"answer of every round is checked against the reference)")
    cls, round_mask = batch.answer_classes()
    answers, classes = batch.vote_classes()
    slot = round_answer_slots(batch)  # [T, N], -1: no active agent answers
    winner = np.take_along_axis(cls, np.maximum(slot, 0)[..., None], axis=2)[..., 0]
    winner = np.where(slot >= 0, winner, -1).astype(np.int64)
    last = round_mask.sum(axis=0).astype(np.int64) - 1

    # one answer string per class (its first slot), checked once per (class, reference)
    n_cls = int(classes.max()) + 1 if classes.size else 0
    first = np.full(max(n_cls, 1), -1, np.int64)
    voted = np.flatnonzero(classes >= 0)
    first[classes[voted][::-1]] = voted[::-1]
    flat = pc.list_flatten(pc.list_flatten(answers))
    names = flat.take(pa.array(first[:n_cls])).cast(pa.string()).to_pylist()
    n_t, n = winner.shape
    if "final_answer" in batch.table.column_names and n:
        # the last round's answer is the corpus's own (the importer's rule, e.g. FORD's)
        fin = pc.dictionary_encode(batch.column("final_answer").cast(pa.string()))
        f_code = fin.indices.fill_null(-1).to_numpy(zero_copy_only=False).astype(np.int64)
        names = names + fin.dictionary.to_pylist()
        ran = np.flatnonzero(last >= 0)
        winner[last[ran], ran] = np.where(f_code[ran] >= 0, n_cls + f_code[ran], -1)
        n_cls = len(names)
    ref = pc.dictionary_encode(batch.column("reference").cast(pa.string()))
    ref_codes = ref.indices.fill_null(-1).to_numpy(zero_copy_only=False).astype(np.int64)
    golds = ref.dictionary.to_pylist()
    r_code = np.broadcast_to(ref_codes, (n_t, n))
    ok = (winner >= 0) & (r_code >= 0) & round_mask
    n_ref = max(len(golds), 1)
    key = winner[ok] * n_ref + r_code[ok]
    if n_cls * n_ref <= 1 << 27:  # a bitmap of the pairs: no sort
        seen = np.zeros(n_cls * n_ref, bool)
        seen[key] = True
        distinct = np.flatnonzero(seen)
        pos = np.zeros(n_cls * n_ref, np.int64)
        pos[distinct] = np.arange(distinct.size)
        inverse = pos[key]
    else:
        distinct, inverse = np.unique(key, return_inverse=True)
    verdict = check_coded(names, golds, distinct // n_ref, distinct % n_ref,
                          math=batch.math, processes=batch.processes)
    correct = np.zeros((n_t, n), bool)
    correct[ok] = verdict[inverse.reshape(-1)]

    team = np.maximum(batch.team_sizes("answers"), 1).astype(np.float64)
    if calls == "team":
        per_round = np.where(round_mask, team[None, :], 0.0)
    else:  # the answers given: non-null entries of the round's list
        from fastuq.io.pack import pack_nodes

        node_mask = pack_nodes(answers, dtype=np.int8, n_agents=batch.n_slots, fill=0,
                               leaf_values=np.zeros(len(flat), np.int8))[1]
        per_round = node_mask.sum(axis=2).astype(np.float64)
    return Outcomes(correct=correct, calls=np.cumsum(per_round, axis=0), last=last,
                    n_agents=team)


def metric_stack(out: Outcomes, agents: np.ndarray) -> np.ndarray:
    """``[K, T, N]`` float64: each metric of :data:`STOP_METRICS` were the stop at round ``t``.
    ``agents``: ``[N]`` the agents UAAD's budget charges per debate round."""
    n_t, n = out.correct.shape
    correct = out.correct.astype(np.float64)
    seen = np.zeros((n_t, n), bool)
    if n_t > 1:
        seen[1:] = np.logical_or.accumulate(out.correct, axis=0)[:-1]
    flips = (seen & ~out.correct).astype(np.float64)
    t = np.broadcast_to(np.arange(n_t, dtype=np.float64)[:, None], (n_t, n))
    calls_uaad = out.n_agents[None, :] + agents[None, :] * t + 1.0
    return np.stack([correct, out.calls, flips, t, calls_uaad])


def _distinct_patterns(reach: np.ndarray, first: np.ndarray, cap: np.ndarray,
                       g: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """Trajectories with equal ``(reach [T], first [T], cap)`` stop at the same round at every
    grid point, so their metrics can be summed first (:func:`grid_sums` is linear in ``g``):
    ``(reach [T, U], first [T, U], cap [U], g [K, T, U])`` over the ``U`` distinct patterns.
    Agreements are fractions k / A, so a debate corpus has few patterns (hundreds for 3
    agents and 5 rounds), whatever its size."""
    n_t, n = reach.shape
    first = np.minimum(first, np.iinfo(np.int64).max // 4)
    cols = np.concatenate([reach, first, cap[None, :]]).astype(np.int64)
    base = int(cols.max()) + 1 if cols.size else 1
    if n == 0:
        return reach, first, cap, g
    if base ** cols.shape[0] < 2**62:  # one int64 per pattern
        key = np.zeros(n, np.int64)
        for row in cols:
            key = key * base + row
        _, keep, inverse = np.unique(key, return_index=True, return_inverse=True)
    else:
        _, keep, inverse = np.unique(cols.T, axis=0, return_index=True, return_inverse=True)
    inverse = inverse.reshape(-1)
    u = keep.size
    summed = np.empty((g.shape[0], n_t, u))
    for k in range(g.shape[0]):
        for t in range(n_t):
            summed[k, t] = np.bincount(inverse, weights=g[k, t], minlength=u)
    return reach[:, keep], first[:, keep], cap[keep], summed


def metrics_at(g: np.ndarray, stop: np.ndarray) -> np.ndarray:
    """``[K]`` sums over trajectories of ``g [K, T, N]`` at ``stop [N]``."""
    return g[:, stop, np.arange(stop.size)].sum(axis=1)


def grid_sums(g: np.ndarray, active: np.ndarray, first: np.ndarray, cap: np.ndarray,
              n_grid: int) -> np.ndarray:
    """Sums over trajectories of each metric at every grid point: ``[K, n_grid]``.

    At grid point ``j`` a trajectory stops at the first round ``t <= cap`` with
    ``active[t]`` and ``first[t] <= j`` (``first[t]``: the first grid index at which round
    ``t``'s condition holds; the grid is ordered so that a condition that holds at ``j``
    holds at every later ``j``), else at ``cap``.

    Args:
      g: ``[K, T, N]`` each metric were the stop at round ``t``.
      active, first: ``[T, N]`` bool and int.
      cap: ``[N]`` int, the round a trajectory stops at when no condition holds.

    Per trajectory the stop is a non-increasing step function of ``j``; only the rounds that
    lower it (a round ``t`` whose ``first`` is below that of every earlier active round)
    change it, at their ``first``, from the next such later round (or ``cap``) to ``t``. Those
    changes of every metric are binned and summed cumulatively: ``O(K N T)``.
    """
    n_t, n = active.shape
    t_idx = np.arange(n_t)[:, None]
    big = np.int64(n_grid)
    key = np.where(active & (t_idx <= cap[None, :]), np.minimum(first, big), big)
    before = np.empty_like(key)
    before[0] = big
    if n_t > 1:
        before[1:] = np.minimum.accumulate(key, axis=0)[:-1]
    useful = (key < before) & (key < big)
    later = np.where(useful, t_idx, cap[None, :])
    nxt = np.empty_like(later)
    nxt[-1] = cap
    if n_t > 1:
        nxt[:-1] = np.minimum.accumulate(later[::-1], axis=0)[::-1][1:]
    base = metrics_at(g, cap)
    tt, nn = np.nonzero(useful)
    out = np.empty((g.shape[0], n_grid))
    bins = key[tt, nn]
    for k in range(g.shape[0]):
        delta = g[k, tt, nn] - g[k, nxt[tt, nn], nn]
        out[k] = base[k] + np.cumsum(np.bincount(bins, weights=delta, minlength=n_grid))
    return out


def uaad_grid_sums(g: np.ndarray, agreement: np.ndarray, mask: np.ndarray, cap: np.ndarray,
                   taus: np.ndarray, eps: np.ndarray) -> np.ndarray:
    """UAAD's consensus stop over the grid ``taus x eps`` (each sorted ascending): sums of
    each metric of ``g [K, T, N]`` at every point, ``[K, len(taus), len(eps)]``.

    Round ``t >= 1`` stops at ``(tau, eps)`` when ``agreement[t] >= tau`` and
    ``|agreement[t] - agreement[t-1]| <= eps`` (with the uaad kernel's slack of
    :data:`~fastuq.kernels.uaad.MOVED_SLACK_ULPS` ulps, in float64); else the stop is ``cap``.
    Trajectories are grouped by their stop pattern (:func:`_distinct_patterns`), then one
    :func:`grid_sums` pass per ``tau``."""
    from fastuq.kernels.uaad import MOVED_SLACK_ULPS

    agreement = np.asarray(agreement, np.float64)
    n_t, n = agreement.shape
    slack = MOVED_SLACK_ULPS * np.finfo(np.float64).eps
    moved = np.full((n_t, n), np.inf)
    if n_t > 1:
        moved[1:] = np.abs(agreement[1:] - agreement[:-1])
    first = np.searchsorted(eps + slack, moved, side="left")
    # round t can stop for taus[i] iff i < reach[t] (taus[i] <= C_t)
    t_idx = np.arange(n_t)[:, None]
    reach = np.where(mask & (t_idx >= 1), np.searchsorted(taus, agreement, side="right"), 0)
    reach, first, cap, g = _distinct_patterns(reach, first, cap, g)
    out = np.empty((g.shape[0], taus.size, eps.size))
    for i in range(taus.size):
        out[:, i, :] = grid_sums(g, reach > i, first, cap, eps.size)
    return out


def stop_rounds(active: np.ndarray, first: np.ndarray, cap: np.ndarray, j: int) -> np.ndarray:
    """The direct evaluation of one grid point ``j`` (see :func:`grid_sums`): ``[N]`` stop
    rounds. For tests and single points; :func:`grid_sums` evaluates whole grids."""
    n_t = active.shape[0]
    hit = active & (first <= j) & (np.arange(n_t)[:, None] <= cap[None, :])
    any_hit = hit.any(axis=0)
    return np.where(any_hit, np.argmax(hit, axis=0), cap)
