"""A packed corpus (``fastuq pack``) against its Parquet source, in one run.

Measured on the ``signals`` corpus of ``bench_pipeline.py`` (simulated debate and DyLAN
trajectories: agreement, token entropy, answers, seq_logprob, n_tokens; ``fastuq.synth``,
seed 0), each command in its own subprocess under ``/usr/bin/time -v`` (wall seconds, peak
RSS), the Parquet and the pack runs alternating:

* ``fastuq pack CORPUS -o PACK`` (wall, peak RSS, size on disk against the Parquet's);
* ``fastuq score`` (SAUCE, the default) from Parquet and from the pack, output write
  included: the command's wall time, and the scoring time it prints (its read, checks,
  packing, kernels and write, without Python and JAX start-up);
* reading the pack's columns SAUCE needs (agreement, token entropy and their masks, mapped
  and made time-major, every chunk; in this process): the floor of the pack's
  read-and-score;
* ``fastuq eval`` of 8 estimators (the list of ``bench_eval.py``) from each (wall, RSS;
  ``--skip-eval`` leaves it out);
* with ``--baseline-python PY`` (the interpreter of another checkout's install, e.g. main's),
  ``fastuq pack`` of that checkout too, alternating with this one's: before/after in one run;
* the kernels alone on SAUCE's inputs already built from the pack (every chunk; in the
  warm process): with the read floor, what a read-and-score cannot go below;
* ``--method all`` on a top-k corpus (``topk`` of ``bench_pipeline.py``: five log-probs per
  token, ``--topk-n`` trajectories, default 1e5; 0 leaves it out): ``score_file`` from its
  Parquet and from its pack, warm, in one process, alternating.

Every run records wall seconds and CPU seconds (user + system, all threads): on a shared
machine whose load average is several times its core count, the wall time of a run is
mostly its wait for a core, and the CPU time is the steadier measure of the work done.

Prints a markdown table and writes ``bench/results/packed_corpus.json`` (``--quick``:
``packed_corpus_quick.json.tmp``), with the load averages before and after each run.
"""

from __future__ import annotations

import argparse
import os
import re
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
import _common as bc  # noqa: E402
import bench_eval as be  # noqa: E402
import bench_pipeline as bp  # noqa: E402

GIB = 2**30


def run(cmd: list[str], cwd: Path) -> dict[str, Any]:
    """One command under ``/usr/bin/time -v``: wall, peak RSS, user/sys CPU, loads."""
    full = ["/usr/bin/time", "-v", *cmd] if Path("/usr/bin/time").exists() else cmd
    load0 = os.getloadavg()[0]
    start = time.perf_counter()
    proc = subprocess.run(full, capture_output=True, text=True, cwd=cwd)
    res: dict[str, Any] = {"wall_s": time.perf_counter() - start, "load_before": load0,
                           "load_after": os.getloadavg()[0], "returncode": proc.returncode}
    for key, pat, scale in (("peak_rss", r"Maximum resident set size \(kbytes\): (\d+)", 1024),
                            ("user_s", r"User time \(seconds\): ([\d.]+)", 1),
                            ("sys_s", r"System time \(seconds\): ([\d.]+)", 1),
                            ("scored_s", r"scored [\d,]+ trajectories in ([\d.]+) s", 1)):
        m = re.search(pat, proc.stderr + proc.stdout)
        if m:
            res[key] = float(m.group(1)) * scale
    if proc.returncode:
        raise SystemExit(f"{' '.join(cmd)} failed:\n{proc.stderr[-3000:]}")
    return res


