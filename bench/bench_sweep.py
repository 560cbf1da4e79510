"""Benchmark ``fastuq.sweep``: a SAUCE parameter grid with exact AUROC + AUARC per point,
against the naive loop.

Run from the repository root::

    python bench/bench_sweep.py            # full run (a few minutes), writes
                                           # bench/results/sweep.json
    python bench/bench_sweep.py --quick    # smoke test (timed in README), writes a *.tmp only
    python bench/bench_sweep.py --rank-cost  # CPU ms per column of the ranking, and of the
                                             # sorts tried in its place (prints only)

Workload (full run): ``fastuq.synth.corpus(1_000_000, protocol="debate", seed=0)``, T = 3,
packed once to float32 ``[T, N]``; a 32 x 32 grid of ``lam`` in linspace(0.5, 1, 32) and
``q`` in geomspace(1e-3, 1, 32) (sigma2_0, mu_0 from the debate preset): 1,024 grid points,
each scored over all 1e6 trajectories, each with its exact AUROC and AUARC.

Methods:

  naive   per grid point: the NumPy twin ``sauce_scan_numpy`` (float32), then
          ``sklearn.metrics.roc_auc_score(correct, -score)`` and a NumPy AUARC (stable
          ``np.argsort``, cumsum). At ~0.5 s a point the full grid would take ~10 minutes,
          so it is timed on a random subset of grid points (4 per segment, 16 in all) and
          the median time per point is extrapolated to the whole grid (the output says so).
  fastuq  ``fastuq.sweep`` on the packed arrays: blocks of grid points scored at once
          by the jitted kernel (``jax.vmap`` over the parameters), each score row ranked
          exactly from one sort of packed 64-bit keys on a thread pool (one per core).

Fairness on a shared machine: the grid is swept in ``--segments`` calls (4 calls of 8 lam
values x 32 q values), each followed by the naive loop on 4 points of that segment, so both
methods sample the same background load. fastuq's time is the sum of its calls (the first
compiles; every call validates and transfers the corpus again and ranks the presets, which
a single call would do once). ``--single-call`` also times the whole grid in one call,
with all threads and with one. The metrics of the naive points are compared with the
sweep's rows for the same points (max absolute difference; float32 scores from two
different programs may differ in the last bit, which can swap near-equal scores).
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
import _common as bc  # noqa: E402

NAME = "sweep"
DEFAULT_OUT = bc.RESULTS_DIR / "sweep.json"
QUICK_OUT = bc.RESULTS_DIR / "sweep_quick.json.tmp"


def load_arrays(n: int, seed: int = 0) -> tuple[np.ndarray, ...]:
    """The simulated debate corpus packed to float32 ``(agreement, entropy, mask, correct)``."""
    import fastuq.synth
    from fastuq.engine.batch import Batch

    table = fastuq.synth.corpus(n, protocol="debate", seed=seed)
    batch = Batch(table, dtype=np.float32)
    a, mask = batch.rounds("agreement")
    h, _ = batch.rounds("token_entropy")
    y = batch.correct()
    a = np.where(mask, a, 0).astype(np.float32)
    h = np.where(mask, h, 0).astype(np.float32)
    return a, h, mask, y


def naive_point(a, h, mask, y, lam: float, q: float) -> tuple[float, float, float]:
    """One grid point the naive way: ``(seconds, auroc, auarc)``."""
    from sklearn.metrics import roc_auc_score

    from fastuq.kernels.sauce import SauceParams, sauce_scan_numpy

    start = time.perf_counter()
    score = sauce_scan_numpy(a, h, mask, SauceParams(lam, q, 0.25, 0.0))["score"]
    auroc = roc_auc_score(y, -score)
    order = np.argsort(score, kind="stable")
    ys = y[order].astype(np.float64)
    auarc = float(np.mean(np.cumsum(ys) / np.arange(1, ys.size + 1)))
    return time.perf_counter() - start, float(auroc), auarc


def run(args: argparse.Namespace) -> dict[str, Any]:
    import fastuq.sweeps as fsweep

    q = args.quick
    n = args.n or (100_000 if q else 1_000_000)
    side = args.side or (8 if q else 32)
    segments = args.segments or 4
    per_segment = args.naive_per_segment or (2 if q else 4)
    if side % segments:
        raise SystemExit(f"--segments ({segments}) must divide --side ({side})")
    info = bc.machine_info()
    t0 = time.perf_counter()
    print(f"corpus: {n:,} debate trajectories ...", file=sys.stderr, flush=True)
    a, h, mask, y = load_arrays(n)
    corpus_s = time.perf_counter() - t0
    lams = np.linspace(0.5, 1.0, side)
    qs = np.geomspace(1e-3, 1.0, side)
    points = np.array([(la, qq) for la in lams for qq in qs])
    g = points.shape[0]
    rows = side // segments
    rng = np.random.default_rng(0)

    # Interleaved: segment k of the grid (rows lam[k*rows:(k+1)*rows] x every q) by fastuq,
    # then `per_segment` points of that segment the naive way, so that both methods see the
    # same load on this shared machine. The first segment's time includes compilation.
    fast_times, naive_times, tables, diffs = [], [], [], {"auroc": [], "auarc": []}
    print(f"{segments} segments x {rows * side} points; naive on {per_segment} per segment",
          file=sys.stderr, flush=True)
    for k in range(segments):
        grid = {"lam": lams[k * rows:(k + 1) * rows], "q": qs}
        start = time.perf_counter()
        table = fsweep.sweep((a, h, mask, y), grid, ("auroc", "auarc"))
        fast_times.append(time.perf_counter() - start)
        tables.append(table)
        picks = rng.choice(table.height, per_segment, replace=False)
        for i in picks:
            row = table.row(int(i), named=True)
            sec, auroc, auarc = naive_point(a, h, mask, y, row["lam"], row["q"])
            naive_times.append(sec)
            diffs["auroc"].append(abs(auroc - row["auroc"]))
            diffs["auarc"].append(abs(auarc - row["auarc"]))
        print(f"  segment {k}: fastuq {fast_times[-1]:.2f} s, naive "
              f"{np.median(naive_times[-per_segment:]):.3f} s/point, load "
              f"{os.getloadavg()[0]:.2f}", file=sys.stderr, flush=True)
    fast_wall = float(sum(fast_times))
    per_point = bc.median(naive_times)
    results: dict[str, Any] = {
        "fastuq": {"wall_s": fast_wall, "per_point_s": fast_wall / g,
                   "segment_s": fast_times, "segments": segments,
                   "threads": _default_threads()},
        "naive": {"points_timed": len(naive_times), "times_s": naive_times,
                  "per_point_s": per_point, "wall_s": per_point * g,
                  "extrapolated": len(naive_times) < g},
    }
    if args.single_call:
        grid = {"lam": lams, "q": qs}
        for label, threads in (("fastuq_single_call", None), ("fastuq_single_call_1thread", 1)):
            print(f"{label}: {g} points ...", end="", file=sys.stderr, flush=True)
            start = time.perf_counter()
            fsweep.sweep((a, h, mask, y), grid, ("auroc", "auarc"), threads=threads)
            wall = time.perf_counter() - start
            print(f" {wall:.1f} s", file=sys.stderr, flush=True)
            results[label] = {"wall_s": wall, "per_point_s": wall / g,
                              "threads": threads or _default_threads()}
    import polars as pl

    sweep_table = pl.concat(tables)
    best = sweep_table.row(int(np.argmax(sweep_table["auroc"].to_numpy())), named=True)
    return {
        "benchmark": NAME,
        "quick": q,
        "n": n,
        "t_max": int(a.shape[0]),
        "grid": {"lam": [float(lams[0]), float(lams[-1]), side, "linear"],
                 "q": [float(qs[0]), float(qs[-1]), side, "log"]},
        "grid_points": g,
        "dtype": "float32",
        "corpus_s": corpus_s,
        "results": results,
        "speedup": results["naive"]["wall_s"] / results["fastuq"]["wall_s"],
        "max_abs_diff": {k: float(max(v)) for k, v in diffs.items()},
        "best_point": best,
        "machine": info,
        "loadavg_end": list(os.getloadavg()),
    }


def _default_threads() -> int:
    from fastuq.metrics.rank import default_threads

    return default_threads()


def table_markdown(data: dict[str, Any]) -> str:
    res = data["results"]
    g, n = data["grid_points"], data["n"]
    naive = res["naive"]
    fast = res["fastuq"]
    est = " (est.)" if naive["extrapolated"] else ""
    rows = [
        ["naive: NumPy twin + `roc_auc_score` + NumPy AUARC, point by point",
         f"{naive['wall_s']:.0f}{est}", f"{naive['per_point_s'] * 1e3:.0f}", "1×"],
        [f"`fastuq.sweep`, {fast['threads']} threads, in {fast['segments']} calls",
         f"{fast['wall_s']:.1f}", f"{fast['per_point_s'] * 1e3:.1f}",
         f"**{naive['wall_s'] / fast['wall_s']:.1f}×**"],
    ]
    for key, text in (("fastuq_single_call", "one call"),
                      ("fastuq_single_call_1thread", "one call")):
        if key in res:
            r = res[key]
            rows.append([f"`fastuq.sweep`, {r['threads']} thread{'s' * (r['threads'] > 1)}, "
                         f"{text}", f"{r['wall_s']:.1f}", f"{r['per_point_s'] * 1e3:.1f}",
                         f"{naive['wall_s'] / r['wall_s']:.1f}×"])
    head = (f"{data['grid']['lam'][2]} × {data['grid']['q'][2]} (lam, q) grid = {g:,} points, "
            f"N = {bc.fmt_count(n)} simulated debate trajectories (`fastuq.synth`, seed 0), "
            f"T = {data['t_max']}, float32; exact AUROC + AUARC at every point.")
    note = (f"The grid was swept in {fast['segments']} calls of {g // fast['segments']} points, "
            f"each followed by the naive loop on {naive['points_timed'] // fast['segments']} "
            "of its points, so both see the same load on this shared 2-core machine. The naive "
            f"loop ran {naive['points_timed']} of the {g:,} points (median "
            f"{naive['per_point_s']:.3f} s a point) and is extrapolated to the grid; fastuq's "
            "time is the sum of its calls, JIT compilation (first call) and per-call "
            "validation included. Max |Δ| between the two on the naive points: AUROC "
            f"{data['max_abs_diff']['auroc']:.1e}, AUARC {data['max_abs_diff']['auarc']:.1e} "
            "(float32 scores from two programs can differ in the last bit). Load average "
            f"{data['machine'].get('loadavg_start', ['?'])[0]:.2f} at start, "
            f"{data['loadavg_end'][0]:.2f} at end.")
    table = bc.markdown_table(["method", "grid wall s", "ms / point", "speed-up"], rows,
                              align=["l", "r", "r", "r"])
    return f"{head}\n\n{table}\n\n{note}\n"


def rank_cost(n: int = 1_000_000, columns: int = 32, seed: int = 0) -> dict[str, float]:
    """CPU milliseconds per column of the sweep's exact ranking and of the sorts tried in
    its place, on ``[columns, n]`` float32 scores, one thread (``--rank-cost``)."""
    import polars as pl

    from fastuq.metrics.rank import order_keys, rank_metrics_rows, row_label_bits

    def _packed_keys(k32, low):  # rank.py's packed key: score key << 32 | row << 1 | label
        return (k32.astype(np.uint64) << np.uint64(32)) | low

    rng = np.random.default_rng(seed)
    y = rng.random(n) < 0.68
    s = (rng.standard_normal((columns, n)) - 0.5 * y).astype(np.float32)
    keys32 = [order_keys(s[i]) for i in range(columns)]
    low = row_label_bits(y)
    keys64 = [_packed_keys(k, low) for k in keys32]
    cases = {
        "rank_metrics_rows (AUROC, AUARC, PRR)": lambda: rank_metrics_rows(
            y, s, ("auroc", "auarc", "prr"), threads=1),
        "packing the 64-bit keys": lambda: [_packed_keys(order_keys(s[i]), low)
                                            for i in range(columns)],
        "Polars sort of the packed keys": lambda: [pl.Series(k).sort() for k in keys64],
        "np.sort of the packed keys": lambda: [np.sort(k) for k in keys64],
        "Polars sort of the 32-bit keys alone": lambda: [pl.Series(k).sort() for k in keys32],
        "one 16-bit radix pass (np.argsort stable)": lambda: [
            np.argsort((k >> 16).astype(np.uint16), kind="stable") for k in keys32],
    }
    out = {}
    for name, fn in cases.items():
        cpu = time.process_time()
        fn()
        out[name] = 1e3 * (time.process_time() - cpu) / columns
        print(f"{name}: {out[name]:.1f} ms of CPU per column", flush=True)
    return out


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--quick", action="store_true", help="smoke test: N = 1e5, 8 x 8 grid")
    p.add_argument("--n", type=int, help="trajectories (default 1e6; quick 1e5)")
    p.add_argument("--side", type=int, help="grid points per parameter (default 32; quick 8)")
    p.add_argument("--segments", type=int,
                   help="calls the grid is swept in, interleaved with the naive loop "
                        "(default 4); must divide --side")
    p.add_argument("--naive-per-segment", type=int,
                   help="naive points timed after each segment (default 4; quick 2)")
    p.add_argument("--single-call", action="store_true",
                   help="also time the whole grid in one call, with all threads and with 1")
    p.add_argument("--out", type=Path, help="results JSON (default bench/results/sweep.json)")
    p.add_argument("--rank-cost", action="store_true",
                   help="only time the ranking per column (and the sorts tried instead) on "
                        "--n float32 scores (default 1e6), 32 columns, one thread")
    args = p.parse_args(argv)
    if args.rank_cost:
        rank_cost(args.n or 1_000_000)
        return
    start = time.perf_counter()
    data = run(args)
    data["wall_s"] = time.perf_counter() - start
    text = table_markdown(data)
    print(text)
    out = args.out or (QUICK_OUT if args.quick else DEFAULT_OUT)
    bc.write_json(out, data)
    print(f"wrote {out} ({data['wall_s']:.0f} s)", file=sys.stderr)


if __name__ == "__main__":
    main()
