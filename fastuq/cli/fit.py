"""``fastuq fit``: fit SAUCE's parameters per protocol and report held-out metrics."""

from __future__ import annotations

import argparse
import sys

from fastuq.cli import options as cs


def add_parser(sub) -> None:
    """Register ``fit`` on the subparsers ``sub``."""
    sp = cs.subcommand(
        sub, "fit",
        help="fit SAUCE's parameters to a labelled corpus (per protocol)",
        description=(
            "Fit SAUCE's lam, q, sigma2_0 and mu_0 to the correctness labels of CORPUS by "
            "gradient descent through the filter, per protocol, and report held-out exact "
            "AUROC/AUARC of the fitted parameters against the protocol presets. Writes the "
            "parameters (and the report) as JSON with -o."
        ),
        epilog="example: fastuq fit corpus.parquet --folds 5 -o params.json",
    )
    cs.add_corpus(sp, "fit")
    sp.add_argument("-o", "--output", help="write the fitted parameters as JSON")
    sp.add_argument("--objective", choices=("platt_logloss", "soft_auroc"),
                    default="platt_logloss", help="training objective (default platt_logloss)")
    sp.add_argument("--steps", type=int, default=300, help="Adam steps (default 300)")
    sp.add_argument("--lr", type=float, default=0.05, help="peak learning rate (default 0.05)")
    sp.add_argument("--folds", type=int,
                    help="k-fold cross-validated held-out report (then a fit on all data)")
    sp.add_argument("--holdout", type=float, default=0.2,
                    help="held-out fraction without --folds (default 0.2; 0: none)")
    sp.add_argument("--seed", type=int, default=0)
    cs.add_protocol(sp)
    cs.add_dtype(sp, "float32")
    cs.add_device(sp)
    cs.add_options(sp)


def run(args: argparse.Namespace) -> int:
    """Run ``fastuq fit``; returns the exit status."""
    import time
    import warnings

    from fastuq.evaluation.fit import fit_sauce
    from fastuq.io.writers import cli_check_outputs

    prog = "fastuq fit"
    source = cs.corpus_source(prog, args)
    if source is None:
        return 2
    rc = cli_check_outputs(prog, [source, getattr(args, "params", None)],
                           [("-o", args.output, "json"),
                            ("--skipped", cs.skip_output(args, source, args.output), "jsonl")])
    if rc is not None:
        return rc
    start = time.perf_counter()
    skipped: list = []
    skipped_to = None
    try:
        cs.check_skip_args(args)
        data, skipped_to = cs.load_data(prog, args, source, skipped)
        with (warnings.catch_warnings(record=True) as caught,
              cs.Progress(args.progress, unit="fits") as bar):
            warnings.simplefilter("always", RuntimeWarning)
            result = fit_sauce(data, objective=args.objective, steps=args.steps, lr=args.lr,
                               folds=args.folds, holdout=args.holdout, seed=args.seed,
                               dtype=args.dtype, progress=bar)
    except (ValueError, OSError) as exc:  # OSError: also writing the skipped list
        return cs.fail(prog, exc)
    for w in caught:
        print(f"{prog}: warning: {w.message}", file=sys.stderr)
    if skipped_to is not None:
        result.settings["skipped"] = len(skipped)
        result.settings["skipped_list"] = str(skipped_to)
    result.settings["observation_noise"] = args.observation_noise
    print(result.summary())
    print(f"({time.perf_counter() - start:.1f} s)")
    if args.output:
        try:
            result.save(args.output)
        except OSError as exc:
            return cs.fail(prog, f"cannot write {args.output}: {exc}", 1)
        print(f"wrote {args.output}")
    return 0
