"""The lexical similarity of a round's texts, for whole corpora at once: the token-set Jaccard
index of every pair of agents' texts in every round (``lexical_similarity`` and the spectral
scores with ``similarity="lexical"``, DESIGN.md "Black-box family").

Tokens are the consistency gate's (:func:`fastuq.signals.tokens.text_token_ids`: word
tokens of the lowercased text, hashed past 8 bytes). For two texts with token sets ``A`` and
``B`` the similarity is ``|A n B| / |A u B|``, and 0 where the union is empty (lm-polygraph's
``Jaccard_score`` convention); a slot without a text (null, or past the end of its round's
list) has the empty set, so it is similar to no other slot. The diagonal is 1 for every slot
of the team (``a < team``): each agent of the team is a node of the round's graph, as every
agent of the team stays in the denominator of agreement (DESIGN.md); slots past the team are
0 there (no node).

Vectorized: the token ids of all texts in one pass, then (round, token, slot) triples sorted
once (one int64 key each, ``np.unique``); within a round, the slots sharing a token are
neighbours, and each pair of them adds one to the pair's intersection (pairs generated with
``np.repeat``, counted with ``np.bincount``). No Python loop runs over records, rounds,
texts or tokens.
"""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from fastuq.errors import RecordError
from fastuq.io.arrow_lists import combined, list_lengths, parents, ramp
from fastuq.signals.rouge import pair_rouge_l
from fastuq.signals.tokens import fmix64, text_token_ids

__all__ = ["BLOCK_TOKENS", "MASK_SLOTS", "MIN_HASH_BITS", "pair_counts", "pair_jaccard",
           "round_similarity"]


#: Tokens per block of :func:`pair_counts` (whole rounds; a longer round is a block alone).
BLOCK_TOKENS = 1 << 17
#: The fewest hash bits a block's (round, token, slot) key may give its tokens; below, or
#: where two distinct ids of the block share their hash bits, the block numbers its
#: distinct ids exactly (by rank) instead.
MIN_HASH_BITS = 40
#: Teams of at most this many slots count intersections by slot masks (a histogram of
#: ``2**A`` masks per round); wider teams by listing the pairs of each shared token.
MASK_SLOTS = 8


def pair_counts(ids: np.ndarray, first: np.ndarray, group: np.ndarray, slot: np.ndarray,
                n_groups: int, n_slots: int) -> np.ndarray:
    """``[G, A, A]`` float64 ``|S_a n S_b|``: the number of distinct token ids that the texts
    in slots ``a`` and ``b`` of a group share (the diagonal: each text's number of distinct
    ids; 0 for a slot without a text).

    Args:
      ids, first: token ids of ``R`` texts, text ``r``'s at ``ids[first[r]:first[r+1]]``
        (repeats allowed: sets are taken).
      group: ``[R]`` the group (round) of each text, non-decreasing in ``[0, G)``; slot:
        ``[R]`` its slot in ``[0, A)`` (one text per (group, slot)).
      n_groups, n_slots: ``G`` and ``A``.

    Vectorized over blocks of whole groups of about :data:`BLOCK_TOKENS` tokens (a Python
    loop over blocks, not over records): in a block each token is one uint64 key
    ``(group, token, slot)``, the token as the top bits of a bijective 64-bit mix of its id
    (checked to be injective on the block's distinct ids, else the id's rank among them);
    the keys are sorted once and deduplicated (sets), and each run of one (group, token)
    gives the slot mask of the texts holding it. Teams of up to :data:`MASK_SLOTS` slots
    count masks per group (``np.bincount``) and turn the ``[G, 2**A]`` histogram into pair
    counts with one matrix product; wider teams list each run's pairs (``np.repeat``) and
    count them with ``np.bincount``.
    """
    a = int(n_slots)
    out = np.zeros((n_groups, a, a), np.float64)
    group = np.asarray(group, np.int64)
    if n_groups and group.size and np.any(group[1:] < group[:-1]):
        raise ValueError("pair_counts: group must be non-decreasing")
    counts = np.diff(first)
    if not counts.sum():
        return out
    sb = max(a - 1, 0).bit_length()
    g_tok = np.zeros(n_groups + 1, np.int64)
    np.cumsum(np.bincount(group, weights=counts, minlength=n_groups).astype(np.int64),
              out=g_tok[1:])
    cuts = np.unique(np.searchsorted(g_tok, np.arange(0, g_tok[-1], BLOCK_TOKENS),
                                     side="right") - 1)
    cuts = np.r_[cuts, n_groups]
    tok_group = np.repeat(group, counts)
    tok_slot = np.repeat(np.asarray(slot, np.uint64), counts)
    table = _mask_pairs(a) if a <= MASK_SLOTS else None
    for g0, g1 in zip(cuts[:-1].tolist(), cuts[1:].tolist(), strict=True):
        lo, hi = int(g_tok[g0]), int(g_tok[g1])
        if lo < hi:
            _block_counts(ids[lo:hi], tok_group[lo:hi] - g0, tok_slot[lo:hi], g1 - g0, a, sb,
                          table, out[g0:g1])
    return out


