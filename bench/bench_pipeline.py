"""Benchmark the scoring pipeline of ``fastuq score``: where a run's time goes, stage by stage,
and end-to-end throughput against the pipeline's throughput targets.

Run from the repository root::

    python bench/bench_pipeline.py --quick          # N = 1e5 corpora, 2 repeats, no 1e7 run
    python bench/bench_pipeline.py                  # 1e6 corpora (targets), the 1e7 profile
                                                    # and the 1e7 CLI runs with their peak RSS
    python bench/bench_pipeline.py --baseline DIR   # the same, end-to-end and 1e7 runs
                                                    # alternating with an older fastuq
    python bench/bench_pipeline.py --only stages --big-n 1e7

``--baseline DIR``: a folder with an older ``fastuq`` package, e.g. ``mkdir DIR && git
archive 64c30ef fastuq kernels | tar -x -C DIR && mv DIR/kernels DIR/fastuq/kernels``
(the kernels live in ``fastuq/kernels`` of an installed package). Its workers run with
``PYTHONPATH=DIR``; each side's output is compared with the other's, bit for bit.

Corpora (``fastuq.synth``, protocol ``mixed``, seed 0, zstd Parquet; written once into
``--cache-dir``, default ``/tmp/fastuq_pipeline``):

  signals   agreement and token_entropy columns (plus answers, seq_logprob, n_tokens:
            the node columns ``check="corpus"`` reads and checks), N = 1e6;
  answers   the same without the agreement column (agreement built from parsed answers);
  topk      ``--topk 5`` (token_logprobs, topk_logprobs; 8 tokens per response), N = 1e6
            unless ``--topk-n``;
  big       signals at N = 1e7, streamed (``--big-n``).

Parts:

  stages    one ``fastuq.score_file`` run (after a warm-up run on the first 2 chunks, so that
            the kernels are compiled) with fastuq's functions wrapped by timers: exclusive
            wall time per stage and per thread (main = the kernels, reader = reading,
            prepare = packing and checks, writer = Parquet output; which threads exist
            depends on the version), the calling thread's CPU time per stage (Arrow's and
            XLA's own threads not included), the run's wall time and its CPU time (user +
            sys, all threads) over its wall time. Serial (every stage on the calling thread,
            one after the other: the work of each) and pipelined (as ``score_file`` runs).
            Stages: read + decode (Parquet to Arrow, ``iter_batches``), conform (casts,
            canonical columns), validate (records, ids, per-round values), derive (agreement
            from answers, entropy from top-k), pack (padded ``[T, N]`` / ``[T, N, A]``
            arrays, parameter arrays), transfer (padding to the bucket, ``device_put``),
            kernel (the jitted call, blocked until ready), copy back (device to NumPy),
            write (Parquet), wait (a thread blocked on the one before it). Also: the raw
            bytes of the column chunks read (``os.pread`` of their ranges from the page
            cache), to split read from decode.
  e2e       ``fastuq.score_file`` on each configuration (``--configs``: signals and
            answers with ``check="corpus"`` (the default) and ``"used"``, ``--method all``
            on top-k), in one process, after a warm-up call of each; every repeat runs every
            configuration once, in turn, so their ratios share the machine's load. Medians.
            Checks every repeat's output is bit-identical to the first. The process tunes
            its allocators as the ``fastuq`` command does (``runtime.tune_allocator``, where
            the version has it).
  big       ``python -m fastuq score BIG -o OUT`` (and with ``--check used``) in a
            subprocess: wall time, the scoring time it reports and its peak RSS
            (``/usr/bin/time -v``).

Targets (reported, not asserted), trajectories/s on the 2-core machine: SAUCE from
Parquet with agreement and entropy columns >= 5e6; from parsed answers >= 3e6; ``--method
all`` on a top-k corpus >= 1e6; peak RSS of the 1e7 run < 2 GiB.
Results: ``bench/results/pipeline[_LABEL].json``; the markdown is printed (the README's
Pipeline subsection quotes it by hand).
"""

