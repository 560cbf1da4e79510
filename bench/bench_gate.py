"""Benchmark the consistency gate's score: ``fastuq.gate.consistency_scores`` on simulated
self-consistency candidates against a per-item Python reference of the same definition.

Run from the repository root::

    python bench/bench_gate.py            # N = 1e5 candidates, k = 8 samples of ~35 words
    python bench/bench_gate.py --quick    # N = 2e4, < 30 s

Inputs: ``fastuq.synth.self_consistency.self_consistency_corpus(N, k=8, seed=0)``
(candidates: ``final_answer``; samples: round 0 of ``texts``). Timed: the vectorized score
over all N (median of ``--repeats`` after a warm-up), and the reference loop over the first
``--ref-n`` items, extrapolated to N. Prints a markdown table; writes nothing.
"""

from __future__ import annotations

import argparse
import re
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
import _common as bc  # noqa: E402


def reference(candidate: str, samples: list) -> float:
    """The definition, item by item (as in tests/test_gate.py)."""
    def norm(text):
        return re.sub(r"\s+", " ", (text or "").lower()).strip()

    def last_number(text):
        found = re.findall(r"-?\d+(?:\.\d+)?", text)
        return float(found[-1]) if found else None

    c = norm(candidate)
    ca = set(re.findall(r"[a-z0-9]+", c))
    values = []
    for sample in samples or []:
        s = norm(sample)
        if not s:
            continue
        sn = last_number(s)
        if (sn is not None and last_number(c) == sn) or s == c:
            values.append(1.0)
            continue
        b = set(re.findall(r"[a-z0-9]+", s))
        values.append(len(ca & b) / len(ca | b) if ca | b else 0.0)
    return min(1.0, max(0.0, sum(values) / len(values))) if values else 0.0


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="N = 2e4")
    ap.add_argument("--n", type=int, help="candidates (default 1e5)")
    ap.add_argument("--k", type=int, default=8)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--ref-n", type=int, default=2000)
    args = ap.parse_args()
    n = args.n or (20_000 if args.quick else 100_000)

    from fastuq.gate import consistency_scores
    from fastuq.synth.self_consistency import self_consistency_corpus

    table = self_consistency_corpus(n, k=args.k, seed=0)
    cand = table.column("final_answer").combine_chunks()
    samples = table.column("texts").combine_chunks().flatten()
    times = bc.time_calls(lambda: consistency_scores(cand, samples), args.repeats)
    fast = bc.median(times)
    got = consistency_scores(cand, samples)
    m = min(args.ref_n, n)
    c_py, s_py = cand.slice(0, m).to_pylist(), samples.slice(0, m).to_pylist()
    start = time.perf_counter()
    want = [reference(c, s) for c, s in zip(c_py, s_py, strict=True)]
    ref = (time.perf_counter() - start) / m * n
    err = float(np.max(np.abs(got[:m] - np.asarray(want))))
    print(f"consistency gate score: N = {n:,} candidates, k = {args.k} samples of ~35 words; "
          f"{bc.machine_info().get('cpu_model', '')}\n")
    print(bc.markdown_table(
        ["method", "seconds", "candidates/s", "x reference"],
        [["per-item Python reference (extrapolated from "
          f"{m:,})", f"{ref:.2f}", f"{n / ref:,.0f}", "1x"],
         ["`fastuq.gate.consistency_scores` (Polars, vectorized)", f"{fast:.2f}",
          f"{n / fast:,.0f}", f"{ref / fast:.1f}x"]]))
    print(f"\nmax |difference| on the first {m:,}: {err:.1e}")


if __name__ == "__main__":
    main()
