"""Benchmark ``--on-error skip``: a corpus with 2% bad records against the same corpus clean,
and the memory of the cross-chunk id-uniqueness check.

Run from the repository root::

    python bench/bench_skip.py             # N = 114,000 (the corpus that asked for skipping)
    python bench/bench_skip.py --quick     # N = 20,000, < 60 s

Corpus: ``fastuq.synth.corpus(N, protocol="mixed", seed=0, topk=0)`` restricted to the
columns SAUCE reads, as Parquet. The bad copy spoils 2% of the records at random positions
(seed 1), in equal parts: an agreement outside [0, 1], a negative token entropy, a null
protocol, a trajectory id repeating an earlier record's, and ``n_agents`` = 0. Timed (median
of ``--repeats``, after one warm-up run each, the three runs interleaved so that their ratios
share the machine's load; one process, JAX on the host's CPU devices):

  clean raise   ``fastuq.score_file(clean)``: the default, stop at the first bad record
  clean skip    ``fastuq.score_file(clean, on_error="skip")``
  2% bad skip   ``fastuq.score_file(bad, on_error="skip")``: the target is at most 1.5x
                ``clean raise``

Memory of the id check (``fastuq.engine.checks.SeenIds``): ids ``t0000000..`` in a random
order (seed 1; ids in increasing order are checked without an index, which then holds
nothing) fed in chunks of 262,144, the peak of ``tracemalloc`` (NumPy reports its buffers
to it) during the feeding and what the object holds at the end, per trajectory; and its
speed: ids ``0..N-1`` in a random order (seed 0) fed in chunks of 65,536, ids/s for each N of
``--speed-n`` (default 1e6, 4e6, 1.6e7; ``--quick`` 1e6), to show the growth with N (a
log-structured merge: O(N log N)).

Prints a markdown table and writes ``bench/results/skip.json``.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
import tracemalloc
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import RESULTS_DIR, machine_info, markdown_table  # noqa: E402

COLUMNS = ["trajectory_id", "question_id", "protocol", "n_agents", "correct", "agreement",
           "token_entropy"]


def make_corpora(n: int, folder: Path) -> tuple[Path, Path, int]:
    from fastuq.synth import corpus

    table = corpus(n, protocol="mixed", seed=0, topk=0).select(COLUMNS)
    clean = folder / "clean.parquet"
    pq.write_table(table, clean)
    rng = np.random.default_rng(1)
    bad_rows = np.sort(rng.choice(np.arange(1, n), int(0.02 * n), replace=False))
    kinds = np.arange(len(bad_rows)) % 5
    cols = {c: table.column(c).to_pylist() for c in ("trajectory_id", "protocol", "n_agents",
                                                      "agreement", "token_entropy")}
    for row, kind in zip(bad_rows.tolist(), kinds.tolist(), strict=True):
        if kind == 0:
            cols["agreement"][row] = [1.5] + cols["agreement"][row][1:]
        elif kind == 1:
            cols["token_entropy"][row] = [-1.0] + cols["token_entropy"][row][1:]
        elif kind == 2:
            cols["protocol"][row] = None
        elif kind == 3:
            cols["trajectory_id"][row] = cols["trajectory_id"][row - 1]
        else:
            cols["n_agents"][row] = 0
    bad_table = table
    for name, values in cols.items():
        i = bad_table.schema.get_field_index(name)
        bad_table = bad_table.set_column(i, bad_table.schema.field(i),
                                         pa.array(values, bad_table.schema.field(i).type))
    bad = folder / "bad.parquet"
    pq.write_table(bad_table, bad)
    return clean, bad, len(bad_rows)


def time_interleaved(fns: dict, repeats: int) -> dict[str, float]:
    """Median seconds per function; every repeat runs each function once, in turn, so their
    ratios share the machine's load."""
    for fn in fns.values():
        fn()
    times: dict[str, list[float]] = {k: [] for k in fns}
    for _ in range(repeats):
        for label, fn in fns.items():
            start = time.perf_counter()
            fn()
            times[label].append(time.perf_counter() - start)
    return {k: float(np.median(v)) for k, v in times.items()}


