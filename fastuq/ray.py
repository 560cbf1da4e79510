"""Scoring on a Ray cluster: the single-process engine's chunk scorer mapped over Ray Data.

``pip install 'fastuq[ray]'`` (Ray Data). Three entry points:

* :func:`score_dataset` scores a corpus (files, a folder, a glob, or any ``ray.data.Dataset``)
  on the cluster and returns two datasets: the scores (one row per scored trajectory) and the
  skipped records (``on_error="skip"``: ``source``, ``row``, ``trajectory_id``, ``reason``).
* :func:`score_to_folder` (``fastuq score --engine ray SRC -o OUT_DIR``) writes both as
  Parquet dataset folders, atomically.
* :func:`rank_metrics` computes exact AUROC and AUARC of a scores dataset.

**Same scores, same errors.** Every batch goes through the single-process engine's own steps
(:mod:`fastuq.engine.scoring`: the corpus readers' chunks, ``conform`` and ``validate``, the
vectorized skip checks, ``score_table`` and the estimators' kernels), in an actor that
compiles the JAX kernels once per worker. The files are read by the same reader
(:func:`fastuq.io.readers.iter_chunks`, one read task per file) into the same chunks of
``chunk_rows`` rows, so scores are bit-identical to ``fastuq.score`` / ``score_file`` for
the same dtype and device kind, and every error or skip reason names the same file, row,
trajectory and field. The methods are resolved (``"all"``) and the options checked once, on
the driver, on the corpus's first chunk, as the single-process run does.

**Trajectory ids are checked over the whole dataset** by a distributed pass before scoring:
the ids (only that column is read) are hashed into buckets of about a million ids, grouped by
bucket (a Ray shuffle), and each bucket finds its repeated ids, ordered by (file, row). Only
the repeats come back to the driver (memory: the repeated records, not the corpus); each
record is then scored or skipped exactly as the single-process run would: the first
occurrence is kept, every later one is a bad record ("duplicate id (first at FILE row R)", or
"(first at row R)" within one chunk). With ``on_error="raise"`` a repeat stops the run before
any scoring. Every input row therefore gives exactly one score row or one skip record.

A ``ray.data.Dataset`` that fastuq did not read has no file or row numbers: its records are
named ``ray dataset`` and numbered within the Arrow batch a worker received (the
trajectory_id identifies them), and since it has no row order to keep a first occurrence by,
every occurrence of a repeated id is a bad record. Its pipeline runs twice (the id check, then
scoring; plus its first chunk on the driver): materialize it first if it is costly.

**Which error first.** With ``on_error="raise"`` the run stops at a bad record with the
single-process message for that record; when the corpus has several, the one reported may be
another than the single-process run's first (repeated ids are found first; the chunks are
checked in parallel).

**Order.** Results keep the input order (Ray Data's ``preserve_order``), so AUARC, which
breaks score ties by row order, equals the single-process value.
"""

from __future__ import annotations

import contextlib
import functools
import glob
import json
import math as _math
import os
import secrets
import shutil
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
import pyarrow as pa

if TYPE_CHECKING:
    import ray.data

__all__ = [
    "RayScores",
    "corpus_files",
    "rank_metrics",
    "score_dataset",
    "score_to_folder",
]

# Columns the readers add to each row, dropped before scoring: where it came from.
_FILE = "__fastuq_file"  # int32: index of its file in the corpus's file list
_ROW = "__fastuq_row"  # int64: its row in that file
_CHUNK = "__fastuq_chunk"  # int64: the first row (in that file) of its reader chunk
_PROBLEM = "__fastuq_problem"  # string: why conforming refused it (null: it conformed)
_COLUMNS = "__fastuq_columns"  # dictionary<string>: JSON list of the chunk's own columns
_PROVENANCE = (_FILE, _ROW, _CHUNK, _PROBLEM, _COLUMNS)
_BUCKET = "__fastuq_bucket"
# Columns of the scorer's output that hold a skip record (null on scored rows).
_SKIP_SOURCE, _SKIP_ROW, _SKIP_REASON = ("__fastuq_skip_source", "__fastuq_skip_row",
                                         "__fastuq_skip_reason")
#: The columns of the skipped dataset (as ``score_file``'s skip list).
SKIPPED_SCHEMA = pa.schema([("source", pa.string()), ("row", pa.int64()),
                            ("trajectory_id", pa.string()), ("reason", pa.string())])
#: Corpus columns passed through to the scores when the corpus has them (as ``fastuq.score``).
EXTRAS = ("question_id", "protocol", "correct")
#: How records of a ``ray.data.Dataset`` without fastuq's reader columns are named.
DATASET_SOURCE = "ray dataset"
#: Ids per bucket of the distributed duplicate check.
BUCKET_IDS = 1 << 20
_ROW_BITS = 40  # key = file << 40 | row: files of up to 2**40 rows, 2**23 files


def _ray():
    """The ``ray`` module with Ray Data, or an ImportError that says how to install it."""
    try:
        import ray
        import ray.data  # noqa: F401
    except ImportError as exc:
        raise ImportError("fastuq.ray needs Ray Data: pip install 'fastuq[ray]'") from exc
    return ray


class _Carried(Exception):
    """An exception raised on a worker, carried whole to the driver (Ray Data wraps a
    worker's exception and may change its message; this keeps the original)."""

    def __init__(self, original: BaseException | str) -> None:
        super().__init__(str(original))
        self.original = original