from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import sys
import threading
import time
from collections import defaultdict
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
import _common as bc  # noqa: E402

DEFAULT_CACHE = Path("/tmp/fastuq_pipeline")
CHUNK = 1 << 18
TARGETS = {"signals": 5e6, "answers": 3e6, "topk_all": 1e6}  # trajectories/s
GIB = 2**30

STAGES = ("read + decode", "conform", "validate", "derive", "pack", "transfer", "kernel",
          "copy back", "write", "wait", "other")


# ============================================================================ corpora


def _log(msg: str) -> None:
    print(msg, file=sys.stderr, flush=True)


def corpus(cache: Path, kind: str, n: int) -> Path:
    """The cached corpus ``kind`` of ``n`` trajectories (written on first use)."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    from fastuq import synth

    cache.mkdir(parents=True, exist_ok=True)
    path = cache / f"{kind}_n{n}.parquet"
    if path.exists():
        return path
    tmp = path.with_name("." + path.name + ".tmp")
    _log(f"  writing {path}")
    if kind == "signals":
        synth.write(synth.corpus_chunks(n, protocol="mixed", seed=0), tmp)
    elif kind == "topk":
        synth.write(synth.corpus_chunks(n, protocol="mixed", seed=0, topk=5), tmp)
    elif kind == "answers":
        src = pq.ParquetFile(corpus(cache, "signals", n))
        cols = [c for c in src.schema_arrow.names if c != "agreement"]
        synth.write((pa.Table.from_batches([b])
                     for b in src.iter_batches(batch_size=1 << 16, columns=cols)), tmp)
    else:
        raise ValueError(kind)
    os.replace(tmp, path)
    return path


# ============================================================================ stage clock


class StageClock:
    """Exclusive wall time per (thread, stage): a stage entered inside another pauses it."""

    def __init__(self) -> None:
        self.totals: dict[tuple[str, str], float] = defaultdict(float)
        self.cpu: dict[tuple[str, str], float] = defaultdict(float)
        self.calls: dict[tuple[str, str], int] = defaultdict(int)
        self.local = threading.local()
        self.lock = threading.Lock()
        self.patched: list[tuple[object, str, object]] = []
        self.threads: dict[str, float] = {}

    def _stack(self) -> list:
        if not hasattr(self.local, "stack"):
            self.local.stack = []
        return self.local.stack

    def _add(self, stage: str, seconds: float, cpu: float) -> None:
        key = (_thread_kind(), stage)
        with self.lock:
            self.totals[key] += seconds
            self.cpu[key] += cpu

    def enter(self, stage: str) -> None:
        now, cpu = time.perf_counter(), time.thread_time()
        stack = self._stack()
        if stack:
            self._add(stack[-1][0], now - stack[-1][1], cpu - stack[-1][2])
        stack.append([stage, now, cpu])
        with self.lock:
            self.calls[(_thread_kind(), stage)] += 1

    def exit(self) -> None:
        now, cpu = time.perf_counter(), time.thread_time()
        stack = self._stack()
        stage, start, cpu0 = stack.pop()
        self._add(stage, now - start, cpu - cpu0)
        if stack:
            stack[-1][1], stack[-1][2] = now, cpu

    def func(self, fn, stage: str):
        clock = self

        def wrapped(*args, **kwargs):
            clock.enter(stage)
            try:
                return fn(*args, **kwargs)
            finally:
                clock.exit()

        wrapped.__wrapped__ = fn
        return wrapped

    def gen(self, fn, stage: str):
        """A generator function whose every ``next`` is timed under ``stage``."""
        clock = self

        def wrapped(*args, **kwargs):
            inner = fn(*args, **kwargs)
            while True:
                clock.enter(stage)
                try:
                    item = next(inner)
                except StopIteration:
                    return
                finally:
                    clock.exit()
                yield item

        wrapped.__wrapped__ = fn
        return wrapped

    def patch(self, owner, attr: str, stage: str, kind: str = "func") -> bool:
        fn = getattr(owner, attr, None)
        if fn is None:
            return False
        self.patched.append((owner, attr, fn))
        setattr(owner, attr, (self.gen if kind == "gen" else self.func)(fn, stage))
        return True

    def restore(self) -> None:
        for owner, attr, fn in reversed(self.patched):
            setattr(owner, attr, fn)
        self.patched.clear()


def _thread_kind() -> str:
    name = threading.current_thread().name
    if threading.current_thread() is threading.main_thread():
        return "main"
    if "prepare" in name:
        return "prepare"
    if "prefetch" in name or "read" in name:
        return "reader"
    if "writ" in name:
        return "writer"
    return "other threads"


class _Timed:
    """A device array whose conversion to NumPy is timed as ``copy back``."""

    def __init__(self, value, clock: StageClock) -> None:
        self.value, self.clock = value, clock

    def __array__(self, dtype=None, copy=None):
        self.clock.enter("copy back")
        try:
            out = np.asarray(self.value)
        finally:
            self.clock.exit()
        return out if dtype is None else out.astype(dtype, copy=False)

    def __getattr__(self, name):
        return getattr(self.value, name)


def _engine(*names: str):
    """The first of the ``fastuq.engine`` modules ``names`` that this version has (the code
    of ``scoring.py`` moved to ``methods``, ``checks``, ``pipeline`` and ``files``)."""
    import importlib

    for name in names:
        try:
            return importlib.import_module(f"fastuq.engine.{name}")
        except ImportError:
            continue
    raise ImportError(f"fastuq.engine has none of {names}")


def instrument(clock: StageClock) -> None:
    """Wrap fastuq's stage functions (those that exist in this version) with ``clock``."""
    import jax
    import pyarrow.parquet as pq

    import fastuq.engine.batch as batch
    import fastuq.engine.inputs as inputs
    import fastuq.engine.registry as registry
    import fastuq.engine.runtime as runtime
    import fastuq.engine.scoring as scoring
    import fastuq.io.pack as pack
    import fastuq.io.readers as readers
    import fastuq.io.schema as schema
    import fastuq.io.writers as writers
    import fastuq.signals as signals

    clock.patch(pq.ParquetFile, "iter_batches", "read + decode", "gen")
    clock.patch(readers, "_rechunk", "read + decode", "gen")
    clock.patch(readers, "iter_chunks", "conform", "gen")  # its own time: casts, combine
    clock.patch(schema, "conform", "conform")
    clock.patch(schema, "validate", "validate")
    checks = _engine("checks", "scoring")
    seen_ids = getattr(checks, "SeenIds", None) or getattr(checks, "_SeenIds", None)
    if seen_ids is not None:
        clock.patch(seen_ids, "repeats", "validate")
        clock.patch(seen_ids, "add", "validate")
    for name in ("validate_rounds", "_same_rounds", "node_confidence", "_check_empty"):
        clock.patch(inputs, name, "validate")
    for name in ("_agreement_from_answers", "vote_classes"):
        clock.patch(batch.Batch, name, "derive")
    clock.patch(signals, "token_entropy_from_topk", "derive")
    for owner in (batch, pack):
        clock.patch(owner, "pack_lists", "pack")
        clock.patch(owner, "pack_nodes", "pack")
    clock.patch(batch.Batch, "column", "pack")
    clock.patch(registry.Estimator, "param_values", "pack")
    clock.patch(runtime, "_pad_axis", "transfer")
    clock.patch(jax, "device_put", "transfer")
    clock.patch(writers.AtomicParquetWriter, "write", "write")
    clock.patch(writers.AtomicParquetWriter, "close", "write")
    clock.patch(_engine("pipeline", "scoring"), "_prefetch", "wait", "gen")
    if hasattr(runtime, "tune_allocator"):  # as the fastuq command does
        runtime.tune_allocator()
    for name in ("_pack_chunk", "_score_chunk"):  # hooks of later versions, where present
        if hasattr(scoring, name):
            pass

    per_device = runtime.per_device

    def timed_per_device(fn, axes, **kwargs):
        run = per_device(fn, axes, **kwargs)

        def call(*args):
            clock.enter("kernel")
            try:
                res = jax.block_until_ready(run(*args))
            finally:
                clock.exit()
            return {k: _Timed(v, clock) for k, v in res.items()}

        return call

    clock.patched.append((runtime, "per_device", per_device))
    runtime.per_device = timed_per_device