_WARM = """
import json, os, sys, time
from fastuq.engine.files import score_file
corpus, pack, out, repeats, methods = (sys.argv[1], sys.argv[2], sys.argv[3],
                                       int(sys.argv[4]), sys.argv[5])
score_file(corpus, out, methods=methods)
score_file(pack, out, methods=methods)
times = {"parquet": [], "pack": [], "parquet_cpu": [], "pack_cpu": [], "loads": []}
for r in range(repeats):
    for name, src in ((("parquet", corpus), ("pack", pack)) if r % 2 == 0
                      else (("pack", pack), ("parquet", corpus))):
        times["loads"].append(os.getloadavg()[0])
        t, c = time.perf_counter(), time.process_time()
        score_file(src, out, methods=methods)
        times[name].append(time.perf_counter() - t)
        times[name + "_cpu"].append(time.process_time() - c)
if methods == "sauce":  # the kernels alone, on SAUCE's inputs built from the pack beforehand
    import numpy as np
    from fastuq.engine.packed import PackedBatch
    from fastuq.engine.registry import get_estimator
    from fastuq.engine.runner import call_kernel, prepare_estimator
    from fastuq.io.packfile import pack_chunks
    est = get_estimator("sauce")
    plans = []
    for c in pack_chunks(pack, columns=["agreement"], optional_columns=["token_entropy",
                                                                          "protocol"]):
        b = PackedBatch(c.table, c.arrays, source=c.source, row0=c.source_row0)
        plans.append((b.n, prepare_estimator(est, b, params={}, protocol=None)))
    times["kernels"], times["kernels_cpu"] = [], []
    for r in range(repeats):
        t, c = time.perf_counter(), time.process_time()
        for n, (inputs, optional, values) in plans:
            call_kernel(est, inputs, optional, values, n=n, dtype=np.dtype("float64"),
                        backend="jax")
        times["kernels"].append(time.perf_counter() - t)
        times["kernels_cpu"].append(time.process_time() - c)
print(json.dumps(times))
"""


def warm_scores(corpus: Path, pack: Path, out: Path, repeats: int,
                methods: str = "sauce") -> dict[str, list]:
    """``score_file`` (``methods``, output written) from each, in one process after a
    warm-up of both (JIT compiled, pages cached), alternating: seconds and CPU seconds per
    run (and for SAUCE, the kernels alone on inputs built beforehand)."""
    import json

    proc = subprocess.run([sys.executable, "-c", _WARM, str(corpus), str(pack), str(out),
                           str(repeats), methods], capture_output=True, text=True)
    if proc.returncode:
        raise SystemExit(f"warm scoring failed:\n{proc.stderr[-3000:]}")
    return json.loads(proc.stdout.strip().splitlines()[-1])