def _original(exc: BaseException) -> BaseException | None:
    """The exception a worker raised, when ``exc`` (from Ray) carries one."""
    stack, seen = [exc], set()
    while stack:
        e = stack.pop()
        if e is None or id(e) in seen:
            continue
        seen.add(id(e))
        if isinstance(e, _Carried) and isinstance(e.original, BaseException):
            return e.original
        stack.extend([getattr(e, "cause", None), e.__cause__, e.__context__])
    return None


@contextlib.contextmanager
def _raising_originals() -> Iterator[None]:
    """Re-raise a worker's own exception (ValueError naming the record, ...) in place of
    Ray's wrapper."""
    try:
        yield
    except Exception as exc:
        original = _original(exc)
        if original is None:
            raise
        raise original from None


@contextlib.contextmanager
def _data_context(progress: bool | None = None) -> Iterator[None]:
    """Ray Data settings for the datasets made inside: input order kept, a worker's
    exception passed on as it is (not wrapped), and (``progress`` not None) Ray Data's
    progress bars on or off."""
    from ray.data import DataContext

    ctx = DataContext.get_current()
    saved = (ctx.execution_options.preserve_order, ctx.raise_original_map_exception,
             ctx.enable_progress_bars)
    ctx.execution_options.preserve_order = True
    ctx.raise_original_map_exception = True
    if progress is not None:
        ctx.enable_progress_bars = progress
    try:
        yield
    finally:
        (ctx.execution_options.preserve_order, ctx.raise_original_map_exception,
         ctx.enable_progress_bars) = saved


# --- the corpus files and their reader -----------------------------------------------------------


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


@dataclass(frozen=True)
class _ReadPlan:
    """What the read tasks read: ``columns`` (``None``: all; else the optional columns of
    ``iter_chunks``, ``trajectory_id`` always), and for what: ``"raise"`` (conformed and
    validated, as ``iter_chunks`` does), ``"skip"`` (conformed, what conforming refused in
    ``__fastuq_problem``) or ``"ids"`` (the conformed ids alone)."""

    columns: tuple[str, ...] | None
    chunk_rows: int
    mode: str


def _read_file(path: str, index: int, plan: _ReadPlan) -> Iterator[pa.Table]:
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
        raise _Carried(exc) from None


def _with_provenance(table: pa.Table, source: str, row0: int, index: int,
                     plan: _ReadPlan) -> pa.Table:
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
    extra = {_FILE: pa.array(np.full(n, index, np.int32)), _ROW: pa.array(rows),
             _CHUNK: pa.array(np.full(n, row0, np.int64))}
    if plan.mode != "ids":
        extra[_COLUMNS] = pa.DictionaryArray.from_arrays(
            pa.array(np.zeros(n, np.int32)), pa.array([json.dumps(table.column_names)]))
        if problem is not None:
            extra[_PROBLEM] = problem
    for name, arr in extra.items():
        table = table.append_column(name, arr)
    return table


def _read(files: list[str], plan: _ReadPlan) -> ray.data.Dataset:
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


def _canonical(table: pa.Table, *, conformed: bool) -> pa.Table:
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


def _foreign_ids(table: pa.Table) -> pa.Table:
    from fastuq.io.schema import Problems, conform

    try:
        table = _canonical(table, conformed=False).select(["trajectory_id"])
        problems = Problems(table, DATASET_SOURCE, first_only=False)
        return conform(table, source=DATASET_SOURCE, problems=problems)
    except Exception as exc:
        raise _Carried(exc) from None


# --- the distributed duplicate check -----------------------------------------------------------


def _add_bucket(table: pa.Table, n_buckets: int) -> pa.Table:
    import polars as pl

    ids = table.column("trajectory_id").combine_chunks()
    h = pl.Series(ids).hash(seed=0).to_numpy()
    return table.append_column(_BUCKET, pa.array((h % np.uint64(n_buckets)).astype(np.int64)))


def _repeats_in_bucket(table: pa.Table) -> pa.Table:
    """The later occurrences of every id repeated in ``table`` (one bucket), each with its
    first occurrence (by file, then row): ``trajectory_id``, file, row, chunk, and the
    first's file, row and chunk."""
    import polars as pl

    df = pl.from_arrow(table.select(["trajectory_id", _FILE, _ROW, _CHUNK]))
    df = df.filter(pl.col("trajectory_id").is_not_null()).sort([_FILE, _ROW])
    first = [pl.col(c).first().over("trajectory_id").alias(f"first{c}")
             for c in (_FILE, _ROW, _CHUNK)]
    df = df.with_columns(*first, pl.len().over("trajectory_id").alias("n"))
    df = df.filter((pl.col("n") > 1) & ~((pl.col(_FILE) == pl.col(f"first{_FILE}"))
                                         & (pl.col(_ROW) == pl.col(f"first{_ROW}"))))
    out = df.drop("n").to_arrow()
    return out.cast(pa.schema([pa.field(f.name, pa.string() if f.name == "trajectory_id"
                                        else f.type) for f in out.schema]))


def _repeated_ids(table: pa.Table) -> pa.Table:
    """Ids repeated in ``table`` (one bucket) and how often: ``trajectory_id``, ``n``."""
    import polars as pl

    df = pl.from_arrow(table.select(["trajectory_id"])).filter(
        pl.col("trajectory_id").is_not_null())
    out = df.group_by("trajectory_id").len().filter(pl.col("len") > 1).to_arrow()
    return pa.table({"trajectory_id": out.column("trajectory_id").cast(pa.string()),
                     "n": out.column("len").cast(pa.int64())})


