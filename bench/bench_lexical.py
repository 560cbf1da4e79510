"""Benchmark ``lexical_similarity``'s host side: the word tokens of every text and the
pairwise Jaccard index of every round (``fastuq.signals.lexical.round_similarity``, the
``[T, N, A, A]`` similarity the spectral family also reads with ``similarity=lexical``), and
``fastuq.score(..., "lexical_similarity")`` end to end, on drawn 40-word texts.

With ``--baseline DIR`` (an older checkout, e.g. ``git archive main | tar -x -C /tmp/base``)
its ``fastuq/signals/tokens.py`` and ``fastuq/signals/lexical.py`` are loaded beside the
current ones and timed in the same process, alternating with them repeat by repeat on the
same corpus; end to end, the baseline's ``round_similarity`` is swapped into the current
package for its runs (everything else is the current code). Both results are checked to be
equal (bit for bit) before anything is timed.

    python bench/bench_lexical.py --quick                     # N = 1e4, A = 3
    python bench/bench_lexical.py --baseline /tmp/base        # N = 1e4, 1e5; A = 3, 5
    python bench/bench_lexical.py --baseline /tmp/base --n 10000   # N = 1e4 only

Texts: 40 words each, drawn from a vocabulary of 5,000 (Zipf-like: word k with weight
1/(k+10)), a third capitalised, with commas and full stops; T = 3 rounds, every agent
speaks. Results: ``bench/results/lexical.json`` (``lexical_quick.json.tmp`` with
``--quick``); the full run rewrites the LEXICAL section of bench/README.md.
"""

from __future__ import annotations

import argparse
import importlib.util
import os
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
import _common as bc  # noqa: E402

NAME = "LEXICAL"
DEFAULT_OUT = bc.RESULTS_DIR / "lexical.json"
QUICK_OUT = bc.RESULTS_DIR / "lexical_quick.json.tmp"
WORDS_PER_TEXT = 40


def make_table(n: int, t_max: int, a: int, seed: int = 0):
    """A corpus of ``n`` trajectories, ``t_max`` rounds of ``a`` texts (Arrow, built with
    Arrow's string kernels: no Python loop over texts)."""
    import pyarrow as pa
    import pyarrow.compute as pc

    rng = np.random.default_rng(seed)
    vocab_size = 5000
    syll = np.array(["ka", "lo", "mi", "ne", "ru", "sa", "ti", "vo", "ze", "pa", "qu", "x"])
    parts = rng.integers(0, syll.size, (vocab_size, 3))
    vocab = np.char.add(np.char.add(syll[parts[:, 0]], syll[parts[:, 1]]), syll[parts[:, 2]])
    vocab = np.char.add(vocab, np.where(np.arange(vocab_size) % 7 == 0, "s", ""))
    weights = 1.0 / (np.arange(vocab_size) + 10.0)
    n_texts = n * t_max * a
    idx = rng.choice(vocab_size, size=n_texts * WORDS_PER_TEXT, p=weights / weights.sum())
    words = pa.array(vocab, pa.large_string()).take(pa.array(idx))  # over 2 GiB at 1e5 x 5
    cap = rng.random(idx.size) < 1 / 3
    words = pc.if_else(pa.array(cap), pc.utf8_capitalize(words), words)
    big = pa.large_string()
    punct = pa.array(rng.choice(np.array(["", "", "", "", ",", "."]), idx.size), big)
    words = pc.binary_join_element_wise(words, punct, pa.scalar("", big))
    step = WORDS_PER_TEXT
    texts = pc.binary_join(pa.ListArray.from_arrays(
        pa.array(np.arange(0, idx.size + 1, step, dtype=np.int32)), words), pa.scalar(" ", big))
    per_round = pa.ListArray.from_arrays(pa.array(np.arange(0, n_texts + 1, a, dtype=np.int32)),
                                         texts)
    traj = pa.array(np.arange(0, n * t_max + 1, t_max, dtype=np.int32))
    answers = pa.ListArray.from_arrays(traj, pa.ListArray.from_arrays(
        pa.array(np.arange(0, n_texts + 1, a, dtype=np.int32)),
        pa.array(rng.choice(np.array(["1", "2"]), n_texts))))
    return pa.table({
        "trajectory_id": pa.array(np.arange(n).astype(str)),
        "protocol": pa.array(["debate"] * n), "n_agents": pa.array(np.full(n, a, np.int32)),
        "answers": answers, "texts": pa.ListArray.from_arrays(traj, per_round)})


def load_baseline(root: Path):
    """The baseline checkout's ``round_similarity``, its own tokenizer bound in."""
    mods = {}
    for name in ("tokens", "lexical"):
        spec = importlib.util.spec_from_file_location(
            f"_baseline_{name}", root / "fastuq" / "signals" / f"{name}.py")
        mod = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(mod)
        mods[name] = mod
    mods["lexical"].text_token_ids = mods["tokens"].text_token_ids
    fn = mods["lexical"].round_similarity

    def round_similarity(texts, team, n_slots, t_max=None, *, measure="jaccard", **kw):
        if measure != "jaccard":  # a baseline before similarity=rouge_l
            raise ValueError(f"the baseline has no measure {measure!r}")
        return fn(texts, team, n_slots, t_max, **kw)

    return round_similarity


