"""``fastuq bench``: every chosen registered estimator timed on this machine, on simulated
inputs of each shape, against the memory-bandwidth floor, its NumPy twin and its
per-trajectory reference (:mod:`fastuq.evaluation.bench`).

Exit status: 0 every estimator ran and its reference agreed with its kernel; 2 a usage
error (an unknown estimator, a bad count, an unwritable --json path); 1 an estimator that
could not run, or whose kernel and reference disagree (the table is printed all the same).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from fastuq.cli import options as cs
from fastuq.cli import positive_int


def add_parser(sub) -> None:
    """Register ``bench`` on the subparsers ``sub``."""
    p = cs.subcommand(
        sub, "bench",
        help="time every registered estimator on this machine against the memory floor",
        description=(
            "Time each chosen registered estimator (user-registered ones too) on simulated "
            "debates of every shape N x rounds x agents: the JAX kernel's compile time apart, "
            "the median of repeated calls, trajectories/s and ns per trajectory-round; the "
            "memory-bandwidth floor measured in the same run (bytes the call reads and writes "
            "over the copy rate) and the ratio to it; peak memory; the NumPy twin's time; and "
            "the per-trajectory Python reference on a subsample (its speed-up, and whether it "
            "agrees with the kernel there). Progress on stderr, a table at the end. Exit "
            "status: 0 ok, 2 usage error, 1 an estimator failed or disagreed."),
        epilog="examples: fastuq bench; fastuq bench --method sauce,umas --n 1e5,1e6 "
               "--rounds 3,10 --agents 3,5,16 --json bench.json; fastuq report corpus.parquet "
               "--bench bench.json -o report.html",
    )
    p.add_argument("--method", default="all",
                   help="estimators, comma-separated, or 'all' (default: every registered one)")
    p.add_argument("--n", default=None, metavar="N[,N...]",
                   help="trajectories per run, comma-separated (default 1e6)")
    p.add_argument("--rounds", default=None, metavar="T[,T...]",
                   help="debate rounds, comma-separated (default 3)")
    p.add_argument("--agents", default=None, metavar="A[,A...]",
                   help="agents per round, comma-separated (default 3)")
    cs.add_dtype(p, "float32", "kernel precision (default float32)")
    cs.add_device(p)
    p.add_argument("--repeats", type=positive_int, default=None,
                   help="timed kernel calls after the first (default 5; the twin: up to 3)")
    p.add_argument("--subsample", type=int, default=None, metavar="K",
                   help="trajectories the per-trajectory reference scores (default 200; 0: "
                        "none)")
    p.add_argument("--no-twin", action="store_true", help="do not time the NumPy twins")
    p.add_argument("--json", metavar="OUT.json",
                   help="also write every number, the machine, versions, load and date as JSON")
    p.add_argument("--markdown", action="store_true", help="print a markdown table")
    p.add_argument("--corpus", metavar="FILE",
                   help="instead of simulated inputs: score this corpus serially and time each "
                        "stage (read and decode, check, pack, kernel, write) with its share")


def run(args: argparse.Namespace) -> int:
    """Run ``fastuq bench``; returns the exit status."""
    prog = "fastuq bench"
    simulated = {"--n": args.n, "--rounds": args.rounds, "--agents": args.agents,
                 "--repeats": args.repeats, "--subsample": args.subsample,
                 "--no-twin": args.no_twin or None}
    if args.corpus:
        given = [k for k, v in simulated.items() if v is not None]
        if given:
            return cs.fail(prog, f"{', '.join(given)} would be ignored: --corpus times the "
                                 "corpus as it is (its own trajectories, rounds and agents)")
    args.n = args.n or "1e6"
    args.rounds = args.rounds or "3"
    args.agents = args.agents or "3"
    args.repeats = args.repeats or 5
    args.subsample = 200 if args.subsample is None else args.subsample
    try:
        from fastuq.evaluation.bench import parse_counts

        sizes = parse_counts(args.n, "--n")
        rounds = parse_counts(args.rounds, "--rounds")
        agents = parse_counts(args.agents, "--agents")
        if args.subsample < 0:
            raise ValueError(f"--subsample must be >= 0, got {args.subsample}")
        if args.json:
            from fastuq.io.writers import check_outputs

            check_outputs([], [("--json", Path(args.json), "json")])
        if args.corpus and not Path(args.corpus).exists():
            raise FileNotFoundError(f"no such corpus: {args.corpus}")
        from fastuq.engine.registry import get_estimator

        if args.method != "all":
            for name in args.method.split(","):
                get_estimator(name.strip())
    except (ValueError, FileNotFoundError) as exc:
        return cs.fail(prog, exc)
    if args.corpus:
        return _corpus(prog, args)
    from fastuq.engine.host import use_cpu_devices
    from fastuq.evaluation.bench import bench_table, run_bench, stderr_progress

    use_cpu_devices(None, strict=False)
    data = run_bench(args.method, n=sizes, rounds=rounds, agents=agents, dtype=args.dtype,
                     repeats=args.repeats, subsample=args.subsample, twin=not args.no_twin,
                     progress=stderr_progress)
    print(bench_table(data, markdown=args.markdown))
    if args.json:
        from fastuq.io.writers import atomic_write_json

        try:
            atomic_write_json(args.json, data)
        except OSError as exc:
            return cs.fail(prog, exc, 1)
        print(f"{prog}: wrote {args.json}", file=sys.stderr)
    failed = [r["method"] for r in data["results"] if "error" in r]
    wrong = [r["method"] for r in data["results"] if r.get("reference_agrees") is False]
    if failed or wrong:
        problems = []
        if failed:
            problems.append(f"could not run {', '.join(sorted(set(failed)))}")
        if wrong:
            mismatch = next(r["reference_mismatch"] for r in data["results"]
                            if r.get("reference_agrees") is False)
            problems.append(f"kernel and reference disagree for {', '.join(sorted(set(wrong)))}"
                            f" (first: {mismatch})")
        return cs.fail(prog, "; ".join(problems), 1)
    return 0


def _corpus(prog: str, args: argparse.Namespace) -> int:
    """``--corpus FILE``: the corpus scored serially, stage by stage."""
    from fastuq.engine.host import use_cpu_devices
    from fastuq.evaluation.bench import stderr_progress
    from fastuq.evaluation.bench_corpus import STAGES, corpus_stages, stages_table
    from fastuq.evaluation.timing import machine_info, markdown_table

    use_cpu_devices(None, strict=False)
    try:
        data = corpus_stages(args.corpus, args.method, dtype=args.dtype,
                             progress=stderr_progress)
    except (ValueError, TypeError, FileNotFoundError) as exc:
        return cs.fail(prog, exc)
    if args.markdown:
        print(markdown_table(["stage", "seconds", "share"], [
            [s, f"{data['stages'][s]:.4f}", f"{100 * data['share'][s]:.1f}%"]
            for s in STAGES]))
    else:
        print(stages_table(data))
    if args.json:
        from fastuq.io.writers import atomic_write_json

        try:
            atomic_write_json(args.json, {"kind": "fastuq bench --corpus",
                                          "machine": machine_info(devices=True), **data})
        except OSError as exc:
            return cs.fail(prog, exc, 1)
        print(f"{prog}: wrote {args.json}", file=sys.stderr)
    return 0
