"""Benchmark SAUCE: trajectories per second and peak memory against the bandwidth floor.

Run from the repository root::

    python bench/bench_sauce.py            # full run (several minutes), writes results
    python bench/bench_sauce.py --quick    # smoke test (timed in README), writes nothing tracked

Methods, on ragged batches (random lengths 1..T, prefix ``round_mask``), time-major
``[T, N]``:

  loop        ``fastuq.sauce_score`` called once per trajectory on Python lists (the
              original package's way); timed on a subset and extrapolated to N.
  numpy       ``sauce_scan_numpy`` (score only), float64 and float32.
  jax         ``sauce_scan`` (score only; inputs already device arrays;
              ``block_until_ready``), float32 and float64, on 1 and on 2 XLA CPU devices
              (the batch sharded along N with a ``NamedSharding``, each device scoring its
              own slice through ``jax.shard_map``, as ``fastuq`` runs it).
  sauce_batch ``fastuq.sauce_batch`` end to end from NumPy arrays (validation, padding to a
              bucket, device transfer, kernel, copy back).
  floor       (bytes of agreement + entropy + mask + score) / memory bandwidth, the bandwidth
              being a large ``np.copyto`` measured in the same run.

Each configuration runs in its own subprocess, so its peak RSS and its XLA device count are
its own. Memory is reported as the peak RSS while the timed calls ran minus the RSS before
the inputs were allocated (so it includes the inputs; see ``input_bytes`` in the JSON).
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
import _common as bc  # noqa: E402

SCRIPT = Path(__file__).resolve()
NAME = "SAUCE"
DEFAULT_OUT = bc.RESULTS_DIR / "sauce.json"
QUICK_OUT = bc.RESULTS_DIR / "sauce_quick.json.tmp"
SEED = 20261101
DEBATE = (0.95, 0.10, 0.25, 0.0)  # lam, q, sigma2_0, mu_0 (the debate preset)


# ============================================================================ inputs


def make_inputs(n: int, t_max: int, dtype: str, seed: int = SEED):
    """Ragged batch ``[T, N]``: lengths uniform in 1..T, prefix ``round_mask``.

    Row by row, so generating 1e7 x 15 needs no temporaries of the full size.
    Masked slots keep their random values (the kernels must ignore them).
    """
    rng = np.random.default_rng(seed)
    dt = np.dtype(dtype)
    lengths = rng.integers(1, t_max + 1, size=n, dtype=np.int8 if t_max < 127 else np.int32)
    mask = np.empty((t_max, n), bool)
    agreement = np.empty((t_max, n), dt)
    entropy = np.empty((t_max, n), dt)
    for t in range(t_max):
        np.less(t, lengths, out=mask[t])
        # Drawn in float64 and rounded, so both dtypes score the same batch.
        agreement[t] = rng.random(n)  # agreement in [0, 1)
        entropy[t] = 2.0 * rng.random(n)  # mean token entropy in nats, [0, 2)
    return agreement, entropy, mask


def floor_bytes(n: int, t_max: int, itemsize: int) -> int:
    """Bytes the kernel must move: read agreement, entropy (itemsize) and mask (1 byte);
    write the score (itemsize)."""
    return t_max * n * (2 * itemsize + 1) + n * itemsize


def _summary(score: np.ndarray) -> dict[str, float]:
    score = np.asarray(score, np.float64)
    return {"score_mean": float(np.mean(score)), "score_first": float(score[0])}


# ============================================================================ workers


def _measure(fn, repeats: int, base_rss: int, warmup: int = 1) -> dict[str, Any]:
    """Warm up (compiles, faults pages in), reset the peak, time ``repeats`` calls."""
    for _ in range(warmup):
        fn()
    after_warmup = bc.rss_bytes()
    reset = bc.reset_peak_rss()
    times = bc.time_calls(fn, repeats, warmup=0)
    peak = bc.peak_rss_bytes()
    return {
        "times_s": times,
        "median_s": bc.median(times),
        "rss_before_inputs": base_rss,
        "rss_after_warmup": after_warmup,
        "peak_rss": peak,
        "peak_rss_delta": peak - base_rss,
        "peak_reset": reset,
    }


def worker_bandwidth(spec: dict[str, Any]) -> dict[str, Any]:
    out = {}
    for threads in (1, 2):
        out[f"threads_{threads}"] = bc.copy_bandwidth(
            spec["nbytes"], repeats=spec["repeats"], threads=threads
        )
    return out


def worker_loop(spec: dict[str, Any]) -> dict[str, Any]:
    import fastuq

    n, t_max = spec["subset"], spec["t"]
    a, h, mask = make_inputs(n, t_max, "float64")
    lengths = mask.sum(axis=0)
    agreement = [a[: lengths[i], i].tolist() for i in range(n)]
    entropy = [h[: lengths[i], i].tolist() for i in range(n)]
    del a, h, mask
    scores: list[float] = []

    def run() -> None:
        scores.clear()
        for ag, en in zip(agreement, entropy, strict=True):
            scores.append(fastuq.sauce_score(ag, en))

    base = bc.rss_bytes()
    res = _measure(run, spec["repeats"], base)
    res["per_trajectory_s"] = res["median_s"] / n
    res.update(_summary(np.asarray(scores)))
    return res


def worker_numpy(spec: dict[str, Any]) -> dict[str, Any]:
    from fastuq.kernels.sauce import SauceParams, sauce_scan_numpy

    base = bc.rss_bytes()
    a, h, mask = make_inputs(spec["n"], spec["t"], spec["dtype"])
    params = SauceParams(*DEBATE)
    box = {}

    def run() -> None:
        box.pop("score", None)
        box["score"] = sauce_scan_numpy(a, h, mask, params, fields=("score",))["score"]

    res = _measure(run, spec["repeats"], base)
    res["input_bytes"] = a.nbytes + h.nbytes + mask.nbytes
    res.update(_summary(box["score"]))
    return res


def _jax_setup(devices: int):
    import fastuq

    fastuq.use_cpu_devices(devices)
    import jax

    have = len(jax.devices())
    if have != devices:
        raise RuntimeError(f"asked for {devices} XLA CPU devices, JAX has {have}")
    return jax


def worker_jax(spec: dict[str, Any]) -> dict[str, Any]:
    jax = _jax_setup(spec["devices"])
    from jax.sharding import Mesh, NamedSharding, PartitionSpec

    from fastuq.kernels.sauce import SauceParams, sauce_scan

    dtype = np.dtype(spec["dtype"])
    unroll = spec.get("unroll")
    with jax.enable_x64(dtype == np.float64):
        base = bc.rss_bytes()
        arrays = make_inputs(spec["n"], spec["t"], spec["dtype"])
        input_bytes = sum(x.nbytes for x in arrays)
        if spec["devices"] > 1:
            mesh = Mesh(np.array(jax.devices()), ("batch",))
            target = NamedSharding(mesh, PartitionSpec(None, "batch"))
        else:
            target = jax.devices()[0]
        a, h, mask = (jax.device_put(x, target) for x in arrays)
        jax.block_until_ready((a, h, mask))
        del arrays
        gc.collect()
        params = SauceParams(*(np.asarray(p, dtype) for p in DEBATE))
        if spec.get("block"):
            kernel = blocked_kernel(spec["block"], unroll, target)
        elif spec["devices"] > 1:
            # As fastuq runs it: every device scores its own slice (shard_map), so each runs
            # the single-device program (fusion, cache blocking) on its local block.
            from fastuq.engine.runtime import per_device

            local = per_device(_score_only, (1, 1, 1, None), unroll=unroll)

            def kernel(a, h, mask, params):
                return local(a, h, mask, params)["score"]
        else:
            def kernel(a, h, mask, params):
                return sauce_scan(a, h, mask, params, fields=("score",), unroll=unroll)["score"]
        box = {}

        def run() -> None:
            box.pop("score", None)
            box["score"] = kernel(a, h, mask, params).block_until_ready()

        start = time.perf_counter()
        run()  # compile + first run
        compile_s = time.perf_counter() - start
        res = _measure(run, spec["repeats"], base)
        res["first_call_s"] = compile_s
        res["input_bytes"] = input_bytes
        res["score_sharding"] = str(box["score"].sharding)
        res.update(_summary(np.asarray(box["score"])))
    return res


def _score_only(a, h, mask, params, *, unroll):
    from fastuq.kernels.sauce import sauce_scan

    return sauce_scan(a, h, mask, params, fields=("score",), unroll=unroll)


def blocked_kernel(block: int, unroll, target):
    """Exploration only: ``sauce_scan`` over cache-sized column blocks of ``[T, N]``.

    A ``fori_loop`` over blocks of ``block`` trajectories (``dynamic_slice`` along N), plus
    one static tail; on several devices each device loops over its own shard
    (``jax.shard_map``). Same numbers as the kernel, another memory-traffic pattern.
    """
    from functools import partial

    import jax
    import jax.numpy as jnp
    from jax import lax
    from jax.sharding import NamedSharding, PartitionSpec

    from fastuq.kernels.sauce import sauce_scan

    def local(a, h, mask, params):
        n = a.shape[1]
        size = min(block, n)
        n_blocks, tail = divmod(n, size)

        def score(a, h, mask):
            return sauce_scan(a, h, mask, params, fields=("score",), unroll=unroll)["score"]

        def body(i, out):
            def cut(x):
                return lax.dynamic_slice_in_dim(x, i * size, size, axis=1)

            return lax.dynamic_update_slice_in_dim(out, score(cut(a), cut(h), cut(mask)),
                                                   i * size, axis=0)

        out = lax.fori_loop(0, n_blocks, body, jnp.zeros((n,), a.dtype))
        if tail:
            rest = n_blocks * size
            out = out.at[rest:].set(score(a[:, rest:], h[:, rest:], mask[:, rest:]))
        return out

    if isinstance(target, NamedSharding):
        spec = PartitionSpec(None, "batch")

        @jax.jit
        def sharded(a, h, mask, params):
            # check_vma=False: sauce_scan's initial carry is not marked device-varying.
            return jax.shard_map(partial(local, params=params), mesh=target.mesh,
                                 in_specs=(spec,) * 3, out_specs=PartitionSpec("batch"),
                                 check_vma=False)(a, h, mask)

        return sharded
    return jax.jit(local)


def worker_e2e(spec: dict[str, Any]) -> dict[str, Any]:
    if spec["backend"] == "jax":
        _jax_setup(spec["devices"])
    import fastuq

    base = bc.rss_bytes()
    a, h, mask = make_inputs(spec["n"], spec["t"], spec["dtype"])
    box = {}

    def run() -> None:
        box.pop("score", None)
        box["score"] = fastuq.sauce_batch(
            a, h, mask, protocol="debate", dtype=spec["dtype"], backend=spec["backend"]
        )["score"]

    start = time.perf_counter()
    run()
    first = time.perf_counter() - start
    res = _measure(run, spec["repeats"], base, warmup=0)
    res["first_call_s"] = first
    res["input_bytes"] = a.nbytes + h.nbytes + mask.nbytes
    res.update(_summary(box["score"]))
    return res


WORKERS = {
    "bandwidth": worker_bandwidth,
    "loop": worker_loop,
    "numpy": worker_numpy,
    "jax": worker_jax,
    "e2e": worker_e2e,
}


def worker_main(spec_json: str) -> None:
    spec = json.loads(spec_json)
    result = {**spec, **WORKERS[spec["kind"]](spec)}
    bc.emit_result(result)


# ============================================================================ driver


def _label(spec: dict[str, Any]) -> str:
    keys = ("kind", "backend", "n", "t", "dtype", "devices", "unroll", "block", "subset")
    return " ".join(f"{k}={spec[k]}" for k in keys if spec.get(k) is not None)


def _run(spec: dict[str, Any], results: list[dict[str, Any]]) -> dict[str, Any]:
    start = time.perf_counter()
    print(f"  {_label(spec)} ...", end="", file=sys.stderr, flush=True)
    res = bc.run_worker(SCRIPT, spec)
    wall = time.perf_counter() - start
    if "error" in res:
        print(f" ERROR ({wall:.1f} s): {res['error']}", file=sys.stderr, flush=True)
    elif "median_s" in res:
        print(f" {res['median_s'] * 1e3:.2f} ms ({wall:.1f} s)", file=sys.stderr, flush=True)
    else:
        print(f" done ({wall:.1f} s)", file=sys.stderr, flush=True)
    res["subprocess_wall_s"] = wall
    results.append(res)
    return res


def plan(args) -> list[dict[str, Any]]:
    """Every kernel configuration, in run order (bandwidth and loop handled separately)."""
    specs = []
    for t_max in args.rounds:
        for n in args.sizes:
            reps = args.big_repeats if n >= 10**7 else args.repeats
            common = {"n": n, "t": t_max, "repeats": reps}
            for dtype in ("float64", "float32"):
                specs.append({"kind": "numpy", "dtype": dtype, **common})
            for dtype in ("float32", "float64"):
                for devices in (1, 2):
                    specs.append({"kind": "jax", "dtype": dtype, "devices": devices, **common})
    e2e_n = args.e2e_size
    for backend, devices in (("jax", 1), ("jax", 2), ("numpy", None)):
        specs.append({"kind": "e2e", "backend": backend, "devices": devices, "n": e2e_n,
                      "t": 3, "dtype": "float32", "repeats": args.repeats})
    if args.explore:
        n = max(args.sizes)
        reps = args.big_repeats if n >= 10**7 else args.repeats
        for t_max in args.rounds:
            for unroll, block in EXPLORE:
                for devices in (1, 2):
                    specs.append({"kind": "jax", "dtype": "float32", "devices": devices,
                                  "n": n, "t": t_max, "repeats": reps, "unroll": unroll,
                                  "block": block, "explore": True})
    return specs


#: Other arrangements of the JAX kernel tried by ``--explore``: (unroll, column block).
EXPLORE = [(1, None), (2, None), (1, 1 << 14), (True, 1 << 14), (True, 1 << 16)]

METHODS = [  # (key, label, dtype shown)
    (("numpy", "float64", None), "numpy twin", "f64"),
    (("numpy", "float32", None), "numpy twin", "f32"),
    (("jax", "float32", 1), "jax `sauce_scan`, 1 dev", "f32"),
    (("jax", "float32", 2), "jax `sauce_scan`, 2 dev", "f32"),
    (("jax", "float64", 1), "jax `sauce_scan`, 1 dev", "f64"),
    (("jax", "float64", 2), "jax `sauce_scan`, 2 dev", "f64"),
]


def _mb(nbytes: float | None) -> str:
    return "—" if nbytes is None else f"{nbytes / 2**20:,.0f}"


def build_table(data: dict[str, Any]) -> str:
    bw = data["bandwidth"]["bytes_per_s"]
    loops = {r["t"]: r for r in data["results"] if r["kind"] == "loop" and "error" not in r}
    kernels = {
        (r["kind"], r.get("dtype"), r.get("devices"), r["n"], r["t"]): r
        for r in data["results"]
        if r["kind"] in ("numpy", "jax") and not r.get("explore") and "error" not in r
    }
    headers = ["N", "T", "method", "dtype", "median ms", "best ms", "traj/s", "× floor",
               "× loop", "peak ΔRSS MB"]
    rows = []
    for t_max in data["config"]["rounds"]:
        for n in data["config"]["sizes"]:
            fb = floor_bytes(n, t_max, 4)
            floor32 = fb / bw
            floor64 = floor_bytes(n, t_max, 8) / bw
            loop = loops.get(t_max)
            loop_s = loop["per_trajectory_s"] * n if loop else float("nan")
            rows.append([bc.fmt_count(n), t_max, "floor (copy bandwidth)", "f32",
                         bc.fmt_num(floor32 * 1e3), "", bc.fmt_si(n / floor32), "1", "", ""])
            rows.append([bc.fmt_count(n), t_max, "floor (copy bandwidth)", "f64",
                         bc.fmt_num(floor64 * 1e3), "", bc.fmt_si(n / floor64), "1", "", ""])
            if loop:
                rows.append([bc.fmt_count(n), t_max,
                             f"loop `sauce_score` (extrapolated from {loop['subset']:,})",
                             "py", bc.fmt_num(loop_s * 1e3),
                             bc.fmt_num(min(loop["times_s"]) / loop["subset"] * n * 1e3),
                             bc.fmt_si(n / loop_s),
                             bc.fmt_num(loop_s / floor64), "1", "—"])
            for (kind, dtype, devices), label, short in METHODS:
                r = kernels.get((kind, dtype, devices, n, t_max))
                if r is None:
                    continue
                s = r["median_s"]
                floor = floor32 if dtype == "float32" else floor64
                rows.append([bc.fmt_count(n), t_max, label, short, bc.fmt_num(s * 1e3),
                             bc.fmt_num(min(r["times_s"]) * 1e3), bc.fmt_si(n / s),
                             bc.fmt_num(s / floor),
                             bc.fmt_num(loop_s / s), _mb(r["peak_rss_delta"])])
    for r in data["results"]:
        if r["kind"] != "e2e" or "error" in r:
            continue
        n, t_max, s = r["n"], r["t"], r["median_s"]
        loop = loops.get(t_max)
        loop_s = loop["per_trajectory_s"] * n if loop else float("nan")
        floor = floor_bytes(n, t_max, 4) / bw
        dev = f", {r['devices']} dev" if r.get("devices") else ""
        rows.append([bc.fmt_count(n), t_max, f"`sauce_batch` end to end, {r['backend']}{dev}",
                     "f32", bc.fmt_num(s * 1e3), bc.fmt_num(min(r["times_s"]) * 1e3),
                     bc.fmt_si(n / s), bc.fmt_num(s / floor),
                     bc.fmt_num(loop_s / s), _mb(r["peak_rss_delta"])])
    return bc.markdown_table(headers, rows, align=["r", "r", "l", "l"] + ["r"] * 6)


def build_explore_table(data: dict[str, Any]) -> str | None:
    rows = []
    base = {
        (r["t"], r["devices"]): r for r in data["results"]
        if r["kind"] == "jax" and r["dtype"] == "float32" and not r.get("explore")
        and r["n"] == max(data["config"]["sizes"]) and "error" not in r
    }
    for r in data["results"]:
        if not r.get("explore") or "error" in r:
            continue
        ref = base.get((r["t"], r["devices"]))
        arrangement = f"unroll={r['unroll']}" + (
            f", blocks of {r['block']:,}" if r.get("block") else "")
        rows.append([bc.fmt_count(r["n"]), r["t"], r["devices"], arrangement,
                     bc.fmt_num(r["median_s"] * 1e3),
                     bc.fmt_num(ref["median_s"] * 1e3) if ref else "—",
                     bc.fmt_num(ref["median_s"] / r["median_s"]) if ref else "—"])
    if not rows:
        return None
    headers = ["N", "T", "devices", "arrangement", "median ms", "default ms",
               "speed-up vs default"]
    return bc.markdown_table(headers, rows, align=["r", "r", "r", "l", "r", "r", "r"])


def headline(data: dict[str, Any]) -> dict[str, Any]:
    """The targets: JAX float32 at the largest N, T = 3, vs the floor and vs the loop."""
    n = max(data["config"]["sizes"])
    t_max = 3 if 3 in data["config"]["rounds"] else min(data["config"]["rounds"])
    bw = data["bandwidth"]["bytes_per_s"]
    floor = floor_bytes(n, t_max, 4) / bw
    loop = next((r for r in data["results"] if r["kind"] == "loop" and r["t"] == t_max
                 and "error" not in r), None)
    out: dict[str, Any] = {"n": n, "t": t_max, "floor_ms": floor * 1e3}
    for devices in (1, 2):
        r = next((r for r in data["results"] if r["kind"] == "jax" and not r.get("explore")
                  and r["dtype"] == "float32" and r["devices"] == devices and r["n"] == n
                  and r["t"] == t_max and "error" not in r), None)
        if r is None:
            continue
        key = f"jax_f32_{devices}dev"
        out[key + "_ms"] = r["median_s"] * 1e3
        out[key + "_best_ms"] = min(r["times_s"]) * 1e3
        out[key + "_x_floor"] = r["median_s"] / floor
        out[key + "_best_x_floor"] = min(r["times_s"]) / floor
        if loop:
            out[key + "_x_loop"] = loop["per_trajectory_s"] * n / r["median_s"]
    bw2 = data["bandwidth"].get("two_thread_bytes_per_s")
    if bw2 and "jax_f32_2dev_ms" in out:
        # Two devices read memory with two threads: also compare with that floor.
        out["floor2_ms"] = floor_bytes(n, t_max, 4) / bw2 * 1e3
        out["jax_f32_2dev_x_floor2"] = out["jax_f32_2dev_ms"] / out["floor2_ms"]
    # The arrangement fastuq uses by default: one XLA device per core (2 here).
    best = "jax_f32_2dev" if "jax_f32_2dev_ms" in out else "jax_f32_1dev"
    out["default_arrangement"] = best
    worst_floor = max(out.get(f"{best}_x_floor", np.inf), out.get(f"{best}_x_floor2", 0.0))
    out["target_within_3x_floor"] = worst_floor <= 3.0
    out["target_1000x_loop"] = out.get(f"{best}_x_loop", 0.0) >= 1000.0
    return out


def render(data: dict[str, Any]) -> str:
    info, bw, h = data["machine"], data["bandwidth"], data["headline"]
    bw2 = bw.get("two_thread_bytes_per_s")
    lines = [
        f"Run {info['date']} on {info['cpu_count']} CPUs ({info['cpu_model']}), "
        f"NumPy {info['numpy']}, JAX {info['jax']}; load average at start "
        f"{', '.join(f'{x:.2f}' for x in info.get('loadavg_start', []))}, at end "
        f"{', '.join(f'{x:.2f}' for x in data.get('loadavg_end', []))}. "
        f"Medians of {data['config']['repeats']} repeats "
        f"({data['config']['big_repeats']} for N = 1e7). "
        f"Copy bandwidth (one-thread `np.copyto` of {bw['array_bytes'] / 2**20:.0f} MiB, "
        f"read + write): {bw['bytes_per_s'] / 1e9:.1f} GB/s"
        + (f"; two threads: {bw2 / 1e9:.1f} GB/s" if bw2 else "") + ".",
        "",
    ]
    if "jax_f32_1dev_x_floor" in h:
        two = "jax_f32_2dev_ms" in h
        lines += [
            f"**Headline** (N = {bc.fmt_count(h['n'])}, T = {h['t']}, float32; floor "
            f"{h['floor_ms']:.1f} ms at one-thread bandwidth"
            + (f", {h['floor2_ms']:.1f} ms at two-thread bandwidth" if "floor2_ms" in h else "")
            + "): "
            + (f"on 2 devices (fastuq's default: one per core, each scoring its slice) JAX "
               f"takes {h['jax_f32_2dev_ms']:.1f} ms = {h['jax_f32_2dev_x_floor']:.2f}× the "
               f"one-thread floor"
               + (f", {h['jax_f32_2dev_x_floor2']:.2f}× the two-thread floor"
                  if "jax_f32_2dev_x_floor2" in h else "")
               + f", {h.get('jax_f32_2dev_x_loop', float('nan')):,.0f}× the per-trajectory "
               f"loop; " if two else "")
            + f"on 1 device {h['jax_f32_1dev_ms']:.1f} ms = {h['jax_f32_1dev_x_floor']:.2f}× "
            f"the floor, {h.get('jax_f32_1dev_x_loop', float('nan')):,.0f}× the loop. "
            f"Targets (default arrangement): within 3× of the floor: "
            f"{'met' if h['target_within_3x_floor'] else 'missed'}; at least 1000× the loop: "
            f"{'met' if h['target_1000x_loop'] else 'missed'}.",
            "",
        ]
    lines.append(data["table"])
    if data.get("explore_table"):
        lines += ["", "Other arrangements of the JAX kernel (`--explore`; float32; `unroll=` "
                  "argument of `sauce_scan`, whose default fully unrolls T ≤ 64; \"blocks\": a "
                  "`fori_loop` over cache-sized column blocks, per device; not in the kernel):",
                  "", data["explore_table"]]
    return "\n".join(lines)


def parse_sizes(text: str) -> list[int]:
    return [int(float(x)) for x in text.split(",") if x.strip()]


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--quick", action="store_true",
                   help="smoke test: N = 1e4, 1e5, 3 repeats, small loop subset (timed in README); "
                        f"writes {QUICK_OUT.relative_to(bc.REPO_ROOT)} and not the README")
    p.add_argument("--sizes", type=parse_sizes, default=None,
                   help="comma-separated N values (default 1e5,1e6,1e7)")
    p.add_argument("--rounds", type=parse_sizes, default=None,
                   help="comma-separated T values (default 3,15)")
    p.add_argument("--repeats", type=int, default=None, help="timed repeats (default 7)")
    p.add_argument("--big-repeats", type=int, default=None,
                   help="timed repeats for N >= 1e7 (default 3)")
    p.add_argument("--loop-subset", type=int, default=None,
                   help="trajectories timed for the per-trajectory loop (default 20000)")
    p.add_argument("--e2e-size", type=lambda s: int(float(s)), default=None,
                   help="N for the sauce_batch end-to-end rows (default 1e6)")
    p.add_argument("--explore", action="store_true",
                   help="also time other arrangements of the JAX kernel (unroll factors, "
                        "cache-sized column blocks) at the largest N, float32")
    bc.add_output_args(p)
    args = p.parse_args(argv)

    def rebuild(data):
        data["table"] = build_table(data)
        data["explore_table"] = build_explore_table(data)
        data["headline"] = headline(data)
        return render(data)

    if bc.handled(args, NAME, worker_main, rebuild):
        return

    q = args.quick
    args.sizes = args.sizes or ([10**4, 10**5] if q else [10**5, 10**6, 10**7])
    args.rounds = args.rounds or [3, 15]
    args.repeats = args.repeats or (3 if q else 7)
    args.big_repeats = args.big_repeats or min(args.repeats, 3)
    args.loop_subset = args.loop_subset or (2000 if q else 20000)
    args.e2e_size = args.e2e_size or (max(args.sizes) if q else 10**6)
    out_path = args.out or (QUICK_OUT if q else DEFAULT_OUT)
    write_readme = not (q or args.no_readme)

    t0 = time.perf_counter()
    machine = bc.machine_info()
    results: list[dict[str, Any]] = []
    bw_spec = {"kind": "bandwidth", "nbytes": 256 * 2**20 if q else 512 * 2**20,
               "repeats": 3 if q else 7}
    print("SAUCE benchmark: bandwidth", file=sys.stderr)
    bw_runs = [_run(bw_spec, results)]
    print("per-trajectory loop", file=sys.stderr)
    for t_max in args.rounds:
        _run({"kind": "loop", "t": t_max, "subset": args.loop_subset,
              "repeats": 3 if q else 5}, results)
    print("kernels", file=sys.stderr)
    for spec in plan(args):
        _run(spec, results)
    print("bandwidth again", file=sys.stderr)
    bw_runs.append(_run(bw_spec, results))
    loadavg_end = list(os.getloadavg())

    good = [r for r in bw_runs if "error" not in r]
    if not good:
        raise SystemExit("bandwidth measurement failed: " + bw_runs[0]["error"])
    # The better of the two measurements: a stricter floor (noise only slows copies down).
    one = max((r["threads_1"] for r in good), key=lambda b: b["bytes_per_s"])
    two = max((r["threads_2"] for r in good), key=lambda b: b["bytes_per_s"])
    data: dict[str, Any] = {
        "benchmark": "sauce",
        "machine": machine,
        "loadavg_end": loadavg_end,
        "config": {"sizes": args.sizes, "rounds": args.rounds, "repeats": args.repeats,
                   "big_repeats": args.big_repeats, "loop_subset": args.loop_subset,
                   "e2e_size": args.e2e_size, "quick": q, "seed": SEED,
                   "params": dict(zip(("lam", "q", "sigma2_0", "mu_0"), DEBATE, strict=True))},
        "memory_note": "peak_rss_delta = peak RSS (ru_maxrss, reset via /proc/self/clear_refs "
                       "after warm-up) during the timed calls minus RSS before the inputs "
                       "were allocated; includes the inputs (input_bytes)",
        "floor_note": "floor_s = (T*N*(2*itemsize+1) + N*itemsize) / bandwidth.bytes_per_s; "
                      "bandwidth = 2 * array_bytes / median np.copyto time (read + write)",
        "bandwidth": {**one, "two_thread_bytes_per_s": two["bytes_per_s"],
                      "runs": [r for r in bw_runs if "error" not in r]},
        "results": [r for r in results if r["kind"] != "bandwidth"],
        "wall_s": None,
    }
    data["headline"] = headline(data)
    data["checks"] = consistency(data)
    data["table"] = build_table(data)
    data["explore_table"] = build_explore_table(data)
    data["wall_s"] = time.perf_counter() - t0
    text = render(data)
    print(text)
    for msg in data["checks"]:
        print("WARNING:", msg, file=sys.stderr)
    bc.write_json(out_path, data)
    print(f"\nwrote {out_path}", file=sys.stderr)
    if write_readme:
        if bc.replace_section(bc.README, NAME, text):
            print(f"updated the {NAME} section of {bc.README}", file=sys.stderr)
        else:
            print(f"{bc.README} has no {NAME} markers; not updated", file=sys.stderr)
    print(f"total {data['wall_s']:.0f} s", file=sys.stderr)


def consistency(data: dict[str, Any]) -> list[str]:
    """Every method scored the same batch: their mean scores must agree (per dtype)."""
    msgs = []
    groups: dict[tuple, list[tuple[str, float]]] = {}
    for r in data["results"]:
        if "score_mean" not in r or r["kind"] in ("loop",):
            continue
        key = (r["n"], r["t"])
        groups.setdefault(key, []).append((_label(r), r["score_mean"]))
    for key, items in groups.items():
        ref = items[0][1]
        for label, value in items[1:]:
            if not np.isclose(value, ref, rtol=1e-4, atol=1e-6):
                msgs.append(f"N={key[0]} T={key[1]}: {label} mean score {value} != {ref}")
    errors = [f"{_label(r)} failed: {r['error']}" for r in data["results"] if "error" in r]
    return msgs + errors


if __name__ == "__main__":
    main()
