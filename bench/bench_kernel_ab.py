"""A/B of a kernel before and after a change, interleaved in one process, against the floor.

Imports the kernel module as it is at a git revision (``--before``, default ``main``) beside
the working tree's, and times both on the same device arrays, alternating calls, so that
the ratio holds on a loaded machine. On several XLA CPU devices each device scores its own
slice (``jax.shard_map``, as ``fastuq.engine.runtime.per_device`` runs it): "before" is
compiled with XLA's defaults (``--before-options`` gives it the same options as "after"),
"after" with ``XLA_COMPILER_OPTIONS`` (what ``per_device`` passes). On one device "before"
is the old kernel called directly, as the old revision's engine called it (with the jit
wrapper of that revision's ``kernels/_compile.py``, loaded beside it: before the compile
options moved to the engine's outer jit, a top-level call picked the options itself),
"after" is the kernel inside the engine's top-level jit with the options (``per_device``
on one device since that move), and
"direct" the new kernel called directly (a plain jit since then: XLA's defaults). The
floor is (bytes read + written) / the copy bandwidth of a 512 MiB ``np.copyto`` on one and
on two threads, measured before and after the timed calls (the larger of the two). Prints
one JSON line and a summary; writes nothing.

    python bench/bench_kernel_ab.py sauce --devices 2 --rounds 15 --n 1e7 --repeats 15
    python bench/bench_kernel_ab.py umas --devices 2 --rounds 13 --agents 4 --n 1e6
    python bench/bench_kernel_ab.py sauce --quick     # N = 1e5, 3 repeats
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import subprocess
import sys
import tempfile
import time
from functools import partial
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
import _common as bc  # noqa: E402

REPO = Path(__file__).resolve().parent.parent


def _old_module(kernel: str, rev: str):
    source = subprocess.run(["git", "-C", str(REPO), "show", f"{rev}:kernels/{kernel}.py"],
                            check=True, capture_output=True, text=True).stdout
    if kernel != "_compile" and "from ._compile import" in source:  # the old jit wrapper too
        _old_module("_compile", rev)
        source = source.replace("from ._compile import", "from ._before__compile import")
    path = Path(tempfile.mkdtemp()) / f"_before_{kernel}.py"
    path.write_text(source)
    name = f"fastuq.kernels._before_{kernel}"  # relative imports resolve in fastuq.kernels
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("kernel", choices=("sauce", "umas"))
    p.add_argument("--before", default="main", help="git revision of the 'before' kernel")
    p.add_argument("--devices", type=int, default=2)
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--agents", type=int, default=4, help="UMAS agent slots")
    p.add_argument("--n", type=lambda s: int(float(s)), default=None,
                   help="trajectories (default 1e7 SAUCE, 1e6 UMAS)")
    p.add_argument("--dtype", default="float32", choices=("float32", "float64"))
    p.add_argument("--repeats", type=int, default=None, help="timed pairs (default 15)")
    p.add_argument("--quick", action="store_true", help="smoke test: N = 1e5, 3 repeats")
    p.add_argument("--before-options", action="store_true",
                   help="on several devices, compile 'before' with the options too")
    args = p.parse_args(argv)
    n = args.n or (10**5 if args.quick else 10**7 if args.kernel == "sauce" else 10**6)
    args.repeats = args.repeats or (3 if args.quick else 15)

    import fastuq

    fastuq.use_cpu_devices(args.devices)
    import jax
    from jax.sharding import Mesh, NamedSharding
    from jax.sharding import PartitionSpec as P

    from fastuq.kernels._compile import top_level_jit
    from fastuq.kernels.constants import XLA_COMPILER_OPTIONS

    old = _old_module(args.kernel, args.before)
    bandwidth = [{k: bc.copy_bandwidth(512 * 2**20, repeats=5, threads=k)["bytes_per_s"]
                  for k in (1, 2)}]
    load = [os.getloadavg()]
    itemsize = np.dtype(args.dtype).itemsize
    with jax.enable_x64(args.dtype == "float64"):
        mesh = Mesh(np.array(jax.devices()), ("batch",))
        target = NamedSharding(mesh, P(None, "batch")) if args.devices > 1 else jax.devices()[0]
        if args.kernel == "sauce":
            import bench_sauce

            from fastuq.kernels import sauce as new

            arrays = bench_sauce.make_inputs(n, args.rounds, args.dtype)
            params = new.SauceParams(*(np.asarray(x, args.dtype) for x in bench_sauce.DEBATE))
            nbytes = bench_sauce.floor_bytes(n, args.rounds, itemsize)

            def score(module, a, h, m):
                return module.sauce_scan(a, h, m, params, fields=("score",))["score"]
        else:
            import bench_umas

            from fastuq.kernels import umas as new

            conf, mask = bench_umas.make_batch(n, args.rounds, args.agents)
            arrays = (conf.astype(args.dtype), mask)
            nbytes = args.rounds * n * args.agents * (itemsize + 1) + n * itemsize

            def score(module, c, m):
                return module.umas_scan(c, m, None, fields=("umas",))["umas"]
        inputs = [jax.device_put(x, target) for x in arrays]
        del arrays

        def build(module, options):
            fn = partial(score, module)
            if args.devices > 1:
                spec = (P(None, "batch"),) * len(inputs)
                return jax.jit(lambda *x: jax.shard_map(fn, mesh=mesh, in_specs=spec,
                                                        out_specs=P("batch"),
                                                        check_vma=False)(*x),
                               compiler_options=options)
            return fn

        if args.devices > 1:
            fns = {"before": build(old, XLA_COMPILER_OPTIONS if args.before_options else None),
                   "after": build(new, XLA_COMPILER_OPTIONS)}
        else:
            fns = {"before": build(old, None), "after": top_level_jit(build(new, None)),
                   "direct": build(new, None)}
        first = {}
        outs = {}
        for name, fn in fns.items():
            start = time.perf_counter()
            outs[name] = np.asarray(fn(*inputs))
            first[name] = time.perf_counter() - start
        identical = all(np.array_equal(outs["before"].view(np.uint8), o.view(np.uint8))
                        for o in outs.values())
        times = {name: [] for name in fns}
        for _ in range(args.repeats):
            for name, fn in fns.items():
                start = time.perf_counter()
                fn(*inputs).block_until_ready()
                times[name].append(time.perf_counter() - start)
    load.append(os.getloadavg())
    bandwidth.append({k: bc.copy_bandwidth(512 * 2**20, repeats=5, threads=k)["bytes_per_s"]
                      for k in (1, 2)})
    bw = {k: max(b[k] for b in bandwidth) for k in (1, 2)}
    floor = {k: nbytes / bw[k] for k in (1, 2)}
    result = {
        "kernel": args.kernel, "before": args.before, "n": n, "rounds": args.rounds,
        "agents": args.agents if args.kernel == "umas" else None, "dtype": args.dtype,
        "devices": args.devices, "repeats": args.repeats, "bit_identical": bool(identical),
        "date": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "load_1min": [load[0][0], load[1][0]],
        "copy_GBps": {str(k): [b[k] / 1e9 for b in bandwidth] for k in (1, 2)},
        "floor_ms": {str(k): floor[k] * 1e3 for k in (1, 2)},
    }
    for name in fns:
        median = bc.median(times[name])
        result[name + "_ms"] = {"median": median * 1e3, "best": min(times[name]) * 1e3,
                                "first_call": first[name] * 1e3,
                                "x_floor_1t": median / floor[1], "x_floor_2t": median / floor[2]}
    print(json.dumps(result))
    print(f"{args.kernel} N={n:,} T={args.rounds} {args.dtype} devices={args.devices}: floor "
          f"{floor[1] * 1e3:.1f} ms (1 thread, {bw[1] / 1e9:.1f} GB/s) / {floor[2] * 1e3:.1f} ms "
          f"(2 threads, {bw[2] / 1e9:.1f} GB/s); load {load[0][0]:.2f} -> {load[1][0]:.2f}; "
          f"bit-identical: {identical}")
    for name in fns:
        r = result[name + "_ms"]
        print(f"  {name:6s} median {r['median']:8.2f} ms  best {r['best']:8.2f}  "
              f"x floor {r['x_floor_1t']:.2f} (1t) {r['x_floor_2t']:.2f} (2t)")


if __name__ == "__main__":
    main()
