"""ROUGE-L of every pair of agents' texts in every round, for whole corpora at once (the
``rouge_l_similarity`` estimator and the spectral scores with ``similarity="rouge_l"``).

Definition (rouge-score's ``rougeL`` F-measure, ``beta = 1``, on fastuq's word tokens: the
consistency gate's, :func:`fastuq.signals.tokens.text_token_ids`, in text order with repeats):
for token sequences ``X`` (``m`` tokens) and ``Y`` (``n``) with a longest common subsequence
of ``l`` tokens, ``P = l / n``, ``R = l / m`` and ``F = 2 P R / (P + R) = 2 l / (m + n)``
(computed in that last form); 0 where either text has no token (rouge-score's convention).

Vectorized: the LCS of every pair at once by the bit-parallel algorithm of Allison and Dix
(1986) in Hyyro's form (2004): the shorter text of a pair is a bit vector of ``W`` 64-bit
words (``W = ceil(m / 64)``, the longest such text of the corpus), ``V = ~0``, and for each
token ``y`` of the longer text ``U = V & M[y]``, ``V = (V + U) | (V & ~U)`` with ``M[y]``
the positions of ``y`` in the shorter text; ``l`` is the number of zero bits among the low
``m``. The Python loop runs over token positions (the longest text) and words, each step
one NumPy operation over every pair still running; ``M[y]`` is looked up in one sorted
table of (text, token) keys.
"""

from __future__ import annotations

import numpy as np

from fastuq.signals.tokens import fmix64

__all__ = ["pair_rouge_l"]

_ONE = np.uint64(1)


def pair_rouge_l(ids: np.ndarray, first: np.ndarray, group: np.ndarray, slot: np.ndarray,
                 n_groups: int, n_slots: int) -> np.ndarray:
    """``[G, A, A]`` float64 ROUGE-L F-measure (module docstring) of every pair of texts of
    a group, 0 on the diagonal (the caller sets it) and for a slot without a text.

    Args:
      ids, first: token ids of ``R`` texts in text order, text ``r``'s at
        ``ids[first[r]:first[r+1]]``.
      group: ``[R]`` the group (round) of each text, non-decreasing in ``[0, G)``; slot:
        ``[R]`` its slot in ``[0, A)`` (one text per (group, slot)).
      n_groups, n_slots: ``G`` and ``A``.
    """
    group = np.asarray(group, np.int64)
    slot = np.asarray(slot, np.int64)
    out = np.zeros((n_groups, n_slots, n_slots), np.float64)
    if group.size and np.any(group[1:] < group[:-1]):
        raise ValueError("pair_rouge_l: group must be non-decreasing")
    length = np.diff(first).astype(np.int64)
    n_rows = length.size
    # every pair (r, s > r) of texts of a group, both with tokens
    per = np.bincount(group, minlength=n_groups)
    end = (np.cumsum(per))[group] if n_rows else np.zeros(0, np.int64)
    partners = end - np.arange(n_rows) - 1
    p = np.repeat(np.arange(n_rows), partners)
    q = p + 1 + (np.arange(p.size) - np.repeat(np.cumsum(partners) - partners, partners))
    keep = (length[p] > 0) & (length[q] > 0)
    p, q = p[keep], q[keep]
    if not p.size:
        return out
    short = length[p] <= length[q]
    x, y = np.where(short, p, q), np.where(short, q, p)  # x: the shorter, as bits
    order = np.argsort(-length[y], kind="stable")  # longest y first: running pairs a prefix
    x, y = x[order], y[order]
    m, n = length[x], length[y]
    lcs = _lcs(ids, first, length, x, y, m, n)
    f = 2.0 * lcs / (m + n)
    g = group[x]
    out[g, slot[x], slot[y]] = f
    out[g, slot[y], slot[x]] = f
    return out