def _collect(ds: ray.data.Dataset) -> pa.Table | None:
    tables = [t for t in ds.iter_batches(batch_size=None, batch_format="pyarrow")
              if t.num_rows]
    return pa.concat_tables(tables) if tables else None


@dataclass
class _Repeats:
    """What the duplicate check found. For files: ``keys`` (``file << 40 | row``, sorted) of
    every later occurrence and its ``reasons``; for a foreign dataset: the repeated ``ids``
    and their counts."""

    keys: np.ndarray = field(default_factory=lambda: np.zeros(0, np.int64))
    reasons: list[str] = field(default_factory=list)
    ids: pa.Array | None = None
    counts: np.ndarray | None = None
    first_error: str | None = None

    def __len__(self) -> int:
        return len(self.keys) + (0 if self.ids is None else len(self.ids))


def _find_repeats(ids_ds: ray.data.Dataset, n_rows: int, files: list[str] | None
                  ) -> _Repeats:
    """Run the distributed duplicate check over a dataset of ids (with reader columns when
    ``files``)."""
    n_buckets = max(1, _math.ceil(n_rows / BUCKET_IDS))
    per_bucket = _repeats_in_bucket if files is not None else _repeated_ids
    if n_buckets == 1:  # one bucket: checked on the driver (no shuffle to start)
        ids = _collect(ids_ds)
        found = None if ids is None else per_bucket(ids)
        found = None if found is None or not found.num_rows else found
    else:
        keyed = ids_ds.map_batches(_add_bucket, fn_kwargs={"n_buckets": n_buckets},
                                   batch_format="pyarrow", batch_size=None)
        found = _collect(keyed.groupby(_BUCKET, num_partitions=n_buckets).map_groups(
            per_bucket, batch_format="pyarrow"))
    out = _Repeats()
    if found is None:
        return out
    if files is None:
        out.ids = found.column("trajectory_id").combine_chunks()
        out.counts = found.column("n").to_numpy()
        tid = out.ids[0].as_py()
        out.first_error = (f"{DATASET_SOURCE}: field trajectory_id: duplicate id {tid!r} "
                           f"({out.counts[0]} occurrences)")
        return out
    cols = {c: found.column(c).to_numpy() for c in found.column_names if c != "trajectory_id"}
    keys = (cols[_FILE].astype(np.int64) << _ROW_BITS) | cols[_ROW]
    order = np.argsort(keys, kind="stable")
    out.keys = keys[order]
    tids = found.column("trajectory_id").to_pylist()
    for k in order.tolist():
        f, r, c = int(cols[_FILE][k]), int(cols[_ROW][k]), int(cols[_CHUNK][k])
        ff, fr, fc = (int(cols[f"first{x}"][k]) for x in (_FILE, _ROW, _CHUNK))
        if (f, c) == (ff, fc):  # in one chunk: the reader's own check names the row alone
            out.reasons.append(f"duplicate id (first at row {fr})")
        else:
            out.reasons.append(f"duplicate id (first at {files[ff]} row {fr})")
        if out.first_error is None:  # the first in corpus order: the message of a run
            tid = tids[k]
            if (f, c) == (ff, fc):
                out.first_error = (f"{files[f]}: row {r} (trajectory_id {tid!r}): field "
                                   f"trajectory_id: duplicate id (first at row {fr})")
            else:
                out.first_error = (f"{files[f]}: row {r}: field trajectory_id: duplicate id "
                                   f"{tid!r} (first at {files[ff]} row {fr})")
    return out


# --- the scorer (one actor per worker) ---------------------------------------------------------


@dataclass(frozen=True)
class _Config:
    """Everything an actor needs, fixed on the driver."""

    files: tuple[str, ...] | None
    methods: Any
    resolved: tuple[str, ...]
    outputs: tuple[str, ...]
    extras: tuple[str, ...]
    params: Mapping[str, object]
    protocol: str | None
    dtype: str
    backend: str
    observation_noise: float | None
    math: bool
    skip: bool
    num_gpus: float
    cpus: float


def _output_schema(outputs: Sequence[str], extras: Sequence[str]) -> pa.Schema:
    from fastuq.io.schema import CANONICAL

    return pa.schema([("trajectory_id", pa.string())]
                     + [(m, pa.float64()) for m in outputs]
                     + [CANONICAL.field(e) for e in extras]
                     + [(_SKIP_SOURCE, pa.string()), (_SKIP_ROW, pa.int64()),
                        (_SKIP_REASON, pa.string())])


def _check_install() -> None:
    """ImportError unless this worker imports a complete fastuq (Ray puts the driver's
    working directory first on the workers' ``sys.path``, so a driver started in a source
    checkout gives its workers the bare source tree, without the compiled-in
    ``fastuq.kernels``)."""
    import fastuq

    try:
        import fastuq.kernels  # noqa: F401
    except ImportError as exc:
        raise ImportError(
            f"a Ray worker imported fastuq from {os.path.dirname(fastuq.__file__)}, which is "
            f"not an installed fastuq ({exc}); Ray puts the driver's working directory first "
            "on the workers' path: start the driver outside the source checkout") from None


def _check_working_directory() -> None:
    """ImportError when this process's working directory holds a ``fastuq`` package other
    than the one imported here: Ray puts the driver's working directory first on the
    workers' ``sys.path``, so they would import it instead (from a source checkout: the
    bare source tree, which lacks the compiled-in ``fastuq.kernels``)."""
    import fastuq

    here = Path.cwd() / "fastuq"
    mine = Path(fastuq.__file__).resolve().parent
    if (here / "__init__.py").exists() and here.resolve() != mine:
        raise ImportError(
            f"the working directory holds a fastuq package ({here}) other than the installed "
            f"one ({mine}); Ray puts the driver's working directory first on its workers' "
            "path, so they would import it: start the driver from another folder")


