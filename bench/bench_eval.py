"""Time ``fastuq eval --by protocol`` end to end on a large simulated corpus (the GPU and
throughput work's eval target: 8 estimators on 1e7 trajectories in <= 30 s and <= 2 GiB on 2 cores).

Each run is the command itself in a subprocess under ``/usr/bin/time -v``: wall seconds,
user and system CPU seconds, peak RSS; the 1-minute load average is recorded before and
after. With ``--baseline DIR`` (an older checkout, e.g. ``git worktree add /tmp/base
bf74187``) the same command also runs with ``PYTHONPATH=DIR``, alternating with the current
code run by run, and the two ``--json`` outputs are compared metric by metric (max abs
difference). The corpus is ``bench_pipeline``'s cached ``signals`` corpus (mixed debate /
DyLAN protocols, agreement, entropy, seq_logprob, n_tokens; ``fastuq.synth``, seed 0).

    python bench/bench_eval.py --quick                       # N = 1e5, 1 run
    python bench/bench_eval.py --n 1e7 --baseline /tmp/base  # the issue's measurement
    python bench/bench_eval.py --n 1e6 --metrics-stage 10 --baseline /work/main
                                   # eval's metrics stage on 1e7 rows in memory (prints only)
    python bench/bench_eval.py --n 1e6 --pack --baseline /work/main --repeats 2
                                   # from a pack (``fastuq pack`` of the corpus, made once
                                   # beside it; about 5.5x the Parquet's size on disk)

Results: ``bench/results/eval.json`` (``eval_quick.json.tmp`` with ``--quick``); the
markdown table is printed (bench/README.md's "Evaluation at 1e7 trajectories" quotes it by hand).
"""

from __future__ import annotations

import argparse
import json
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
import bench_pipeline as bp  # noqa: E402

METHODS = ("sauce,umas,umas_fix,msp_final,perplexity_final,last_agreement,mean_agreement,"
           "weighted_agreement")
GIB = 2**30


def run_eval(corpus: Path, out_json: Path, methods: str, pythonpath: str | None) -> dict:
    cmd = [sys.executable, "-m", "fastuq", "eval", str(corpus), "--method", methods,
           "--by", "protocol", "--json", str(out_json), "--no-progress"]
    full = ["/usr/bin/time", "-v", *cmd] if Path("/usr/bin/time").exists() else cmd
    env = dict(os.environ)
    if pythonpath:
        env["PYTHONPATH"] = pythonpath
    load0 = os.getloadavg()[0]
    start = time.perf_counter()
    # run outside the repository so that PYTHONPATH decides which fastuq is imported
    proc = subprocess.run(full, capture_output=True, text=True, cwd=out_json.parent, env=env)
    res: dict[str, Any] = {"wall_s": time.perf_counter() - start, "load_before": load0,
                           "load_after": os.getloadavg()[0], "returncode": proc.returncode}
    for key, pat, scale in (("peak_rss", r"Maximum resident set size \(kbytes\): (\d+)", 1024),
                            ("user_s", r"User time \(seconds\): ([\d.]+)", 1),
                            ("sys_s", r"System time \(seconds\): ([\d.]+)", 1)):
        m = re.search(pat, proc.stderr)
        if m:
            res[key] = float(m.group(1)) * scale
    if proc.returncode:
        res["error"] = proc.stderr[-3000:]
    return res


_STAGE = """
import json, resource, sys, time
import numpy as np
import fastuq.metrics as fm
d = np.load(sys.argv[1]); reps = int(sys.argv[2])
x, y, g = d["x"], d["y"].astype(bool), d["g"]
rng = np.random.default_rng(0)
X = np.asfortranarray(np.tile(x, (reps, 1)))  # column-major, as eval builds its matrix
for j in range(X.shape[1]):
    if len(np.unique(x[:1000, j])) > 100:  # continuous: jitter so the copies do not tie
        X[:, j] *= 1 + 1e-9 * rng.standard_normal(X.shape[0])
Y, G = np.tile(y, reps), np.tile(g, reps)
w, c = time.perf_counter(), time.process_time()
pooled, groups = fm.evaluate_groups(Y, X, G)
res = {"n": len(Y), "wall_s": time.perf_counter() - w, "cpu_s": time.process_time() - c,
       "peak_rss": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024,
       "metrics": {"all": {k: v.tolist() for k, v in pooled.items() if k != "name"},
                   **{n: {k: v.tolist() for k, v in t.items() if k != "name"}
                      for n, t in groups.items()}}}
json.dump(res, open(sys.argv[3], "w"))
"""


