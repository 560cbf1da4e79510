"""Benchmark the black-box estimators (lexical similarity, the spectral family): trajectories
per second of each kernel as fastuq runs it, against the memory-bandwidth floor and against
a plain Python loop over samples in the style of the single-model libraries (lm-polygraph
computes one sample set at a time: a similarity matrix, ``np.linalg.eig`` of its Laplacian).

Run from the repository root::

    python bench/bench_estimators.py            # N = 1e6; T = 3, 10; A = 3, 5, 16
    python bench/bench_estimators.py --quick    # N = 1e5; T = 3; A = 3, 16 (a minute)
                                                # writes bench/results/estimators_quick.json.tmp
    python bench/bench_estimators.py --only eigval_laplacian,degree_matrix

Each estimator is one entry of :data:`CASES` (name -> how its packed inputs are drawn), so
that more estimators join the same table. Per (estimator, T, A), timed after a warm-up call
that compiles (its time is the "first call" column), median of repeats:

  JAX       ``fastuq.engine.runner.call_kernel`` on packed host arrays, float32, on 2 XLA CPU
            devices (``fastuq.use_cpu_devices``): padding to the bucket, the transfer, the
            kernel and the copy back, as ``fastuq score`` runs it.
  floor     bytes read + written by the kernel / the two-thread ``np.copyto`` bandwidth
            measured in the same run.
  loop      the per-sample Python loop: per trajectory and round, the similarity matrix of
            the agents and ``np.linalg.eig`` of its normalised Laplacian (lm-polygraph's
            ``EigValLaplacian``), timed on ``loop_n`` trajectories and scaled to N ("x loop"
            = loop time / JAX time, the speed-up).

The spectral family runs on answer-class similarity (``similarity="answer"``: the packed
input is the vote class of each node, ``[T, N, A_pad]`` in the narrowest int type that holds
the classes, int8 here, with the team ``n_agents [N]``, as the engine packs them); drawn
answers: 3 classes, 10% of the nodes without a vote. ``lexical_similarity`` (texts) is timed apart
(``--lexical``): the host packing of the texts (tokens + pairwise Jaccard) is its cost.
Every timed kernel is checked against the float64 NumPy twin first (max |error|).
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

NAME = "ESTIMATORS"
DEFAULT_OUT = bc.RESULTS_DIR / "estimators.json"
QUICK_OUT = bc.RESULTS_DIR / "estimators_quick.json.tmp"


def answer_classes(rng: np.random.Generator, n: int, t_max: int, a: int):
    """``((classes [T, N, A_pad], round_mask [T, N]), {"n_agents": [N] float32})``: ragged
    trajectories (1..T rounds) of teams of ``a`` agents, each node's vote class (3 classes,
    10% of the nodes without a vote: -1), narrowed as the engine packs them
    (:func:`fastuq.engine.similarity.narrow_classes`)."""
    from fastuq.engine.similarity import narrow_classes

    a_pad = 1 << max(a - 1, 0).bit_length()
    mask = np.arange(t_max)[:, None] < rng.integers(1, t_max + 1, n)[None, :]
    cls = rng.integers(0, 3, (t_max, n, a_pad)).astype(np.int32)
    cls[rng.random(cls.shape, np.float32) < 0.1] = -1
    cls[..., a:] = -1
    return (narrow_classes(cls), mask), {"n_agents": np.full(n, float(a), np.float32)}


#: estimator -> (packing parameters, input builder); inputs in the registry's order.
CASES: dict[str, Any] = {
    name: ({"similarity": "answer"}, answer_classes)
    for name in ("eigval_laplacian", "degree_matrix", "eccentricity")
}


def polygraph_loop(classes: np.ndarray, mask: np.ndarray, team: np.ndarray) -> list[float]:
    """The single-model libraries' way: one trajectory and one round at a time, the
    similarity matrix of the agents and ``np.linalg.eig`` of its normalised Laplacian."""
    out = []
    for n in range(classes.shape[1]):
        value = 0.0
        for t in range(classes.shape[0]):
            if not mask[t, n]:
                continue
            lab = [int(x) for x in classes[t, n, :int(team[n])]]
            w = np.array([[1.0 if i == j or (x >= 0 and x == y) else 0.0
                           for j, y in enumerate(lab)] for i, x in enumerate(lab)])
            d = np.diag(w.sum(axis=1))
            d_inv = np.linalg.inv(np.sqrt(d))
            lap = np.eye(len(lab)) - d_inv @ w @ d_inv
            value = sum(max(0.0, 1.0 - float(np.real(x))) for x in np.linalg.eig(lap)[0])
        out.append(value)
    return out


def bench_case(name: str, n: int, t_max: int, a: int, repeats: int, bandwidth: float,
               loop_n: int) -> dict[str, Any]:
    import jax

    from fastuq.engine.registry import get_estimator
    from fastuq.engine.runner import call_kernel

    est = get_estimator(name)
    _, build = CASES[name]
    rng = np.random.default_rng(0)
    inputs, optional = build(rng, n, t_max, a)
    check = [x[:, :2000] for x in inputs]
    check_opt = {k: v[:2000] for k, v in optional.items()}
    want = est.kernel_fn("numpy")(*check, **{k: v.astype(np.float64)
                                             for k, v in check_opt.items()})[name]
    with jax.enable_x64(False):
        got = call_kernel(est, list(check), check_opt, {}, n=2000,
                          dtype=np.dtype(np.float32), backend="jax")[name]
    err = float(np.nanmax(np.abs(got - want)))

    def run():
        call_kernel(est, list(inputs), optional, {}, n=n, dtype=np.dtype(np.float32),
                    backend="jax")

    start = time.perf_counter()
    run()
    first = time.perf_counter() - start
    times = bc.time_calls(run, repeats, warmup=0)
    med = float(np.median(times))
    nbytes = (sum(x.nbytes for x in inputs) + sum(x.nbytes for x in optional.values())
              + 2 * 4 * n)  # two [N] float32 outputs
    floor = nbytes / bandwidth
    sub = [x[:, :loop_n] for x in inputs]
    start = time.perf_counter()
    polygraph_loop(*sub, optional["n_agents"][:loop_n])
    loop = (time.perf_counter() - start) * n / loop_n
    return {"estimator": name, "t": t_max, "a": a, "n": n, "first_s": first,
            "median_s": med, "traj_per_s": n / med, "floor_s": floor, "loop_s": loop,
            "max_error_vs_twin_f64": err}


def lexical_case(n: int, t_max: int, a: int) -> dict[str, Any]:
    """``lexical_similarity`` end to end on drawn texts: host packing (tokens and pairwise
    Jaccard of every round) and the kernel, one call each (median of 3)."""
    import pyarrow as pa

    import fastuq

    rng = np.random.default_rng(1)
    vocab = np.array([f"w{k}" for k in range(200)])
    words = rng.integers(0, 200, (n, t_max, a, 40))
    texts = [[[" ".join(vocab[words[i, t, j]]) for j in range(a)] for t in range(t_max)]
             for i in range(n)]
    table = pa.table({
        "trajectory_id": [str(i) for i in range(n)], "protocol": ["debate"] * n,
        "n_agents": pa.array([a] * n, pa.int32()),
        "answers": pa.array([[["1"] * a] * t_max] * n, pa.list_(pa.list_(pa.string()))),
        "texts": pa.array(texts, pa.list_(pa.list_(pa.string())))})
    times = []
    for _ in range(3):
        start = time.perf_counter()
        fastuq.score(table, "lexical_similarity", dtype="float32")
        times.append(time.perf_counter() - start)
    med = float(np.median(times))
    return {"estimator": "lexical_similarity", "t": t_max, "a": a, "n": n,
            "median_s": med, "traj_per_s": n / med, "words_per_text": 40}


def render(data: dict[str, Any]) -> str:
    rows = [[r["estimator"], r["t"], r["a"], bc.fmt_si(r["traj_per_s"]) + "/s",
             f"{r['first_s']:.2f} s", f"{1e3 * r['median_s']:.0f} ms",
             f"{r['median_s'] / r['floor_s']:.1f}", f"{r['loop_s'] / r['median_s']:.0f}",
             f"{r['max_error_vs_twin_f64']:.1e}"] for r in data["rows"]]
    table = bc.markdown_table(["estimator", "T", "A", "JAX float32", "first call", "run",
                               "x floor", "x loop", "max err"], rows)
    lines = [f"N = {data['n']:,}, {data['machine'].get('cpu', 'CPU')}, load average "
             f"{data['load']['before']:.1f} before / {data['load']['after']:.1f} after.", "",
             table]
    for r in data.get("lexical", []):
        lines += ["", f"lexical_similarity end to end (`fastuq.score`, host packing of "
                      f"{r['words_per_text']}-word texts included): N = {r['n']:,}, T = "
                      f"{r['t']}, A = {r['a']}: {bc.fmt_si(r['traj_per_s'])} trajectories/s"]
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--n", type=int)
    parser.add_argument("--repeats", type=int)
    parser.add_argument("--only", help="comma-separated estimators (default: all of CASES)")
    parser.add_argument("--lexical", action="store_true",
                        help="also time lexical_similarity end to end on drawn texts")
    parser.add_argument("--no-readme", action="store_true")
    parser.add_argument("--out", type=Path)
    args = parser.parse_args()
    n = args.n or (100_000 if args.quick else 1_000_000)
    repeats = args.repeats or (3 if args.quick else 5)
    shapes = [(3, 3), (3, 16)] if args.quick else [(3, 3), (3, 5), (3, 16), (10, 3),
                                                   (10, 5), (10, 16)]
    names = args.only.split(",") if args.only else list(CASES)
    out = args.out or (QUICK_OUT if args.quick else DEFAULT_OUT)

    import fastuq

    fastuq.use_cpu_devices(min(2, os.cpu_count() or 1))
    start = time.perf_counter()
    machine = bc.machine_info()
    load_before = os.getloadavg()[0]
    bandwidth = bc.copy_bandwidth(256 * 2**20, repeats=5, threads=2)
    rows = []
    for t_max, a in shapes:
        for name in names:
            rows.append(bench_case(name, n, t_max, a, repeats, bandwidth["bytes_per_s"],
                                   loop_n=2000 if args.quick else 5000))
            print(f"{name} T = {t_max}, A = {a}: {rows[-1]['traj_per_s']:.3g}/s "
                  f"({time.perf_counter() - start:.0f} s)", flush=True)
    lexical = [lexical_case(2000 if args.quick else 20_000, 3, 4)] if args.lexical else []
    data = {"name": NAME, "quick": args.quick, "n": n, "repeats": repeats,
            "machine": machine, "bandwidth": bandwidth,
            "load": {"before": load_before, "after": os.getloadavg()[0]}, "rows": rows,
            "lexical": lexical, "wall_s": time.perf_counter() - start}
    bc.publish(out, data, render, NAME, readme=not args.quick and not args.no_readme)


if __name__ == "__main__":
    main()
