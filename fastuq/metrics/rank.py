"""Exact rank metrics (AUROC, AUARC, PRR) of score columns: one engine, two ways to sort.

Every column is put in stable ascending-uncertainty order (ties keep file order: the order
AUARC needs). Each score first becomes an unsigned key with the same order (``-0.0`` is made
``+0.0`` first, as the two compare equal; :func:`order_keys`)::

    u = bits(x);  key = ~u if sign(x) else u | SIGN_BIT

(``uint32`` for float32 scores, ``uint64`` for float64). For float32 scores (and float64
scores that are float32 values) and ``N < 2**31`` the sort key is one unique uint64 per row::

    packed = key << 32 | row << 1 | label

so that sorting the packed keys (any sort: they are unique) gives the stable order, the
labels in sorted order are ``packed & 1`` (no gather) and tie groups are runs of equal high
words. Other float64 scores, sorted one column at a time, are packed the same way with the
key's top bits in place of the 32-bit key (:mod:`fastuq.metrics.sort64`: ``np.sort`` of
unique words, then the rare runs of scores a few ulps apart re-sorted by the full key);
failing that (too many such runs), by a stable argsort of their 64-bit keys.

**Sorting: one internal decision.** :func:`rank_metrics` (``x [N, C]``) sorts short columns
(``N <`` :data:`FAST_MIN_ROWS`) a block of columns at a time: one ``np.sort`` of the packed
keys ``[cb, N]`` (blocks of about :data:`BLOCK_ELEMENTS` elements; ``np.argsort(kind=
"stable")`` of the keys for other float64 scores), where one vectorised sort of many columns
wins. Long columns are sorted one by one (:func:`rank_metrics_rows`, also what
:mod:`fastuq.sweeps` calls for its ``[G, N]`` score blocks) on a thread pool (both sorts release
the GIL): the packed keys by Polars' single-threaded integer sort, other float64 scores by
the packed top bits above (one ``np.sort``, AVX-512 / AVX2 sorting networks where NumPy has
them), else by Polars' ``arg_sort`` of their 64-bit keys, whose order is checked to be the
stable one (equal keys in row order, one comparison per row; else a 4-pass LSD radix
argsort on 16-bit digits, :func:`radix_sort_with`), 3-5x faster than the block sort on long
columns. All give the same order. On 1e7 float64 scores the checked ``arg_sort`` costs about
0.85 s of CPU on a quiet machine against 2.0 s for the radix sort; the packed sort of
``fastuq eval``'s 8 score columns of 1e7 (with their 2 protocol subsets) took 10.8 s of CPU
against 19.0 s for the checked ``arg_sort`` (load 5-6, identical metrics).

Measured on the 2-core reference machine, one 1e6 float32 column: ``np.argsort(kind=
"stable")`` ~160 ms, NumPy's ``np.sort`` of the packed 64-bit keys ~50 ms, the 2-pass radix
~30 ms, the Polars sort of the packed keys ~15-20 ms.

**The metrics: one computation** (:func:`_metrics_from_sorted`, for a block ``[cb, N]`` of
sorted columns, a single column being a block of one). From the sorted labels ``ys`` (0-based
position ``j``) with ``P`` correct among ``N``:

* AUARC ``= (1/N) sum_k cumsum(ys)[k-1] / k = (1/N) sum_{correct j} h[j]`` with the harmonic
  tail ``h[j] = sum_{k=j+1}^{N} 1/k``: one sum per column, no cumsum.
* AUROC (Mann-Whitney with average ranks of tie groups ``[s, e]``, positions inclusive):
  ``S2 = sum_{correct} (s + e)`` (twice the sum of average 0-based positions), then
  ``AUROC = (2 P N - S2 - P (P + 1)) / (2 P (N - P))``, an exact integer ratio. It counts
  tied (correct, wrong) pairs one half, like ``sklearn.metrics.roc_auc_score(labels,
  -scores)``.
* PRR: as AUARC but with every label replaced by the mean label of its tie group, i.e.
  ``U = sum_{correct} (H[e + 1] - H[s]) / (e - s + 1)`` with ``H`` the prefix sums of ``h``;
  the oracle's area is ``P (1 + h[P])`` and the random one ``P`` (all areas times ``N``),
  so ``PRR = (U - P) / (P h[P])``.

The sums are first taken as if there were no ties (``s = e = j``: ``S2 = 2 sum j``, ``U =
sum h[j]`` over the correct rows), then corrected on the correct rows that lie in tie groups
only. Every float sum is NumPy's (pairwise) sum over one column's terms in position order,
and the integer sums are exact, so a column gets the same bits whichever way it was sorted
and whatever block it was in (no BLAS: its threads would fight the sorting pool).

Scores are ranked in the dtype they come in: float32 is plenty to rank SAUCE scores
(``DESIGN.md``), but two float64 scores that round to one float32 value tie in float32;
pass float64 scores to rank them apart.
"""

