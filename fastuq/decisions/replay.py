"""Budget-policy replay over saved full-length debates (DESIGN.md, "UAAD").

A saved debate holds every round a stopping or routing policy could have stopped after.
Replay asks, per policy and per parameter point, what the policy would have cost and gained
on those debates: the accuracy of the answer at its stop, the model calls it spends, the
calls it saves against the full debate, and its flips (trajectories whose answer was correct
at some earlier round and is wrong at the stop).

Semantics (DESIGN.md): rounds are indexed from 0 (the initial answers); the answer at a stop
after round ``t`` is the final-answer rule applied to round ``t``,
:func:`fastuq.signals.final_answer_slot`: the majority of the answers given in that round
by the agents still in the team (the ``active`` column, DyLAN's ranker survivors; without
it every agent), by the vote classes agreement counts, ties to the lowest slot; no answer:
wrong. At the last executed round the answer is the corpus's ``final_answer`` where the
corpus has that column (a null there: no answer), so a full-length replay gives the
import's verdicts for every trajectory, also where a source defines its own rule (FORD's
majority over every turn of the debate; a judge's or moderator's decision); where the
column is absent the rule above decides that round too (the importers' ``last_round`` rule
is the same function, so for DyLAN or Du et al. both give the same answer). Answers are
checked against ``reference``: a debate without one is an error, or skipped and counted
under ``on_error="skip"``. Stopping after round ``t`` in a debate of ``A`` agents costs
``A (t + 1)`` calls (``calls="team"``), or, with ``calls="nodes"``, the answers actually
given in rounds ``0..t`` (for protocols that prune agents, such as DyLAN).

Policies (each a :class:`Policy`):

``fixed``       stop after round ``r - 1`` for ``r = 1..T`` rounds (capped at the last
                executed round); ``r = T`` is the full debate.
``uaad``        UAAD's consensus stop: the first round ``t >= 1`` with dominant share
                ``C_t >= tau_c`` and ``|C_t - C_{t-1}| <= epsilon`` (with the uaad kernel's
                slack of a few ulps, in float64), else the last round; a grid over
                ``tau_c`` x ``epsilon``.
``uaad_route``  the same stop rule under UAAD's risk routing: the round-0 risk picks a tier
                whose round budget caps the stop (``fastuq.kernels.uaad``; tier parameters
                through ``params``). Replay truncates rounds; it cannot change the team, so
                the answer is still the saved team's: ``calls`` counts the saved debate's
                calls to the stop and ``calls_uaad`` what UAAD's budget ``Q = M + N R + 1``
                would charge (``M`` the team's round-0 answers, ``N`` the tier's agents,
                ``R`` the debate rounds to the stop).
``bccs``        stop at BCCS's first round of full consensus, else the last round (needs a
                ``belief`` column; thresholds through ``params``).
``trace``       a threshold on a registered estimator's score after each round (the score of
                rounds ``0..t``, :func:`~fastuq.engine.runner.run_estimator_rounds`): stop at
                the first round whose score is at most the threshold (scores are
                uncertainties), else the last round; a grid of thresholds.

Grids are evaluated in one vectorized pass per chunk: for each value of the first parameter
(``tau_c``; one pass for ``trace``), every trajectory's stop is a step function of the second
parameter (``epsilon``, the threshold) with at most ``T`` steps; the steps' changes of each
metric are accumulated with one ``bincount`` and a cumulative sum. The cost is
``O(N T)`` per first-parameter value, not ``O(N T x grid)``; the numbers equal the direct
evaluation point by point (:func:`~fastuq.decisions.outcomes.stop_rounds` and
``tests/test_replay.py``). What stopping after each round gives (:class:`Outcomes`) and the
grid sums live in :mod:`fastuq.decisions.outcomes`; this module holds the policies, the
replay itself, its Pareto front and its plot.
"""

from __future__ import annotations

import math
import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

import numpy as np
import pyarrow as pa

from fastuq.decisions.outcomes import (
    CALLS,
    STOP_METRICS,
    Outcomes,
    grid_sums,
    metric_stack,
    metrics_at,
    round_outcomes,
    uaad_grid_sums,
)

__all__ = ["POLICIES", "Policy", "ReplayResult", "pareto_front", "plot_replay", "replay",
           "tie_counts"]


