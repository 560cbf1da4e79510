"""The main job: score a corpus file chunk by chunk and write one row per trajectory."""

from __future__ import annotations

import os
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import pyarrow as pa

from ._io import AtomicParquetWriter, SignalChunk, count_rows, iter_signal_chunks
from ._pack import pack_lists
from ._sauce import sauce_batch

__all__ = ["ScoreReport", "score_file"]


class _Labels(Sequence):
    """Lazy names for error messages: ``'id' (file row k)``."""

    def __init__(self, ids: pa.Array, path: Path, row0: int) -> None:
        self._ids, self._path, self._row0 = ids, path, row0

    def __len__(self) -> int:
        return len(self._ids)

    def __getitem__(self, n):  # type: ignore[override]
        return _Label(f"{self._ids[n].as_py()!r} ({self._path.name} row {self._row0 + n})")


class _Label(str):
    def __repr__(self) -> str:
        return str(self)


@dataclass
class ScoreReport:
    """What a scoring run did: rows in and out, seconds, and per-column summaries."""

    input: str
    output: str
    n_rows: int = 0
    seconds: float = 0.0
    methods: tuple[str, ...] = ("sauce",)
    protocols: dict[str, int] = field(default_factory=dict)
    scores: dict[str, np.ndarray] = field(default_factory=dict, repr=False)
    correct: np.ndarray | None = field(default=None, repr=False)


def _score_chunk(chunk: SignalChunk, path: Path, *, protocol, params, dtype, backend) -> np.ndarray:
    a, mask = pack_lists(chunk.agreement, dtype=dtype)
    h, mask_h = pack_lists(chunk.token_entropy, dtype=dtype)
    labels = _Labels(chunk.ids, path, chunk.row0)
    if a.shape[0] != h.shape[0] or not np.array_equal(mask, mask_h):
        if a.shape[0] == h.shape[0]:
            n = int(np.argmax((mask != mask_h).any(axis=0)))
        else:
            la, lh = mask.sum(0), mask_h.sum(0)
            n = int(np.argmax(la != lh)) if (la != lh).any() else 0
        raise ValueError(
            f"trajectory {labels[n]}: agreement and token_entropy have different numbers of "
            "rounds (field token_entropy)"
        )
    if protocol is None:
        if chunk.protocol is None or chunk.protocol.null_count:
            where = ""
            if chunk.protocol is not None:
                k = int(np.argmax(chunk.protocol.is_null().to_numpy(zero_copy_only=False)))
                where = f"trajectory {labels[k]}: "
            raise ValueError(f"{where}no protocol (field protocol); pass --protocol")
        protocol = chunk.protocol.to_numpy(zero_copy_only=False)
    result = sauce_batch(
        a, h, mask, protocol=protocol, dtype=dtype, backend=backend,
        trajectory_ids=labels, **params,
    )
    return result["score"]


def score_file(
    input: str | os.PathLike,
    output: str | os.PathLike,
    *,
    methods: Sequence[str] = ("sauce",),
    protocol: str | None = None,
    lam: float | None = None,
    q: float | None = None,
    sigma2_0: float | None = None,
    mu_0: float | None = None,
    dtype: str = "float64",
    backend: str = "jax",
    chunk_rows: int = 1 << 18,
    progress: Callable[[int, int | None], None] | None = None,
    keep_scores: bool = False,
) -> ScoreReport:
    """Score every trajectory of a corpus file and write ``trajectory_id`` + one float64
    column per estimator to Parquet, atomically (nothing appears at ``output`` on error).

    Args:
      input: Parquet, JSONL or JSONL.gz corpus (see ``fastuq._io``).
      output: Parquet file to write.
      methods: estimators to run (``("sauce",)`` for now).
      protocol: preset for every trajectory; default: each record's ``protocol`` field.
      lam, q, sigma2_0, mu_0: SAUCE parameter overrides.
      dtype: kernel precision, ``"float64"`` (default) or ``"float32"``; output is float64.
      chunk_rows: records per chunk; memory is bounded by the chunk, not the corpus.
      progress: called as ``progress(rows_done, rows_total_or_None)`` after each chunk.
      keep_scores: keep the score arrays (and labels) in the report, for summaries.

    Returns:
      a :class:`ScoreReport`.
    """
    input, output = Path(input), Path(output)
    unknown = [m for m in methods if m != "sauce"]
    if unknown:
        raise ValueError(f"unknown method(s) {unknown}; available: sauce")
    params = {"lam": lam, "q": q, "sigma2_0": sigma2_0, "mu_0": mu_0}
    total = count_rows(input)
    schema = pa.schema([("trajectory_id", pa.string())] + [(m, pa.float64()) for m in methods])
    report = ScoreReport(input=str(input), output=str(output), methods=tuple(methods))
    kept: list[np.ndarray] = []
    kept_correct: list[np.ndarray] = []
    start = time.perf_counter()
    with AtomicParquetWriter(output, schema) as writer:
        for chunk in iter_signal_chunks(input, chunk_rows):
            score = _score_chunk(
                chunk, input, protocol=protocol, params=params, dtype=np.dtype(dtype),
                backend=backend,
            )
            writer.write(
                pa.table({"trajectory_id": chunk.ids, "sauce": score.astype(np.float64)},
                         schema=schema)
            )
            report.n_rows += len(score)
            if chunk.protocol is not None and protocol is None:
                for k, v in zip(*np.unique(chunk.protocol.to_numpy(zero_copy_only=False),
                                           return_counts=True), strict=True):
                    report.protocols[str(k)] = report.protocols.get(str(k), 0) + int(v)
            elif protocol is not None:
                report.protocols[protocol] = report.protocols.get(protocol, 0) + len(score)
            if keep_scores:
                kept.append(score.astype(np.float64))
                if chunk.correct is not None:
                    kept_correct.append(chunk.correct.to_numpy(zero_copy_only=False))
            if progress is not None:
                progress(report.n_rows, total)
    report.seconds = time.perf_counter() - start
    if keep_scores:
        report.scores["sauce"] = np.concatenate(kept) if kept else np.empty(0)
        if kept_correct and sum(map(len, kept_correct)) == report.n_rows:
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
            frac = done / total
            bar = "#" * int(30 * frac)
            line = f"\r[{bar:<30}] {done:,}/{total:,} trajectories {rate:,.0f}/s"
        else:
            line = f"\r{done:,} trajectories {rate:,.0f}/s"
        self.stream.write(line)
        self.stream.flush()

    def close(self) -> None:
        if self.enabled:
            self.stream.write("\n")
            self.stream.flush()
