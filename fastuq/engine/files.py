"""The file-to-file job: score a corpus into a Parquet file (:func:`score_file`).

The options checked and the outputs guarded before anything is read, the scores written
chunk by chunk on a background writer, atomically (:func:`_score_writer`), the skip list of
``on_error="skip"`` written beside them (:func:`_skip_lines`), the run's
:class:`ScoreReport`, and the :class:`ProgressBar` the CLI draws. The scores themselves come
from :func:`fastuq.engine.pipeline.iter_scores`.
"""

from __future__ import annotations

import os
import sys
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from fastuq.engine.checks import Skipped, check_mode, check_skip_options
from fastuq.engine.methods import method_list
from fastuq.engine.pipeline import iter_scores
from fastuq.errors import TooManySkipped
from fastuq.io.writers import (
    AtomicParquetWriter,
    BackgroundWriter,
    atomic_write_text,
    check_outputs,
)

__all__ = ["ProgressBar", "ScoreReport", "score_file"]


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
    left_out: dict[str, str] = field(default_factory=dict)


def _score_file(
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
    dtype: str | None = None,
    backend: str = "jax",
    chunk_rows: int = 1 << 18,
    observation_noise: float | None = None,
    on_error: str = "raise",
    skipped_path: str | os.PathLike | None = None,
    math: bool = False,
    processes: int | None = None,
    progress: Callable[[int, int | None], None] | None = None,
    keep_scores: bool = False,
    max_skip_fraction: float | None = None,
    check: str = "corpus",
    params: Mapping[str, object] | None = None,
    pack: str = "auto",
    calibration=None,
    stack=None,
    per_round: bool = False,
) -> ScoreReport:
    """Score every trajectory of a corpus and write ``trajectory_id`` + one float64 column
    per estimator to Parquet, in input order, atomically (nothing appears at ``output`` on
    error). Memory is bounded by the chunk, not the corpus.

    Args:
      input: a corpus file (Parquet, Arrow IPC, JSONL, JSONL.gz), a folder or list of them,
        or an in-memory frame (see :func:`fastuq.io.readers.iter_chunks`).
      output: Parquet file to write.
      methods: estimator names (or ``"all"``).
      protocol: preset for every trajectory; default: each record's ``protocol`` field.
      lam, q, sigma2_0, mu_0: SAUCE parameter overrides; confidence: UMAS node confidence
        (``msp``, ``mean_logprob``, ``neg_entropy``).
      dtype: kernel precision, ``"float64"`` or ``"float32"``; default (``None``): float32
        when the kernels run on a GPU, float64 otherwise. Output is float64.
      chunk_rows: records per chunk.
      observation_noise: constant R_t for corpora without token entropy (SAUCE on agreement
        alone); without it, a missing token entropy is an error.
      on_error: ``"raise"`` or ``"skip"`` (see :func:`iter_scores`). With ``"skip"`` the
        skipped records are written, one JSON object per line with ``source``, ``row``,
        ``trajectory_id`` and ``reason``, to ``skipped_path`` (default:
        ``OUTPUT.skipped.jsonl``), and counted in the report. A run that skips every
        record, or more than ``max_skip_fraction`` of them, raises
        :class:`~fastuq.errors.TooManySkipped` (a ValueError) after writing the skip list,
        and writes no scores.
      math, processes: see :func:`iter_scores`.
      progress: called as ``progress(rows_done, rows_total_or_None)`` after each chunk.
      keep_scores: keep the score arrays (and labels) in the report, for summaries.
      max_skip_fraction: with ``on_error="skip"``, the largest fraction of the records that
        may be skipped (default: any but all).
      check: which columns every record is checked against (see :func:`iter_scores`).
      params: parameters of any registered estimator by name (as
        :func:`~fastuq.engine.scoring.score`'s keywords; a name also given by its own
        keyword above is a ValueError).
      pack: where the per-round inputs are packed and checked (``"auto"``, ``"host"``,
        ``"device"``; see :func:`iter_scores`).
      calibration: a fitted :class:`fastuq.decisions.Calibrator` (anything with its
        ``estimators`` and ``predict_proba(scores, protocols, ids=...)``): its
        ``p_correct_<estimator>`` columns (float64 in [0, 1]) are written after the scores,
        each trajectory through its protocol's map (a protocol it has no map for is a
        ValueError). Checking that the scores are made as the calibration's were is the
        caller's (:meth:`~fastuq.decisions.Calibrator.check_scoring`).
      per_round: also write ``<score>_per_round`` (``list<double>``) for every estimator
        whose score is defined after each round: per trajectory, the score of the trajectory
        cut after each executed round (masked rounds dropped), the last element the score
        bit for bit, computed in the scan that computes the score (see :func:`iter_scores`).
      stack: a fitted :class:`fastuq.evaluation.stack.Stack` (anything with its
        ``estimators`` and ``predict(scores, protocols, ids=...)``), with ``"stack"`` among
        ``methods``: the stack's input estimators are scored first (with ``params``: checking
        that they are the stack's is the caller's, :meth:`~fastuq.evaluation.stack.Stack.
        check_scoring`), then its ``stack`` column is written after the other scores. The
        inputs' own columns are written only when ``methods`` names them.

    Raises:
      OutputError: (a ValueError) ``output`` or the skip list would replace an input (also
        through a symlink, or inside an input folder whose files would be read), they name
        the same file, a name contradicts its format, or the destination cannot be written;
        found before anything is read.
    """

    from fastuq.io.readers import count_rows

    check_skip_options(on_error, skipped_path, max_skip_fraction)
    check_mode(check)
    output = Path(output)
    side = None
    if on_error == "skip":
        side = Path(skipped_path) if skipped_path else output.with_name(
            output.name + ".skipped.jsonl")
    paths = input if isinstance(input, (list, tuple)) else [input]
    check_outputs([p for p in paths if isinstance(p, (str, os.PathLike))],
                  [("output", output, "parquet"), ("skipped_path", side, "jsonl")])
    named = {"lam": lam, "q": q, "sigma2_0": sigma2_0, "mu_0": mu_0, "confidence": confidence}
    both = sorted(k for k, v in named.items() if v is not None and k in (params or {}))
    if both:
        raise ValueError(f"parameter {both[0]!r} is given twice (by its keyword and in params)")
    params = {**{k: v for k, v in named.items() if v is not None}, **(params or {})}
    methods, dropped = _with_stack(methods, stack)
    total = count_rows(input)
    report = ScoreReport(input=str(input), output=str(output))
    kept: dict[str, list[np.ndarray]] = {}
    kept_correct: list[np.ndarray | None] = []
    kept_protocol: list[np.ndarray] = []
    skipped: list[Skipped] = []
    info: dict = {}
    start = time.perf_counter()
    writer = None
    done = 0
    try:
        for batch, scores in iter_scores(
            input, methods=methods, protocol=protocol, params=params, dtype=dtype,
            backend=backend, chunk_rows=chunk_rows, observation_noise=observation_noise,
            on_error=on_error, skipped=skipped, math=math, processes=processes, info=info,
            check=check, batch_columns=("protocol", "correct"), pack=pack,
            per_round=per_round,
        ):
            protos = batch.protocol(protocol) if (protocol or batch.has("protocol")) else None
            if calibration is not None:
                flat = {k: v for k, v in scores.items() if isinstance(v, np.ndarray)}
                scores = {**scores, **calibration.predict_proba(flat, protos, ids=batch.ids)}
            if stack is not None:
                flat = {k: v for k, v in scores.items() if isinstance(v, np.ndarray)}
                combined = stack.predict(flat, protos, ids=batch.ids)
                scores = {**{k: v for k, v in scores.items()
                             if k not in dropped and k.removesuffix("_per_round") not in dropped},
                          **combined}
            if writer is None:
                report.methods = tuple(m for m, v in scores.items()
                                       if isinstance(v, np.ndarray))
                schema = pa.schema([("trajectory_id", pa.string())]
                                   + [(m, pa.float64() if isinstance(v, np.ndarray)
                                       else pa.list_(pa.float64()))
                                      for m, v in scores.items()])
                writer = BackgroundWriter(_score_writer(output, schema))
            writer.write(pa.table({"trajectory_id": batch.ids.cast(pa.string()), **scores},
                                  schema=schema))
            report.n_rows += batch.n
            if isinstance(protos, str):
                report.protocols[protos] = report.protocols.get(protos, 0) + batch.n
            elif protos is not None:
                for item in pc.value_counts(protos).to_pylist():
                    name = str(item["values"])
                    report.protocols[name] = report.protocols.get(name, 0) + item["counts"]
            if keep_scores:
                for m, s in scores.items():
                    if isinstance(s, np.ndarray):  # per-round list columns are not kept
                        kept.setdefault(m, []).append(s)
                kept_correct.append(batch.correct())
                if protos is not None:
                    kept_protocol.append(np.full(batch.n, protos, object)
                                         if isinstance(protos, str)
                                         else protos.to_numpy(zero_copy_only=False))
            done = report.n_rows + len(skipped)
            if progress is not None:
                progress(done, total)
        n_in = report.n_rows + len(skipped)
        too_many = None
        if on_error == "skip" and skipped:
            if not report.n_rows:
                too_many = f"every record ({n_in:,}) was skipped"
            elif max_skip_fraction is not None and len(skipped) > max_skip_fraction * n_in:
                too_many = (f"{len(skipped):,} of {n_in:,} records ({len(skipped) / n_in:.2%}) "
                            f"were skipped, more than max_skip_fraction = {max_skip_fraction}")
        if side is not None:
            atomic_write_text(side, _skip_lines(skipped))
            report.skipped_path = str(side)
        if too_many is not None:
            raise TooManySkipped(f"{too_many}; no scores written; the skipped records and "
                                 f"their reasons are listed in {side}")
        if writer is None:  # no record scored: still write the (empty) output
            names = [m for m in method_list(methods) if m != "all"]
            if calibration is not None:
                names += [f"p_correct_{m}" for m in calibration.estimators]
            if stack is not None:
                names = [m for m in names if m not in dropped] + ["stack"]
            report.methods = tuple(names)
            lists = []
            if per_round:
                from fastuq.engine.registry import get_estimator

                lists = [get_estimator(m).per_round_column for m in method_list(methods)
                         if m != "all" and m not in dropped
                         and get_estimator(m).per_round is not None]
            schema = pa.schema([("trajectory_id", pa.string())]
                               + [(m, pa.float64()) for m in names]
                               + [(m, pa.list_(pa.float64())) for m in lists])
            writer = _score_writer(output, schema)
        writer.close()
    except BaseException:
        if writer is not None:
            writer.abort()
        raise
    report.left_out = info.get("left_out", {})
    report.skipped = skipped
    report.seconds = time.perf_counter() - start
    if keep_scores:
        report.scores = {m: np.concatenate(v) for m, v in kept.items()}
        if kept_correct and all(c is not None for c in kept_correct):
            report.correct = np.concatenate(kept_correct)
        if kept_protocol and sum(map(len, kept_protocol)) == report.n_rows:
            report.protocol = np.concatenate(kept_protocol)
    return report


