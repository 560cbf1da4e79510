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
import pyarrow.compute as pc

from ._batch import Batch
from ._errors import RecordError
from ._io import AtomicParquetWriter
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
    protocol: np.ndarray | None = field(default=None, repr=False)
    skipped: list = field(default_factory=list, repr=False)
    skipped_path: str | None = None


def available_methods(batch: Batch) -> tuple[str, ...]:
    """Registered estimators whose inputs ``batch`` has, in registry order."""
    return tuple(
        name for name, est in ESTIMATORS.items() if all(batch.has(i) for i in est.inputs)
    )


#: Corpus columns each packed input is built from: the column itself, else the ones it is
#: derived from (agreement from parsed answers, token entropy from top-k log-probabilities).
_INPUT_COLUMNS = {
    "agreement": ("agreement", "n_agents"),  # n_agents: vote counts, so ties stay ties
    "round_mask": ("agreement",),
    "token_entropy": ("token_entropy",),
    "seq_logprob": ("seq_logprob", "n_agents", "predecessors"),
    "node_mask": ("seq_logprob", "n_agents"),
    "n_tokens": ("n_tokens", "n_agents"),
    "node_entropy": ("node_entropy", "topk_logprobs", "n_agents"),
}
_FALLBACKS = {
    "agreement": ("answers", "n_agents"),
    "token_entropy": ("topk_logprobs",),
    "node_entropy": ("topk_logprobs", "n_agents"),
}
#: Columns read whenever the corpus has them.
_ALWAYS = ("question_id", "protocol", "correct")


def _method_list(methods: str | Sequence[str]) -> list[str]:
    if isinstance(methods, str):
        return [m.strip() for m in methods.split(",") if m.strip()]
    return list(methods)


def _available_columns(source) -> set[str] | None:
    """Column names the source has (``None``: unknown), to choose between a column and the
    columns it can be derived from. Files are probed by reading their first record; frames
    and readers are asked for their schema, so a one-shot reader is never consumed."""
    if isinstance(source, (str, os.PathLike, list, tuple)):
        from .readers import iter_chunks

        try:
            first = next(iter_chunks(source, chunk_rows=1, validate=False), None)
        except (ValueError, OSError):
            return None
        if first is None:
            return None
        return {c for c in first.table.column_names if first.table.column(c).null_count == 0}
    if hasattr(source, "collect_schema"):
        names = set(source.collect_schema().names())  # polars DataFrame / LazyFrame
    elif isinstance(getattr(source, "schema", None), pa.Schema):
        names = set(source.schema.names)  # pyarrow Table / RecordBatch / RecordBatchReader
    elif hasattr(source, "column_names"):
        names = set(source.column_names)  # Hugging Face Dataset
    else:
        return None
    if "signals" in names:  # the SAUCE release: the readers lift agreement/token_entropy
        names |= {"agreement", "token_entropy"}
    return names


def _columns_for(
    methods: str | Sequence[str], params: Mapping[str, object], source=None
) -> list[str] | None:
    """Columns to read for ``methods`` with ``params`` (``None``: all, for ``"all"``)."""
    methods = _method_list(methods)
    if "all" in methods:
        return None
    cols = set(_ALWAYS)
    have = None
    for m in methods:
        for i in get_estimator(m).inputs:
            cols.update(_INPUT_COLUMNS.get(i, (i,)))
            primary = _INPUT_COLUMNS.get(i, (i,))[0]
            if i in _FALLBACKS:
                if have is None:
                    have = _available_columns(source) if source is not None else set()
                if have is not None and primary not in have:
                    cols.update(_FALLBACKS[i])
    confidence = params.get("confidence")
    if confidence == "mean_logprob":
        cols.update(_INPUT_COLUMNS["n_tokens"])
    elif confidence == "neg_entropy":
        cols.update(_INPUT_COLUMNS["node_entropy"])
    return sorted(cols)


def _resolve_methods(methods: str | Sequence[str], batch: Batch) -> tuple[str, ...]:
    methods = _method_list(methods)
    if methods == ["all"]:
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


