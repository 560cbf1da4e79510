"""Benchmark ingest: trajectories per second and peak memory of scoring a corpus, by stage.

Run from the repository root::

    python bench/bench_ingest.py            # full run (minutes), writes results + README
    python bench/bench_ingest.py --quick    # smoke test, N = 1e5, no 1e7 run (timed in README)

The corpus is ``fastuq.synth.corpus(N, protocol="mixed", seed=0)`` (N = 1e6 by default),
written once as Parquet and as JSONL.gz and cached (``--cache-dir``, default
``/tmp/fastuq_bench``; the file names carry a hash of the simulator's source, so a changed
simulator regenerates them). Stages, each configuration in its own subprocess:

  read       ``fastuq.io.readers.iter_chunks`` with the columns the SAUCE scorer reads
             (``columns=[]``, ``optional_columns=[agreement, token_entropy, protocol,
             correct, question_id]``) from Parquet and from JSONL.gz, against reference
             readers: bare ``ParquetFile.iter_batches``; plain decompression (pyarrow's gzip
             stream and Python's ``gzip``, 16 MiB reads, discarded); JSON parsing alone
             (``pyarrow.json.open_json`` on the decompressed bytes held in memory); and the
             bare JSON readers with an explicit schema of those six fields
             (``pyarrow.json.open_json`` streaming, ``pyarrow.json.read_json`` threaded,
             ``polars.read_ndjson``). Timed side by side: every repeat runs every reader once,
             in turn, so their ratios share the machine's load. Peak memory: one call per
             reader, each in a fresh process.
  pack       ``fastuq.io.pack.pack_lists`` of agreement and token_entropy into ``[T, N]`` + mask.
  agreement  ``fastuq.signals.agreement_from_answers(answers, n_agents, padded=True)``.
  kernel     ``fastuq.sauce_batch`` on the packed arrays (per-trajectory protocol array, as
             the scorer passes it), float64 and float32.
  write      ``fastuq.io.writers.AtomicParquetWriter`` of trajectory_id + score.
  end to end ``fastuq.score_file(..., methods="sauce")`` from Parquet (float64, float32) and
             from JSONL.gz, and with agreement built from the parsed answers (a copy of the
             Parquet corpus without the ``agreement`` column: through ``score_file`` when the
             scorer can build agreement from answers, and always as a hand-assembled pipeline
             of read + ``agreement_from_answers`` + pack + ``sauce_batch`` + write).
  10M        ``python -m fastuq score FILE -o OUT`` on a streamed 1e7-trajectory Parquet
             corpus, default ``--chunk-rows`` and 65536: wall time and the peak RSS of that
             process (``/usr/bin/time -v``; without it, ``ru_maxrss`` from ``os.wait4``).

Stages after ``read`` run chunk by chunk over the corpus in chunks of 262,144 rows (the
scorer's default), with their inputs prepared before the clock starts; their times add up to
an estimate of the pipeline that the end-to-end rows can be compared with. JAX runs on as
many XLA CPU devices as ``fastuq score`` uses by default (one per core; ``--devices``).
Memory: peak RSS (``ru_maxrss``, reset through ``/proc/self/clear_refs`` after the warm-up)
during the timed calls minus the RSS before the inputs were prepared (so it includes them),
and the absolute peak RSS of the process (interpreter, libraries and JAX included).
"""

from __future__ import annotations

import argparse
import gc
import hashlib
import io
import json
import os
import re
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
import _common as bc  # noqa: E402

SCRIPT = Path(__file__).resolve()
NAME = "INGEST"
DEFAULT_OUT = bc.RESULTS_DIR / "ingest.json"
QUICK_OUT = bc.RESULTS_DIR / "ingest_quick.json.tmp"
DEFAULT_CACHE = Path("/tmp/fastuq_bench")
PROTOCOL, SEED = "mixed", 0
CHUNK = 1 << 18  # the scorer's default chunk_rows
BIG_N = 10_000_000
BIG_CHUNKS = (None, 65536)  # --chunk-rows of the 1e7 runs (None: the CLI default)
SAUCE_OPTIONAL = ["agreement", "token_entropy", "protocol", "correct", "question_id"]
GIB = 2**30
TARGET_E2E_RATE = 1e6  # trajectories/s, end to end from Parquet with agreement from answers
TARGET_BIG_RSS = 2 * GIB


# ============================================================================ corpora


def _synth_hash() -> str:
    """Short hash of the simulator's source: cached corpora are regenerated when it changes."""
    import fastuq

    root = Path(fastuq.__file__).resolve().parent
    h = hashlib.sha256()
    # the simulator was synth.py + _synth_sim.py, and is now the fastuq/synth package
    files = [root / "synth.py", root / "_synth_sim.py", *sorted((root / "synth").glob("*.py"))]
    for p in files:
        if p.exists():
            h.update(p.read_bytes())
    return h.hexdigest()[:8]


_SUFFIXES = {"parquet": ".parquet", "jsonl": ".jsonl.gz", "noagree": "_no_agreement.parquet"}


def _stem(n: int) -> str:
    return f"{PROTOCOL}_seed{SEED}_n{n}_"


def corpus_paths(cache: Path, n: int) -> dict[str, Path]:
    return {k: cache / f"{_stem(n)}{_synth_hash()}{suffix}" for k, suffix in _SUFFIXES.items()}


def _drop_stale(path: Path) -> None:
    """Remove cached corpora of the same kind and N made by another simulator (other hash)."""
    suffix = next(x for x in sorted(_SUFFIXES.values(), key=len, reverse=True)
                  if path.name.endswith(x))
    prefix = path.name[: -len(suffix) - 8]
    same_kind = re.compile(re.escape(prefix) + "[0-9a-f]{8}" + re.escape(suffix))
    for p in path.parent.glob(prefix + "*"):
        if p != path and same_kind.fullmatch(p.name):
            p.unlink(missing_ok=True)


def _log(msg: str) -> None:
    print(msg, file=sys.stderr, flush=True)


def ensure_parquet(path: Path, n: int) -> float | None:
    """Write the N-trajectory corpus to ``path`` (streamed) unless cached; seconds or None."""
    if path.exists():
        return None
    from fastuq import synth

    _drop_stale(path)
    _log(f"  generating {n:,} trajectories -> {path}")
    start = time.perf_counter()
    synth.write(synth.corpus_chunks(n, protocol=PROTOCOL, seed=SEED), path)
    return time.perf_counter() - start


def ensure_jsonl(path: Path, parquet: Path) -> float | None:
    """JSONL.gz copy of ``parquet`` (polars ``write_ndjson`` per batch into pyarrow's gzip
    stream; atomic) unless cached; seconds or None."""
    if path.exists():
        return None
    import polars as pl
    import pyarrow as pa
    import pyarrow.parquet as pq

    _drop_stale(path)
    _log(f"  writing {path}")
    start = time.perf_counter()
    tmp = path.with_name(f".{path.name}.tmp")
    try:
        with pa.CompressedOutputStream(str(tmp), "gzip") as out:
            for batch in pq.ParquetFile(parquet).iter_batches(batch_size=1 << 16):
                buf = io.BytesIO()
                pl.from_arrow(pa.Table.from_batches([batch])).write_ndjson(buf)
                out.write(buf.getvalue())
        os.replace(tmp, path)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
    return time.perf_counter() - start


def ensure_noagree(path: Path, parquet: Path) -> float | None:
    """Copy of ``parquet`` without the ``agreement`` column unless cached; seconds or None."""
    if path.exists():
        return None
    import pyarrow.parquet as pq

    from fastuq import synth

    _drop_stale(path)
    _log(f"  writing {path}")
    start = time.perf_counter()
    pf = pq.ParquetFile(parquet)
    cols = [c for c in pf.schema_arrow.names if c != "agreement"]
    synth.write((pa_table(b) for b in pf.iter_batches(batch_size=1 << 16, columns=cols)), path)
    return time.perf_counter() - start