def read_floor(pack: Path, repeats: int) -> float:
    """Median seconds to map every chunk and build SAUCE's time-major inputs from it."""
    from fastuq.io.packfile import open_pack, read_chunk_table

    manifest = open_pack(pack)

    def once() -> None:
        for entry in manifest["chunks"]:
            table = read_chunk_table(pack, entry)
            from fastuq.io.packfile import PackedArrays

            arrays = PackedArrays(table, frozenset(), entry["n_slots"], False, entry["shapes"])
            for name in ("agreement", "token_entropy"):
                arrays.array("rounds", name)
                arrays.array("rounds", name, "mask")

    return bc.median(bc.time_calls(once, repeats))


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--quick", action="store_true", help="N = 1e5")
    p.add_argument("--n", type=lambda s: int(float(s)), default=None)
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--cache-dir", type=Path, default=bp.DEFAULT_CACHE)
    p.add_argument("--out", type=Path, default=None)
    p.add_argument("--skip-eval", action="store_true", help="leave out fastuq eval")
    p.add_argument("--baseline-python", default=None,
                   help="also run `fastuq pack` with this interpreter (another checkout's "
                        "install), alternating with this one's")
    p.add_argument("--topk-n", type=lambda s: int(float(s)), default=100_000,
                   help="trajectories of the top-k corpus for --method all (0: leave out)")
    args = p.parse_args(argv)
    n = args.n or (100_000 if args.quick else 1_000_000)
    out = args.out or Path(__file__).resolve().parent / "results" / (
        "packed_corpus_quick.json.tmp" if args.quick else "packed_corpus.json")
    corpus = bp.corpus(args.cache_dir, "signals", n)
    py = [sys.executable, "-m", "fastuq"]
    result: dict[str, Any] = {"machine": bc.machine_info(), "n": n, "corpus": str(corpus),
                              "date": time.strftime("%Y-%m-%dT%H:%M:%S%z")}
    with tempfile.TemporaryDirectory() as tmp:
        tmp = Path(tmp)
        pack = tmp / "c.fqpack"
        packs: dict[str, list] = {"this": [], "baseline": []}
        who = [("this", py)]
        if args.baseline_python:
            who.append(("baseline", [args.baseline_python, "-m", "fastuq"]))
        for r in range(args.repeats if args.baseline_python else 1):
            for name, cmd in who if r % 2 == 0 else who[::-1]:
                res = run([*cmd, "pack", str(corpus), "-o", str(pack)], tmp)
                packs[name].append(res)
                bp._log(f"  pack ({name}) run {r}: {res['wall_s']:.2f} s wall, "
                        f"{res.get('user_s', 0) + res.get('sys_s', 0):.2f} s CPU, load "
                        f"{res['load_before']:.1f}")
        if args.baseline_python:  # the pack read below is this checkout's
            res = run([*py, "pack", str(corpus), "-o", str(pack)], tmp)
        result["pack"] = packs["this"][0]
        result["packs"] = packs
        import json

        manifest = json.loads((pack / "manifest.json").read_text())
        result["source_bytes"], result["pack_bytes"] = (manifest["source_bytes"],
                                                        manifest["pack_bytes"])
        score: dict[str, list] = {"parquet": [], "pack": []}
        for r in range(args.repeats):
            order = [("parquet", corpus), ("pack", pack)]
            for name, src in order if r % 2 == 0 else order[::-1]:
                res = run([*py, "score", str(src), "-o", str(tmp / f"{name}.parquet"),
                           "--no-progress"], tmp)
                score[name].append(res)
                bp._log(f"  score {name} run {r}: {res['wall_s']:.2f} s wall, scored in "
                        f"{res.get('scored_s', float('nan')):.2f} s, load "
                        f"{res['load_before']:.1f}")
        result["score"] = score
        result["warm"] = warm_scores(corpus, pack, tmp / "warm.parquet", args.repeats)
        bp._log(f"  warm score_file: parquet {result['warm']['parquet']}, pack "
                f"{result['warm']['pack']}")
        result["read_floor_s"] = read_floor(pack, args.repeats)
        if args.topk_n:
            topk = bp.corpus(args.cache_dir, "topk", args.topk_n)
            tpack = tmp / "topk.fqpack"
            result["topk_pack"] = run([*py, "pack", str(topk), "-o", str(tpack)], tmp)
            result["topk_n"] = args.topk_n
            result["topk"] = warm_scores(topk, tpack, tmp / "topk.parquet", args.repeats,
                                         "all")
            bp._log(f"  --method all on top-k: parquet {result['topk']['parquet']}, pack "
                    f"{result['topk']['pack']}")
        ev: dict[str, list] = {"parquet": [], "pack": []}
        for name, src in () if args.skip_eval else (("parquet", corpus), ("pack", pack)):
            res = be.run_eval(src, tmp / f"{name}.json", be.METHODS, None)
            if res["returncode"]:
                raise SystemExit(f"eval {name} failed:\n{res.get('error', '')}")
            ev[name].append(res)
            bp._log(f"  eval {name}: {res['wall_s']:.1f} s, "
                    f"{res.get('peak_rss', 0) / GIB:.2f} GiB, load {res['load_before']:.1f}")
        result["eval"] = ev
    bc.write_json(out, result)
    print(render(result))


