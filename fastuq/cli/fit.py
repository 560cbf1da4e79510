"""``fastuq fit``: fit SAUCE's parameters per protocol and report held-out metrics; with
``--stack``, fit the cross-fitted estimator stack (:mod:`fastuq.evaluation.stack`) instead.

Exit status: 0 on success, 2 for a usage or input error, 1 for a run that failed (a file
that could not be written)."""

from __future__ import annotations

import argparse
import sys

from fastuq.cli import options as cs


def add_parser(sub) -> None:
    """Register ``fit`` on the subparsers ``sub``."""
    sp = cs.subcommand(
        sub, "fit",
        help="fit SAUCE's parameters, or (--stack) the estimator stack, to a labelled corpus "
             "(per protocol)",
        description=(
            "Fit SAUCE's lam, q, sigma2_0 and mu_0 to the correctness labels of CORPUS by "
            "gradient descent through the filter, per protocol, and report held-out exact "
            "AUROC/AUARC of the fitted parameters against the protocol presets. Writes the "
            "parameters (and the report) as JSON with -o. With --stack: score CORPUS with "
            "--method's estimators (default: every one the corpus supports), fit an L2 "
            "logistic regression on every score column they write (e.g. eigval_laplacian and "
            "its round mean eigval_laplacian_mean), standardised, per protocol, cross-fitted on "
            "--folds stratified folds, and report its held-out AUROC/AUARC/Brier beside each "
            "estimator's, with paired bootstrap intervals of stack minus the best single "
            "estimator; -o writes the stack file for 'fastuq score --method stack --params'."
        ),
        epilog="examples: fastuq fit corpus.parquet --folds 5 -o params.json; "
               "fastuq fit --stack corpus.parquet -o stack.json",
    )
    cs.add_corpus(sp, "fit")
    sp.add_argument("-o", "--output", help="write the fitted parameters as JSON")
    sp.add_argument("--objective", choices=("platt_logloss", "soft_auroc"),
                    help="training objective (default platt_logloss; not with --stack)")
    sp.add_argument("--steps", type=int, help="Adam steps (default 300; not with --stack)")
    sp.add_argument("--lr", type=float,
                    help="peak learning rate (default 0.05; not with --stack)")
    sp.add_argument("--folds", type=int,
                    help="k-fold cross-validated held-out report (then a fit on all data); "
                         "with --stack: the cross-fitting folds (default 5)")
    sp.add_argument("--holdout", type=float,
                    help="held-out fraction without --folds (default 0.2; 0: none; not with "
                         "--stack)")
    sp.add_argument("--seed", type=int, default=0,
                    help="seeds the folds, and the rest of the fit (default 0)")
    sp.add_argument("--stack", action="store_true",
                    help="fit the cross-fitted estimator stack instead of SAUCE's parameters")
    sp.add_argument("--method",
                    help="with --stack: the estimators to stack, comma-separated, or 'all' "
                         "(default: every estimator the corpus supports)")
    sp.add_argument("--C", type=float, dest="C",
                    help="with --stack: inverse L2 penalty on the standardised coefficients "
                         "(default 1, scikit-learn's)")
    sp.add_argument("--bootstrap", type=int, metavar="B",
                    help="with --stack: paired bootstrap replicates of the intervals (default "
                         "1000; 0: none)")
    cs.add_protocol(sp)
    cs.add_source(sp)
    cs.add_dtype(sp, None, "precision (default float32; with --stack, the scoring's: "
                           "float64)")
    cs.add_device(sp)
    cs.add_sauce_params(sp, " when scoring the stack's inputs (--stack)")
    cs.add_param(sp)
    cs.add_options(sp, params=True)


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
    cs.check_source(args, source)
    if args.stack:
        return _run_stack(prog, args, source)
    problem = _stack_only(args)
    if problem is not None:
        return cs.fail(prog, problem)
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
            result = fit_sauce(data, objective=args.objective or "platt_logloss",
                               steps=300 if args.steps is None else args.steps,
                               lr=0.05 if args.lr is None else args.lr, folds=args.folds,
                               holdout=0.2 if args.holdout is None else args.holdout,
                               seed=args.seed, dtype=args.dtype or "float32", progress=bar)
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