def pa_table(batch):
    import pyarrow as pa

    return pa.Table.from_batches([batch])


# ============================================================================ readers


def _sauce_schema():
    import pyarrow as pa

    f64 = pa.list_(pa.float64())
    return pa.schema([("trajectory_id", pa.string()), ("agreement", f64),
                      ("token_entropy", f64), ("protocol", pa.string()),
                      ("correct", pa.bool_()), ("question_id", pa.string())])


def read_iter_chunks(path: str, ctx: dict) -> int:
    from fastuq.io.readers import iter_chunks

    n = 0
    for chunk in iter_chunks(path, columns=[], optional_columns=SAUCE_OPTIONAL):
        n += chunk.table.num_rows
    return n


def read_parquet_bare(path: str, ctx: dict) -> int:
    import pyarrow.parquet as pq

    pf = pq.ParquetFile(path)
    return sum(b.num_rows for b in pf.iter_batches(batch_size=CHUNK,
                                                   columns=_sauce_schema().names))


def gunzip_arrow(path: str, ctx: dict) -> int:
    import pyarrow as pa

    total = 0
    with pa.input_stream(path, compression="gzip") as f:
        while data := f.read(1 << 24):
            total += len(data)
    return total


def gunzip_python(path: str, ctx: dict) -> int:
    import gzip

    total = 0
    with gzip.open(path, "rb") as f:
        while data := f.read(1 << 24):
            total += len(data)
    return total


def _json_parse_options():
    import pyarrow.json as pj

    return pj.ParseOptions(explicit_schema=_sauce_schema(), unexpected_field_behavior="ignore")


def parse_in_memory(path: str, ctx: dict) -> int:
    import pyarrow as pa
    import pyarrow.json as pj

    from fastuq.io.jsonl import DEFAULT_BLOCK

    reader = pj.open_json(pa.BufferReader(ctx["decompressed"]),
                          read_options=pj.ReadOptions(block_size=DEFAULT_BLOCK),
                          parse_options=_json_parse_options())
    return sum(b.num_rows for b in reader)


def open_json_gz(path: str, ctx: dict) -> int:
    import pyarrow as pa
    import pyarrow.json as pj

    from fastuq.io.jsonl import DEFAULT_BLOCK

    reader = pj.open_json(pa.input_stream(path, compression="gzip"),
                          read_options=pj.ReadOptions(block_size=DEFAULT_BLOCK),
                          parse_options=_json_parse_options())
    return sum(b.num_rows for b in reader)


def read_json_gz(path: str, ctx: dict) -> int:
    import pyarrow as pa
    import pyarrow.json as pj

    with pa.input_stream(path, compression="gzip") as f:
        return pj.read_json(f, parse_options=_json_parse_options()).num_rows


def polars_gz(path: str, ctx: dict) -> int:
    import polars as pl

    schema = {"trajectory_id": pl.String, "agreement": pl.List(pl.Float64),
              "token_entropy": pl.List(pl.Float64), "protocol": pl.String,
              "correct": pl.Boolean, "question_id": pl.String}
    return pl.read_ndjson(path, schema=schema).height


#: key -> (file, function, label, kind); kind: "fastuq", "json" (a bare JSON reader from the
#: .gz file: candidates for the fastest), "gunzip", "parse", "parquet" (bare Parquet).
READERS: dict[str, tuple[str, Any, str, str]] = {
    "iter_chunks_parquet": ("parquet", read_iter_chunks, "`iter_chunks` Parquet", "fastuq"),
    "iter_chunks_jsonl": ("jsonl", read_iter_chunks, "`iter_chunks` JSONL.gz", "fastuq"),
    "parquet_bare": ("parquet", read_parquet_bare,
                     "ref: bare `ParquetFile.iter_batches`, 6 columns", "parquet"),
    "gunzip_arrow": ("jsonl", gunzip_arrow,
                     "ref: plain decompression, pyarrow gzip stream", "gunzip"),
    "gunzip_python": ("jsonl", gunzip_python,
                      "ref: plain decompression, Python `gzip`", "gunzip"),
    "parse_memory": ("jsonl", parse_in_memory,
                     "ref: JSON parsing alone, `open_json` on decompressed bytes", "parse"),
    "open_json": ("jsonl", open_json_gz,
                  "ref: bare `pyarrow.json.open_json` from .gz, explicit schema", "json"),
    "read_json": ("jsonl", read_json_gz,
                  "ref: `pyarrow.json.read_json` from .gz, explicit schema, threads", "json"),
    "polars": ("jsonl", polars_gz, "ref: `polars.read_ndjson` from .gz, schema", "json"),
}


def _reader_ctx(keys, paths: dict[str, str]) -> dict:
    ctx: dict[str, Any] = {}
    if "parse_memory" in keys:
        import pyarrow as pa

        with pa.input_stream(paths["jsonl"], compression="gzip") as f:
            ctx["decompressed"] = f.read()
    return ctx


# ============================================================================ workers


def peak_rss() -> int:
    """This process's peak RSS: ``VmHWM`` from ``/proc/self/status`` (Linux), else
    ``ru_maxrss``. ``ru_maxrss`` is not used on Linux because a child inherits its parent's
    peak through ``exec`` (a worker spawned by a 400 MB driver reports >= 400 MB); ``VmHWM``
    belongs to the process's own address space and is reset by ``bc.reset_peak_rss``."""
    try:
        with open("/proc/self/status") as f:
            for line in f:
                if line.startswith("VmHWM:"):
                    return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        pass
    return bc.peak_rss_bytes()


def _measure(fn, repeats: int, base_rss: int, warmup: int = 1) -> dict[str, Any]:
    """Warm up (compiles, faults pages in), reset the peak, time ``repeats`` calls."""
    first = None
    for k in range(warmup):
        start = time.perf_counter()
        fn()
        if k == 0:
            first = time.perf_counter() - start
    after_warmup = bc.rss_bytes()
    reset = bc.reset_peak_rss()
    times = bc.time_calls(fn, repeats, warmup=0)
    peak = peak_rss()
    return {
        "times_s": times,
        "median_s": bc.median(times),
        "first_call_s": first,
        "rss_before_inputs": base_rss,
        "rss_after_warmup": after_warmup,
        "peak_rss": peak,
        "peak_rss_delta": peak - base_rss,
        "peak_reset": reset,
    }


def _jax_setup(devices: int) -> int:
    import fastuq

    return fastuq.use_cpu_devices(devices)


def worker_read_side(spec: dict[str, Any]) -> dict[str, Any]:
    """Every reader once per round, in turn, ``repeats`` rounds after one warm-up round."""
    keys = spec["readers"]
    paths = spec["paths"]
    ctx = _reader_ctx(keys, paths)
    times: dict[str, list[float]] = {k: [] for k in keys}
    counts: dict[str, int] = {}
    for rnd in range(spec["repeats"] + 1):
        for k in keys:
            file, fn, _, _ = READERS[k]
            start = time.perf_counter()
            counts[k] = fn(paths[file], ctx)
            if rnd:
                times[k].append(time.perf_counter() - start)
            gc.collect()
    return {"times_s": times, "median_s": {k: bc.median(v) for k, v in times.items()},
            "counts": counts,
            "decompressed_bytes": len(ctx["decompressed"]) if "decompressed" in ctx else None}


def worker_read_mem(spec: dict[str, Any]) -> dict[str, Any]:
    """One call of one reader in a fresh process: its peak RSS over the RSS before it."""
    key = spec["reader"]
    file, fn, _, _ = READERS[key]
    import pyarrow  # noqa: F401  (libraries loaded before the baseline)

    from fastuq.io import readers  # noqa: F401

    if key == "polars":
        import polars  # noqa: F401
    base = bc.rss_bytes()
    ctx = _reader_ctx([key], spec["paths"])
    before_call = bc.rss_bytes()
    reset = bc.reset_peak_rss()
    start = time.perf_counter()
    count = fn(spec["paths"][file], ctx)
    wall = time.perf_counter() - start
    peak = peak_rss()
    return {"count": count, "time_s": wall, "rss_before_inputs": base,
            "rss_before_call": before_call, "peak_rss": peak,
            "peak_rss_delta": peak - before_call, "peak_reset": reset}