def render(r: dict[str, Any]) -> str:
    """The markdown table of one run."""
    med = bc.median

    def m(runs, key):
        return med([x[key] for x in runs if key in x])

    def cpu(runs):
        return med([x.get("user_s", 0) + x.get("sys_s", 0) for x in runs])

    sp, sk = r["score"]["parquet"], r["score"]["pack"]
    packs = r.get("packs") or {"this": [r["pack"]], "baseline": []}
    w = r["warm"]
    rows = []
    for name, label in (("baseline", "fastuq pack, baseline checkout"),
                        ("this", "fastuq pack (this checkout)")):
        runs = packs.get(name) or []
        if not runs:
            continue
        note = (f"{r['pack_bytes'] / 2**20:.0f} MiB on disk, "
                f"{r['pack_bytes'] / r['source_bytes']:.2f}x the Parquet's "
                f"{r['source_bytes'] / 2**20:.0f} MiB" if name == "this" else "")
        note += ("; " if note else "") + (
            f"{m(runs, 'wall_s') / m(sp, 'wall_s'):.2f}x one score's wall, "
            f"{cpu(runs) / cpu(sp):.2f}x its CPU")
        rows.append((label, f"{m(runs, 'wall_s'):.2f} / {cpu(runs):.2f}",
                     f"{m(runs, 'peak_rss') / GIB:.2f}", note))
    rows += [
        ("score SAUCE from Parquet (wall / CPU; scored in)",
         f"{m(sp, 'wall_s'):.2f} / {cpu(sp):.2f}; {m(sp, 'scored_s'):.2f}",
         f"{m(sp, 'peak_rss') / GIB:.2f}", f"{r['n'] / m(sp, 'scored_s'):.3g} traj/s"),
        ("score SAUCE from the pack (wall / CPU; scored in)",
         f"{m(sk, 'wall_s'):.2f} / {cpu(sk):.2f}; {m(sk, 'scored_s'):.2f}",
         f"{m(sk, 'peak_rss') / GIB:.2f}",
         f"{r['n'] / m(sk, 'scored_s'):.3g} traj/s; {m(sp, 'scored_s') / m(sk, 'scored_s'):.2f}x"
         f" (wall {m(sp, 'wall_s') / m(sk, 'wall_s'):.2f}x)"),
    ]
    for name in ("parquet", "pack"):
        c = med(w[name + "_cpu"]) if w.get(name + "_cpu") else float("nan")
        note = f"{r['n'] / med(w[name]):.3g} traj/s"
        if name == "pack":
            note += (f"; {med(w['parquet']) / med(w['pack']):.2f}x (CPU "
                     f"{med(w['parquet_cpu']) / c:.2f}x)" if w.get("pack_cpu") else
                     f"; {med(w['parquet']) / med(w['pack']):.2f}x")
        rows.append((f"score_file SAUCE from {'Parquet' if name == 'parquet' else 'the pack'}"
                     ", warm, in one process (wall / CPU)", f"{med(w[name]):.3f} / {c:.3f}",
                     "", note))
    rows.append(("read the pack's SAUCE columns (floor)", f"{r['read_floor_s']:.3f}", "",
                 f"warm score from the pack = {med(w['pack']) / r['read_floor_s']:.1f}x "
                 "the floor"))
    if w.get("kernels"):
        floor = r["read_floor_s"] + med(w["kernels"])
        rows.append(("SAUCE kernels alone on built inputs (wall / CPU)",
                     f"{med(w['kernels']):.3f} / {med(w['kernels_cpu']):.3f}", "",
                     f"read + kernels {floor:.3f} s: warm score from the pack = "
                     f"{med(w['pack']) / floor:.2f}x"))
    if r.get("topk"):
        t, n = r["topk"], r["topk_n"]
        rows.append((f"fastuq pack, top-k corpus (N = {n:,})",
                     f"{r['topk_pack']['wall_s']:.2f} / "
                     f"{r['topk_pack'].get('user_s', 0) + r['topk_pack'].get('sys_s', 0):.2f}",
                     f"{r['topk_pack'].get('peak_rss', 0) / GIB:.2f}", ""))
        for name in ("parquet", "pack"):
            where = "Parquet" if name == "parquet" else "the pack"
            rows.append((f"--method all, top-k, from {where}, warm (wall / CPU)",
                         f"{med(t[name]):.3f} / {med(t[name + '_cpu']):.3f}", "",
                         f"{n / med(t[name]):.3g} traj/s wall, "
                         f"{n / med(t[name + '_cpu']):.3g} per CPU second"))
    loads = [x["load_before"] for runs in (sp, sk, *packs.values()) for x in runs]
    loads += w["loads"] + (r["topk"]["loads"] if r.get("topk") else [])
    if r.get("eval") and r["eval"]["parquet"]:
        ep, ek = r["eval"]["parquet"][0], r["eval"]["pack"][0]
        rows += [
            ("eval 8 estimators from Parquet", f"{ep['wall_s']:.2f}",
             f"{ep.get('peak_rss', 0) / GIB:.2f}", ""),
            ("eval 8 estimators from the pack", f"{ek['wall_s']:.2f}",
             f"{ek.get('peak_rss', 0) / GIB:.2f}", f"{ep['wall_s'] / ek['wall_s']:.2f}x"),
        ]
        loads += [ep["load_before"], ek["load_before"]]
    head = (f"N = {r['n']:,} (`signals` corpus), {r['date']}, load average "
            f"{min(loads):.1f}-{max(loads):.1f} during the runs (seconds: wall / CPU, user + "
            "system of every thread)\n\n")
    return head + bc.markdown_table(("run", "seconds", "peak RSS (GiB)", "note"), rows)


if __name__ == "__main__":
    main()
