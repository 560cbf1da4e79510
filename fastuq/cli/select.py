"""``fastuq select``: best-of-K selection accuracy per estimator."""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from fastuq.cli import options as cs


def add_parser(sub) -> None:
    """Register ``select`` on the subparsers ``sub``."""
    p = cs.subcommand(
        sub, "select",
        help="best-of-K: keep the most certain trajectory per question, report accuracy",
        description=(
            "For corpora with several trajectories per question_id, keep the trajectory with "
            "the lowest uncertainty of each question (ties: the first in input order) and "
            "report the accuracy of the selection per score column (eigval_laplacian_mean "
            "too), beside the accuracy of all trajectories, of a uniform random pick, and of "
            "an oracle."
        ),
    )
    p.add_argument("input", help="labelled corpus (needs question_id and correct)")
    p.add_argument("--method", default="all", help="estimators, comma-separated, or all")
    cs.add_protocol(p)
    cs.add_source(p)
    p.add_argument("--json", metavar="OUT", help="also write the numbers as JSON")
    cs.add_options(p, output=False)


def run(args: argparse.Namespace) -> int:
    """Run ``fastuq select``; returns the exit status."""
    from fastuq.io.writers import cli_check_outputs
    from fastuq.selection import best_of_k

    prog = "fastuq select"
    source = Path(args.input)
    cs.check_source(args, source)
    rc = cli_check_outputs(prog, [source], [("--json", args.json, "json"),
                                            ("--skipped", cs.skip_output(args, source),
                                             "jsonl")])
    if rc is not None:
        return rc
    try:
        cs.check_skip_args(args)
        table, skipped, skipped_to = cs.score_from_args(args, source, args.method,
                                                        protocol=args.protocol)
        for need in ("question_id", "correct"):
            if need not in table.column_names:
                raise ValueError(f"{args.input}: the corpus has no {need} column")
        from fastuq.engine.registry import score_outputs

        # every score column (eigval_laplacian_mean too), not only those named as estimators
        names = score_outputs(table.column_names)
        result = best_of_k(table["question_id"], {n: table[n].to_numpy() for n in names},
                           table["correct"].to_numpy())
        if skipped_to is not None:
            result["skipped"] = len(skipped)
            result["skipped_list"] = str(skipped_to)
    except (ValueError, OSError) as exc:  # OSError: also writing the skipped list
        return cs.fail(prog, exc)
    cs.report_skipped(prog, skipped, skipped_to)
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

        try:
            atomic_write_text(args.json, json.dumps(result, indent=2) + "\n")
        except OSError as exc:
            return cs.fail(prog, f"cannot write {args.json}: {exc}", 1)
    return 0