def _load_chunks(path: str, columns: list[str], optional=()) -> list:
    from fastuq.io.readers import iter_chunks

    return [c.table for c in iter_chunks(path, columns=columns, optional_columns=list(optional),
                                         chunk_rows=CHUNK, validate=False)]


def worker_pack(spec: dict[str, Any]) -> dict[str, Any]:
    from fastuq.io.pack import pack_lists

    dtype = np.dtype(spec["dtype"])
    base = bc.rss_bytes()
    cols = [(t.column("agreement").combine_chunks(), t.column("token_entropy").combine_chunks())
            for t in _load_chunks(spec["paths"]["parquet"], ["agreement", "token_entropy"])]
    input_bytes = sum(a.nbytes + h.nbytes for a, h in cols)
    box: dict[str, Any] = {}

    def run() -> None:
        box.clear()
        box["out"] = [(pack_lists(a, dtype=dtype), pack_lists(h, dtype=dtype)) for a, h in cols]

    res = _measure(run, spec["repeats"], base)
    res["input_bytes"] = input_bytes
    res["output_bytes"] = sum(x.nbytes for pa_, ph in box["out"] for x in (*pa_, *ph))
    res["t_max"] = max(pa_[0].shape[0] for pa_, _ in box["out"])
    return res


def worker_agreement(spec: dict[str, Any]) -> dict[str, Any]:
    """``variant="exact"``: ``agreement_from_answers(answers, n_agents, padded=True)`` (exact
    string equality). ``variant="scorer"``: what the scorer runs for a corpus without an
    agreement column, ``Batch(table).rounds("agreement")`` (each distinct answer string of the
    chunk normalised by ``fastuq.answers.answer_classes``, equivalent answers vote together)."""
    import pyarrow as pa

    from fastuq.io.pack import pack_lists
    from fastuq.signals import agreement_from_answers

    base = bc.rss_bytes()
    tables = _load_chunks(spec["paths"]["parquet"], ["answers", "n_agents", "agreement"])
    refs = [pack_lists(t.column("agreement")) for t in tables]
    box: dict[str, Any] = {}
    if spec["variant"] == "exact":
        inputs = [(t.column("answers").combine_chunks(), t.column("n_agents").combine_chunks())
                  for t in tables]
        input_bytes = sum(a.nbytes + k.nbytes for a, k in inputs)

        def run() -> None:
            box.clear()
            box["out"] = [agreement_from_answers(a, k, padded=True) for a, k in inputs]
    else:
        from fastuq.engine.batch import Batch

        inputs = [pa.table({c: t.column(c).combine_chunks()
                            for c in ("trajectory_id", "answers", "n_agents")}) for t in tables]
        input_bytes = sum(t.nbytes for t in inputs)
        if not Batch(inputs[0]).has("agreement"):
            return {"skipped": "Batch cannot build agreement from answers"}

        def run() -> None:
            box.clear()
            box["out"] = [Batch(t, dtype=np.float64).rounds("agreement") for t in inputs]

    del tables
    res = _measure(run, spec["repeats"], base)
    res["input_bytes"] = input_bytes
    # The simulator's agreement column is the same majority margin: they must agree.
    diff, same_mask = 0.0, True
    for (a, mask), (ref, ref_mask) in zip(box["out"], refs, strict=True):
        same_mask &= bool(np.array_equal(mask, ref_mask))
        if same_mask:
            diff = max(diff, float(np.max(np.abs(np.where(mask, a - ref, 0.0)), initial=0.0)))
    res["matches_agreement_column"] = same_mask and diff <= 1e-12
    res["max_abs_diff_vs_column"] = diff
    return res


def worker_kernel(spec: dict[str, Any]) -> dict[str, Any]:
    devices = _jax_setup(spec["devices"])
    import fastuq
    from fastuq.io.pack import pack_lists

    dtype = np.dtype(spec["dtype"])
    base = bc.rss_bytes()
    inputs = []
    for t in _load_chunks(spec["paths"]["parquet"], ["agreement", "token_entropy", "protocol"]):
        a, mask = pack_lists(t.column("agreement"), dtype=dtype)
        h, _ = pack_lists(t.column("token_entropy"), dtype=dtype)
        if spec["protocol"] == "column":
            proto = t.column("protocol").combine_chunks().to_numpy(zero_copy_only=False)
        else:
            proto = spec["protocol"]
        inputs.append((a, h, mask, proto))
    input_bytes = sum(a.nbytes + h.nbytes + m.nbytes for a, h, m, _ in inputs)
    box: dict[str, Any] = {}

    def run() -> None:
        box.clear()
        box["scores"] = [fastuq.sauce_batch(a, h, m, protocol=p, dtype=dtype,
                                            backend=spec["backend"])["score"]
                         for a, h, m, p in inputs]

    res = _measure(run, spec["repeats"], base)
    res["input_bytes"] = input_bytes
    res["xla_devices"] = devices
    res["score_mean"] = float(np.mean(np.concatenate(box["scores"]).astype(np.float64)))
    return res


def worker_write(spec: dict[str, Any]) -> dict[str, Any]:
    import pyarrow as pa

    from fastuq.io.writers import AtomicParquetWriter

    base = bc.rss_bytes()
    rng = np.random.default_rng(0)
    parts = [(t.column("trajectory_id").combine_chunks().cast(pa.string()),
              rng.random(t.num_rows)) for t in _load_chunks(spec["paths"]["parquet"], [])]
    schema = pa.schema([("trajectory_id", pa.string()), ("sauce", pa.float64())])
    out = Path(spec["out_dir"]) / "write_stage.parquet"

    def run() -> None:
        with AtomicParquetWriter(out, schema) as writer:
            for ids, score in parts:
                writer.write(pa.table({"trajectory_id": ids, "sauce": score}, schema=schema))

    res = _measure(run, spec["repeats"], base)
    res["input_bytes"] = sum(ids.nbytes + s.nbytes for ids, s in parts)
    res["output_file_bytes"] = out.stat().st_size
    return res


def answers_pipeline(path: str, out: Path, dtype: np.dtype, backend: str = "jax") -> int:
    """Read + ``agreement_from_answers`` + pack entropy + ``sauce_batch`` + atomic write,
    chunk by chunk: what ``score_file`` would do with agreement built from answers (without
    its duplicate-id check and protocol tally)."""
    import pyarrow as pa

    import fastuq
    from fastuq.io.pack import pack_lists
    from fastuq.io.readers import iter_chunks
    from fastuq.io.writers import AtomicParquetWriter
    from fastuq.signals import agreement_from_answers

    schema = pa.schema([("trajectory_id", pa.string()), ("sauce", pa.float64())])
    n = 0
    with AtomicParquetWriter(out, schema) as writer:
        for chunk in iter_chunks(path, columns=["answers", "n_agents"],
                                 optional_columns=["token_entropy", "protocol", "correct",
                                                   "question_id"], chunk_rows=CHUNK):
            t = chunk.table
            ids = t.column("trajectory_id").combine_chunks()
            a, mask = agreement_from_answers(t.column("answers").combine_chunks(),
                                             t.column("n_agents").combine_chunks(),
                                             padded=True, ids=ids)
            h, _ = pack_lists(t.column("token_entropy"), dtype=dtype)
            proto = t.column("protocol").combine_chunks().to_numpy(zero_copy_only=False)
            score = fastuq.sauce_batch(a.astype(dtype, copy=False), h, mask, protocol=proto,
                                       dtype=dtype, backend=backend)["score"]
            writer.write(pa.table({"trajectory_id": ids.cast(pa.string()),
                                   "sauce": np.asarray(score, np.float64)}, schema=schema))
            n += t.num_rows
    return n