class _SeenIds:
    """Trajectory ids seen so far, as one sorted array of 64-bit hashes (8 bytes an id, so a
    10-million-trajectory corpus costs 80 MB): finds an id that repeats an earlier chunk's.
    Two different ids share a hash with probability about N**2 / 2**65 (3e-6 at N = 1e7);
    such a pair would be reported as a duplicate."""

    def __init__(self) -> None:
        self._seen = np.empty(0, np.uint64)
        self._pending: np.ndarray | None = None  # sorted hashes of the last chunk checked

    def first_repeat(self, ids: pa.Array) -> int | None:
        """Index in ``ids`` of the first id seen in an earlier chunk, or ``None``. The
        chunk's ids are not recorded until :meth:`add` (which reuses this call's hashes)."""
        h = self._hash(ids)
        order = np.argsort(h)
        self._pending = h[order]
        if not len(self._seen) or not len(ids):
            return None
        pos = np.searchsorted(self._seen, self._pending)  # sorted queries: cache-friendly
        hit = self._seen[np.minimum(pos, len(self._seen) - 1)] == self._pending
        return int(order[hit].min()) if hit.any() else None

    def add(self, ids: pa.Array) -> None:
        """Record ``ids`` (the chunk last passed to :meth:`first_repeat`)."""
        new = self._pending
        if new is None or len(new) != len(ids):
            new = np.sort(self._hash(ids))
        self._pending = None
        merged = np.concatenate([self._seen, new])
        self._seen = np.sort(merged, kind="stable")  # two sorted runs: a linear merge

    @staticmethod
    def _hash(ids: pa.Array) -> np.ndarray:
        import polars as pl

        return pl.Series(ids).hash(seed=0).to_numpy()


def _prefetch(iterator: Iterator, depth: int = 1) -> Iterator:
    """Items of ``iterator``, produced by a background thread up to ``depth`` items ahead.

    Reading and decoding (Arrow, Parquet, JSON: C++ that releases the GIL) of the next chunk
    then overlaps with packing and scoring of the current one, on the other core. Memory grows
    by ``depth`` chunks. An exception in the producer is raised here, in order.
    """
    import queue
    import threading

    items: queue.Queue = queue.Queue(maxsize=depth)
    done = object()
    stop = threading.Event()

    def produce() -> None:
        try:
            for item in iterator:
                while not stop.is_set():
                    try:
                        items.put(("item", item), timeout=0.1)
                        break
                    except queue.Full:
                        continue
                if stop.is_set():
                    return
            items.put(("end", done))
        except BaseException as exc:  # handed to the consumer
            items.put(("error", exc))

    thread = threading.Thread(target=produce, name="fastuq-prefetch", daemon=True)
    thread.start()
    try:
        while True:
            kind, value = items.get()
            if kind == "item":
                yield value
            elif kind == "error":
                raise value
            else:
                return
    finally:
        stop.set()
        while thread.is_alive():  # unblock a producer waiting on a full queue
            try:
                items.get_nowait()
            except queue.Empty:
                pass
            thread.join(timeout=0.05)


@dataclass
class Skipped:
    """A record left out under ``on_error="skip"``: where it was and why."""

    source: str
    row: int
    trajectory_id: str | None
    reason: str


def _score_table(
    table: pa.Table, chunk, rows: np.ndarray, resolved: tuple[str, ...] | None, *,
    methods, protocol, params, dtype, backend, observation_noise, check: bool,
    seen: _SeenIds | None, math: bool = False, processes: int | None = None,
) -> tuple[Batch, tuple[str, ...], dict[str, np.ndarray]]:
    if check:
        from .schema import validate

        validate(table, source=chunk.source, row0=chunk.source_row0)
    if seen is not None:
        k = seen.first_repeat(table.column("trajectory_id").combine_chunks())
        if k is not None:
            tid = table.column("trajectory_id")[k].as_py()
            raise RecordError(f"{chunk.source}: row {int(rows[k])}: field trajectory_id: "
                              f"duplicate id {tid!r} (first seen in an earlier chunk)", row=k)
    batch = Batch(table, source=chunk.source, row0=chunk.source_row0, rows=rows,
                  dtype=np.dtype(dtype), observation_noise=observation_noise, math=math,
                  processes=processes)
    if resolved is None:
        resolved = _resolve_methods(methods, batch)
    scores = {}
    for m in resolved:
        est = get_estimator(m)
        own = {k: v for k, v in params.items() if k in est.params}
        scores[m] = np.asarray(
            est.run(batch, params=own, protocol=protocol, backend=backend), np.float64
        )
    return batch, resolved, scores


