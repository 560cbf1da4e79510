"""Fast exact rank metrics (AUROC, AUARC, PRR) of long score columns, one column at a time.

Every column needs its rows in stable ascending-score order (ties keep file order: the
order AUARC needs). First each score becomes an unsigned key with the same order (``-0.0``
is first made ``+0.0``, as the two compare equal)::

    u = bits(x);  key = ~u if sign(x) else u | SIGN_BIT

(``uint32`` for float32 scores, ``uint64`` for float64). Then:

* **float32** (and float64 scores that are float32 values), ``N < 2**31``: one unique
  64-bit integer per row, ``key << 32 | row << 1 | label``, sorted by Polars'
  single-threaded integer sort (unique keys, so any correct sort yields the stable order).
  The labels, rows and score keys are read back off the sorted integers: no gathers.
* **float64**: an LSD radix argsort on 16-bit digits built on NumPy's radix sort of 16-bit
  keys (``np.argsort(kind="stable")`` on ``uint16``): stably by the least significant
  digit, then by each next one, four passes (a pass whose digit is the same in every row is
  skipped). Each pass permutes the keys and the labels along (:func:`radix_sort_with`).
  :func:`stable_argsort` exposes it (two passes for float32 keys).

Measured on the 2-core reference machine, one 1e6 float32 column: ``np.argsort(kind=
"stable")`` ~160 ms, NumPy's ``np.sort`` of the packed 64-bit keys ~50 ms, the 2-pass radix
~30 ms, the Polars sort of the packed keys ~15-20 ms.

From the sorted labels ``ys`` and the tie groups (runs of equal neighbouring keys), in O(N),
with ``P`` correct among ``N`` and 0-based sorted positions ``j`` (see
:mod:`fastuq.metrics.rank` for the derivations)::

    AUARC = (1/N) sum_{correct j} h[j],  h[j] = sum_{k=j+1}^{N} 1/k
    AUROC = (2 P N - S2 - P (P + 1)) / (2 P (N - P)),  S2 = sum_{correct} (s + e)
    PRR   = (U - P) / (P h[P]),  U = sum_{correct} mean(h[s..e])

where ``[s, e]`` is the tie group of the row (``s = e = j`` without ties). AUROC counts tied
(correct, wrong) pairs one half, like ``sklearn.metrics.roc_auc_score(labels, -scores)``.

Both sorts release the GIL, so :func:`rank_metrics_rows` spreads the columns of a block over
a thread pool. Scores are ranked in the dtype they come in: float32 is plenty to rank SAUCE
scores (``DESIGN.md``), but two float64 scores that round to one float32 value tie in
float32; pass float64 scores to rank them apart.
"""

from __future__ import annotations

import functools
import os
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor

import numpy as np

__all__ = [
    "RANK_METRICS",
    "NonFiniteScoreError",
    "default_threads",
    "metrics_from_sorted",
    "order_keys",
    "radix_sort_with",
    "rank_metrics_1d",
    "rank_metrics_rows",
    "row_label_bits",
    "sorted_labels",
    "stable_argsort",
]

#: Metrics computed from one stable sort.
RANK_METRICS = ("auroc", "auarc", "prr")


def default_threads() -> int:
    """Threads for column-parallel sorting: the usable cores, at most 8."""
    try:
        cores = len(os.sched_getaffinity(0))
    except AttributeError:  # not Linux
        cores = os.cpu_count() or 1
    return max(1, min(8, cores))


@functools.lru_cache(maxsize=16)
def _harmonic(n: int) -> tuple[np.ndarray, np.ndarray]:
    """``(h [n], H [n + 1])``: harmonic tail ``h[j] = sum_{k=j+1}^{n} 1/k`` and its prefix
    sums ``H[j] = sum_{i<j} h[i]``, float64, read-only (cached per ``n``)."""
    inv = 1.0 / np.arange(n, 0, -1, dtype=np.float64)  # 1/n, ..., 1/1: small terms first
    h = np.cumsum(inv)[::-1].copy()
    hcum = np.concatenate(([0.0], np.cumsum(h)))
    h.flags.writeable = False
    hcum.flags.writeable = False
    return h, hcum