def _serialise(clock: StageClock) -> None:
    """Run every stage on the calling thread, one after the other (no prefetch, no writer
    thread): the stage times are then the work each stage does, without overlap."""
    scoring = _engine("pipeline", "scoring")  # where the pipeline's threads start

    for name in ("_prefetch", "_background"):
        fn = getattr(scoring, name, None)
        if fn is not None:
            clock.patched.append((scoring, name, fn))
            setattr(scoring, name, _inline(name))
    if hasattr(scoring, "PIPELINE_THREADS"):
        clock.patched.append((scoring, "PIPELINE_THREADS", scoring.PIPELINE_THREADS))
        scoring.PIPELINE_THREADS = False


def _inline(name: str):
    def prefetch(iterator, depth: int = 1, name: str = ""):
        yield from iterator

    return prefetch


def _column_bytes(path: Path, columns: list[str] | None) -> list[tuple[int, int]]:
    """Byte ranges of the column chunks of ``columns`` (all: None) in a Parquet file."""
    import pyarrow.parquet as pq

    md = pq.ParquetFile(path).metadata
    out = []
    for g in range(md.num_row_groups):
        rg = md.row_group(g)
        for c in range(rg.num_columns):
            cc = rg.column(c)
            if columns is None or cc.path_in_schema.split(".")[0] in columns:
                start = cc.dictionary_page_offset or cc.data_page_offset
                if cc.dictionary_page_offset is not None:
                    start = min(start, cc.data_page_offset)
                out.append((start, cc.total_compressed_size))
    return out


