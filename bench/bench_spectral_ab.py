"""A/B of the spectral family's kernels on answer classes (``eigval_laplacian``,
``degree_matrix``, ``eccentricity``): a git revision (``--before``, default ``main``) against
the working tree, interleaved in one process per configuration, so that the ratio holds on
a loaded machine.

"before" is ``kernels/spectral.py`` as it is at the revision, fed the input it packed then:
the vote classes with the team, as "after", where its kernels take ``n_agents``; before
that, each node's lowest same-class slot, ``[T, N, A_pad]`` float32, built here on the host
and not timed; "after" is the working tree's, fed the engine's packing now (the vote classes,
``narrow_classes``, with the team ``n_agents``). Both run through
``fastuq.engine.runtime.run_bucketed`` (padding to the bucket, transfer to the XLA CPU
devices, the kernel, the copy back), as ``call_kernel`` runs them, float32, on 2 XLA CPU
devices; a warm-up call each (compiles: "first"), then ``--repeats`` alternating calls
(median). The outputs of the two are compared bit for bit. Prints one line per estimator and
the load average before and after; writes nothing.

    python bench/bench_spectral_ab.py --rounds 10 --agents 16           # N = 1e6
    python bench/bench_spectral_ab.py --rounds 3 --agents 3 --n 1e5 --before HEAD~2
"""

from __future__ import annotations

import argparse
import importlib.util
import inspect
import os
import subprocess
import tempfile
import time
from pathlib import Path

import numpy as np

NAMES = ("eigval_laplacian", "degree_matrix", "eccentricity")
ROOT = Path(__file__).resolve().parents[1]


def _old_module(rev: str):
    """``kernels/spectral.py`` at git revision ``rev``, imported under another name."""
    text = subprocess.run(["git", "show", f"{rev}:kernels/spectral.py"], cwd=ROOT,
                          check=True, capture_output=True, text=True).stdout
    path = Path(tempfile.mkdtemp()) / "spectral_before.py"
    path.write_text(text)
    spec = importlib.util.spec_from_file_location("spectral_before", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def draw(n: int, t_max: int, a: int, seed: int = 0):
    """``(classes [T, N, A_pad] int32, round_mask [T, N], labels [T, N, A_pad] float32)``:
    ragged trajectories (1..T rounds), 3 answer classes, 10% of the nodes without a vote
    (-1); ``labels`` the old packing (lowest same-class slot, own slot without a vote, -1
    past the team)."""
    rng = np.random.default_rng(seed)
    a_pad = 1 << max(a - 1, 0).bit_length()
    mask = np.arange(t_max)[:, None] < rng.integers(1, t_max + 1, n)[None, :]
    cls = rng.integers(0, 3, (t_max, n, a_pad)).astype(np.int32)
    cls[rng.random(cls.shape, np.float32) < 0.1] = -1
    cls[..., a:] = -1
    labels = np.full(cls.shape, -1.0, np.float32)
    for i in range(a):
        rep = np.full(cls.shape[:2], i, np.int8)
        for j in range(i - 1, -1, -1):
            rep = np.where((cls[..., j] >= 0) & (cls[..., j] == cls[..., i]), j, rep)
        labels[..., i] = np.where(cls[..., i] >= 0, rep, i)
    return cls, mask, labels


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--before", default="main", help="git revision (default main)")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--agents", type=int, default=3)
    parser.add_argument("--n", type=float, default=1e6)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--devices", type=int, default=2)
    args = parser.parse_args()

    import fastuq

    fastuq.use_cpu_devices(args.devices)
    import jax

    from fastuq.engine.runtime import run_bucketed
    from fastuq.engine.similarity import narrow_classes
    from fastuq.kernels import spectral as new

    old = _old_module(args.before)
    n, t_max, a = int(args.n), args.rounds, args.agents
    cls, mask, labels = draw(n, t_max, a)
    small = narrow_classes(cls)
    team = np.full(n, float(a), np.float32)

    # a revision from before the vote-class packing (its kernels take no team) is fed the
    # lowest-slot labels it packed then; a later one the same input as the working tree
    same_input = "n_agents" in inspect.signature(getattr(old, NAMES[0])).parameters

    def before(labels, mask, *, name):
        return getattr(old, name)(labels, mask)

    def before_same(classes, mask, team, *, name):
        return getattr(old, name)(classes, mask, n_agents=team)

    def after(classes, mask, team, *, name):
        return getattr(new, name)(classes, mask, n_agents=team)

    def run(side: str, name: str):
        with jax.enable_x64(False):
            if side == "before" and same_input:
                return run_bucketed(before_same, [(small, 1, -1), (mask, 1, False),
                                                  (team, 0, 1.0)], n,
                                    np.dtype(np.float32), name=name)
            if side == "before":
                return run_bucketed(before, [(labels, 1, -1.0), (mask, 1, False)], n,
                                    np.dtype(np.float32), name=name)
            return run_bucketed(after, [(small, 1, -1), (mask, 1, False), (team, 0, 1.0)], n,
                                np.dtype(np.float32), name=name)

    print(f"T = {t_max}, A = {a}, N = {n:,}, {args.devices} XLA CPU devices, classes "
          f"{small.dtype}; load average {os.getloadavg()[0]:.1f}", flush=True)
    for name in NAMES:
        first, outs, times = {}, {}, {"before": [], "after": []}
        for side in ("before", "after"):
            start = time.perf_counter()
            outs[side] = run(side, name)
            first[side] = time.perf_counter() - start
        same = all(np.array_equal(outs["before"][k], outs["after"][k], equal_nan=True)
                   for k in outs["before"])
        worst = max(float(np.nanmax(np.abs(outs["before"][k] - outs["after"][k]), initial=0))
                    for k in outs["before"])
        for _ in range(args.repeats):
            for side in ("before", "after"):
                start = time.perf_counter()
                run(side, name)
                times[side].append(time.perf_counter() - start)
        mb, ma = float(np.median(times["before"])), float(np.median(times["after"]))
        print(f"{name:17s} before {n / mb / 1e6:5.2f}M/s ({mb * 1e3:5.0f} ms, first "
              f"{first['before']:.1f} s) | after {n / ma / 1e6:5.2f}M/s ({ma * 1e3:5.0f} ms, "
              f"first {first['after']:.1f} s) | x{mb / ma:.2f} | outputs "
              f"{'bit-identical' if same else f'differ by <= {worst:.2g}'}", flush=True)
    print(f"load average after {os.getloadavg()[0]:.1f}", flush=True)


if __name__ == "__main__":
    main()
