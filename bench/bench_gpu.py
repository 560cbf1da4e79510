"""GPU benchmarks in one script: kernels against the device's copy bandwidth,
``sauce_batch`` against the host-to-device copy of its inputs, sweeps ranked on the device
against the host, ``fastuq score`` end to end, and the test suite; JSON and a markdown table.

Needs no network: on the GPU machine (jax with CUDA, numpy, pyarrow, scikit-learn; no polars)
carry the wheels of ``polars``, ``polars-runtime-32`` and fastuq in an ignored folder and::

    pip install --no-index --no-deps --target /tmp/site wheels/*.whl
    PYTHONPATH=/tmp/site python bench/bench_gpu.py --out "$OUT"          # full sizes
    python bench/bench_gpu.py --quick --out /tmp/gpu                       # smoke test (CPU)

Every number is a median over ``--repeats`` timed calls after a warm-up call, taken in this
one process; ratios are side by side in the same run. Writes ``OUT/gpu.json`` and
``OUT/gpu.md`` (and ``OUT/pytest.txt`` unless ``--no-tests``).

What is measured (full sizes; ``--quick`` divides N by 1000 and grids by 4):

* ``copy``: a device-to-device copy of a 4 GiB float32 array (read + write bytes / time), the
  bandwidth floor of the kernels;
* ``sauce``: the SAUCE kernel at N = 1e8, T = 3, float32, bytes read and written over time
  as a fraction of the copy bandwidth (target >= 60%);
* ``umas``: UMAS at N = 2.5e7, A = 4, T = 3, likewise (target >= 40%);
* ``sauce_batch``: ``fastuq.sauce_batch`` from NumPy arrays of 1e7 trajectories against
  ``jax.device_put`` of the same inputs (target: within 2x);
* ``sweep``: 32 x 32 over 1e6 and 16 x 16 over 1e7 trajectories, ranked on the device and
  on the host (targets <= 1 s and <= 5 s);
* ``score``: ``fastuq.score_file`` SAUCE from a 1e7-trajectory Parquet corpus (target >=
  3e7 trajectories/s);
* ``pack``: SAUCE's inputs (agreement, token entropy, round mask) packed and checked on the
  host (``Batch(pack="host")``, then the ``jax.device_put`` the kernel's call does) against
  on the device (``pack="device"``: flat values and offsets moved once, padded arrays and
  checks built there), chunks of 262,144 of a 1e6-trajectory corpus (``signals``: the
  agreement column; ``answers``: agreement from the answers' vote classes, which are
  computed on the host first, untimed, the same for both), in ms per 1e6 trajectories;
  then ``fastuq.score_file`` SAUCE end to end with ``pack="host"`` and ``"device"`` (scores
  compared bit for bit). Runs on a CPU too (``--only pack``): there device packing is the
  same work through XLA, which is why ``pack="auto"`` keeps the host on a CPU;
* ``estimators``: ``fastuq bench`` (``fastuq.evaluation.bench.run_bench``) on the device:
  every registered estimator at N = 1e6, T = 3, A = 3, float32, against the device copy
  bandwidth, with the per-trajectory reference's agreement;
* ``tests``: ``pytest -p no:cacheprovider`` on the installed package, its summary line.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np

HERE = Path(__file__).resolve().parent
REPO = HERE.parent


def _median_time(fn, repeats: int) -> float:
    """The median of ``repeats`` calls after a warm-up (compiling) call: the package's
    harness (``fastuq.evaluation.timing``, which ``fastuq bench`` uses)."""
    from fastuq.evaluation.timing import median, time_calls

    return median(time_calls(fn, repeats, warmup=1))


def _block(x):
    import jax

    return jax.block_until_ready(x)


def bench_copy(jax, jnp, n_bytes: int, repeats: int) -> dict[str, Any]:
    """The device copy bandwidth: ``fastuq bench``'s floor
    (``fastuq.evaluation.timing.device_copy_bandwidth``, a jitted ``a + 0`` over float32,
    one read and one write per element)."""
    from fastuq.evaluation.timing import device_copy_bandwidth

    c = device_copy_bandwidth(n_bytes, repeats)
    return {"bytes": c["array_bytes"], "s": c["median_s"], "bytes_per_s": c["bytes_per_s"]}


def bench_estimators(n: int, repeats: int) -> dict[str, Any]:
    """``fastuq bench`` on the device: every registered estimator at N, T = 3, A = 3,
    float32 (the results file's dict: machine, bandwidth, settings, results)."""
    from fastuq.evaluation.bench import run_bench

    return run_bench("all", n=(n,), rounds=(3,), agents=(3,), dtype="float32",
                     repeats=repeats, subsample=200,
                     progress=lambda line: print(f"estimators: {line}", flush=True))


def bench_sauce(jax, jnp, n: int, t_max: int, repeats: int, bw: float) -> dict[str, Any]:
    from fastuq.engine.registry import get_estimator

    kernel = get_estimator("sauce").kernel_fn("jax")
    key = jax.random.PRNGKey(0)
    a = jax.random.uniform(key, (t_max, n), jnp.float32)
    h = jax.random.uniform(jax.random.PRNGKey(1), (t_max, n), jnp.float32)
    m = jnp.ones((t_max, n), bool)
    fn = jax.jit(lambda a, h, m: kernel(a, h, m, lam=0.95, q=0.1, sigma2_0=0.25, mu_0=0.0))
    t = _median_time(lambda: _block(fn(a, h, m)), repeats)
    moved = a.nbytes + h.nbytes + m.nbytes + 4 * n
    return {"n": n, "t": t_max, "s": t, "traj_per_s": n / t, "bytes": moved,
            "bandwidth_fraction": moved / t / bw}


def bench_umas(jax, jnp, n: int, a_slots: int, t_max: int, repeats: int,
               bw: float) -> dict[str, Any]:
    from fastuq.engine.registry import get_estimator

    kernel = get_estimator("umas").kernel_fn("jax")
    c = -jax.random.exponential(jax.random.PRNGKey(2), (t_max, n, a_slots), jnp.float32)
    mask = jnp.ones((t_max, n, a_slots), bool)
    fn = jax.jit(lambda c, m: kernel(c, m))
    t = _median_time(lambda: _block(fn(c, mask)), repeats)
    moved = c.nbytes + mask.nbytes + 4 * n
    return {"n": n, "a": a_slots, "t": t_max, "s": t, "traj_per_s": n / t, "bytes": moved,
            "bandwidth_fraction": moved / t / bw}


def bench_sauce_batch(jax, n: int, t_max: int, repeats: int) -> dict[str, Any]:
    import fastuq

    rng = np.random.default_rng(0)
    a = rng.random((t_max, n), dtype=np.float32)
    h = rng.random((t_max, n), dtype=np.float32)
    m = np.ones((t_max, n), bool)
    t_batch = _median_time(lambda: fastuq.sauce_batch(a, h, m, dtype="float32"), repeats)
    t_put = _median_time(lambda: _block(jax.device_put((a, h, m))), repeats)
    return {"n": n, "t": t_max, "sauce_batch_s": t_batch, "device_put_s": t_put,
            "ratio": t_batch / t_put}


def bench_sweep(n: int, side: int, repeats: int, tmp: Path) -> dict[str, Any]:
    from fastuq import synth
    from fastuq.sweeps import load_sauce_data, sweep

    path = tmp / f"sweep_{n}.parquet"
    synth.write(synth.corpus_chunks(n, protocol="mixed", seed=0), path)
    data = load_sauce_data(path, dtype="float32")
    grid = {"lam": np.linspace(0.5, 1.0, side), "q": np.geomspace(1e-3, 1.0, side)}
    out = {"n": n, "grid": f"{side} x {side}"}
    for rank in ("device", "host"):
        out[f"{rank}_s"] = _median_time(lambda rank=rank: sweep(data, grid, rank=rank),
                                        max(1, repeats // 2))
    a = sweep(data, grid, rank="device")
    b = sweep(data, grid, rank="host")
    out["auroc_identical"] = bool(np.array_equal(a["auroc"].to_numpy(), b["auroc"].to_numpy()))
    out["auarc_max_abs_diff"] = float(np.max(np.abs(a["auarc"].to_numpy()
                                                    - b["auarc"].to_numpy())))
    return out


def bench_score(n: int, repeats: int, tmp: Path) -> dict[str, Any]:
    import fastuq
    from fastuq import synth

    path = tmp / f"score_{n}.parquet"
    synth.write(synth.corpus_chunks(n, protocol="mixed", seed=1), path)
    out_path = tmp / "scores.parquet"
    t = _median_time(lambda: fastuq.score_file(path, out_path, methods="sauce",
                                               dtype="float32"), max(1, repeats // 2))
    return {"n": n, "s": t, "traj_per_s": n / t}


def bench_pack(n: int, repeats: int, tmp: Path, chunk: int = 1 << 18,
               dtype: str | None = None) -> dict[str, Any]:
    """Host against device packing of SAUCE's inputs (see the module docstring)."""
    import jax
    import pyarrow.parquet as pq

    import fastuq
    from fastuq import synth
    from fastuq.engine.batch import Batch
    from fastuq.engine.device_pack import DeviceArray, default_dtype
    from fastuq.engine.inputs import INPUTS, Context
    from fastuq.engine.runtime import bucket_size, local_devices

    dtype = str(default_dtype(dtype))
    path = tmp / f"pack_{n}.parquet"
    synth.write(synth.corpus_chunks(n, protocol="mixed", seed=2), path)
    table = pq.read_table(path)
    names = ("agreement", "token_entropy", "round_mask")
    device = local_devices()[0]

    def build(batch) -> list:
        ctx = Context(batch, {}, names)
        return [INPUTS[name].build(ctx) for name in names]

    def to_device(arrays: list, n_rows: int) -> None:  # what the kernel's call moves
        width = bucket_size(n_rows, 1 << 20)
        put = []
        for x in arrays:
            if isinstance(x, DeviceArray):
                put.append(x.padded)
            else:
                pad = np.zeros((x.shape[0], width), x.dtype)
                pad[:, :n_rows] = x
                put.append(jax.device_put(pad, device))
        jax.block_until_ready(put)

    out: dict[str, Any] = {"n": n, "chunk": chunk, "dtype": dtype}
    for kind in ("signals", "answers"):
        source = table if kind == "signals" else table.drop_columns(["agreement"])
        parts = [source.slice(s, chunk) for s in range(0, n, chunk)]
        for pack in ("host", "device"):
            def one(pack=pack, parts=parts, kind=kind):
                total = built = 0.0
                for part in parts:
                    batch = Batch(part, dtype=dtype, pack=pack)
                    if kind == "answers":
                        batch.vote_classes()  # host work, the same for both: untimed
                    t0 = time.perf_counter()
                    arrays = build(batch)
                    if pack == "device":
                        jax.block_until_ready([x.padded for x in arrays])
                    t1 = time.perf_counter()
                    to_device(arrays, part.num_rows)
                    total += time.perf_counter() - t0
                    built += t1 - t0
                    if pack == "device":
                        assert all(isinstance(x, DeviceArray) for x in arrays)
                return total, built
            one()  # warm-up (compilation)
            times = np.array([one() for _ in range(repeats)])
            out[f"{kind}_{pack}_ms_per_1e6"] = float(np.median(times[:, 0])) * 1e9 / n
            if pack == "host":  # without the padding and copy to the device
                out[f"{kind}_host_build_ms_per_1e6"] = float(np.median(times[:, 1])) * 1e9 / n
        # the same bits either way
        host = build(Batch(parts[0], dtype=dtype, pack="host"))
        dev = build(Batch(parts[0], dtype=dtype, pack="device"))
        out[f"{kind}_identical"] = all(
            np.array_equal(np.asarray(a), np.asarray(b), equal_nan=True)
            for a, b in zip(host, dev, strict=True))
    scores = {}
    for pack in ("host", "device"):
        dest = tmp / f"pack_scores_{pack}.parquet"
        out[f"score_{pack}_s"] = _median_time(
            lambda pack=pack, dest=dest: fastuq.score_file(path, dest, methods="sauce",
                                                           dtype=dtype, pack=pack),
            max(1, repeats // 2))
        scores[pack] = pq.read_table(dest).column("sauce").to_numpy()
    out["score_identical"] = bool(np.array_equal(scores["host"].view(np.uint64),
                                                 scores["device"].view(np.uint64)))
    return out


def run_tests(out: Path) -> dict[str, Any]:
    t0 = time.perf_counter()
    proc = subprocess.run([sys.executable, "-m", "pytest", "-p", "no:cacheprovider"],
                          cwd=REPO, capture_output=True, text=True)
    (out / "pytest.txt").write_text(proc.stdout + proc.stderr)
    lines = [x for x in proc.stdout.splitlines() if x.strip()]
    return {"returncode": proc.returncode, "summary": lines[-1] if lines else "",
            "s": time.perf_counter() - t0}


def render(data: dict[str, Any]) -> str:
    r = data["results"]
    rows = []

    def row(name, value, target):
        rows.append(f"| {name} | {value} | {target} |")

    if "copy" in r:
        row("device copy bandwidth", f"{r['copy']['bytes_per_s'] / 1e9:.0f} GB/s", "")
    if "sauce" in r:
        s = r["sauce"]
        row(f"SAUCE kernel, N = {s['n']:.0e}, T = {s['t']}, float32",
            f"{s['s'] * 1e3:.2f} ms, {s['traj_per_s']:.3g} traj/s, "
            f"{s['bandwidth_fraction']:.0%} of copy bandwidth", ">= 60%")
    if "umas" in r:
        s = r["umas"]
        row(f"UMAS kernel, N = {s['n']:.1e}, A = {s['a']}, T = {s['t']}",
            f"{s['s'] * 1e3:.2f} ms, {s['bandwidth_fraction']:.0%} of copy bandwidth", ">= 40%")
    if "sauce_batch" in r:
        s = r["sauce_batch"]
        row(f"`sauce_batch` from NumPy, N = {s['n']:.0e}",
            f"{s['sauce_batch_s'] * 1e3:.1f} ms = {s['ratio']:.2f}x `device_put` "
            f"({s['device_put_s'] * 1e3:.1f} ms)", "<= 2x")
    for s in r.get("sweeps", []):
        row(f"sweep {s['grid']} over {s['n']:.0e}",
            f"device rank {s['device_s']:.2f} s, host rank {s['host_s']:.2f} s "
            f"(AUROC identical: {s['auroc_identical']})",
            "<= 1 s" if s["n"] <= 1_000_000 else "<= 5 s")
    if "score" in r:
        s = r["score"]
        row(f"`score_file` SAUCE from Parquet, N = {s['n']:.0e}",
            f"{s['s']:.2f} s, {s['traj_per_s']:.3g} traj/s", ">= 3e7/s")
    if "pack" in r:
        s = r["pack"]
        for kind in ("signals", "answers"):
            row(f"pack SAUCE's inputs ({kind}), N = {s['n']:.0e}, {s['dtype']}, ms per 1e6",
                f"host {s[kind + '_host_ms_per_1e6']:.0f} (of which packing and checks "
                f"{s[kind + '_host_build_ms_per_1e6']:.0f}, the rest padding and copy to the "
                f"device), device "
                f"{s[kind + '_device_ms_per_1e6']:.0f} (identical: {s[kind + '_identical']})",
                "device <= host on a GPU")
        row(f"`score_file` SAUCE, pack host / device, N = {s['n']:.0e}",
            f"{s['score_host_s']:.2f} s / {s['score_device_s']:.2f} s (bits identical: "
            f"{s['score_identical']})", "identical")
    for e in (r.get("estimators") or {}).get("results", []):
        if "error" in e:
            row(f"`fastuq bench` {e['method']}", f"not run: {e['error']}", "")
            continue
        row(f"`fastuq bench` {e['method']}, N = {e['n']:.0e}, T = {e['rounds']}, "
            f"A = {e['agents']}, {e['dtype']}",
            f"{e['median_s'] * 1e3:.2f} ms, {e['traj_per_s']:.3g} traj/s, "
            f"{e['floor_ratio']:.1f}x floor, reference agrees: {e['reference_agrees']}",
            "agrees")
    if "tests" in r:
        row("test suite", f"{r['tests']['summary']} ({r['tests']['s']:.0f} s)", "passes")
    head = (f"{data['device']}, JAX {data['jax']}, {data['date']}, command `{data['command']}`"
            f"{' (quick)' if data['quick'] else ''}\n\n")
    return head + "| measure | result | target |\n| :--- | :--- | :--- |\n" + "\n".join(rows) + "\n"


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--out", type=Path, required=True, help="folder for gpu.json, gpu.md")
    p.add_argument("--quick", action="store_true", help="sizes / 1000, grids / 4")
    p.add_argument("--repeats", type=int, default=None)
    p.add_argument("--no-tests", action="store_true", help="skip the test suite")
    p.add_argument("--only", default=None,
                   help="comma list of copy,sauce,umas,sauce_batch,sweep,score,pack,"
                        "estimators,tests")
    args = p.parse_args(argv)
    only = set(args.only.split(",")) if args.only else None
    k = 1000 if args.quick else 1
    repeats = args.repeats or (3 if args.quick else 9)
    args.out.mkdir(parents=True, exist_ok=True)

    import jax
    import jax.numpy as jnp

    dev = jax.devices()[0]
    data: dict[str, Any] = {
        "device": f"{dev.platform}: {getattr(dev, 'device_kind', dev)} x {len(jax.devices())}",
        "jax": jax.__version__, "quick": args.quick,
        "date": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "command": " ".join([Path(sys.argv[0]).name, *(argv or sys.argv[1:])]),
        "results": {},
    }
    r = data["results"]

    def want(name: str) -> bool:
        return only is None or name in only

    def save() -> None:
        (args.out / "gpu.json").write_text(json.dumps(data, indent=1) + "\n")
        (args.out / "gpu.md").write_text(render(data))

    steps = []
    if want("copy") or want("sauce") or want("umas"):
        steps.append(("copy", lambda: bench_copy(jax, jnp, (4 << 30) // k, repeats)))
    bw = lambda: r["copy"]["bytes_per_s"]  # noqa: E731
    if want("sauce"):
        steps.append(("sauce", lambda: bench_sauce(jax, jnp, 100_000_000 // k, 3, repeats,
                                                   bw())))
    if want("umas"):
        steps.append(("umas", lambda: bench_umas(jax, jnp, 25_000_000 // k, 4, 3, repeats,
                                                 bw())))
    if want("sauce_batch"):
        steps.append(("sauce_batch", lambda: bench_sauce_batch(jax, 10_000_000 // k, 3,
                                                               repeats)))
    with tempfile.TemporaryDirectory() as tmp:
        if want("sweep"):
            def sweeps():
                side = 32 // (4 if args.quick else 1)
                return [bench_sweep(1_000_000 // k, side, repeats, Path(tmp)),
                        bench_sweep(10_000_000 // k, side // 2, repeats, Path(tmp))]
            steps.append(("sweeps", sweeps))
        if want("score"):
            steps.append(("score", lambda: bench_score(10_000_000 // k, repeats, Path(tmp))))
        if want("estimators"):  # fastuq bench: every registered estimator
            steps.append(("estimators", lambda: bench_estimators(1_000_000 // k, repeats)))
        if want("pack"):
            steps.append(("pack", lambda: bench_pack(1_000_000 // (10 if args.quick else 1),
                                                     repeats, Path(tmp))))
        for name, fn in steps:
            t0 = time.perf_counter()
            try:
                r[name] = fn()
            except Exception as exc:  # record and go on: one failure must not lose the rest
                r[name + "_error"] = f"{type(exc).__name__}: {exc}"
            print(f"{name}: {time.perf_counter() - t0:.1f} s", flush=True)
            save()
    if want("tests") and not args.no_tests:
        r["tests"] = run_tests(args.out)
        save()
    print(render(data))
    return 0


if __name__ == "__main__":
    sys.exit(main())
