"""Reading signal columns from corpus files in chunks, and writing score tables atomically.

Formats: Parquet (canonical columns) and JSONL / JSONL.gz records. JSONL records may carry
the signals at top level (``agreement``, ``token_entropy``) or, as the SAUCE project's
released rollouts do, under ``signals: {agreement, token_entropy}``; the trajectory id is
``trajectory_id``, else ``record_uid``, else the record's 0-based row number.
"""

from __future__ import annotations

import os
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pyarrow as pa

__all__ = ["SignalChunk", "atomic_write_parquet", "count_rows", "iter_signal_chunks"]

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


@dataclass
class SignalChunk:
    """One chunk of a corpus, as the SAUCE engine needs it.

    row0: 0-based index of the chunk's first record in the file.
    ids: ``[n]`` trajectory ids (strings).
    protocol: ``[n]`` protocol names, or ``None`` when the file has none.
    agreement, token_entropy: Arrow list<float64> arrays, one list per trajectory.
    correct: ``[n]`` labels when the file has them (nulls as False with ``correct_valid``).
    """

    row0: int
    ids: pa.Array
    protocol: pa.Array | None
    agreement: pa.Array
    token_entropy: pa.Array
    correct: pa.Array | None


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


def _to_chunk(batch: pa.RecordBatch, row0: int, path: Path) -> SignalChunk:
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
    ids = ids.cast(pa.string())
    signals = _column(batch, "signals")
    fields = {}
    for name in ("agreement", "token_entropy"):
        col = _column(batch, name)
        if (col is None or col.null_count == n) and signals is not None:
            col = signals.field(name)
        if col is None:
            raise ValueError(f"{path}: the corpus has no {name} column (nor signals.{name})")
        fields[name] = col.cast(_FLOATS)
    protocol = _column(batch, "protocol")
    return SignalChunk(
        row0=row0,
        ids=ids,
        protocol=None if protocol is None else protocol.cast(pa.string()),
        agreement=fields["agreement"],
        token_entropy=fields["token_entropy"],
        correct=_column(batch, "correct"),
    )


def iter_signal_chunks(path: str | os.PathLike, chunk_rows: int = 1 << 18) -> Iterator[SignalChunk]:
    """Read ``path`` chunk by chunk (about ``chunk_rows`` records each), in file order."""
    path = Path(path)
    if not path.exists():
        raise FileNotFoundError(f"{path}: no such file")
    row0 = 0
    if _format(path) == "parquet":
        import pyarrow.parquet as pq

        pf = pq.ParquetFile(path)
        wanted = [
            c
            for c in ("trajectory_id", "record_uid", "protocol", "correct", "agreement",
                      "token_entropy", "signals")
            if c in pf.schema_arrow.names
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
            yield _to_chunk(batch, row0, path)
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

    def __enter__(self) -> AtomicParquetWriter:
        return self

    def __exit__(self, exc_type, exc, tb) -> None:
        self._writer.close()
        if exc_type is None:
            os.replace(self._tmp, self.path)
        else:
            self._tmp.unlink(missing_ok=True)