def metrics_stage(corpus: Path, methods: str, reps: int, variants, tmp: Path) -> dict:
    """``evaluate_groups`` (eval's metrics stage, ``--by protocol``) timed in one process per
    variant on ``reps`` copies of the corpus's real scores, built in memory (no pack on
    disk): the corpus is scored once, its 8 score columns tiled ``reps`` times (continuous
    ones jittered by 1e-9 relative). Returns per variant wall / CPU seconds, peak RSS and
    the max abs difference of every metric from the first variant."""
    import numpy as np
    import pyarrow.parquet as pq

    scores = tmp / "scores.parquet"
    subprocess.run([sys.executable, "-m", "fastuq", "score", str(corpus), "--method", methods,
                    "-o", str(scores), "--no-progress"], check=True, capture_output=True)
    sc = pq.read_table(scores)
    src = pq.read_table(corpus, columns=["trajectory_id", "correct", "protocol"])
    if not src["trajectory_id"].equals(sc["trajectory_id"]):
        raise SystemExit("scores and corpus rows differ in order")
    data = tmp / "stage.npz"
    np.savez(data, x=np.column_stack([sc[c].to_numpy() for c in methods.split(",")]),
             y=src["correct"].to_numpy(zero_copy_only=False),
             g=np.asarray(src["protocol"].to_numpy(zero_copy_only=False)).astype(str))
    out: dict[str, Any] = {}
    first = None
    for name, path in variants:
        env = dict(os.environ)
        if path:
            env["PYTHONPATH"] = path
        load0 = os.getloadavg()[0]
        res_path = tmp / f"stage_{name}.json"
        subprocess.run([sys.executable, "-c", _STAGE, str(data), str(reps), str(res_path)],
                       check=True, env=env, cwd=tmp)
        res = json.loads(res_path.read_text())
        res["load_before"], res["load_after"] = load0, os.getloadavg()[0]
        if first is None:
            first = res["metrics"]
        worst: dict[str, float] = {}
        for group, table in res.pop("metrics").items():
            for metric, values in table.items():
                diff = max((abs(a - b) for a, b in zip(values, first[group][metric],
                                                       strict=True)), default=0.0)
                worst[metric] = max(worst.get(metric, 0.0), diff)
        res["max_abs_diff_vs_first"] = worst
        bp._log(f"  metrics stage, {name}: {res['wall_s']:.1f} s wall, {res['cpu_s']:.1f} s "
                f"CPU, {res['peak_rss'] / GIB:.2f} GiB, load {load0:.1f} -> "
                f"{res['load_after']:.1f}")
        out[name] = res
    return out


def make_pack(corpus: Path) -> Path:
    """``fastuq pack`` of ``corpus`` beside it (``NAME.fqpack``), made once."""
    pack = corpus.with_suffix(".fqpack")
    if not pack.exists():
        bp._log(f"  packing {corpus} -> {pack}")
        subprocess.run([sys.executable, "-m", "fastuq", "pack", str(corpus), "-o", str(pack)],
                       check=True)
    return pack


def _numbers(doc: dict) -> dict[tuple, float]:
    out = {}

    def walk(x, path):
        if isinstance(x, dict):
            for k, v in x.items():
                walk(v, (*path, k))
        elif isinstance(x, float):
            out[path] = x

    walk(doc.get("estimators"), ("all",))
    walk(doc.get("by_protocol"), ("by",))
    return out