def _use_device(backend: str, num_gpus: float, cpus: float) -> None:
    """JAX on this worker: its GPU when it was given one, else the CPU split into one XLA
    device per CPU it was given."""
    if backend != "jax":
        return
    import jax

    if num_gpus:
        if jax.default_backend() != "gpu":
            raise RuntimeError(
                f"this worker was given {num_gpus} GPU(s) but JAX has no GPU backend here "
                f"(it has {jax.default_backend()}): install JAX with CUDA on the workers "
                "(pip install 'jax[cuda12]') or score with num_gpus=0")
        return
    with contextlib.suppress(RuntimeError):  # the backend already exists: keep it
        jax.config.update("jax_platforms", "cpu")
    from fastuq.engine.host import use_cpu_devices

    use_cpu_devices(max(1, int(cpus)), strict=False)


class _ChunkScorer:
    """Scores Arrow batches on one worker (a Ray actor, so that JAX compiles each kernel
    once per worker): each reader chunk in a batch through the single-process engine."""

    def __init__(self, config: _Config, repeats: _Repeats) -> None:
        try:
            _check_install()
            _use_device(config.backend, config.num_gpus, config.cpus)
        except Exception as exc:
            raise _Carried(exc) from None
        self.c = config
        self.repeats = repeats
        self.schema = _output_schema(config.outputs, config.extras)
        self.kw = dict(methods=config.methods, protocol=config.protocol,
                       params=dict(config.params), dtype=config.dtype,
                       observation_noise=config.observation_noise, math=config.math,
                       processes=None, info=None)

    def __call__(self, table: pa.Table) -> pa.Table:
        try:
            out = [self._chunk(*part) for part in self._parts(table)]
        except Exception as exc:
            raise _Carried(exc) from None
        return pa.concat_tables(out) if out else self.schema.empty_table()

    def _parts(self, table: pa.Table) -> Iterator[tuple]:
        """``(table, source, rows, file, problems or None)`` per reader chunk in ``table``."""
        if _FILE not in table.column_names:  # a foreign dataset: the batch is the chunk
            table = _canonical(table, conformed=not self.c.skip)
            yield table, DATASET_SOURCE, np.arange(table.num_rows), -1, None
            return
        file = table.column(_FILE).to_numpy()
        chunk = table.column(_CHUNK).to_numpy()
        cut = np.flatnonzero((file[1:] != file[:-1]) | (chunk[1:] != chunk[:-1])) + 1
        for a, b in zip(np.r_[0, cut].tolist(), np.r_[cut, len(file)].tolist(), strict=True):
            part = table.slice(a, b - a)
            names = json.loads(part.column(_COLUMNS)[0].as_py())
            problem = part.column(_PROBLEM) if _PROBLEM in part.column_names else None
            rows = part.column(_ROW).to_numpy()
            yield (part.select(names).combine_chunks(), self.c.files[int(file[a])], rows,
                   int(file[a]), problem)

    def _marks(self, rows: np.ndarray, file: int) -> Callable:
        """``repeats(problems, ids)`` for :func:`check_chunk`: the later occurrences of ids
        that the duplicate check found."""
        rep = self.repeats

        def mark(problems, ids: pa.Array) -> None:
            if not len(rep):
                return
            if rep.ids is not None:
                import pyarrow.compute as pc

                where = pc.index_in(ids, value_set=rep.ids)
                hit = where.is_valid().to_numpy(zero_copy_only=False)
                pos = where.fill_null(-1).to_numpy(zero_copy_only=False)
                problems.add(hit, "trajectory_id",
                             lambda i: f"duplicate id ({rep.counts[pos[i]]} occurrences in "
                                       "the dataset, which has no row order to keep the "
                                       "first by)")
                return
            keys = (np.int64(file) << _ROW_BITS) | rows.astype(np.int64)
            pos = np.minimum(np.searchsorted(rep.keys, keys), len(rep.keys) - 1)
            hit = rep.keys[pos] == keys
            problems.add(hit, "trajectory_id", lambda i: rep.reasons[pos[i]])

        return mark

    def _chunk(self, table: pa.Table, source: str, rows: np.ndarray, file: int,
               problem: pa.ChunkedArray | None) -> pa.Table:
        from fastuq.engine.checks import check_chunk
        from fastuq.engine.pipeline import score_checked_chunk, score_table
        from fastuq.io.readers import Chunk
        from fastuq.io.schema import Problems

        chunk = Chunk(0, table, source, int(rows[0]) if len(rows) else 0)
        if not self.c.skip:
            if len(self.repeats):  # found on the driver, which raised before any scoring
                raise AssertionError("repeated ids reached the scorer under on_error='raise'")
            batch, _, scores = score_table(table, chunk, rows, self.c.resolved,
                                           backend=self.c.backend, **self.kw)
            return self._scored(batch, scores)
        problems = None
        if problem is not None:
            problems = Problems(table, source, rows=rows, first_only=False)
            reasons = problem.combine_chunks()
            for i in np.flatnonzero(reasons.is_valid().to_numpy(zero_copy_only=False)):
                problems.bad[int(i)] = reasons[int(i)].as_py()
        table, problems, _ = check_chunk(table, source, rows, self._marks(rows, file),
                                         problems)
        skipped: list = []
        done, _ = score_checked_chunk(chunk, table, problems, self.c.resolved, skipped,
                                      backend=self.c.backend, **self.kw)
        out = [] if done is None else [self._scored(*done)]
        if skipped:
            out.append(self._skipped(skipped))
        return pa.concat_tables(out) if out else self.schema.empty_table()

    def _scored(self, batch, scores: Mapping[str, np.ndarray]) -> pa.Table:
        n = batch.n
        cols: dict[str, pa.Array] = {"trajectory_id": batch.ids.cast(pa.string())}
        for m in self.c.outputs:
            cols[m] = pa.array(np.asarray(scores[m], np.float64))
        for e in self.c.extras:
            t = self.schema.field(e).type
            cols[e] = (batch.column(e).cast(t) if e in batch.table.column_names
                       else pa.nulls(n, t))
        for name in (_SKIP_SOURCE, _SKIP_ROW, _SKIP_REASON):
            cols[name] = pa.nulls(n, self.schema.field(name).type)
        return pa.table(cols, schema=self.schema)

    def _skipped(self, skipped: list) -> pa.Table:
        n = len(skipped)
        cols: dict[str, pa.Array] = {
            "trajectory_id": pa.array([k.trajectory_id for k in skipped], pa.string())}
        for name in (*self.c.outputs, *self.c.extras):
            cols[name] = pa.nulls(n, self.schema.field(name).type)
        cols[_SKIP_SOURCE] = pa.array([k.source for k in skipped], pa.string())
        cols[_SKIP_ROW] = pa.array([None if self.c.files is None else k.row
                                    for k in skipped], pa.int64())
        cols[_SKIP_REASON] = pa.array([k.reason for k in skipped], pa.string())
        return pa.table(cols, schema=self.schema)


