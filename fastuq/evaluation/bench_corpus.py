"""``fastuq bench --corpus FILE``: where the time of scoring a user's own corpus goes, stage by
stage.

The corpus is scored chunk by chunk, serially (every stage on the calling thread, one after
the other, so that each stage's time is the work it does; ``fastuq score`` overlaps reading,
preparing and the kernels on threads, so its wall time is less than the sum), through the
same public seams as ``fastuq score``:

==========  ============================================================================
stage       what is timed
==========  ============================================================================
read        reading and decoding a chunk (:func:`fastuq.io.readers.iter_chunks`, the
            columns the estimators read and those every record is checked against)
check       the structural checks (types, ids, round and slot counts) and the value checks
            of every checked column (:func:`fastuq.engine.checks.structural_problems`,
            :func:`~fastuq.engine.checks.with_value_problems`)
pack        the :class:`~fastuq.engine.batch.Batch` and each estimator's packed, checked
            inputs and parameters (:func:`fastuq.engine.runner.prepare_estimator`)
kernel      each estimator's kernel call (:func:`fastuq.engine.runner.call_kernel`); on
            the first chunk each kernel is called once untimed before, to compile
            (``compile_s``, apart)
write       the scores, one Parquet row group per chunk, to a temporary file
==========  ============================================================================

A bad record stops the run (ValueError naming its source, row, trajectory and field), as
``fastuq score`` does by default.
"""

from __future__ import annotations

import os
import tempfile
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import numpy as np

__all__ = ["STAGES", "corpus_stages", "stages_table"]

#: The stages, in order.
STAGES = ("read", "check", "pack", "kernel", "write")


def corpus_stages(
    source: str | os.PathLike,
    methods: str | Sequence[str] = "all",
    *,
    dtype: str = "float32",
    backend: str = "jax",
    chunk_rows: int = 1 << 18,
    progress: Callable[[str], None] | None = None,
) -> dict[str, Any]:
    """Score ``source`` serially, timing each stage (see the module docstring).

    Returns ``{"corpus", "n", "chunks", "methods", "left_out", "dtype", "backend",
    "stages": {stage: seconds}, "share": {stage: fraction of the total}, "total_s",
    "traj_per_s", "kernel_s": {estimator: seconds}, "compile_s"}`` (``total_s`` is the sum of
    the stages; ``compile_s``, the untimed first kernel calls, is not in it).
    """
    import pyarrow as pa
    import pyarrow.parquet as pq

    from fastuq.engine.checks import SeenIds, structural_problems, with_value_problems
    from fastuq.engine.methods import corpus_columns, method_list, resolve_once
    from fastuq.engine.pipeline import make_batch
    from fastuq.engine.registry import get_estimator
    from fastuq.engine.runner import call_kernel, prepare_estimator
    from fastuq.errors import RecordError
    from fastuq.io.readers import iter_chunks

    if dtype not in ("float32", "float64"):
        raise ValueError(f"bench --corpus: dtype must be float32 or float64, got {dtype!r}")
    names = method_list(methods)
    source = Path(source)
    if not source.exists():
        raise FileNotFoundError(f"bench --corpus: no such corpus: {source}")
    columns = corpus_columns(methods, {}, source, "corpus")
    if columns is None:
        reader = iter_chunks(source, chunk_rows=chunk_rows, validate=False, conform=False)
    else:
        reader = iter_chunks(source, columns=[], optional_columns=columns,
                             chunk_rows=chunk_rows, validate=False, conform=False)
    say = progress or (lambda line: None)
    stages = dict.fromkeys(STAGES, 0.0)
    kernel_s: dict[str, float] = {}
    info: dict[str, Any] = {}
    seen = SeenIds()
    resolved = None
    n = chunks = 0
    compile_s = 0.0
    clock = time.perf_counter
    with tempfile.TemporaryDirectory(prefix="fastuq-bench-") as tmp:
        writer = None
        try:
            while True:
                t0 = clock()
                chunk = next(reader, None)
                stages["read"] += clock() - t0
                if chunk is None:
                    break
                t0 = clock()
                _, table, problems = with_value_problems(structural_problems(chunk, seen),
                                                         True)
                stages["check"] += clock() - t0
                if problems.bad:
                    i = min(problems.bad)
                    raise RecordError(problems.bad[i], row=int(problems.rows[i]))
                t0 = clock()
                batch = make_batch(table, chunk, problems.rows, dtype=dtype,
                                   observation_noise=None, math=False, processes=None)
                resolved = resolve_once(resolved, names if names != ["all"] else "all",
                                        batch, {}, None, info)
                prepared = {m: prepare_estimator(get_estimator(m), batch, params={},
                                                 protocol=None) for m in resolved}
                stages["pack"] += clock() - t0
                scores: dict[str, Any] = {"trajectory_id": table.column("trajectory_id")}
                for m, (inputs, optional, values) in prepared.items():
                    if m not in kernel_s:  # compile on the first chunk, timed apart
                        t0 = clock()
                        call_kernel(get_estimator(m), inputs, optional, values, n=batch.n,
                                    dtype=batch.dtype, backend=backend)
                        compile_s += clock() - t0
                    t0 = clock()
                    out = call_kernel(get_estimator(m), inputs, optional, values, n=batch.n,
                                      dtype=batch.dtype, backend=backend)
                    spent = clock() - t0
                    stages["kernel"] += spent
                    kernel_s[m] = kernel_s.get(m, 0.0) + spent
                    scores.update({k: np.asarray(v, np.float64) for k, v in out.items()})
                t0 = clock()
                frame = pa.table(scores)
                if writer is None:
                    writer = pq.ParquetWriter(Path(tmp) / "scores.parquet", frame.schema)
                writer.write_table(frame)
                stages["write"] += clock() - t0
                n += batch.n
                chunks += 1
                say(f"chunk {chunks}: {n:,} trajectories")
        finally:
            if writer is not None:
                t0 = clock()
                writer.close()
                stages["write"] += clock() - t0
            seen.close()
    if not n:
        raise ValueError(f"bench --corpus: {source} holds no trajectory")
    total = sum(stages.values())
    return {
        "corpus": str(source), "n": n, "chunks": chunks, "methods": list(resolved or ()),
        "left_out": dict(info.get("left_out") or {}), "dtype": dtype, "backend": backend,
        "stages": stages, "share": {k: v / total for k, v in stages.items()},
        "total_s": total, "traj_per_s": n / total, "kernel_s": kernel_s,
        "compile_s": compile_s,
    }


def stages_table(data: dict[str, Any]) -> str:
    """The stages' seconds and shares as aligned text, then each estimator's kernel time."""
    lines = [f"{data['corpus']}: {data['n']:,} trajectories in {data['chunks']} chunk(s), "
             f"{len(data['methods'])} estimators, {data['dtype']}; serial total "
             f"{data['total_s']:.3g} s ({data['traj_per_s']:,.0f} trajectories/s)",
             f"{'stage':<8} {'seconds':>10} {'share':>7}"]
    for stage in STAGES:
        lines.append(f"{stage:<8} {data['stages'][stage]:>10.4f} "
                     f"{100 * data['share'][stage]:>6.1f}%")
    lines.append("kernel by estimator: " + ", ".join(
        f"{m} {s:.4f} s" for m, s in data["kernel_s"].items()))
    lines.append(f"compiling (first chunk, not in the total): {data['compile_s']:.3g} s")
    if data["left_out"]:
        lines.append("left out: " + "; ".join(f"{k} ({v})" for k, v in
                                              data["left_out"].items()))
    return "\n".join(lines)
