"""The Ray runner's entry points on the driver: :func:`score_dataset` (the pipeline: options
and methods resolved on the first chunk, the id check, the actor pool mapped over the
corpus, scores and skip records split), its result :class:`RayScores`, and
:func:`rank_metrics` (exact AUROC and AUARC of a scores dataset).
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import numpy as np

from fastuq.ray.corpus import (
    ReadPlan,
    canonical,
    corpus_files,
    foreign_ids,
    pack_path,
    read_corpus,
    read_pack,
)
from fastuq.ray.repeats import Repeats, find_repeats
from fastuq.ray.scorer import (
    ChunkScorer,
    ScorerConfig,
    check_working_directory,
    scored_rows,
    skipped_rows,
)
from fastuq.ray.shared import DATASET_SOURCE, data_context, import_ray, raising_originals

if TYPE_CHECKING:
    import ray.data

#: Corpus columns passed through to the scores when the corpus has them (as ``fastuq.score``).
EXTRAS = ("question_id", "protocol", "correct")


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


def _first_chunks(source, files: list[str] | str | None, columns: list[str] | None,
                  chunk_rows: int, skip: bool) -> Iterator:
    """The corpus's chunks in order, read on the driver (only the first is usually needed);
    ``files``: the corpus files, or a pack's folder (read in its own chunks)."""
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
        table = canonical(table, conformed=not skip)
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
        row numbers and messages are the single-process run's); a pack (``fastuq pack``,
        given alone: one task per chunk file, which the scoring actor memory-maps, in the
        chunks it was packed in, ``chunk_rows`` aside; its ids were checked unique when it
        was packed, so no id pass runs); or a ``ray.data.Dataset`` (see the module
        docstring for what it is named by).
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

    ray = import_ray()
    start = time.perf_counter()
    check_working_directory()
    check_reading_options(on_error, [], observation_noise, check)
    if chunk_rows < 1:
        raise ValueError(f"chunk_rows must be >= 1, got {chunk_rows}")
    names = method_list(methods)
    params = {k: v for k, v in params.items() if v is not None}
    check_params(params, None if names == ["all"] else names)
    skip = on_error == "skip"
    foreign = isinstance(source, ray.data.Dataset)
    pack = None if foreign else pack_path(source)
    manifest = None
    if pack is not None:  # its manifest checked against its files once, here
        from fastuq.io.packfile import open_pack

        manifest = open_pack(pack)
        files = None
    else:
        files = None if foreign else corpus_files(source)
    columns = corpus_columns(methods, params, str(pack) if pack is not None
                             else None if foreign else files, check)
    if not ray.is_initialized():
        ray.init()
    num_gpus, n_actors = _pool(num_gpus, actors, cpus_per_actor)
    kw = dict(methods=methods, protocol=protocol, params=params, dtype=dtype,
              observation_noise=observation_noise, math=math, processes=None)
    with data_context(), raising_originals():
        if foreign and columns is not None:  # read only what the methods and checks need
            from fastuq.io.sauce_release import is_sauce, sauce_source_columns

            have = source.columns()
            wanted = ["trajectory_id", *columns]
            source = source.select_columns(
                sauce_source_columns(wanted, have) if is_sauce(have)
                else [c for c in have if c in set(wanted)])
        with contextlib.closing(_first_chunks(source, files if pack is None else str(pack),
                                              columns, chunk_rows, skip)) as chunks:
            resolved, left_out, extras = _resolve_first(
                chunks, methods, params, skip=skip, observation_noise=observation_noise,
                kw=kw)
        if resolved is None:  # no record has a row left: nothing to score
            resolved = tuple(m for m in names if m != "all")
        outputs = tuple(o for m in resolved for o in get_estimator(m).outputs)
        stages = {"resolve": time.perf_counter() - start}
        if pack is not None:  # its ids were checked unique across the corpus when packed
            repeats = Repeats()
        else:
            if foreign:
                n_rows = None
                ids = source.map_batches(foreign_ids, batch_format="pyarrow",
                                         batch_size=None)
            else:
                n_rows = count_rows(files)  # from the Parquet / Arrow metadata; None: JSON
                ids = read_corpus(files, ReadPlan(None, chunk_rows, "ids"))
            if n_rows is None:  # count the ids: kept in the object store for the check
                ids = ids.materialize()
                n_rows = ids.count()
            repeats = find_repeats(ids, n_rows, files)
        stages["ids"] = time.perf_counter() - start - sum(stages.values())
        if len(repeats) and not skip:
            from fastuq.errors import RecordError

            raise RecordError(repeats.first_error)
        if pack is not None:  # one item per chunk file, memory-mapped by the actor
            data = read_pack(len(manifest["chunks"]))
        else:
            data = source if foreign else read_corpus(
                files, ReadPlan(None if columns is None else tuple(columns), chunk_rows,
                                "skip" if skip else "raise"))
        config = ScorerConfig(files=None if files is None else tuple(files), methods=methods,
                         resolved=tuple(resolved), outputs=outputs, extras=extras,
                         params=params, protocol=protocol, dtype=str(np.dtype(dtype)),
                         backend=backend, observation_noise=observation_noise, math=math,
                         skip=skip, num_gpus=num_gpus, cpus=cpus_per_actor,
                         pack=None if pack is None else str(pack), manifest=manifest,
                         columns=None if columns is None else tuple(columns), check=check)
        combined = data.map_batches(
            ChunkScorer, fn_constructor_kwargs={"config": config, "repeats": repeats},
            batch_format="pyarrow",
            batch_size=1 if pack is not None else _batch_size(num_gpus, chunk_rows),
            compute=ray.data.ActorPoolStrategy(min_size=1, max_size=n_actors),
            num_cpus=cpus_per_actor, num_gpus=num_gpus or None,
        ).materialize()
        stages["score"] = time.perf_counter() - start - sum(stages.values())
        keep = ("trajectory_id", *outputs, *extras)
        scores = combined.map_batches(scored_rows, fn_kwargs={"columns": keep},
                                      batch_format="pyarrow", batch_size=None)
        skipped = combined.map_batches(skipped_rows, batch_format="pyarrow",
                                       batch_size=None).materialize()
        n_skipped = skipped.count()
        n_total = combined.count()
        stages["split"] = time.perf_counter() - start - sum(stages.values())
    return RayScores(scores=scores, skipped=skipped, methods=tuple(resolved), outputs=outputs,
                     left_out=left_out, n_rows=n_total - n_skipped, n_skipped=n_skipped,
                     seconds=time.perf_counter() - start, stages=stages)


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