from __future__ import annotations

import functools
import os
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor

import numpy as np

from fastuq.metrics.sort64 import checked_argsort64 as _sort64_with
from fastuq.metrics.sort64 import packed_sort64, radix_sort_with
from fastuq.metrics.sort64 import tie_groups as _tie_groups

__all__ = [
    "BLOCK_ELEMENTS",
    "harmonic_numbers",
    "FAST_MIN_ROWS",
    "RANK_METRICS",
    "NonFiniteScoreError",
    "default_threads",
    "harmonic_tail",
    "metrics_from_sorted",
    "order_keys",
    "radix_sort_with",
    "rank_metrics",
    "rank_metrics_1d",
    "rank_metrics_rows",
    "row_label_bits",
    "sorted_labels",
    "stable_argsort",
]

#: Elements (rows x columns) sorted per block; 2**22 uint64 keys = 32 MiB per temporary.
BLOCK_ELEMENTS = 1 << 22
#: Columns at least this long are sorted one by one (:func:`rank_metrics_rows`).
FAST_MIN_ROWS = 1 << 14
#: Metrics computed from one stable sort.
RANK_METRICS = ("auroc", "auarc", "prr")

_HIGH_BIT = np.uint64(1 << 32)


def default_threads() -> int:
    """Threads for column-parallel sorting: the usable cores, at most 8."""
    try:
        cores = len(os.sched_getaffinity(0))
    except AttributeError:  # not Linux
        cores = os.cpu_count() or 1
    return max(1, min(8, cores))


# --------------------------------------------------------------------------- the maths


def harmonic_tail(n: int) -> np.ndarray:
    """``h [n]`` float64 with ``h[j] = sum_{k=j+1}^{n} 1/k`` (summed from the small end)."""
    inv = 1.0 / np.arange(n, 0, -1, dtype=np.float64)  # 1/n, ..., 1/1
    return np.cumsum(inv)[::-1].copy()


@functools.lru_cache(maxsize=16)
def harmonic_numbers(n: int) -> tuple[np.ndarray, np.ndarray]:
    """``(h [n], H [n + 1])`` float64, read-only (cached per ``n``): the harmonic tail
    (:func:`harmonic_tail`) and its prefix sums ``H[j] = sum_{i<j} h[i]``."""
    h = harmonic_tail(n)
    hcum = np.concatenate(([0.0], np.cumsum(h)))
    h.flags.writeable = False
    hcum.flags.writeable = False
    return h, hcum