POLICIES = ("fixed", "uaad", "uaad_route", "bccs", "trace")


@dataclass(frozen=True)
class Policy:
    """One policy and its parameter grid.

    name: one of :data:`POLICIES`.
    tau_c, epsilon: the ``uaad`` / ``uaad_route`` grid (each sorted ascending, in [0, 1]).
    estimator: the estimator whose per-round score ``trace`` thresholds.
    thresholds: ``trace``'s grid: an array of thresholds, or an int ``k``: ``k`` quantiles of
      the per-round scores of the first chunk.
    """

    name: str
    tau_c: Sequence[float] | None = None
    epsilon: Sequence[float] | None = None
    estimator: str | None = None
    thresholds: Sequence[float] | int | None = None

    def __post_init__(self) -> None:
        if self.name not in POLICIES:
            raise ValueError(f"unknown policy {self.name!r}; known: {', '.join(POLICIES)}")
        if self.name in ("uaad", "uaad_route"):
            for key in ("tau_c", "epsilon"):
                values = getattr(self, key)
                grid = np.atleast_1d(np.asarray(
                    _DEFAULT_GRID[key] if values is None else values, np.float64))
                if grid.ndim != 1 or not grid.size or not np.isfinite(grid).all() or (
                        (grid < 0) | (grid > 1)).any():
                    raise ValueError(f"policy {self.name}: {key} must be numbers in [0, 1], "
                                     f"got {values!r}")
                object.__setattr__(self, key, tuple(np.unique(grid).tolist()))
        elif self.tau_c is not None or self.epsilon is not None:
            raise ValueError(f"policy {self.name} takes no tau_c / epsilon grid")
        if self.name == "trace":
            if not self.estimator:
                raise ValueError("policy trace needs an estimator (e.g. sauce)")
            from fastuq.engine.registry import get_estimator

            get_estimator(self.estimator)
            th = 32 if self.thresholds is None else self.thresholds
            if isinstance(th, (int, np.integer)) and not isinstance(th, bool):
                if th < 1:
                    raise ValueError(f"policy trace: thresholds must be >= 1, got {th}")
            else:
                grid = np.atleast_1d(np.asarray(th, np.float64))
                if grid.ndim != 1 or not grid.size or not np.isfinite(grid).all():
                    raise ValueError(f"policy trace: thresholds must be finite numbers, got "
                                     f"{th!r}")
                th = tuple(np.unique(grid).tolist())
            object.__setattr__(self, "thresholds", th)
        else:
            if self.estimator is not None or self.thresholds is not None:
                raise ValueError(f"policy {self.name} takes no estimator / thresholds")

    @property
    def label(self) -> str:
        return f"trace:{self.estimator}" if self.name == "trace" else self.name


_DEFAULT_GRID = {"tau_c": np.linspace(0.5, 1.0, 32), "epsilon": np.linspace(0.0, 0.5, 32)}


@dataclass
class ReplayResult:
    """The replay table (one row per policy and parameter point) and its summary.

    table: a pyarrow Table with columns ``policy``, ``estimator``, ``rounds``, ``tau_c``,
      ``epsilon``, ``threshold`` (nulls where a policy has no such parameter), ``n``,
      ``accuracy``, ``calls_mean``, ``calls_total``, ``calls_saved`` (calls saved against the
      full debate), ``calls_saved_frac``, ``flips``, ``flip_rate``, ``stop_mean`` (mean stop
      round), ``calls_uaad_mean`` (UAAD's ``Q``, ``uaad``/``uaad_route`` rows only),
      ``pareto`` (on the accuracy-versus-mean-calls front; one row per distinct point, the
      first of the rows tied on it) and ``tied`` (how many rows have exactly this row's mean
      calls and accuracy).
    full: the full debate's row as a dict.
    notes: what replay derived or assumed (e.g. risk signals derived from round signals).
    skipped: the records left out under ``on_error="skip"`` (with their reasons), in order.
    """

    table: pa.Table
    full: dict
    notes: list[str] = field(default_factory=list)
    skipped: list = field(default_factory=list)

    def front(self) -> pa.Table:
        """The rows on the Pareto front, by mean calls."""
        import pyarrow.compute as pc

        front = self.table.filter(self.table.column("pareto"))
        return front.take(pc.sort_indices(front, [("calls_mean", "ascending")]))