def seen_memory(n: int, chunk: int = 1 << 18) -> dict:
    from fastuq.engine.checks import SeenIds as _SeenIds

    ids = pa.array([f"t{k:09d}" for k in np.random.default_rng(1).permutation(n)])
    seen = _SeenIds()
    tracemalloc.start()
    base = tracemalloc.get_traced_memory()[0]
    for start in range(0, n, chunk):
        part = ids.slice(start, chunk)
        if hasattr(seen, "repeats"):
            seen.repeats(part)
            seen.add(part, start, "ids", start)
        else:  # the implementation before this benchmark
            seen.first_repeat(part)
            seen.add(part)
    held, peak = tracemalloc.get_traced_memory()
    tracemalloc.stop()
    if hasattr(seen, "close"):
        seen.close()
    return {"n": n, "held_bytes_per_traj": (held - base) / n,
            "peak_bytes_per_traj": (peak - base) / n}


def seen_speed(n: int, chunk: int = 1 << 16) -> dict:
    """Seconds and ids/s of the id-uniqueness check over ``n`` distinct ids."""
    from fastuq.engine.checks import SeenIds as _SeenIds

    ids = pc.cast(pa.array(np.random.default_rng(0).permutation(n)), pa.string())
    seen = _SeenIds()
    start = time.perf_counter()
    for s in range(0, n, chunk):
        part = ids.slice(s, chunk)
        seen.repeats(part)
        seen.add(part, s, "ids", s)
    sec = time.perf_counter() - start
    seen.close()
    return {"n": n, "chunk": chunk, "seconds": sec, "ids_per_s": n / sec}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="N = 20,000")
    ap.add_argument("--n", type=int, help="trajectories (default 114,000)")
    ap.add_argument("--repeats", type=int, default=7)
    ap.add_argument("--memory-n", type=int, default=2_000_000,
                    help="ids fed to the uniqueness check (default 2e6; --quick 5e5)")
    ap.add_argument("--speed-n", default="1e6,4e6,1.6e7",
                    help="comma-separated N for the id check's speed (--quick: 1e6)")
    ap.add_argument("--dir", default="/tmp/fastuq_bench_skip")
    args = ap.parse_args()
    n = args.n or (20_000 if args.quick else 114_000)
    mem_n = 500_000 if args.quick else args.memory_n

    import fastuq

    fastuq.use_cpu_devices()
    folder = Path(args.dir)
    folder.mkdir(parents=True, exist_ok=True)
    clean, bad, n_bad = make_corpora(n, folder)
    out = folder / "scores.parquet"

    def run(path, **kw):
        return lambda: fastuq.score_file(path, out, **kw)

    rows = []
    times = time_interleaved({"clean raise": run(clean),
                              "clean skip": run(clean, on_error="skip"),
                              "2% bad skip": run(bad, on_error="skip")}, args.repeats)
    report = fastuq.score_file(bad, out, on_error="skip")
    conserved = report.n_rows + len(report.skipped) == n
    if not conserved:
        print(f"WARNING: {report.n_rows:,} scored + {len(report.skipped):,} skipped != {n:,}")
    assert pc.sum(pc.is_nan(pq.read_table(out)["sauce"])).as_py() == 0
    for label, sec in times.items():
        rows.append([label, f"{n:,}", f"{sec:.3f}", f"{n / sec:,.0f}",
                     f"{sec / times['clean raise']:.2f}x"])
    table = markdown_table(["run", "records", "seconds (median)", "records/s", "vs clean raise"],
                           rows)
    mem = seen_memory(mem_n)
    print(f"skip: {n:,} records, {n_bad:,} spoiled ({len(report.skipped):,} skipped: a "
          f"duplicate's first occurrence stays)\n")
    print(table)
    print(f"\nid uniqueness check over {mem_n:,} ids: holds {mem['held_bytes_per_traj']:.1f} "
          f"bytes/trajectory, peak {mem['peak_bytes_per_traj']:.1f} bytes/trajectory")
    speed = [seen_speed(int(float(x))) for x in ("1e6" if args.quick
                                                  else args.speed_n).split(",")]
    print("\n" + markdown_table(["ids", "seconds", "ids/s"], [
        [f"{r['n']:,}", f"{r['seconds']:.2f}", f"{r['ids_per_s']:,.0f}"] for r in speed]))
    RESULTS_DIR.mkdir(exist_ok=True)
    (RESULTS_DIR / "skip.json").write_text(json.dumps({
        "machine": machine_info(), "n": n, "n_spoiled": n_bad, "n_skipped": len(report.skipped),
        "seconds": times, "ratio_bad_vs_clean": times["2% bad skip"] / times["clean raise"],
        "seen_ids": mem, "seen_ids_speed": speed, "rows_conserved": conserved,
    }, indent=2) + "\n")


if __name__ == "__main__":
    main()
