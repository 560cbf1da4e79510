"""Rank metrics (AUROC, AUARC, PRR) of many score columns from one sort per column block.

Every column of ``x [N, C]`` is sorted by uncertainty ascending with a stable sort (ties keep
file order), all columns of a block in one ``np.sort`` call. For float32 scores (and float64
scores that are exactly float32 values) and ``N < 2**31`` the sort key is one uint64 per
element::

    key = order_preserving_bits(score) << 32 | row << 1 | label

so that sorting the keys sorts by score and, within equal scores, by row; the labels in
sorted order are ``key & 1`` (no gather) and tie groups are runs of equal high words. Other
float64 scores fall back to ``np.argsort(kind="stable")`` and a gather of the labels. Both
give the same order. ``-0.0`` and ``0.0`` are one value, as they compare equal.

From the sorted labels ``ys`` (0-based position ``j``) with ``P`` correct among ``N``:

* AUARC ``= (1/N) sum_k cumsum(ys)[k-1] / k = (1/N) sum_j ys[j] * h[j]`` with the harmonic
  tail ``h[j] = sum_{k=j+1}^{N} 1/k``: one dot product per column, no cumsum.
* AUROC (Mann-Whitney with average ranks of tie groups ``[s, e]``, positions inclusive):
  ``S2 = sum_{correct} (s + e)`` (twice the sum of average 0-based positions), then
  ``AUROC = (2 P N - S2 - P (P + 1)) / (2 P (N - P))``, an exact integer ratio.
* PRR: as AUARC but with every label replaced by the mean label of its tie group, i.e.
  ``U = sum_{correct} (H[e + 1] - H[s]) / (e - s + 1)`` with ``H`` the prefix sums of ``h``;
  the oracle's area is ``P (1 + h[P])`` and the random one ``P`` (all areas times ``N``),
  so ``PRR = (U - P) / (P h[P])``.

From :data:`FAST_MIN_ROWS` rows on, each column is instead ranked on its own by
:mod:`fastuq.metrics.rank_long` (the same packed keys sorted by Polars' integer sort for float32; a
4-pass LSD radix argsort for other float64; a thread pool over columns), which gives the
same order and the same numbers up to float64 rounding and is 3-5x faster on long columns;
the block sort above stays for short columns, where one vectorised sort of many columns
wins.

The sums are first taken as if there were no ties (``s = e = j``: ``S2 = 2 sum ys[j] j``,
``U = sum ys[j] h[j]``), then corrected on the rows that lie in tie groups only. Memory is
bounded by processing columns in blocks of about :data:`BLOCK_ELEMENTS` elements (``N x``
block columns); within a block all columns are one vectorised computation.
"""

from __future__ import annotations

import numpy as np

__all__ = ["BLOCK_ELEMENTS", "FAST_MIN_ROWS", "RANK_METRICS", "harmonic_tail", "rank_metrics"]

#: Elements (rows x columns) sorted per block; 2**22 uint64 keys = 32 MiB per temporary.
BLOCK_ELEMENTS = 1 << 22
#: Columns at least this long are ranked one by one by :mod:`fastuq.metrics.rank_long`.
FAST_MIN_ROWS = 1 << 14
#: Metrics :func:`rank_metrics` can compute from one sort.
RANK_METRICS = ("auroc", "auarc", "prr")

_HIGH_BIT = np.uint64(1 << 32)


def harmonic_tail(n: int) -> np.ndarray:
    """``h [n]`` float64 with ``h[j] = sum_{k=j+1}^{n} 1/k`` (summed from the small end)."""
    inv = 1.0 / np.arange(n, 0, -1, dtype=np.float64)  # 1/n, ..., 1/1
    return np.cumsum(inv)[::-1].copy()


def _f32_keys(xb: np.ndarray, low: np.ndarray) -> np.ndarray:
    """Sort keys ``[cb, N]`` uint64 of a float32 block ``xb [N, cb]``: the order-preserving
    bits of the score in the high word, ``low [N]`` (``row << 1 | label``) in the low word."""
    n, cb = xb.shape
    t = np.empty((cb, n), np.float32)
    np.add(xb.T, np.float32(0.0), out=t)  # transposed copy; -0.0 + 0.0 = +0.0
    i = t.view(np.int32)
    m = i >> 31  # 0 for >= +0, -1 for negatives
    m |= np.int32(-(1 << 31))
    m ^= i  # positives: sign bit set; negatives: all bits flipped -> unsigned order
    key = m.view(np.uint32).astype(np.uint64)
    key <<= np.uint64(32)
    key |= low
    return key