def raw_read_seconds(path: Path, columns: list[str] | None) -> tuple[float, int]:
    """``os.pread`` of the column chunks' bytes (page cache): the read part of read + decode."""
    ranges = _column_bytes(path, columns)
    fd = os.open(path, os.O_RDONLY)
    try:
        for off, size in ranges:  # warm the page cache
            os.pread(fd, size, off)
        start = time.perf_counter()
        for off, size in ranges:
            os.pread(fd, size, off)
        return time.perf_counter() - start, sum(s for _, s in ranges)
    finally:
        os.close(fd)


def _read_columns(src: Path, methods: str, check: str) -> list[str] | None:
    found = _engine("methods", "scoring")
    columns_for = getattr(found, "corpus_columns", None) or found._columns_for
    cols = columns_for(methods, {}, str(src), check)
    return None if cols is None else ["trajectory_id", *cols]


def worker_stages(spec: dict[str, Any]) -> dict[str, Any]:
    import fastuq

    fastuq.use_cpu_devices(spec["devices"])
    import pyarrow.parquet as pq

    src = Path(spec["src"])
    out = Path(spec["out_dir"]) / f"stages_{src.stem}.parquet"
    kw = dict(methods=spec["methods"], check=spec["check"], chunk_rows=spec["chunk_rows"])
    warm = pq.ParquetFile(src).read_row_groups([0]).slice(0, 2 * spec["chunk_rows"])
    fastuq.score_file(warm, out, **kw)  # compiles the bucket
    clock = StageClock()
    instrument(clock)
    if spec.get("serial"):
        _serialise(clock)
    try:
        cpu0, start = os.times(), time.perf_counter()
        report = fastuq.score_file(str(src), out, **kw)
        wall = time.perf_counter() - start
        cpu1 = os.times()
    finally:
        clock.restore()
    cpu = (cpu1.user - cpu0.user) + (cpu1.system - cpu0.system)
    cols = _read_columns(src, spec["methods"], spec["check"])
    raw_s, raw_bytes = raw_read_seconds(src, cols)
    totals: dict[str, dict[str, float]] = defaultdict(dict)
    cpu_by: dict[str, dict[str, float]] = defaultdict(dict)
    for (thread, stage), secs in clock.totals.items():
        totals[stage][thread] = secs
        cpu_by[stage][thread] = clock.cpu[(thread, stage)]
    return {"n": report.n_rows, "wall_s": wall, "cpu_s": cpu, "totals": totals,
            "thread_cpu": cpu_by, "load": os.getloadavg(),
            "calls": {f"{t}/{s}": c for (t, s), c in clock.calls.items()},
            "raw_read_s": raw_s, "raw_read_bytes": raw_bytes, "columns": cols}


