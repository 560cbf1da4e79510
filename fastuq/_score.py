"""The main job: score a corpus chunk by chunk, one output row per input trajectory."""

from __future__ import annotations

import os
import sys
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import pyarrow as pa

from ._batch import Batch
from ._io import AtomicParquetWriter, count_rows, iter_signal_chunks
from ._registry import ESTIMATORS, get_estimator

__all__ = ["ScoreReport", "available_methods", "iter_scores", "score", "score_file"]


@dataclass
class ScoreReport:
    """What a scoring run did: rows in and out, seconds, protocols, and (on request) the
    scores and labels for summaries."""

    input: str
    output: str
    n_rows: int = 0
    seconds: float = 0.0
    methods: tuple[str, ...] = ("sauce",)
    protocols: dict[str, int] = field(default_factory=dict)
    scores: dict[str, np.ndarray] = field(default_factory=dict, repr=False)
    correct: np.ndarray | None = field(default=None, repr=False)


def available_methods(batch: Batch) -> tuple[str, ...]:
    """Registered estimators whose inputs ``batch`` has, in registry order."""
    return tuple(
        name for name, est in ESTIMATORS.items() if all(batch.has(i) for i in est.inputs)
    )


#: Corpus columns each packed input is built from.
_INPUT_COLUMNS = {
    "agreement": ("agreement",),
    "round_mask": ("agreement",),
    "token_entropy": ("token_entropy",),
    "seq_logprob": ("seq_logprob", "n_agents", "predecessors"),
    "node_mask": ("seq_logprob", "n_agents"),
    "n_tokens": ("n_tokens", "n_agents"),
    "node_entropy": ("node_entropy", "topk_logprobs", "n_agents"),
}


def _columns_for(
    methods: str | Sequence[str], params: Mapping[str, object]
) -> list[str] | None:
    """Columns to read for ``methods`` with ``params`` (``None``: all, for ``"all"``)."""
    if isinstance(methods, str):
        methods = [m.strip() for m in methods.split(",") if m.strip()]
    if "all" in methods:
        return None
    cols = {"question_id"}
    for m in methods:
        for i in get_estimator(m).inputs:
            cols.update(_INPUT_COLUMNS.get(i, (i,)))
    confidence = params.get("confidence")
    if confidence == "mean_logprob":
        cols.update(_INPUT_COLUMNS["n_tokens"])
    elif confidence == "neg_entropy":
        cols.update(_INPUT_COLUMNS["node_entropy"])
    return sorted(cols)


def _resolve_methods(methods: str | Sequence[str], batch: Batch) -> tuple[str, ...]:
    if isinstance(methods, str):
        methods = [m.strip() for m in methods.split(",") if m.strip()]
    if list(methods) == ["all"]:
        found = available_methods(batch)
        if not found:
            raise ValueError(f"{batch.source or 'corpus'}: no estimator has all its inputs")
        return found
    for m in methods:
        est = get_estimator(m)
        missing = [i for i in est.inputs if not batch.has(i)]
        if missing:
            raise ValueError(
                f"{batch.source or 'corpus'}: {m} needs {', '.join(missing)}, which the corpus "
                "lacks" + ("; pass --observation-noise R to run SAUCE on agreement alone"
                           if "token_entropy" in missing else "")
            )
    return tuple(methods)


def iter_scores(
    source: str | os.PathLike,
    *,
    methods: str | Sequence[str] = ("sauce",),
    protocol: str | None = None,
    params: Mapping[str, object] | None = None,
    dtype: str | np.dtype = "float64",
    backend: str = "jax",
    chunk_rows: int = 1 << 18,
    observation_noise: float | None = None,
) -> Iterator[tuple[Batch, dict[str, np.ndarray]]]:
    """Score ``source`` chunk by chunk: yields ``(batch, {method: scores [n]})`` in order.

    ``params`` holds estimator parameters by name (``lam``, ``q``, ...); each estimator takes
    the ones it declares. ``methods`` may be ``"all"``: every estimator whose inputs the
    corpus has.
    """
    if observation_noise is not None and not (
        np.isfinite(observation_noise) and observation_noise >= 0
    ):
        raise ValueError(f"observation noise must be finite and >= 0, got {observation_noise}")
    params = {k: v for k, v in (params or {}).items() if v is not None}
    source_name = Path(source).name
    columns = _columns_for(methods, params)
    row0 = 0
    resolved: tuple[str, ...] | None = None
    for table in iter_signal_chunks(source, chunk_rows, columns):
        batch = Batch(table, source=source_name, row0=row0, dtype=np.dtype(dtype),
                      observation_noise=observation_noise)
        if resolved is None:
            resolved = _resolve_methods(methods, batch)
        scores = {}
        for m in resolved:
            est = get_estimator(m)
            own = {k: v for k, v in params.items() if k in est.params}
            scores[m] = np.asarray(
                est.run(batch, params=own, protocol=protocol, backend=backend), np.float64
            )
        yield batch, scores
        row0 += batch.n


