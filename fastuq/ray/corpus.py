"""Reading a corpus for the Ray runner: its files as the single-process readers name and
read them, with the provenance columns added.

* :func:`corpus_files` lists a source's corpus files (a file, folder, glob or list);
  :func:`pack_path` recognizes a pack (``fastuq pack``) given alone, whose work items
  :func:`read_pack` makes: one per chunk file, which the scoring actor memory-maps itself;
* :func:`read_corpus` makes them a Ray Dataset, one read task per file, each reading the
  file's chunks with :func:`fastuq.io.readers.iter_chunks` and adding the columns of
  :mod:`fastuq.ray.shared` (file, row, chunk, conforming's refusals, the chunk's columns)
  that the :class:`ReadPlan` asks for;
* :func:`canonical` and :func:`foreign_ids` map the batches of a ``ray.data.Dataset`` that
  fastuq did not read to canonical columns (and its conformed ids).
"""

from __future__ import annotations

import functools
import glob
import json
import os
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
import pyarrow as pa

from fastuq.ray.shared import (
    CHUNK,
    COLUMNS,
    DATASET_SOURCE,
    FILE,
    PACK_CHUNK,
    PROBLEM,
    ROW,
    Carried,
)

if TYPE_CHECKING:
    import ray.data


def corpus_files(source: str | os.PathLike | Sequence[str | os.PathLike]) -> list[str]:
    """The corpus files of ``source``, named and ordered as the single-process readers name
    and read them: a file; a folder (its corpus files, recursively, in sorted path order,
    hidden files and skip lists left out); a glob pattern (its matches in sorted order,
    folders expanded, files of no corpus format and skip lists left out); or a list of these
    (in list order).

    Raises:
      FileNotFoundError: no such file, or a pattern that matches nothing.
      ValueError: a folder or pattern with no corpus file.
    """
    from fastuq.io.readers import folder_files, is_corpus_file

    if isinstance(source, (list, tuple)):
        return [f for s in source for f in corpus_files(s)]
    path = Path(source)
    if path.is_dir():
        return [str(f) for f in folder_files(path)]
    if path.exists():
        return [str(path)]
    if glob.has_magic(os.fspath(source)):
        matches = sorted(glob.glob(os.fspath(source), recursive=True))
        if not matches:
            raise FileNotFoundError(f"{source}: no file matches")
        files = [f for m in matches for f in (
            corpus_files(m) if Path(m).is_dir() else [m] if is_corpus_file(Path(m)) else [])]
        if not files:
            raise ValueError(f"{source}: no corpus files (Parquet, Arrow IPC, JSON Lines)")
        return files
    raise FileNotFoundError(f"{path}: no such file")


def pack_path(source: Any) -> Path | None:
    """The pack folder when ``source`` is a pack (``fastuq pack``) given alone, as a path
    (or a :class:`fastuq.engine.packed.Pack`); ``None`` otherwise. A pack inside a list or
    a glob is refused by :func:`corpus_files`."""
    from fastuq.io.packfile import is_pack

    if isinstance(source, (str, os.PathLike)) and is_pack(source):
        return Path(source)
    return None


def read_pack(n_chunks: int) -> ray.data.Dataset:
    """A pack's work items as a Ray Dataset: one block per chunk file, holding the one row
    ``{PACK_CHUNK: index}``, in order. The scoring actor memory-maps the chunk file itself
    (on a cluster, from the file system every node mounts): the chunk's columns and packed
    arrays never pass through the object store."""
    import ray.data

    blocks = [pa.table({PACK_CHUNK: pa.array([k], pa.int64())}) for k in range(n_chunks)]
    return ray.data.from_arrow(blocks) if blocks else ray.data.from_arrow(
        pa.table({PACK_CHUNK: pa.array([], pa.int64())}))


@dataclass(frozen=True)
class ReadPlan:
    """What the read tasks read: ``columns`` (``None``: all; else the optional columns of
    ``iter_chunks``, ``trajectory_id`` always), and for what: ``"raise"`` (conformed and
    validated, as ``iter_chunks`` does), ``"skip"`` (conformed, what conforming refused in
    ``__fastuq_problem``) or ``"ids"`` (the conformed ids alone)."""

    columns: tuple[str, ...] | None
    chunk_rows: int
    mode: str