# ============================================================================ end to end


def worker_e2e(spec: dict[str, Any]) -> dict[str, Any]:
    import fastuq

    fastuq.use_cpu_devices(spec["devices"])
    import pyarrow.parquet as pq

    import fastuq.engine.runtime as runtime

    if hasattr(runtime, "tune_allocator"):  # as the fastuq command does
        runtime.tune_allocator()
    configs = spec["configs"]
    times: dict[str, list[float]] = {c["name"]: [] for c in configs}
    digests: dict[str, list[str]] = {c["name"]: [] for c in configs}
    rows: dict[str, int] = {}
    for rnd in range(spec["repeats"] + 1):
        for c in configs:
            out = Path(spec["out_dir"]) / f"e2e_{c['name']}.parquet"
            start = time.perf_counter()
            rep = fastuq.score_file(c["src"], out, methods=c["methods"], check=c["check"],
                                    chunk_rows=spec["chunk_rows"])
            elapsed = time.perf_counter() - start
            rows[c["name"]] = rep.n_rows
            if rnd:
                times[c["name"]].append(elapsed)
            t = pq.read_table(out)
            digests[c["name"]].append(_digest(t))
    return {"times_s": times, "median_s": {k: bc.median(v) for k, v in times.items()},
            "rows": rows, "identical_across_repeats": {k: len(set(v)) == 1
                                                       for k, v in digests.items()},
            "digest": {k: v[0] for k, v in digests.items()}}


def _digest(table) -> str:
    import hashlib

    h = hashlib.sha256()
    for name in table.column_names:
        col = table.column(name).combine_chunks()
        h.update(name.encode())
        if name == "trajectory_id":
            h.update("\x00".join(col.to_pylist()).encode())
        else:
            h.update(np.ascontiguousarray(col.to_numpy(zero_copy_only=False)).tobytes())
    return h.hexdigest()


# ============================================================================ 1e7 CLI run


def run_cli(path: Path, out: Path, extra: list[str], timeout: float = 1800,
            env: dict[str, str] | None = None) -> dict[str, Any]:
    cmd = [sys.executable, "-m", "fastuq", "score", str(path), "-o", str(out),
           "--no-progress", *extra]
    full = ["/usr/bin/time", "-v", *cmd] if Path("/usr/bin/time").exists() else cmd
    start = time.perf_counter()
    # run outside the repository, so that PYTHONPATH (e.g. an older checkout to compare
    # with) decides which fastuq is imported, not the current directory
    proc = subprocess.run(full, capture_output=True, text=True, timeout=timeout,
                          cwd=out.parent, env=env)
    wall = time.perf_counter() - start
    res: dict[str, Any] = {"command": " ".join(cmd[1:]), "wall_s": wall,
                           "returncode": proc.returncode}
    m = re.search(r"Maximum resident set size \(kbytes\): (\d+)", proc.stderr)
    if m:
        res["peak_rss"] = int(m.group(1)) * 1024
    for key, pat in (("user_s", r"User time \(seconds\): ([\d.]+)"),
                     ("sys_s", r"System time \(seconds\): ([\d.]+)")):
        mm = re.search(pat, proc.stderr)
        if mm:
            res[key] = float(mm.group(1))
    m = re.search(r"scored ([\d,]+) trajectories in ([\d.]+) s", proc.stderr)
    if m:
        res["n_rows"] = int(m.group(1).replace(",", ""))
        res["scoring_s"] = float(m.group(2))
    if proc.returncode:
        res["error"] = proc.stderr[-2000:]
    return res