def _with_stack(methods: str | Sequence[str], stack) -> tuple[list[str] | str | Sequence[str],
                                                              set[str]]:
    """``(methods to run, score columns not to write)``: with a ``stack``, ``methods`` must
    name ``"stack"`` (with other estimators, not ``"all"``), and the stack's inputs are run
    too, the output columns of those ``methods`` does not name left unwritten; without
    one, ``"stack"`` is refused with how to get one."""
    names = ([m.strip() for m in methods.split(",")] if isinstance(methods, str)
             else [str(m).strip() for m in methods])
    if stack is None:
        if "stack" in names:
            raise ValueError("method 'stack' combines other estimators with a fitted stack "
                             "file: fit one with 'fastuq fit --stack CORPUS -o stack.json' "
                             "and pass it (score --params stack.json)")
        return methods, set()
    if "stack" not in names:
        raise ValueError("a stack is given but 'stack' is not among the methods "
                         f"({', '.join(names)}); add it")
    own = [m for m in names if m != "stack"]
    if "all" in own:
        raise ValueError("'all' cannot be combined with 'stack'; name the other estimators")
    if own:
        method_list(own)
    if len(set(own)) != len(own):
        method_list(names)  # raises naming the repeated estimator
    from fastuq.engine.registry import get_estimator

    extra = [m for m in stack.estimators if m not in own]
    return own + extra, {out for m in extra for out in get_estimator(m).outputs}