def compare(a: Path, b: Path) -> dict[str, float]:
    """Max abs difference per metric between two ``fastuq eval --json`` outputs."""
    na, nb = _numbers(json.loads(a.read_text())), _numbers(json.loads(b.read_text()))
    if set(na) != set(nb):
        raise SystemExit(f"the two runs report different numbers: {set(na) ^ set(nb)}")
    worst: dict[str, float] = {}
    for key, value in na.items():
        worst[key[-1]] = max(worst.get(key[-1], 0.0), abs(value - nb[key]))
    return worst


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--quick", action="store_true", help="N = 1e5, one run")
    p.add_argument("--n", type=lambda s: int(float(s)), default=None)
    p.add_argument("--repeats", type=int, default=1)
    p.add_argument("--methods", default=METHODS)
    p.add_argument("--baseline", type=Path, default=None,
                   help="an older checkout to compare with (its directory goes on PYTHONPATH)")
    p.add_argument("--metrics-stage", type=int, default=0, metavar="REPS",
                   help="only time eval's metrics stage in memory on REPS copies of the "
                        "corpus's scores (e.g. --n 1e6 --metrics-stage 10 for 1e7 rows; "
                        "no pack on disk)")
    p.add_argument("--pack", action="store_true",
                   help="evaluate from a pack of the corpus (made once, beside it)")
    p.add_argument("--cache-dir", type=Path, default=bp.DEFAULT_CACHE)
    p.add_argument("--out", type=Path, default=None)
    args = p.parse_args(argv)
    n = args.n or (100_000 if args.quick else 10_000_000)
    out = args.out or Path(__file__).resolve().parent / "results" / (
        "eval_quick.json.tmp" if args.quick else "eval.json")
    corpus = bp.corpus(args.cache_dir, "signals", n)
    if args.metrics_stage:
        variants = [("current", None)]
        if args.baseline is not None:
            variants.append(("baseline", str(args.baseline.resolve())))
        with tempfile.TemporaryDirectory() as tmp:
            stage = metrics_stage(corpus, args.methods, args.metrics_stage, variants, Path(tmp))
        print(json.dumps(stage, indent=1))
        return
    if args.pack:
        corpus = make_pack(corpus)
    variants = [("current", None)]
    if args.baseline is not None:
        variants.append(("baseline", str(args.baseline.resolve())))
    runs: dict[str, list[dict]] = {name: [] for name, _ in variants}
    with tempfile.TemporaryDirectory() as tmp:
        for r in range(args.repeats):
            for name, path in variants if r % 2 == 0 else variants[::-1]:
                res = run_eval(corpus, Path(tmp) / f"{name}.json", args.methods, path)
                bp._log(f"  {name} run {r}: {res.get('wall_s', 0):.1f} s, "
                        f"{res.get('peak_rss', 0) / GIB:.2f} GiB, load {res['load_before']:.1f}"
                        f" -> {res['load_after']:.1f}")
                if res["returncode"]:
                    raise SystemExit(f"{name} failed:\n{res.get('error', '')}")
                runs[name].append(res)
        diff = compare(Path(tmp) / "current.json", Path(tmp) / "baseline.json") \
            if args.baseline is not None else None
    result = {"machine": bc.machine_info(), "n": n, "methods": args.methods.split(","),
              "corpus": str(corpus), "runs": runs, "max_abs_diff_vs_baseline": diff,
              "date": time.strftime("%Y-%m-%dT%H:%M:%S%z")}
    bc.write_json(out, result)
    rows = []
    for name, rs in runs.items():
        for r in rs:
            rows.append([name, f"{r['wall_s']:.1f}", f"{r.get('user_s', 0):.1f}",
                         f"{r.get('sys_s', 0):.1f}", f"{r.get('peak_rss', 0) / GIB:.2f}",
                         f"{r['load_before']:.1f} / {r['load_after']:.1f}"])
    print(bc.markdown_table(["code", "wall s", "user s", "sys s", "peak RSS GiB",
                             "load before / after"], rows))
    if diff is not None:
        print("max abs difference vs baseline: " +
              ", ".join(f"{k} {v:.1e}" for k, v in sorted(diff.items())))
    print(f"wrote {out}")


if __name__ == "__main__":
    main()
