"""Corpus-scale signal builders: per-round agreement and token entropy, per-node log-prob stats.

Each builder works on whole Arrow list columns (one list per trajectory) with NumPy over the
flattened values and their offsets: no Python loop runs over records, rounds or tokens (loops
run over agent slots at most). The numbers equal the scalar references
``fastuq.majority_margin`` and ``fastuq.compute_token_entropy`` (and plain sums) to 1e-12.

>>> from fastuq.signals import agreement_from_answers, token_entropy_from_topk
>>> agreement = agreement_from_answers(table["answers"], table["n_agents"])   # list<float64>
>>> node_h, round_h = token_entropy_from_topk(table["topk_logprobs"])
>>> table = add_signals(table)       # fills missing agreement / token_entropy / seq_logprob ...

Shapes, per trajectory: ``answers [round][agent]``, ``topk_logprobs [round][agent][token][k]``,
``token_logprobs [round][agent][token]``; round-level outputs ``[round]``, node-level outputs
``[round][agent]`` with the input's slots (null where the agent did not speak).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Literal, NamedTuple

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from fastuq.errors import RecordError
from fastuq.io.arrow_lists import (
    combined,
    list_array,
    list_lengths,
    offsets,
    parents,
    ramp,
    starts,
)
from fastuq.io.pack import pack_offsets
from fastuq.signals.final import final_answer_slot

__all__ = [
    "LogprobStats",
    "read_n_agents",
    "add_signals",
    "agreement_from_answers",
    "answer_votes",
    "final_answer_slot",
    "logprob_stats",
    "token_entropy_from_topk",
]

ArrayLike = pa.Array | pa.ChunkedArray | Sequence

_PAIRWISE_MAX_SLOTS = 16  # up to this many agents, count votes by slot comparisons


# --- ragged helpers ----------------------------------------------------------------------------


def _array(col: ArrayLike, name: str) -> pa.Array:
    if isinstance(col, (pa.Array, pa.ChunkedArray)):
        return combined(col)
    try:
        return pa.array(col)
    except (pa.ArrowInvalid, pa.ArrowTypeError) as exc:
        raise ValueError(f"{name}: cannot convert to an Arrow array: {exc}") from None


class _Level:
    """One list level: ``lengths`` (nulls as 0), ``valid``, ``start`` and the flat values;
    ``parent`` (the list index of each flat value) is built on first use."""

    __slots__ = ("lengths", "valid", "start", "values", "_parent")

    def __init__(self, arr: pa.Array, name: str, depth: int) -> None:
        if not (pa.types.is_list(arr.type) or pa.types.is_large_list(arr.type)
                or pa.types.is_fixed_size_list(arr.type)):
            raise ValueError(f"{name}: expected a list column at depth {depth}, got {arr.type}")
        self.lengths, self.valid = list_lengths(arr)
        self.start = starts(self.lengths)
        self.values = pc.list_flatten(arr)
        self._parent: np.ndarray | None = None

    @property
    def parent(self) -> np.ndarray:
        if self._parent is None:
            self._parent = parents(self.lengths)
        return self._parent

    def ramp(self) -> np.ndarray:
        """Position of every flat value within its list (through the cached parent index)."""
        return ramp(self.lengths, parent=self.parent, start=self.start)

    def position(self, child: int) -> int:
        """Position of flat value ``child`` within its list."""
        return int(child - self.start[self.parent[child]])


class _Names:
    """Trajectory names for messages: ``trajectory 'ID'`` or ``row N``."""

    def __init__(self, ids: ArrayLike | None, n: int) -> None:
        self.ids = None if ids is None else _array(ids, "ids")
        if self.ids is not None and len(self.ids) != n:
            raise ValueError(f"ids has {len(self.ids)} entries for {n} trajectories")

    def __call__(self, i: int) -> str:
        if self.ids is None:
            return f"row {i}"
        return f"trajectory {self.ids[int(i)].as_py()!r} (row {i})"


def read_n_agents(n_agents: int | ArrayLike | None, n: int) -> tuple[np.ndarray, np.ndarray]:
    """``n_agents`` read per trajectory: ``(team size int64 [N], known bool [N])`` from an
    int, an array or an Arrow column (null: unknown, size 0); an unknown size falls back,
    per round, to the answers given (:func:`agreement_from_answers`). ValueError for a
    shape other than ``[N]`` or non-integer values."""
    if n_agents is None:
        return np.zeros(n, np.int64), np.zeros(n, bool)
    if isinstance(n_agents, (int, np.integer)) and not isinstance(n_agents, bool):
        return np.full(n, int(n_agents), np.int64), np.ones(n, bool)
    if isinstance(n_agents, (pa.Array, pa.ChunkedArray)):
        arr = _array(n_agents, "n_agents")
        known = arr.is_valid().to_numpy(zero_copy_only=False)
        vals = arr.fill_null(0).to_numpy(zero_copy_only=False)
    else:
        vals = np.asarray(n_agents)
        known = np.ones(vals.shape, bool)
    if vals.shape != (n,):
        raise ValueError(f"n_agents must be an int or have one entry per trajectory ({n}), "
                         f"got shape {vals.shape}")
    if vals.dtype.kind not in "iu" and vals.size:
        if vals.dtype.kind != "f" or not (np.isfinite(vals) & (vals == np.round(vals))).all():
            raise ValueError(f"n_agents must hold integers, got dtype {vals.dtype}")
    return vals.astype(np.int64), known


# --- agreement ---------------------------------------------------------------------------------


def _answer_strings(vals: pa.Array) -> pa.Array:
    """The flat answer slots as strings (a dictionary decoded, other types cast)."""
    if pa.types.is_dictionary(vals.type):
        vals = vals.cast(vals.type.value_type)
    if not (pa.types.is_string(vals.type) or pa.types.is_large_string(vals.type)
            or pa.types.is_string_view(vals.type) or pa.types.is_null(vals.type)):
        vals = vals.cast(pa.string())
    return vals


def answer_votes(vals: pa.Array) -> np.ndarray:
    """``[S]`` bool: which flat answer slots hold an answer that may vote (non-null and
    non-empty); a voting slot still needs a class id ``>= 0``. Shared by
    :func:`agreement_from_answers` and the device packer
    (:mod:`fastuq.engine.device_pack`)."""
    vals = _answer_strings(vals)
    present = vals.is_valid().to_numpy(zero_copy_only=False)
    if len(vals) and (pa.types.is_string(vals.type) or pa.types.is_large_string(vals.type)):
        width = 4 if pa.types.is_string(vals.type) else 8  # non-empty, from the offsets
        offs = np.frombuffer(vals.buffers()[1], np.int32 if width == 4 else np.int64,
                             count=len(vals) + 1, offset=vals.offset * width)
        present &= np.diff(offs) > 0
    elif len(vals) and not pa.types.is_null(vals.type):
        present &= pc.binary_length(vals).fill_null(0).to_numpy(zero_copy_only=False) > 0
    return present


def _modal_counts(cls: np.ndarray, vote: np.ndarray, rnd: _Level, n_rounds: int) -> np.ndarray:
    """Per round, the largest number of voting slots sharing one class id."""
    slots = rnd.lengths
    width = int(slots.max()) if slots.size else 0
    if width == 0 or not vote.any():
        return np.zeros(n_rounds, np.int64)
    if width <= _PAIRWISE_MAX_SLOTS:
        # dense [rounds, width] class matrix; -1 never votes. width**2 whole-array compares.
        # Slot-major [width, rounds] so every slot's row is contiguous; counts in uint8
        # (width <= _PAIRWISE_MAX_SLOTS < 256), so adding a comparison needs no int64 copy.
        code_t = np.int32 if cls.size == 0 or cls.max() < np.iinfo(np.int32).max else np.int64
        masked = np.where(vote, cls, -1).astype(code_t, copy=False)
        if int(slots.min()) == width:  # every round has `width` slots: a reshape
            grid = np.ascontiguousarray(masked.reshape(n_rounds, width).T)
        else:  # round r's slots at r * width + k, then one transposed copy
            by_round = np.full((n_rounds, width), -1, code_t)
            shift = np.arange(n_rounds, dtype=np.int64) * width - rnd.start
            where = np.arange(masked.size, dtype=np.int64) + np.repeat(shift, slots)
            by_round.reshape(-1)[where] = masked
            grid = np.ascontiguousarray(by_round.T)
        best = np.zeros(n_rounds, np.uint8)
        count = np.empty(n_rounds, np.uint8)
        eq = np.empty(n_rounds, bool)
        for i in range(width):
            gi = grid[i]
            count.fill(1)
            for j in range(width):
                if j != i:
                    np.equal(grid[j], gi, out=eq)
                    count += eq
            count[gi < 0] = 0
            np.maximum(best, count, out=best)
        return best.astype(np.int64)
    # wide rounds: sort (round, class) pairs, count runs, keep each round's largest run
    r = rnd.parent[vote]
    c = cls[vote]
    order = np.lexsort((c, r))
    r, c = r[order], c[order]
    new = np.ones(r.size, bool)
    new[1:] = (r[1:] != r[:-1]) | (c[1:] != c[:-1])
    run_start = np.flatnonzero(new)
    runs = np.diff(np.append(run_start, r.size))
    best = np.zeros(n_rounds, np.int64)
    np.maximum.at(best, r[run_start], runs)
    return best


def agreement_from_answers(
    answers: ArrayLike,
    n_agents: int | ArrayLike | None = None,
    *,
    classes: np.ndarray | Sequence[int] | None = None,
    unparseable: Literal["zero", "raise", "nan"] = "zero",
    ids: ArrayLike | None = None,
    padded: bool = False,
) -> pa.ListArray | tuple[np.ndarray, np.ndarray]:
    """Per-round agreement (majority margin) of every trajectory of a corpus.

    Agreement of a round is the modal count of its parsed answers over the initial team size:
    null and empty answers cast no vote but stay in the denominator (DyLAN: two unanimous
    survivors of three agents give 2/3). Equal to ``fastuq.majority_margin`` round by round.

    Args:
      answers: ``N`` trajectories of ``list<list<string>>``, ``[round][agent]`` parsed answers.
      n_agents: initial team size: one int, or ``[N]`` ints (Arrow or NumPy). ``None`` (or a
        null entry) uses each round's number of slots, as ``majority_margin`` does.
      classes: optional ``[V]`` int class ids of the flattened answer slots, i.e. of
        ``pc.list_flatten(pc.list_flatten(answers))`` (``[record][round][agent]`` order; null
        records and rounds hold no slot, null answers do), as ``fastuq.answers.
        answer_classes`` returns them: answers with one id vote together, ``-1`` never votes
        (nor does a null or empty answer, whatever its id). Default: exact string equality.
      unparseable: a round where no answer votes (no agent holds a parsed answer) gets
        agreement 0 (``"zero"``, the default: the same number as ``majority_margin`` and the
        importers, which also flag the record ``unparseable_round``), raises ``ValueError``
        (``"raise"``), or gets NaN (``"nan"``).
      ids: optional ``[N]`` trajectory ids, for messages.
      padded: return ``(values [T, N] float64, round_mask [T, N] bool)`` (time-major, NaN
        padding) instead of an Arrow column.

    Returns:
      ``list<float64>``, ``[round]`` per trajectory (null where ``answers`` is null); or the
      padded pair.

    Raises:
      ValueError: a round without any vote (with ``unparseable="raise"``), a round with more
        slots than ``n_agents``, a non-positive ``n_agents``, or ``classes`` of the wrong
        length; naming the trajectory and the round.
    """
    if unparseable not in ("zero", "raise", "nan"):
        raise ValueError(f"unparseable must be 'zero', 'raise' or 'nan', got {unparseable!r}")
    arr = _array(answers, "answers")
    n = len(arr)
    names = _Names(ids, n)
    rec = _Level(arr, "answers", 1)
    rnd = _Level(rec.values, "answers", 2)
    vals = rnd.values
    n_rounds = rnd.lengths.size
    team, known = read_n_agents(n_agents, n)
    denom = np.where(known[rec.parent], team[rec.parent], rnd.lengths)
    has_rounds = rec.lengths > 0
    bad = known & has_rounds & (team <= 0)
    if bad.any():
        i = int(np.argmax(bad))
        raise RecordError(f"{names(i)}: n_agents must be positive, got {team[i]}", row=i)
    over = rnd.lengths > denom
    if over.any():
        r = int(np.argmax(over))
        i = int(rec.parent[r])
        raise RecordError(f"{names(i)}: round {rec.position(r)}: answers has "
                         f"{rnd.lengths[r]} slots, more than n_agents = {denom[r]}", row=i)

    vals = _answer_strings(vals)
    present = answer_votes(vals)
    if classes is None:
        if pa.types.is_null(vals.type):
            cls = np.full(len(vals), -1, np.int64)
        else:
            cls = pc.dictionary_encode(vals).indices.fill_null(-1)
            cls = cls.to_numpy(zero_copy_only=False).astype(np.int64)
    else:
        cls = np.asarray(classes)
        if cls.shape != (len(vals),):
            raise ValueError(f"classes must have one id per answer slot ({len(vals)}), "
                             f"got shape {cls.shape}")
        if cls.dtype.kind not in "iu":
            raise ValueError(f"classes must hold integers, got dtype {cls.dtype}")
        cls = cls.astype(np.int64, copy=False)
    vote = present & (cls >= 0)
    best = _modal_counts(cls, vote, rnd, n_rounds)
    with np.errstate(divide="ignore", invalid="ignore"):
        out = best / denom
    none = best == 0
    if none.any():
        if unparseable == "zero":  # also a round without slots and without a team size
            out[none] = 0.0
        elif unparseable == "raise":
            r = int(np.argmax(none))
            i = int(rec.parent[r])
            raise RecordError(f"{names(i)}: round {rec.position(r)}: no answer in the round is "
                             f"parseable (all None or empty)", row=i)
        else:
            out[none] = np.nan
    if padded:
        return pack_offsets(out, offsets(rec.lengths))
    return list_array(rec.lengths, pa.array(out, pa.float64()), rec.valid)


# --- token entropy -----------------------------------------------------------------------------


def _record(levels: Sequence[_Level], idx: int) -> int:
    """The record (trajectory) index of a flat index at the deepest level of ``levels``."""
    for lev in reversed(levels):
        idx = int(lev.parent[idx])
    return idx


def _where(levels: Sequence[_Level], idx: int, names: _Names) -> str:
    """``"trajectory 'X' (row i): round t, agent a, token j"`` for a flat index at the deepest
    level of ``levels`` (records, rounds, agents, tokens...)."""
    labels = ("round", "agent", "token", "alternative")
    pos = []
    for lev in reversed(levels):
        pos.append(int(lev.position(idx)))
        idx = int(lev.parent[idx])
    pos.reverse()
    where = ", ".join(f"{labels[k]} {p}" for k, p in enumerate(pos))
    return f"{names(idx)}: {where}" if where else names(idx)


def _float_values(levels: Sequence[_Level], names: _Names, what: str) -> np.ndarray:
    vals = levels[-1].values
    if not (pa.types.is_floating(vals.type) or pa.types.is_integer(vals.type)
            or pa.types.is_null(vals.type)):
        raise ValueError(f"{what}: non-numeric log-probabilities ({vals.type})")
    if vals.null_count:
        k = int(np.argmax(vals.is_null().to_numpy(zero_copy_only=False)))
        raise RecordError(f"{_where(levels, k, names)}: {what}: null log-probability",
                          row=_record(levels, k))
    if not len(vals):
        return np.zeros(0)
    if pa.types.is_float32(vals.type) or pa.types.is_float64(vals.type):
        v = vals.to_numpy(zero_copy_only=False)  # float32 stays float32 until used
    else:
        v = vals.cast(pa.float64()).to_numpy(zero_copy_only=False)
    k = _first_not_le0(v)  # one test catches NaN and positive values
    if k >= 0:
        raise RecordError(f"{_where(levels, k, names)}: {what}: log-probabilities must be <= 0 "
                         f"and not NaN, got {v[k]}", row=_record(levels, k))
    return v


#: Values per block of the whole-column tests below (their temporaries stay small: a top-k
#: chunk holds ~10^8 log-probabilities).
_VALUE_BLOCK = 1 << 20


def _first_not_le0(v: np.ndarray) -> int:
    """Index of the first value of ``v`` that is not <= 0 (NaN or positive), else -1."""
    for a in range(0, v.size, _VALUE_BLOCK):
        ok = v[a:a + _VALUE_BLOCK] <= 0.0
        if not ok.all():
            return a + int(np.argmax(~ok))
    return -1


def _any_neginf(v: np.ndarray) -> bool:
    return any(np.isneginf(v[a:a + _VALUE_BLOCK]).any() for a in range(0, v.size, _VALUE_BLOCK))


#: Tokens per block of :func:`_token_entropy` (k x 16,384 float64 rows stay in cache).
_TOKEN_BLOCK = 1 << 14


def _token_entropy(v: np.ndarray, tok: _Level, levels: Sequence[_Level], names: _Names,
                   what: str) -> np.ndarray:
    """``[tokens]`` entropy of the renormalised top-k of each token (all tokens non-empty)."""
    n_tok = tok.lengths.size
    if n_tok == 0:
        return np.zeros(0)
    k = int(tok.lengths[0])
    uniform = bool((tok.lengths == k).all())
    if uniform:
        # one k for every token (the usual case): blocks of [k, tokens] matrices, so that
        # every step is a whole-row operation on cache-sized rows and sums run over the k
        # alternatives in order (each token's numbers do not depend on the blocking)
        neginf = _any_neginf(v)
        h = np.empty(n_tok, np.float64)
        grid_v = v.reshape(n_tok, k)
        for a in range(0, n_tok, _TOKEN_BLOCK):
            b = min(n_tok, a + _TOKEN_BLOCK)
            grid = np.ascontiguousarray(grid_v[a:b].T, dtype=np.float64)
            top = grid.max(axis=0)
            inf = ~np.isfinite(top)
            if inf.any():
                t = a + int(np.argmax(inf))
                raise RecordError(f"{_where(levels[:3], t, names)}: {what}: the token has no "
                                  f"finite log-probability", row=_record(levels[:3], t))
            grid -= top  # log weights, <= 0
            w = np.exp(grid)
            norm = w[0].copy()
            for j in range(1, k):
                norm += w[j]
            grid -= np.log(norm)  # log p
            w /= norm  # p
            with np.errstate(invalid="ignore"):
                grid *= w  # p log p (NaN where p = 0 from a -inf log-prob)
            if neginf:
                grid[w == 0.0] = 0.0
            out = h[a:b]
            np.negative(grid[0], out=out)
            for j in range(1, k):
                out -= grid[j]
        return h
    v = v.astype(np.float64, copy=False)
    top = np.maximum.reduceat(v, tok.start)
    inf = ~np.isfinite(top)
    if inf.any():
        t = int(np.argmax(inf))
        raise RecordError(f"{_where(levels[:3], t, names)}: {what}: the token has no finite "
                         f"log-probability", row=_record(levels[:3], t))
    p = v - np.repeat(top, tok.lengths)
    np.exp(p, out=p)
    p /= np.repeat(np.add.reduceat(p, tok.start), tok.lengths)
    with np.errstate(divide="ignore", invalid="ignore"):
        plogp = np.log(p)
        plogp *= p
    if not (p > 0.0).all():
        plogp[p == 0.0] = 0.0
    return -np.add.reduceat(plogp, tok.start)


def token_entropy_from_topk(
    topk_logprobs: ArrayLike, *, ids: ArrayLike | None = None
) -> tuple[pa.ListArray, pa.ListArray]:
    """Mean token entropy (nats) of every response, and of every round, of a corpus.

    Per token the returned top-k probabilities are renormalised (a softmax over the k
    log-probs; ``-inf`` is probability 0) and the entropy ``-sum p log p`` taken; a node's
    entropy is the mean over its tokens (``fastuq.compute_token_entropy``), a round's the mean
    over its speaking agents (non-null nodes).

    Args:
      topk_logprobs: ``N`` trajectories of ``[round][agent][token][k]`` log-probabilities
        (float32 or float64, <= 0); a null node is an agent that did not speak.
      ids: optional ``[N]`` trajectory ids, for messages.

    Returns:
      ``(node, round)``: ``node`` is ``list<list<float64>>`` ``[round][agent]`` (null where
      the node is null), ``round`` is ``list<float64>`` ``[round]``; both null where the
      trajectory is null.

    Raises:
      ValueError: a speaking node without tokens, a token without alternatives or without a
        finite value, a null, NaN or positive log-prob, or a round where no agent spoke;
        naming the trajectory, round, agent (and token).
    """
    arr = _array(topk_logprobs, "topk_logprobs")
    names = _Names(ids, len(arr))
    rec = _Level(arr, "topk_logprobs", 1)
    rnd = _Level(rec.values, "topk_logprobs", 2)
    node = _Level(rnd.values, "topk_logprobs", 3)
    tok = _Level(node.values, "topk_logprobs", 4)
    levels = (rec, rnd, node, tok)
    what = "topk_logprobs"
    empty = node.valid & (node.lengths == 0)
    if empty.any():
        k = int(np.argmax(empty))
        raise RecordError(f"{_where(levels[:2], k, names)}: {what}: the response has no "
                         f"measured token", row=_record(levels[:2], k))
    no_alt = tok.lengths == 0
    if no_alt.any():
        k = int(np.argmax(no_alt))
        raise RecordError(f"{_where(levels[:3], k, names)}: {what}: the token has no "
                         f"log-probabilities", row=_record(levels[:3], k))
    v = _float_values(levels, names, what)
    h_tok = _token_entropy(v, tok, levels, names, what)
    n_nodes = node.lengths.size
    h_sum = np.bincount(node.parent, weights=h_tok, minlength=n_nodes)
    with np.errstate(divide="ignore", invalid="ignore"):
        h_node = h_sum / node.lengths
    spoke = node.valid
    n_rounds = rnd.lengths.size
    r_sum = np.bincount(rnd.parent[spoke], weights=h_node[spoke], minlength=n_rounds)
    r_cnt = np.bincount(rnd.parent[spoke], minlength=n_rounds)
    silent = r_cnt == 0
    if silent.any():
        k = int(np.argmax(silent))
        raise RecordError(f"{_where(levels[:1], k, names)}: {what}: no agent of the round has "
                         f"top-k log-probabilities", row=_record(levels[:1], k))
    h_round = r_sum / r_cnt
    node_values = pa.array(h_node, pa.float64(), mask=~spoke)
    node_col = list_array(rec.lengths, list_array(rnd.lengths, node_values, rnd.valid),
                          rec.valid)
    round_col = list_array(rec.lengths, pa.array(h_round, pa.float64()), rec.valid)
    return node_col, round_col


# --- log-prob statistics -----------------------------------------------------------------------


class LogprobStats(NamedTuple):
    """Per-node statistics of chosen-token log-probabilities, each ``[round][agent]`` per
    trajectory (null where the agent did not speak).

    seq_logprob: ``list<list<float64>>``, sum of the token log-probs (0 for no tokens).
    mean_logprob: ``list<list<float64>>``, their mean (null for a response without tokens).
    n_tokens: ``list<list<int32>>``, the number of tokens.
    """

    seq_logprob: pa.ListArray
    mean_logprob: pa.ListArray
    n_tokens: pa.ListArray


def logprob_stats(token_logprobs: ArrayLike, *, ids: ArrayLike | None = None) -> LogprobStats:
    """Sum, mean and count of the chosen-token log-probs of every response of a corpus.

    Args:
      token_logprobs: ``N`` trajectories of ``[round][agent][token]`` log-probabilities
        (<= 0); a null node is an agent that did not speak.
      ids: optional ``[N]`` trajectory ids, for messages.

    Returns:
      ``LogprobStats(seq_logprob, mean_logprob, n_tokens)``, each ``[round][agent]``.

    Raises:
      ValueError: a null, NaN or positive log-prob, naming trajectory, round, agent, token.
    """
    arr = _array(token_logprobs, "token_logprobs")
    names = _Names(ids, len(arr))
    rec = _Level(arr, "token_logprobs", 1)
    rnd = _Level(rec.values, "token_logprobs", 2)
    node = _Level(rnd.values, "token_logprobs", 3)
    v = _float_values((rec, rnd, node), names, "token_logprobs")
    n_nodes = node.lengths.size
    total = np.bincount(node.parent, weights=v.astype(np.float64, copy=False),
                        minlength=n_nodes)
    spoke = node.valid
    with np.errstate(divide="ignore", invalid="ignore"):
        mean = total / node.lengths
    n_tok = node.lengths
    if n_tok.size and n_tok.max() > np.iinfo(np.int32).max:
        raise ValueError("token_logprobs: a response has more than 2**31 - 1 tokens")

    def nest(values: pa.Array) -> pa.ListArray:
        return list_array(rec.lengths, list_array(rnd.lengths, values, rnd.valid), rec.valid)

    return LogprobStats(
        seq_logprob=nest(pa.array(total, pa.float64(), mask=~spoke)),
        mean_logprob=nest(pa.array(mean, pa.float64(), mask=~spoke | (n_tok == 0))),
        n_tokens=nest(pa.array(n_tok.astype(np.int32), pa.int32(), mask=~spoke)),
    )


# --- table level -------------------------------------------------------------------------------


def add_signals(
    table: pa.Table,
    *,
    classes: np.ndarray | None = None,
    unparseable: Literal["zero", "raise", "nan"] = "zero",
    overwrite: bool = False,
) -> pa.Table:
    """Fill derived signal columns of a canonical table from the raw ones it holds.

    ``agreement`` from ``answers`` (and ``n_agents``), ``token_entropy`` from
    ``topk_logprobs``, ``seq_logprob`` / ``mean_logprob`` / ``n_tokens`` from
    ``token_logprobs``; a column already present is kept unless ``overwrite``. ``classes``
    and ``unparseable`` go to ``agreement_from_answers``.
    """
    names = table.column_names
    ids = table.column("trajectory_id") if "trajectory_id" in names else None

    def put(t: pa.Table, name: str, col: pa.Array) -> pa.Table:
        if name in t.column_names:
            return t.set_column(t.column_names.index(name), name, col)
        return t.append_column(name, col)

    if "answers" in names and (overwrite or "agreement" not in names):
        n_agents = table.column("n_agents") if "n_agents" in names else None
        agreement = agreement_from_answers(table.column("answers"), n_agents, classes=classes,
                                           unparseable=unparseable, ids=ids)
        table = put(table, "agreement", agreement)
    if "topk_logprobs" in names and (overwrite or "token_entropy" not in names):
        _, round_h = token_entropy_from_topk(table.column("topk_logprobs"), ids=ids)
        table = put(table, "token_entropy", round_h)
    if "token_logprobs" in names:
        stats = logprob_stats(table.column("token_logprobs"), ids=ids)
        for name in ("seq_logprob", "mean_logprob", "n_tokens"):
            if overwrite or name not in names:
                table = put(table, name, getattr(stats, name))
    return table