def pareto_front(calls: np.ndarray, accuracy: np.ndarray) -> np.ndarray:
    """``[G]`` bool: the points no other point dominates (no more calls and at least the
    accuracy, one of them strictly), one per distinct (calls, accuracy): of points tied
    exactly on both, only the first (in the order given) is on the front, so a grid whose
    many parameter points give the same stops lists that point once (:func:`tie_counts`
    says how many it stands for)."""
    calls = np.asarray(calls, np.float64)
    accuracy = np.asarray(accuracy, np.float64)
    order = np.lexsort((np.arange(calls.size), -accuracy, calls))
    best = -np.inf
    on = np.zeros(calls.size, bool)
    for i in order.tolist():
        if accuracy[i] > best:
            on[i] = True
            best = accuracy[i]
    return on


def tie_counts(calls: np.ndarray, accuracy: np.ndarray) -> np.ndarray:
    """``[G]`` int64: for each point, how many points (itself included) have exactly its
    mean calls and accuracy."""
    pts = np.stack([np.asarray(calls, np.float64), np.asarray(accuracy, np.float64)], axis=1)
    if not len(pts):
        return np.zeros(0, np.int64)
    _, inverse, counts = np.unique(pts, axis=0, return_inverse=True, return_counts=True)
    return counts[inverse.reshape(-1)].astype(np.int64)


def _needed(policies: Sequence[Policy]) -> list[str]:
    methods = []
    for p in policies:
        if p.name == "uaad_route":
            methods.append("uaad")
        elif p.name == "bccs":
            methods.append("bccs")
        elif p.name == "trace":
            methods.append(p.estimator)
    return list(dict.fromkeys(methods)) or ["last_agreement"]