def scorer_builds_agreement() -> bool:
    """Whether ``fastuq.score`` can build agreement from parsed answers (a Batch without an
    agreement column but with answers reports ``has("agreement")``)."""
    import pyarrow as pa

    from fastuq.engine.batch import Batch

    table = pa.table({
        "trajectory_id": pa.array(["a"]),
        "n_agents": pa.array([2], pa.int32()),
        "answers": pa.array([[["1", "1"]]], pa.list_(pa.list_(pa.string()))),
        "token_entropy": pa.array([[0.5]], pa.list_(pa.float64())),
    })
    try:
        return bool(Batch(table).has("agreement"))
    except Exception:  # noqa: BLE001 - a changed internal API: treat as unsupported
        return False


def worker_e2e(spec: dict[str, Any]) -> dict[str, Any]:
    devices = _jax_setup(spec["devices"])
    import fastuq

    dtype = np.dtype(spec["dtype"])
    out = Path(spec["out_dir"]) / f"e2e_{spec['variant']}_{spec['dtype']}.parquet"
    src = spec["paths"][spec["file"]]
    base = bc.rss_bytes()
    box: dict[str, Any] = {}
    extra: dict[str, Any] = {}
    if spec["variant"] == "answers_manual":
        def run() -> None:
            box["n"] = answers_pipeline(src, out, dtype)
    else:
        if spec["variant"] == "answers_score_file":
            extra["scorer_builds_agreement"] = scorer_builds_agreement()
            if not extra["scorer_builds_agreement"]:
                return {**extra, "skipped": "fastuq.score cannot build agreement from answers "
                        "(Batch.has('agreement') is False without an agreement column)"}

        def run() -> None:
            box["n"] = fastuq.score_file(src, out, methods="sauce", dtype=str(dtype),
                                         chunk_rows=CHUNK).n_rows

    res = _measure(run, spec["repeats"], base)
    res.update(extra)
    res["n_rows"] = box["n"]
    res["xla_devices"] = devices
    res["output"] = str(out)
    return res


def worker_profile(spec: dict[str, Any]) -> dict[str, Any]:
    """One ``score_file`` call under cProfile (after a warm-up): the functions with the most
    own time."""
    import cProfile
    import pstats

    _jax_setup(spec["devices"])
    import fastuq

    src = spec["paths"][spec["file"]]
    out = Path(spec["out_dir"]) / f"profile_{spec['file']}.parquet"
    fastuq.score_file(src, out, methods="sauce")
    prof = cProfile.Profile()
    start = time.perf_counter()
    prof.enable()
    fastuq.score_file(src, out, methods="sauce")
    prof.disable()
    wall = time.perf_counter() - start
    stats = pstats.Stats(prof)
    rows = []
    for (file, line, func), (_cc, nc, tt, ct, callers) in stats.stats.items():
        where = _where(file, line, func)
        callers_named = sorted(((_where(f, ln, fn), c[3]) for (f, ln, fn), c in callers.items()),
                               key=lambda x: -x[1])[:3]
        rows.append({"function": where, "calls": nc, "tottime_s": tt, "cumtime_s": ct,
                     "callers": [{"caller": c, "cumtime_s": t} for c, t in callers_named]})
    rows.sort(key=lambda r: -r["tottime_s"])
    by_cum = sorted((r for r in rows if r["function"].startswith("fastuq/")),
                    key=lambda r: -r["cumtime_s"])
    watch = {r["function"]: {k: r[k] for k in ("calls", "cumtime_s")} for r in rows
             if r["function"].startswith("fastuq/") and r["function"].endswith(WATCH)}
    return {"wall_s": wall, "top": rows[: spec.get("top", 15)],
            "top_cumulative": [{k: r[k] for k in ("function", "calls", "cumtime_s")}
                               for r in by_cum[:25]],
            "watch": watch}


def _where(file: str, line: int, func: str) -> str:
    """``fastuq/engine/scoring.py:318(score_file)``; builtins keep their own name."""
    if not line:
        return func
    return "/".join(Path(file).parts[-2:]) + f":{line}({func})"


#: fastuq functions whose calls and cumulative time the profiles record.
WATCH = ("(infer_json_schema)", "(answer_classes)", "(_agreement_from_answers)",
         "(agreement_from_answers)", "(repeats)", "(add)", "(param_values)",
         "(protocol)", "(iter_json_batches)", "(validate)", "(conform)")


def worker_hotspots(spec: dict[str, Any]) -> dict[str, Any]:
    """Pieces of ``score_file``'s per-chunk bookkeeping, timed over the whole corpus (every
    chunk), each beside a vectorised Arrow equivalent; and the duplicate-id index at 1e7."""
    import pyarrow as pa
    import pyarrow.compute as pc

    out: dict[str, Any] = {}
    tables = _load_chunks(spec["paths"]["parquet"], ["protocol"])
    cols = [t.column("protocol").combine_chunks() for t in tables]
    ids = [t.column("trajectory_id").combine_chunks() for t in tables]
    reps = spec["repeats"]

    def timed(fn) -> float:
        return bc.median(bc.time_calls(fn, reps, warmup=1))

    # What the scorer runs now: the protocol tally is `pc.value_counts` (score_file) and
    # the registry's `Estimator.param_values` takes the Arrow column `Batch.protocol()`
    # returns (dictionary encoding inside). The NumPy object-array versions they replaced
    # are no longer timed.
    out["protocol_pc_value_counts_s"] = timed(lambda: [pc.value_counts(c) for c in cols])
    try:
        from fastuq.engine.registry import get_estimator

        est = get_estimator("sauce")
        out["sauce_params_arrays_arrow_s"] = timed(
            lambda: [est.param_values(len(c), c, {}, np.float64) for c in cols])
    except Exception as exc:  # noqa: BLE001 - private API moved: report, carry on
        out["sauce_params_arrays_error"] = repr(exc)
    try:
        from fastuq.engine.checks import SeenIds as _SeenIds

        def seen_ids(parts) -> None:
            seen = _SeenIds()
            row = 0
            for p in parts:
                seen.repeats(p)
                seen.add(p, row, "ids", row)
                row += len(p)
            seen.close()

        def seen_ids_sorted_queries(parts) -> None:
            """The same index, the chunk's hashes sorted once and searched in order (a
            sequential sweep instead of random probes), reused for the merge."""
            seen = np.empty(0, np.uint64)
            for p in parts:
                h = np.sort(_SeenIds._hash(p))
                if len(seen):
                    pos = np.searchsorted(seen, h)
                    bool((seen[np.minimum(pos, len(seen) - 1)] == h).any())
                seen = np.sort(np.concatenate([seen, h]), kind="stable")

        out["seen_ids_s"] = timed(lambda: seen_ids(ids))
        out["seen_ids_sorted_queries_s"] = timed(lambda: seen_ids_sorted_queries(ids))
        if spec.get("big_n"):
            big = pc.utf8_lpad(pc.cast(pa.array(np.arange(spec["big_n"])), pa.string()),
                               width=8, padding="0")
            for rows in (CHUNK, 65536):
                parts = [big.slice(k, rows) for k in range(0, len(big), rows)]
                for key, fn in (("seen_ids", seen_ids),
                                ("seen_ids_sorted_queries", seen_ids_sorted_queries)):
                    start = time.perf_counter()
                    fn(parts)
                    out[f"{key}_1e7_chunk{rows}_s"] = time.perf_counter() - start
    except Exception as exc:  # noqa: BLE001
        out["seen_ids_error"] = repr(exc)
    out["chunks"] = len(cols)
    return out


WORKERS = {
    "read_side": worker_read_side,
    "read_mem": worker_read_mem,
    "pack": worker_pack,
    "agreement": worker_agreement,
    "kernel": worker_kernel,
    "write": worker_write,
    "e2e": worker_e2e,
    "profile": worker_profile,
    "hotspots": worker_hotspots,
}


def worker_main(spec_json: str) -> None:
    spec = json.loads(spec_json)
    result = {**spec, **WORKERS[spec["kind"]](spec)}
    bc.emit_result(result)