def _sorted_block(
    xb: np.ndarray, labels: np.ndarray, low: np.ndarray | None
) -> tuple[np.ndarray, np.ndarray]:
    """Labels in stable ascending-score order ``ys [cb, N]`` float64, and ``new [cb, N-1]``
    bool, true where the sorted score changes between positions ``j`` and ``j + 1``."""
    use_keys = low is not None and xb.dtype == np.float32
    if low is not None and not use_keys:
        with np.errstate(over="ignore"):  # out of float32 range -> inf -> not equal
            x32 = xb.astype(np.float32)
        use_keys = bool(np.array_equal(x32, xb))
        if use_keys:
            xb = x32
    if use_keys:
        key = _f32_keys(xb, low)
        key.sort(axis=1)
        new = (key[:, 1:] ^ key[:, :-1]) >= _HIGH_BIT
        key &= np.uint64(1)
        return key.astype(np.float64), new
    t = np.ascontiguousarray(xb.T, dtype=np.float64) + 0.0
    idx = np.argsort(t, axis=1, kind="stable")
    v = np.take_along_axis(t, idx, axis=1)
    return np.take(labels.astype(np.float64), idx), v[:, 1:] != v[:, :-1]


def _tie_corrections(
    ys: np.ndarray, new: np.ndarray, h: np.ndarray, hcum: np.ndarray
) -> tuple[np.ndarray, np.ndarray]:
    """Per-column corrections ``[cb]`` of ``S2`` and ``U`` (module doc) for tie groups.

    Only rows inside a tie group (size >= 2) are visited: for such a row at position ``j`` in
    group ``[s, e]``, ``S2`` gains ``y (s + e - 2 j)`` and ``U`` gains ``y (mean_{s..e} h -
    h[j])`` over the tie-free values ``2 j`` and ``h[j]``. Positions are flat in ``[cb, N]``.
    """
    cb, n = ys.shape
    eq = ~new
    in_tie = np.zeros((cb, n), bool)
    in_tie[:, :-1] = eq
    in_tie[:, 1:] |= eq
    pos = np.flatnonzero(in_tie)  # flat positions of rows in tie groups, ascending
    if pos.size == 0:
        return np.zeros(cb), np.zeros(cb)
    continues = np.zeros((cb, n), bool)
    continues[:, 1:] = eq  # equal to the previous position in the same column
    starts = ~continues.ravel()[pos]
    gid = np.cumsum(starts) - 1
    first = pos[starts]
    last = np.empty_like(first)
    last[:-1] = pos[np.flatnonzero(starts)[1:] - 1]
    last[-1] = pos[-1]
    s, e = first[gid], last[gid]
    y = ys.ravel()[pos]
    col = pos // n
    d_s2 = np.bincount(col, weights=y * (s + e - 2 * pos), minlength=cb)
    j, js, je = pos - col * n, s - col * n, e - col * n
    mean_h = (hcum[je + 1] - hcum[js]) / (je - js + 1)
    d_u = np.bincount(col, weights=y * (mean_h - h[j]), minlength=cb)
    return d_s2, d_u


def rank_metrics(
    labels: np.ndarray, x: np.ndarray, which: tuple[str, ...] = RANK_METRICS
) -> dict[str, np.ndarray]:
    """AUROC, AUARC and PRR of every column of ``x [N, C]`` against ``labels [N]`` bool.

    Inputs are assumed validated (finite, matching N >= 1). Returns float64 ``[C]`` arrays
    keyed by metric name; AUROC and PRR are NaN (without a warning) for single-class labels.
    """
    n, c = x.shape
    p = int(np.count_nonzero(labels))
    single = p == 0 or p == n
    out = {name: np.full(c, np.nan) for name in which}
    if c == 0:
        return out
    want_auroc = "auroc" in which and not single
    want_prr = "prr" in which and not single
    want_auarc = "auarc" in which
    if not (want_auroc or want_prr or want_auarc):
        return out
    if n >= FAST_MIN_ROWS:
        from fastuq.metrics.rank_long import rank_metrics_rows

        full, _ = rank_metrics_rows(labels, x.T, which)
        return {name: full[name] for name in which}
    h = harmonic_tail(n)
    hcum = np.concatenate(([0.0], np.cumsum(h)))  # H[j] = sum_{i<j} h[i]
    pos = np.arange(n, dtype=np.float64)
    low = None
    if n < 1 << 31:
        low = np.arange(n, dtype=np.uint64) << np.uint64(1)
        low |= labels
    cb = max(1, min(c, BLOCK_ELEMENTS // max(n, 1)))
    for c0 in range(0, c, cb):
        c1 = min(c, c0 + cb)
        ys, new = _sorted_block(x[:, c0:c1], labels, low)
        dot_h = ys @ h  # [cb] sum_j ys[j] h[j]
        if want_auarc:
            out["auarc"][c0:c1] = dot_h / n
        if not (want_auroc or want_prr):
            continue
        d_s2, d_u = _tie_corrections(ys, new, h, hcum)
        if want_auroc:
            s2 = 2.0 * (ys @ pos) + d_s2
            out["auroc"][c0:c1] = (2.0 * p * n - s2 - p * (p + 1.0)) / (2.0 * p * (n - p))
        if want_prr:
            out["prr"][c0:c1] = (dot_h + d_u - p) / (p * h[p])
    return out