# ============================================================================ driver


def _run(kind: str, spec: dict[str, Any]) -> dict[str, Any]:
    return bc.run_worker(SCRIPT, {"kind": kind, **spec})


SCRIPT = Path(__file__).resolve()
WORKERS = {"stages": worker_stages, "e2e": worker_e2e}


def stage_table(res: dict[str, Any]) -> str:
    n = res["n"]
    threads = ["main", "reader", "prepare", "writer", "other threads"]
    present = [t for t in threads if any(t in v for v in res["totals"].values())]
    head = ["stage", *[f"{t} ms" for t in present], "ms / 1e6 (all threads)",
            "CPU ms / 1e6"]
    rows = []
    for stage in STAGES:
        per = res["totals"].get(stage, {})
        if stage == "other":
            continue
        if not per:
            continue
        tot = sum(per.values())
        cpu = sum(res.get("thread_cpu", {}).get(stage, {}).values())
        rows.append([stage, *[_ms(per.get(t)) for t in present], _ms(tot * 1e6 / n),
                     _ms(cpu * 1e6 / n)])
    rows.append(["wall (run)", *[""] * len(present), _ms(res["wall_s"] * 1e6 / n),
                 _ms(res["cpu_s"] * 1e6 / n)])
    table = bc.markdown_table(head, rows)
    raw = res["raw_read_s"]
    return (f"{table}\n\nN = {n:,}; wall {res['wall_s']:.2f} s = "
            f"{n / res['wall_s'] / 1e6:.2f}M trajectories/s; CPU (all threads) "
            f"{res['cpu_s']:.2f} s = {res['cpu_s'] / res['wall_s']:.2f} cores busy; raw read "
            f"of the {res['raw_read_bytes'] / 1e6:,.0f} MB of column chunks: "
            f"{raw * 1e3:.0f} ms (the rest of read + decode is decoding).")


def _ms(s: float | None) -> str:
    return "" if s is None else f"{s * 1e3:,.0f}"


def _e2e_configs(args, n: int) -> list[dict[str, Any]]:
    topk_n = args.topk_n or (n if args.quick else 1_000_000)
    want = args.configs.split(",")
    configs = [
        {"name": "signals", "kind": "signals", "methods": "sauce", "check": "corpus"},
        {"name": "signals_used", "kind": "signals", "methods": "sauce", "check": "used"},
        {"name": "answers", "kind": "answers", "methods": "sauce", "check": "corpus"},
        {"name": "answers_used", "kind": "answers", "methods": "sauce", "check": "used"},
        {"name": "topk_all", "kind": "topk", "methods": "all", "check": "corpus"},
    ]
    out = []
    for c in configs:
        if c["name"] in want:
            size = topk_n if c["kind"] == "topk" else n
            out.append({**c, "src": str(corpus(args.cache_dir, c["kind"], size))})
    return out