def _scored_rows(table: pa.Table, columns: Sequence[str]) -> pa.Table:
    import pyarrow.compute as pc

    return table.filter(pc.is_null(table.column(_SKIP_REASON))).select(list(columns))


def _skipped_rows(table: pa.Table) -> pa.Table:
    import pyarrow.compute as pc

    t = table.filter(pc.is_valid(table.column(_SKIP_REASON)))
    return pa.table({"source": t.column(_SKIP_SOURCE), "row": t.column(_SKIP_ROW),
                     "trajectory_id": t.column("trajectory_id"),
                     "reason": t.column(_SKIP_REASON)}, schema=SKIPPED_SCHEMA)


# --- the driver ----------------------------------------------------------------------------


@dataclass
class RayScores:
    """What :func:`score_dataset` returns.

    scores: ``trajectory_id``, one float64 column per estimator output (uncertainty; higher
      = less likely correct) and ``question_id`` / ``protocol`` / ``correct`` when the corpus
      has them; one row per scored record, in input order (a ``ray.data.Dataset`` over the
      materialized results: reading it again does not score again).
    skipped: ``source``, ``row``, ``trajectory_id``, ``reason`` per skipped record
      (``on_error="skip"``; empty otherwise).
    methods: the estimators run; outputs: the score columns.
    left_out: with ``methods="all"``, the estimators left out and why.
    n_rows, n_skipped: rows scored and skipped (together: every input row).
    seconds: wall time; stages: seconds of each step (``resolve``: options and methods on
      the first chunk, ``ids``: the duplicate check, ``score``: reading and scoring,
      ``split``: separating scores from skip records).
    """

    scores: ray.data.Dataset
    skipped: ray.data.Dataset
    methods: tuple[str, ...]
    outputs: tuple[str, ...]
    left_out: dict[str, str]
    n_rows: int
    n_skipped: int
    seconds: float
    stages: dict[str, float] = field(default_factory=dict)


def _first_chunks(source, files: list[str] | None, columns: list[str] | None,
                  chunk_rows: int, skip: bool) -> Iterator:
    """The corpus's chunks in order, read on the driver (only the first is usually needed)."""
    from fastuq.io.readers import Chunk, iter_chunks

    if files is not None:
        kw: dict[str, Any] = {"chunk_rows": chunk_rows, "validate": not skip,
                              "conform": not skip}
        if columns is not None:
            kw.update(columns=[], optional_columns=columns)
        yield from iter_chunks(files, **kw)
        return
    row0 = 0
    for table in source.iter_batches(batch_size=chunk_rows, batch_format="pyarrow"):
        table = _canonical(table, conformed=not skip)
        yield Chunk(row0, table, DATASET_SOURCE, 0)
        row0 += table.num_rows


def _resolve_first(chunks: Iterator, methods, params: dict, *, skip: bool,
                   observation_noise: float | None, kw: dict
                   ) -> tuple[tuple[str, ...] | None, dict[str, str], tuple[str, ...]]:
    """The methods, as the single-process run resolves them on its first chunk (the first
    with a row left, under skip), with its option checks; and the extras of that chunk."""
    from fastuq.engine.checks import SeenIds, structural_problems
    from fastuq.engine.methods import resolve_once
    from fastuq.engine.pipeline import make_batch, skip_bad_rows

    info: dict = {}
    seen = SeenIds()
    try:
        for chunk in chunks:
            if skip:
                chunk, table, problems = structural_problems(chunk, seen)
                _, _, resolved = skip_bad_rows(chunk, table, problems, None, [], info=info,
                                               **kw)
            else:
                table = chunk.table
                rows = np.arange(chunk.source_row0, chunk.source_row0 + table.num_rows)
                batch = make_batch(table, chunk, rows, dtype=kw["dtype"],
                                   observation_noise=observation_noise, math=kw["math"],
                                   processes=None)
                resolved = resolve_once(None, methods, batch, params, observation_noise,
                                        info, kw["protocol"])
            if resolved is not None:
                extras = tuple(e for e in EXTRAS if e in table.column_names)
                return resolved, info.get("left_out", {}), extras
    finally:
        seen.close()
    return None, {}, ()


