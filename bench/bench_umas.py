"""Time UMAS: the jitted JAX kernel vs its NumPy twin vs a per-trajectory Python loop.

For N trajectories of T = 3 rounds and A = 3, 4, 7 agents (time-major ``[T, N, A]``, about
10% of the nodes masked as if pruned, inputs already on the device), every implementation is
timed side by side in one run: each repeat runs each method once, in turn, and the table
reports the median over repeats. The pure-Python loop (:func:`kernels.umas.umas_trajectory`
on the nested ``[round][agent]`` lists) is timed on a subset of trajectories and extrapolated
per trajectory. The paper's 0.143 ms per trajectory (UMAS, Llama 4 Scout, Debate, MMLU-Pro,
CPU) is listed as a reference row.

Writes ``bench/results/umas.json`` (``--quick``: ``umas_quick.json.tmp``, ignored by git) and
prints a markdown table.
The machine may be shared: numbers are noisy, medians help, nothing is averaged away.

    python bench/bench_umas.py            # N = 1e6
    python bench/bench_umas.py --quick    # N = 2e4, 3 repeats
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import sys
import time
from pathlib import Path

import numpy as np

PAPER_MS_PER_TRAJECTORY = 0.143
RESULTS = Path(__file__).resolve().parent / "results" / "umas.json"


def make_batch(n: int, t_max: int, n_agents: int, seed: int = 0):
    """Synthetic packed batch: conf ``[T, N, A]`` float32 (sum of token log-probs, <= 0),
    node_mask ``[T, N, A]`` with ~10% of later-round nodes pruned, NaN in masked slots."""
    rng = np.random.default_rng(seed)
    n_tokens = rng.integers(20, 400, (t_max, n, n_agents))
    conf = (-rng.exponential(0.3, (t_max, n, n_agents)) * n_tokens).astype(np.float32)
    mask = np.ones((t_max, n, n_agents), bool)
    mask[1:] = rng.random((t_max - 1, n, n_agents)) > 0.1
    conf[~mask] = np.nan
    return conf, mask


def timed(fn, block=lambda out: out) -> float:
    t0 = time.perf_counter()
    block(fn())
    return time.perf_counter() - t0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="small smoke run")
    parser.add_argument("--n", type=int, default=None, help="trajectories (default 1e6)")
    parser.add_argument("--repeats", type=int, default=None, help="timed repeats (default 7)")
    parser.add_argument("--python-subset", type=int, default=None,
                        help="trajectories for the pure-Python loop (default 2000)")
    parser.add_argument("--agents", type=int, nargs="+", default=[3, 4, 7])
    parser.add_argument("--out", type=Path, default=None,
                        help="JSON path (default bench/results/umas.json; --quick: "
                             "bench/results/umas_quick.json.tmp, which git ignores)")
    args = parser.parse_args(argv)
    n = args.n or (20_000 if args.quick else 1_000_000)
    repeats = args.repeats or (3 if args.quick else 7)
    py_subset = min(n, args.python_subset or (200 if args.quick else 2_000))
    t_max = 3
    if args.out is None:
        args.out = RESULTS.with_name("umas_quick.json.tmp") if args.quick else RESULTS

    # Two XLA host devices, one per core, with the batch sharded across them (DESIGN.md:
    # XLA uses the second core reliably only this way). Must precede any JAX computation.
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
    from fastuq.engine.runtime import batch_sharding, use_cpu_devices

    n_devices = use_cpu_devices(min(2, os.cpu_count() or 1))
    import jax

    from fastuq.kernels import umas as U

    def block(out):
        return jax.block_until_ready(out)

    def bench_agents(a: int) -> list[dict]:
        """Rows for ``A = a``: every method timed side by side on one batch."""
        rows: list[dict] = []
        conf, mask = make_batch(n, t_max, a)
        edges = U.default_edges(mask)
        sharding = batch_sharding(n, 3, axis=1)
        edge_sharding = batch_sharding(n, 4, axis=1)
        dev0 = jax.devices()[0]

        def put(x, sh, dtype=None):
            x = x if dtype is None else x.astype(dtype)
            return jax.device_put(x, sh if sh is not None else dev0)

        d_conf, d_mask = put(conf, sharding), put(mask, sharding)
        d_edges = put(edges, edge_sharding)
        s_conf, s_mask = put(conf, None), put(mask, None)
        with jax.enable_x64(True):
            d_conf64 = put(conf, sharding, np.float64)
            d_mask64 = put(mask, sharding)

        def jax_f64():
            with jax.enable_x64(True):
                return block(U.umas_scan(d_conf64, d_mask64)["umas"])

        # Python loop input: nested [round][agent] lists, built outside the timing.
        sub = [
            [[None if not mask[t, i, k] else float(conf[t, i, k]) for k in range(a)]
             for t in range(t_max)]
            for i in range(py_subset)
        ]

        def python_loop():
            return [U.umas_trajectory(traj)["umas"] for traj in sub]

        methods = {
            f"JAX float32, default graph, {n_devices} devices (sharded)": (
                lambda: U.umas_scan(d_conf, d_mask)["umas"], n),
            "JAX float32, default graph, 1 device": (
                lambda: U.umas_scan(s_conf, s_mask)["umas"], n),
            f"JAX float32, explicit edge_mask [T,N,A,A], {n_devices} devices": (
                lambda: U.umas_scan(d_conf, d_mask, d_edges)["umas"], n),
            f"JAX float64, default graph, {n_devices} devices": (jax_f64, n),
            "NumPy twin float32, default graph": (
                lambda: U.umas_scan_numpy(conf, mask)["umas"], n),
            f"pure-Python loop per trajectory ({py_subset:,} traj, extrapolated)": (
                python_loop, py_subset),
        }

        # Warm-up (compiles) and a correctness check against the twin.
        ref = U.umas_scan_numpy(conf.astype(np.float64), mask)["umas"]
        max_err = {}
        for name, (fn, count) in methods.items():
            out = np.asarray(block(fn()), np.float64)
            max_err[name] = float(np.nanmax(np.abs(out - ref[:count]) / np.abs(ref[:count])))

        times: dict[str, list[float]] = {name: [] for name in methods}
        for _ in range(repeats):
            for name, (fn, _count) in methods.items():
                times[name].append(timed(fn, block))

        numpy_rate = None
        for name, (_fn, count) in methods.items():
            med = statistics.median(times[name])
            rate = count / med
            if name.startswith("NumPy"):
                numpy_rate = rate
            rows.append({
                "agents": a, "method": name, "trajectories_timed": count,
                "median_s": med, "times_s": times[name], "traj_per_s": rate,
                "us_per_traj": 1e6 / rate, "max_rel_err_vs_f64_twin": max_err[name],
            })
        rows.append({
            "agents": a, "method": "paper (0.143 ms per trajectory, reported)",
            "trajectories_timed": None, "median_s": None, "times_s": [],
            "traj_per_s": 1e3 / PAPER_MS_PER_TRAJECTORY,
            "us_per_traj": PAPER_MS_PER_TRAJECTORY * 1e3, "max_rel_err_vs_f64_twin": None,
        })
        for row in rows:
            row["x_numpy"] = row["traj_per_s"] / numpy_rate
        return rows

    load_before = os.getloadavg()
    rows = [row for a in args.agents for row in bench_agents(a)]
    load_after = os.getloadavg()

    result = {
        "benchmark": "umas", "n": n, "rounds": t_max, "repeats": repeats, "quick": args.quick,
        "statistic": "median over repeats, methods interleaved within each repeat",
        "jax": jax.__version__, "numpy": np.__version__, "devices": n_devices,
        "cpu_count": os.cpu_count(), "machine": platform.processor() or platform.machine(),
        "note": "shared 2-core machine: noisy; the Python loop is extrapolated per trajectory",
        "loadavg_1_5_15_before": load_before, "loadavg_1_5_15_after": load_after,
        "rows": rows,
    }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    tmp = args.out.with_name(args.out.name + ".partial.tmp")
    tmp.write_text(json.dumps(result, indent=2))
    tmp.replace(args.out)

    print(f"UMAS, N = {n:,} trajectories, T = {t_max}, median of {repeats} "
          f"(methods interleaved); {n_devices} XLA CPU devices; wrote {args.out}")
    print(f"load average (1 min) before/after: {load_before[0]:.2f} / {load_after[0]:.2f} "
          f"on {os.cpu_count()} cores (a shared machine: other jobs compete for the cores)")
    print()
    print("| A | method | traj/s | us/traj | x NumPy | max rel err |")
    print("|---|---|---:|---:|---:|---:|")
    for row in rows:
        err = row["max_rel_err_vs_f64_twin"]
        print(f"| {row['agents']} | {row['method']} | {row['traj_per_s']:.3g} | "
              f"{row['us_per_traj']:.3g} | {row['x_numpy']:.3g} | "
              f"{'' if err is None else f'{err:.1e}'} |")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