def _tie_corrections(
    ys: np.ndarray, same: np.ndarray, h: np.ndarray, hcum: np.ndarray
) -> tuple[np.ndarray, np.ndarray]:
    """Per-column corrections ``[cb]`` of ``S2`` and ``U`` (module doc) for tie groups.

    ``ys [cb, N]`` bool labels in sorted order, ``same [cb, N-1]`` true where positions
    ``j`` and ``j + 1`` tie. Only correct rows inside a tie group ``[s, e]`` (size >= 2)
    count: such a row at position ``j`` adds ``s + e - 2 j`` to ``S2`` and ``mean_{s..e} h -
    h[j]`` to ``U`` over their tie-free values ``2 j`` and ``h[j]``. A column's ``U`` terms
    are summed as ``np.sum`` of them alone (pairwise, in position order), whatever the
    block; the ``S2`` corrections are integers, summed exactly.
    """
    cb, n = ys.shape
    d_s2, d_u = np.zeros(cb), np.zeros(cb)
    in_tie = np.zeros((cb, n), bool)
    in_tie[:, :-1] = same
    in_tie[:, 1:] |= same
    pos = np.flatnonzero(in_tie)  # flat positions of rows in tie groups, ascending
    if pos.size == 0:
        return d_s2, d_u
    continues = np.zeros((cb, n), bool)
    continues[:, 1:] = same  # equal to the previous position in the same column
    start_idx = np.flatnonzero(~continues.ravel()[pos])  # [G] each group's first row in pos
    first = pos[start_idx]  # [G] flat positions s, e of each group
    last = np.empty_like(first)
    last[:-1] = pos[start_idx[1:] - 1]
    last[-1] = pos[-1]
    correct = ys.ravel()[pos]
    n_correct = np.add.reduceat(correct, start_idx, dtype=np.int64)  # [G]
    if not n_correct.any():
        return d_s2, d_u
    col = first // n  # [G] each group's column
    base = col * n
    s, e = first - base, last - base  # positions within the column
    mean_h = (hcum[e + 1] - hcum[s]) / (e - s + 1)  # [G]
    # S2: per group, (s + e) per correct row - 2 (sum of their positions); int64, exact.
    pos_sum = np.add.reduceat(np.where(correct, pos, 0), start_idx)
    d_s2 = np.bincount(col, weights=n_correct * (first + last) - 2 * pos_sum, minlength=cb)
    # U: per correct row (in position order) its group's mean of h minus its own h.
    pos = pos[correct]
    j = pos if cb == 1 else pos - np.repeat(base, n_correct)
    terms = np.repeat(mean_h, n_correct) - h[j]
    if cb == 1:
        d_u[0] = terms.sum()
        return d_s2, d_u
    # np.sum of each column's terms, vectorised over the columns with as many terms: a
    # [k, L] matrix summed along its rows (per row, the same pairwise sum as np.sum).
    count = np.bincount(col, weights=n_correct, minlength=cb).astype(np.int64)
    offset = np.cumsum(count) - count
    by_count = np.argsort(count, kind="stable")
    for group in np.split(by_count, np.flatnonzero(np.diff(count[by_count])) + 1):
        length = int(count[group[0]])
        if length:
            d_u[group] = terms[offset[group][:, None] + np.arange(length)].sum(axis=1)
    return d_s2, d_u


def _metrics_from_sorted(
    ys: np.ndarray, same: np.ndarray, which: Sequence[str]
) -> dict[str, np.ndarray]:
    """AUROC / AUARC / PRR ``[cb]`` float64 of a block of sorted columns.

    ``ys [cb, N]`` bool: each column's labels in stable ascending-score order (the same
    number ``P`` of them true in every column); ``same [cb, N-1]`` bool: true where sorted
    positions ``j`` and ``j + 1`` hold equal scores. AUROC and PRR are NaN for single-class
    labels (no warning here); ``N = 0`` gives NaN everywhere. Every sum over a column is a
    NumPy (pairwise) sum over that column alone, so a column's values do not depend on the
    block it is computed in, nor on the sort strategy; sums of integers are exact.
    """
    cb, n = ys.shape
    out: dict[str, np.ndarray] = {}
    if n:
        h, hcum = harmonic_numbers(n)
        j = np.flatnonzero(ys)
        p = j.size // cb
        j = j.reshape(cb, p)  # [cb, P] positions of the correct rows
        if cb > 1:
            j -= (np.arange(cb) * n)[:, None]
        dot_h = np.take(h, j).sum(axis=1)  # [cb] sum_j ys[j] h[j]
        if "auarc" in which:
            out["auarc"] = dot_h / n
        if 0 < p < n and ("auroc" in which or "prr" in which):
            d_s2, d_u = _tie_corrections(ys, same, h, hcum)
            if "auroc" in which:
                s2 = 2.0 * j.sum(axis=1) + d_s2
                out["auroc"] = (2.0 * p * n - s2 - p * (p + 1.0)) / (2.0 * p * (n - p))
            if "prr" in which:
                out["prr"] = (dot_h + d_u - p) / (p * h[p])
    return {name: out[name] if name in out else np.full(cb, np.nan) for name in which}