def _block_counts(x: np.ndarray, grp: np.ndarray, slot: np.ndarray, ng: int, a: int, sb: int,
                  table: np.ndarray | None, out: np.ndarray) -> None:
    """:func:`pair_counts` of one block (groups local to it), written into ``out``."""
    hb = 64 - max(ng - 1, 0).bit_length() - sb
    d = np.sort(x)
    d = d[_run_starts(d)]  # the block's distinct ids
    tok = None
    if hb >= MIN_HASH_BITS:  # fmix64 is a bijection: distinct ids, distinct mixes
        hd = np.sort(fmix64(d.copy()) >> np.uint64(64 - hb))
        if not np.any(hd[1:] == hd[:-1]):
            tok, tb = fmix64(x.copy()) >> np.uint64(64 - hb), hb
    if tok is None:
        tok, tb = np.searchsorted(d, x).astype(np.uint64), max(d.size - 1, 0).bit_length()
    key = grp.astype(np.uint64) << np.uint64(tb)
    key |= tok
    key <<= np.uint64(sb)
    key |= slot
    key.sort()
    key = key[_run_starts(key)]  # sets, not bags
    rk = key >> np.uint64(sb)  # (group, token): equal within a run
    starts = np.flatnonzero(_run_starts(rk))
    if table is not None:  # each run's slot mask, counted per (group, mask)
        bit = np.left_shift(np.int32(1), (key & np.uint64((1 << sb) - 1)).astype(np.int32))
        mask = np.add.reduceat(bit, starts)
        gl = (rk[starts] >> np.uint64(tb)).astype(np.int64)
        hist = np.bincount(gl << a | mask, minlength=ng << a).reshape(ng, 1 << a)
        out[:] = (hist.astype(np.float64) @ table).reshape(ng, a, a)
        return
    s = (key & np.uint64((1 << sb) - 1)).astype(np.int64)
    gl = (rk >> np.uint64(tb)).astype(np.int64)
    size = np.bincount(gl * a + s, minlength=ng * a).reshape(ng, a)
    run_end = np.r_[starts[1:], rk.size]
    run = np.repeat(np.arange(starts.size), np.diff(np.r_[starts, rk.size]))
    partners = run_end[run] - np.arange(rk.size) - 1  # later members of the same run
    p = np.repeat(np.arange(rk.size), partners)
    q = p + 1 + (np.arange(p.size) - np.repeat(np.cumsum(partners) - partners, partners))
    inter = np.bincount((gl[p] * a + s[p]) * a + s[q], minlength=ng * a * a).reshape(ng, a, a)
    inter = inter + inter.transpose(0, 2, 1)
    inter[:, np.arange(a), np.arange(a)] = size
    out[:] = inter


def _mask_pairs(a: int) -> np.ndarray:
    """``[2**A, A*A]`` float64: entry ``(m, a A + b)`` is 1 where slots ``a`` and ``b`` are
    both in the mask ``m``."""
    bits = (np.arange(1 << a)[:, None] >> np.arange(a)) & 1
    return (bits[:, :, None] & bits[:, None, :]).reshape(1 << a, a * a).astype(np.float64)


def _run_starts(values: np.ndarray) -> np.ndarray:
    """``[n]`` bool: where a run of equal values of a sorted array starts."""
    st = np.empty(values.size, bool)
    st[:1] = True
    np.not_equal(values[1:], values[:-1], out=st[1:])
    return st


