"""Benchmark the black-box estimators of the answer sets (``answer_entropy``,
``num_answer_sets``, ``cocoa``): trajectories per second of each kernel as fastuq runs it,
against the memory-bandwidth floor and against a plain Python loop over samples in the style
of the single-model libraries (lm-polygraph scores one sample set at a time).

Run from the repository root::

    python bench/bench_answer_sets.py            # N = 1e6; T = 3, 10; A = 3, 5, 16
    python bench/bench_answer_sets.py --quick    # N = 1e5; T = 3; A = 3, 16
                                                # writes bench/results/answer_sets_quick.json.tmp
    python bench/bench_answer_sets.py --only cocoa

Each estimator is one entry of :data:`CASES` (name -> its Python loop), so that more
estimators join the same tables (one table per estimator). Inputs, drawn once per (T, A):
ragged trajectories (1..T rounds), answers from 3 classes with 10% of the nodes without a
vote, node confidences ``-Exp(1)`` (the ``answer_sets`` kernels read ``answer_class`` int32
``[T, N, A_pad]``, ``n_agents [N]``, ``round_mask [T, N]``; CoCoA also
``node_confidence [T, N, A_pad]`` float32 and ``node_mask``). Per (estimator, T, A), after a
warm-up call that compiles (its time is the "first call" column), median of repeats:

  JAX       ``fastuq.engine.runner.call_kernel`` on packed host arrays, float32, on 2 XLA CPU
            devices (``fastuq.use_cpu_devices``): padding to the bucket, the transfer, the
            kernel and the copy back, as ``fastuq score`` runs it.
  floor     bytes of the kernel's inputs + output / the two-thread ``np.copyto`` bandwidth
            measured in the same run ("x floor" = JAX time / floor time).
  loop      per trajectory and round, the single-model libraries' computation on the
            round's agents as samples (lm-polygraph's ``compute_semantic_entropy`` with
            frequencies, ``NumSemSets``' connected components of the equality graph,
            ``SemanticEnrichedMaxprobAveDissimilarity`` per sample), timed on ``loop_n``
            trajectories and scaled to N ("x loop" = loop time / JAX time: the speed-up).

The ``_mean`` variants run the same scan (another output): the same cost. Every timed kernel
is checked against the float64 NumPy twin first (max |error| on 2,000 trajectories).
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

NAME = "ANSWER_SETS"
DEFAULT_OUT = bc.RESULTS_DIR / "answer_sets.json"
QUICK_OUT = bc.RESULTS_DIR / "answer_sets_quick.json.tmp"


def draw(n: int, t_max: int, a: int, seed: int = 0) -> dict[str, np.ndarray]:
    """Packed ragged inputs, as the engine packs them (slots padded to a power of two)."""
    rng = np.random.default_rng(seed)
    a_pad = 1 << max(a - 1, 0).bit_length()
    mask = np.arange(t_max)[:, None] < rng.integers(1, t_max + 1, n)[None, :]
    cls = np.full((t_max, n, a_pad), -1, np.int32)
    cls[..., :a] = rng.integers(0, 3, (t_max, n, a), dtype=np.int32)
    cls[..., :a][rng.random((t_max, n, a), dtype=np.float32) < 0.1] = -1
    cls[~mask] = -1
    node_mask = np.zeros((t_max, n, a_pad), bool)
    node_mask[..., :a] = mask[:, :, None]
    conf = np.zeros((t_max, n, a_pad), np.float32)
    conf[..., :a] = -rng.exponential(1.0, (t_max, n, a)).astype(np.float32)
    return {"answer_class": cls, "n_agents": np.full(n, float(a), np.float32),
            "round_mask": mask, "node_confidence": conf, "node_mask": node_mask}


def _groups(labels) -> list[list[int]]:
    """The samples of each class (lm-polygraph's ``class_to_sample``)."""
    out: dict[int, list[int]] = {}
    for j, c in enumerate(labels):
        out.setdefault(c, []).append(j)
    return list(out.values())


def _samples(cls_round, team: int) -> list[int]:
    """The round's samples: each agent's class, an agent without an answer a class of its
    own (negative ids), the team's silent members too."""
    labels = [int(c) if c >= 0 else -1 - j for j, c in enumerate(cls_round)]
    return labels[:team] + [-100 - j for j in range(team - len(labels))]


def loop_entropy(x: dict[str, np.ndarray], a: int, k: int) -> float:
    value = float("nan")
    for t in range(x["round_mask"].shape[0]):
        if not x["round_mask"][t, k]:
            continue
        labels = _samples(x["answer_class"][t, k, :a], a)
        class_lp = np.log([len(g) / len(labels) for g in _groups(labels)])
        sample_to_class = {j: i for i, g in enumerate(_groups(labels)) for j in g}
        value = -np.mean([class_lp[sample_to_class[j]] for j in range(len(labels))])
    return float(value)


def loop_sets(x: dict[str, np.ndarray], a: int, k: int) -> float:
    value = float("nan")
    for t in range(x["round_mask"].shape[0]):
        if not x["round_mask"][t, k]:
            continue
        labels = _samples(x["answer_class"][t, k, :a], a)
        w = np.triu(np.array([[int(p == q) for q in labels] for p in labels]), k=1)
        graph: list[list[int]] = [[] for _ in labels]
        for i, row in enumerate(w):
            for j in np.where(row != 0)[0]:
                graph[i].append(int(j))
                graph[int(j)].append(i)
        seen = [False] * len(labels)
        components = 0
        for i in range(len(labels)):
            if seen[i]:
                continue
            components += 1
            stack = [i]
            while stack:
                u = stack.pop()
                if not seen[u]:
                    seen[u] = True
                    stack.extend(graph[u])
        value = float(components)
    return value


def loop_cocoa(x: dict[str, np.ndarray], a: int, k: int) -> float:
    value = float("nan")
    for t in range(x["round_mask"].shape[0]):
        if not x["node_mask"][t, k].any():
            continue
        labels = _samples(x["answer_class"][t, k, :a], a)
        sim = np.array([[1.0 if p == q else 0.0 for q in labels] for p in labels])
        lp = x["node_confidence"][t, k, :a]
        per_sample = [-float(lp[i]) * (np.sum(1 - sim[i]) - (1 - sim[i, i])) / (a - 1)
                      if a > 1 else -float(lp[i]) for i in range(a)]
        value = float(np.mean(per_sample))
    return value


#: estimator -> the per-sample Python loop of one trajectory.
CASES: dict[str, Any] = {
    "answer_entropy": loop_entropy,
    "num_answer_sets": loop_sets,
    "cocoa": loop_cocoa,
}


def bench_case(name: str, x: dict[str, np.ndarray], t_max: int, a: int, repeats: int,
               bandwidth: float, loop_n: int) -> dict[str, Any]:
    import jax

    from fastuq.engine.registry import get_estimator
    from fastuq.engine.runner import call_kernel

    est = get_estimator(name)
    n = x["n_agents"].shape[0]
    inputs = [x[i] for i in est.inputs]

    def cut(v, m):
        return v[:m] if v.ndim == 1 else v[:, :m]

    check = [cut(v, 2000) for v in inputs]
    want = est.kernel_fn("numpy")(*(v.astype(np.float64) if v.dtype.kind == "f" else v
                                    for v in check))
    with jax.enable_x64(False):
        got = call_kernel(est, check, {}, {}, n=2000, dtype=np.dtype(np.float32),
                          backend="jax")[name]
    err = float(np.nanmax(np.abs(got - want)))

    def run():
        call_kernel(est, inputs, {}, {}, n=n, dtype=np.dtype(np.float32), backend="jax")

    start = time.perf_counter()
    run()
    first = time.perf_counter() - start
    times = bc.time_calls(run, repeats, warmup=0)
    med = bc.median(times)
    floor = (sum(v.nbytes for v in inputs) + 4 * n) / bandwidth
    loop = CASES[name]
    start = time.perf_counter()
    for k in range(loop_n):
        loop(x, a, k)
    loop_s = (time.perf_counter() - start) * n / loop_n
    return {"estimator": name, "t": t_max, "a": a, "n": n, "first_s": first,
            "times_s": times, "median_s": med, "traj_per_s": n / med, "floor_s": floor,
            "loop_s": loop_s, "loop_n": loop_n, "max_error_vs_twin_f64": err}


def render(data: dict[str, Any]) -> str:
    m = data["machine"]
    lines = [f"N = {data['n']:,} trajectories, median of {data['repeats']} repeats, "
             f"{m.get('cpu_count')} cores ({m.get('cpu_model')}), JAX {m.get('jax')}, "
             f"{m.get('date')}; load average (1 min) {data['load']['before']:.1f} before, "
             f"{data['load']['after']:.1f} after; copy bandwidth "
             f"{data['bandwidth']['bytes_per_s'] / 1e9:.1f} GB/s (2 threads)."]
    for name in dict.fromkeys(r["estimator"] for r in data["rows"]):
        rows = [[r["t"], r["a"], bc.fmt_si(r["traj_per_s"]), f"{r['first_s']:.2f}",
                 f"{1e3 * r['median_s']:.0f}", f"{r['median_s'] / r['floor_s']:.0f}",
                 bc.fmt_si(r["n"] / r["loop_s"]), f"{r['loop_s'] / r['median_s']:.0f}",
                 f"{r['max_error_vs_twin_f64']:.1e}"]
                for r in data["rows"] if r["estimator"] == name]
        lines += ["", f"`{name}`:", "", bc.markdown_table(
            ["T", "A", "JAX float32 traj/s", "first call (s)", "run (ms)", "x floor",
             "Python loop traj/s", "x loop", "max err"], rows,
            ["r", "r", "r", "r", "r", "r", "r", "r", "r"])]
    return "\n".join(lines) + "\n"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--n", type=int)
    parser.add_argument("--repeats", type=int)
    parser.add_argument("--only", help="comma-separated estimators (default: all of CASES)")
    parser.add_argument("--no-readme", action="store_true")
    parser.add_argument("--out", type=Path)
    args = parser.parse_args()
    n = args.n or (100_000 if args.quick else 1_000_000)
    repeats = args.repeats or 3
    shapes = [(3, 3), (3, 16)] if args.quick else [(3, 3), (3, 5), (3, 16), (10, 3),
                                                   (10, 5), (10, 16)]
    names = args.only.split(",") if args.only else list(CASES)
    unknown = [x for x in names if x not in CASES]
    if unknown:
        parser.error(f"unknown estimators {unknown}; known: {', '.join(CASES)}")
    out = args.out or (QUICK_OUT if args.quick else DEFAULT_OUT)

    import fastuq

    fastuq.use_cpu_devices(min(2, os.cpu_count() or 1))
    start = time.perf_counter()
    machine = bc.machine_info()
    load_before = os.getloadavg()[0]
    bandwidth = bc.copy_bandwidth(256 * 2**20, repeats=5, threads=2)
    rows = []
    for t_max, a in shapes:
        x = draw(n, t_max, a)
        for name in names:
            rows.append(bench_case(name, x, t_max, a, repeats, bandwidth["bytes_per_s"],
                                   loop_n=2000))
            print(f"{name} T = {t_max}, A = {a}: {rows[-1]['traj_per_s']:.3g}/s "
                  f"({time.perf_counter() - start:.0f} s)", flush=True)
        del x
    data = {"name": NAME, "quick": args.quick, "n": n, "repeats": repeats,
            "machine": machine, "bandwidth": bandwidth,
            "load": {"before": load_before, "after": os.getloadavg()[0]}, "rows": rows,
            "wall_s": time.perf_counter() - start}
    bc.publish(out, data, render, NAME, readme=not args.quick and not args.no_readme)


if __name__ == "__main__":
    main()
