"""The canonical corpus schema: column types, conforming compatible types, validating records.

Every reader yields tables in these columns (all optional but ``trajectory_id``; an estimator
declares what it needs). Node columns are ``[round][agent]`` lists with one slot per agent of
the initial team (``n_agents``), so slot k is the same agent in every round; rounds that did
not execute are absent. Extra, non-canonical columns are carried through untouched.

>>> from fastuq.schema import CANONICAL, conform, validate
>>> table = conform(table)               # large_list -> list, float32 -> float64, ...
>>> validate(table, source="rollouts.parquet", row0=0)   # ValueError naming row/id/field

All checks are vectorized over Arrow offsets: no Python loop runs over records.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from ._arrow import combined as _combined
from ._arrow import list_lengths as _lengths
from ._arrow import ramp as _ramp
from ._arrow import starts as _starts
from ._errors import RecordError

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
        pa.field("predecessors", _lst(_I32, 3)),
        pa.field("flags", _lst(_STR)),
        pa.field("texts", _lst(_STR, 2)),
    ]
)
"""Every canonical column with its Arrow type (``texts``: ``[round][agent]`` response texts)."""

NODE_COLUMNS: tuple[str, ...] = (
    "answers", "seq_logprob", "n_tokens", "token_logprobs", "topk_logprobs", "belief",
    "predecessors", "texts",
)
"""Canonical columns indexed ``[round][agent]`` (possibly with deeper levels below)."""

ROUND_COLUMNS: tuple[str, ...] = ("agreement", "token_entropy")
"""Canonical columns with one value per executed round."""


# --- messages ----------------------------------------------------------------------------------


def describe_row(
    table: pa.Table, i: int, *, source: str | None = None, row0: int = 0
) -> str:
    """``"SOURCE: row R (trajectory_id 'X')"`` for row ``i`` of ``table`` (``R = row0 + i``)."""
    head = f"{source}: " if source else ""
    tid = None
    if "trajectory_id" in table.column_names:
        try:
            tid = table.column("trajectory_id")[i].as_py()
        except Exception:  # noqa: BLE001 - a message must never fail
            tid = None
    who = f" (trajectory_id {tid!r})" if tid is not None else ""
    return f"{head}row {row0 + i}{who}"


def _fail(table: pa.Table, i: int, field: str, problem: str, source: str | None,
          row0: int) -> ValueError:
    return RecordError(f"{describe_row(table, i, source=source, row0=row0)}: field {field}: "
                       f"{problem}", row=i)


# --- conform -----------------------------------------------------------------------------------




def _first_uncastable(arr: pa.Array, target: pa.DataType) -> int:
    """Index of the first element of ``arr`` that does not cast to ``target`` (bisection)."""
    lo, hi = 0, len(arr)
    while hi - lo > 1:
        mid = (lo + hi) // 2
        try:
            # a compact copy: casting a sliced list array may touch values outside the slice
            pc.cast(arr.take(np.arange(lo, mid)), target)
        except (pa.ArrowInvalid, pa.ArrowNotImplementedError, pa.ArrowTypeError):
            hi = mid
        else:
            lo = mid
    return lo


def conform(
    table: pa.Table, *, source: str | None = None, row0: int = 0
) -> pa.Table:
    """Cast the canonical columns of ``table`` to their ``CANONICAL`` types.

    Compatible types are cast (large_list / fixed_size_list -> list, large_string /
    string_view / dictionary -> string, float32 <-> float64, int64 -> int32 within range,
    integer answers -> strings, null-typed columns -> typed nulls); unknown extra columns and
    the column order are kept untouched. Columns already of the canonical type are not copied.

    Raises:
      ValueError: a canonical column cannot be cast; the message names ``source``, the row
        (``row0`` + index), its trajectory_id and the field.
    """
    if isinstance(table, pa.RecordBatch):
        table = pa.Table.from_batches([table])
    names = table.column_names
    for i, name in enumerate(names):
        idx = CANONICAL.get_field_index(name)
        if idx < 0:
            continue
        target = CANONICAL.field(idx).type
        col = table.column(i)
        if col.type.equals(target):
            continue
        try:
            cast = col.cast(target)
        except (pa.ArrowInvalid, pa.ArrowNotImplementedError, pa.ArrowTypeError) as exc:
            arr = _combined(col)
            try:
                pc.cast(arr.slice(0, 0), target)
            except (pa.ArrowInvalid, pa.ArrowNotImplementedError, pa.ArrowTypeError):
                k = 0  # the type itself does not cast: name the first row
            else:
                k = _first_uncastable(arr, target)
            raise _fail(table, k, name, f"cannot cast {col.type} to {target}: {exc}",
                        source, row0) from None
        table = table.set_column(i, pa.field(name, target), cast)
    return table


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


def validate(table: pa.Table, *, source: str | None = None, row0: int = 0) -> None:
    """Check that ``table`` holds well-formed canonical records.

    Checks, in order: a ``trajectory_id`` column exists; ids are non-null and unique within
    the table; every canonical column casts to its canonical type; ``n_agents`` is positive;
    no ``[agent]`` list of a node column is longer than the record's ``n_agents``; node columns
    of one record agree on the number of rounds and, round by round, on the number of slots;
    ``agreement`` / ``token_entropy`` have one value per round of the node columns, and the same
    length as each other, when both are present.

    Args:
      table: one chunk (any types castable to ``CANONICAL``; extra columns are ignored).
      source: file or frame name for messages; row0: row number of the table's first row.

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
    table = conform(table, source=source, row0=row0)
    n = table.num_rows
    if n == 0:
        return
    ids = _combined(table.column("trajectory_id"))
    k = _first(ids.is_null().to_numpy(zero_copy_only=False)) if ids.null_count else None
    if k is not None:
        raise RecordError(f"{head}row {row0 + k}: field trajectory_id: null id", row=k)
    if n > 1 and pc.all(pc.greater(ids.slice(1), ids.slice(0, n - 1))).as_py():
        pass  # strictly increasing ids (the usual layout) are unique: no hashing needed
    elif len((enc := pc.dictionary_encode(ids)).dictionary) < n:
        # dictionary codes number the distinct ids in order of first appearance
        codes = enc.indices.to_numpy(zero_copy_only=False).astype(np.int64)
        seen = np.maximum.accumulate(codes)
        k = int(np.argmax(codes[1:] <= seen[:-1])) + 1
        j = int(np.argmax(codes == codes[k]))
        raise _fail(table, k, "trajectory_id", f"duplicate id (first at row {row0 + j})",
                    source, row0)

    n_agents = None
    if "n_agents" in table.column_names:
        na = _combined(table.column("n_agents"))
        na_valid = na.is_valid().to_numpy(zero_copy_only=False)
        na_np = na.fill_null(0).to_numpy(zero_copy_only=False).astype(np.int64)
        k = _first(na_valid & (na_np <= 0))
        if k is not None:
            raise _fail(table, k, "n_agents", f"must be positive, got {na_np[k]}", source, row0)
        n_agents = np.where(na_valid, na_np, np.iinfo(np.int64).max)

    nodes: dict[str, _Node] = {}
    for name in NODE_COLUMNS:
        if name in table.column_names:
            nodes[name] = _Node(_combined(table.column(name)))
    for name, nd in nodes.items():
        if n_agents is None:
            continue
        rec = np.repeat(np.arange(n), nd.rounds)
        r = _first(nd.slots > n_agents[rec])
        if r is not None:
            i = int(rec[r])
            t = r - int(nd.start[i])
            raise _fail(table, i, name,
                        f"round {t} has {nd.slots[r]} agent slots, more than n_agents = "
                        f"{n_agents[i]}", source, row0)
    _check_nodes_agree(table, nodes, source, row0)
    _check_round_lengths(table, nodes, source, row0)


