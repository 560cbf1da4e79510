"""Risk-controlling threshold for a score gate (DESIGN.md, "Consistency gate").

:func:`calibrate_threshold` picks the loosest threshold on a score such that the failure rate
(``correct`` false) among the items the gate passes is at most ``alpha`` with confidence
``1 - delta``, by fixed-sequence testing with a one-sided Clopper-Pearson upper bound.

Direction: fastuq's score columns are *uncertainties* (higher = less likely correct), so by
default an item passes iff ``score <= threshold`` (low uncertainty passes). The paper's gate
score is a *confidence* in [0, 1] with pass iff ``score >= threshold``: give
``higher_passes=True`` for such a column.

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

__all__ = ["GateCalibration", "calibrate_threshold", "clopper_pearson_upper", "consistency_scores",
           "corpus_consistency"]


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


# ------------------------------------------------------------------------------------------
# The gate's own score: agreement of a candidate with its k samples

#: A number as the gate reads it (the *last* one in a text is its final answer).
NUMBER = r"-?\d+(?:\.\d+)?"
#: A token of the token sets: a run of lowercase letters or digits (after lowercasing).
TOKEN = r"[a-z0-9]+"


def consistency_scores(candidates: Any, samples: Any) -> np.ndarray:
    """``[N]`` gate score in [0, 1] of each candidate against its samples (higher = more
    consistent; pass iff ``score >= threshold``, so calibrate with ``higher_passes=True``).

    Per sample (DESIGN.md, "Consistency gate"): 1.0 when the last numbers of candidate and
    sample are equal (as numbers: ``3`` and ``3.0`` match) or their normalised texts are
    equal (lowercased, runs of whitespace made one space, stripped); else the Jaccard index
    of their token sets (tokens: runs of ``[a-z0-9]`` after lowercasing; a candidate without
    tokens has index 0). The score is the mean over the *usable* samples (non-empty after
    normalisation), clamped to [0, 1]; a candidate without a usable sample scores 0 (the
    gate fails closed).

    Vectorized over whole columns with Polars (regex extraction, exploded token rows, a join
    on ``(item, token hash)``): no per-item Python loop.

    Args:
      candidates: ``[N]`` strings (a list, NumPy or Arrow array; null = empty).
      samples: ``[N]`` lists of strings, ``k`` per item (ragged; a null sample is unusable).
    """
    import polars as pl
    import pyarrow as pa

    cand = pl.Series("text", pa.array(candidates, pa.large_string())
                     if not isinstance(candidates, (pa.Array, pa.ChunkedArray))
                     else candidates).cast(pl.String)
    samp = pl.Series("text", pa.array(samples, pa.large_list(pa.large_string()))
                     if not isinstance(samples, (pa.Array, pa.ChunkedArray))
                     else samples).cast(pl.List(pl.String))
    n = len(cand)
    if len(samp) != n:
        raise ValueError(f"samples has {len(samp)} items for {n} candidates")
    if n == 0:
        return np.zeros(0)

    def prepared(frame: pl.DataFrame) -> pl.DataFrame:
        norm = (pl.col("text").fill_null("").str.to_lowercase()
                .str.replace_all(r"\s+", " ").str.strip_chars())
        return frame.with_columns(norm.alias("norm")).with_columns(
            pl.col("norm").str.extract_all(NUMBER).list.last().cast(pl.Float64,
                                                                    strict=False).alias("num"),
            pl.col("norm").str.extract_all(TOKEN).alias("tokens"),
        )

    c = prepared(pl.DataFrame({"item": np.arange(n), "text": cand}))
    s = prepared(pl.DataFrame({"item": np.arange(n), "text": samp})
                 .explode("text").with_row_index("sample"))
    s = s.filter(pl.col("norm").str.len_bytes() > 0)  # usable samples only

    def token_rows(frame: pl.DataFrame, key: list[str]) -> pl.DataFrame:
        return (frame.select(*key, "tokens").explode("tokens").drop_nulls("tokens")
                .with_columns(pl.col("tokens").hash(seed=0).alias("h")).select(*key, "h")
                .unique())

    c_tok = token_rows(c, ["item"])
    s_tok = token_rows(s, ["item", "sample"])
    c_size = c_tok.group_by("item").len("a")
    s_size = s_tok.group_by("sample").len("b")
    inter = s_tok.join(c_tok, on=["item", "h"]).group_by("sample").len("inter")
    per = (s.select("item", "sample", "norm", "num")
           .join(c.select("item", pl.col("norm").alias("c_norm"), pl.col("num").alias("c_num")),
                 on="item")
           .join(c_size, on="item", how="left").join(s_size, on="sample", how="left")
           .join(inter, on="sample", how="left")
           .with_columns(pl.col("a", "b", "inter").fill_null(0)))
    union = pl.col("a") + pl.col("b") - pl.col("inter")
    jaccard = pl.when(union > 0).then(pl.col("inter") / union).otherwise(0.0)
    exact = ((pl.col("num").is_not_null() & (pl.col("num") == pl.col("c_num")))
             | (pl.col("norm") == pl.col("c_norm")))
    agree = per.with_columns(pl.when(exact).then(1.0).otherwise(jaccard).alias("agree"))
    mean = agree.group_by("item").agg(pl.col("agree").mean())
    out = np.zeros(n)
    items = mean["item"].to_numpy()
    out[items] = np.clip(mean["agree"].to_numpy(), 0.0, 1.0)
    return out


def corpus_consistency(source: Any, *, chunk_rows: int = 1 << 18):
    """``consistency`` per trajectory of a self-consistency corpus (DESIGN.md: protocol
    ``self_consistency``, one trajectory per question, round 0 holding the ``k`` samples as
    agents in ``texts``, the candidate in ``final_answer``), streamed chunk by chunk.

    Returns a Polars DataFrame ``trajectory_id`` (str), ``consistency`` (float64, in [0, 1]).
    Raises ValueError when the corpus lacks ``texts`` or ``final_answer``.
    """
    import polars as pl

    from fastuq.io.readers import iter_chunks

    parts = []
    for chunk in iter_chunks(source, columns=["trajectory_id", "texts", "final_answer"],
                             chunk_rows=chunk_rows):
        table = chunk.table
        rounds = table.column("texts").combine_chunks()
        scores = consistency_scores(table.column("final_answer").combine_chunks(),
                                    _first_round(rounds))
        parts.append(pl.DataFrame({
            "trajectory_id": pl.Series(table.column("trajectory_id").combine_chunks())
            .cast(pl.String),
            "consistency": scores,
        }))
    if not parts:
        raise ValueError(f"{source}: the corpus is empty")
    return pl.concat(parts)


def _first_round(rounds):
    """``[N]`` list of the first round's texts (null where a trajectory has no round: no
    usable sample)."""
    import polars as pl

    return pl.Series(rounds).cast(pl.List(pl.List(pl.String))).list.first().to_arrow()
