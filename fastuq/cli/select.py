"""``fastuq select``: best-of-K selection accuracy per estimator."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path


def add_parser(sub) -> None:
    """Register ``select`` on the subparsers ``sub``."""
    p = sub.add_parser(
        "select",
        help="best-of-K: keep the most certain trajectory per question, report accuracy",
        description=(
            "For corpora with several trajectories per question_id, keep the trajectory with "
            "the lowest uncertainty of each question (ties: the first in input order) and "
            "report the accuracy of the selection per estimator, beside the accuracy of all "
            "trajectories, of a uniform random pick, and of an oracle."
        ),
    )
    p.add_argument("input", help="labelled corpus (needs question_id and correct)")
    p.add_argument("--method", default="all", help="estimators, comma-separated, or all")
    p.add_argument("--protocol", help="preset for every record (default: each record's field)")
    p.add_argument("--json", metavar="OUT", help="also write the numbers as JSON")
    from fastuq.cli.options import add_options

    add_options(p)


def run(args: argparse.Namespace) -> int:
    """Run ``fastuq select``; returns the exit status."""
    from fastuq.cli import options as cs
    from fastuq.io.writers import cli_check_outputs
    from fastuq.selection import best_of_k

    source = Path(args.input)
    rc = cli_check_outputs("fastuq select", [source], [("--json", args.json, "json")])
    if rc is not None:
        return rc
    skipped_to = None
    bar = cs.Progress(args.progress)
    try:
        cs.check_skip_args(args)
        try:
            table, skipped = cs.score_corpus(source, args.method, protocol=args.protocol,
                                             observation_noise=args.observation_noise,
                                             on_error=args.on_error, progress=bar,
                                             check=args.check)
        finally:
            bar.close()
        if args.on_error == "skip":
            skipped_to = cs.write_skipped(skipped, cs.skipped_path(args, source))
        for need in ("question_id", "correct"):
            if need not in table.column_names:
                raise ValueError(f"{args.input}: the corpus has no {need} column")
        from fastuq.engine.registry import ESTIMATORS

        names = [c for c in table.column_names if c in ESTIMATORS]
        result = best_of_k(table["question_id"], {n: table[n].to_numpy() for n in names},
                           table["correct"].to_numpy())
        if skipped_to is not None:
            result["skipped"] = len(skipped)
            result["skipped_list"] = str(skipped_to)
    except (ValueError, FileNotFoundError) as exc:
        print(f"fastuq select: error: {exc}", file=sys.stderr)
        return 1
    if skipped_to is not None:
        cs.report_skipped("fastuq select", skipped, skipped_to)
    print(f"{result['n_questions']:,} questions, {result['n_trajectories']:,} trajectories "
          f"({result['k_mean']:.2f} per question)")
    rows = [("all trajectories", result["accuracy"]), ("random pick", result["random"]),
            ("oracle", result["oracle"])] + sorted(result["selected"].items(),
                                                    key=lambda kv: -kv[1])
    width = max(len(r[0]) for r in rows)
    print(f"{'selection':<{width}}  accuracy")
    for name, acc in rows:
        print(f"{name:<{width}}  {100 * acc:8.2f}")
    if args.json:
        from fastuq.io.writers import atomic_write_text

        atomic_write_text(args.json, json.dumps(result, indent=2) + "\n")
    return 0