def score(
    source: str | os.PathLike,
    methods: str | Sequence[str] = ("sauce",),
    *,
    protocol: str | None = None,
    dtype: str | np.dtype = "float64",
    backend: str = "jax",
    chunk_rows: int = 1 << 18,
    observation_noise: float | None = None,
    **params: object,
) -> pa.Table:
    """Score a corpus in memory: a table with ``trajectory_id``, one float64 column per
    method (uncertainty; higher = less likely correct), and ``question_id`` and ``correct``
    when the corpus has them. See :func:`score_file` for the arguments; ``params`` are
    estimator parameters (``lam=``, ``q=``, ``confidence=``, ...)."""
    tables = []
    for batch, scores in iter_scores(
        source, methods=methods, protocol=protocol, params=params, dtype=dtype,
        backend=backend, chunk_rows=chunk_rows, observation_noise=observation_noise,
    ):
        cols = {"trajectory_id": batch.ids, **scores}
        for extra in ("question_id", "correct"):
            if extra in batch.table.column_names:
                cols[extra] = batch.column(extra)
        tables.append(pa.table(cols))
    return pa.concat_tables(tables)


def score_file(
    input: str | os.PathLike,
    output: str | os.PathLike,
    *,
    methods: str | Sequence[str] = ("sauce",),
    protocol: str | None = None,
    lam: float | None = None,
    q: float | None = None,
    sigma2_0: float | None = None,
    mu_0: float | None = None,
    dtype: str = "float64",
    backend: str = "jax",
    chunk_rows: int = 1 << 18,
    observation_noise: float | None = None,
    progress: Callable[[int, int | None], None] | None = None,
    keep_scores: bool = False,
) -> ScoreReport:
    """Score every trajectory of a corpus file and write ``trajectory_id`` + one float64
    column per estimator to Parquet, atomically (nothing appears at ``output`` on error).

    Args:
      input: Parquet, JSONL or JSONL.gz corpus.
      output: Parquet file to write.
      methods: estimator names (or ``"all"``).
      protocol: preset for every trajectory; default: each record's ``protocol`` field.
      lam, q, sigma2_0, mu_0: SAUCE parameter overrides.
      dtype: kernel precision, ``"float64"`` (default) or ``"float32"``; output is float64.
      chunk_rows: records per chunk; memory is bounded by the chunk, not the corpus.
      observation_noise: constant R_t for corpora without token entropy (SAUCE on agreement
        alone); without it, a missing token entropy is an error.
      progress: called as ``progress(rows_done, rows_total_or_None)`` after each chunk.
      keep_scores: keep the score arrays (and labels) in the report, for summaries.
    """
    input, output = Path(input), Path(output)
    params = {"lam": lam, "q": q, "sigma2_0": sigma2_0, "mu_0": mu_0}
    total = count_rows(input)
    report = ScoreReport(input=str(input), output=str(output))
    kept: dict[str, list[np.ndarray]] = {}
    kept_correct: list[np.ndarray | None] = []
    start = time.perf_counter()
    writer = None
    try:
        for batch, scores in iter_scores(
            input, methods=methods, protocol=protocol, params=params, dtype=dtype,
            backend=backend, chunk_rows=chunk_rows, observation_noise=observation_noise,
        ):
            if writer is None:
                report.methods = tuple(scores)
                schema = pa.schema([("trajectory_id", pa.string())]
                                   + [(m, pa.float64()) for m in scores])
                writer = AtomicParquetWriter(output, schema)
            writer.write(pa.table({"trajectory_id": batch.ids, **scores}, schema=schema))
            report.n_rows += batch.n
            protos = batch.protocol(protocol)
            if isinstance(protos, str):
                report.protocols[protos] = report.protocols.get(protos, 0) + batch.n
            else:
                for k, v in zip(*np.unique(protos, return_counts=True), strict=True):
                    report.protocols[str(k)] = report.protocols.get(str(k), 0) + int(v)
            if keep_scores:
                for m, s in scores.items():
                    kept.setdefault(m, []).append(s)
                kept_correct.append(batch.correct())
            if progress is not None:
                progress(report.n_rows, total)
        if writer is None:  # an empty corpus still gets its (empty) output file
            schema = pa.schema([("trajectory_id", pa.string())]
                               + [(m, pa.float64()) for m in report.methods])
            writer = AtomicParquetWriter(output, schema)
    except BaseException:
        if writer is not None:
            writer.abort()
        raise
    writer.close()
    report.seconds = time.perf_counter() - start
    if keep_scores:
        report.scores = {m: np.concatenate(v) for m, v in kept.items()}
        if kept_correct and all(c is not None for c in kept_correct):
            report.correct = np.concatenate(kept_correct)
    return report


class ProgressBar:
    """A one-line progress bar on stderr (only drawn when stderr is a terminal or forced)."""

    def __init__(self, enabled: bool | None = None, stream=sys.stderr) -> None:
        self.stream = stream
        self.enabled = stream.isatty() if enabled is None else enabled
        self.start = time.perf_counter()

    def __call__(self, done: int, total: int | None) -> None:
        if not self.enabled:
            return
        rate = done / max(time.perf_counter() - self.start, 1e-9)
        if total:
            bar = "#" * int(30 * done / total)
            line = f"\r[{bar:<30}] {done:,}/{total:,} trajectories {rate:,.0f}/s"
        else:
            line = f"\r{done:,} trajectories {rate:,.0f}/s"
        self.stream.write(line)
        self.stream.flush()

    def close(self) -> None:
        if self.enabled:
            self.stream.write("\n")
            self.stream.flush()