def replay(
    source,
    policies: Sequence[Policy | str] = ("fixed", "uaad"),
    *,
    params: Mapping[str, object] | None = None,
    protocol: str | None = None,
    calls: str = "team",
    dtype: str | np.dtype = "float64",
    backend: str = "jax",
    chunk_rows: int = 1 << 18,
    observation_noise: float | None = None,
    math: bool = False,
    processes: int | None = None,
    check: str = "corpus",
    on_error: str = "raise",
    skipped: list | None = None,
) -> ReplayResult:
    """Replay ``policies`` over the saved debates of ``source`` (see the module docstring).

    Args:
      source: anything :func:`fastuq.iter_scores` reads; needs ``answers`` and ``reference``
        (and what each policy's estimator reads).
      policies: :class:`Policy` objects or policy names (default grids).
      params: estimator parameters (UAAD's tiers and weights, BCCS's thresholds, SAUCE's
        ``lam`` ...), as for :func:`fastuq.score`.
      calls: ``"team"`` (``A (t + 1)``) or ``"nodes"`` (answers given) per stop.
      dtype, backend, chunk_rows, observation_noise, math, processes, check: as for
        :func:`fastuq.iter_scores`.
      on_error: ``"raise"`` (default): a bad record stops the run with a ValueError naming
        it, as does a debate without a ``reference`` (null or empty: its answers cannot be
        checked, and counting it as wrong in every round would bias every policy's
        accuracy). ``"skip"``: such records are left out of every policy alike, and listed
        with their reasons in ``ReplayResult.skipped`` (and appended to ``skipped``, a
        caller-owned list, when given).

    Returns:
      a :class:`ReplayResult`. Memory is bounded by the chunk: every metric is a sum.
    """
    from fastuq.engine.pipeline import iter_scores
    from fastuq.engine.registry import get_estimator
    from fastuq.engine.runner import run_estimator_rounds

    pols = [p if isinstance(p, Policy) else Policy(str(p)) for p in policies]
    if not pols:
        raise ValueError("no policy given")
    labels = [(p.label, p.tau_c, p.epsilon, p.thresholds) for p in pols]
    if len(set(map(str, labels))) != len(labels):
        raise ValueError("a policy is given twice")
    if calls not in CALLS:
        raise ValueError(f"calls must be one of {CALLS}, got {calls!r}")
    if on_error not in ("raise", "skip"):
        raise ValueError(f"on_error must be 'raise' or 'skip', got {on_error!r}")
    left_out: list = [] if skipped is None else skipped
    n_before = len(left_out)
    params = {k: v for k, v in (params or {}).items() if v is not None}
    methods = _needed(pols)
    uaad_params = {k: v for k, v in params.items() if k in get_estimator("uaad").param_names}
    rounds_key = ("rounds_low", "rounds_medium", "rounds_high")
    agents_key = ("agents_low", "agents_medium", "agents_high")

    acc: dict[int, np.ndarray] = {}  # policy index -> [K, points] sums
    fixed_sums: list[np.ndarray] = []
    full_sum = None
    total = 0
    grids: dict[int, np.ndarray] = {}
    notes: list[str] = []
    chunks = iter_scores(source, methods=methods, protocol=protocol, params=params,
                         dtype=dtype, backend=backend, chunk_rows=chunk_rows,
                         observation_noise=observation_noise, math=math, processes=processes,
                         check=check, on_error=on_error,
                         skipped=left_out if on_error == "skip" else None,
                         extra_columns=("reference", "answers", "final_answer", "active"))
    for batch, scores in chunks:
        keep = _with_reference(batch, on_error, left_out)
        if keep is not None and not keep.size:
            continue
        out = _take_outcomes(round_outcomes(batch, calls), keep)
        scores = {k: v if keep is None else np.asarray(v)[keep] for k, v in scores.items()}
        n_t, n = out.correct.shape
        total += n
        if not notes and any(p.name == "uaad_route" for p in pols):
            from fastuq.signals.risk import STEP_COLUMNS

            if not all(batch.has(c) for c in STEP_COLUMNS):
                notes.append("uaad_route: the corpus has no step_h/step_q/step_d; the risk was "
                             "derived per round (q = 1 - agreement, h = token entropy / "
                             "entropy_max, d = share of disagreeing answer pairs)")
        g_team = metric_stack(out, out.n_agents)
        # fixed rounds r = 1..T: a longer chunk adds rows, at which every earlier
        # trajectory (all shorter) stops at its last round, as in the full debate
        while len(fixed_sums) < n_t:
            fixed_sums.append(np.zeros(len(STOP_METRICS)) if full_sum is None
                              else full_sum.copy())
        for r in range(1, len(fixed_sums) + 1):
            stop = np.minimum(r - 1, out.last)
            fixed_sums[r - 1] = fixed_sums[r - 1] + metrics_at(g_team, stop)
        full = metrics_at(g_team, out.last)
        full_sum = full if full_sum is None else full_sum + full
        agreement, mask = batch.rounds("agreement")
        if keep is not None:
            agreement, mask = agreement[:, keep], mask[:, keep]
        for k, p in enumerate(pols):
            if p.name == "fixed":
                continue
            if p.name in ("uaad", "uaad_route"):
                taus = np.asarray(p.tau_c)
                eps = np.asarray(p.epsilon)
                cap = out.last
                g = g_team
                if p.name == "uaad_route":
                    est = get_estimator("uaad")
                    tier = scores["uaad_tier"].astype(np.int64)
                    values = est.param_values(n, None, uaad_params, np.float64)
                    r_cap = np.choose(tier, [np.broadcast_to(values[key], (n,))
                                             for key in rounds_key])
                    agents = np.choose(tier, [np.broadcast_to(values[key], (n,))
                                              for key in agents_key])
                    cap = np.minimum(out.last, np.floor(r_cap).astype(np.int64))
                    g = metric_stack(out, agents)
                part = uaad_grid_sums(g, agreement, mask, cap, taus, eps).reshape(
                    len(STOP_METRICS), -1)
            elif p.name == "bccs":
                ff = scores["bccs_first_full"]
                stop = np.where(ff >= 0, ff, out.last).astype(np.int64)
                part = metrics_at(g_team, np.minimum(stop, out.last))[:, None]
            else:  # trace
                est = get_estimator(p.estimator)
                own = {key: v for key, v in params.items() if key in est.param_names}
                trace = run_estimator_rounds(est, batch, params=own, protocol=protocol,
                                             backend=backend)
                if keep is not None:
                    trace = trace[:, keep]
                if k not in grids:
                    th = p.thresholds
                    if isinstance(th, int):
                        finite = trace[np.isfinite(trace)]
                        th = np.unique(np.quantile(finite, np.linspace(0, 1, th)))
                    grids[k] = np.asarray(th, np.float64)
                th = grids[k]
                active = np.isfinite(trace)
                first = np.searchsorted(th, np.where(active, trace, np.inf), side="left")
                part = grid_sums(g_team, active, first, out.last, th.size)
            acc[k] = part if k not in acc else acc[k] + part
    if not total:
        raise ValueError("the corpus holds no trajectory" + (
            " left to replay: every record was skipped" if len(left_out) > n_before else ""))
    result = _result(pols, acc, fixed_sums, full_sum, total, grids, notes)
    result.skipped = left_out[n_before:]
    return result