def score_file(input, output: str | os.PathLike, *, device: str | None = None,
               **kwargs) -> ScoreReport:
    from fastuq.engine.runtime import device_scope

    with device_scope(device):
        return _score_file(input, output, **kwargs)


def _with_device_doc() -> None:
    """``score_file`` shows ``_score_file``'s signature and docstring, plus ``device``."""
    import inspect

    sig = inspect.signature(_score_file)
    device = inspect.Parameter("device", inspect.Parameter.KEYWORD_ONLY, default=None,
                               annotation="str | None")
    score_file.__signature__ = sig.replace(parameters=[*sig.parameters.values(), device])
    score_file.__doc__ = (_score_file.__doc__ or "") + (
        "\n    device: ``\"cpu\"``, ``\"gpu\"`` or ``\"auto\"``/``None`` (JAX's default "
        "backend, a GPU when there is one): where the kernels run.\n")


_with_device_doc()


def _score_writer(output: Path, schema: pa.Schema) -> AtomicParquetWriter:
    """The scores' Parquet writer. No dictionary encoding (ids are unique, scores nearly so:
    a dictionary is built and then abandoned) and no statistics for the id column (min/max
    over every id string): together a third of the time of the default settings, and a
    smaller file."""
    return AtomicParquetWriter(output, schema, use_dictionary=False,
                               write_statistics=[n for n in schema.names
                                                 if n != "trajectory_id"])