# ============================================================================ 1e7 run


TIME_BIN = Path("/usr/bin/time")


def run_cli_score(path: Path, out: Path, chunk_rows: int | None,
                  timeout: float = 1800.0) -> dict[str, Any]:
    """``python -m fastuq score PATH -o OUT [--chunk-rows K]`` in a subprocess: its wall
    time, the scoring time it reports, and its own peak RSS.

    The peak comes from ``/usr/bin/time -v`` ("Maximum resident set size") where it exists.
    Without it, from ``os.wait4``'s ``ru_maxrss``, which on Linux is at least the peak RSS of
    this (parent) process at the time of the spawn: the child inherits it through ``exec``.
    """
    cmd = [sys.executable, "-m", "fastuq", "score", str(path), "-o", str(out), "--no-progress"]
    if chunk_rows:
        cmd += ["--chunk-rows", str(chunk_rows)]
    use_time = TIME_BIN.exists()
    full = [str(TIME_BIN), "-v", *cmd] if use_time else cmd
    err_path = out.with_name(out.name + ".stderr")
    with open(err_path, "w") as err:
        start = time.perf_counter()
        proc = subprocess.Popen(full, stdout=subprocess.DEVNULL, stderr=err, cwd=bc.REPO_ROOT)
        deadline = start + timeout
        while True:
            pid, status, usage = os.wait4(proc.pid, os.WNOHANG)
            if pid:
                break
            if time.perf_counter() > deadline:
                proc.kill()
                pid, status, usage = os.wait4(proc.pid, 0)
                break
            time.sleep(0.05)
        wall = time.perf_counter() - start
    proc.returncode = os.waitstatus_to_exitcode(status)
    text = err_path.read_text()
    res: dict[str, Any] = {
        "command": "python " + " ".join(cmd[1:]),
        "chunk_rows": chunk_rows or CHUNK,
        "chunk_rows_flag": chunk_rows,
        "returncode": proc.returncode,
        "wall_s": wall,
    }
    m = re.search(r"Maximum resident set size \(kbytes\): (\d+)", text)
    if use_time and m:
        res["peak_rss"] = int(m.group(1)) * 1024
        res["peak_rss_source"] = "/usr/bin/time -v"
        for key, pattern in (("user_s", r"User time \(seconds\): ([\d.]+)"),
                             ("sys_s", r"System time \(seconds\): ([\d.]+)")):
            mm = re.search(pattern, text)
            if mm:
                res[key] = float(mm.group(1))
    elif not use_time:
        res["peak_rss"] = int(usage.ru_maxrss) * (1 if sys.platform == "darwin" else 1024)
        res["peak_rss_source"] = "os.wait4 ru_maxrss (includes the parent's peak at spawn)"
        res["user_s"], res["sys_s"] = usage.ru_utime, usage.ru_stime
    m = re.search(r"scored ([\d,]+) trajectories in ([\d.]+) s", text)
    if m:
        res["n_rows"] = int(m.group(1).replace(",", ""))
        res["scoring_s"] = float(m.group(2))
    if proc.returncode or "peak_rss" not in res:
        res["error"] = f"exit {proc.returncode}: " + " | ".join(text.strip().splitlines()[-5:])
    return res


# ============================================================================ driver


def _label(spec: dict[str, Any]) -> str:
    keys = ("kind", "reader", "variant", "file", "dtype", "protocol", "n", "chunk_rows")
    return " ".join(f"{k}={spec[k]}" for k in keys if spec.get(k) is not None)


def _run(spec: dict[str, Any], results: list[dict[str, Any]]) -> dict[str, Any]:
    start = time.perf_counter()
    print(f"  {_label(spec)} ...", end="", file=sys.stderr, flush=True)
    res = bc.run_worker(SCRIPT, spec)
    wall = time.perf_counter() - start
    if "error" in res:
        print(f" ERROR ({wall:.1f} s): {res['error']}", file=sys.stderr, flush=True)
    elif isinstance(res.get("median_s"), float):
        print(f" {res['median_s'] * 1e3:,.0f} ms ({wall:.1f} s)", file=sys.stderr, flush=True)
    else:
        print(f" done ({wall:.1f} s)", file=sys.stderr, flush=True)
    res["subprocess_wall_s"] = wall
    results.append(res)
    return res


def _mb(nbytes: float | None) -> str:
    return "—" if nbytes is None else f"{nbytes / 2**20:,.0f}"


def _ms(seconds: float | None) -> str:
    return "—" if seconds is None else bc.fmt_num(seconds * 1e3)


def _find(results, **match) -> dict[str, Any] | None:
    for r in results:
        if all(r.get(k) == v for k, v in match.items()) and "error" not in r:
            return r
    return None


def read_summary(data: dict[str, Any]) -> dict[str, Any]:
    """Read-stage medians (side by side), per-round ratios, and the fastest references."""
    side = _find(data["results"], kind="read_side")
    if side is None:
        return {}
    times = side["times_s"]
    med = side["median_s"]
    json_keys = [k for k in med if READERS[k][3] == "json"]
    gunzip_keys = [k for k in med if READERS[k][3] == "gunzip"]
    out: dict[str, Any] = {"median_s": med}
    rounds = len(next(iter(times.values())))

    def per_round_ratio(num: str, dens: list[str]) -> float:
        return bc.median([times[num][i] / min(times[d][i] for d in dens)
                          for i in range(rounds)])

    if json_keys:
        fastest = min(json_keys, key=lambda k: med[k])
        out["fastest_json_reader"] = fastest
        out["jsonl_x_fastest_json"] = med["iter_chunks_jsonl"] / med[fastest]
        out["jsonl_x_fastest_json_per_round"] = per_round_ratio("iter_chunks_jsonl",
                                                                json_keys)
    if gunzip_keys:
        fastest_gz = min(gunzip_keys, key=lambda k: med[k])
        out["fastest_gunzip"] = fastest_gz
        out["jsonl_x_gunzip"] = med["iter_chunks_jsonl"] / med[fastest_gz]
        if "parse_memory" in med:
            serial = med[fastest_gz] + med["parse_memory"]
            out["gunzip_plus_parse_s"] = serial
            out["jsonl_x_gunzip_plus_parse"] = med["iter_chunks_jsonl"] / serial
    if "parquet_bare" in med:
        out["parquet_x_bare"] = med["iter_chunks_parquet"] / med["parquet_bare"]
        out["parquet_x_bare_per_round"] = per_round_ratio("iter_chunks_parquet",
                                                          ["parquet_bare"])
    out["parquet_vs_jsonl"] = med["iter_chunks_jsonl"] / med["iter_chunks_parquet"]
    return out


def headline(data: dict[str, Any]) -> dict[str, Any]:
    res = data["results"]
    n = data["config"]["n"]
    h: dict[str, Any] = {"n": n, **read_summary(data)}

    def med(**m) -> float | None:
        r = _find(res, **m)
        return r["median_s"] if r and "median_s" in r else None

    pq_f64 = med(kind="e2e", variant="parquet", dtype="float64")
    manual = med(kind="e2e", variant="answers_manual", dtype="float64")
    via_scorer = med(kind="e2e", variant="answers_score_file", dtype="float64")
    h["e2e_parquet_f64_rate"] = n / pq_f64 if pq_f64 else None
    h["e2e_answers_manual_rate"] = n / manual if manual else None
    h["e2e_answers_score_file_rate"] = n / via_scorer if via_scorer else None
    target = via_scorer or manual
    h["e2e_answers_rate"] = n / target if target else None
    h["e2e_answers_source"] = ("score_file" if via_scorer else
                               "hand-assembled pipeline" if manual else None)
    h["e2e_answers_x_target"] = (n / target) / TARGET_E2E_RATE if target else None
    jsonl = med(kind="e2e", variant="jsonl", dtype="float64")
    h["e2e_jsonl_f64_rate"] = n / jsonl if jsonl else None
    # Sum of the stage medians: the pipeline without the scorer's own bookkeeping.
    stages = {
        "read": h.get("median_s", {}).get("iter_chunks_parquet"),
        "pack": med(kind="pack", dtype="float64"),
        "kernel": med(kind="kernel", dtype="float64", protocol="column"),
        "write": med(kind="write"),
    }
    if all(v is not None for v in stages.values()) and pq_f64:
        h["stage_sum_parquet_f64_s"] = sum(stages.values())
        h["e2e_parquet_f64_overhead_s"] = pq_f64 - sum(stages.values())
    agree = med(kind="agreement", variant="exact")
    if all(v is not None for v in stages.values()) and agree:
        h["stage_sum_answers_f64_s"] = sum(stages.values()) + agree
    big = [r for r in data.get("big", []) if "error" not in r]
    for r in big:
        key = f"big_chunk{r['chunk_rows']}"
        h[key + "_peak_rss"] = r["peak_rss"]
        h[key + "_rate"] = r.get("n_rows", BIG_N) / r["wall_s"]
        h[key + "_under_2gib"] = r["peak_rss"] < TARGET_BIG_RSS
    return h


