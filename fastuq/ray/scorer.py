"""The Ray runner's scoring actor: what runs on the workers.

:class:`ChunkScorer` (one Ray actor per worker, so that JAX compiles each kernel once per
worker) scores each reader chunk of a batch (or, for a pack, each chunk file, which it
memory-maps) through the single-process engine
(:mod:`fastuq.engine.scoring`), with everything it needs fixed on the driver in a
:class:`ScorerConfig`; it puts JAX on the worker's GPU or splits its CPUs into XLA devices,
and refuses a worker that imports fastuq from a bare source tree. Its output holds the
score rows and the skip records together; :func:`scored_rows` and :func:`skipped_rows`
split them. :func:`check_working_directory` refuses, on the driver, a working directory
whose ``fastuq`` the workers would import.
"""

from __future__ import annotations

import contextlib
import json
import os
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa

from fastuq.ray.corpus import canonical
from fastuq.ray.repeats import ROW_BITS, Repeats
from fastuq.ray.shared import (
    CHUNK,
    COLUMNS,
    DATASET_SOURCE,
    FILE,
    PACK_CHUNK,
    PROBLEM,
    ROW,
    SKIPPED_SCHEMA,
    Carried,
)

# Columns of the scorer's output that hold a skip record (null on scored rows).
_SKIP_SOURCE, _SKIP_ROW, _SKIP_REASON = ("__fastuq_skip_source", "__fastuq_skip_row",
                                         "__fastuq_skip_reason")


@dataclass(frozen=True)
class ScorerConfig:
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
    #: a pack (``fastuq pack``): its folder, its manifest (read once, on the driver), the
    #: columns to read of each chunk (``None``: all) and the ``check`` mode
    pack: str | None = None
    manifest: Mapping | None = None
    columns: tuple[str, ...] | None = None
    check: str = "corpus"


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


def check_working_directory() -> None:
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


class ChunkScorer:
    """Scores Arrow batches on one worker (a Ray actor, so that JAX compiles each kernel
    once per worker): each reader chunk in a batch through the single-process engine."""

    def __init__(self, config: ScorerConfig, repeats: Repeats) -> None:
        try:
            _check_install()
            _use_device(config.backend, config.num_gpus, config.cpus)
        except Exception as exc:
            raise Carried(exc) from None
        self.c = config
        self.repeats = repeats
        self.schema = _output_schema(config.outputs, config.extras)
        self.kw = dict(methods=config.methods, protocol=config.protocol,
                       params=dict(config.params), dtype=config.dtype,
                       observation_noise=config.observation_noise, math=config.math,
                       processes=None, info=None)

    def __call__(self, table: pa.Table) -> pa.Table:
        try:
            if PACK_CHUNK in table.column_names:  # a pack: one chunk file per item
                out = [self._pack_chunk(int(k)) for k in
                       table.column(PACK_CHUNK).to_numpy(zero_copy_only=False)]
            else:
                out = [self._chunk(*part) for part in self._parts(table)]
        except Exception as exc:
            raise Carried(exc) from None
        return pa.concat_tables(out) if out else self.schema.empty_table()

    def _parts(self, table: pa.Table) -> Iterator[tuple]:
        """``(table, source, rows, file, problems or None)`` per reader chunk in ``table``."""
        if FILE not in table.column_names:  # a foreign dataset: the batch is the chunk
            table = canonical(table, conformed=not self.c.skip)
            yield table, DATASET_SOURCE, np.arange(table.num_rows), -1, None
            return
        file = table.column(FILE).to_numpy()
        chunk = table.column(CHUNK).to_numpy()
        cut = np.flatnonzero((file[1:] != file[:-1]) | (chunk[1:] != chunk[:-1])) + 1
        for a, b in zip(np.r_[0, cut].tolist(), np.r_[cut, len(file)].tolist(), strict=True):
            part = table.slice(a, b - a)
            names = json.loads(part.column(COLUMNS)[0].as_py())
            problem = part.column(PROBLEM) if PROBLEM in part.column_names else None
            rows = part.column(ROW).to_numpy()
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
            keys = (np.int64(file) << ROW_BITS) | rows.astype(np.int64)
            pos = np.minimum(np.searchsorted(rep.keys, keys), len(rep.keys) - 1)
            hit = rep.keys[pos] == keys
            problems.add(hit, "trajectory_id", lambda i: rep.reasons[pos[i]])

        return mark

    def _chunk(self, table: pa.Table, source: str, rows: np.ndarray, file: int,
               problem: pa.ChunkedArray | None) -> pa.Table:
        from fastuq.engine.checks import check_chunk
        from fastuq.engine.pipeline import score_table
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
        return self._score_checked(chunk, table, problems)

    def _pack_chunk(self, index: int) -> pa.Table:
        """Chunk ``index`` of the pack, memory-mapped from its file on this worker, scored
        as the single-process run scores a pack's chunk (its stored inputs; under skip,
        the same checks; its ids were checked unique across the corpus when it was
        packed)."""
        from fastuq.engine.checks import check_chunk, with_value_problems
        from fastuq.engine.pipeline import score_table
        from fastuq.io.packfile import read_pack_chunk
        from fastuq.io.readers import Chunk

        kw: dict[str, Any] = {}
        if self.c.columns is not None:
            kw.update(columns=[], optional_columns=list(self.c.columns))
        c = read_pack_chunk(self.c.pack, self.c.manifest, index, **kw)
        chunk = Chunk(c.row0, c.table, c.source, c.source_row0, c.arrays)
        table = c.table
        rows = np.arange(c.source_row0, c.source_row0 + table.num_rows)
        if not self.c.skip:
            batch, _, scores = score_table(table, chunk, rows, self.c.resolved,
                                           backend=self.c.backend, **self.kw)
            return self._scored(batch, scores)
        table, problems, _ = check_chunk(table, chunk.source, rows, lambda problems, ids: None)
        with_value_problems((chunk, table, problems), self.c.check == "corpus")
        return self._score_checked(chunk, table, problems)

    def _score_checked(self, chunk, table: pa.Table, problems) -> pa.Table:
        """A checked chunk under skip: its scored rows and its skip records, one table
        (the schema's empty table when neither)."""
        from fastuq.engine.pipeline import score_checked_chunk

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
        rows = self.c.files is not None or self.c.pack is not None
        cols[_SKIP_ROW] = pa.array([k.row if rows else None for k in skipped], pa.int64())
        cols[_SKIP_REASON] = pa.array([k.reason for k in skipped], pa.string())
        return pa.table(cols, schema=self.schema)


def scored_rows(table: pa.Table, columns: Sequence[str]) -> pa.Table:
    """The score rows of a :class:`ChunkScorer` output (no skip reason), ``columns`` only."""
    import pyarrow.compute as pc

    return table.filter(pc.is_null(table.column(_SKIP_REASON))).select(list(columns))


def skipped_rows(table: pa.Table) -> pa.Table:
    """The skip records of a :class:`ChunkScorer` output, in :data:`SKIPPED_SCHEMA`."""
    import pyarrow.compute as pc

    t = table.filter(pc.is_valid(table.column(_SKIP_REASON)))
    return pa.table({"source": t.column(_SKIP_SOURCE), "row": t.column(_SKIP_ROW),
                     "trajectory_id": t.column("trajectory_id"),
                     "reason": t.column(_SKIP_REASON)}, schema=SKIPPED_SCHEMA)