def _token_numbers(ids: np.ndarray, bits: int) -> np.ndarray:
    """``[K]`` uint64 below ``2**bits``, equal exactly where the ids are equal: the top
    ``bits`` of the bijective :func:`fastuq.signals.tokens.fmix64` where they are distinct on
    the distinct ids, else each id's rank among them."""
    d = np.sort(ids)
    keep = np.ones(d.size, bool)
    keep[1:] = d[1:] != d[:-1]
    d = d[keep]
    if bits < 64 and max(d.size - 1, 0).bit_length() <= bits:
        shift = np.uint64(64 - bits)
        h = np.sort(fmix64(d.copy()) >> shift)
        if not np.any(h[1:] == h[:-1]):
            return fmix64(ids.copy()) >> shift
    return np.searchsorted(d, ids).astype(np.uint64)


def _lcs(ids, first, length, x, y, m, n) -> np.ndarray:
    """``[P]`` LCS lengths of the pairs ``(x, y)`` of texts (``n`` non-increasing)."""
    n_words = int((m.max() + 63) // 64)
    row_bits = max(length.size - 1, 0).bit_length()
    bits = 64 - row_bits
    tok = _token_numbers(ids, bits)
    # the match masks: for each (text, token) the bits of its positions, in n_words words,
    # in one sorted table of (text, token) keys
    row = np.repeat(np.arange(length.size, dtype=np.uint64), length)
    pos = np.arange(ids.size) - np.repeat(first[:-1], length)
    inside = pos < 64 * n_words  # a longer text is never the shorter of a pair
    key = (row[inside] << np.uint64(bits)) | tok[inside] if bits < 64 else tok[inside]
    pos = pos[inside]
    srt = np.argsort(key, kind="stable")
    key, pos = key[srt], pos[srt]
    start = np.ones(key.size, bool)
    start[1:] = key[1:] != key[:-1]
    keys = key[start]
    entry = np.cumsum(start) - 1
    masks = np.zeros((keys.size + 1, n_words), np.uint64)  # the last row: no match
    np.bitwise_or.at(masks, (entry, pos >> 6), _ONE << (pos & 63).astype(np.uint64))
    # each text's segment of the table: the lookups search only there
    owner = (keys >> np.uint64(bits)).astype(np.int64) if bits < 64 else np.zeros(
        keys.size, np.int64)
    seg = np.searchsorted(owner, np.arange(length.size + 1))
    lo0, hi0 = seg[x], seg[x + 1]
    steps = int(np.max(hi0 - lo0)).bit_length()
    v = np.full((x.size, n_words), ~np.uint64(0), np.uint64)
    running = np.searchsorted(-n, -np.arange(int(n[0])), side="left")  # pairs with n > j
    base_x = x.astype(np.uint64) << np.uint64(bits) if bits < 64 else np.zeros(x.size, np.uint64)
    first_y = first[y]
    last = keys.size - 1
    for j in range(int(n[0])):
        c = int(running[j])
        k = base_x[:c] | tok[first_y[:c] + j]
        lo, hi = lo0[:c].copy(), hi0[:c].copy()
        for _ in range(steps):  # binary search within the segment: the first key >= k
            mid = (lo + hi) >> 1
            less = keys[np.minimum(mid, last)] < k
            less &= mid < hi
            lo = np.where(less, mid + 1, lo)
            hi = np.where(less, hi, mid)
        at = np.where((lo < hi0[:c]) & (keys[np.minimum(lo, last)] == k), lo, keys.size)
        u = v[:c] & masks[at]
        carry = np.zeros(c, np.uint64)
        for w in range(n_words):
            vw, uw = v[:c, w], u[:, w]
            s = vw + uw
            out = s + carry
            carry = ((s < vw) | (out < s)).astype(np.uint64)
            v[:c, w] = out | (vw & ~uw)
    # zero bits among the low m: m - popcount(V restricted to them)
    low = np.clip(m[:, None] - 64 * np.arange(n_words)[None, :], 0, 64)
    lowmask = np.where(low >= 64, ~np.uint64(0),
                       (_ONE << np.minimum(low, 63).astype(np.uint64)) - _ONE)
    return m - np.bitwise_count(v & lowmask).sum(axis=1).astype(np.int64)