def metrics_from_sorted(
    ys: np.ndarray, same: np.ndarray, which: Sequence[str] = RANK_METRICS
) -> dict[str, float]:
    """AUROC / AUARC / PRR from labels in stable ascending-score order ``ys [N]`` (bool) and
    the tie flags ``same [N-1]`` (see :func:`sorted_labels`). AUROC and PRR are NaN for
    single-class labels (no warning here); ``N = 0`` gives NaN everywhere."""
    out = _metrics_from_sorted(np.asarray(ys, bool)[None], np.asarray(same, bool)[None], which)
    return {name: float(v[0]) for name, v in out.items()}


# --------------------------------------------------------------------------- sort keys


def order_keys(x: np.ndarray) -> np.ndarray:
    """Unsigned keys (the shape of ``x``, C order) whose unsigned order is the numeric order
    of ``x``.

    float32 -> uint32, float64 -> uint64 (other dtypes become float64). ``-0.0`` and
    ``0.0`` get one key. NaN is not supported (callers validate finiteness).
    """
    x = np.asarray(x)
    if x.dtype != np.float32:
        x = x.astype(np.float64, copy=False)
    signed, unsigned = (
        (np.int32, np.uint32) if x.dtype == np.float32 else (np.int64, np.uint64)
    )
    # fresh C-order copy; -0.0 + 0.0 = +0.0
    bits = np.add(x, x.dtype.type(0.0), order="C").view(signed)
    mask = bits >> (8 * x.itemsize - 1)  # 0 for positives, all ones for negatives
    mask |= signed(np.iinfo(signed).min)  # ... and the sign bit set in both cases
    mask ^= bits  # positives: sign bit set; negatives: every bit flipped
    return mask.view(unsigned)


def row_label_bits(labels: np.ndarray) -> np.ndarray:
    """``[N]`` uint64 ``row << 1 | label``: the low word of the packed float32 keys
    (shareable between columns of one label vector; needs ``N < 2**31``)."""
    labels = np.asarray(labels, bool)
    low = np.arange(labels.shape[0], dtype=np.uint64)
    low <<= np.uint64(1)
    low |= labels
    return low


def _packed_keys(keys32: np.ndarray, low: np.ndarray) -> np.ndarray:
    """Unique uint64 sort keys ``keys32 << 32 | low`` (shape of the uint32 ``keys32``;
    ``low [N]`` from :func:`row_label_bits` along the last axis)."""
    packed = keys32.astype(np.uint64)
    packed <<= np.uint64(32)
    packed |= low
    return packed


def _float32_if_exact(x: np.ndarray) -> np.ndarray:
    """``x`` as float32 when it is float64 holding float32 values only (they rank the same,
    and float32 keys pack), else ``x`` unchanged."""
    if x.dtype == np.float64:
        with np.errstate(over="ignore"):  # out of float32 range -> inf -> not equal
            x32 = x.astype(np.float32)
        if np.array_equal(x32, x):
            return x32
    return x


# --------------------------------------------------------------------------- sorts


def stable_argsort(x: np.ndarray, keys: np.ndarray | None = None) -> np.ndarray:
    """Stable ascending argsort ``[N]`` (intp) of ``x [N]``: equal values keep file order.

    An LSD radix sort on 16-bit digits of :func:`order_keys` (2 passes for float32 scores,
    4 for float64, see :func:`radix_sort_with`); equal to ``np.argsort(x, kind="stable")``
    for finite ``x`` (with ``-0.0 == 0.0``). ``keys`` may pass precomputed
    :func:`order_keys`.
    """
    k = order_keys(x) if keys is None else keys
    return radix_sort_with(k, np.arange(k.shape[0], dtype=np.intp))[1][0]