def build_table(data: dict[str, Any]) -> str:
    res = data["results"]
    n = data["config"]["n"]
    side = _find(res, kind="read_side")
    headers = ["stage", "what", "dtype", "median ms", "best ms", "traj/s", "peak ΔRSS MB",
               "peak RSS MB"]
    rows = []
    if side:
        for key, med in side["median_s"].items():
            mem = _find(res, kind="read_mem", reader=key) or {}
            rows.append(["read", READERS[key][2], "", _ms(med), _ms(min(side["times_s"][key])),
                         bc.fmt_si(n / med), _mb(mem.get("peak_rss_delta")),
                         _mb(mem.get("peak_rss"))])

    def add(stage: str, what: str, r: dict[str, Any] | None, dtype: str = "") -> None:
        if r is None or "median_s" not in r:
            return
        rows.append([stage, what, dtype, _ms(r["median_s"]), _ms(min(r["times_s"])),
                     bc.fmt_si(n / r["median_s"]), _mb(r.get("peak_rss_delta")),
                     _mb(r.get("peak_rss"))])

    for dt in ("float64", "float32"):
        add("pack", "`pack_lists` agreement + token_entropy", _find(res, kind="pack", dtype=dt),
            "f" + dt[-2:])
    add("agreement", "`agreement_from_answers(answers, n_agents, padded=True)`",
        _find(res, kind="agreement", variant="exact"), "f64")
    add("agreement", "as the scorer builds it: `Batch.rounds(\"agreement\")` "
        "(`answer_classes` + `agreement_from_answers`)",
        _find(res, kind="agreement", variant="scorer"), "f64")
    for dt, proto, what in (("float64", "column", "protocol per trajectory"),
                            ("float32", "column", "protocol per trajectory"),
                            ("float32", "debate", "one protocol string")):
        add("kernel", f"`sauce_batch`, jax, {what}",
            _find(res, kind="kernel", dtype=dt, protocol=proto), "f" + dt[-2:])
    add("write", "`AtomicParquetWriter` trajectory_id + score", _find(res, kind="write"))
    for variant, dt, what in (
        ("parquet", "float64", "`score_file` Parquet"),
        ("parquet", "float32", "`score_file` Parquet"),
        ("jsonl", "float64", "`score_file` JSONL.gz"),
        ("answers_score_file", "float64",
         "`score_file` Parquet without agreement (built from answers)"),
        ("answers_manual", "float64",
         "read + `agreement_from_answers` + pack + `sauce_batch` + write (by hand)"),
    ):
        add("end to end", what, _find(res, kind="e2e", variant=variant, dtype=dt),
            "f" + dt[-2:])
    return bc.markdown_table(headers, rows, align=["l", "l", "l"] + ["r"] * 5)


def build_big_table(data: dict[str, Any]) -> str | None:
    big = data.get("big") or []
    if not big:
        return None
    headers = ["N", "`--chunk-rows`", "process wall s", "scoring s (reported)", "traj/s (wall)",
               "traj/s (scoring)", "peak RSS MiB", "< 2 GiB"]
    rows = []
    for r in big:
        if "error" in r:
            rows.append([bc.fmt_count(BIG_N), r.get("chunk_rows", "?"), "error", r["error"],
                         "", "", "", ""])
            continue
        n = r.get("n_rows", BIG_N)
        rows.append([bc.fmt_count(n), f"{r['chunk_rows']:,}"
                     + ("" if r["chunk_rows_flag"] else " (default)"),
                     bc.fmt_num(r["wall_s"]), bc.fmt_num(r.get("scoring_s")),
                     bc.fmt_si(n / r["wall_s"]),
                     bc.fmt_si(n / r["scoring_s"]) if r.get("scoring_s") else "—",
                     _mb(r["peak_rss"]), "yes" if r["peak_rss"] < TARGET_BIG_RSS else "no"])
    return bc.markdown_table(headers, rows, align=["r", "r"] + ["r"] * 6)


def _fmt_rate(rate: float | None) -> str:
    return "—" if rate is None else f"{bc.fmt_si(rate)} trajectories/s"


