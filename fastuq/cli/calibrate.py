"""``fastuq calibrate``: fit maps from uncertainty scores to probabilities of being correct
(Platt or isotonic, per estimator and protocol), report their held-out Brier score, log-loss
and ECE, and save them for ``fastuq score --calibration``
(:class:`fastuq.decisions.calibration.Calibrator`).

Exit status: 0 on success, 2 for a usage or input error (a bad option, a corpus without
labels, a protocol with too few trajectories of a class, an output refused before the run),
1 for a run that failed (the file could not be written).
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from fastuq.cli import options as cs
from fastuq.cli import positive_int


def add_parser(sub) -> None:
    """Register ``calibrate`` on the subparsers ``sub``."""
    p = cs.subcommand(
        sub, "calibrate",
        help="fit Platt or isotonic maps from scores to probabilities of being correct",
        description=(
            "Score CORPUS with --method's estimators, fit one map from each score column they "
            "write (eigval_laplacian_mean beside eigval_laplacian) to the probability of "
            "being correct per protocol (--calibrator platt: logistic on the standardised "
            "score, as Brier-Platt; isotonic: pool adjacent violators), "
            "report the held-out Brier score, log-loss and ECE (15 equal-width bins) of "
            "--folds stratified folds, and write the maps, the estimators' parameters and the "
            "metrics to -o CALIB.json for 'fastuq score --calibration'. Exit status: 0 ok, 2 "
            "a usage or input error, 1 a failed write."
        ),
    )
    p.add_argument("corpus", metavar="CORPUS",
                   help="labelled corpus (Parquet, JSONL or JSONL.gz, or a folder of them)")
    p.add_argument("-o", "--output", required=True, metavar="CALIB.json",
                   help="the calibration file to write (JSON, atomically)")
    p.add_argument("--method", default="sauce",
                   help="estimators, comma-separated, or 'all' (default: sauce)")
    p.add_argument("--calibrator", choices=("platt", "isotonic"), default="platt",
                   help="the map: platt (default; logistic on the standardised score, C = 1) "
                        "or isotonic (non-increasing step function, interpolated linearly)")
    p.add_argument("--folds", type=positive_int, default=5, metavar="K",
                   help="stratified folds of the held-out metrics (default 5, at least 2)")
    p.add_argument("--seed", type=int, default=0, help="the folds' seed (default 0)")
    p.add_argument("--json", action="store_true", dest="json_out",
                   help="print the result (file, method, estimators, protocols, held-out "
                        "metrics) as JSON on stdout instead of the table")
    cs.add_protocol(p, " when scoring")
    cs.add_source(p)
    cs.add_dtype(p, "float64", "kernel precision when scoring (default float64)")
    cs.add_backend(p, "jax", "kernel backend when scoring (default jax)")
    cs.add_sauce_params(p, " when scoring")
    cs.add_param(p)
    p.add_argument("--chunk-rows", type=positive_int, default=1 << 18,
                   help="records per chunk when reading (default 262144)")
    cs.add_options(p, params=True)


def _print_table(cal, out) -> None:
    """One line per estimator and protocol (and the pooled ``all``): n, accuracy and the
    held-out metrics."""
    print(f"{'estimator':<20} {'protocol':<16} {'n':>9} {'accuracy':>9} {'brier':>8} "
          f"{'log-loss':>9} {'ece':>8}", file=out)
    for est in cal.estimators:
        groups = [*cal.protocols, "all"] if len(cal.protocols) > 1 else cal.protocols
        for group in groups:
            m = cal.metrics_[est][group]
            print(f"{est:<20} {group:<16} {m['n']:>9,} {m['accuracy']:>9.4f} "
                  f"{m['brier']:>8.4f} {m['log_loss']:>9.4f} {m['ece']:>8.4f}", file=out)


def run(args: argparse.Namespace) -> int:
    """Run ``fastuq calibrate``; returns the exit status (0 ok, 2 error, 1 failed write)."""
    from fastuq.io.writers import cli_check_outputs

    prog = "fastuq calibrate"
    source = Path(args.corpus)
    cs.check_source(args, source)
    if args.folds < 2:
        return cs.fail(prog, f"--folds must be at least 2, got {args.folds}")
    rc = cli_check_outputs(prog, [source, args.params],
                           [("-o", args.output, "json"),
                            ("--skipped", cs.skip_output(args, source, args.output), "jsonl")])
    if rc is not None:
        return rc
    try:
        from fastuq.decisions.calibration import NO_PROTOCOL, Calibrator, scoring_record
        from fastuq.engine.methods import method_list

        cs.check_skip_args(args)
        method_list(args.method)  # an unknown name: a usage error before reading
        if args.backend == "jax":
            from fastuq.engine.host import use_cpu_devices

            use_cpu_devices(None, strict=False)
        params, per_protocol = cs.sauce_overrides(args)
        from fastuq.engine.registry import check_params, score_outputs

        names = method_list(args.method)
        check_params(params, None if names == ["all"] else names)
        with cs.Progress(args.progress) as bar:
            table, skipped = cs.score_corpus(
                source, args.method, protocol=args.protocol, params=params, dtype=args.dtype,
                backend=args.backend, chunk_rows=args.chunk_rows,
                observation_noise=args.observation_noise, on_error=args.on_error,
                progress=bar, check=args.check,
                keep=("trajectory_id", "protocol", "correct"))
        listing = cs.save_skipped(args, skipped, source, args.output)
        cs.report_skipped(prog, skipped, listing)
        labels = cs.corpus_labels(table, source, "calibration needs them")
        # every score column the estimators write (eigval_laplacian_mean beside
        # eigval_laplacian), each calibrated on its own
        estimators = score_outputs(table.column_names)
        if args.protocol is not None:
            protocols = args.protocol
        elif "protocol" in table.column_names:
            protocols = table.column("protocol")
        else:
            protocols = None
        cal = Calibrator(args.calibrator, n_folds=args.folds, seed=args.seed)
        cal.fit(table.select(estimators), labels, protocols, ids=table.column("trajectory_id"))
        cal.scoring = scoring_record(
            cal.estimators, cal.protocols, params, observation_noise=args.observation_noise)
        if per_protocol is not None:
            cs.report_params(prog, per_protocol,
                             [p for p in cal.protocols if p != NO_PROTOCOL], args.params)
    except (ValueError, TypeError, FileNotFoundError, ImportError) as exc:
        return cs.fail(prog, exc)
    except OSError as exc:  # writing the skipped list
        return cs.fail(prog, exc, 1)
    try:
        cal.save(args.output)
    except OSError as exc:
        return cs.fail(prog, f"cannot write {args.output}: {exc}", 1)
    if args.json_out:
        doc = {"output": str(Path(args.output).resolve()), "corpus": str(source.resolve()),
               "method": cal.method, "n_folds": cal.n_folds, "seed": cal.seed,
               "ece_bins": cal.n_bins, "estimators": cal.estimators,
               "protocols": cal.protocols, "metrics": cal.metrics_,
               "skipped": len(skipped) if listing is not None else None}
        print(json.dumps(doc, indent=2, allow_nan=False))
    else:
        print(f"{source.name}: {len(labels):,} trajectories; {cal.method} maps per estimator "
              f"and protocol; held-out metrics of {cal.n_folds} stratified folds (seed "
              f"{cal.seed}), ECE in {cal.n_bins} bins; lower is better")
        _print_table(cal, sys.stdout)
    print(f"wrote {args.output}", file=sys.stderr)
    return 0
