"""Benchmark the consistency gate's score: ``fastuq.gate.consistency_scores`` on simulated
self-consistency candidates against a per-item Python reference of the same definition.

Run from the repository root::

    python bench/bench_gate.py            # N = 1e6 candidates, k = 8 samples of ~40 tokens
    python bench/bench_gate.py --quick    # N = 2e4, < 30 s
    python bench/bench_gate.py --before ../main/fastuq/decisions/consistency.py  # also time
                                          # another version of the module (before/after)

Inputs: ``fastuq.synth.self_consistency.self_consistency_corpus(N, k=8, seed=0)``
(candidates: ``final_answer``; samples: round 0 of ``texts``, about 35 filler words and
"the answer is X": about 40 tokens). Timed: the vectorized score over all N (median of
``--repeats`` wall-clock calls after a warm-up; the process CPU time of the same calls
alongside, since the score runs on a thread pool), with all of this process's cores and with
one (``fastuq.decisions.consistency._threads`` patched); with ``--before PATH``, the same
for the module file at PATH loaded on its own (a version that imports only NumPy, Polars
and PyArrow at module level, as main's did before answers decided); and the reference loop
over the first ``--ref-n`` items, wall-clock and CPU, **extrapolated linearly** to N (its
time per item does not depend on N). On a machine shared with other jobs the CPU-time ratio
is the steadier of the two. The scores of those items must equal the reference's within
1e-12 (the reference averages in another order). Prints a markdown table; a full run (no
``--quick``) also writes ``bench/results/gate.json``.
"""

from __future__ import annotations

import argparse
import os
import re
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
import _common as bc  # noqa: E402


def reference(candidate: str, samples: list) -> float:
    """The definition, item by item (as tests/_references.py's ``consistency_exact``): per
    usable sample, equal normalised texts 1.0; else both answers stated
    (``fastuq.answers.extract_answer``): 1.0 if ``answers_equivalent``, else 0.0; else the
    Jaccard index of ``re``'s ``\\w+`` tokens of the lowercased texts."""
    from fastuq.answers import answers_equivalent, extract_answer

    def norm(text):
        return " ".join((text or "").lower().split())

    c = norm(candidate)
    c_ans = extract_answer(candidate or "")
    ca = set(re.findall(r"\w+", (candidate or "").lower()))
    values = []
    for sample in samples or []:
        s = norm(sample)
        if not s:
            continue
        if s == c:
            values.append(1.0)
            continue
        s_ans = extract_answer(sample)
        if c_ans is not None and s_ans is not None:
            values.append(float(answers_equivalent(c_ans, s_ans)))
            continue
        b = set(re.findall(r"\w+", sample.lower()))
        values.append(len(ca & b) / len(ca | b) if ca | b else 0.0)
    return min(1.0, max(0.0, sum(values) / len(values))) if values else 0.0


