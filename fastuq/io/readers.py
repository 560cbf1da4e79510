"""Read a corpus from files or frames as a stream of canonical, validated Arrow tables.

>>> from fastuq.io.readers import read_corpus, iter_chunks, count_rows
>>> for table in read_corpus("rollouts.jsonl.gz", columns=["agreement", "token_entropy"]):
...     ...                                   # pyarrow.Table, canonical columns, in file order
>>> for chunk in iter_chunks("shards/"):     # Chunk(row0, table, source, source_row0)
...     ...

Sources: a path to a Parquet file (``.parquet``, ``.pq``), an Arrow IPC file or stream
(``.arrow``, ``.feather``, ``.ipc``, ``.arrows``), JSON Lines (``.jsonl``, ``.ndjson``,
``.json``, each optionally ``.gz`` / ``.bz2`` / ``.zst`` / ``.lz4``), a folder of such files
(read in sorted path order) or a list of paths / frames; a ``pyarrow.Table`` / ``RecordBatch``
/ ``RecordBatchReader``, a ``polars.DataFrame`` or ``LazyFrame`` (streamed with
``collect_batches``), or a Hugging Face ``datasets.Dataset`` (when that package is installed).

Every chunk goes through the same steps: the SAUCE project's released records are mapped to
canonical columns (detected from ``round_outputs`` / ``signals``; see ``fastuq.io.sauce_release``),
canonical columns are cast to their canonical types (``fastuq.io.schema.conform``) and checked
(``fastuq.io.schema.validate``; ids are checked for uniqueness within a chunk). Chunks hold
``chunk_rows`` rows except the last of each file, so memory is bounded by the chunk, not the
corpus, and row numbers are known: errors name the file, the row (for JSON Lines parse errors,
the line), the trajectory_id and the field.
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Iterator, Sequence
from pathlib import Path
from typing import Any, NamedTuple

import pyarrow as pa

from fastuq.io import schema as _schema
from fastuq.io.jsonl import (
    DEFAULT_BLOCK,
    DEFAULT_SAMPLE,
    infer_json_schema,
    iter_json_batches,
    json_read_schema,
)
from fastuq.io.packfile import is_pack, open_pack, pack_chunks
from fastuq.io.sauce_release import is_sauce, sauce_source_columns, sauce_to_canonical

__all__ = ["SKIPPED_SUFFIX", "Chunk", "count_rows", "folder_files", "is_corpus_file", "iter_chunks",
           "read_corpus"]

_COMPRESSED = (".gz", ".bz2", ".zst", ".zstd", ".lz4")
_FORMATS = {
    ".parquet": "parquet", ".pq": "parquet",
    ".arrow": "ipc", ".feather": "ipc", ".ipc": "ipc", ".arrows": "ipc",
    ".jsonl": "json", ".ndjson": "json", ".json": "json",
}


class Chunk(NamedTuple):
    """One chunk of a corpus.

    row0: index of the chunk's first row in the whole source (all files together).
    table: ``pyarrow.Table`` in canonical columns (plus extras), one chunk per column.
    source: the file (or frame) the rows come from.
    source_row0: index of the chunk's first row within that file.
    packed: for a chunk of a pack (``fastuq pack``), its packed inputs
      (:class:`fastuq.io.packfile.PackedArrays`); ``None`` otherwise.
    """

    row0: int
    table: pa.Table
    source: str
    source_row0: int
    packed: Any = None


# --- parts: one file or frame each -------------------------------------------------------------


class _Part:
    name: str

    def names(self) -> list[str]:
        raise NotImplementedError

    def batches(self, columns: list[str] | None, chunk_rows: int
                ) -> Iterable[pa.RecordBatch | pa.Table]:
        raise NotImplementedError

    def count(self) -> int | None:
        return None


class _ParquetPart(_Part):
    def __init__(self, path: Path) -> None:
        import pyarrow.parquet as pq

        self.name = str(path)
        try:
            # pre_buffer (pyarrow's default) would fetch every requested column chunk of the
            # file ahead of the batches and hold it: the size of the corpus in memory (1.4
            # GB peak for 1e7 trajectories), and slower on local files than plain reads
            self.file = pq.ParquetFile(path, pre_buffer=False)
        except (pa.ArrowInvalid, OSError) as exc:
            raise ValueError(f"{path}: not a readable Parquet file: {exc}") from None

    def names(self) -> list[str]:
        return self.file.schema_arrow.names

    def batches(self, columns, chunk_rows):
        return self.file.iter_batches(batch_size=chunk_rows, columns=columns)

    def count(self) -> int:
        return self.file.metadata.num_rows


class _IpcPart(_Part):
    def __init__(self, path: Path) -> None:
        self.name = str(path)
        self.path = path
        try:
            self.file = pa.ipc.open_file(pa.memory_map(str(path)))
        except pa.ArrowInvalid:
            self.file = None
            try:
                with pa.ipc.open_stream(pa.input_stream(str(path))) as reader:
                    self.schema = reader.schema
            except (pa.ArrowInvalid, OSError) as exc:
                raise ValueError(f"{path}: not an Arrow IPC file or stream: {exc}") from None
        else:
            self.schema = self.file.schema

    def names(self) -> list[str]:
        return self.schema.names

    def batches(self, columns, chunk_rows):
        if self.file is not None:
            for i in range(self.file.num_record_batches):
                b = self.file.get_batch(i)
                yield b if columns is None else b.select(columns)
        else:
            with pa.ipc.open_stream(pa.input_stream(str(self.path))) as reader:
                for b in reader:
                    yield b if columns is None else b.select(columns)

    def count(self) -> int | None:
        if self.file is None:
            return None
        return sum(self.file.get_batch(i).num_rows for i in range(self.file.num_record_batches))


class _JsonPart(_Part):
    def __init__(self, path: Path, schema: pa.Schema | None, sample_bytes: int,
                 block_size: int) -> None:
        self.name = str(path)
        self.path = path
        self.user_schema = schema
        self.block_size = block_size
        self.sample_bytes = sample_bytes
        self.inferred = schema if schema is not None else infer_json_schema(path, sample_bytes)

    def names(self) -> list[str]:
        return self.inferred.names

    def batches(self, columns, chunk_rows):
        if self.user_schema is not None:
            read = self.user_schema
            if columns is not None:
                read = pa.schema([read.field(c) for c in columns if c in read.names])
            note = "; it does not fit the schema= given"
            ignore = True
        else:
            read = json_read_schema(self.inferred, columns)
            note = (f"; the schema was inferred from the first {self.sample_bytes:,} bytes: pass "
                    f"schema= to declare the fields, a larger sample_bytes=, or columns= to "
                    f"read only some")
            ignore = columns is not None
        return iter_json_batches(self.path, read, ignore_unknown=ignore,
                                 block_size=self.block_size, sample_note=note)


class _ArrowPart(_Part):
    def __init__(self, obj: pa.Table | pa.RecordBatch | pa.RecordBatchReader) -> None:
        if isinstance(obj, pa.RecordBatch):
            obj = pa.Table.from_batches([obj])
        self.obj = obj
        self.name = f"<pyarrow.{type(obj).__name__}>"

    def names(self) -> list[str]:
        return self.obj.schema.names

    def batches(self, columns, chunk_rows):
        obj = self.obj
        if isinstance(obj, pa.Table):
            if columns is not None:
                obj = obj.select(columns)
            return obj.to_batches(max_chunksize=chunk_rows)
        return (b if columns is None else b.select(columns) for b in obj)

    def count(self) -> int | None:
        return self.obj.num_rows if isinstance(self.obj, pa.Table) else None


class _PolarsPart(_Part):
    def __init__(self, frame: Any) -> None:
        self.frame = frame
        self.lazy = type(frame).__name__ == "LazyFrame"
        self.name = f"<polars.{type(frame).__name__}>"

    def names(self) -> list[str]:
        if self.lazy:
            return list(self.frame.collect_schema().names())
        return list(self.frame.columns)

    def batches(self, columns, chunk_rows):
        frame = self.frame if columns is None else self.frame.select(columns)
        if not self.lazy:
            for off in range(0, frame.height, chunk_rows):
                yield frame.slice(off, chunk_rows).to_arrow()
            return
        if not hasattr(frame, "collect_batches"):  # older polars: collect, then slice
            df = frame.collect()
            for off in range(0, df.height, chunk_rows):
                yield df.slice(off, chunk_rows).to_arrow()
            return
        stream = frame.collect_batches(chunk_size=chunk_rows, maintain_order=True)
        try:
            for df in stream:
                yield df.to_arrow()
        finally:
            stop = getattr(stream, "stop", None)
            if stop is not None:
                try:
                    stop()
                except Exception:  # noqa: BLE001 - best effort when abandoning a stream
                    pass

    def count(self) -> int | None:
        return None if self.lazy else int(self.frame.height)


class _HFPart(_Part):
    def __init__(self, ds: Any) -> None:
        self.ds = ds
        info = getattr(ds, "info", None)
        label = getattr(info, "dataset_name", None) or getattr(info, "config_name", None)
        self.name = f"<datasets.{type(ds).__name__}{' ' + label if label else ''}>"

    def names(self) -> list[str]:
        names = getattr(self.ds, "column_names", None)
        if names is None and getattr(self.ds, "features", None) is not None:
            names = list(self.ds.features)
        return list(names or [])

    def batches(self, columns, chunk_rows):
        ds = self.ds if columns is None else self.ds.select_columns(columns)
        yield from ds.with_format("arrow").iter(batch_size=chunk_rows)

    def count(self) -> int | None:
        n = getattr(self.ds, "num_rows", None)
        return int(n) if n is not None else None


def _file_format(path: Path) -> str | None:
    name = path.name.lower()
    for c in _COMPRESSED:
        if name.endswith(c):
            name = name[: -len(c)]
            break
    return _FORMATS.get(os.path.splitext(name)[1])


#: How the lists of skipped records (``--on-error skip``) end: every default name fastuq
#: gives one ends so, and reading a folder leaves such files out, so that a skip list written
#: beside a corpus is never read as corpus next time.
SKIPPED_SUFFIX = ".skipped.jsonl"


def is_corpus_file(path: Path) -> bool:
    """Whether reading a folder reads ``path``: a corpus format (:func:`_file_format`), not
    hidden, not a skip list (a name ending in :data:`SKIPPED_SUFFIX`). A file given by name
    is read whatever it is called."""
    name = path.name
    return (not name.startswith(".") and not name.lower().endswith(SKIPPED_SUFFIX)
            and _file_format(path) is not None)


def folder_files(path: Path) -> list[Path]:
    """The corpus files below folder ``path`` (recursively, sorted; hidden files, skip lists
    and files of no known format left out: :func:`is_corpus_file`); ValueError when there is
    none, or when ``path`` is a pack (``fastuq pack``: its chunk files are no corpus of their
    own; a pack is read only as a whole, given alone)."""
    if is_pack(path):
        raise ValueError(f"{path}: a fastuq pack is read only as a whole: pass it alone (not "
                         "in a list or a glob)")
    files = sorted(p for p in path.rglob("*") if p.is_file() and is_corpus_file(p))
    if not files:
        raise ValueError(f"{path}: no corpus files (Parquet, Arrow IPC, JSON Lines)")
    return files


def _parts(source: Any, schema: pa.Schema | None, sample_bytes: int, block_size: int
           ) -> Iterator[_Part]:
    if isinstance(source, (str, os.PathLike)):
        path = Path(source)
        if path.is_dir():
            for f in folder_files(path):
                yield from _parts(f, schema, sample_bytes, block_size)
            return
        if not path.exists():
            raise FileNotFoundError(f"{path}: no such file")
        fmt = _file_format(path)
        if fmt == "parquet":
            yield _ParquetPart(path)
        elif fmt == "ipc":
            yield _IpcPart(path)
        elif fmt == "json":
            yield _JsonPart(path, schema, sample_bytes, block_size)
        else:
            raise ValueError(f"{path}: unknown corpus format (expected .parquet, .arrow, "
                             f".feather, .ipc, .jsonl, .ndjson or .json, optionally .gz)")
        return
    if isinstance(source, (pa.Table, pa.RecordBatch, pa.RecordBatchReader)):
        yield _ArrowPart(source)
        return
    module = type(source).__module__.split(".")[0]
    if module == "polars":
        yield _PolarsPart(source)
        return
    if module == "datasets":
        yield _HFPart(source)
        return
    if isinstance(source, (list, tuple)):
        for s in source:
            yield from _parts(s, schema, sample_bytes, block_size)
        return
    raise TypeError(f"cannot read a corpus from {type(source).__name__}: pass a path, a "
                    f"pyarrow.Table, a polars DataFrame/LazyFrame or a datasets.Dataset")


# --- chunking ----------------------------------------------------------------------------------


def _rechunk(batches: Iterable[pa.RecordBatch | pa.Table], chunk_rows: int
             ) -> Iterator[pa.Table]:
    """Consecutive tables of exactly ``chunk_rows`` rows (the last may be shorter)."""
    buf: list[pa.Table] = []
    have = 0
    for b in batches:
        if b.num_rows == 0:
            continue
        buf.append(b if isinstance(b, pa.Table) else pa.Table.from_batches([b]))
        have += b.num_rows
        while have >= chunk_rows:
            t = buf[0] if len(buf) == 1 else pa.concat_tables(buf, promote_options="default")
            yield t.slice(0, chunk_rows)
            rest = t.slice(chunk_rows)
            buf = [rest] if rest.num_rows else []
            have = rest.num_rows
    if have:
        yield buf[0] if len(buf) == 1 else pa.concat_tables(buf, promote_options="default")


def _plan(part: _Part, columns: Sequence[str] | None, optional: Sequence[str]
          ) -> tuple[bool, list[str] | None, list[str] | None]:
    """(SAUCE format?, source columns to read or None for all, output columns or None)."""
    names = part.names()
    sauce = is_sauce(names)
    if columns is None:
        return sauce, None, None

    def present(c: str) -> bool:
        return c in names or (sauce and bool(sauce_source_columns([c], names)))

    wanted = ["trajectory_id"] + [c for c in dict.fromkeys(columns) if c != "trajectory_id"]
    for c in wanted[1:]:
        if not present(c):
            raise ValueError(f"{part.name}: no column {c!r} (columns: {', '.join(names)})")
    wanted += [c for c in dict.fromkeys(optional) if c not in wanted and present(c)]
    src = sauce_source_columns(wanted, names) if sauce else [c for c in wanted if c in names]
    return sauce, src, wanted


def iter_chunks(
    source: Any,
    *,
    columns: Sequence[str] | None = None,
    optional_columns: Sequence[str] = (),
    chunk_rows: int = 1 << 18,
    validate: bool = True,
    schema: pa.Schema | None = None,
    sample_bytes: int = DEFAULT_SAMPLE,
    block_size: int = DEFAULT_BLOCK,
    conform: bool = True,
) -> Iterator[Chunk]:
    """Read ``source`` as ``Chunk(row0, table, source, source_row0)``, in input order.

    Args:
      source: a path (file or folder), a list of paths, or an in-memory frame (see the
        module docstring).
      columns: columns to return (canonical names, or extra fields); ``trajectory_id`` is
        always included, first. Only what they need is read (Parquet / IPC / frame
        projection; JSON fields outside them are skipped by the parser). Default: all. A
        column the source lacks is an error.
      optional_columns: with ``columns``, more columns to return where the source has them
        (e.g. ``correct``, ``protocol``), silently left out where it does not.
      chunk_rows: rows per chunk (every chunk of a file but its last holds exactly this many;
        a pack, see :mod:`fastuq.io.packfile`, is read in the chunks it was packed in).
      validate: run ``fastuq.io.schema.validate`` on every chunk.
      schema: JSON Lines only: the explicit Arrow schema of the JSON fields to read (fields
        not in it are skipped). Default: inferred from the first ``sample_bytes`` of each
        file, canonical columns with their canonical types; then a field that first appears
        later, or a field that was null throughout the sample and holds values later, is an
        error naming the line (with ``columns=``, fields outside them are skipped).
      block_size: JSON Lines bytes parsed per block (a record must fit in one block).
      conform: cast canonical columns to their canonical types (``False`` only with
        ``validate=False``: for callers that conform and check each chunk themselves, e.g.
        to collect every bad row of it).

    Raises:
      FileNotFoundError: no such path.
      ValueError: unknown format, a requested column the source does not have, a line that
        does not parse, or a record that fails validation; naming the file, the row (and
        line), the trajectory_id and the field.
    """
    if chunk_rows < 1:
        raise ValueError(f"chunk_rows must be >= 1, got {chunk_rows}")
    if validate and not conform:
        raise ValueError("validate=True needs conform=True")
    if isinstance(source, (str, os.PathLike)) and is_pack(source):
        # a pack: its own chunks, validated when it was packed (chunk_rows does not apply)
        for c in pack_chunks(source, columns=columns, optional_columns=optional_columns):
            yield Chunk(c.row0, c.table, c.source, c.source_row0, c.arrays)
        return
    row0 = 0
    for part in _parts(source, schema, sample_bytes, block_size):
        sauce, src, wanted = _plan(part, columns, optional_columns)
        local = 0
        for table in _rechunk(part.batches(src, chunk_rows), chunk_rows):
            if sauce:
                table = sauce_to_canonical(table, source=part.name, row0=local)
            if conform:
                table = _schema.conform(table, source=part.name, row0=local)
            if validate:
                _schema.validate(table, source=part.name, row0=local)
            if wanted is not None:
                table = table.select([c for c in wanted if c in table.column_names])
            table = table.combine_chunks()
            yield Chunk(row0, table, part.name, local)
            row0 += table.num_rows
            local += table.num_rows


def read_corpus(
    source: Any,
    *,
    columns: Sequence[str] | None = None,
    optional_columns: Sequence[str] = (),
    chunk_rows: int = 1 << 18,
    validate: bool = True,
    schema: pa.Schema | None = None,
    sample_bytes: int = DEFAULT_SAMPLE,
    block_size: int = DEFAULT_BLOCK,
) -> Iterator[pa.Table]:
    """Read ``source`` as conformed, validated ``pyarrow.Table`` chunks, in input order.

    The tables of ``iter_chunks`` (same arguments): chunk ``k`` of a single file starts at row
    ``k * chunk_rows``; use ``iter_chunks`` for the row numbers of multi-file sources.
    """
    for chunk in iter_chunks(source, columns=columns, optional_columns=optional_columns,
                             chunk_rows=chunk_rows, validate=validate, schema=schema,
                             sample_bytes=sample_bytes, block_size=block_size):
        yield chunk.table


def count_rows(source: Any) -> int | None:
    """Number of records when known without reading the data (Parquet, Arrow IPC files,
    tables, DataFrames, Hugging Face datasets); ``None`` otherwise (JSON Lines, IPC streams,
    LazyFrames)."""
    if isinstance(source, (str, os.PathLike)) and is_pack(source):
        return int(open_pack(source)["rows"])
    if _is_json(source):
        return None
    total = 0
    for part in _parts(source, None, DEFAULT_SAMPLE, DEFAULT_BLOCK):
        n = part.count()
        if n is None:
            return None
        total += n
    return total


def _is_json(source: Any) -> bool:
    """True if ``source`` (a path, folder or list) holds a JSON Lines file (rows unknown)."""
    if isinstance(source, (str, os.PathLike)):
        path = Path(source)
        if path.is_dir():
            return any(_file_format(p) == "json" for p in path.rglob("*")
                       if p.is_file() and is_corpus_file(p))
        return _file_format(path) == "json"
    if isinstance(source, (list, tuple)):
        return any(_is_json(s) for s in source)
    return False