def bench_shape(n: int, t_max: int, a: int, repeats: int, variants: dict) -> list[dict]:
    import fastuq
    import fastuq.signals.lexical as lexical

    table = make_table(n, t_max, a)
    texts = table["texts"]
    team = np.full(n, a)
    current = lexical.round_similarity
    want = None
    for name, fn in variants.items():  # equal results first (and a warm-up)
        got = fn(texts, team, a)[0]
        if want is None:
            want = got
        elif not np.array_equal(got, want):
            raise SystemExit(f"{name}: round_similarity differs at N = {n}, A = {a}")
    del want, got
    fastuq.score(table, "lexical_similarity", dtype="float32")  # compiles the kernel's shape
    times: dict[str, dict[str, list[float]]] = {v: {"host": [], "e2e": []} for v in variants}
    for _ in range(repeats):
        for name, fn in variants.items():
            start = time.perf_counter()
            fn(texts, team, a)
            times[name]["host"].append(time.perf_counter() - start)
            lexical.round_similarity = fn
            try:
                start = time.perf_counter()
                fastuq.score(table, "lexical_similarity", dtype="float32")
                times[name]["e2e"].append(time.perf_counter() - start)
            finally:
                lexical.round_similarity = current
    n_tokens = int(WORDS_PER_TEXT * n * t_max * a)
    return [{"variant": name, "n": n, "t": t_max, "a": a, "tokens": n_tokens,
             "host_s": float(np.median(t["host"])), "e2e_s": float(np.median(t["e2e"])),
             "traj_per_s": n / float(np.median(t["e2e"])), "repeats": repeats}
            for name, t in times.items()]


def render(data: dict[str, Any]) -> str:
    rows = []
    by_shape: dict[tuple, dict] = {}
    for r in data["rows"]:
        by_shape.setdefault((r["n"], r["t"], r["a"]), {})[r["variant"]] = r
    for (n, t, a), vs in by_shape.items():
        for name, r in vs.items():
            base = vs.get("baseline")
            gain = (f"{base['e2e_s'] / r['e2e_s']:.1f}x" if base is not None and
                    name != "baseline" else "")
            rows.append([f"{n:,}", t, a, name, f"{r['host_s']:.2f} s", f"{r['e2e_s']:.2f} s",
                         bc.fmt_si(r["traj_per_s"]) + "/s", gain])
    table = bc.markdown_table(["N", "T", "A", "code", "host packing", "end to end",
                               "trajectories/s", "speed-up"], rows)
    load = data["load"]
    return "\n".join([
        f"{data['machine'].get('cpu', 'CPU')}, {WORDS_PER_TEXT}-word texts, median of "
        f"{data['repeats']} alternating repeats; load average {load['before']:.1f} before / "
        f"{load['after']:.1f} after; baseline: {data.get('baseline') or 'none'}.", "", table])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--baseline", type=Path, help="an older checkout to time beside")
    parser.add_argument("--repeats", type=int)
    parser.add_argument("--n", type=int, action="append",
                        help="trajectories (repeatable; default 1e4 and 1e5), A = 3 and 5 each")
    parser.add_argument("--no-readme", action="store_true")
    parser.add_argument("--out", type=Path)
    args = parser.parse_args()
    sizes = args.n or [10_000, 100_000]
    shapes = [(10_000, 3, 3)] if args.quick else [(n, 3, a) for n in sizes for a in (3, 5)]
    repeats = args.repeats or (1 if args.quick else 2)
    import fastuq.signals.lexical as lexical

    fastuq_lexical = lexical.round_similarity
    variants = {"current": fastuq_lexical}
    if args.baseline is not None:
        variants = {"baseline": load_baseline(args.baseline), **variants}
    start = time.perf_counter()
    machine = bc.machine_info()
    load_before = os.getloadavg()[0]
    rows = []
    for n, t_max, a in shapes:
        rows += bench_shape(n, t_max, a, repeats, variants)
        print(f"N = {n}, T = {t_max}, A = {a}: " + ", ".join(
            f"{r['variant']} {r['traj_per_s']:.3g}/s" for r in rows[-len(variants):]) +
              f" (load {os.getloadavg()[0]:.1f}, {time.perf_counter() - start:.0f} s)",
              flush=True)
    data = {"name": NAME, "quick": args.quick, "repeats": repeats, "machine": machine,
            "baseline": str(args.baseline) if args.baseline else None,
            "load": {"before": load_before, "after": os.getloadavg()[0]}, "rows": rows,
            "wall_s": time.perf_counter() - start}
    out = args.out or (QUICK_OUT if args.quick else DEFAULT_OUT)
    bc.publish(out, data, render, NAME, readme=not args.quick and not args.no_readme)


if __name__ == "__main__":
    main()
