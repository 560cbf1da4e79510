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

from collections.abc import Mapping, Sequence

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from ._arrow import list_lengths, ramp
from .schema import Problems

__all__ = ["input_problems"]


def _values(arr: pa.Array) -> np.ndarray:
    """float64 values (nulls as NaN)."""
    return arr.to_numpy(zero_copy_only=False).astype(np.float64)


def _per_round(table: pa.Table, name: str, labels, problems: Problems, checks) -> None:
    """Check a ``list<float>`` per-round column: an empty or null list, and each
    ``(bad(values) -> mask, what)`` at every value; the first bad round of a record is named."""
    col = table.column(name).combine_chunks()
    lens, valid = list_lengths(col)
    n = len(col)
    empty = (~valid) | (lens == 0)
    if empty.any():
        for i in np.flatnonzero(empty).tolist():
            if i not in problems.bad:
                problems.bad[i] = f"trajectory {labels[i]}: no executed round (field {name})"
    flat = pc.list_flatten(col)
    if not len(flat):
        return
    v = _values(flat)
    owner = np.repeat(np.arange(n), lens)
    t = ramp(lens)
    for bad_fn, what in checks:
        with np.errstate(invalid="ignore"):
            bad = bad_fn(v)
        if not bad.any():
            continue
        first = np.full(n, -1, np.int64)
        idx = np.flatnonzero(bad)[::-1]
        first[owner[idx]] = idx
        for i in np.flatnonzero(first >= 0).tolist():
            if i not in problems.bad:
                k = first[i]
                problems.bad[i] = (f"trajectory {labels[i]}, round {int(t[k])}: {name} = "
                                   f"{v[k]} {what}")


def _nodes(table: pa.Table, name: str) -> tuple[pa.Array, np.ndarray, np.ndarray, np.ndarray]:
    """``(node values, owner record, round, agent)`` of a ``[round][agent]`` column, over
    every node slot (null slots included)."""
    col = table.column(name).combine_chunks()
    rounds = pc.list_flatten(col)
    r_len, _ = list_lengths(col)
    a_len, _ = list_lengths(rounds)
    nodes = pc.list_flatten(rounds)
    rec_of_round = np.repeat(np.arange(len(col)), r_len)
    owner = np.repeat(rec_of_round, a_len)
    return nodes, owner, np.repeat(ramp(r_len), a_len), ramp(a_len)


def _node_values(table, name, labels, problems: Problems, bad_fn, what, *, empty: bool) -> None:
    nodes, owner, t, a = _nodes(table, name)
    n = table.num_rows
    v = _values(nodes)
    present = nodes.is_valid().to_numpy(zero_copy_only=False)
    with np.errstate(invalid="ignore"):
        bad = present & bad_fn(v)
    if bad.any():
        first = np.full(n, -1, np.int64)
        idx = np.flatnonzero(bad)[::-1]
        first[owner[idx]] = idx
        for i in np.flatnonzero(first >= 0).tolist():
            if i not in problems.bad:
                k = first[i]
                problems.bad[i] = (f"trajectory {labels[i]}, round {int(t[k])}, agent "
                                   f"{int(a[k])}: {name} = {v[k]} {what}")
    if empty:
        has = np.zeros(n, bool)
        has[owner[present]] = True
        for i in np.flatnonzero(~has).tolist():
            if i not in problems.bad:
                problems.bad[i] = f"trajectory {labels[i]}: no valid node (field {name})"


def input_problems(
    table: pa.Table,
    labels: Sequence[str],
    problems: Problems,
    *,
    inputs: set[str],
    protocol: str | None,
    params: Mapping[str, object],
    presets: Mapping[str, Mapping[str, float]] | None,
    confidence: str | None,
) -> None:
    """Report into ``problems`` every record whose estimator inputs are bad.

    Args:
      table: the chunk (conformed, structurally valid rows).
      labels: ``labels[i]``: how messages name record ``i`` (``'id' (source row R)``).
      inputs: packed inputs the estimators read (``agreement``, ``token_entropy``,
        ``seq_logprob``, ``n_tokens``, ...).
      protocol: the protocol override (``None``: each record's field decides the preset).
      params, presets: SAUCE parameters given and its presets, when SAUCE runs (a record
        whose protocol has no preset needs every parameter given).
      confidence: UMAS node confidence (``mean_logprob`` reads ``n_tokens``).
    """
    names = table.column_names
    n = table.num_rows
    if presets is not None and protocol is None and "protocol" in names:
        col = table.column("protocol").combine_chunks().cast(pa.string())
        missing = col.is_null().to_numpy(zero_copy_only=False)
        for i in np.flatnonzero(missing).tolist():
            problems.bad.setdefault(i, f"trajectory {labels[i]}: no protocol (field protocol)")
        needed = [p for p, v in params.items() if v is None]
        if needed and n:
            known = pa.array(sorted(presets), pa.string())
            unknown = ~pc.is_in(col, value_set=known).to_numpy(zero_copy_only=False) & ~missing
            for i in np.flatnonzero(unknown).tolist():
                problems.bad.setdefault(
                    i, f"trajectory {labels[i]}: protocol {col[i].as_py()!r} has no preset "
                       f"(known: {', '.join(sorted(presets))}); give {needed[0]} explicitly "
                       "(field protocol)")
    if "agreement" in inputs and "agreement" in names:
        _per_round(table, "agreement", labels, problems, (
            (lambda v: ~np.isfinite(v), "is missing or not finite"),
            (lambda v: (v < 0) | (v > 1), "is outside [0, 1]"),
        ))
    if "token_entropy" in inputs and "token_entropy" in names:
        _per_round(table, "token_entropy", labels, problems, (
            (lambda v: ~np.isfinite(v), "is missing or not finite"),
            (lambda v: v < 0, "is negative"),
        ))
    if "seq_logprob" in inputs and "seq_logprob" in names:
        _node_values(table, "seq_logprob", labels, problems,
                     lambda v: ~(np.isfinite(v) & (v <= 0)),
                     "is not a finite log-probability <= 0", empty=True)
        if ("n_tokens" in inputs or confidence == "mean_logprob") and "n_tokens" in names:
            lp, owner, t, a = _nodes(table, "seq_logprob")
            nt, _, _, _ = _nodes(table, "n_tokens")
            if len(nt) == len(lp):  # structure checked equal (validate)
                v = _values(nt)
                with np.errstate(invalid="ignore"):
                    bad = lp.is_valid().to_numpy(zero_copy_only=False) & ~(v >= 1)
                first = np.full(n, -1, np.int64)
                idx = np.flatnonzero(bad)[::-1]
                first[owner[idx]] = idx
                for i in np.flatnonzero(first >= 0).tolist():
                    k = first[i]
                    problems.bad.setdefault(
                        i, f"trajectory {labels[i]}, round {int(t[k])}, agent {int(a[k])}: "
                           f"n_tokens = {v[k]} is missing or below 1")