def order_keys(x: np.ndarray) -> np.ndarray:
    """Unsigned keys ``[N]`` whose unsigned order is the numeric order of ``x [N]``.

    float32 -> uint32, float64 -> uint64 (other dtypes become float64). ``-0.0`` and
    ``0.0`` get one key. NaN is not supported (callers validate finiteness).
    """
    x = np.asarray(x)
    if x.dtype != np.float32:
        x = x.astype(np.float64, copy=False)
    signed, unsigned = (
        (np.int32, np.uint32) if x.dtype == np.float32 else (np.int64, np.uint64)
    )
    bits = np.add(x, x.dtype.type(0.0)).view(signed)  # fresh copy; -0.0 + 0.0 = +0.0
    mask = bits >> (8 * x.itemsize - 1)  # 0 for positives, all ones for negatives
    mask |= signed(np.iinfo(signed).min)  # ... and the sign bit set in both cases
    mask ^= bits  # positives: sign bit set; negatives: every bit flipped
    return mask.view(unsigned)


def radix_sort_with(
    keys: np.ndarray, *payloads: np.ndarray, skip_constant: bool | None = None
) -> tuple[np.ndarray, list[np.ndarray]]:
    """Sort unsigned ``keys [N]`` stably, carrying ``payloads`` (arrays ``[N]``) along.

    LSD radix on 16-bit digits: per digit, least significant first, one stable
    ``np.argsort`` of the digit (NumPy's radix sort for 16-bit keys), then the keys and
    every payload are permuted by it. Carrying the payloads costs one small gather each per
    pass, cheaper than composing a full 64-bit permutation. ``skip_constant`` (default: for
    64-bit keys) skips passes whose digit is the same for every row.

    Returns ``(sorted_keys, [sorted payloads])``.
    """
    n = keys.shape[0]
    width = keys.itemsize // 2
    if np.little_endian:
        columns = range(width)
    else:  # most significant digit first in memory
        columns = range(width - 1, -1, -1)
    if skip_constant is None:
        skip_constant = keys.itemsize > 4
    current = list(payloads)
    for d in columns:
        digit = keys.view(np.uint16).reshape(n, width)[:, d]
        if skip_constant and n and digit.min() == digit.max():
            continue  # the same digit for every row: this pass would not move anything
        step = np.argsort(digit, kind="stable")
        keys = np.take(keys, step)
        current = [np.take(p, step) for p in current]
    return keys, current


def stable_argsort(x: np.ndarray, keys: np.ndarray | None = None) -> np.ndarray:
    """Stable ascending argsort ``[N]`` (intp) of ``x [N]``: equal values keep file order.

    An LSD radix sort on 16-bit digits of :func:`order_keys` (2 passes for float32 scores,
    4 for float64, see :func:`radix_sort_with`); equal to ``np.argsort(x, kind="stable")``
    for finite ``x`` (with ``-0.0 == 0.0``). ``keys`` may pass precomputed
    :func:`order_keys`.
    """
    k = order_keys(x) if keys is None else keys
    return radix_sort_with(k, np.arange(k.shape[0], dtype=np.intp))[1][0]


def _pack_masks(masks: Sequence[np.ndarray]) -> list[np.ndarray]:
    """Boolean masks ``[N]`` packed 8 to a ``uint8`` word: bit ``s % 8`` of word ``s // 8``."""
    words = []
    for w in range(0, len(masks), 8):
        word = np.zeros(masks[0].shape[0], np.uint8)
        for bit, mask in enumerate(masks[w:w + 8]):
            word |= np.asarray(mask, np.uint8) << np.uint8(bit)
        words.append(word)
    return words


