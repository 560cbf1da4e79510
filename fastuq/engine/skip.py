"""Every bad record of a chunk at once, for ``on_error="skip"``.

The scoring path raises at the first bad record; skipping by dropping that record and
scoring again costs a pass over the chunk per bad record (quadratic). Here the checks the
estimators make on their inputs run once over the chunk's Arrow columns (flattened values and
list offsets, no packing), every bad row is reported with its reason, and the caller drops
them all before scoring once. Any problem these checks do not foresee is still caught by the
estimators themselves (the caller then drops that row and scores again), so skipping never
depends on this list being complete, only its speed does.
"""

from __future__ import annotations

from collections.abc import Mapping

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from fastuq.io.arrow_lists import combined, list_lengths, starts
from fastuq.io.schema import Problems

__all__ = ["CORPUS_CHECKED_VALUES", "column_problems", "input_problems"]


class _Pending(str):
    """A message waiting for its ``trajectory 'id' (source row R)`` head (added in bulk)."""


def _values(arr: pa.Array) -> np.ndarray:
    """float64 values (nulls as NaN)."""
    return arr.to_numpy(zero_copy_only=False).astype(np.float64)


def _segment_sums(values: np.ndarray, lens: np.ndarray) -> np.ndarray:
    """Sum of each consecutive segment of ``values`` with lengths ``lens`` (0 when empty)."""
    total = np.zeros(len(values) + 1, np.int64)
    np.cumsum(values, out=total[1:])
    ends = np.cumsum(lens)
    return total[ends] - total[ends - lens]