def _sort_block(
    xb: np.ndarray, labels: np.ndarray, low: np.ndarray | None
) -> tuple[np.ndarray, np.ndarray]:
    """Block strategy: sort every column of ``xb [N, cb]`` in one call.

    Returns the labels in stable ascending-score order ``ys [cb, N]`` bool and ``same
    [cb, N-1]`` bool, true where sorted positions ``j`` and ``j + 1`` hold equal scores.
    """
    if low is not None:
        xb = _float32_if_exact(xb)
    keys = order_keys(xb.T)  # [cb, N], C order
    if low is not None and keys.dtype == np.uint32:
        key = _packed_keys(keys, low)
        key.sort(axis=1)
        same = (key[:, 1:] ^ key[:, :-1]) < _HIGH_BIT
        key &= np.uint64(1)
        return key.astype(bool), same
    idx = np.argsort(keys, axis=1, kind="stable")
    keys = np.take_along_axis(keys, idx, axis=1)
    return np.take(np.asarray(labels, bool), idx), keys[:, 1:] == keys[:, :-1]


def _sort_packed_f32(
    keys32: np.ndarray, low: np.ndarray
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Sort the packed keys of one column (unique, so any sort gives the stable order) with
    Polars' single-threaded integer sort; returns ``(high words, ys bool, low words)`` in
    sorted order, each ``[N]``."""
    import polars as pl

    s = pl.Series(_packed_keys(keys32, low)).sort(multithreaded=False).to_numpy()
    if np.little_endian:
        words = s.view(np.uint32)
        high, low_words = words[1::2], words[0::2]
    else:  # pragma: no cover - big-endian hosts
        high = (s >> np.uint64(32)).astype(np.uint32)
        low_words = (s & np.uint64(0xFFFFFFFF)).astype(np.uint32)
    ys = (low_words & np.uint32(1)).astype(bool)
    return high, ys, low_words


def sorted_labels(
    labels: np.ndarray,
    x: np.ndarray,
    *,
    check_finite: bool = False,
    packed: Sequence[np.ndarray] = (),
    low: np.ndarray | None = None,
) -> tuple[np.ndarray, np.ndarray, list[np.ndarray]]:
    """Column strategy: sort one column ``x [N]``: ``(ys [N] bool, same [N-1] bool,
    packed_sorted)``.

    ``ys`` are the labels in stable ascending-score order; ``same[j]`` is true when sorted
    positions ``j`` and ``j + 1`` hold equal scores (one tie group); ``packed`` (arrays
    ``[N]``, e.g. subset bit masks) come back in the same order. With ``check_finite``,
    ValueError when a score is NaN or infinite (read off the two ends of the sorted keys,
    where every non-finite value lands, so the check costs nothing).

    float32 scores (and float64 scores that are float32 values), ``N < 2**31``: the packed
    keys (module doc) sorted by Polars' integer sort; the labels, the rows (to carry
    ``packed``) and the score keys are read back off the sorted keys. Other float64 scores:
    the keys' top bits packed the same way (:func:`fastuq.metrics.sort64.packed_sort64`),
    else Polars' ``arg_sort`` of the 64-bit keys, checked stable (else
    :func:`radix_sort_with`, 4 passes). ``low`` may pass :func:`row_label_bits` of
    ``labels``, precomputed.
    """
    x = _float32_if_exact(np.asarray(x))
    labels = np.asarray(labels, bool)
    keys = order_keys(x)
    if keys.itemsize == 4 and keys.shape[0] < 1 << 31:
        if low is None:
            low = row_label_bits(labels)
        sorted_keys, ys, low_words = _sort_packed_f32(keys, low)
        rows = (low_words >> np.uint32(1)) if packed else None
        rest = [np.take(p, rows) for p in packed]
    else:
        done = packed_sort64(keys, labels, packed, low)
        if done is None:
            sorted_keys, (ys, *rest) = _sort64_with(keys, labels, *packed)
        else:  # no sorted keys: the ties and the ends come with the order
            sorted_keys = None
            ys, same, rest, ends = done
    if sorted_keys is not None:
        ends = (sorted_keys[0], sorted_keys[-1]) if sorted_keys.size else None
        same = sorted_keys[1:] == sorted_keys[:-1]
    if check_finite and ends is not None:
        lowest, highest = order_keys(np.array([-np.inf, np.inf], x.dtype))
        if not (lowest < ends[0] and ends[1] < highest):
            raise ValueError("scores hold a NaN or infinite value")
    return ys, same, rest


# --------------------------------------------------------------------------- entry points


def rank_metrics(
    labels: np.ndarray, x: np.ndarray, which: tuple[str, ...] = RANK_METRICS
) -> dict[str, np.ndarray]:
    """AUROC, AUARC and PRR of every column of ``x [N, C]`` against ``labels [N]`` bool.

    Inputs are assumed validated (finite, matching N >= 1). Returns float64 ``[C]`` arrays
    keyed by metric name; AUROC and PRR are NaN (without a warning) for single-class labels.
    Columns of :data:`FAST_MIN_ROWS` rows or more are sorted one by one
    (:func:`rank_metrics_rows`), shorter ones a block of columns at a time (module doc).
    """
    n, c = x.shape
    p = int(np.count_nonzero(labels))
    single = p == 0 or p == n
    out = {name: np.full(c, np.nan) for name in which}
    if c == 0:
        return out
    if not ("auarc" in which or (not single and {"auroc", "prr"} & set(which))):
        return out
    if n >= FAST_MIN_ROWS:
        full, _ = rank_metrics_rows(labels, x.T, which)
        return {name: full[name] for name in which}
    low = row_label_bits(labels) if n < 1 << 31 else None
    cb = max(1, min(c, BLOCK_ELEMENTS // max(n, 1)))
    for c0 in range(0, c, cb):
        c1 = min(c, c0 + cb)
        ys, same = _sort_block(x[:, c0:c1], labels, low)
        for name, values in _metrics_from_sorted(ys, same, which).items():
            out[name][c0:c1] = values
    return out


def rank_metrics_1d(
    labels: np.ndarray, x: np.ndarray, which: Sequence[str] = RANK_METRICS
) -> dict[str, float]:
    """Exact AUROC / AUARC / PRR of one score column ``x [N]`` against ``labels [N]`` (bool;
    correct = True), sorted by the column strategy. Inputs are assumed finite and of equal
    length."""
    ys, same, _ = sorted_labels(np.asarray(labels, bool), x)
    return metrics_from_sorted(ys, same, which)


def _pack_masks(masks: Sequence[np.ndarray]) -> list[np.ndarray]:
    """Boolean masks ``[N]`` packed 8 to a ``uint8`` word: bit ``s % 8`` of word ``s // 8``."""
    words = []
    for w in range(0, len(masks), 8):
        word = np.zeros(masks[0].shape[0], np.uint8)
        for bit, mask in enumerate(masks[w:w + 8]):
            word |= np.asarray(mask, np.uint8) << np.uint8(bit)
        words.append(word)
    return words


