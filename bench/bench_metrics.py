"""Time fastuq.metrics' AUROC and AUARC on an [N, C] float32 matrix against scikit-learn.

The reference is ``sklearn.metrics.roc_auc_score(labels, -scores[:, j])`` looped over the
columns (scikit-learn has no AUARC; the AUARC row has no reference). Each timing is the
median of ``--repeats`` runs, measured side by side in one process. Prints a markdown table;
``--json PATH`` also writes the numbers. Not a test.

    python bench/bench_metrics.py --n 1000000 --c 32 --repeats 3
    python bench/bench_metrics.py --quick     # smoke test: N = 1e5, C = 8, 3 repeats
"""

from __future__ import annotations

import argparse
import json
import platform
import time

import numpy as np


def _median_time(fn, repeats: int) -> tuple[float, object]:
    times, out = [], None
    for _ in range(repeats):
        t0 = time.perf_counter()
        out = fn()
        times.append(time.perf_counter() - t0)
    return float(np.median(times)), out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true",
                    help="smoke test: N = 1e5, C = 8 (unless --n / --c say otherwise)")
    ap.add_argument("--n", type=int, default=None, help="rows (default 1e6; --quick 1e5)")
    ap.add_argument("--c", type=int, default=None, help="score columns (default 32; --quick 8)")
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--json", default=None, help="write the results here as JSON")
    args = ap.parse_args()
    args.n = args.n or (100_000 if args.quick else 1_000_000)
    args.c = args.c or (8 if args.quick else 32)

    from sklearn.metrics import roc_auc_score

    from fastuq.metrics import auarc, auroc

    rng = np.random.default_rng(args.seed)
    labels = rng.random(args.n) < 0.6
    scores = (rng.standard_normal((args.n, args.c)) - 0.8 * labels[:, None]).astype(np.float32)
    scores[:, : args.c // 4] = np.round(scores[:, : args.c // 4], 1)  # a quarter heavily tied

    def sk_loop() -> np.ndarray:
        return np.array([roc_auc_score(labels, -scores[:, j]) for j in range(args.c)])

    rows = []
    t_auroc, a = _median_time(lambda: auroc(labels, scores), args.repeats)
    t_auarc, _ = _median_time(lambda: auarc(labels, scores), args.repeats)
    t_sk, ref = _median_time(sk_loop, args.repeats)
    max_diff = float(np.max(np.abs(a - ref)))
    rows.append(("fastuq auroc", t_auroc, t_sk / t_auroc))
    rows.append(("fastuq auarc", t_auarc, t_sk / t_auarc))
    rows.append(("sklearn roc_auc_score x C", t_sk, 1.0))

    print(
        f"[{args.n}, {args.c}] float32, median of {args.repeats}; "
        f"max |auroc - sklearn| = {max_diff:.2e}\n"
    )
    print("| method | seconds | ms / column | speed-up vs sklearn |")
    print("| --- | ---: | ---: | ---: |")
    for name, t, sp in rows:
        print(f"| {name} | {t:.3f} | {1e3 * t / args.c:.1f} | {sp:.2f}x |")
    if args.json:
        with open(args.json, "w") as fh:
            json.dump(
                {
                    "n": args.n,
                    "c": args.c,
                    "repeats": args.repeats,
                    "machine": platform.processor() or platform.machine(),
                    "max_abs_diff_auroc": max_diff,
                    "seconds": {name: t for name, t, _ in rows},
                },
                fh,
                indent=2,
            )


if __name__ == "__main__":
    main()
