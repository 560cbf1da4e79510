"""Risk-controlling threshold for a score gate (DESIGN.md, "Consistency gate").

:func:`calibrate_threshold` picks a threshold on a score such that the failure rate
(``correct`` false) among the items the gate passes is at most ``alpha`` with confidence
``1 - delta`` over the calibration draw (Learn-then-Test: each candidate threshold is a
hypothesis "failure rate among passed items > alpha", tested with the exact binomial tail,
the family-wise error rate held at ``delta``).

Candidates are fixed before the labels are seen. By default they are a grid of pass fractions
of the calibration scores: level ``i`` of ``m`` passes the ``ceil(i n / m)`` items with the
lowest scores (ties pass together), strictest first. ``levels="distinct"`` takes every distinct
score instead (the procedure before the grid). Three ways to hold the family-wise error:

* ``"fixed_sequence"``: levels tested in order from the strictest at ``delta``; stop at the
  first level not rejected.
* ``"multi_start"`` (the default): ``starts`` fixed sequences, each at ``delta / starts``,
  starting at equally spaced levels (positions ``j * (m // starts)``, as MAPIE's
  ``FWERFixedSequenceTesting``) and each running toward looser levels until its first
  non-rejection; a level is valid when any sequence rejected it. With fewer tested levels
  than starts, each tested level starts one sequence, still at ``delta / starts`` (the split
  is fixed before the data; MAPIE would split over the levels instead).
* ``"bonferroni"``: every level at ``delta / m``.

The threshold is the loosest valid level (it passes the most items). Levels where even no
failure could not be rejected (``(1 - alpha)^n > delta_level``, ``n`` the items they pass) are
left out of the sequences: a choice on the scores alone. The p-value of a level with ``k``
failures among ``n`` passed is ``P(Binomial(n, alpha) <= k)``; a level is rejected iff its
p-value is <= its test's delta, which is the same as the one-sided Clopper-Pearson
``1 - delta_level`` upper bound ``beta.ppf(1 - delta_level, k + 1, n - k)`` being <= alpha.

Direction: fastuq's score columns are *uncertainties* (higher = less likely correct), so by
default an item passes iff ``score <= threshold`` (low uncertainty passes). The paper's gate
score is a *confidence* in [0, 1] with pass iff ``score >= threshold``: give
``higher_passes=True`` for such a column (the gate's own score,
:func:`fastuq.decisions.consistency.consistency_scores`, is one).

SciPy is not a direct dependency of fastuq but always installed, as a dependency of
scikit-learn; it is imported on the first call only. Importing this module imports NumPy alone
(no JAX, no SciPy).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

import numpy as np

__all__ = ["DEFAULT_LEVELS", "DEFAULT_PROCEDURE", "DEFAULT_STARTS", "GATE_PROCEDURES",
           "GateCalibration", "calibrate_threshold", "clopper_pearson_upper"]

#: The ways to hold the family-wise error over the candidate levels.
GATE_PROCEDURES = ("multi_start", "fixed_sequence", "bonferroni")
#: Default procedure, grid size and number of starts (bench/gate_simulation.py: the default
#: passes most where thresholds are safe, with the guarantee kept; bench/README.md).
DEFAULT_PROCEDURE = "multi_start"
DEFAULT_LEVELS = 50
DEFAULT_STARTS = 4

#: Columns of :attr:`GateCalibration.table`.
TABLE_COLUMNS = ("level", "pass_fraction", "threshold", "passed", "failures", "p_value",
                 "level_delta", "bound", "tested", "rejected")


@dataclass(frozen=True)
class GateCalibration:
    """The calibrated gate and what it does on the calibration set.

    Attributes:
      threshold: items pass iff ``score <= threshold`` (``score >= threshold`` with
        ``higher_passes``); ``-inf`` (``+inf`` with ``higher_passes``) when no threshold
        is valid: the gate passes nothing.
      higher_passes: the direction (see the module docstring).
      n_calibration: calibration items.
      n_passed: calibration items the threshold passes.
      pass_rate: ``n_passed / n_calibration``.
      failures: passed calibration items that are not correct.
      failure_rate: ``failures / n_passed`` (NaN when nothing passes).
      upper_bound: the Clopper-Pearson upper bound on the failure rate at the threshold, at
        its test's confidence ``1 - level_delta`` (<= ``alpha``; NaN when nothing passes).
      alpha: target failure rate among passed items.
      delta: allowed probability that the guarantee fails.
      procedure: ``"multi_start"``, ``"fixed_sequence"`` or ``"bonferroni"``.
      levels: the grid's size, or ``"distinct"`` (every distinct score a candidate).
      starts: the number of starts (``"multi_start"``; 1 otherwise).
      table: one entry per candidate level, strictest first, as a dict of equal-length
        lists (:data:`TABLE_COLUMNS`): ``level`` (1-based), ``pass_fraction`` (the grid's
        fraction; NaN for distinct scores), ``threshold``, ``passed``, ``failures``,
        ``p_value`` (``P(Binomial(passed, alpha) <= failures)``), ``level_delta`` (the
        delta it is tested at), ``bound`` (Clopper-Pearson at ``1 - level_delta``),
        ``tested`` (false: left out, too few items for a rejection) and ``rejected``
        (valid: failure rate <= alpha).
      reason: why no threshold is valid (empty when one is).
    """

    threshold: float
    higher_passes: bool
    n_calibration: int
    n_passed: int
    pass_rate: float
    failures: int
    failure_rate: float
    upper_bound: float
    alpha: float
    delta: float
    procedure: str = DEFAULT_PROCEDURE
    levels: int | str = DEFAULT_LEVELS
    starts: int = DEFAULT_STARTS
    table: dict[str, list] = field(default_factory=dict, compare=False, repr=False)
    reason: str = ""

    @property
    def passes_any(self) -> bool:
        """Whether a valid threshold was found (else the gate passes nothing)."""
        return self.n_passed > 0

    def passes(self, scores: Any) -> np.ndarray:
        """Boolean verdict per score of ``scores`` (1-D): pass or not."""
        s = np.asarray(scores, dtype=np.float64)
        return s >= self.threshold if self.higher_passes else s <= self.threshold

    def to_dict(self) -> dict[str, Any]:
        """The fields as a plain dict (for JSON: the table's lists of Python scalars)."""
        return {"threshold": self.threshold, "higher_passes": self.higher_passes,
                "n_calibration": self.n_calibration, "n_passed": self.n_passed,
                "pass_rate": self.pass_rate, "failures": self.failures,
                "failure_rate": self.failure_rate, "upper_bound": self.upper_bound,
                "alpha": self.alpha, "delta": self.delta, "procedure": self.procedure,
                "levels": self.levels, "starts": self.starts,
                "table": {k: list(v) for k, v in self.table.items()}, "reason": self.reason}


def clopper_pearson_upper(failures: Any, n: Any, delta: Any) -> np.ndarray:
    """One-sided Clopper-Pearson ``1 - delta`` upper bounds on a binomial rate, vectorized:
    ``beta.ppf(1 - delta, k + 1, n - k)``, 1 where ``k == n`` (``n >= 1``)."""
    from scipy.stats import beta

    k = np.asarray(failures, dtype=np.float64)
    n = np.asarray(n, dtype=np.float64)
    full = k >= n
    bound = beta.ppf(1.0 - np.asarray(delta, dtype=np.float64), k + 1.0,
                     np.where(full, 1.0, n - k))
    return np.where(full, 1.0, bound)


def _fraction(name: str, value: float) -> float:
    try:
        v = float(value)
    except (TypeError, ValueError):
        raise ValueError(f"{name} must be a number in (0, 1), got {value!r}") from None
    if not 0.0 < v < 1.0:
        raise ValueError(f"{name} must be in (0, 1), got {v}")
    return v


def _labels(correct: Any) -> np.ndarray:
    c = np.asarray(correct)
    if c.ndim != 1:
        raise ValueError(f"correct must be 1-D, got shape {c.shape}")
    if c.dtype == np.bool_:
        return c
    if c.dtype.kind not in "iuf":
        raise ValueError(f"correct must be bool or 0/1, got dtype {c.dtype}")
    bad = ~np.isin(c, (0, 1))
    if bad.any():
        i = int(np.flatnonzero(bad)[0])
        raise ValueError(f"correct must be bool or 0/1; item {i} is {c[i]!r}")
    return c.astype(bool)


def check_procedure(procedure: str, levels: int | str, starts: int) -> None:
    """ValueError unless ``procedure``, ``levels`` and ``starts`` name a procedure."""
    if procedure not in GATE_PROCEDURES:
        raise ValueError(f"procedure must be one of {', '.join(GATE_PROCEDURES)}; got "
                         f"{procedure!r}")
    if levels != "distinct" and (isinstance(levels, bool) or not isinstance(levels, int)
                                 or levels < 1):
        raise ValueError(f"levels must be an integer >= 1 or 'distinct', got {levels!r}")
    if isinstance(starts, bool) or not isinstance(starts, int) or starts < 1:
        raise ValueError(f"starts must be an integer >= 1, got {starts!r}")


def _candidates(key: np.ndarray, levels: int | str) -> tuple[np.ndarray, np.ndarray]:
    """Candidate positions (index of the last passed item in the sorted keys, distinct
    thresholds, strictest first) and their pass fractions (NaN for distinct scores)."""
    n = len(key)
    group_end = np.r_[key[1:] != key[:-1], True]  # last index of each tie group
    if levels == "distinct":
        last = np.flatnonzero(group_end)
        return last, np.full(len(last), math.nan)
    i = np.arange(1, levels + 1, dtype=np.int64)
    pos = (i * n + levels - 1) // levels - 1  # ceil(i n / m) items, exact in integers
    frac = i / levels
    # ties pass together: a level passes its whole tie group
    ends = np.flatnonzero(group_end)
    last = ends[np.searchsorted(ends, pos)]
    keep = np.r_[True, last[1:] != last[:-1]]  # levels landing in one tie group: the first
    return last[keep], frac[keep]


def calibrate_threshold(scores: Any, correct: Any, alpha: float, delta: float, *,
                        higher_passes: bool = False, procedure: str = DEFAULT_PROCEDURE,
                        levels: int | str = DEFAULT_LEVELS,
                        starts: int = DEFAULT_STARTS) -> GateCalibration:
    """Calibrate a gate threshold so the failure rate among passed items is <= ``alpha``
    with probability >= ``1 - delta`` over the calibration draw.

    The candidates (``levels`` pass fractions of the scores, or every distinct score) are
    fixed from the scores alone; each is tested with the exact binomial tail, the
    family-wise error held at ``delta`` by ``procedure`` (see the module docstring). The
    threshold is the loosest valid candidate; when none is valid the gate passes nothing
    (threshold ``-inf``, ``+inf`` with ``higher_passes``) and ``reason`` says why.
    Vectorized: one sort, cumulative sums, one ``binom.cdf`` and one ``beta.ppf`` over the
    candidates.

    Args:
      scores: 1-D finite scores, one per calibration item.
      correct: 1-D labels (bool or 0/1; True = correct), same length.
      alpha: target failure rate among passed items, in (0, 1).
      delta: allowed failure probability of the guarantee, in (0, 1).
      higher_passes: pass iff ``score >= threshold`` (confidence scores) instead of
        ``score <= threshold`` (uncertainty scores, the default).
      procedure: ``"multi_start"`` (default), ``"fixed_sequence"`` or ``"bonferroni"``.
      levels: the grid's size (default 50 pass fractions ``1/m .. m/m``) or
        ``"distinct"``.
      starts: sequences of ``"multi_start"`` (default 4); ignored by the other procedures.

    Returns:
      A :class:`GateCalibration` carrying the per-level table.

    Raises:
      ValueError: mismatched lengths, no items, a non-finite score, a label other than
        bool/0/1, ``alpha``/``delta`` outside (0, 1), an unknown procedure, bad levels/starts.
    """
    from scipy.stats import binom

    alpha = _fraction("alpha", alpha)
    delta = _fraction("delta", delta)
    check_procedure(procedure, levels, starts)
    if procedure != "multi_start":
        starts = 1
    try:
        s = np.asarray(scores, dtype=np.float64)
    except (TypeError, ValueError):
        raise ValueError("scores must be numbers") from None
    if s.ndim != 1:
        raise ValueError(f"scores must be 1-D, got shape {s.shape}")
    c = _labels(correct)
    if len(s) != len(c):
        raise ValueError(f"scores and correct differ in length ({len(s)} and {len(c)})")
    if len(s) == 0:
        raise ValueError("no calibration items")
    finite = np.isfinite(s)
    if not finite.all():
        i = int(np.flatnonzero(~finite)[0])
        raise ValueError(f"score {i} is {s[i]} (scores must be finite)")

    key = -s if higher_passes else s  # pass iff key <= candidate
    order = np.argsort(key, kind="stable")
    key = key[order]
    fails = np.cumsum(~c[order], dtype=np.int64)
    last, frac = _candidates(key, levels)
    m = len(last)
    n_passed = last + 1
    k = fails[last]
    p_value = binom.cdf(k, n_passed, alpha)
    level_delta = delta / (m if procedure == "bonferroni" else starts)
    # left out: even no failure would not be rejected (a choice on the scores alone)
    tested = binom.cdf(0, n_passed, alpha) <= level_delta
    ok = tested & (p_value <= level_delta)
    rejected = np.zeros(m, bool)
    if procedure == "bonferroni":
        rejected = ok
    else:
        seq = np.flatnonzero(tested)  # the sequence: the tested levels, strictest first
        n_seq = len(seq)
        n_starts = min(starts, n_seq)
        for j in range(n_starts):
            first = j * (n_seq // n_starts)
            run = ok[seq[first:]]
            stop = int(np.argmin(run)) if not run.all() else len(run)
            rejected[seq[first:first + stop]] = True
    bound = clopper_pearson_upper(k, n_passed, level_delta)
    thresholds = -key[last] if higher_passes else key[last]
    table = {"level": list(range(1, m + 1)), "pass_fraction": frac.tolist(),
             "threshold": thresholds.tolist(), "passed": n_passed.tolist(),
             "failures": k.tolist(), "p_value": p_value.tolist(),
             "level_delta": [level_delta] * m, "bound": bound.tolist(),
             "tested": tested.tolist(), "rejected": rejected.tolist()}
    n_cal = len(s)
    common = dict(alpha=alpha, delta=delta, procedure=procedure, levels=levels, starts=starts,
                  table=table)
    if not rejected.any():
        none = math.inf if higher_passes else -math.inf
        return GateCalibration(none, higher_passes, n_cal, 0, 0.0, 0, math.nan, math.nan,
                               reason=_reason(alpha, level_delta, procedure, n_passed, k,
                                              bound, tested), **common)
    j = int(np.flatnonzero(rejected)[-1])
    n, f = int(n_passed[j]), int(k[j])
    return GateCalibration(float(thresholds[j]), higher_passes, n_cal, n, n / n_cal, f, f / n,
                           float(bound[j]), **common)


def _reason(alpha: float, level_delta: float, procedure: str, n_passed: np.ndarray,
            k: np.ndarray, bound: np.ndarray, tested: np.ndarray) -> str:
    """Why no level is valid, in one sentence."""
    if not tested.any():
        need = math.ceil(math.log(level_delta) / math.log1p(-alpha))
        return (f"no valid threshold: too few items; a level must pass at least {need} items "
                f"(bound with no failure <= alpha {alpha:g} at delta {level_delta:.4g}), the "
                f"loosest passes {int(n_passed[-1])}")
    if procedure == "bonferroni":
        j = int(np.argmin(np.where(tested, bound, np.inf)))
        return (f"no valid threshold: no level's bound at delta {level_delta:.4g} is <= alpha "
                f"{alpha:g}; the lowest is {bound[j]:.4f} ({int(k[j])} failures among "
                f"{int(n_passed[j])} passed)")
    j = int(np.flatnonzero(tested)[0])
    what = "the first level tested" if procedure == "fixed_sequence" else "every start"
    return (f"no valid threshold: {what} failed; the first passes {int(n_passed[j])} items "
            f"with {int(k[j])} failures, bound {bound[j]:.4f} > alpha {alpha:g} at delta "
            f"{level_delta:.4g}")
