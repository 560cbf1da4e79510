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
* ``fastuq eval`` of 8 estimators (the list of ``bench_eval.py``) from each (wall, RSS).

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
corpus, pack, out, repeats = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4])
score_file(corpus, out)
score_file(pack, out)
times = {"parquet": [], "pack": [], "loads": []}
for r in range(repeats):
    for name, src in ((("parquet", corpus), ("pack", pack)) if r % 2 == 0
                      else (("pack", pack), ("parquet", corpus))):
        times["loads"].append(os.getloadavg()[0])
        t = time.perf_counter()
        score_file(src, out)
        times[name].append(time.perf_counter() - t)
print(json.dumps(times))
"""


def warm_scores(corpus: Path, pack: Path, out: Path, repeats: int) -> dict[str, list]:
    """``score_file`` (SAUCE, output written) from each, in one process after a warm-up of
    both (JIT compiled, pages cached), alternating: seconds per run."""
    import json

    proc = subprocess.run([sys.executable, "-c", _WARM, str(corpus), str(pack), str(out),
                           str(repeats)], capture_output=True, text=True)
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
        result["pack"] = run([*py, "pack", str(corpus), "-o", str(pack)], tmp)
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
        ev: dict[str, list] = {"parquet": [], "pack": []}
        for name, src in (("parquet", corpus), ("pack", pack)):
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

    sp, sk = r["score"]["parquet"], r["score"]["pack"]
    ep, ek = r["eval"]["parquet"][0], r["eval"]["pack"][0]
    rows = [
        ("fastuq pack (once)", f"{r['pack']['wall_s']:.2f}",
         f"{r['pack'].get('peak_rss', 0) / GIB:.2f}",
         f"{r['pack_bytes'] / 2**20:.0f} MiB on disk, {r['pack_bytes'] / r['source_bytes']:.2f}x"
         f" the Parquet's {r['source_bytes'] / 2**20:.0f} MiB"),
        ("score SAUCE from Parquet (wall / scored in)",
         f"{m(sp, 'wall_s'):.2f} / {m(sp, 'scored_s'):.2f}",
         f"{m(sp, 'peak_rss') / GIB:.2f}", f"{r['n'] / m(sp, 'scored_s'):.3g} traj/s"),
        ("score SAUCE from the pack (wall / scored in)",
         f"{m(sk, 'wall_s'):.2f} / {m(sk, 'scored_s'):.2f}",
         f"{m(sk, 'peak_rss') / GIB:.2f}",
         f"{r['n'] / m(sk, 'scored_s'):.3g} traj/s; {m(sp, 'scored_s') / m(sk, 'scored_s'):.2f}x"
         f" (wall {m(sp, 'wall_s') / m(sk, 'wall_s'):.2f}x)"),
        ("score_file SAUCE from Parquet, warm, in one process", f"{med(r['warm']['parquet']):.2f}",
         "", f"{r['n'] / med(r['warm']['parquet']):.3g} traj/s"),
        ("score_file SAUCE from the pack, warm, in one process", f"{med(r['warm']['pack']):.2f}",
         "", f"{r['n'] / med(r['warm']['pack']):.3g} traj/s; "
             f"{med(r['warm']['parquet']) / med(r['warm']['pack']):.2f}x"),
        ("read the pack's SAUCE columns (floor)", f"{r['read_floor_s']:.3f}", "",
         f"warm score from the pack = {med(r['warm']['pack']) / r['read_floor_s']:.1f}x the floor"),
        ("eval 8 estimators from Parquet", f"{ep['wall_s']:.2f}",
         f"{ep.get('peak_rss', 0) / GIB:.2f}", ""),
        ("eval 8 estimators from the pack", f"{ek['wall_s']:.2f}",
         f"{ek.get('peak_rss', 0) / GIB:.2f}", f"{ep['wall_s'] / ek['wall_s']:.2f}x"),
    ]
    loads = [x["load_before"] for runs in (sp, sk, [ep, ek, r["pack"]]) for x in runs]
    loads += r["warm"]["loads"]
    head = (f"N = {r['n']:,} (`signals` corpus), {r['date']}, load average "
            f"{min(loads):.1f}-{max(loads):.1f} during the runs\n\n")
    return head + bc.markdown_table(("run", "seconds", "peak RSS (GiB)", "note"), rows)


if __name__ == "__main__":
    main()
