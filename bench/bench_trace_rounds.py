"""Per-round scores: one scan against one kernel call per round prefix, in one run.

Run from the repository root::

    python bench/bench_trace_rounds.py                 # N = 2e5, T = 5 and 10
    python bench/bench_trace_rounds.py --quick         # N = 2e4, T = 5, one repeat

What is measured, on simulated debates (``fastuq.synth.corpus_with_beliefs``, 3 agents,
seed 0), each median of ``--repeats`` runs after one warm-up, both paths in this process:

* ``run_estimator_rounds`` (the ``[T, N]`` per-round scores replay's ``trace:`` policies
  threshold) for ``sauce``, ``mean_agreement`` and ``bccs``: ``by_prefix=True`` (the path
  before per-round kernels: one kernel call per round prefix) against the one scan, with the
  largest difference between them;
* ``replay()`` end to end from an in-memory table with ``trace:sauce``,
  ``trace:mean_agreement`` and ``trace:bccs`` (32 thresholds each), the trace computed each
  way, and whether the two result tables are identical.

Prints a markdown table (pasted into bench/README.md, "Per-round scores"); writes no file.
"""

from __future__ import annotations

import argparse
import os
import time

import numpy as np


def _median_time(fn, repeats: int) -> float:
    fn()  # warm-up: compiles
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return float(np.median(times))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--n", type=int, default=200_000)
    parser.add_argument("--rounds", type=int, nargs="+", default=[5, 10])
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--quick", action="store_true",
                        help="a smoke test: N = 2e4, T = 5, one repeat (writes nothing)")
    args = parser.parse_args()
    if args.quick:
        args.n, args.rounds, args.repeats = 20_000, [5], 1

    import fastuq.engine.runner as runner
    from fastuq.decisions.replay import Policy, replay
    from fastuq.engine.batch import Batch
    from fastuq.engine.registry import get_estimator
    from fastuq.synth import corpus_with_beliefs

    load0 = os.getloadavg()[0]
    rows = []
    names = ("sauce", "mean_agreement", "bccs")
    scan = runner.run_estimator_rounds
    for t in args.rounds:
        table = corpus_with_beliefs(args.n, protocol="debate", n_rounds=t, seed=0)
        batch = Batch(table, dtype=np.float64)
        for name in names:
            est = get_estimator(name)

            def run(by_prefix: bool, est=est, batch=batch):
                return scan(est, batch, params={}, protocol="debate", backend="jax",
                            by_prefix=by_prefix)

            before = _median_time(lambda: run(True), args.repeats)
            after = _median_time(lambda: run(False), args.repeats)
            a, b = run(True), run(False)
            same_nan = bool(np.array_equal(np.isnan(a), np.isnan(b)))
            diff = float(np.nanmax(np.abs(a - b))) if np.isfinite(a).any() else 0.0
            nan = "same" if same_nan else "DIFFERS"
            rows.append((f"T = {t}", f"`run_estimator_rounds` {name}", before, after,
                         f"max abs diff {diff:.1e}, NaN pattern {nan}"))
        policies = [Policy("trace", estimator=name, thresholds=32) for name in names]

        def prefix_path(*pos, **kw):
            return scan(*pos, **kw, by_prefix=True)

        def replay_with(by_prefix: bool, table=table, policies=policies):
            runner.run_estimator_rounds = prefix_path if by_prefix else scan
            try:
                return replay(table, policies).table
            finally:
                runner.run_estimator_rounds = scan

        before = _median_time(lambda: replay_with(True), args.repeats)
        after = _median_time(lambda: replay_with(False), args.repeats)
        same = replay_with(True).equals(replay_with(False))
        rows.append((f"T = {t}", "`replay()` trace:sauce, trace:mean_agreement, trace:bccs",
                     before, after, f"result tables {'identical' if same else 'DIFFER'}"))
    load1 = os.getloadavg()[0]
    print(f"{args.n:,} simulated debates (3 agents; `fastuq.synth.corpus_with_beliefs`, seed 0), "
          f"float64, JAX backend, median of {args.repeats}; load average (1 min) {load0:.2f} "
          f"before, {load1:.2f} after.\n")
    print("| rounds | what | one call per round prefix (before) | one scan (after) | speed-up "
          "| check |")
    print("| :--- | :--- | ---: | ---: | ---: | :--- |")
    for t, what, before, after, note in rows:
        print(f"| {t} | {what} | {before:.3f} s | {after:.3f} s | {before / after:.1f}x "
              f"| {note} |")


if __name__ == "__main__":
    main()