def _read_file(path: str, index: int, plan: ReadPlan) -> Iterator[pa.Table]:
    """One file's chunks, as ``iter_chunks`` makes them, with the reader columns added."""
    from fastuq.io.readers import iter_chunks

    try:
        kw: dict[str, Any] = {"chunk_rows": plan.chunk_rows,
                              "validate": plan.mode == "raise", "conform": plan.mode == "raise"}
        if plan.mode == "ids":
            kw["columns"] = []
        elif plan.columns is not None:
            kw.update(columns=[], optional_columns=list(plan.columns))
        for chunk in iter_chunks(path, **kw):
            yield _with_provenance(chunk.table, chunk.source, chunk.source_row0, index, plan)
    except Exception as exc:
        raise Carried(exc) from None


def _with_provenance(table: pa.Table, source: str, row0: int, index: int,
                     plan: ReadPlan) -> pa.Table:
    from fastuq.io.schema import Problems, conform

    n = table.num_rows
    rows = np.arange(row0, row0 + n, dtype=np.int64)
    problem = None
    if plan.mode in ("skip", "ids"):
        problems = Problems(table, source, rows=rows, first_only=False)
        if plan.mode == "ids":
            table = table.select(["trajectory_id"])
        table = conform(table, source=source, problems=problems)
        if plan.mode == "skip":
            reasons: list[str | None] = [None] * n
            for i, text in problems.bad.items():
                reasons[i] = text
            problem = pa.array(reasons, pa.string())
    extra = {FILE: pa.array(np.full(n, index, np.int32)), ROW: pa.array(rows),
             CHUNK: pa.array(np.full(n, row0, np.int64))}
    if plan.mode != "ids":
        extra[COLUMNS] = pa.DictionaryArray.from_arrays(
            pa.array(np.zeros(n, np.int32)), pa.array([json.dumps(table.column_names)]))
        if problem is not None:
            extra[PROBLEM] = problem
    for name, arr in extra.items():
        table = table.append_column(name, arr)
    return table


def read_corpus(files: list[str], plan: ReadPlan) -> ray.data.Dataset:
    """The files as a Ray Dataset: one read task per file (fused with the map after it)."""
    import ray.data
    from ray.data.block import BlockMetadata
    from ray.data.datasource import Datasource, ReadTask

    class FastuqCorpus(Datasource):
        def get_name(self) -> str:
            return "FastuqCorpus"

        def estimate_inmemory_data_size(self) -> int | None:
            return None

        def get_read_tasks(self, parallelism: int, per_task_row_limit: int | None = None,
                           data_context=None) -> list[ReadTask]:
            return [ReadTask(functools.partial(_read_file, f, k, plan),
                             BlockMetadata(num_rows=None, size_bytes=None, input_files=[f],
                                           exec_stats=None))
                    for k, f in enumerate(files)]

    # one block stream per file: Ray would otherwise split the reads' blocks
    return ray.data.read_datasource(FastuqCorpus(), override_num_blocks=len(files))


# --- a Ray Dataset fastuq did not read ---------------------------------------------------------


def canonical(table: pa.Table, *, conformed: bool) -> pa.Table:
    """A batch of a foreign dataset in canonical columns: the SAUCE release mapped as the
    readers map it, and (``conformed``) conformed and validated, raising at a bad record."""
    from fastuq.io import schema as _schema
    from fastuq.io.sauce_release import is_sauce, sauce_to_canonical

    if is_sauce(table.column_names):
        table = sauce_to_canonical(table, source=DATASET_SOURCE, row0=0)
    if conformed:
        table = _schema.conform(table, source=DATASET_SOURCE, row0=0)
        _schema.validate(table, source=DATASET_SOURCE, row0=0)
    return table.combine_chunks()


def foreign_ids(table: pa.Table) -> pa.Table:
    """The conformed ``trajectory_id`` column of a foreign dataset's batch (what conforming
    refuses left null, for the id check)."""
    from fastuq.io.schema import Problems, conform

    try:
        table = canonical(table, conformed=False).select(["trajectory_id"])
        problems = Problems(table, DATASET_SOURCE, first_only=False)
        return conform(table, source=DATASET_SOURCE, problems=problems)
    except Exception as exc:
        raise Carried(exc) from None


