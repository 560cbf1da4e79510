"""Reading signal columns from corpus files in chunks, and writing score tables atomically.

Formats: Parquet (canonical columns) and JSONL / JSONL.gz records. JSONL records may carry
the signals at top level (``agreement``, ``token_entropy``) or, as the SAUCE project's
released rollouts do, under ``signals: {agreement, token_entropy}``; the trajectory id is
``trajectory_id``, else ``record_uid``, else the record's 0-based row number.
"""

from __future__ import annotations

import os
import tempfile
from collections.abc import Iterator, Sequence
from pathlib import Path

import numpy as np
import pyarrow as pa

__all__ = ["atomic_write_parquet", "count_rows", "iter_signal_chunks"]

_FLOATS = pa.list_(pa.float64())
_JSON_SCHEMA = pa.schema(
    [
        ("trajectory_id", pa.string()),
        ("record_uid", pa.string()),
        ("protocol", pa.string()),
        ("correct", pa.bool_()),
        ("agreement", _FLOATS),
        ("token_entropy", _FLOATS),
        ("signals", pa.struct([("agreement", _FLOATS), ("token_entropy", _FLOATS)])),
    ]
)


def _format(path: Path) -> str:
    name = path.name.lower()
    if name.endswith((".parquet", ".pq")):
        return "parquet"
    if name.endswith((".jsonl", ".jsonl.gz", ".json", ".json.gz", ".ndjson", ".ndjson.gz")):
        return "jsonl"
    raise ValueError(f"{path}: unknown corpus format (expected .parquet, .jsonl or .jsonl.gz)")


def count_rows(path: str | os.PathLike) -> int | None:
    """Number of records when known without reading the data (Parquet), else ``None``."""
    path = Path(path)
    if _format(path) == "parquet":
        import pyarrow.parquet as pq

        return pq.ParquetFile(path).metadata.num_rows
    return None


def _column(batch: pa.RecordBatch | pa.Table, name: str) -> pa.Array | None:
    if name not in batch.schema.names:
        return None
    col = batch.column(name)
    return col.combine_chunks() if isinstance(col, pa.ChunkedArray) else col


def _canonical(batch: pa.RecordBatch, row0: int, path: Path) -> pa.Table:
    """Map a raw batch to canonical columns: ``trajectory_id`` (from ``trajectory_id``, else
    ``record_uid``, else the row number), ``agreement`` / ``token_entropy`` (top level, else
    under ``signals``), and ``protocol`` / ``correct`` when present."""
    n = batch.num_rows
    ids = None
    for name in ("trajectory_id", "record_uid"):
        col = _column(batch, name)
        if col is not None and col.null_count < n:
            ids = col
            break
    if ids is None:
        ids = pa.array(np.arange(row0, row0 + n).astype(str))
    elif ids.null_count:
        k = int(np.argmax(ids.is_null().to_numpy(zero_copy_only=False)))
        raise ValueError(f"{path}: row {row0 + k}: trajectory_id is missing")
    columns = {"trajectory_id": ids.cast(pa.string())}
    signals = _column(batch, "signals")
    for name in ("agreement", "token_entropy"):
        col = _column(batch, name)
        if (col is None or col.null_count == n) and signals is not None:
            col = signals.field(name)
        if col is not None:
            columns[name] = col.cast(_FLOATS)
    for name, typ in (("protocol", pa.string()), ("correct", pa.bool_())):
        col = _column(batch, name)
        if col is not None:
            columns[name] = col.cast(typ)
    for name in batch.schema.names:  # everything else passes through untouched
        if name not in columns and name not in ("signals", "record_uid"):
            columns[name] = _column(batch, name)
    return pa.table(columns)


def iter_signal_chunks(
    path: str | os.PathLike, chunk_rows: int = 1 << 18, columns: Sequence[str] | None = None
) -> Iterator[pa.Table]:
    """Read ``path`` chunk by chunk (about ``chunk_rows`` records each), in file order, as
    tables of canonical columns (see :func:`_canonical`). ``columns`` restricts what is read
    from Parquet (the id, protocol and label columns are always read)."""
    path = Path(path)
    if not path.exists():
        raise FileNotFoundError(f"{path}: no such file")
    row0 = 0
    if _format(path) == "parquet":
        import pyarrow.parquet as pq

        pf = pq.ParquetFile(path)
        always = ("trajectory_id", "record_uid", "protocol", "correct", "signals")
        wanted = None if columns is None else [
            c for c in pf.schema_arrow.names if c in always or c in columns
        ]
        batches = pf.iter_batches(batch_size=chunk_rows, columns=wanted)
    else:
        import pyarrow.json as pj

        stream = pa.input_stream(str(path), compression="detect")
        try:
            batches = pj.open_json(
                stream,
                read_options=pj.ReadOptions(block_size=1 << 24),
                parse_options=pj.ParseOptions(
                    explicit_schema=_JSON_SCHEMA, unexpected_field_behavior="ignore"
                ),
            )
        except pa.ArrowInvalid as exc:
            raise ValueError(f"{path}: {exc}") from None
    try:
        for batch in batches:
            yield _canonical(batch, row0, path)
            row0 += batch.num_rows
    except pa.ArrowInvalid as exc:
        raise ValueError(f"{path}: after row {row0}: {exc}") from None


def atomic_write_parquet(table: pa.Table, path: str | os.PathLike) -> None:
    """Write ``table`` to ``path`` through a temporary file in the same folder, then rename."""
    with AtomicParquetWriter(path, table.schema) as writer:
        writer.write(table)


class AtomicParquetWriter:
    """Incremental Parquet writer that only appears at ``path`` when closed without error."""

    def __init__(self, path: str | os.PathLike, schema: pa.Schema) -> None:
        import pyarrow.parquet as pq

        self.path = Path(path)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(
            prefix=f".{self.path.name}.", suffix=".tmp", dir=self.path.parent
        )
        os.close(fd)
        self._tmp = Path(tmp)
        self._writer = pq.ParquetWriter(self._tmp, schema)

    def write(self, table: pa.Table | pa.RecordBatch) -> None:
        if isinstance(table, pa.RecordBatch):
            table = pa.Table.from_batches([table])
        self._writer.write_table(table)

    def close(self) -> None:
        """Finish the file and move it into place."""
        self._writer.close()
        os.replace(self._tmp, self.path)

    def abort(self) -> None:
        """Drop everything written; nothing appears at ``path``."""
        try:
            self._writer.close()
        finally:
            self._tmp.unlink(missing_ok=True)

    def __enter__(self) -> AtomicParquetWriter:
        return self

    def __exit__(self, exc_type, exc, tb) -> None:
        if exc_type is None:
            self.close()
        else:
            self.abort()