def _batch_size(num_gpus: float, chunk_rows: int) -> int | None:
    """Rows per batch: a GPU actor must be given a batch size (its batches may then join
    the blocks of several files); CPU actors take whole reader blocks."""
    return chunk_rows if num_gpus else None


def _pool(num_gpus: float | None, actors: int | None, cpus: float) -> tuple[float, int]:
    """GPUs per actor (``None``: one when the cluster has GPUs) and the most actors."""
    import ray

    have = ray.cluster_resources()
    gpus = float(have.get("GPU", 0))
    if num_gpus is None:
        num_gpus = 1.0 if gpus else 0.0
    if num_gpus < 0 or cpus <= 0:
        raise ValueError(f"num_gpus must be >= 0 and cpus_per_actor > 0, got {num_gpus} "
                         f"and {cpus}")
    if num_gpus and not gpus:
        raise ValueError(f"num_gpus={num_gpus} per actor, but the cluster has no GPU")
    if actors is None:
        actors = int(gpus // num_gpus) if num_gpus else int(have.get("CPU", 1) // cpus)
    if actors < 1:
        raise ValueError(f"actors must be >= 1, got {actors}")
    return float(num_gpus), int(actors)


def score_dataset(
    source,
    methods: str | Sequence[str] = ("sauce",),
    *,
    protocol: str | None = None,
    dtype: str = "float64",
    backend: str = "jax",
    chunk_rows: int = 1 << 18,
    observation_noise: float | None = None,
    on_error: str = "raise",
    math: bool = False,
    check: str = "corpus",
    num_gpus: float | None = None,
    actors: int | None = None,
    cpus_per_actor: float = 1.0,
    **params: object,
) -> RayScores:
    """Score a corpus on the Ray cluster this process is connected to (``ray.init()`` first,
    or ``RAY_ADDRESS``; without either, a local Ray instance is started).

    Args:
      source: corpus files: a file, a folder, a glob pattern or a list of them (read by
        :func:`fastuq.io.readers.iter_chunks`, one Ray read task per file, so the chunks,
        row numbers and messages are the single-process run's); or a ``ray.data.Dataset``
        (see the module docstring for what it is named by).
      methods, protocol, dtype, backend, observation_noise, math, check, params: as
        :func:`fastuq.score` (``params``: estimator parameters such as ``lam=``; an unknown
        name is a TypeError, one no method takes a ValueError).
      chunk_rows: records per chunk (as the single-process run; a chunk is what one worker
        scores at once, and what its memory is bounded by).
      on_error: ``"raise"``: the first bad record found stops the run (a ValueError naming
        the file, row, trajectory and field). ``"skip"``: bad records become rows of the
        skipped dataset, with the single-process run's reasons.
      num_gpus: GPUs per actor (default: one when the cluster has GPUs, else none); JAX
        with CUDA must be installed on the GPU workers.
      actors: the most scoring actors (default: one per GPU, or one per ``cpus_per_actor``
        CPUs of the cluster).
      cpus_per_actor: CPUs each actor reserves (and splits its XLA CPU backend into).

    Returns:
      :class:`RayScores`.
    """
    from fastuq.engine.checks import check_reading_options
    from fastuq.engine.methods import corpus_columns, method_list
    from fastuq.engine.registry import check_params, get_estimator
    from fastuq.io.readers import count_rows

    ray = _ray()
    start = time.perf_counter()
    _check_working_directory()
    check_reading_options(on_error, [], observation_noise, check)
    if chunk_rows < 1:
        raise ValueError(f"chunk_rows must be >= 1, got {chunk_rows}")
    names = method_list(methods)
    params = {k: v for k, v in params.items() if v is not None}
    check_params(params, None if names == ["all"] else names)
    skip = on_error == "skip"
    foreign = isinstance(source, ray.data.Dataset)
    files = None if foreign else corpus_files(source)
    columns = corpus_columns(methods, params, None if foreign else files, check)
    if not ray.is_initialized():
        ray.init()
    num_gpus, n_actors = _pool(num_gpus, actors, cpus_per_actor)
    kw = dict(methods=methods, protocol=protocol, params=params, dtype=dtype,
              observation_noise=observation_noise, math=math, processes=None)
    with _data_context(), _raising_originals():
        if foreign and columns is not None:  # read only what the methods and checks need
            from fastuq.io.sauce_release import is_sauce, sauce_source_columns

            have = source.columns()
            wanted = ["trajectory_id", *columns]
            source = source.select_columns(
                sauce_source_columns(wanted, have) if is_sauce(have)
                else [c for c in have if c in set(wanted)])
        with contextlib.closing(_first_chunks(source, files, columns, chunk_rows,
                                              skip)) as chunks:
            resolved, left_out, extras = _resolve_first(
                chunks, methods, params, skip=skip, observation_noise=observation_noise,
                kw=kw)
        if resolved is None:  # no record has a row left: nothing to score
            resolved = tuple(m for m in names if m != "all")
        outputs = tuple(o for m in resolved for o in get_estimator(m).outputs)
        stages = {"resolve": time.perf_counter() - start}
        if foreign:
            n_rows = None
            ids = source.map_batches(_foreign_ids, batch_format="pyarrow", batch_size=None)
        else:
            n_rows = count_rows(files)  # from the Parquet / Arrow metadata; None for JSON
            ids = _read(files, _ReadPlan(None, chunk_rows, "ids"))
        if n_rows is None:  # count the ids: kept in the object store for the check
            ids = ids.materialize()
            n_rows = ids.count()
        repeats = _find_repeats(ids, n_rows, files)
        stages["ids"] = time.perf_counter() - start - sum(stages.values())
        if len(repeats) and not skip:
            from fastuq.errors import RecordError

            raise RecordError(repeats.first_error)
        data = source if foreign else _read(
            files, _ReadPlan(None if columns is None else tuple(columns), chunk_rows,
                             "skip" if skip else "raise"))
        config = _Config(files=None if foreign else tuple(files), methods=methods,
                         resolved=tuple(resolved), outputs=outputs, extras=extras,
                         params=params, protocol=protocol, dtype=str(np.dtype(dtype)),
                         backend=backend, observation_noise=observation_noise, math=math,
                         skip=skip, num_gpus=num_gpus, cpus=cpus_per_actor)
        combined = data.map_batches(
            _ChunkScorer, fn_constructor_kwargs={"config": config, "repeats": repeats},
            batch_format="pyarrow",
            batch_size=_batch_size(num_gpus, chunk_rows),
            compute=ray.data.ActorPoolStrategy(min_size=1, max_size=n_actors),
            num_cpus=cpus_per_actor, num_gpus=num_gpus or None,
        ).materialize()
        stages["score"] = time.perf_counter() - start - sum(stages.values())
        keep = ("trajectory_id", *outputs, *extras)
        scores = combined.map_batches(_scored_rows, fn_kwargs={"columns": keep},
                                      batch_format="pyarrow", batch_size=None)
        skipped = combined.map_batches(_skipped_rows, batch_format="pyarrow",
                                       batch_size=None).materialize()
        n_skipped = skipped.count()
        n_total = combined.count()
        stages["split"] = time.perf_counter() - start - sum(stages.values())
    return RayScores(scores=scores, skipped=skipped, methods=tuple(resolved), outputs=outputs,
                     left_out=left_out, n_rows=n_total - n_skipped, n_skipped=n_skipped,
                     seconds=time.perf_counter() - start, stages=stages)


# --- writing folders ---------------------------------------------------------------------------


def _check_folder(path: Path, flag: str, inputs: Sequence[str], roots: Sequence[Path]) -> None:
    """Refuse, before any work, an output folder that is or holds an input, lies inside an
    input folder, or exists with anything but Parquet files in it (a previous output, which
    is replaced)."""
    from fastuq.io.writers import OutputError, check_outputs

    real = Path(os.path.realpath(path))
    for root in roots:
        r = Path(os.path.realpath(root))
        if real == r or real.is_relative_to(r) or r.is_relative_to(real):
            raise OutputError(path, f"{flag} would be, hold or lie in the input {root}")
    for f in inputs:
        if Path(os.path.realpath(f)).is_relative_to(real):
            raise OutputError(path, f"{flag} holds the input {f}; write it elsewhere")
    if real.exists():
        if not real.is_dir():
            raise OutputError(path, "a file is in the way (a folder is written here)")
        other = [p.name for p in real.iterdir()
                 if not (p.is_file() and p.name.endswith(".parquet"))]
        if other:
            raise OutputError(path, f"it exists and holds more than Parquet files "
                                    f"({', '.join(sorted(other)[:3])}): not replaced")
    check_outputs(inputs, [(flag, path, "dir")])


def _temporary_folder(path: Path) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    for _ in range(100):
        tmp = path.parent / f".{path.name}.{secrets.token_hex(4)}.tmp"
        try:
            tmp.mkdir()
        except FileExistsError:
            continue
        return tmp
    raise FileExistsError(f"{path.parent}: no free temporary name for {path.name}")


def _publish_folder(tmp: Path, path: Path) -> None:
    """Move the finished folder ``tmp`` to ``path`` (a previous output there is moved aside
    first, then removed)."""
    old = None
    if path.exists():
        old = path.parent / f".{path.name}.{secrets.token_hex(4)}.old"
        os.rename(path, old)
    try:
        os.rename(tmp, path)
    except BaseException:
        if old is not None:
            os.rename(old, path)
        raise
    if old is not None:
        shutil.rmtree(old, ignore_errors=True)


def _write_folder(ds: ray.data.Dataset, path: Path, schema: pa.Schema, n: int) -> None:
    """Write ``ds`` as a Parquet dataset folder at ``path``, atomically: into a temporary
    sibling folder, renamed into place when complete (removed on any error). An empty
    dataset is one empty file with the schema."""
    import pyarrow.parquet as pq

    tmp = _temporary_folder(path)
    try:
        if n:
            ds.write_parquet(str(tmp))
        else:
            pq.write_table(schema.empty_table(), tmp / "part-00000.parquet")
        _publish_folder(tmp, path)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise


@dataclass
class FolderReport:
    """What :func:`score_to_folder` did."""

    input: str
    output: str
    n_rows: int
    n_skipped: int
    seconds: float
    methods: tuple[str, ...]
    left_out: dict[str, str]
    skipped_path: str | None
    first_reasons: list[str]
    result: RayScores = field(repr=False)


def score_to_folder(
    source,
    output: str | os.PathLike,
    *,
    skipped_path: str | os.PathLike | None = None,
    max_skip_fraction: float | None = None,
    on_error: str = "raise",
    progress: bool | None = None,
    **kwargs: Any,
) -> FolderReport:
    """:func:`score_dataset` of the corpus files ``source`` written as Parquet dataset
    folders: ``output`` gets ``trajectory_id`` + one float64 column per estimator output
    (as ``score_file``'s file), and with ``on_error="skip"`` the skipped records go to
    ``skipped_path`` (default: ``OUTPUT.skipped``, beside it). Each folder is written to a
    temporary sibling and renamed into place when complete: a failed run leaves neither.
    A run that skips every record, or more than ``max_skip_fraction`` of them, raises
    :class:`~fastuq.errors.TooManySkipped` after writing the skipped folder, and
    writes no scores. The workers write the files, so on a cluster both folders must be on
    a file system every node mounts at the same path. ``progress``: Ray Data's progress bars
    on or off (default: Ray's setting). ``kwargs``: those of :func:`score_dataset`.

    Raises:
      OutputError: (a ValueError, before any work) an output folder is, holds or lies in an
        input, or exists holding anything but Parquet files.
    """
    from fastuq.engine.checks import check_skip_options
    from fastuq.errors import TooManySkipped

    start = time.perf_counter()
    check_skip_options(on_error, skipped_path, max_skip_fraction)
    output = Path(output)
    side = None
    if on_error == "skip":
        side = Path(skipped_path) if skipped_path else output.with_name(
            output.name + ".skipped")
    files = corpus_files(source)
    given = source if isinstance(source, (list, tuple)) else [source]
    roots = [Path(s) for s in given if Path(s).is_dir()]
    _check_folder(output, "output", files, roots)
    if side is not None:
        if os.path.realpath(side) == os.path.realpath(output):
            raise ValueError(f"the skipped folder and the output are one folder: {output}")
        _check_folder(side, "skipped_path", files, roots)
    _ray()
    with _data_context(progress), _raising_originals():
        res = score_dataset(files, on_error=on_error, **kwargs)
        n_in = res.n_rows + res.n_skipped
        too_many = None
        if side is not None and res.n_skipped:
            if not res.n_rows:
                too_many = f"every record ({n_in:,}) was skipped"
            elif max_skip_fraction is not None and res.n_skipped > max_skip_fraction * n_in:
                too_many = (f"{res.n_skipped:,} of {n_in:,} records "
                            f"({res.n_skipped / n_in:.2%}) were skipped, more than "
                            f"max_skip_fraction = {max_skip_fraction}")
        first = []
        if side is not None:
            _write_folder(res.skipped, side, SKIPPED_SCHEMA, res.n_skipped)
            first = [r["reason"] for r in res.skipped.take(5)] if res.n_skipped else []
        if too_many is not None:
            raise TooManySkipped(f"{too_many}; no scores written; the skipped records and "
                                 f"their reasons are in {side}")
        columns = ["trajectory_id", *res.outputs]
        schema = pa.schema([("trajectory_id", pa.string())]
                           + [(m, pa.float64()) for m in res.outputs])
        _write_folder(res.scores.select_columns(columns), output, schema, res.n_rows)
    return FolderReport(input=str(source), output=str(output), n_rows=res.n_rows,
                        n_skipped=res.n_skipped, seconds=time.perf_counter() - start,
                        methods=res.methods,
                        left_out=res.left_out, skipped_path=None if side is None else str(side),
                        first_reasons=first, result=res)


# --- metrics -------------------------------------------------------------------------------


def rank_metrics(
    scores: ray.data.Dataset,
    methods: Sequence[str] | None = None,
    *,
    label: str = "correct",
) -> dict[str, dict[str, float]]:
    """Exact AUROC and AUARC of each score column of a scores dataset (as
    :func:`fastuq.metrics.auroc` / :func:`~fastuq.metrics.auarc` on the same rows in the
    same order): ``{method: {"auroc": a, "auarc": b}}``.

    The two columns each metric needs are gathered on the driver in the dataset's order
    (AUARC breaks score ties by row order): memory 8 bytes per row per score column plus 1
    per row for the label, and the ranking's sort of one column at a time (about 24 bytes
    per row more): about 3.3 GB for 1e8 rows and one method.

    Raises:
      ValueError: a label or score column missing, or a null label.
    """
    from fastuq.metrics import auarc, auroc

    names = scores.columns()
    if label not in names:
        raise ValueError(f"no label column {label!r} in the scores (columns: "
                         f"{', '.join(names)})")
    if methods is None:
        methods = [c for c in names if c != "trajectory_id" and c not in EXTRAS]
    missing = [m for m in methods if m not in names]
    if missing:
        raise ValueError(f"no score column {missing[0]!r} (columns: {', '.join(names)})")
    n = scores.count()
    y = np.empty(n, bool)
    x = {m: np.empty(n, np.float64) for m in methods}
    at = 0
    for t in scores.select_columns([label, *methods]).iter_batches(
            batch_size=1 << 20, batch_format="pyarrow"):
        k = t.num_rows
        lab = t.column(label)
        if lab.null_count:
            raise ValueError(f"{lab.null_count} null label(s) in {label!r}")
        y[at:at + k] = lab.to_numpy()
        for m in methods:
            x[m][at:at + k] = t.column(m).to_numpy()
        at += k
    if at != n:
        raise RuntimeError(f"gathered {at} rows of {n}")
    return {m: {"auroc": float(auroc(y, x[m])), "auarc": float(auarc(y, x[m]))}
            for m in methods}