def _owners(lens: np.ndarray, idx: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """For flat positions ``idx`` of a list array with lengths ``lens``: the list each is in
    and the position within it (a search per bad position, nothing per value)."""
    start = starts(lens)
    owner = np.searchsorted(start, idx, side="right") - 1
    return owner, idx - start[owner]


def _first_per_owner(owner: np.ndarray, idx: np.ndarray) -> dict[int, int]:
    """``{owner: first flat position}`` (``idx`` ascending)."""
    keep = np.ones(len(owner), bool)
    keep[1:] = owner[1:] != owner[:-1]
    return dict(zip(owner[keep].tolist(), idx[keep].tolist(), strict=True))


def _per_round(table: pa.Table, name: str, problems: Problems, checks) -> None:
    """Check a ``list<float>`` per-round column: an empty or null list, and each
    ``(bad(values) -> mask, what)`` at every value; the first bad round of a record is named."""
    col = combined(table.column(name))
    lens, valid = list_lengths(col)
    empty = (~valid) | (lens == 0)
    if empty.any():
        for i in np.flatnonzero(empty).tolist():
            if i not in problems.bad:
                problems.bad[i] = _Pending(f": no executed round (field {name})")
    flat = pc.list_flatten(col)
    if not len(flat):
        return
    v = _values(flat)
    for bad_fn, what in checks:
        with np.errstate(invalid="ignore"):
            bad = bad_fn(v)
        if not bad.any():
            continue
        idx = np.flatnonzero(bad)
        owner, t = _owners(lens, idx)
        t_of = dict(zip(idx.tolist(), t.tolist(), strict=True))
        for i, k in _first_per_owner(owner, idx).items():
            if i not in problems.bad:
                problems.bad[i] = _Pending(f", round {t_of[k]}: {name} = {v[k]} {what}")


def _nodes(table: pa.Table, name: str) -> tuple[pa.Array, np.ndarray, np.ndarray]:
    """``(node values, round lengths [n], slot lengths [rounds])`` of a ``[round][agent]``
    column (null slots included in the node values)."""
    col = combined(table.column(name))
    rounds = pc.list_flatten(col)
    r_len, _ = list_lengths(col)
    a_len, _ = list_lengths(rounds)
    return pc.list_flatten(rounds), r_len, a_len


def _where(r_len: np.ndarray, a_len: np.ndarray, idx: np.ndarray):
    """(record, round, agent) of flat node positions ``idx``."""
    rnd, agent = _owners(a_len, idx)
    rec, t = _owners(r_len, rnd)
    return rec, t, agent


def _report_nodes(problems, bad: np.ndarray, r_len, a_len, describe) -> None:
    if not bad.any():
        return
    idx = np.flatnonzero(bad)
    rec, t, a = _where(r_len, a_len, idx)
    pos = {k: j for j, k in enumerate(idx.tolist())}
    for i, k in _first_per_owner(rec, idx).items():
        if i not in problems.bad:
            j = pos[k]
            problems.bad[i] = _Pending(f", round {int(t[j])}, agent {int(a[j])}: "
                                       f"{describe(k)}")


def _node_values(table, name, problems: Problems, bad_fn, what, *, empty: bool) -> None:
    nodes, r_len, a_len = _nodes(table, name)
    v = _values(nodes)
    present = nodes.is_valid().to_numpy(zero_copy_only=False)
    with np.errstate(invalid="ignore"):
        bad = present & bad_fn(v)
    _report_nodes(problems, bad, r_len, a_len, lambda k: f"{name} = {v[k]} {what}")
    if empty:
        per_round = _segment_sums(present.astype(np.int64), a_len)
        per_rec = _segment_sums(per_round, r_len)
        for i in np.flatnonzero(per_rec == 0).tolist():
            if i not in problems.bad:
                problems.bad[i] = _Pending(f": no valid node (field {name})")


def input_problems(
    table: pa.Table,
    problems: Problems,
    *,
    inputs: set[str],
    protocol: str | None,
    params: Mapping[str, object],
    presets: Mapping[str, Mapping[str, float]] | None,
    confidence: str | None,
    estimator=None,
) -> None:
    """Report into ``problems`` every record whose estimator inputs are bad.

    Args:
      table: the chunk (conformed, structurally valid rows).
      problems: a collecting :class:`~fastuq.io.schema.Problems` (its ``rows`` name the
        source rows); messages read ``trajectory 'id' (SOURCE row R), round t: ...``.
      inputs: packed inputs the estimators read (``agreement``, ``token_entropy``,
        ``seq_logprob``, ``n_tokens``, ...).
      protocol: the protocol override (``None``: each record's field decides the preset).
      params, presets: SAUCE parameters given and its presets, when SAUCE runs (a record
        whose protocol has no preset needs every parameter given).
      confidence: UMAS node confidence (``mean_logprob`` reads ``n_tokens``).
      estimator: the estimator whose ``presets`` these are (its message for a protocol
        without a preset lists every parameter that lacks a value).

    A record without a protocol (the field null, no override) is bad whatever runs:
    scoring always reads it (the output's protocol, per-protocol parameters).
    """
    names = table.column_names
    n = table.num_rows
    if protocol is None and "protocol" in names:
        col = combined(table.column("protocol")).cast(pa.string())
        missing = col.is_null().to_numpy(zero_copy_only=False)
        for i in np.flatnonzero(missing).tolist():
            problems.bad.setdefault(i, _Pending(": no protocol (field protocol)"))
        needed = [p for p, v in params.items() if v is None]
        if presets is not None and needed and n:
            known = pa.array(sorted(presets), pa.string())
            unknown = ~pc.is_in(col, value_set=known).to_numpy(zero_copy_only=False) & ~missing
            for i in np.flatnonzero(unknown).tolist():
                proto = col[i].as_py()
                why = (estimator.no_preset_message(proto, needed) if estimator is not None
                       else f"protocol {proto!r} has no preset (known: "
                            f"{', '.join(sorted(presets))}); give {', '.join(needed)}")
                problems.bad.setdefault(i, _Pending(f": {why} (field protocol)"))
    if "agreement" in inputs and "agreement" in names:
        _per_round(table, "agreement", problems, (
            (lambda v: ~np.isfinite(v), "is missing or not finite"),
            (lambda v: (v < 0) | (v > 1), "is outside [0, 1]"),
        ))
    if "token_entropy" in inputs and "token_entropy" in names:
        _per_round(table, "token_entropy", problems, (
            (lambda v: ~np.isfinite(v), "is missing or not finite"),
            (lambda v: v < 0, "is negative"),
        ))
    if "seq_logprob" in inputs and "seq_logprob" in names:
        _node_values(table, "seq_logprob", problems,
                     lambda v: ~(np.isfinite(v) & (v <= 0)),
                     "is not a finite log-probability <= 0", empty=True)
        if ("n_tokens" in inputs or confidence == "mean_logprob") and "n_tokens" in names:
            lp, r_len, a_len = _nodes(table, "seq_logprob")
            nt, _, _ = _nodes(table, "n_tokens")
            if len(nt) == len(lp):  # structure checked equal (validate)
                v = _values(nt)
                with np.errstate(invalid="ignore"):
                    bad = lp.is_valid().to_numpy(zero_copy_only=False) & ~(v >= 1)
                _report_nodes(problems, bad, r_len, a_len,
                              lambda k: f"n_tokens = {v[k]} is missing or below 1")
    _name_pending(table, problems)


#: The columns whose values ``check="corpus"`` checks wherever the corpus has them, whichever
#: methods run: the per-round signals and the node columns a builder checks when a method
#: reads them (the same rules; :mod:`fastuq.engine.inputs`).
CORPUS_CHECKED_VALUES = ("agreement", "token_entropy", "seq_logprob", "n_tokens", "belief",
                         "answer_logprob")


def column_problems(table: pa.Table, problems: Problems,
                    skip: frozenset[str] | set[str] = frozenset()) -> None:
    """Report into ``problems`` every record with a bad value in a column of
    :data:`CORPUS_CHECKED_VALUES` that ``table`` has (``check="corpus"``), except the
    columns in ``skip`` (already checked by the methods that read them).

    Every given value is checked by the rule of the input built from it: ``agreement``
    finite in [0, 1] (and a round at least), ``token_entropy`` finite >= 0,
    ``seq_logprob`` and ``answer_logprob`` finite <= 0, ``n_tokens`` >= 1, ``belief``
    finite in [0, 1]. A null (an agent that did not speak) is not a value; whether a
    column must be given where another is is the business of the methods that read both.
    Messages read ``trajectory 'id' (SOURCE row R), round t[, agent a]: FIELD = V ...``.
    """
    names = set(table.column_names) - set(skip)
    if "agreement" in names:
        _per_round(table, "agreement", problems, (
            (lambda v: ~np.isfinite(v), "is missing or not finite"),
            (lambda v: (v < 0) | (v > 1), "is outside [0, 1]"),
        ))
    if "token_entropy" in names:
        _per_round(table, "token_entropy", problems, (
            (lambda v: ~np.isfinite(v), "is missing or not finite"),
            (lambda v: v < 0, "is negative"),
        ))
    nodes = (
        ("seq_logprob", lambda v: ~(np.isfinite(v) & (v <= 0)),
         "is not a finite log-probability <= 0"),
        ("n_tokens", lambda v: ~(v >= 1), "is below 1 (a response has a token at least)"),
        ("belief", lambda v: ~(np.isfinite(v) & (v >= 0) & (v <= 1)),
         "is not a finite probability in [0, 1]"),
        ("answer_logprob", lambda v: ~(np.isfinite(v) & (v <= 0)),
         "is not a finite log-probability <= 0"),
    )
    for name, bad_fn, what in nodes:
        if name in names:
            _node_values(table, name, problems, bad_fn, what, empty=False)
    _name_pending(table, problems)


def _name_pending(table: pa.Table, problems: Problems) -> None:
    """Put ``trajectory 'id' (SOURCE row R)`` in front of the new messages, in bulk."""
    idx = [i for i, m in problems.bad.items() if isinstance(m, _Pending)]
    if not idx:
        return
    tids = table.column("trajectory_id").combine_chunks().take(
        pa.array(idx, pa.int64())).to_pylist()
    where = f"{problems.source} row " if problems.source else "row "
    for i, tid in zip(idx, tids, strict=True):
        problems.bad[i] = (f"trajectory {tid!r} ({where}{problems.row(i)})"
                           f"{str(problems.bad[i])}")
