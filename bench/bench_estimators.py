"""Benchmark the black-box estimators: trajectories per second of each kernel as fastuq runs
it, against the memory-bandwidth floor and against a plain Python loop over samples in the
style of the single-model libraries (lm-polygraph scores one sample set at a time).

Two case sets, one results file and one bench/README.md section each:

  spectral      ``eigval_laplacian``, ``degree_matrix``, ``eccentricity`` on answer-class
                similarity -> results/estimators.json, section ESTIMATORS
  answer_sets   ``answer_entropy``, ``num_answer_sets``, ``cocoa`` -> results/answer_sets.json,
                section ANSWER_SETS

Run from the repository root::

    python bench/bench_estimators.py                    # both sets: N = 1e6; T = 3, 10;
                                                        # A = 3, 5, 16
    python bench/bench_estimators.py --quick            # N = 1e5; T = 3; A = 3, 16; writes
                                                        # results/*_quick.json.tmp
    python bench/bench_estimators.py --set answer_sets  # one set
    python bench/bench_estimators.py --only cocoa,eigval_laplacian
    python bench/bench_estimators.py --set spectral --lexical
    python bench/bench_estimators.py --from-json bench/results/answer_sets.json

Each estimator is one entry of its set's ``cases`` (name -> its per-trajectory Python loop),
so that more estimators join the same tables (one table per estimator). Inputs, drawn once
per (set, T, A), in the registry's input names: ragged trajectories (1..T rounds), answers
from 3 classes with 10% of the nodes without a vote. The spectral set packs answer-class
similarity (``similarity="answer"``: each node's lowest same-class slot, ``[T, N, A_pad]``
float32); the answer-set kernels read ``answer_class`` int32 ``[T, N, A_pad]``,
``n_agents [N]``, ``round_mask [T, N]``, and CoCoA also ``node_confidence`` (``-Exp(1)``)
float32 and ``node_mask``. Per (estimator, T, A), after a warm-up call that compiles (its
time is the "first call" column), median of repeats:

  JAX       ``fastuq.engine.runner.call_kernel`` on packed host arrays, float32, on 2 XLA CPU
            devices (``fastuq.use_cpu_devices``): padding to the bucket, the transfer, the
            kernel and the copy back, as ``fastuq score`` runs it.
  floor     bytes of the kernel's inputs + its [N] float32 outputs / the two-thread
            ``np.copyto`` bandwidth measured in the same run ("x floor" = JAX time / floor).
  loop      per trajectory and round, the single-model libraries' computation on the
            round's agents as samples, timed on ``loop_n`` trajectories and scaled to N
            ("x loop" = loop time / JAX time: the speed-up): for the spectral set the
            similarity matrix and ``np.linalg.eig`` of its normalised Laplacian
            (lm-polygraph's ``EigValLaplacian``); for the answer sets
            ``compute_semantic_entropy`` with frequencies, ``NumSemSets``' connected
            components of the equality graph, ``SemanticEnrichedMaxprobAveDissimilarity``
            per sample.

The spectral family runs on answer-class similarity (``similarity="answer"``: the packed
input is the vote class of each node, ``[T, N, A_pad]`` in the narrowest int type that holds
the classes, int8 here, with the team ``n_agents [N]``, as the engine packs them).
Every timed kernel is checked against the float64 NumPy twin first (max |error| on 2,000
trajectories). The ``_mean`` variants run the same scans (another output): the same cost.
``lexical_similarity`` (texts) is timed apart (``--lexical``, with the spectral set): the
host packing of the texts (tokens + pairwise Jaccard) is its cost.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any, NamedTuple

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
import _common as bc  # noqa: E402

# ------------------------------------------------------------------------------ inputs


def _ragged(rng: np.random.Generator, n: int, t_max: int, a: int):
    """``(round_mask [T, N], classes [T, N, A_pad] int32, A_pad)``: 1..T rounds per
    trajectory, answers from 3 classes in the team's ``a`` slots with 10% of the nodes
    without a vote (-1), -1 past the team and in rounds not executed."""
    a_pad = 1 << max(a - 1, 0).bit_length()
    mask = np.arange(t_max)[:, None] < rng.integers(1, t_max + 1, n)[None, :]
    cls = np.full((t_max, n, a_pad), -1, np.int32)
    cls[..., :a] = rng.integers(0, 3, (t_max, n, a), dtype=np.int32)
    cls[..., :a][rng.random((t_max, n, a), dtype=np.float32) < 0.1] = -1
    cls[~mask] = -1
    return mask, cls, a_pad


def draw_answer_sets(n: int, t_max: int, a: int, seed: int = 0) -> dict[str, np.ndarray]:
    """The answer-set kernels' packed inputs, as the engine packs them (slots padded to a
    power of two)."""
    rng = np.random.default_rng(seed)
    mask, cls, a_pad = _ragged(rng, n, t_max, a)
    node_mask = np.zeros((t_max, n, a_pad), bool)
    node_mask[..., :a] = mask[:, :, None]
    conf = np.zeros((t_max, n, a_pad), np.float32)
    conf[..., :a] = -rng.exponential(1.0, (t_max, n, a)).astype(np.float32)
    return {"answer_class": cls, "n_agents": np.full(n, float(a), np.float32),
            "round_mask": mask, "node_confidence": conf, "node_mask": node_mask}


def draw_spectral(n: int, t_max: int, a: int, seed: int = 0) -> dict[str, np.ndarray]:
    """The spectral kernels' packed inputs with answer-class similarity, as the engine packs
    them: each node's vote class (``similarity [T, N, A_pad]`` in the narrowest int type,
    :func:`fastuq.engine.similarity.narrow_classes`; -1 without a vote and past the team),
    ``round_mask [T, N]`` and the team ``n_agents [N]``."""
    from fastuq.engine.similarity import narrow_classes

    rng = np.random.default_rng(seed)
    mask, cls, _ = _ragged(rng, n, t_max, a)
    return {"similarity": narrow_classes(cls), "round_mask": mask,
            "n_agents": np.full(n, float(a), np.float32)}


# ------------------------------------------------------- per-trajectory Python loops


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


def loop_eigval(x: dict[str, np.ndarray], a: int, k: int) -> float:
    """The last executed round's similarity matrix of the agents and ``np.linalg.eig`` of its
    normalised Laplacian: ``sum max(0, 1 - eigenvalue)``."""
    value = 0.0
    for t in range(x["round_mask"].shape[0]):
        if not x["round_mask"][t, k]:
            continue
        lab = [int(v) for v in x["similarity"][t, k, :int(x["n_agents"][k])]]
        w = np.array([[1.0 if i == j or (p >= 0 and p == q) else 0.0
                       for j, q in enumerate(lab)] for i, p in enumerate(lab)])
        d_inv = np.linalg.inv(np.sqrt(np.diag(w.sum(axis=1))))
        lap = np.eye(len(lab)) - d_inv @ w @ d_inv
        value = sum(max(0.0, 1.0 - float(np.real(e))) for e in np.linalg.eig(lap)[0])
    return value


# ---------------------------------------------------------------------------- case sets


class CaseSet(NamedTuple):
    """One table set: its README section and results files, its inputs, each estimator's
    Python loop, and ``(quick, full)`` repeats and loop sizes."""

    section: str
    results: str
    draw: Callable[..., dict[str, np.ndarray]]
    cases: dict[str, Callable[[dict[str, np.ndarray], int, int], float]]
    repeats: tuple[int, int]
    loop_n: tuple[int, int]


CASE_SETS: dict[str, CaseSet] = {
    # the spectral family's loop is EigValLaplacian's for all three (the per-sample cost)
    "spectral": CaseSet("ESTIMATORS", "estimators", draw_spectral,
                        dict.fromkeys(("eigval_laplacian", "degree_matrix", "eccentricity"),
                                      loop_eigval), (3, 5), (2000, 5000)),
    "answer_sets": CaseSet("ANSWER_SETS", "answer_sets", draw_answer_sets,
                           {"answer_entropy": loop_entropy, "num_answer_sets": loop_sets,
                            "cocoa": loop_cocoa}, (3, 3), (2000, 2000)),
}


def bench_case(name: str, x: dict[str, np.ndarray], loop, t_max: int, a: int, repeats: int,
               bandwidth: float, loop_n: int) -> dict[str, Any]:
    import jax

    from fastuq.engine.registry import get_estimator
    from fastuq.engine.runner import call_kernel

    est = get_estimator(name)
    n = x["round_mask"].shape[1]
    inputs = [x[i] for i in est.inputs]
    optional = {k: x[k] for k in est.optional_inputs if k in x}

    def cut(v, m):
        return v[:m] if v.ndim == 1 else v[:, :m]

    m = min(2000, n)
    check = [cut(v, m) for v in inputs]
    check_opt = {k: cut(v, m) for k, v in optional.items()}
    want = call_kernel(est, [v.astype(np.float64) if v.dtype.kind == "f" else v
                             for v in check],
                       {k: v.astype(np.float64) for k, v in check_opt.items()}, {}, n=m,
                       dtype=np.dtype(np.float64), backend="numpy")[name]
    with jax.enable_x64(False):
        got = call_kernel(est, check, check_opt, {}, n=m, dtype=np.dtype(np.float32),
                          backend="jax")[name]
    err = float(np.nanmax(np.abs(got - want)))

    def run():
        call_kernel(est, inputs, optional, {}, n=n, dtype=np.dtype(np.float32), backend="jax")

    start = time.perf_counter()
    run()
    first = time.perf_counter() - start
    times = bc.time_calls(run, repeats, warmup=0)
    med = bc.median(times)
    floor = (sum(v.nbytes for v in inputs) + sum(v.nbytes for v in optional.values())
             + 4 * n * len(est.outputs)) / bandwidth
    start = time.perf_counter()
    for k in range(loop_n):
        loop(x, a, k)
    loop_s = (time.perf_counter() - start) * n / loop_n
    return {"estimator": name, "t": t_max, "a": a, "n": n, "first_s": first,
            "times_s": times, "median_s": med, "traj_per_s": n / med, "floor_s": floor,
            "loop_s": loop_s, "loop_n": loop_n, "max_error_vs_twin_f64": err}


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
    """A set's README section: the run's conditions, then one table per estimator (and the
    end-to-end ``lexical_similarity`` line when it was timed)."""
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
    for r in data.get("lexical", []):
        lines += ["", f"lexical_similarity end to end (`fastuq.score`, host packing of "
                      f"{r['words_per_text']}-word texts included): N = {r['n']:,}, T = "
                      f"{r['t']}, A = {r['a']}: {bc.fmt_si(r['traj_per_s'])} trajectories/s"]
    return "\n".join(lines) + "\n"


def section_of(data: dict[str, Any]) -> str:
    """The README section of a results file (its ``name``)."""
    sections = {s.section for s in CASE_SETS.values()}
    if data.get("name") not in sections:
        raise ValueError(f"not a results file of this script: name {data.get('name')!r}, "
                         f"expected one of {sorted(sections)}")
    return data["name"]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--set", choices=[*CASE_SETS, "all"], default="all",
                        help="the case set(s) to run (default: all)")
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--n", type=int)
    parser.add_argument("--repeats", type=int)
    parser.add_argument("--only", help="comma-separated estimators (default: all of the sets)")
    parser.add_argument("--lexical", action="store_true",
                        help="also time lexical_similarity end to end on drawn texts "
                             "(with the spectral set)")
    parser.add_argument("--no-readme", action="store_true")
    parser.add_argument("--out", type=Path, help="results JSON (one set only)")
    parser.add_argument("--from-json", type=Path,
                        help="measure nothing: re-render a results file's README section")
    args = parser.parse_args()
    if args.from_json:
        import json

        data = json.loads(args.from_json.read_text())
        try:
            name = section_of(data)
        except ValueError as exc:
            parser.error(f"{args.from_json}: {exc}")
        bc.rerender(args.from_json, name, render, args.no_readme)
        return
    sets = list(CASE_SETS) if args.set == "all" else [args.set]
    known = {name: s for s in sets for name in CASE_SETS[s].cases}
    names = args.only.split(",") if args.only else list(known)
    unknown = [x for x in names if x not in known]
    if unknown:
        parser.error(f"unknown estimators {unknown}; known: {', '.join(known)}")
    sets = [s for s in sets if any(known[x] == s for x in names)]
    if args.out and len(sets) > 1:
        parser.error("--out names one results file: give --set or --only of one set")
    if args.lexical and "spectral" not in sets:
        parser.error("--lexical goes with the spectral set")
    n = args.n or (100_000 if args.quick else 1_000_000)
    shapes = [(3, 3), (3, 16)] if args.quick else [(3, 3), (3, 5), (3, 16), (10, 3),
                                                   (10, 5), (10, 16)]
    full = 0 if args.quick else 1

    import fastuq

    fastuq.use_cpu_devices(min(2, os.cpu_count() or 1))
    for set_name in sets:
        case_set = CASE_SETS[set_name]
        repeats = args.repeats or case_set.repeats[full]
        start = time.perf_counter()
        machine = bc.machine_info()
        load_before = os.getloadavg()[0]
        bandwidth = bc.copy_bandwidth(256 * 2**20, repeats=5, threads=2)
        rows = []
        for t_max, a in shapes:
            x = case_set.draw(n, t_max, a)
            for name in (x for x in names if known[x] == set_name):
                rows.append(bench_case(name, x, case_set.cases[name], t_max, a, repeats,
                                       bandwidth["bytes_per_s"], case_set.loop_n[full]))
                print(f"{name} T = {t_max}, A = {a}: {rows[-1]['traj_per_s']:.3g}/s "
                      f"({time.perf_counter() - start:.0f} s)", flush=True)
            del x
        lexical = ([lexical_case(2000 if args.quick else 20_000, 3, 4)]
                   if args.lexical and set_name == "spectral" else [])
        data = {"name": case_set.section, "quick": args.quick, "n": n, "repeats": repeats,
                "machine": machine, "bandwidth": bandwidth,
                "load": {"before": load_before, "after": os.getloadavg()[0]}, "rows": rows,
                "lexical": lexical, "wall_s": time.perf_counter() - start}
        out = args.out or bc.RESULTS_DIR / (f"{case_set.results}_quick.json.tmp" if args.quick
                                            else f"{case_set.results}.json")
        bc.publish(out, data, render, case_set.section,
                   readme=not args.quick and not args.no_readme)


if __name__ == "__main__":
    main()
