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
from fastuq.signals.tokens import text_token_ids

__all__ = ["pair_jaccard", "round_similarity"]


def pair_jaccard(ids: np.ndarray, first: np.ndarray, group: np.ndarray, slot: np.ndarray,
                 n_groups: int, n_slots: int) -> np.ndarray:
    """``[G, A, A]`` float64 Jaccard index of the token sets of every pair of texts of a group.

    Args:
      ids, first: token ids of ``R`` texts, text ``r``'s at ``ids[first[r]:first[r+1]]``
        (repeats allowed: sets are taken).
      group: ``[R]`` the group (round) of each text, in ``[0, G)``; slot: ``[R]`` its slot in
        ``[0, A)`` (one text per (group, slot)).
      n_groups, n_slots: ``G`` and ``A``.

    Returns:
      ``J[g, a, b]``: ``|A n B| / |A u B|`` for ``a != b`` (0 where the union is empty or a
      slot has no text), and 0 on the diagonal (the caller sets it).
    """
    counts = np.diff(first)
    owner = np.repeat(np.arange(counts.size), counts)
    g = group[owner].astype(np.int64)
    s = slot[owner].astype(np.int64)
    tokens = _distinct(np.sort(ids))
    t = np.searchsorted(tokens, ids).astype(np.int64)  # dense token numbers
    if n_groups * max(tokens.size, 1) * n_slots < 2**62:
        # one int64 key per (round, token, slot), sorted and deduplicated: sets, not bags
        key = _distinct(np.sort((g * tokens.size + t) * n_slots + s))
        s = key % n_slots
        t = key // n_slots  # round and token together: equal within a run
        g = t // max(tokens.size, 1)
    else:  # too many for one key: sort by round, then token, then slot
        order = np.lexsort((s, t, g))
        g, t, s = g[order], t[order], s[order]
        keep = np.ones(g.size, bool)
        keep[1:] = (g[1:] != g[:-1]) | (t[1:] != t[:-1]) | (s[1:] != s[:-1])
        g, t, s = g[keep], t[keep], s[keep]
    size = np.bincount(g * n_slots + s, minlength=n_groups * n_slots).reshape(n_groups,
                                                                              n_slots)
    # runs of equal (round, token): every pair (p, q > p) of a run shares that token
    start = np.ones(g.size, bool)
    start[1:] = (g[1:] != g[:-1]) | (t[1:] != t[:-1])
    run = np.cumsum(start) - 1
    run_end = np.r_[np.flatnonzero(start)[1:], g.size] if g.size else np.zeros(0, np.int64)
    partners = run_end[run] - np.arange(g.size) - 1  # later members of the same run
    p = np.repeat(np.arange(g.size), partners)
    q = p + 1 + (np.arange(p.size) - np.repeat(np.cumsum(partners) - partners, partners))
    key = (g[p] * n_slots + s[p]) * n_slots + s[q]
    inter = np.bincount(key, minlength=n_groups * n_slots * n_slots).reshape(
        n_groups, n_slots, n_slots).astype(np.float64)
    inter = inter + inter.transpose(0, 2, 1)
    union = size[:, :, None] + size[:, None, :] - inter
    out = np.divide(inter, union, out=np.zeros_like(inter), where=union > 0)
    out[:, np.arange(n_slots), np.arange(n_slots)] = 0.0
    return out


def _distinct(values: np.ndarray) -> np.ndarray:
    """The distinct values of a sorted array (``np.unique`` without its second sort)."""
    keep = np.ones(values.size, bool)
    keep[1:] = values[1:] != values[:-1]
    return values[keep]


def round_similarity(texts: pa.Array | pa.ChunkedArray, team: np.ndarray, n_slots: int,
                     t_max: int | None = None, *, dtype=np.float64,
                     labels=None) -> tuple[np.ndarray, np.ndarray]:
    """The lexical similarity matrix of every round of every trajectory, packed.

    Args:
      texts: ``[N]`` ``list<list<string>>``, ``[round][agent]`` response texts (null: none).
      team: ``[N]`` team sizes (the graph's nodes are the slots ``a < team``).
      n_slots: the padded agent axis ``A`` (>= every round's list and every team).
      t_max: rounds to allocate (default: the longest trajectory).
      dtype: float dtype of the matrix; labels: trajectory names for errors.

    Returns:
      ``(similarity [T, N, A, A], round_mask [T, N])``: the Jaccard index off the diagonal,
      1 on the diagonal of the team's slots, 0 elsewhere and in rounds that did not execute.

    Raises:
      RecordError: a round lists more texts than ``n_slots`` (naming trajectory, round and
        field texts).
    """
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
    jac = pair_jaccard(ids, first, parents(round_len), ramp(round_len), len(round_len),
                       n_slots)
    slots = np.arange(n_slots)
    in_team = slots[None, :] < np.asarray(team)[n_of_round][:, None]  # [R, A]
    jac *= in_team[:, :, None] & in_team[:, None, :]
    jac[:, slots, slots] = in_team
    out = np.zeros((t_max, n, n_slots, n_slots), dtype)
    out[t_of_round, n_of_round] = jac
    mask = np.arange(t_max)[:, None] < traj_len[None, :]
    return out, mask