def render(data: dict[str, Any]) -> str:
    info, h, cfg = data["machine"], data["headline"], data["config"]
    files = data.get("files", {})
    lines = [
        f"Run {info['date']} on {info['cpu_count']} CPUs ({info['cpu_model']}), "
        f"pyarrow {info.get('pyarrow')}, polars {info.get('polars')}, JAX {info['jax']} "
        f"({cfg['devices']} XLA CPU devices); load average at start "
        f"{', '.join(f'{x:.2f}' for x in info.get('loadavg_start', []))}, at end "
        f"{', '.join(f'{x:.2f}' for x in data.get('loadavg_end', []))}. "
        f"N = {bc.fmt_count(cfg['n'])} trajectories (`synth.corpus(N, protocol=\"mixed\", "
        f"seed=0)`): Parquet {_mb(files.get('parquet_bytes'))} MB, JSONL.gz "
        f"{_mb(files.get('jsonl_bytes'))} MB ({_mb(files.get('jsonl_decompressed_bytes'))} MB "
        f"decompressed). Medians of {cfg['repeats']} repeats after a warm-up; read rows timed "
        "side by side (each repeat runs every reader in turn), their memory from one call each "
        "in a fresh process. Stages after read run over the corpus in chunks of 262,144 "
        "(the scorer's default) with their inputs prepared beforehand.",
        "",
    ]
    bullets = []
    if "jsonl_x_fastest_json" in h:
        fast = READERS[h["fastest_json_reader"]][2].removeprefix("ref: ")
        bullets.append(
            f"**JSONL.gz reader vs the fastest bare reader** ({fast}): "
            f"{h['jsonl_x_fastest_json']:.2f}× its time (median of per-repeat ratios "
            f"{h['jsonl_x_fastest_json_per_round']:.2f}×); vs plain decompression alone "
            f"{h['jsonl_x_gunzip']:.2f}×"
            + (f"; vs decompression + parsing done one after the other "
               f"{h['jsonl_x_gunzip_plus_parse']:.2f}×" if "jsonl_x_gunzip_plus_parse" in h
               else "") + ".")
    if "parquet_x_bare" in h:
        bullets.append(
            f"**Parquet reader vs bare `iter_batches`**: {h['parquet_x_bare']:.2f}× "
            f"(per-repeat {h['parquet_x_bare_per_round']:.2f}×); JSONL.gz takes "
            f"{h['parquet_vs_jsonl']:.1f}× as long as Parquet through `iter_chunks`.")
    if h.get("e2e_answers_rate"):
        bullets.append(
            f"**End to end from Parquet with agreement from parsed answers** "
            f"({h['e2e_answers_source']}): {_fmt_rate(h['e2e_answers_rate'])} = "
            f"{h['e2e_answers_x_target']:.2f}× the target of 1M/s "
            f"({'met' if h['e2e_answers_x_target'] >= 1 else 'missed'}); with the agreement "
            f"column: {_fmt_rate(h['e2e_parquet_f64_rate'])}; from JSONL.gz: "
            f"{_fmt_rate(h['e2e_jsonl_f64_rate'])}.")
    if "e2e_parquet_f64_overhead_s" in h:
        bullets.append(
            f"**Stage sum vs `score_file`** (Parquet, float64): read + pack + kernel + write = "
            f"{h['stage_sum_parquet_f64_s'] * 1e3:,.0f} ms; `score_file` spends "
            f"{h['e2e_parquet_f64_overhead_s'] * 1e3:,.0f} ms more on its own bookkeeping "
            "(see the notes below).")
    for cr in (CHUNK, 65536):
        key = f"big_chunk{cr}"
        if key + "_peak_rss" in h:
            bullets.append(
                f"**1e7 trajectories, `fastuq score`, chunk {cr:,}**: peak RSS "
                f"{h[key + '_peak_rss'] / GIB:.2f} GiB (target < 2 GiB: "
                f"{'met' if h[key + '_under_2gib'] else 'missed'}), "
                f"{_fmt_rate(h[key + '_rate'])} including start-up.")
    lines += [f"- {b}" for b in bullets] + ["", data["table"]]
    if data.get("big_table"):
        source = next((r.get("peak_rss_source") for r in data["big"]
                       if r.get("peak_rss_source")), "?")
        lines += ["", "`python -m fastuq score FILE -o OUT` on 1e7 trajectories (Parquet, "
                  f"{_mb(files.get('big_parquet_bytes'))} MB), in a subprocess; peak RSS of "
                  f"that process from `{source}`; wall time includes interpreter and JAX "
                  "start-up, the scoring time is the one `fastuq score` reports:", "",
                  data["big_table"]]
    spots = hotspot_rows(data)
    if spots:
        lines += ["", "Slow spots in fastuq (not in the stage rows above): pieces of the scorer's "
                  "bookkeeping, ms summed over the whole corpus, beside a vectorised "
                  "equivalent where there is one; `(profile)`: cumulative time in one "
                  "cProfile'd `score_file` call, profiler overhead included.", "",
                  bc.markdown_table(["piece", "where", "ms", "alternative", "ms"], spots,
                                    align=["l", "l", "r", "l", "r"])]
    prof = (data.get("profiles") or {}).get("parquet") or {}
    if prof.get("top"):
        lines += ["", "Most own time in one profiled `score_file` call (Parquet, float64; "
                  f"cProfile, {prof['wall_s'] * 1e3:,.0f} ms with the profiler on):", ""]
        prow = []
        for r in prof["top"][:8]:
            caller = r["callers"][0]["caller"] if r["callers"] else ""
            prow.append([f"`{r['function']}`", r["calls"], _ms(r["tottime_s"]),
                         f"`{caller}`" if caller else ""])
        lines.append(bc.markdown_table(["function", "calls", "own ms", "main caller"], prow,
                                       align=["l", "r", "r", "l"]))
    return "\n".join(lines)


def _watched(data: dict[str, Any], file: str, name: str) -> tuple[int, float] | None:
    """(calls, cumulative s) of fastuq function ``name`` in the profile of ``file``."""
    watch = ((data.get("profiles") or {}).get(file) or {}).get("watch") or {}
    hits = [v for k, v in watch.items() if k.endswith(f"({name})")]
    if not hits:
        return None
    return sum(h["calls"] for h in hits), sum(h["cumtime_s"] for h in hits)


def hotspot_rows(data: dict[str, Any]) -> list[list[str]]:
    hot = data.get("hotspots") or {}
    rows = []
    # Only pieces of the code that runs today (results of older runs that timed the NumPy
    # object-array protocol handling it replaced are not shown).
    specs = [
        ("protocol tally `pc.value_counts(column)`", "`engine/scoring.py` `score_file`",
         "protocol_pc_value_counts_s", "", None),
        ("`Estimator.param_values`: per-trajectory presets from the Arrow protocol column",
         "`engine/registry.py` (every run)", "sauce_params_arrays_arrow_s", "", None),
        ("duplicate-id index `_SeenIds` (polars hash, sorted runs, Bloom prefilter, "
         "log-structured merge)", "`engine/scoring.py`", "seen_ids_s",
         "one sorted array re-sorted every chunk",
         "seen_ids_sorted_queries_s"),
    ]
    for what, where, key, alt, alt_key in specs:
        if key in hot:
            rows.append([what, where, _ms(hot[key]), alt,
                         _ms(hot.get(alt_key)) if alt_key else ""])
    for cr in (CHUNK, 65536):
        key = f"seen_ids_1e7_chunk{cr}_s"
        if key in hot:
            rows.append([f"`_SeenIds` over 1e7 ids in chunks of {cr:,}", "`_score.py`",
                         _ms(hot[key]), "the same written inline",
                         _ms(hot.get(f"seen_ids_sorted_queries_1e7_chunk{cr}_s"))])
    infer = _watched(data, "jsonl", "infer_json_schema")
    if infer:
        rows.append([f"JSON schema inference from the 16 MiB head, {infer[0]}× per "
                     "`score_file` call (the `_available_columns` probe, then `iter_chunks`)",
                     "`_read_json.py` via `_score.py`, `readers.py`",
                     _ms(infer[1]) + " (profile)", "once per file", _ms(infer[1] / infer[0])])
    classes = _watched(data, "noagree", "answer_classes")
    agree = _watched(data, "noagree", "_agreement_from_answers")
    if classes and agree:
        rows.append(["`answer_classes` on each chunk's distinct answers, in "
                     "`Batch._agreement_from_answers`", "`_batch.py`, `answers.py`",
                     _ms(classes[1]) + " (profile)", "whole `_agreement_from_answers`",
                     _ms(agree[1])])
    return rows


def consistency(data: dict[str, Any]) -> list[str]:
    """Row counts, the agreement cross-check, and equal scores across the end-to-end runs."""
    msgs = []
    n = data["config"]["n"]
    side = _find(data["results"], kind="read_side")
    if side:
        for k, c in side["counts"].items():
            if READERS[k][3] not in ("gunzip",) and c != n:
                msgs.append(f"reader {k} returned {c} rows, expected {n}")
    for agree in data["results"]:
        if agree.get("kind") == "agreement" and "median_s" in agree and not agree.get(
                "matches_agreement_column"):
            msgs.append(f"agreement ({agree['variant']}) differs from the corpus's agreement "
                        f"column (max |diff| {agree.get('max_abs_diff_vs_column')})")
    msgs += data.get("score_checks", [])
    msgs += [f"{_label(r)} failed: {r['error']}" for r in data["results"] if "error" in r]
    return msgs


