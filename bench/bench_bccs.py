"""Benchmark BCCS: trajectories per second against the SAUCE kernel and the bandwidth floor.

Run from the repository root::

    python bench/bench_bccs.py            # N = 1e6, T = 3 and 5, A = 3, 4, 7; writes results
    python bench/bench_bccs.py --quick    # N = 1e5, T = 3, A = 3 and 7 (under a minute);
                                          # writes bench/results/bccs_quick.json.tmp only

For each (T, A): a ragged batch (lengths 1..T, prefix ``round_mask``), answer classes drawn
from 3 answers with 10% of the nodes casting no vote, beliefs uniform in [0, 1], packed as
the engine packs it (time-major ``[T, N, A_pad]``, ``A_pad`` = A rounded up to a power of two,
``answer_class`` int32, ``belief`` in the float dtype). Timed, each a median of repeats after
a warm-up call that compiles (its time is the "first call" column):

  bccs JAX      ``fastuq.kernels.bccs.bccs`` (score, first full round, leader; inputs already
                device arrays): float32 on 2 XLA CPU devices, each scoring its own slice
                through ``jax.shard_map`` as ``fastuq`` runs it; float32 on 1 device; float64
                on 2 devices.
  bccs NumPy    the NumPy twin ``bccs_numpy``, float32.
  SAUCE JAX     ``fastuq.kernels.sauce.sauce`` on the same N and T, float32, 2 devices: the
                kernel BCCS is compared with ("x SAUCE" = BCCS time / SAUCE time).
  floor         (bytes the kernel must read + write) / memory bandwidth, the bandwidth being a
                large two-thread ``np.copyto`` measured in the same run ("x floor" = time /
                floor time). BCCS reads ``T N A_pad (4 + itemsize)`` bytes of classes and
                beliefs, ``T N`` of mask and ``N itemsize`` of team sizes, and writes
                ``3 N itemsize``; SAUCE reads ``T N (2 itemsize + 1)`` and writes
                ``N itemsize``.

Every method is checked against the float64 NumPy twin before timing (max |score error|).
One process: the machine is a shared 2-core box, so methods are interleaved within each
repeat and the load average is recorded before and after.
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

NAME = "BCCS"
DEFAULT_OUT = bc.RESULTS_DIR / "bccs.json"
QUICK_OUT = bc.RESULTS_DIR / "bccs_quick.json.tmp"
SEED = 20261201
THETAS = {"theta_s": 2.0 / 3.0, "theta_full": 0.8, "theta_partial": 0.5}
DEBATE = {"lam": 0.95, "q": 0.10, "sigma2_0": 0.25, "mu_0": 0.0}


def make_inputs(n: int, t_max: int, a: int, seed: int = SEED) -> dict[str, np.ndarray]:
    """A packed ragged batch for BCCS and SAUCE (float64; cast per method)."""
    rng = np.random.default_rng(seed)
    a_pad = 1 << max(a - 1, 0).bit_length()
    lengths = rng.integers(1, t_max + 1, n)
    mask = np.arange(t_max)[:, None] < lengths[None, :]
    cls = np.full((t_max, n, a_pad), -1, np.int32)
    cls[..., :a] = rng.integers(0, 3, (t_max, n, a))
    cls[..., :a][rng.random((t_max, n, a)) < 0.1] = -1
    belief = np.full((t_max, n, a_pad), np.nan)
    belief[..., :a] = rng.random((t_max, n, a))
    return {
        "answer_class": cls, "belief": belief, "n_agents": np.full(n, float(a)),
        "round_mask": mask, "agreement": rng.integers(0, a + 1, (t_max, n)) / a,
        "token_entropy": 2.0 * rng.random((t_max, n)),
    }


def bccs_bytes(n: int, t_max: int, a_pad: int, itemsize: int) -> int:
    return t_max * n * a_pad * (4 + itemsize) + t_max * n + n * itemsize + 3 * n * itemsize


def sauce_bytes(n: int, t_max: int, itemsize: int) -> int:
    return t_max * n * (2 * itemsize + 1) + n * itemsize


def _bccs_local(c, b, team, mask):
    from fastuq.kernels.bccs import bccs

    return bccs(c, b, team, mask, **THETAS)


def _sauce_local(agreement, entropy, mask):
    from fastuq.kernels.sauce import sauce

    return {"score": sauce(agreement, entropy, mask, **DEBATE)}


def bench_shape(jax, n: int, t_max: int, a: int, repeats: int, floor_bps: float,
                numpy_n: int) -> list[dict[str, Any]]:
    """Rows for one (T, A): every method timed side by side on one batch."""
    from fastuq.engine.runtime import batch_sharding, per_device
    from fastuq.kernels import bccs as B

    x = make_inputs(n, t_max, a)
    a_pad = x["answer_class"].shape[2]
    axes = {"answer_class": 1, "belief": 1, "n_agents": 0, "round_mask": 1, "agreement": 1,
            "token_entropy": 1}
    dev0 = jax.devices()[0]

    def put(name, dtype=None, sharded=True):
        v = x[name] if dtype is None or x[name].dtype.kind != "f" else x[name].astype(dtype)
        sh = batch_sharding(n, v.ndim, axes[name]) if sharded else None
        return jax.device_put(v, sh if sh is not None else dev0)

    names = ("answer_class", "belief", "n_agents", "round_mask")
    f32 = [put(k, np.float32) for k in names]
    f32_one = [put(k, np.float32, sharded=False) for k in names]
    with jax.enable_x64(True):
        f64 = [put(k, np.float64) for k in names]
    sauce_in = [put(k, np.float32) for k in ("agreement", "token_entropy", "round_mask")]
    local_bccs = per_device(_bccs_local, (1, 1, 0, 1))
    local_sauce = per_device(_sauce_local, (1, 1, 1))
    ndev = len(jax.devices())
    sub = slice(0, numpy_n)
    np32 = [x["answer_class"][:, sub], x["belief"][:, sub].astype(np.float32),
            x["n_agents"][sub].astype(np.float32), x["round_mask"][:, sub]]

    def run_f64():
        with jax.enable_x64(True):
            return jax.block_until_ready(local_bccs(*f64))["bccs"]

    methods = {
        f"bccs JAX float32, {ndev} devices": (
            lambda: jax.block_until_ready(local_bccs(*f32))["bccs"], n, np.float32),
        "bccs JAX float32, 1 device": (
            lambda: jax.block_until_ready(B.bccs(*f32_one, **THETAS))["bccs"], n, np.float32),
        f"bccs JAX float64, {ndev} devices": (run_f64, n, np.float64),
        f"bccs NumPy twin float32 ({numpy_n:,} traj)": (
            lambda: B.bccs_numpy(*np32, **THETAS)["bccs"], numpy_n, np.float32),
        f"SAUCE JAX float32, {ndev} devices": (
            lambda: jax.block_until_ready(local_sauce(*sauce_in))["score"], n, np.float32),
    }
    want = B.bccs_numpy(x["answer_class"], x["belief"], x["n_agents"], x["round_mask"],
                        **THETAS)["bccs"]
    first_call, max_err = {}, {}
    for label, (fn, count, _) in methods.items():
        start = time.perf_counter()
        out = np.asarray(fn(), np.float64)
        first_call[label] = time.perf_counter() - start
        if label.startswith("bccs"):
            max_err[label] = float(np.max(np.abs(out - want[:count])))
    times: dict[str, list[float]] = {label: [] for label in methods}
    for _ in range(repeats):  # interleaved: each repeat runs every method once
        for label, (fn, _count, _dtype) in methods.items():
            times[label] += bc.time_calls(fn, 1, warmup=0)  # the package's harness
    sauce_label = next(k for k in methods if k.startswith("SAUCE"))
    sauce_rate = n / bc.median(times[sauce_label])
    rows = []
    for label, (_fn, count, dtype) in methods.items():
        med = bc.median(times[label])
        itemsize = np.dtype(dtype).itemsize
        nbytes = (sauce_bytes(count, t_max, itemsize) if label.startswith("SAUCE")
                  else bccs_bytes(count, t_max, a_pad, itemsize))
        rate = count / med
        rows.append({
            "t": t_max, "a": a, "a_pad": a_pad, "n": count, "method": label,
            "times_s": times[label], "median_s": med, "traj_per_s": rate,
            "x_sauce": sauce_rate / rate, "floor_s": nbytes / floor_bps,
            "x_floor": med / (nbytes / floor_bps), "first_call_s": first_call[label],
            "max_abs_err": max_err.get(label),
        })
    return rows


def render(data: dict[str, Any]) -> str:
    m = data["machine"]
    rows = [[r["t"], f"{r['a']} ({r['a_pad']})", r["method"], bc.fmt_si(r["traj_per_s"]),
             bc.fmt_num(r["x_sauce"]), bc.fmt_num(r["x_floor"]),
             bc.fmt_num(r["first_call_s"]),
             "" if r["max_abs_err"] is None else f"{r['max_abs_err']:.1e}"]
            for r in data["rows"]]
    table = bc.markdown_table(
        ["T", "A (slots)", "method", "traj/s", "x SAUCE", "x floor", "first call (s)",
         "max abs err"], rows, ["r", "r", "l", "r", "r", "r", "r", "r"])
    load = data["load"]
    return (
        f"N = {data['n']:,} trajectories (NumPy twin: {data['numpy_n']:,}), median of "
        f"{data['repeats']} interleaved repeats, {m.get('cpu_count')} cores "
        f"({m.get('cpu_model')}), JAX {m.get('jax')}, {m.get('date')}; load average "
        f"(1 min) {load['before']:.2f} before, {load['after']:.2f} after; copy bandwidth "
        f"{data['bandwidth']['bytes_per_s'] / 1e9:.1f} GB/s (2 threads).\n\n{table}\n")


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--quick", action="store_true", help="N = 1e5, T = 3, A = 3, 7")
    p.add_argument("--n", type=int, default=None)
    p.add_argument("--repeats", type=int, default=None)
    p.add_argument("--out", type=Path, default=None)
    p.add_argument("--no-readme", action="store_true", help="do not rewrite bench/README.md")
    args = p.parse_args(argv)
    n = args.n or (100_000 if args.quick else 1_000_000)
    repeats = args.repeats or (3 if args.quick else 7)
    shapes = [(3, 3), (3, 7)] if args.quick else [(3, 3), (3, 4), (3, 7), (5, 4), (5, 7)]
    numpy_n = min(n, 100_000 if args.quick else 200_000)
    out = args.out or (QUICK_OUT if args.quick else DEFAULT_OUT)

    import fastuq

    fastuq.use_cpu_devices(min(2, os.cpu_count() or 1))
    import jax

    start = time.perf_counter()
    machine = bc.machine_info()
    load_before = os.getloadavg()[0]
    bandwidth = bc.copy_bandwidth(256 * 2**20 if args.quick else 512 * 2**20, repeats=5,
                                  threads=2)
    rows = []
    for t_max, a in shapes:
        rows += bench_shape(jax, n, t_max, a, repeats, bandwidth["bytes_per_s"], numpy_n)
        print(f"T = {t_max}, A = {a}: done ({time.perf_counter() - start:.0f} s)",
              flush=True)
    data = {"name": NAME, "quick": args.quick, "n": n, "numpy_n": numpy_n,
            "repeats": repeats, "machine": machine, "bandwidth": bandwidth,
            "load": {"before": load_before, "after": os.getloadavg()[0]}, "rows": rows,
            "wall_s": time.perf_counter() - start}
    bc.publish(out, data, render, NAME, readme=not args.quick and not args.no_readme)


if __name__ == "__main__":
    main()
