"""Writing Parquet atomically: a temporary file in the destination folder, renamed into place
only when everything was written (reading is :mod:`fastuq.readers`)."""

from __future__ import annotations

import os
import tempfile
from pathlib import Path

import pyarrow as pa

__all__ = ["AtomicParquetWriter", "atomic_write_parquet"]


def atomic_write_parquet(table: pa.Table, path: str | os.PathLike) -> None:
    """Write ``table`` to ``path`` through a temporary file in the same folder, then rename."""
    with AtomicParquetWriter(path, table.schema) as writer:
        writer.write(table)


def _umask() -> int:
    mask = os.umask(0o022)
    os.umask(mask)
    return mask


class AtomicParquetWriter:
    """Incremental Parquet writer that only appears at ``path`` when closed without error."""

    def __init__(
        self, path: str | os.PathLike, schema: pa.Schema, *, compression: str = "snappy"
    ) -> None:
        import pyarrow.parquet as pq

        self.path = Path(path)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(
            prefix=f".{self.path.name}.", suffix=".tmp", dir=self.path.parent
        )
        os.close(fd)
        self._tmp = Path(tmp)
        try:
            os.chmod(self._tmp, 0o666 & ~_umask())  # mkstemp makes 0600: the usual mode
            self._writer = pq.ParquetWriter(self._tmp, schema, compression=compression)
        except BaseException:
            self._tmp.unlink(missing_ok=True)
            raise

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