def _with_reference(batch, on_error: str, skipped: list) -> np.ndarray | None:
    """The batch's records that have a reference (``[n]`` indices), or None when all do. A
    null or empty reference raises (naming the trajectory and the field), or with
    ``on_error="skip"`` the record is appended to ``skipped``."""
    import pyarrow.compute as pc

    from fastuq.engine.checks import Skipped
    from fastuq.errors import RecordError

    if "reference" not in batch.table.column_names:
        return None  # round_outcomes names the missing column
    ref = batch.column("reference").cast(pa.string())
    blank = pc.equal(pc.utf8_trim_whitespace(ref), "").fill_null(True)
    missing = blank.to_numpy(zero_copy_only=False)
    if not missing.any():
        return None
    why = ("field reference: no reference (null or empty), so no round's answer can be "
           "checked")
    if on_error == "raise":
        k = int(np.argmax(missing))
        raise RecordError(f"trajectory {batch.labels[k]}: {why} (on_error='skip', "
                          f"--on-error skip, leaves such debates out)", row=k)
    bad = np.flatnonzero(missing)
    ids = batch.ids.take(pa.array(bad)).to_pylist()
    for k, tid in zip(bad.tolist(), ids, strict=True):
        skipped.append(Skipped(source=batch.source, row=int(batch.rows[k]),
                               trajectory_id=tid, reason=f"trajectory {batch.labels[k]}: {why}"))
    return np.flatnonzero(~missing)


def _take_outcomes(out: Outcomes, keep: np.ndarray | None) -> Outcomes:
    if keep is None:
        return out
    return Outcomes(correct=out.correct[:, keep], calls=out.calls[:, keep],
                    last=out.last[keep], n_agents=out.n_agents[keep])