def pair_jaccard(ids: np.ndarray, first: np.ndarray, group: np.ndarray, slot: np.ndarray,
                 n_groups: int, n_slots: int) -> np.ndarray:
    """``[G, A, A]`` float64 Jaccard index of the token sets of every pair of texts of a group.

    Args:
      ids, first: token ids of ``R`` texts, text ``r``'s at ``ids[first[r]:first[r+1]]``
        (repeats allowed: sets are taken).
      group: ``[R]`` the group (round) of each text, non-decreasing in ``[0, G)``; slot:
        ``[R]`` its slot in ``[0, A)`` (one text per (group, slot)).
      n_groups, n_slots: ``G`` and ``A``.

    Returns:
      ``J[g, a, b]``: ``|A n B| / |A u B|`` for ``a != b`` (0 where the union is empty or a
      slot has no text), and 0 on the diagonal (the caller sets it). The counts are
      :func:`pair_counts`'.
    """
    inter = pair_counts(ids, first, group, slot, n_groups, n_slots)
    idx = np.arange(n_slots)
    size = inter[:, idx, idx]
    union = size[:, :, None] + size[:, None, :] - inter
    out = np.divide(inter, union, out=np.zeros_like(inter), where=union > 0)
    out[:, idx, idx] = 0.0
    return out


def round_similarity(texts: pa.Array | pa.ChunkedArray, team: np.ndarray, n_slots: int,
                     t_max: int | None = None, *, dtype=np.float64, labels=None,
                     measure: str = "jaccard") -> tuple[np.ndarray, np.ndarray]:
    """The lexical similarity matrix of every round of every trajectory, packed.

    Args:
      texts: ``[N]`` ``list<list<string>>``, ``[round][agent]`` response texts (null: none).
      team: ``[N]`` team sizes (the graph's nodes are the slots ``a < team``).
      n_slots: the padded agent axis ``A`` (>= every round's list and every team).
      t_max: rounds to allocate (default: the longest trajectory).
      dtype: float dtype of the matrix; labels: trajectory names for errors.
      measure: ``"jaccard"`` (token sets, :func:`pair_jaccard`) or ``"rouge_l"`` (token
        sequences, :func:`fastuq.signals.rouge.pair_rouge_l`).

    Returns:
      ``(similarity [T, N, A, A], round_mask [T, N])``: the Jaccard index off the diagonal,
      1 on the diagonal of the team's slots, 0 elsewhere and in rounds that did not execute.

    Raises:
      RecordError: a round lists more texts than ``n_slots`` (naming trajectory, round and
        field texts).
    """
    if measure not in ("jaccard", "rouge_l"):
        raise ValueError(f"measure must be 'jaccard' or 'rouge_l', got {measure!r}")
    col = combined(texts)
    n = len(col)
    traj_len, _ = list_lengths(col)
    rounds = pc.list_flatten(col)
    round_len, _ = list_lengths(rounds)
    t_max = int(traj_len.max(initial=0)) if t_max is None else t_max
    n_of_round = parents(traj_len)
    t_of_round = ramp(traj_len)
    wide = round_len > n_slots
    if wide.any():
        r = int(np.argmax(wide))
        k = int(n_of_round[r])
        who = labels[k] if labels is not None else k
        raise RecordError(f"trajectory {who}, round {int(t_of_round[r])}: {int(round_len[r])} "
                          f"texts for {n_slots} agent slots (field texts)", row=k)
    nodes = pc.list_flatten(rounds)
    ids, first = text_token_ids(nodes)
    pairs = pair_jaccard if measure == "jaccard" else pair_rouge_l
    jac = pairs(ids, first, parents(round_len), ramp(round_len), len(round_len), n_slots)
    slots = np.arange(n_slots)
    in_team = slots[None, :] < np.asarray(team)[n_of_round][:, None]  # [R, A]
    jac *= in_team[:, :, None] & in_team[:, None, :]
    jac[:, slots, slots] = in_team
    out = np.zeros((t_max, n, n_slots, n_slots), dtype)
    out[t_of_round, n_of_round] = jac
    mask = np.arange(t_max)[:, None] < traj_len[None, :]
    return out, mask