def _e2e_table(res: dict[str, Any], configs, base: dict[str, Any] | None = None) -> str:
    rows = []
    for c in configs:
        name = c["name"]
        med = res["median_s"][name]
        rate = res["rows"][name] / med
        target = TARGETS.get(name.removesuffix("_used"))
        row = [name, c["check"], f"{res['rows'][name]:,}"]
        if base is not None:
            b = base["median_s"][name]
            row += [f"{b * 1e3:,.0f}", f"{base['rows'][name] / b / 1e6:.2f}M"]
        row += [f"{med * 1e3:,.0f}", f"{rate / 1e6:.2f}M",
                f"{target / 1e6:g}M" if target else "", f"{rate / target:.2f}" if target else "",
                "yes" if res["identical_across_repeats"][name] else "NO"]
        if base is not None:
            row.insert(-1, f"{b / med:.2f}x")
            row[-1] = "yes" if res["digest"][name] == base["digest"][name] else "NO"
        rows.append(row)
    head = ["config", "check", "N"]
    if base is not None:
        head += ["before ms", "before traj/s"]
    head += ["median ms", "traj/s", "target", "x target"]
    head += ["speed-up", "same bits as before"] if base is not None else ["same bits"]
    return bc.markdown_table(head, rows)


def _ab(args, configs, common, rounds: int) -> tuple[dict[str, Any], dict[str, Any]]:
    """The e2e worker of the baseline checkout and of this one, alternating, ``rounds``
    times (one timed repeat each after their warm-up): medians per side."""
    sides: dict[str, dict[str, Any]] = {}
    for r in range(rounds):
        for side, env in (("before", {"PYTHONPATH": str(args.baseline)}),
                          ("after", {"PYTHONPATH": os.environ.get("PYTHONPATH", "")})):
            _log(f"e2e {side}, round {r + 1}/{rounds} (load {os.getloadavg()[0]:.2f})")
            res = bc.run_worker(SCRIPT, {"kind": "e2e", **common, "configs": configs,
                                         "repeats": 1}, env=env)
            if "error" in res:
                raise RuntimeError(f"{side}: {res['error']}")
            got = sides.setdefault(side, {"times_s": {}, "rows": res["rows"],
                                          "digest": res["digest"], "fastuq": res["fastuq"],
                                          "identical_across_repeats": {}})
            for name, t in res["times_s"].items():
                got["times_s"].setdefault(name, []).extend(t)
                same = got["digest"][name] == res["digest"][name] and \
                    res["identical_across_repeats"][name]
                got["identical_across_repeats"][name] = \
                    got["identical_across_repeats"].get(name, True) and same
    for got in sides.values():
        got["median_s"] = {k: bc.median(v) for k, v in got["times_s"].items()}
    return sides["before"], sides["after"]


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--quick", action="store_true")
    p.add_argument("--only", choices=("stages", "e2e", "big"), action="append")
    p.add_argument("--n", type=lambda s: int(float(s)), default=None)
    p.add_argument("--big-n", type=lambda s: int(float(s)), default=10_000_000)
    p.add_argument("--topk-n", type=lambda s: int(float(s)), default=None)
    p.add_argument("--repeats", type=int, default=None)
    p.add_argument("--devices", type=int, default=os.cpu_count() or 1)
    p.add_argument("--chunk-rows", type=int, default=CHUNK)
    p.add_argument("--check", default="corpus", help="check of the stage profiles")
    p.add_argument("--cache-dir", type=Path, default=DEFAULT_CACHE)
    p.add_argument("--label", default="")
    p.add_argument("--configs", default="signals,signals_used,answers,topk_all",
                   help="end-to-end configurations to run (comma-separated; also "
                        "answers_used)")
    p.add_argument("--baseline", type=Path, default=None,
                   help="a folder holding an older fastuq package (fastuq/, with its "
                        "kernels as fastuq/kernels): the end-to-end and 1e7 runs then "
                        "alternate between it and this checkout, and compare their bits")
    p.add_argument("--worker", help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    if args.worker:
        import fastuq

        spec = json.loads(args.worker)
        bc.emit_result({**spec, **WORKERS[spec["kind"]](spec), "fastuq": fastuq.__file__})
        return
    n = args.n or (100_000 if args.quick else 1_000_000)
    reps = args.repeats or (2 if args.quick else 5)
    parts = args.only or (["stages", "e2e"] if args.quick else ["stages", "e2e", "big"])
    out_dir = args.cache_dir / "out"
    out_dir.mkdir(parents=True, exist_ok=True)
    data: dict[str, Any] = {"machine": bc.machine_info(), "n": n, "repeats": reps,
                            "load_start": os.getloadavg(),
                            "pythonpath": os.environ.get("PYTHONPATH", ""),
                            "baseline": str(args.baseline) if args.baseline else None}
    common = {"devices": args.devices, "out_dir": str(out_dir),
              "chunk_rows": args.chunk_rows}
    if "stages" in parts:
        for kind, methods in (("signals", "sauce"), ("answers", "sauce")):
            src = corpus(args.cache_dir, kind, n)
            _log(f"stages: {kind} (load {os.getloadavg()[0]:.2f})")
            for serial in (True, False):
                res = _run("stages", {**common, "src": str(src), "methods": methods,
                                      "check": args.check, "serial": serial})
                how = "serial" if serial else "pipelined"
                data[f"stages_{kind}_{how}"] = res
                print(f"\n#### stages, {kind}, {how}, N = {n:,} (load {os.getloadavg()})\n")
                print(stage_table(res))
        if not args.quick and "big" in parts:
            src = corpus(args.cache_dir, "signals", args.big_n)
            _log(f"stages: big (load {os.getloadavg()[0]:.2f})")
            for serial in (True, False):
                res = _run("stages", {**common, "src": str(src), "methods": "sauce",
                                      "check": args.check, "serial": serial})
                how = "serial" if serial else "pipelined"
                data[f"stages_big_{how}"] = res
                print(f"\n#### stages, signals, {how}, N = {args.big_n:,} "
                      f"(load {os.getloadavg()})\n")
                print(stage_table(res))
    if "e2e" in parts:
        configs = _e2e_configs(args, n)
        load0 = os.getloadavg()
        if args.baseline:
            base, res = _ab(args, configs, common, reps)
            data["e2e_before"] = base
        else:
            _log(f"e2e (load {load0[0]:.2f})")
            res = _run("e2e", {**common, "configs": configs, "repeats": reps})
            base = None
        data["e2e"] = res
        print(f"\n#### end to end (load {load0} at start, {os.getloadavg()} at end)\n")
        print(_e2e_table(res, configs, base))
    if "big" in parts and not args.quick:
        src = corpus(args.cache_dir, "signals", args.big_n)
        here = os.environ.get("PYTHONPATH", "")  # this checkout, or what PYTHONPATH names
        sides = [("after", here)] + ([("before", str(args.baseline))] if args.baseline else [])
        for extra in ([], ["--check", "used"]):
            for side, path in sides:
                _log(f"big {side} {' '.join(extra)} (load {os.getloadavg()[0]:.2f})")
                env = dict(os.environ, PYTHONPATH=path)
                res = run_cli(src, out_dir / f"big_{side}.parquet", extra, env=env)
                res["load"] = os.getloadavg()
                data[f"big_{side}{'_used' if extra else ''}"] = res
                print(f"\n#### `fastuq score {' '.join(extra)}` on {args.big_n:,}, {side} "
                      f"(load {res['load']})\n")
                print(json.dumps(res, indent=1))
    data["load_end"] = os.getloadavg()
    suffix = "_quick" if args.quick else ""
    path = bc.RESULTS_DIR / f"pipeline{suffix}{'_' + args.label if args.label else ''}.json"
    if args.quick:
        path = path.with_suffix(".json.tmp")
    bc.write_json(path, data)
    _log(f"wrote {path}")


if __name__ == "__main__":
    main()