def iter_scores(
    source,
    *,
    methods: str | Sequence[str] = ("sauce",),
    protocol: str | None = None,
    params: Mapping[str, object] | None = None,
    dtype: str | np.dtype = "float64",
    backend: str = "jax",
    chunk_rows: int = 1 << 18,
    observation_noise: float | None = None,
    on_error: str = "raise",
    skipped: list[Skipped] | None = None,
    math: bool = False,
    processes: int | None = None,
) -> Iterator[tuple[Batch, dict[str, np.ndarray]]]:
    """Score ``source`` chunk by chunk: yields ``(batch, {method: scores [n]})`` in order.

    Args:
      source: anything :func:`fastuq.readers.iter_chunks` reads (a file, a folder, a list
        of files, a pyarrow Table, a Polars frame, a Hugging Face dataset).
      methods: estimator names, or ``"all"``: every estimator whose inputs the corpus has.
      params: estimator parameters by name (``lam``, ``q``, ``confidence``, ...); each
        estimator takes the ones it declares.
      on_error: ``"raise"`` (default): the first bad record stops the run with a ValueError
        naming the source, row, trajectory and field. ``"skip"``: bad records are left out
        and appended to ``skipped`` (a caller-owned list) with their reason; every other
        record is scored. Lines that are not valid JSON still stop the run.
      math, processes: when agreement is built from parsed answers, also count answers that
        math-verify proves equivalent as one vote (checked once per distinct pair that meets
        in a round, over ``processes`` workers).
    """
    from .readers import iter_chunks

    if on_error not in ("raise", "skip"):
        raise ValueError(f"on_error must be 'raise' or 'skip', got {on_error!r}")
    if on_error == "skip" and skipped is None:
        raise ValueError("on_error='skip' needs a list to collect the skipped records")
    if observation_noise is not None and not (
        np.isfinite(observation_noise) and observation_noise >= 0
    ):
        raise ValueError(f"observation noise must be finite and >= 0, got {observation_noise}")
    params = {k: v for k, v in (params or {}).items() if v is not None}
    columns = _columns_for(methods, params, source)
    if columns is None:
        reader = iter_chunks(source, chunk_rows=chunk_rows, validate=on_error == "raise")
    else:
        reader = iter_chunks(source, columns=[], optional_columns=columns,
                             chunk_rows=chunk_rows, validate=on_error == "raise")
    resolved: tuple[str, ...] | None = None
    seen = _SeenIds()
    kw = dict(methods=methods, protocol=protocol, params=params, dtype=dtype, backend=backend,
              observation_noise=observation_noise, seen=seen, math=math, processes=processes)
    for chunk in _prefetch(reader):
        table = chunk.table
        rows = np.arange(chunk.source_row0, chunk.source_row0 + table.num_rows)
        if on_error == "raise":
            batch, resolved, scores = _score_table(table, chunk, rows, resolved, check=False,
                                                   **kw)
            seen.add(batch.ids)
            yield batch, scores
            continue
        while table.num_rows:
            try:
                batch, resolved, scores = _score_table(table, chunk, rows, resolved,
                                                       check=True, **kw)
            except RecordError as exc:
                if exc.row is None:
                    raise
                tid = table.column("trajectory_id")[exc.row].as_py()
                skipped.append(Skipped(chunk.source, int(rows[exc.row]),
                                       None if tid is None else str(tid), str(exc)))
                keep = np.ones(table.num_rows, bool)
                keep[exc.row] = False
                table = table.filter(pa.array(keep))
                rows = rows[keep]
                continue
            seen.add(batch.ids)
            yield batch, scores
            break


def score(
    source,
    methods: str | Sequence[str] = ("sauce",),
    *,
    protocol: str | None = None,
    dtype: str | np.dtype = "float64",
    backend: str = "jax",
    chunk_rows: int = 1 << 18,
    observation_noise: float | None = None,
    math: bool = False,
    **params: object,
) -> pa.Table:
    """Score a corpus in memory: a table with ``trajectory_id``, one float64 column per
    method (uncertainty; higher = less likely correct), and ``question_id``, ``protocol`` and
    ``correct`` when the corpus has them. See :func:`score_file` for the arguments; ``params`` are
    estimator parameters (``lam=``, ``q=``, ``confidence=``, ...)."""
    tables = []
    for batch, scores in iter_scores(
        source, methods=methods, protocol=protocol, params=params, dtype=dtype,
        backend=backend, chunk_rows=chunk_rows, observation_noise=observation_noise,
        math=math,
    ):
        cols = {"trajectory_id": batch.ids, **scores}
        for extra in ("question_id", "protocol", "correct"):
            if extra in batch.table.column_names:
                cols[extra] = batch.column(extra)
        tables.append(pa.table(cols))
    return pa.concat_tables(tables)


