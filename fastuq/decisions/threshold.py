"""Risk-controlling threshold for a score gate (DESIGN.md, "Consistency gate").

:func:`calibrate_threshold` picks the loosest threshold on a score such that the failure rate
(``correct`` false) among the items the gate passes is at most ``alpha`` with confidence
``1 - delta``, by fixed-sequence testing with a one-sided Clopper-Pearson upper bound.

Direction: fastuq's score columns are *uncertainties* (higher = less likely correct), so by
default an item passes iff ``score <= threshold`` (low uncertainty passes). The paper's gate
score is a *confidence* in [0, 1] with pass iff ``score >= threshold``: give
``higher_passes=True`` for such a column (the gate's own score,
:func:`fastuq.decisions.consistency.consistency_scores`, is one).

The Clopper-Pearson bound is ``scipy.stats.beta.ppf(1 - delta, k + 1, n - k)`` (1 when
``k == n``). SciPy is not a direct dependency of fastuq but always installed, as a dependency of
scikit-learn; it is imported on the first call only. Importing this module imports NumPy alone
(no JAX, no SciPy).
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass
from typing import Any

import numpy as np

__all__ = ["GateCalibration", "calibrate_threshold", "clopper_pearson_upper"]


@dataclass(frozen=True)
class GateCalibration:
    """The calibrated gate and what it does on the calibration set.

    Attributes:
      threshold: items pass iff ``score <= threshold`` (``score >= threshold`` with
        ``higher_passes``); ``-inf`` (``+inf`` with ``higher_passes``) when no threshold
        passes the test: the gate passes nothing.
      higher_passes: the direction (see the module docstring).
      n_calibration: calibration items.
      n_passed: calibration items the threshold passes.
      pass_rate: ``n_passed / n_calibration``.
      failures: passed calibration items that are not correct.
      failure_rate: ``failures / n_passed`` (NaN when nothing passes).
      upper_bound: the Clopper-Pearson ``1 - delta`` upper bound on the failure rate at the
        threshold (<= ``alpha``; NaN when nothing passes).
      alpha: target failure rate among passed items.
      delta: allowed probability that the guarantee fails.
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

    @property
    def passes_any(self) -> bool:
        """Whether a threshold was found (else the gate passes nothing)."""
        return self.n_passed > 0

    def passes(self, scores: Any) -> np.ndarray:
        """Boolean verdict per score of ``scores`` (1-D): pass or not."""
        s = np.asarray(scores, dtype=np.float64)
        return s >= self.threshold if self.higher_passes else s <= self.threshold

    def to_dict(self) -> dict[str, Any]:
        """The fields as a plain dict (for JSON)."""
        return asdict(self)


def clopper_pearson_upper(failures: Any, n: Any, delta: float) -> np.ndarray:
    """One-sided Clopper-Pearson ``1 - delta`` upper bounds on a binomial rate, vectorized:
    ``beta.ppf(1 - delta, k + 1, n - k)``, 1 where ``k == n`` (``n >= 1``)."""
    from scipy.stats import beta

    k = np.asarray(failures, dtype=np.float64)
    n = np.asarray(n, dtype=np.float64)
    full = k >= n
    bound = beta.ppf(1.0 - delta, k + 1.0, np.where(full, 1.0, n - k))
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


def calibrate_threshold(scores: Any, correct: Any, alpha: float, delta: float, *,
                        higher_passes: bool = False) -> GateCalibration:
    """Calibrate a gate threshold so the failure rate among passed items is <= ``alpha``
    with probability >= ``1 - delta`` over the calibration draw.

    Candidates are the distinct score values. They are tested in a fixed sequence from the
    strictest (fewest items passed: the lowest score, or the highest with ``higher_passes``;
    tied items pass together) to the loosest (every item passed). The sequence starts at the
    first candidate passing ``n >= log(delta) / log(1 - alpha)`` items: below that even zero
    failures give a bound above ``alpha``, so a strictest-first sequence would always stop at
    once (with ``alpha = 0.1``, ``delta = 0.05``: 29 items). That start depends on the scores
    only, never on the labels, so the sequence is still fixed before the labels are seen.
    At each candidate, with ``n`` calibration items passed and ``k`` of them not correct,
    the null hypothesis "the failure rate among passed items exceeds alpha" is rejected when
    the one-sided Clopper-Pearson ``1 - delta`` upper bound on that rate is <= ``alpha``.
    Testing stops at the first candidate not rejected; the threshold is the last rejected one
    (the loosest reached). When the first candidate of the sequence is not rejected (or no
    candidate passes enough items), nothing passes (threshold ``-inf``,
    ``+inf`` with ``higher_passes``). Vectorized: one sort, cumulative sums, one
    ``beta.ppf`` over all candidates.

    Args:
      scores: 1-D finite scores, one per calibration item.
      correct: 1-D labels (bool or 0/1; True = correct), same length.
      alpha: target failure rate among passed items, in (0, 1).
      delta: allowed failure probability of the guarantee, in (0, 1).
      higher_passes: pass iff ``score >= threshold`` (confidence scores) instead of
        ``score <= threshold`` (uncertainty scores, the default).

    Returns:
      A :class:`GateCalibration`.

    Raises:
      ValueError: mismatched lengths, no items, a non-finite score, a label other than
        bool/0/1, or ``alpha``/``delta`` outside (0, 1).
    """
    alpha = _fraction("alpha", alpha)
    delta = _fraction("delta", delta)
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
    last = np.flatnonzero(np.r_[key[1:] != key[:-1], True])  # last index of each tie group
    n_passed = last + 1
    k = fails[last]
    bound = clopper_pearson_upper(k, n_passed, delta)
    # The sequence starts at the first candidate that passes enough items for a rejection to
    # be possible at all (bound with no failure <= alpha, i.e. n >= log(delta)/log(1-alpha)):
    # a decision on the scores alone, never on the labels.
    start = int(np.searchsorted(clopper_pearson_upper(0, n_passed, delta) <= alpha, True))
    rejected = bound[start:] <= alpha
    stop = start + (int(np.argmin(rejected)) if not rejected.all() else len(rejected))
    n_cal = len(s)
    if stop == start:
        none = math.inf if higher_passes else -math.inf
        return GateCalibration(none, higher_passes, n_cal, 0, 0.0, 0, math.nan, math.nan,
                               alpha, delta)
    j = stop - 1
    thr = float(-key[last[j]] if higher_passes else key[last[j]])
    n, f = int(n_passed[j]), int(k[j])
    return GateCalibration(thr, higher_passes, n_cal, n, n / n_cal, f, f / n, float(bound[j]),
                           alpha, delta)
