"""The canonical corpus schema: column types, conforming compatible types, validating records.

Every reader yields tables in these columns (all optional but ``trajectory_id``; an estimator
declares what it needs). Node columns are ``[round][agent]`` lists with one slot per agent of
the initial team (``n_agents``), so slot k is the same agent in every round; rounds that did
not execute are absent. Extra, non-canonical columns are carried through untouched.

>>> from fastuq.io.schema import CANONICAL, conform, validate
>>> table = conform(table)               # large_list -> list, float32 -> float64, ...
>>> validate(table, source="rollouts.parquet", row0=0)   # ValueError naming row/id/field

All checks are vectorized over Arrow offsets: no Python loop runs over records.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from fastuq.errors import RecordError
from fastuq.io.arrow_lists import combined as _combined
from fastuq.io.arrow_lists import list_lengths as _lengths
from fastuq.io.arrow_lists import parents as _parents
from fastuq.io.arrow_lists import ramp as _ramp
from fastuq.io.arrow_lists import starts as _starts

__all__ = [
    "CANONICAL",
    "NODE_COLUMNS",
    "ROUND_COLUMNS",
    "canonical_columns",
    "conform",
    "describe_row",
    "validate",
]

_STR = pa.string()
_F32 = pa.float32()
_F64 = pa.float64()
_I32 = pa.int32()


def _lst(t: pa.DataType, depth: int = 1) -> pa.DataType:
    for _ in range(depth):
        t = pa.list_(t)
    return t


CANONICAL: pa.Schema = pa.schema(
    [
        pa.field("trajectory_id", _STR),
        pa.field("question_id", _STR),
        pa.field("protocol", _STR),
        pa.field("source", _STR),
        pa.field("n_agents", _I32),
        pa.field("reference", _STR),
        pa.field("final_answer", _STR),
        pa.field("correct", pa.bool_()),
        pa.field("agreement", _lst(_F64)),
        pa.field("token_entropy", _lst(_F64)),
        pa.field("answers", _lst(_STR, 2)),
        pa.field("seq_logprob", _lst(_F64, 2)),
        pa.field("n_tokens", _lst(_I32, 2)),
        pa.field("token_logprobs", _lst(_F32, 3)),
        pa.field("topk_logprobs", _lst(_F32, 4)),
        pa.field("belief", _lst(_F64, 2)),
        pa.field("answer_logprob", _lst(_F64, 2)),
        pa.field("step_h", _lst(_F64, 3)),
        pa.field("step_q", _lst(_F64, 3)),
        pa.field("step_d", _lst(_F64, 3)),
        pa.field("predecessors", _lst(_I32, 3)),
        pa.field("active", _lst(pa.bool_(), 2)),
        pa.field("flags", _lst(_STR)),
        pa.field("texts", _lst(_STR, 2)),
    ]
)
"""Every canonical column with its Arrow type (``texts``: ``[round][agent]`` response texts;
``active``: ``[round][agent]`` whether the agent is still in the team, e.g. DyLAN's ranker
survivors; a null list or node means active, and a corpus without the column has every agent
that speaks active);
``protocol``: the interaction structure, which selects presets and the default graph;
``source``: the log format or data set the record came from, metadata only, never used to
pick a preset)."""

NODE_COLUMNS: tuple[str, ...] = (
    "answers", "seq_logprob", "n_tokens", "token_logprobs", "topk_logprobs", "belief",
    "answer_logprob", "step_h", "step_q", "step_d", "predecessors", "texts", "active",
)
"""Canonical columns indexed ``[round][agent]`` (possibly with deeper levels below)."""

ROUND_COLUMNS: tuple[str, ...] = ("agreement", "token_entropy")
"""Canonical columns with one value per executed round."""


# --- messages ----------------------------------------------------------------------------------


def describe_row(
    table: pa.Table, i: int, *, source: str | None = None, row0: int = 0,
    rows: np.ndarray | None = None,
) -> str:
    """``"SOURCE: row R (trajectory_id 'X')"`` for row ``i`` of ``table`` (``R = row0 + i``,
    or ``rows[i]`` when given: the source rows of a table some rows were dropped from)."""
    head = f"{source}: " if source else ""
    tid = None
    if "trajectory_id" in table.column_names:
        try:
            tid = table.column("trajectory_id")[i].as_py()
        except Exception:  # noqa: BLE001 - a message must never fail
            tid = None
    who = f" (trajectory_id {tid!r})" if tid is not None else ""
    return f"{head}row {_row(i, row0, rows)}{who}"


def _row(i: int, row0: int, rows: np.ndarray | None) -> int:
    return int(rows[i]) if rows is not None else row0 + i


class Problems:
    """Where the checks put what they find.

    ``first_only`` (the default): the first problem raises :class:`RecordError` at once.
    Otherwise every bad row is kept with its first reason in :attr:`bad` (``{index in the
    table: message}``), so a caller can drop them all at once; the checks stay vectorized, a
    message is formatted per bad row only.
    """

    def __init__(self, table: pa.Table, source: str | None, row0: int = 0,
                 rows: np.ndarray | None = None, *, first_only: bool = True) -> None:
        self.table, self.source, self.row0, self.rows = table, source, row0, rows
        self.first_only = first_only
        self.bad: dict[int, str] = {}

    def row(self, i: int) -> int:
        return _row(i, self.row0, self.rows)

    def add(self, mask: np.ndarray, field: str, problem) -> None:
        """Report the rows where ``mask`` holds; ``problem(i) -> str`` describes row ``i``
        (``None``: not this field's problem after all)."""
        if not mask.any():
            return
        found = []
        for i in np.flatnonzero(mask).tolist():
            if i in self.bad:
                continue
            text = problem(i)
            if text is None:
                continue
            found.append((i, text))
            if self.first_only:
                break
        if not found:
            return
        tids: list = [None] * len(found)
        if "trajectory_id" in self.table.column_names:
            try:  # one take for all the bad rows, not one scalar per row
                tids = _combined(self.table.column("trajectory_id")).take(
                    pa.array([i for i, _ in found], pa.int64())).to_pylist()
            except Exception:  # noqa: BLE001 - a message must never fail
                pass
        head = f"{self.source}: " if self.source else ""
        for (i, text), tid in zip(found, tids, strict=True):
            who = f" (trajectory_id {tid!r})" if tid is not None else ""
            msg = f"{head}row {self.row(i)}{who}: field {field}: {text}"
            if self.first_only:
                raise RecordError(msg, row=i)
            self.bad[i] = msg

    def mask(self, n: int) -> np.ndarray:
        out = np.zeros(n, bool)
        if self.bad:
            out[np.fromiter(self.bad, np.int64, len(self.bad))] = True
        return out


def _fail(table: pa.Table, i: int, field: str, problem: str, source: str | None,
          row0: int) -> ValueError:
    return RecordError(f"{describe_row(table, i, source=source, row0=row0)}: field {field}: "
                       f"{problem}", row=i)


# --- conform -----------------------------------------------------------------------------------


_CAST_ERRORS = (pa.ArrowInvalid, pa.ArrowNotImplementedError, pa.ArrowTypeError)


def _first_uncastable(arr: pa.Array, target: pa.DataType) -> int:
    """Index of the first element of ``arr`` that does not cast to ``target`` (bisection)."""
    lo, hi = 0, len(arr)
    while hi - lo > 1:
        mid = (lo + hi) // 2
        try:
            # a compact copy: casting a sliced list array may touch values outside the slice
            pc.cast(arr.take(np.arange(lo, mid)), target)
        except _CAST_ERRORS:
            hi = mid
        else:
            lo = mid
    return lo


def _uncastable(arr: pa.Array, target: pa.DataType) -> np.ndarray:
    """Indices of every element of ``arr`` that does not cast to ``target``: halves that cast
    are done in one call, so the cost grows with the log of the number of bad elements."""
    out: list[int] = []
    stack = [np.arange(len(arr))]
    while stack:
        idx = stack.pop()
        try:
            pc.cast(arr.take(idx), target)
        except _CAST_ERRORS:
            if len(idx) == 1:
                out.append(int(idx[0]))
            else:
                mid = len(idx) // 2
                stack += [idx[mid:], idx[:mid]]
    return np.sort(np.asarray(out, np.int64))


def _strict_problems(name: str, arr: pa.Array) -> tuple[np.ndarray, object] | None:
    """Values a plain cast would coerce: ``correct`` must be bool or 0/1, ``n_agents`` an
    integer. ``(bad mask, problem(i))``, or ``None`` when the type is fine as it is."""
    t = arr.type
    if name == "correct":
        if pa.types.is_boolean(t) or pa.types.is_null(t):
            return None
        if pa.types.is_integer(t) or pa.types.is_floating(t):
            v = arr.to_numpy(zero_copy_only=False).astype(np.float64)  # nulls: NaN
            valid = arr.is_valid().to_numpy(zero_copy_only=False)
            bad = valid & (v != 0) & (v != 1)
            return bad, lambda i: f"must be true/false or 0/1, got {arr[i].as_py()!r}"
        if _castable_text(t):
            return _valid(arr), lambda i: f"must be true/false or 0/1, got {arr[i].as_py()!r}"
        return None  # other types do not cast at all: the cast names them
    if name == "active":
        return _active_problems(arr)
    if name == "n_agents":
        if pa.types.is_integer(t) or pa.types.is_null(t):
            return None
        if pa.types.is_floating(t):
            v = arr.to_numpy(zero_copy_only=False).astype(np.float64)
            valid = arr.is_valid().to_numpy(zero_copy_only=False)
            with np.errstate(invalid="ignore"):
                bad = valid & ~(np.isfinite(v) & (v == np.round(v)))
            return bad, lambda i: f"must be an integer, got {arr[i].as_py()!r}"
        if _castable_text(t) or pa.types.is_boolean(t):
            return _valid(arr), lambda i: f"must be an integer, got {arr[i].as_py()!r}"
    return None


def _is_list(t: pa.DataType) -> bool:
    return pa.types.is_list(t) or pa.types.is_large_list(t) or pa.types.is_fixed_size_list(t)


def _active_problems(arr: pa.Array) -> tuple[np.ndarray, object] | None:
    """``active`` holds ``[round][agent]`` booleans; 0/1 integers are accepted, anything
    else a plain cast would coerce (2 would become true, the text "no" false) is refused,
    naming the round and the agent of the first bad value."""
    t = arr.type
    leaf = t
    for _ in range(2):
        if not _is_list(leaf):
            return None  # not [round][agent]: the cast fails and names the types
        leaf = leaf.value_type
    if pa.types.is_boolean(leaf) or pa.types.is_null(leaf):
        return None
    if not (pa.types.is_integer(leaf) or pa.types.is_floating(leaf)):
        return _valid(arr), lambda i: f"must be [round][agent] booleans, got {t}"
    rounds = pc.list_flatten(arr)
    leaves = pc.list_flatten(rounds)
    v = leaves.to_numpy(zero_copy_only=False).astype(np.float64)  # nulls: NaN
    bad_leaf = _valid(leaves) & (v != 0) & (v != 1)
    if not bad_leaf.any():
        return None
    round_len, _ = _lengths(arr)
    slot_len, _ = _lengths(rounds)
    leaf_round = _parents(slot_len)
    round_rec = _parents(round_len)
    leaf_rec = round_rec[leaf_round]
    bad = np.zeros(len(arr), bool)
    bad[leaf_rec[bad_leaf]] = True
    first = np.full(len(arr), -1, np.int64)
    k_bad = np.flatnonzero(bad_leaf)[::-1]
    first[leaf_rec[k_bad]] = k_bad  # the last write per record wins: its first bad value
    round_start, leaf_start = _starts(round_len), _starts(slot_len)

    def problem(i: int) -> str:
        k = int(first[i])
        r = int(leaf_round[k])
        return (f"round {r - int(round_start[i])}, agent {k - int(leaf_start[r])}: must be "
                f"true/false (or 0/1), got {v[k]:g}")

    return bad, problem


def _castable_text(t: pa.DataType) -> bool:
    return (pa.types.is_string(t) or pa.types.is_large_string(t)
            or getattr(pa.types, "is_string_view", lambda _: False)(t)
            or (pa.types.is_dictionary(t) and _castable_text(t.value_type)))


def _valid(arr: pa.Array) -> np.ndarray:
    return arr.is_valid().to_numpy(zero_copy_only=False)


def conform(
    table: pa.Table, *, source: str | None = None, row0: int = 0,
    problems: Problems | None = None,
) -> pa.Table:
    """Cast the canonical columns of ``table`` to their ``CANONICAL`` types.

    Compatible types are cast (large_list / fixed_size_list -> list, large_string /
    string_view / dictionary -> string, float32 <-> float64, int64 -> int32 within range,
    integer answers -> strings, null-typed columns -> typed nulls); unknown extra columns and
    the column order are kept untouched. Columns already of the canonical type are not copied.
    Labels and counts are checked, not coerced: ``correct`` must be boolean or 0/1 and
    ``n_agents`` an integer (an integral float such as ``3.0`` is accepted).

    Args:
      problems: where to report bad rows (default: the first raises). With a collecting
        :class:`Problems`, every bad row is reported and its value of that column nulled, so
        the rest of the table conforms.

    Raises:
      ValueError: a canonical column cannot be cast; the message names ``source``, the row
        (``row0`` + index), its trajectory_id and the field.
    """
    if isinstance(table, pa.RecordBatch):
        table = pa.Table.from_batches([table])
    if problems is None:
        problems = Problems(table, source, row0)
    names = table.column_names
    for i, name in enumerate(names):
        idx = CANONICAL.get_field_index(name)
        if idx < 0:
            continue
        target = CANONICAL.field(idx).type
        col = table.column(i)
        if col.type.equals(target):
            continue
        arr = _combined(col)
        bad = np.zeros(len(arr), bool)
        strict = _strict_problems(name, arr)
        if strict is not None:
            mask, problem = strict
            problems.add(mask, name, problem)
            bad |= mask
        try:
            cast = (arr if not bad.any() else _null_rows(arr, bad)).cast(target)
        except _CAST_ERRORS as exc:
            if problems.first_only:
                try:
                    pc.cast(arr.slice(0, 0), target)
                except _CAST_ERRORS:
                    k = 0  # the type itself does not cast: name the first row
                else:
                    k = _first_uncastable(arr, target)
                raise _fail(table, k, name, f"cannot cast {col.type} to {target}: {exc}",
                            source, row0) from None
            valid = arr.is_valid().to_numpy(zero_copy_only=False)
            try:
                pc.cast(arr.slice(0, 0), target)
            except _CAST_ERRORS:
                mask = valid & ~bad  # the type itself does not cast: every row
            else:
                mask = np.zeros(len(arr), bool)
                mask[_uncastable(_null_rows(arr, bad) if bad.any() else arr, target)] = True
            problems.add(mask, name, lambda k, t=col.type, e=exc, g=target: f"cannot cast {t} to "
                                                                  f"{g}: {e}")
            bad |= mask | ~valid
            cast = _null_rows(arr, bad).cast(target)
        table = table.set_column(i, pa.field(name, target), cast)
    return table


def _null_rows(arr: pa.Array, bad: np.ndarray) -> pa.Array:
    """``arr`` with the ``bad`` rows null (a take with null indices: works for any type)."""
    keep = np.flatnonzero(~bad)
    if not len(keep):
        return pa.nulls(len(arr), arr.type)
    pos = np.cumsum(~bad) - 1
    pos[bad] = 0
    return arr.take(pa.array(keep)).take(pa.array(pos, mask=bad))


# --- validate ----------------------------------------------------------------------------------


class _Node:
    """Round structure of one node column: per-record round counts, per-round slot counts."""

    def __init__(self, arr: pa.Array) -> None:
        self.rounds, self.valid = _lengths(arr)
        self.slots, _ = _lengths(pc.list_flatten(arr))
        self.start = _starts(self.rounds)


def _first(mask: np.ndarray) -> int | None:
    if mask.size and mask.any():
        return int(np.argmax(mask))
    return None


def validate(table: pa.Table, *, source: str | None = None, row0: int = 0,
             problems: Problems | None = None) -> None:
    """Check that ``table`` holds well-formed canonical records.

    Checks, in order: a ``trajectory_id`` column exists; ids are non-null and unique within
    the table; every canonical column casts to its canonical type (``correct`` boolean or 0/1,
    ``n_agents`` an integer); ``n_agents`` is positive; no ``[agent]`` list of a node column
    is longer than the record's ``n_agents``; node columns of one record agree on the number
    of rounds and, round by round, on the number of slots (``active`` included: it must be
    ``[round][agent]`` booleans shaped like the other node columns); ``agreement`` /
    ``token_entropy``
    have one value per round of the node columns, and the same length as each other, when both
    are present. A round-count mismatch names the shorter column.

    Args:
      table: one chunk (any types castable to ``CANONICAL``; extra columns are ignored).
      source: file or frame name for messages; row0: row number of the table's first row.
      problems: a collecting :class:`Problems` to gather every bad row instead of raising at
        the first (the table must then already be conformed with it).

    Raises:
      ValueError: naming the source, the row, its trajectory_id and the field.
    """
    if isinstance(table, pa.RecordBatch):
        table = pa.Table.from_batches([table])
    head = f"{source}: " if source else ""
    if "trajectory_id" not in table.column_names:
        raise ValueError(
            f"{head}row {row0}: field trajectory_id: missing (columns: "
            f"{', '.join(table.column_names) or 'none'})"
        )
    if problems is None:
        problems = Problems(table, source, row0)
        table = conform(table, source=source, row0=row0, problems=problems)
        problems.table = table
    n = table.num_rows
    if n == 0:
        return
    ids = _combined(table.column("trajectory_id"))
    if ids.null_count:
        problems.add(ids.is_null().to_numpy(zero_copy_only=False), "trajectory_id",
                     lambda i: "null id")
    if n > 1 and not ids.null_count and pc.all(
            pc.greater(ids.slice(1), ids.slice(0, n - 1))).as_py():
        pass  # strictly increasing ids (the usual layout) are unique: no hashing needed
        # (only without nulls: a comparison with a null is skipped, so ``a, null, a``
        # would pass)
    elif len((enc := pc.dictionary_encode(ids)).dictionary) < n - (ids.null_count > 0):
        # dictionary codes number the distinct ids in order of first appearance
        codes = enc.indices.fill_null(-1).to_numpy(zero_copy_only=False).astype(np.int64)
        first = np.full(len(enc.dictionary) + 1, -1, np.int64)
        order = np.arange(n)[::-1]
        first[codes[order]] = order  # the last write per code wins: its first row
        dup = (codes >= 0) & (first[codes] != np.arange(n))
        problems.add(dup, "trajectory_id",
                     lambda i: f"duplicate id (first at row {problems.row(first[codes[i]])})")

    n_agents = None
    if "n_agents" in table.column_names:
        na = _combined(table.column("n_agents"))
        na_valid = na.is_valid().to_numpy(zero_copy_only=False)
        na_np = na.fill_null(0).to_numpy(zero_copy_only=False).astype(np.int64)
        problems.add(na_valid & (na_np <= 0), "n_agents",
                     lambda i: f"must be positive, got {na_np[i]}")
        n_agents = np.where(na_valid & (na_np > 0), na_np, np.iinfo(np.int64).max)

    nodes: dict[str, _Node] = {}
    for name in NODE_COLUMNS:
        if name in table.column_names:
            nodes[name] = _Node(_combined(table.column(name)))
    fits: list[_Node] = []  # node columns found within n_agents
    for name, nd in nodes.items():
        if n_agents is None:
            continue
        if any(np.array_equal(nd.rounds, f.rounds) and np.array_equal(nd.slots, f.slots)
               for f in fits):
            continue  # the same rounds and slots as a column that fits (the usual case)
        rec = _parents(nd.rounds)
        over = nd.slots > n_agents[rec]
        if not over.any():
            fits.append(nd)
            continue
        first_over = np.full(n, -1, np.int64)
        r_idx = np.flatnonzero(over)[::-1]
        first_over[rec[r_idx]] = r_idx
        problems.add(first_over >= 0, name,
                     lambda i, nd=nd, f=first_over: f"round {f[i] - int(nd.start[i])} has "
                     f"{nd.slots[f[i]]} agent slots, more than n_agents = {n_agents[i]}")
    _check_nodes_agree(nodes, problems)
    _check_round_lengths(table, nodes, problems)


def _check_nodes_agree(nodes: dict[str, _Node], problems: Problems) -> None:
    names = list(nodes)
    if len(names) < 2:
        return
    ref_name = names[0]
    ref = nodes[ref_name]
    for name in names[1:]:
        nd = nodes[name]
        both = ref.valid & nd.valid
        differ = both & (ref.rounds != nd.rounds)
        if differ.any():
            # name the shorter column: a truncated column is the likelier culprit
            problems.add(differ, name, lambda k, nd=nd, name=name: (
                f"{nd.rounds[k]} rounds, but {ref_name} has {ref.rounds[k]}"
                if nd.rounds[k] < ref.rounds[k] else None))
            problems.add(differ, ref_name, lambda k, nd=nd, name=name: (
                f"{ref.rounds[k]} rounds, but {name} has {nd.rounds[k]}"))
        same = both & ~differ
        if same.all() and len(ref.slots) == len(nd.slots):
            if _first(ref.slots != nd.slots) is None:
                continue
        lens = np.where(same, ref.rounds, 0)
        rec = _parents(lens)
        t = _ramp(lens, parent=rec)
        a = ref.slots[ref.start[rec] + t]
        b = nd.slots[nd.start[rec] + t]
        mism = a != b
        if not mism.any():
            continue
        first_r = np.full(lens.size, -1, np.int64)
        r_idx = np.flatnonzero(mism)[::-1]
        first_r[rec[r_idx]] = r_idx
        problems.add(first_r >= 0, name,
                     lambda i, f=first_r, a=a, b=b, t=t: f"round {t[f[i]]} has {b[f[i]]} agent "
                     f"slots, but {ref_name} has {a[f[i]]}")


def _check_round_lengths(table: pa.Table, nodes: dict[str, _Node], problems: Problems) -> None:
    present = [c for c in ROUND_COLUMNS if c in table.column_names]
    lens = {c: _lengths(_combined(table.column(c))) for c in present}
    if len(present) == 2:
        (la, va), (lb, vb) = lens[present[0]], lens[present[1]]
        a, b = present
        differ = va & vb & (la != lb)
        problems.add(differ, b, lambda k: (
            f"{lb[k]} values, but {a} has {la[k]}" if lb[k] < la[k] else None))
        problems.add(differ, a, lambda k: f"{la[k]} values, but {b} has {lb[k]}")
    if not nodes:
        return
    node_name, nd = next(iter(nodes.items()))
    for c in present:
        lc, vc = lens[c]
        differ = vc & nd.valid & (lc != nd.rounds)
        problems.add(differ, c, lambda k, lc=lc, c=c: (
            f"{lc[k]} values, but {node_name} has {nd.rounds[k]} rounds"
            if lc[k] < nd.rounds[k] else None))
        problems.add(differ, node_name, lambda k, lc=lc, c=c: (
            f"{nd.rounds[k]} rounds, but {c} has {lc[k]} values"))


def canonical_columns(names: Sequence[str]) -> list[str]:
    """The canonical column names among ``names``, in ``CANONICAL`` order."""
    have = set(names)
    return [f.name for f in CANONICAL if f.name in have]