def _subset_sorted(
    ys: np.ndarray, same: np.ndarray, member: np.ndarray, gid: np.ndarray | None = None
) -> tuple[np.ndarray, np.ndarray]:
    """The sorted labels and tie flags of the rows with ``member`` true (``member`` in
    sorted order). A stable order restricted to a subset is the subset's stable order.
    ``gid``: :func:`_tie_groups` of ``same``, when already computed."""
    g = (_tie_groups(same) if gid is None else gid)[member]
    return ys[member], g[1:] == g[:-1]


class NonFiniteScoreError(ValueError):
    """A score row holds a NaN or infinite value; ``row`` is its index."""

    def __init__(self, row: int) -> None:
        super().__init__(f"score row {row} holds a NaN or infinite value")
        self.row = row


def _one_column(
    labels: np.ndarray,
    x: np.ndarray,
    which: tuple[str, ...],
    packed: list[np.ndarray],
    n_subsets: int,
    check_finite: bool,
    low: np.ndarray | None,
) -> tuple[dict[str, float], list[dict[str, float]]]:
    ys, same, words = sorted_labels(labels, x, check_finite=check_finite, packed=packed,
                                    low=low)
    full = metrics_from_sorted(ys, same, which)
    parts = []
    gid = _tie_groups(same) if n_subsets else None
    for s in range(n_subsets):
        member = (words[s // 8] & np.uint8(1 << (s % 8))).astype(bool)
        parts.append(metrics_from_sorted(*_subset_sorted(ys, same, member, gid), which))
    return full, parts


def rank_metrics_rows(
    labels: np.ndarray,
    x: np.ndarray,
    which: Sequence[str] = RANK_METRICS,
    *,
    subsets: Sequence[np.ndarray] | None = None,
    threads: int | None = None,
    check_finite: bool = False,
) -> tuple[dict[str, np.ndarray], dict[str, np.ndarray] | None]:
    """Exact rank metrics of every **row** of ``x [G, N]`` (one score column per row, e.g.
    one grid point each) against ``labels [N]`` bool, each row sorted on its own (the
    column strategy, :func:`sorted_labels`).

    Args:
      labels: ``[N]`` bool, correct = True.
      x: ``[G, N]`` float32 or float64 scores (uncertainties), finite; rows are sorted as
        they are (float32 rows by packed keys, other float64 by a 4-pass radix).
      which: metric names from :data:`RANK_METRICS`.
      subsets: optional ``S`` boolean row masks ``[N]``; each row's metrics are also computed
        on each subset of trajectories (e.g. the training part of each CV fold), from the
        row's one sort.
      threads: worker threads over rows (default :func:`default_threads`).
      check_finite: raise :class:`NonFiniteScoreError` (a ValueError) naming the first row
        found with a NaN or infinite score (free: read off the sorted keys' ends).

    Returns:
      ``(full, parts)``: ``full[name]`` float64 ``[G]``; ``parts[name]`` float64 ``[G, S]``
      (``None`` without ``subsets``). AUROC and PRR are NaN for single-class labels.
    """
    which = tuple(which)
    unknown = set(which) - set(RANK_METRICS)
    if unknown:
        raise ValueError(f"unknown rank metric(s) {sorted(unknown)}; known: {RANK_METRICS}")
    labels = np.asarray(labels, bool)
    x = np.asarray(x)
    if x.ndim != 2 or x.shape[1] != labels.shape[0]:
        raise ValueError(f"scores must be [G, N] with N = {labels.shape[0]}, got {x.shape}")
    g = x.shape[0]
    n_sub = 0 if subsets is None else len(subsets)
    packed = _pack_masks([np.asarray(s, bool) for s in subsets]) if n_sub else []
    full = {m: np.full(g, np.nan) for m in which}
    parts = None if subsets is None else {m: np.full((g, n_sub), np.nan) for m in which}
    threads = default_threads() if threads is None else max(1, int(threads))
    low = row_label_bits(labels) if labels.shape[0] < 1 << 31 else None

    def job(i: int):
        try:
            return _one_column(labels, x[i], which, packed, n_sub, check_finite, low)
        except ValueError:
            if check_finite and not np.isfinite(x[i]).all():
                raise NonFiniteScoreError(i) from None
            raise

    if threads == 1 or g == 1:
        results = map(job, range(g))
        pool = None
    else:
        pool = ThreadPoolExecutor(min(threads, g))
        results = pool.map(job, range(g))
    try:
        for i, (f, ps) in enumerate(results):
            for m in which:
                full[m][i] = f[m]
                if parts is not None:
                    parts[m][i] = [p[m] for p in ps]
    finally:
        if pool is not None:
            pool.shutdown()
    return full, parts
