"""Budget-policy replay: a 32 x 32 UAAD grid over simulated debates, and every policy on the
DyLAN MATH logs.

Run from the repository root::

    python bench/bench_replay.py            # N = 1e6 (3 agents, 5 rounds), the DyLAN logs
    python bench/bench_replay.py --quick    # N = 1e5

What is measured (median of ``--repeats`` runs, each stage in the same process):

* ``replay()`` end to end from Parquet (read, check, per-round answers checked against the
  reference, the UAAD grid of 32 ``tau_c`` x 32 ``epsilon`` points), with its peak RSS;
* the grid evaluation alone (trajectories grouped by their stop pattern, then
  :func:`fastuq.replay.grid_sums`, one pass per ``tau_c``) against
  the direct evaluation of each grid point (:func:`fastuq.replay.stop_rounds` and a gather),
  timed on 64 of the 1,024 points and scaled to the grid (said in the table);
* the DyLAN MATH logs of ``../shared/data/dylan_math`` (imported with ``fastuq import``):
  accuracy and calls of the full debate and of every policy's best point and its Pareto
  front (fixed rounds, UAAD stop, UAAD routing, thresholds on SAUCE's and mean agreement's
  per-round scores; the logs have no token log-probabilities, so SAUCE and UAAD's entropy
  term use a constant observation noise, said in the table).
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
import _common as bc  # noqa: E402
import numpy as np  # noqa: E402

NAME = "replay"
DEFAULT_OUT = bc.RESULTS_DIR / "replay.json"
QUICK_OUT = bc.RESULTS_DIR / "replay_quick.json"
DYLAN = bc.REPO_ROOT.parent / "shared" / "data" / "dylan_math"
GRID = 32


def _median(xs: list[float]) -> float:
    return float(np.median(xs))


def bench_grid(n: int, repeats: int, tmp: Path) -> dict[str, Any]:
    import pyarrow.parquet as pq

    from fastuq.decisions.outcomes import metric_stack
    from fastuq.engine.batch import Batch
    from fastuq.kernels.uaad import MOVED_SLACK_ULPS
    from fastuq.replay import Policy, replay, round_outcomes, stop_rounds, uaad_grid_sums
    from fastuq.synth import corpus, write

    path = tmp / "debates.parquet"
    t0 = time.perf_counter()
    write(corpus(n, protocol="debate", seed=0, n_agents=3, n_rounds=5), path)
    gen_s = time.perf_counter() - t0
    taus = np.linspace(0.5, 1.0, GRID)
    eps = np.linspace(0.0, 0.5, GRID)
    policy = Policy("uaad", tau_c=taus, epsilon=eps)

    e2e, peak = [], []
    for _ in range(repeats):
        bc.reset_peak_rss()
        base = bc.rss_bytes()
        t0 = time.perf_counter()
        result = replay(path, [policy])
        e2e.append(time.perf_counter() - t0)
        peak.append(bc.peak_rss_bytes() - base)
    # the stages, on the whole corpus in one batch
    table = pq.read_table(path)
    t0 = time.perf_counter()
    batch = Batch(table)
    out = round_outcomes(batch)
    outcomes_s = time.perf_counter() - t0
    agreement, mask = batch.rounds("agreement")
    g = metric_stack(out, out.n_agents)
    n_t = agreement.shape[0]
    moved = np.full(agreement.shape, np.inf)
    moved[1:] = np.abs(agreement[1:] - agreement[:-1])
    first = np.searchsorted(eps + MOVED_SLACK_ULPS * np.finfo(np.float64).eps, moved,
                            side="left")
    t_idx = np.arange(n_t)[:, None]

    def fast() -> np.ndarray:  # as replay() does it
        return uaad_grid_sums(g, agreement, mask, out.last, taus, eps).transpose(1, 0, 2)

    def direct(points: list[tuple[int, int]]) -> list[np.ndarray]:
        res = []
        for i, j in points:
            active = mask & (t_idx >= 1) & (agreement >= taus[i])
            stop = stop_rounds(active, first, out.last, j)
            res.append(g[:, stop, np.arange(stop.size)].sum(axis=1))
        return res

    grid_times = bc.time_calls(fast, repeats)
    sums = fast()
    rng = np.random.default_rng(0)
    points = [(int(i), int(j)) for i, j in zip(rng.integers(0, GRID, 64),
                                                rng.integers(0, GRID, 64), strict=True)]
    t0 = time.perf_counter()
    want = direct(points)
    direct_s = (time.perf_counter() - t0) * (GRID * GRID / len(points))
    err = max(float(np.max(np.abs(sums[i, :, j] - w))) for (i, j), w in
              zip(points, want, strict=True))
    best = max(result.table.to_pylist(), key=lambda r: (r["accuracy"], -r["calls_mean"]))
    return {"n": n, "generate_s": gen_s, "e2e_s": _median(e2e), "e2e_all_s": e2e,
            "peak_rss_bytes": int(np.median(peak)), "outcomes_s": outcomes_s,
            "grid_s": _median(grid_times), "direct_grid_s_scaled": direct_s,
            "max_abs_err": err, "full": result.full, "best": best}


def bench_dylan(tmp: Path) -> dict[str, Any] | None:
    if not DYLAN.is_dir():
        return None
    from fastuq.importers import import_dylan
    from fastuq.replay import Policy, replay

    table = import_dylan(sorted(DYLAN.glob("*.json")))
    noise = 0.1
    pols = ["fixed", Policy("uaad"), Policy("uaad_route"),
            Policy("trace", estimator="sauce"), Policy("trace", estimator="mean_agreement")]
    t0 = time.perf_counter()
    result = replay(table, pols, observation_noise=noise)
    wall = time.perf_counter() - t0
    rows = result.table.to_pylist()
    per_policy = {}
    for r in rows:
        key = r["policy"] if r["estimator"] is None else f"{r['policy']}:{r['estimator']}"
        best = per_policy.get(key)
        if best is None or (r["accuracy"], -r["calls_mean"]) > (best["accuracy"],
                                                                  -best["calls_mean"]):
            per_policy[key] = r
    return {"n": table.num_rows, "observation_noise": noise, "wall_s": wall,
            "full": result.full, "best": per_policy, "front": result.front().to_pylist(),
            "notes": result.notes}


def _point(r: dict) -> str:
    if r["policy"] == "fixed":
        return f"r = {r['rounds']}"
    if r["policy"] in ("uaad", "uaad_route"):
        return f"tau_c {r['tau_c']:.3f}, eps {r['epsilon']:.3f}"
    if r["policy"] == "trace":
        return f"threshold {r['threshold']:.4g}"
    return ""


def render(data: dict[str, Any]) -> str:
    m = data["machine"]
    g = data["grid"]
    load = data["load"]
    head = (f"{g['n']:,} simulated debates (3 agents, 5 rounds; `fastuq.synth`, seed 0), "
            f"{GRID} x {GRID} UAAD grid (tau_c 0.5..1, epsilon 0..0.5), median of "
            f"{data['repeats']}, {m.get('cpu_count')} cores ({m.get('cpu_model')}), "
            f"{m.get('date')}; load average (1 min) {load['before']:.2f} before, "
            f"{load['after']:.2f} after.\n\n")
    rows = [
        ["`replay()` end to end from Parquet", f"{g['e2e_s']:.2f} s",
         bc.fmt_si(g["n"] / g["e2e_s"]) + " traj/s",
         f"peak RSS +{g['peak_rss_bytes'] / 2**20:.0f} MiB"],
        ["per-round answers and calls (whole corpus, one batch)", f"{g['outcomes_s']:.2f} s",
         "", ""],
        ["grid evaluation (distinct patterns, then `grid_sums`, 32 passes)", f"{g['grid_s']:.3f} s",
         bc.fmt_si(g["n"] * GRID * GRID / g["grid_s"]) + " traj x points/s", ""],
        ["direct evaluation per point (64 points timed, x 16)",
         f"{g['direct_grid_s_scaled']:.1f} s", f"{g['direct_grid_s_scaled'] / g['grid_s']:.0f}x "
         f"the grid pass", f"max abs diff {g['max_abs_err']:.1e}"],
    ]
    text = head + bc.markdown_table(["stage", "time", "rate", "note"], rows,
                                    ["l", "r", "r", "l"]) + "\n"
    d = data.get("dylan")
    if d:
        full = d["full"]
        text += (f"\nDyLAN MATH logs ({d['n']:,} trajectories, `fastuq import dylan`; no "
                 f"token log-probabilities: SAUCE and UAAD's entropy term use observation "
                 f"noise {d['observation_noise']}); replay of every grid took "
                 f"{d['wall_s']:.1f} s. Full debate: accuracy {full['accuracy']:.4f}, "
                 f"{full['calls_mean']:.3f} calls per question, {full['flips']} flips.\n\n")
        rows = [[k, _point(r), f"{r['accuracy']:.4f}", f"{r['calls_mean']:.3f}",
                 f"{r['calls_saved_frac']:.1%}", r["flips"]] for k, r in d["best"].items()]
        text += bc.markdown_table(["policy (most accurate point)", "point", "accuracy",
                                   "calls/question", "calls saved", "flips"], rows,
                                  ["l", "l", "r", "r", "r", "r"]) + "\n"
        rows = [[r["policy"] + (f":{r['estimator']}" if r["estimator"] else ""), _point(r),
                 f"{r['accuracy']:.4f}", f"{r['calls_mean']:.3f}"] for r in d["front"]]
        text += "\nPareto front:\n\n" + bc.markdown_table(
            ["policy", "point", "accuracy", "calls/question"], rows,
            ["l", "l", "r", "r"]) + "\n"
    return text


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--quick", action="store_true", help="N = 1e5")
    p.add_argument("--n", type=int, default=None)
    p.add_argument("--repeats", type=int, default=None)
    p.add_argument("--out", type=Path, default=None)
    p.add_argument("--no-readme", action="store_true", help="do not rewrite bench/README.md")
    args = p.parse_args(argv)
    n = args.n or (100_000 if args.quick else 1_000_000)
    repeats = args.repeats or (3 if args.quick else 5)
    out = args.out or (QUICK_OUT if args.quick else DEFAULT_OUT)

    import fastuq

    fastuq.use_cpu_devices(min(2, os.cpu_count() or 1))
    start = time.perf_counter()
    load_before = os.getloadavg()[0]
    with tempfile.TemporaryDirectory() as tmp:
        grid = bench_grid(n, repeats, Path(tmp))
        dylan = bench_dylan(Path(tmp))
    data = {"name": NAME, "quick": args.quick, "repeats": repeats,
            "machine": bc.machine_info(), "grid": grid, "dylan": dylan,
            "load": {"before": load_before, "after": os.getloadavg()[0]},
            "wall_s": time.perf_counter() - start}
    bc.publish(out, data, render, NAME, readme=not args.quick and not args.no_readme)


if __name__ == "__main__":
    main()