#: Options of ``--stack`` only, and of SAUCE's fit only (``fastuq fit`` without ``--stack``).
_STACK_ONLY = ("method", "C", "bootstrap", "params", "param", *cs.SAUCE_NAMES)
_SAUCE_ONLY = ("objective", "steps", "lr", "holdout")


def _given(args: argparse.Namespace, name: str) -> bool:
    value = getattr(args, name, None)
    return value not in (None, [])


def _stack_only(args: argparse.Namespace) -> str | None:
    """An option given without ``--stack`` that only ``--stack`` uses, as a message."""
    for name in _STACK_ONLY:
        if _given(args, name):
            opt = "--param" if name == "param" else cs.flag(name)
            return f"{opt} applies with --stack (fitting the estimator stack)"
    return None


def _plain_params(params):
    """The estimator parameters given, as JSON keeps them (a number or a string, or
    ``{protocol: number}``), for the stack file."""
    out = {}
    for name, value in params.items():
        if isinstance(value, dict):
            out[name] = {str(k): float(v) for k, v in value.items()}
        else:
            out[name] = value if isinstance(value, str) else float(value)
    return out


def _run_stack(prog: str, args: argparse.Namespace, source) -> int:
    """``fastuq fit --stack CORPUS -o stack.json``: score, fit, report, write."""

    from fastuq.io.writers import cli_check_outputs

    for name in _SAUCE_ONLY:
        if _given(args, name):
            return cs.fail(prog, f"{cs.flag(name)} applies to SAUCE's fit, not with --stack")
    folds = 5 if args.folds is None else args.folds
    rc = cli_check_outputs(prog, [source, args.params],
                           [("-o", args.output, "json"),
                            ("--skipped", cs.skip_output(args, source, args.output), "jsonl")])
    if rc is not None:
        return rc
    try:
        from fastuq.decisions.calibration import NO_PROTOCOL, scoring_record
        from fastuq.engine.host import use_cpu_devices
        from fastuq.engine.methods import method_list
        from fastuq.engine.registry import check_params, score_outputs
        from fastuq.evaluation.stack import Stack

        stack = Stack(folds=folds, seed=args.seed, C=1.0 if args.C is None else args.C,
                      bootstrap=1000 if args.bootstrap is None else args.bootstrap)
        cs.check_skip_args(args)
        methods = args.method or "all"
        names = method_list(methods)
        if "stack" in names:
            raise ValueError("--method: the stack's inputs are estimators; 'stack' is the "
                             "combination itself")
        use_cpu_devices(None, strict=False)
        params, per_protocol = cs.sauce_overrides(args)
        check_params(params, None if names == ["all"] else names)
        with cs.Progress(args.progress) as bar:
            table, skipped = cs.score_corpus(
                source, methods, protocol=args.protocol, params=params,
                dtype=args.dtype or "float64", chunk_rows=1 << 18,
                observation_noise=args.observation_noise, on_error=args.on_error,
                progress=bar, check=args.check, keep=("trajectory_id", "protocol", "correct"))
        listing = cs.save_skipped(args, skipped, source, args.output)
        cs.report_skipped(prog, skipped, listing)
        labels = cs.corpus_labels(table, source, "the stack is fitted to them")
        # every score column the estimators declare (eigval_laplacian and its round mean
        # eigval_laplacian_mean), not only the columns named as an estimator
        columns = score_outputs(table.column_names)
        if not columns:
            raise ValueError(f"{source}: no score column to stack")
        if args.protocol is not None:
            protocols = args.protocol
        elif "protocol" in table.column_names:
            protocols = table.column("protocol")
        else:
            protocols = None
        stack.fit(table.select(columns), labels, protocols,
                  ids=table.column("trajectory_id"))
        stack.params = _plain_params(params)
        stack.scoring = scoring_record(stack.estimators, stack.protocols, params,
                                       observation_noise=args.observation_noise)
        if per_protocol is not None:
            cs.report_params(prog, per_protocol,
                             [p for p in stack.protocols if p != NO_PROTOCOL], args.params)
    except (ValueError, TypeError, FileNotFoundError, ImportError) as exc:
        return cs.fail(prog, exc)
    except OSError as exc:  # writing the skipped list
        return cs.fail(prog, exc, 1)
    print(stack.summary())
    if args.output:
        try:
            stack.save(args.output)
        except OSError as exc:
            return cs.fail(prog, f"cannot write {args.output}: {exc}", 1)
        print(f"wrote {args.output}")
    return 0