def score_file(
    input,
    output: str | os.PathLike,
    *,
    methods: str | Sequence[str] = ("sauce",),
    protocol: str | None = None,
    lam: float | None = None,
    q: float | None = None,
    sigma2_0: float | None = None,
    mu_0: float | None = None,
    confidence: str | None = None,
    dtype: str = "float64",
    backend: str = "jax",
    chunk_rows: int = 1 << 18,
    observation_noise: float | None = None,
    on_error: str = "raise",
    skipped_path: str | os.PathLike | None = None,
    math: bool = False,
    processes: int | None = None,
    progress: Callable[[int, int | None], None] | None = None,
    keep_scores: bool = False,
) -> ScoreReport:
    """Score every trajectory of a corpus and write ``trajectory_id`` + one float64 column
    per estimator to Parquet, in input order, atomically (nothing appears at ``output`` on
    error). Memory is bounded by the chunk, not the corpus.

    Args:
      input: a corpus file (Parquet, Arrow IPC, JSONL, JSONL.gz), a folder or list of them,
        or an in-memory frame (see :func:`fastuq.readers.iter_chunks`).
      output: Parquet file to write.
      methods: estimator names (or ``"all"``).
      protocol: preset for every trajectory; default: each record's ``protocol`` field.
      lam, q, sigma2_0, mu_0: SAUCE parameter overrides; confidence: UMAS node confidence
        (``msp``, ``mean_logprob``, ``neg_entropy``).
      dtype: kernel precision, ``"float64"`` (default) or ``"float32"``; output is float64.
      chunk_rows: records per chunk.
      observation_noise: constant R_t for corpora without token entropy (SAUCE on agreement
        alone); without it, a missing token entropy is an error.
      on_error: ``"raise"`` or ``"skip"`` (see :func:`iter_scores`). With ``"skip"`` the
        skipped records are written, one JSON object per line with ``source``, ``row``,
        ``trajectory_id`` and ``reason``, to ``skipped_path`` (default:
        ``OUTPUT.skipped.jsonl``), and counted in the report.
      math, processes: see :func:`iter_scores`.
      progress: called as ``progress(rows_done, rows_total_or_None)`` after each chunk.
      keep_scores: keep the score arrays (and labels) in the report, for summaries.
    """
    import json

    from .readers import count_rows

    output = Path(output)
    params = {"lam": lam, "q": q, "sigma2_0": sigma2_0, "mu_0": mu_0, "confidence": confidence}
    total = count_rows(input)
    report = ScoreReport(input=str(input), output=str(output))
    kept: dict[str, list[np.ndarray]] = {}
    kept_correct: list[np.ndarray | None] = []
    kept_protocol: list[np.ndarray] = []
    skipped: list[Skipped] = []
    start = time.perf_counter()
    writer = None
    done = 0
    try:
        for batch, scores in iter_scores(
            input, methods=methods, protocol=protocol, params=params, dtype=dtype,
            backend=backend, chunk_rows=chunk_rows, observation_noise=observation_noise,
            on_error=on_error, skipped=skipped, math=math, processes=processes,
        ):
            if writer is None:
                report.methods = tuple(scores)
                schema = pa.schema([("trajectory_id", pa.string())]
                                   + [(m, pa.float64()) for m in scores])
                writer = AtomicParquetWriter(output, schema)
            writer.write(pa.table({"trajectory_id": batch.ids.cast(pa.string()), **scores},
                                  schema=schema))
            report.n_rows += batch.n
            protos = batch.protocol(protocol) if (protocol or batch.has("protocol")) else None
            if isinstance(protos, str):
                report.protocols[protos] = report.protocols.get(protos, 0) + batch.n
            elif protos is not None:
                for item in pc.value_counts(protos).to_pylist():
                    name = str(item["values"])
                    report.protocols[name] = report.protocols.get(name, 0) + item["counts"]
            if keep_scores:
                for m, s in scores.items():
                    kept.setdefault(m, []).append(s)
                kept_correct.append(batch.correct())
                if protos is not None:
                    kept_protocol.append(np.full(batch.n, protos, object)
                                         if isinstance(protos, str)
                                         else protos.to_numpy(zero_copy_only=False))
            done = report.n_rows + len(skipped)
            if progress is not None:
                progress(done, total)
        if writer is None:  # no record scored: still write the (empty) output
            names = [m for m in _method_list(methods) if m != "all"]
            report.methods = tuple(names)
            schema = pa.schema([("trajectory_id", pa.string())]
                               + [(m, pa.float64()) for m in names])
            writer = AtomicParquetWriter(output, schema)
    except BaseException:
        if writer is not None:
            writer.abort()
        raise
    if on_error == "skip":
        side = Path(skipped_path) if skipped_path else output.with_name(
            output.name + ".skipped.jsonl")
        lines = "".join(json.dumps(vars(k)) + "\n" for k in skipped)
        tmp = side.with_name(f".{side.name}.tmp")
        tmp.write_text(lines)
        os.replace(tmp, side)
        report.skipped_path = str(side)
    writer.close()
    report.skipped = skipped
    report.seconds = time.perf_counter() - start
    if keep_scores:
        report.scores = {m: np.concatenate(v) for m, v in kept.items()}
        if kept_correct and all(c is not None for c in kept_correct):
            report.correct = np.concatenate(kept_correct)
        if kept_protocol and sum(map(len, kept_protocol)) == report.n_rows:
            report.protocol = np.concatenate(kept_protocol)
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