def _check_nodes_agree(table: pa.Table, nodes: dict[str, _Node], source: str | None,
                       row0: int) -> None:
    names = list(nodes)
    if len(names) < 2:
        return
    ref_name = names[0]
    ref = nodes[ref_name]
    for name in names[1:]:
        nd = nodes[name]
        both = ref.valid & nd.valid
        k = _first(both & (ref.rounds != nd.rounds))
        if k is not None:
            raise _fail(table, k, name,
                        f"{nd.rounds[k]} rounds, but {ref_name} has {ref.rounds[k]}",
                        source, row0)
        if both.all():  # rounds align one to one: compare the slot counts directly
            r = _first(ref.slots != nd.slots)
            if r is None:
                continue
        lens = np.where(both, ref.rounds, 0)
        rec = np.repeat(np.arange(lens.size), lens)
        t = _ramp(lens)
        a = ref.slots[ref.start[rec] + t]
        b = nd.slots[nd.start[rec] + t]
        r = _first(a != b)
        if r is not None:
            i, tt = int(rec[r]), int(t[r])
            raise _fail(table, i, name,
                        f"round {tt} has {b[r]} agent slots, but {ref_name} has {a[r]}",
                        source, row0)


def _check_round_lengths(table: pa.Table, nodes: dict[str, _Node], source: str | None,
                         row0: int) -> None:
    present = [c for c in ROUND_COLUMNS if c in table.column_names]
    lens = {c: _lengths(_combined(table.column(c))) for c in present}
    if len(present) == 2:
        (la, va), (lb, vb) = lens[present[0]], lens[present[1]]
        k = _first(va & vb & (la != lb))
        if k is not None:
            raise _fail(table, k, present[1],
                        f"{lb[k]} values, but {present[0]} has {la[k]}", source, row0)
    if not nodes:
        return
    node_name, nd = next(iter(nodes.items()))
    for c in present:
        lc, vc = lens[c]
        k = _first(vc & nd.valid & (lc != nd.rounds))
        if k is not None:
            raise _fail(table, k, c,
                        f"{lc[k]} values, but {node_name} has {nd.rounds[k]} rounds",
                        source, row0)


def canonical_columns(names: Sequence[str]) -> list[str]:
    """The canonical column names among ``names``, in ``CANONICAL`` order."""
    have = set(names)
    return [f.name for f in CANONICAL if f.name in have]