def _result(pols, acc, fixed_sums, full_sum, total, grids, notes) -> ReplayResult:
    rows: dict[str, list] = {c: [] for c in (
        "policy", "estimator", "rounds", "tau_c", "epsilon", "threshold", "n", "accuracy",
        "calls_mean", "calls_total", "calls_saved", "calls_saved_frac", "flips", "flip_rate",
        "stop_mean", "calls_uaad_mean")}
    full_calls = float(full_sum[1])

    def add(policy, sums, *, estimator=None, rounds=None, tau=None, eps=None, th=None):
        rows["policy"].append(policy)
        rows["estimator"].append(estimator)
        rows["rounds"].append(rounds)
        rows["tau_c"].append(tau)
        rows["epsilon"].append(eps)
        rows["threshold"].append(th)
        rows["n"].append(total)
        rows["accuracy"].append(float(sums[0]) / total)
        rows["calls_mean"].append(float(sums[1]) / total)
        rows["calls_total"].append(float(sums[1]))
        rows["calls_saved"].append(full_calls - float(sums[1]))
        rows["calls_saved_frac"].append((full_calls - float(sums[1])) / full_calls
                                        if full_calls else math.nan)
        rows["flips"].append(int(round(float(sums[2]))))
        rows["flip_rate"].append(float(sums[2]) / total)
        rows["stop_mean"].append(float(sums[3]) / total)
        rows["calls_uaad_mean"].append(float(sums[4]) / total
                                       if policy in ("uaad", "uaad_route") else None)

    for k, p in enumerate(pols):
        if p.name == "fixed":
            for r, sums in enumerate(fixed_sums, start=1):
                add("fixed", sums, rounds=r)
        elif p.name in ("uaad", "uaad_route"):
            part = acc[k].reshape(len(STOP_METRICS), len(p.tau_c), len(p.epsilon))
            for i, tau in enumerate(p.tau_c):
                for j, eps in enumerate(p.epsilon):
                    add(p.name, part[:, i, j], tau=tau, eps=eps)
        elif p.name == "bccs":
            add("bccs", acc[k][:, 0])
        else:
            for j, th in enumerate(grids[k].tolist()):
                add("trace", acc[k][:, j], estimator=p.estimator, th=th)
    table = pa.table({
        "policy": pa.array(rows["policy"], pa.string()),
        "estimator": pa.array(rows["estimator"], pa.string()),
        "rounds": pa.array(rows["rounds"], pa.int32()),
        **{c: pa.array(rows[c], pa.float64()) for c in ("tau_c", "epsilon", "threshold")},
        "n": pa.array(rows["n"], pa.int64()),
        **{c: pa.array(rows[c], pa.float64()) for c in (
            "accuracy", "calls_mean", "calls_total", "calls_saved", "calls_saved_frac")},
        "flips": pa.array(rows["flips"], pa.int64()),
        **{c: pa.array(rows[c], pa.float64()) for c in ("flip_rate", "stop_mean",
                                                         "calls_uaad_mean")},
    })
    calls_mean, accuracy = np.asarray(rows["calls_mean"]), np.asarray(rows["accuracy"])
    table = table.append_column("pareto", pa.array(pareto_front(calls_mean, accuracy)))
    table = table.append_column("tied", pa.array(tie_counts(calls_mean, accuracy), pa.int64()))
    full = {"n": total, "accuracy": float(full_sum[0]) / total,
            "calls_mean": full_calls / total, "calls_total": full_calls,
            "flips": int(round(float(full_sum[2]))), "stop_mean": float(full_sum[3]) / total}
    return ReplayResult(table=table, full=full, notes=notes)


def plot_replay(result: ReplayResult, path: str | os.PathLike, *, title: str = "") -> None:
    """Accuracy against mean calls per question, one colour per policy, the Pareto front
    drawn as a line with its points ringed, the full debate starred. Needs matplotlib
    (``fastuq[plot]``); the figure is written atomically."""
    try:
        import matplotlib
    except ImportError as exc:
        raise ImportError("plotting needs matplotlib: pip install 'fastuq[plot]'") from exc
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from fastuq.io.writers import atomic_write_with

    t = result.table.to_pydict()
    fig, ax = plt.subplots(figsize=(9.5, 4.8))
    kinds = list(dict.fromkeys(
        p if e is None else f"{p}:{e}" for p, e in zip(t["policy"], t["estimator"],
                                                      strict=True)))
    for kind in kinds:
        sel = [i for i, (p, e) in enumerate(zip(t["policy"], t["estimator"], strict=True))
               if (p if e is None else f"{p}:{e}") == kind]
        ax.scatter([t["calls_mean"][i] for i in sel], [t["accuracy"][i] for i in sel],
                   s=10 if len(sel) > 40 else 24, alpha=0.6, label=f"{kind} ({len(sel)} points)")
    on = sorted((t["calls_mean"][i], t["accuracy"][i]) for i in range(len(t["pareto"]))
                if t["pareto"][i])
    if on:
        ax.step([c for c, _ in on], [a for _, a in on], where="post", color="black", lw=1,
                label="Pareto front")
        ax.scatter([c for c, _ in on], [a for _, a in on], s=60, facecolors="none",
                   edgecolors="black")
    ax.scatter([result.full["calls_mean"]], [result.full["accuracy"]], marker="*", s=160,
               color="red", zorder=5, label="full debate")
    ax.set_xlabel("model calls per question (mean)")
    ax.set_ylabel("accuracy of the answer at the stop")
    ax.set_title(title or f"budget-policy replay, n = {result.full['n']}")
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8, loc="center left", bbox_to_anchor=(1.01, 0.5))
    fig.tight_layout()
    try:
        atomic_write_with(path, lambda tmp: fig.savefig(tmp, format="png", dpi=120))
    finally:
        plt.close(fig)
