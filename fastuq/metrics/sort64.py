"""Stable sorting of 64-bit score keys for the rank metrics (:mod:`fastuq.metrics.rank`).

The keys are :func:`fastuq.metrics.rank.order_keys` of float64 scores: unsigned integers
whose order is the scores'. Three sorts give the same stable order (equal keys in row
order), fastest first:

* :func:`packed_sort64`: each row becomes one unique 64-bit word, the key's top bits above
  ``row << 1 | label``, sorted by ``np.sort`` (NumPy's SIMD sorting networks on x86 with
  AVX-512 or AVX2, else its introsort); runs of rows whose top bits tie but whose full keys
  differ (scores within a few ulps of each other, when the keys span a wide range) are then
  re-sorted by (full key, row). Gives up (None) when those runs would hold more than
  :data:`MAX_FIX` of the rows. On the 8 score columns of ``fastuq eval``'s 1e7-row
  benchmark: about 1.0-1.5 s of CPU per column for the whole rank stage, against 2-3 s
  with :func:`checked_argsort64`.
* :func:`checked_argsort64`: Polars' ``arg_sort`` of the keys, checked to be the stable
  order, else :func:`radix_sort_with`.
* :func:`radix_sort_with`: an LSD radix sort on 16-bit digits.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

__all__ = ["MAX_FIX", "checked_argsort64", "packed_sort64", "radix_sort_with",
           "tie_groups"]

#: Most rows (a fraction of N) :func:`packed_sort64` re-sorts by their full keys before it
#: gives the column up (the caller then sorts it with :func:`checked_argsort64`).
MAX_FIX = 0.25


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


def checked_argsort64(
    keys: np.ndarray, *payloads: np.ndarray
) -> tuple[np.ndarray, list[np.ndarray]]:
    """:func:`radix_sort_with` of uint64 ``keys [N]``, by Polars' ``arg_sort`` when it gives
    the stable order: equal keys must come in row order, which is checked on the sorted keys
    (one comparison per row); the radix sort runs only when the check fails. About 2x less
    CPU than the 4-pass radix on 1e7 float64 scores."""
    n = keys.shape[0]
    if n < 2:
        return radix_sort_with(keys, *payloads)
    import polars as pl

    idx = pl.Series(keys).arg_sort().to_numpy()
    sorted_keys = np.take(keys, idx)
    ties = sorted_keys[1:] == sorted_keys[:-1]
    if np.any(ties & (idx[1:] < idx[:-1])):  # an unstable order: sort the slow way
        return radix_sort_with(keys, *payloads)
    return sorted_keys, [np.take(p, idx) for p in payloads]


def tie_groups(same: np.ndarray) -> np.ndarray:
    """``[N]`` tie-group (run) number of each sorted position (``same [N-1]``: whether a
    position ties with the next); int32 below 2**31 rows."""
    n = same.shape[0] + 1
    gid = np.empty(n, np.int32 if n < 1 << 31 else np.int64)
    gid[0] = 0
    if n > 1:
        np.cumsum(~same, out=gid[1:])
    return gid


def packed_sort64(
    keys: np.ndarray, labels: np.ndarray, payloads: Sequence[np.ndarray],
    low: np.ndarray | None = None,
) -> tuple[np.ndarray, np.ndarray, list[np.ndarray], tuple[int, int]] | None:
    """The stable order of uint64 ``keys [N]`` from one sort of unique packed words:
    ``(ys [N] bool, same [N-1] bool, payloads sorted, (min key, max key))``, or None when
    more than :data:`MAX_FIX` of the rows would need the fix-up below.

    With ``rb`` bits for ``row << 1 | label`` (``low``, precomputed, or made here) and the
    keys' range ``kmax - kmin`` taking ``w`` bits, each row becomes the unique word
    ``((key - kmin) >> s) << rb | row << 1 | label`` with ``s = max(0, w - (64 - rb))``,
    and ``np.sort`` of the words (a SIMD sort where NumPy has one) orders the rows by the
    key's top bits, equal top bits in row order. With ``s = 0`` that is the stable order
    by the full key, and the ties are runs of equal top bits. Otherwise runs of equal top
    bits whose full keys differ (scores within about ``2**s`` ulps, rare for continuous
    scores; ties of equal scores are not such runs) are re-sorted by (full key, row). The
    labels come off the sorted words; ``payloads`` are gathered by the rows."""
    n = keys.shape[0]
    if n < 2 or n >= 1 << 40:
        return None
    kmin, kmax = keys.min(), keys.max()
    rb = (n - 1).bit_length() + 1
    shift = max(0, int(kmax - kmin).bit_length() - (64 - rb))
    words = keys - kmin
    if shift:
        words >>= np.uint64(shift)
    words <<= np.uint64(rb)
    if low is None:
        low = np.arange(n, dtype=np.uint64)
        low <<= np.uint64(1)
        low |= np.asarray(labels, bool)
    words |= low
    words.sort()
    ys = (words.view(np.uint8)[:: 8] if np.little_endian else
          words.view(np.uint8)[7 :: 8]) & np.uint8(1)
    ys = ys.view(bool)
    rows = words >> np.uint64(1)
    rows &= np.uint64((1 << (rb - 1)) - 1)
    rows = rows.view(np.int64)
    words >>= np.uint64(rb)  # the keys' top bits, in sorted order
    same = words[1:] == words[:-1]
    del words
    if shift:
        # equal top bits: equal keys, or a run to re-sort
        if np.count_nonzero(same) > n // 8:  # many ties (few distinct scores): one gather
            sorted_keys = np.take(keys, rows)
            differ = np.flatnonzero(same & (sorted_keys[1:] != sorted_keys[:-1]))
            del sorted_keys
        else:
            tied = np.flatnonzero(same)
            differ = tied[np.take(keys, np.take(rows, tied)) !=
                          np.take(keys, np.take(rows, tied + 1))]
        if differ.size >= MAX_FIX * n:  # a run holding k such pairs has k + 1 rows or more
            return None
        if differ.size and not _resort_runs(keys, labels, rows, ys, same, differ, n):
            return None
    return ys, same, [np.take(p, rows) for p in payloads], (int(kmin), int(kmax))


def _resort_runs(keys, labels, rows, ys, same, differ, n) -> bool:
    """Re-sort, in place, the runs of equal top bits (:func:`packed_sort64`) that hold
    the sorted pairs ``differ`` (positions ``j`` whose full keys differ from ``j + 1``'s) by
    (full key, row), updating ``rows``, ``ys`` and ``same``; False (nothing changed) when
    they hold more than :data:`MAX_FIX` of the rows."""
    run = tie_groups(same)  # run number of each sorted position
    bad = np.unique(run[differ])
    start = np.searchsorted(run, bad, "left")
    size = np.searchsorted(run, bad, "right") - start
    m = int(size.sum())
    if m > MAX_FIX * n:
        return False
    pos = np.repeat(start - np.cumsum(size) + size, size) + np.arange(m)
    sub_rows = rows[pos]
    sub_keys = np.take(keys, sub_rows)
    sub_run = run[pos]
    order = np.lexsort((sub_rows, sub_keys, sub_run))
    sub_rows, sub_keys = sub_rows[order], sub_keys[order]
    rows[pos] = sub_rows
    ys[pos] = np.take(labels, sub_rows)
    inner = sub_run[1:] == sub_run[:-1]  # pairs inside one run (the last pair of a run
    same[pos[:-1][inner]] = sub_keys[1:][inner] == sub_keys[:-1][inner]  # and the next
    return True  # run's first row differ in their top bits: left as they are)