def _skip_lines(skipped: list[Skipped]) -> str:
    """The skip list as JSON Lines (``source``, ``row``, ``trajectory_id``, ``reason``),
    encoded column-wise by Polars rather than one ``json.dumps`` per record."""
    import polars as pl

    if not skipped:
        return ""
    frame = pl.DataFrame({
        "source": [k.source for k in skipped], "row": [k.row for k in skipped],
        "trajectory_id": [k.trajectory_id for k in skipped],
        "reason": [k.reason for k in skipped],
    }, schema={"source": pl.String, "row": pl.Int64, "trajectory_id": pl.String,
               "reason": pl.String})
    return frame.write_ndjson()


class ProgressBar:
    """A one-line progress bar on stderr (only drawn when stderr is a terminal or forced)."""

    def __init__(self, enabled: bool | None = None, stream=None,
                 unit: str = "trajectories", show_rate: bool = True) -> None:
        self.stream = sys.stderr if stream is None else stream
        self.enabled = self.stream.isatty() if enabled is None else enabled
        self.unit = unit
        self.show_rate = show_rate
        self.start = time.perf_counter()

    def __call__(self, done: int, total: int | None) -> None:
        if not self.enabled:
            return
        rate = ""
        if self.show_rate:
            rate = f" {done / max(time.perf_counter() - self.start, 1e-9):,.0f}/s"
        if total:
            bar = "#" * int(30 * done / total)
            line = f"\r[{bar:<30}] {done:,}/{total:,} {self.unit}{rate}"
        else:
            line = f"\r{done:,} {self.unit}{rate}"
        self.stream.write(line)
        self.stream.flush()

    def close(self) -> None:
        if self.enabled:
            self.stream.write("\n")
            self.stream.flush()