def compare_outputs(results: list[dict[str, Any]]) -> tuple[dict[str, Any], list[str]]:
    """Max |difference| of every end-to-end output's scores from the Parquet float64 run."""
    import pyarrow.parquet as pq

    ref_run = _find(results, kind="e2e", variant="parquet", dtype="float64")
    if ref_run is None:
        return {}, []
    ref = pq.read_table(ref_run["output"])
    out, msgs = {}, []
    for r in results:
        if r.get("kind") != "e2e" or "output" not in r or r is ref_run or "error" in r:
            continue
        other = pq.read_table(r["output"])
        key = f"{r['variant']}_{r['dtype']}"
        if other.num_rows != ref.num_rows or not other.column("trajectory_id").equals(
                ref.column("trajectory_id")):
            msgs.append(f"e2e {key}: rows or ids differ from the Parquet float64 run")
            continue
        diff = float(np.max(np.abs(other.column("sauce").to_numpy()
                                   - ref.column("sauce").to_numpy()), initial=0.0))
        out[key] = diff
        tol = 1e-4 if r["dtype"] == "float32" else 1e-12
        if diff > tol:
            msgs.append(f"e2e {key}: scores differ from the Parquet float64 run by {diff:.3g}")
    return out, msgs


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--quick", action="store_true",
                   help="smoke test: N = 1e5, 3 repeats, no 1e7 run (timed in README); writes "
                        f"{QUICK_OUT.relative_to(bc.REPO_ROOT)} and not the README")
    p.add_argument("--n", type=lambda s: int(float(s)), default=None,
                   help="trajectories in the corpus (default 1e6; --quick 1e5)")
    p.add_argument("--repeats", type=int, default=None, help="timed repeats (default 5)")
    p.add_argument("--big-repeats", type=int, default=1,
                   help="runs of each 1e7 configuration (default 1)")
    p.add_argument("--skip-10m", action="store_true", help="skip the 1e7-trajectory runs")
    p.add_argument("--devices", type=int, default=os.cpu_count() or 1,
                   help="XLA CPU devices for the JAX stages (default: one per core, as "
                        "`fastuq score` uses)")
    p.add_argument("--cache-dir", type=Path, default=DEFAULT_CACHE,
                   help=f"where the corpora are generated once and kept (default {DEFAULT_CACHE})")
    bc.add_output_args(p)
    args = p.parse_args(argv)

    def rebuild(data):
        data["headline"] = headline(data)
        data["table"] = build_table(data)
        data["big_table"] = build_big_table(data)
        return render(data)

    if bc.handled(args, NAME, worker_main, rebuild):
        return

    q = args.quick
    n = args.n or (10**5 if q else 10**6)
    repeats = args.repeats or (3 if q else 5)
    skip_big = args.skip_10m or q
    out_path = args.out or (QUICK_OUT if q else DEFAULT_OUT)
    write_readme = not (q or args.no_readme)
    cache = args.cache_dir
    out_dir = cache / "out"
    out_dir.mkdir(parents=True, exist_ok=True)

    t0 = time.perf_counter()
    machine = bc.machine_info()
    for pkg in ("pyarrow", "polars"):
        machine[pkg] = __import__(pkg).__version__
    _log(f"ingest benchmark, N = {n:,}: corpora in {cache}")
    paths = corpus_paths(cache, n)
    gen = {"parquet_s": ensure_parquet(paths["parquet"], n)}
    gen["jsonl_s"] = ensure_jsonl(paths["jsonl"], paths["parquet"])
    gen["noagree_s"] = ensure_noagree(paths["noagree"], paths["parquet"])
    spaths = {k: str(v) for k, v in paths.items()}
    common = {"paths": spaths, "out_dir": str(out_dir), "n": n}
    results: list[dict[str, Any]] = []

    _log("read (side by side)")
    keys = list(READERS)
    _run({"kind": "read_side", "readers": keys, "repeats": repeats, **common}, results)
    _log("read (peak memory, one call each)")
    for k in keys:
        _run({"kind": "read_mem", "reader": k, **common}, results)
    _log("stages")
    for dt in ("float64", "float32"):
        _run({"kind": "pack", "dtype": dt, "repeats": repeats, **common}, results)
    for variant in ("exact", "scorer"):
        _run({"kind": "agreement", "variant": variant, "repeats": repeats, **common}, results)
    for dt, proto in (("float64", "column"), ("float32", "column"), ("float32", "debate")):
        _run({"kind": "kernel", "dtype": dt, "protocol": proto, "backend": "jax",
              "devices": args.devices, "repeats": repeats, **common}, results)
    _run({"kind": "write", "repeats": repeats, **common}, results)
    _log("end to end")
    for variant, file, dt in (("parquet", "parquet", "float64"),
                              ("parquet", "parquet", "float32"),
                              ("jsonl", "jsonl", "float64"),
                              ("answers_score_file", "noagree", "float64"),
                              ("answers_manual", "noagree", "float64")):
        _run({"kind": "e2e", "variant": variant, "file": file, "dtype": dt,
              "devices": args.devices, "repeats": repeats, **common}, results)
    _log("where score_file's time goes")
    profiles = {f: _run({"kind": "profile", "file": f, "devices": args.devices, **common},
                        results) for f in ("parquet", "noagree", "jsonl")}
    hot = _run({"kind": "hotspots", "repeats": repeats,
                "big_n": None if skip_big else BIG_N, **common}, results)

    big: list[dict[str, Any]] = []
    big_file = None
    if not skip_big:
        big_file = corpus_paths(cache, BIG_N)["parquet"]
        gen["big_parquet_s"] = ensure_parquet(big_file, BIG_N)
        _log(f"1e7 trajectories: fastuq score {big_file}")
        for _ in range(args.big_repeats):
            for cr in BIG_CHUNKS:
                start = time.perf_counter()
                r = run_cli_score(big_file, out_dir / f"big_{cr or CHUNK}.parquet", cr)
                _log(f"  chunk_rows={cr or CHUNK}: {r.get('scoring_s')} s scoring, "
                     f"wall {r['wall_s']:.1f} s, peak RSS {r['peak_rss'] / GIB:.2f} GiB "
                     f"({time.perf_counter() - start:.0f} s)" + (
                         f" ERROR {r['error']}" if "error" in r else ""))
                big.append(r)
    loadavg_end = list(os.getloadavg())

    files = {"parquet": spaths["parquet"], "jsonl": spaths["jsonl"],
             "parquet_bytes": paths["parquet"].stat().st_size,
             "jsonl_bytes": paths["jsonl"].stat().st_size,
             "noagree_bytes": paths["noagree"].stat().st_size, "generation_s": gen}
    side = _find(results, kind="read_side")
    if side and side.get("decompressed_bytes"):
        files["jsonl_decompressed_bytes"] = side["decompressed_bytes"]
    if big_file is not None:
        files["big_parquet"] = str(big_file)
        files["big_parquet_bytes"] = big_file.stat().st_size
    diffs, score_checks = compare_outputs(results)
    data: dict[str, Any] = {
        "benchmark": "ingest",
        "machine": machine,
        "loadavg_end": loadavg_end,
        "config": {"n": n, "protocol": PROTOCOL, "seed": SEED, "repeats": repeats,
                   "big_repeats": args.big_repeats, "chunk_rows": CHUNK,
                   "devices": args.devices, "quick": q, "skip_10m": skip_big,
                   "sauce_optional_columns": SAUCE_OPTIONAL},
        "memory_note": "peak_rss_delta = peak RSS (ru_maxrss, reset via /proc/self/clear_refs "
                       "after warm-up) during the timed calls minus RSS before the inputs "
                       "were prepared; read_mem: one call, minus RSS just before it; peak_rss "
                       "is the process's absolute peak; big: ru_maxrss of the fastuq score "
                       "process from os.wait4",
        "files": files,
        "results": [r for r in results if r["kind"] not in ("profile", "hotspots")],
        "profiles": {f: {k: v for k, v in r.items()
                         if k in ("wall_s", "top", "top_cumulative", "watch", "error")}
                     for f, r in profiles.items()},
        "hotspots": {k: v for k, v in hot.items()
                     if k not in ("paths", "out_dir", "kind", "n", "subprocess_wall_s")},
        "big": big,
        "score_diffs_vs_parquet_f64": diffs,
        "score_checks": score_checks,
        "wall_s": None,
    }
    data["headline"] = headline(data)
    data["checks"] = consistency(data)
    data["table"] = build_table(data)
    data["big_table"] = build_big_table(data)
    data["wall_s"] = time.perf_counter() - t0
    text = render(data)
    print(text)
    for msg in data["checks"]:
        print("WARNING:", msg, file=sys.stderr)
    bc.write_json(out_path, data)
    _log(f"\nwrote {out_path}")
    if write_readme:
        if bc.replace_section(bc.README, NAME, text):
            _log(f"updated the {NAME} section of {bc.README}")
        else:
            _log(f"{bc.README} has no {NAME} markers; not updated")
    _log(f"total {data['wall_s']:.0f} s")


if __name__ == "__main__":
    main()