def _load(path: str):
    """The module file at ``path``, loaded on its own (not as part of the package)."""
    import importlib.util

    spec = importlib.util.spec_from_file_location("consistency_before", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _time(fn, repeats: int) -> tuple[list[float], list[float]]:
    """Wall-clock and process-CPU seconds of ``repeats`` calls after one warm-up call."""
    fn()
    wall, cpu = [], []
    for _ in range(repeats):
        c, w = time.process_time(), time.perf_counter()
        fn()
        wall.append(time.perf_counter() - w)
        cpu.append(time.process_time() - c)
    return wall, cpu


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="N = 2e4, no single-thread row")
    ap.add_argument("--n", type=int, help="candidates (default 1e6)")
    ap.add_argument("--k", type=int, default=8)
    ap.add_argument("--words", type=int, default=35, help="filler words per sample")
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--ref-n", type=int, default=5000,
                    help="items the reference runs on (then extrapolated to N)")
    ap.add_argument("--before", metavar="PATH",
                    help="also time this file's consistency_scores (e.g. main's module)")
    ap.add_argument("--single-thread", action=argparse.BooleanOptionalAction, default=None,
                    help="also time with one thread (default: on unless --quick)")
    args = ap.parse_args()
    n = args.n or (20_000 if args.quick else 1_000_000)
    single = (not args.quick) if args.single_thread is None else args.single_thread

    import fastuq.decisions.consistency as gate
    from fastuq.synth.self_consistency import self_consistency_corpus

    info = bc.machine_info()
    table = self_consistency_corpus(n, k=args.k, seed=0, words=args.words)
    cand = table.column("final_answer").combine_chunks()
    samples = table.column("texts").combine_chunks().flatten()
    del table
    threads = gate._threads()
    runs = {}
    wall, cpu = _time(lambda: gate.consistency_scores(cand, samples), args.repeats)
    runs[f"{threads} threads"] = {"threads": threads, "wall_s": wall, "cpu_s": cpu}
    if single and threads > 1:
        patched = gate._threads
        gate._threads = lambda: 1
        try:
            wall, cpu = _time(lambda: gate.consistency_scores(cand, samples), args.repeats)
        finally:
            gate._threads = patched
        runs["1 thread"] = {"threads": 1, "wall_s": wall, "cpu_s": cpu}
    if args.before:
        before = _load(args.before)
        wall, cpu = _time(lambda: before.consistency_scores(cand, samples), args.repeats)
        runs[f"before ({args.before}), {threads} threads"] = {
            "threads": threads, "wall_s": wall, "cpu_s": cpu, "module": args.before}
    got = gate.consistency_scores(cand, samples)
    m = min(args.ref_n, n)
    c_py, s_py = cand.slice(0, m).to_pylist(), samples.slice(0, m).to_pylist()
    c0, start = time.process_time(), time.perf_counter()
    want = np.array([reference(c, s) for c, s in zip(c_py, s_py, strict=True)])
    ref_measured = time.perf_counter() - start
    ref_cpu = (time.process_time() - c0) / m * n
    ref = ref_measured / m * n
    diff = float(np.max(np.abs(got[:m] - want)))
    exact = int(np.sum(np.abs(got[:m] - want) <= 1e-12))
    load_end = list(os.getloadavg())

    tokens = float(np.mean([len(re.findall(r"\w+", t.lower()))
                            for s in s_py[:200] for t in s if t]))
    print(f"consistency gate score: N = {n:,} candidates, k = {args.k} samples of "
          f"~{tokens:.0f} tokens; {info.get('cpu_model', '')}, "
          f"{info.get('affinity_cpus', '?')} cores; load average "
          f"{info['loadavg_start'][0]:.2f} at start, {load_end[0]:.2f} at end\n")
    rows = [[f"per-item Python reference (timed on {m:,} items, extrapolated)",
             f"{ref:.2f}", f"{ref_cpu:.2f}", f"{n / ref:,.0f}", "1x", "1x"]]
    for name, r in runs.items():
        w, c = bc.median(r["wall_s"]), bc.median(r["cpu_s"])
        label = (f"`consistency_scores` {name}" if name.startswith("before")
                 else f"`fastuq.gate.consistency_scores`, {name}")
        rows.append([label, f"{w:.2f}", f"{c:.2f}",
                     f"{n / w:,.0f}", f"{ref / w:.0f}x", f"{ref_cpu / c:.0f}x"])
    print(bc.markdown_table(["method", "wall s (median)", "CPU s", "candidates/s",
                             "x reference (wall)", "x reference (CPU)"], rows,
                            align="lrrrrr"))
    print(f"\nscores of the first {m:,} items: {exact:,} equal to the reference's within "
          f"1e-12, max |difference| {diff:.1e}")
    if not args.quick:
        bc.write_json(bc.RESULTS_DIR / "gate.json", {
            "machine": info, "n": n, "k": args.k, "words": args.words,
            "tokens_per_sample": tokens, "repeats": args.repeats, "runs": runs,
            "reference": {"items_timed": m, "seconds_measured": ref_measured,
                          "seconds_extrapolated": ref, "cpu_seconds_extrapolated": ref_cpu},
            "max_abs_difference": diff, "items_within_1e-12": exact, "loadavg_end": load_end,
        })
    if diff > 1e-12:
        raise SystemExit("the scores differ from the reference")


if __name__ == "__main__":
    main()