def row_label_bits(labels: np.ndarray) -> np.ndarray:
    """``[N]`` uint64 ``row << 1 | label``: the low word of :func:`sorted_labels`' packed
    float32 keys (shareable between columns of one label vector; needs ``N < 2**31``)."""
    labels = np.asarray(labels, bool)
    low = np.arange(labels.shape[0], dtype=np.uint64)
    low <<= np.uint64(1)
    low |= labels
    return low


def _sort_packed_f32(
    keys32: np.ndarray, low: np.ndarray
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """Sort ``keys32 << 32 | low`` (unique, so any sort gives the stable order) with Polars'
    single-threaded integer sort; returns ``(high words, ys bool, rows uint32, packed)``
    in sorted order, each ``[N]``."""
    import polars as pl

    packed = keys32.astype(np.uint64)
    packed <<= np.uint64(32)
    packed |= low
    s = pl.Series(packed).sort(multithreaded=False).to_numpy()
    if np.little_endian:
        words = s.view(np.uint32)
        high, low_words = words[1::2], words[0::2]
    else:  # pragma: no cover - big-endian hosts
        high = (s >> np.uint64(32)).astype(np.uint32)
        low_words = (s & np.uint64(0xFFFFFFFF)).astype(np.uint32)
    ys = (low_words & np.uint32(1)).astype(bool)
    return high, ys, low_words, s


def sorted_labels(
    labels: np.ndarray,
    x: np.ndarray,
    *,
    check_finite: bool = False,
    packed: Sequence[np.ndarray] = (),
    low: np.ndarray | None = None,
) -> tuple[np.ndarray, np.ndarray, list[np.ndarray]]:
    """Sort one column: ``(ys [N] bool, same [N-1] bool, packed_sorted)``.

    ``ys`` are the labels in stable ascending-score order; ``same[j]`` is true when sorted
    positions ``j`` and ``j + 1`` hold equal scores (one tie group); ``packed`` (arrays
    ``[N]``, e.g. subset bit masks) come back in the same order. With ``check_finite``,
    ValueError when a score is NaN or infinite (read off the two ends of the sorted keys,
    where every non-finite value lands, so the check costs nothing).

    float32 scores (and float64 scores that are float32 values), ``N < 2**31``: one unique
    64-bit key per row, ``order_key << 32 | row << 1 | label``, sorted by Polars' integer
    sort; the labels, the rows (to carry ``packed``) and the score keys are read back off the
    sorted keys. Other float64 scores: :func:`radix_sort_with` over 64-bit keys, 4 passes.
    ``low`` may pass :func:`row_label_bits` of ``labels``, precomputed.
    """
    x = np.asarray(x)
    labels = np.asarray(labels, bool)
    if x.dtype == np.float64:  # float32-exact values rank the same as float32
        with np.errstate(over="ignore"):
            x32 = x.astype(np.float32)
        if np.array_equal(x32, x):
            x = x32
    keys = order_keys(x)
    if keys.itemsize == 4 and keys.shape[0] < 1 << 31:
        if low is None:
            low = row_label_bits(labels)
        sorted_keys, ys, low_words, _ = _sort_packed_f32(keys, low)
        rows = (low_words >> np.uint32(1)) if packed else None
        rest = [np.take(p, rows) for p in packed]
    else:
        sorted_keys, (ys, *rest) = radix_sort_with(keys, labels, *packed)
    if check_finite and sorted_keys.size:
        lowest, highest = order_keys(np.array([-np.inf, np.inf], x.dtype))
        if not (lowest < sorted_keys[0] and sorted_keys[-1] < highest):
            raise ValueError("scores hold a NaN or infinite value")
    same = sorted_keys[1:] == sorted_keys[:-1]
    return ys, same, rest


def _tie_corrections(
    ys: np.ndarray, same: np.ndarray, h: np.ndarray, hcum: np.ndarray
) -> tuple[float, float]:
    """Corrections of ``S2`` and ``U`` (module doc) over their tie-free values ``2 j`` and
    ``h[j]``, visiting only rows that lie in a tie group of size >= 2."""
    n = ys.shape[0]
    in_tie = np.zeros(n, bool)
    in_tie[:-1] = same
    in_tie[1:] |= same
    pos = np.flatnonzero(in_tie)
    if pos.size == 0:
        return 0.0, 0.0
    continues = np.zeros(n, bool)
    continues[1:] = same  # equal to the previous position
    starts = ~continues[pos]
    gid = np.cumsum(starts) - 1
    start_idx = np.flatnonzero(starts)
    first = pos[start_idx]
    last = np.empty_like(first)
    last[:-1] = pos[start_idx[1:] - 1]
    last[-1] = pos[-1]
    y = ys[pos]
    pos, s, e = pos[y], first[gid[y]], last[gid[y]]
    d_s2 = float(np.sum(s + e - 2 * pos))
    mean_h = (hcum[e + 1] - hcum[s]) / (e - s + 1)
    d_u = float(np.sum(mean_h - h[pos]))
    return d_s2, d_u


def metrics_from_sorted(
    ys: np.ndarray, same: np.ndarray, which: Sequence[str] = RANK_METRICS
) -> dict[str, float]:
    """AUROC / AUARC / PRR from labels in stable ascending-score order ``ys [N]`` (bool) and
    the tie flags ``same [N-1]`` (see :func:`sorted_labels`). AUROC and PRR are NaN for
    single-class labels (no warning here); ``N = 0`` gives NaN everywhere."""
    n = ys.shape[0]
    out = dict.fromkeys(which, float("nan"))
    if n == 0:
        return out
    h, hcum = _harmonic(n)
    pos = np.flatnonzero(ys)
    p = pos.shape[0]
    dot_h = float(np.sum(np.take(h, pos)))
    if "auarc" in out:
        out["auarc"] = dot_h / n
    if p == 0 or p == n or not ({"auroc", "prr"} & out.keys()):
        return out
    d_s2, d_u = _tie_corrections(ys, same, h, hcum)
    if "auroc" in out:
        s2 = 2.0 * float(np.sum(pos)) + d_s2
        out["auroc"] = (2.0 * p * n - s2 - p * (p + 1.0)) / (2.0 * p * (n - p))
    if "prr" in out:
        out["prr"] = (dot_h + d_u - p) / (p * h[p])
    return out


def rank_metrics_1d(
    labels: np.ndarray, x: np.ndarray, which: Sequence[str] = RANK_METRICS
) -> dict[str, float]:
    """Exact AUROC / AUARC / PRR of one score column ``x [N]`` against ``labels [N]`` (bool;
    correct = True). Inputs are assumed finite and of equal length."""
    ys, same, _ = sorted_labels(np.asarray(labels, bool), x)
    return metrics_from_sorted(ys, same, which)


def _subset_sorted(
    ys: np.ndarray, same: np.ndarray, member: np.ndarray
) -> tuple[np.ndarray, np.ndarray]:
    """The sorted labels and tie flags of the rows with ``member`` true (``member`` in
    sorted order). A stable order restricted to a subset is the subset's stable order."""
    gid = np.empty(ys.shape[0], np.int64)
    gid[0] = 0
    if ys.shape[0] > 1:
        np.cumsum(~same, out=gid[1:])
    g = gid[member]
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
    for s in range(n_subsets):
        member = (words[s // 8] & np.uint8(1 << (s % 8))).astype(bool)
        parts.append(metrics_from_sorted(*_subset_sorted(ys, same, member), which))
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
    one grid point each) against ``labels [N]`` bool.

    Args:
      labels: ``[N]`` bool, correct = True.
      x: ``[G, N]`` float32 or float64 scores (uncertainties), finite; rows are sorted as
        they are (float32 rows in two radix passes, float64 in four).
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
