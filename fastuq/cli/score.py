"""``fastuq score``: score a corpus file (or the bundled sample), one row per trajectory."""

from __future__ import annotations

import argparse
import sys
import tempfile
from contextlib import closing
from pathlib import Path

from fastuq.cli import fraction, positive_int
from fastuq.cli import options as cs
from fastuq.engine.registry import CONFIDENCES


def add_parser(sub) -> None:
    """Register ``score`` on the subparsers ``sub``."""
    sc = cs.subcommand(
        sub, "score",
        help="score a corpus file (or the bundled sample) and write one row per trajectory",
        description=(
            "Score every trajectory of INPUT (Parquet, JSONL or JSONL.gz) and write "
            "trajectory_id plus one float64 column per estimator to OUT (Parquet, written "
            "atomically). Without INPUT, or with --sample, score the bundled sample corpus "
            "and print a summary."
        ),
    )
    sc.add_argument("input", nargs="?",
                    help="corpus file; omit to score the bundled sample (with --engine ray: "
                         "a file, a folder of corpus files or a glob pattern)")
    sc.add_argument("-o", "--output",
                    help="output Parquet file (required with INPUT; with --engine ray a "
                         "folder, written as a Parquet dataset)")
    sc.add_argument("--engine", choices=("local", "ray"), default="local",
                    help="local (default): this process; ray: the Ray cluster of RAY_ADDRESS "
                         "(else a local Ray instance), writing Parquet dataset folders, the "
                         "skipped records to OUT.skipped/ with --on-error skip (pip install "
                         "'fastuq[ray]'; see the README's 'Scoring on a cluster')")
    sc.add_argument("--sample", action="store_true", help="score the bundled sample corpus")
    sc.add_argument("--method", default="sauce",
                    help="estimators, comma-separated, or 'all' for every estimator whose "
                         "inputs the corpus has (default: sauce); 'stack' (with --params "
                         "STACK.json from 'fastuq fit --stack') scores the stack's inputs "
                         "with the parameters it records, then writes its column")
    cs.add_protocol(sc)
    cs.add_source(sc)
    cs.add_sauce_params(sc)
    cs.add_params(sc)
    cs.add_param(sc)
    cs.add_noise(sc)
    sc.add_argument("--confidence", choices=CONFIDENCES,
                    help="UMAS node confidence (default msp: sum of token log-probabilities)")
    sc.add_argument("--math", action="store_true",
                    help="when agreement is built from parsed answers, also let answers that "
                         "math-verify proves equivalent vote together (pip install "
                         "'fastuq[math]')")
    sc.add_argument("--processes", type=positive_int, metavar="N",
                    help="worker processes for the --math checks")
    cs.add_skip(sc, default="OUT.skipped.jsonl beside -o OUT")
    sc.add_argument("--max-skip-fraction", type=fraction, metavar="F",
                    help="with --on-error skip: fail (exit 1, no scores written, the skip list "
                         "kept) when more than this fraction of the records is skipped; a run "
                         "that skips every record always fails")
    cs.add_dtype(sc, None, "kernel precision (default: float32 when the kernels run on a GPU, "
                           "float64 on a CPU; output is float64)")
    cs.add_backend(sc, "jax")
    sc.add_argument("--pack", choices=("auto", "host", "device"), default="auto",
                    help="where the per-round inputs are packed and checked: auto (default: "
                         "on the device when the kernels run on a GPU, else on the host), "
                         "host or device; the scores are the same")
    sc.add_argument("--chunk-rows", type=positive_int, default=1 << 18,
                    help="records per chunk (bounds memory; default 262144)")
    sc.add_argument("--cpu-devices", type=positive_int, default=None,
                    help="XLA host devices to split the CPU into (default: one per CPU this "
                         "process may use: its CPU affinity, capped by its cgroup CPU quota)")
    cs.add_check(sc)
    cs.add_progress(sc)
    sc.add_argument("--per-round", action="store_true",
                    help="also write, for every estimator whose score is defined after each "
                         "round (sauce, sauce_belief, last/mean/weighted_agreement, bccs, umas), a "
                         "list column <score>_per_round: the score of the debate cut after "
                         "each executed round, the last element the score (one scan)")
    sc.add_argument("--calibration", metavar="CALIB.json",
                    help="add p_correct_<estimator> columns (in [0, 1]) from a 'fastuq "
                         "calibrate' file; refused when it was made with other estimator "
                         "parameters, for other protocols or by another fastuq major version")


def _summary(report, stream) -> None:
    import numpy as np

    scores = report.scores.get("sauce")
    rate = report.n_rows / max(report.seconds, 1e-9)
    protos = ", ".join(f"{k} {v:,}" for k, v in sorted(report.protocols.items()))
    print(f"scored {report.n_rows:,} trajectories ({protos}) in {report.seconds:.2f} s "
          f"({rate:,.0f} trajectories/s)", file=stream)
    if scores is not None and len(scores):
        q = np.quantile(scores, [0.0, 0.5, 1.0])
        print(f"sauce uncertainty: min {q[0]:.4f}  median {q[1]:.4f}  max {q[2]:.4f}",
              file=stream)
    if report.correct is not None and scores is not None and len(scores):
        labels = np.asarray(report.correct, bool)
        print(f"accuracy {labels.mean():.4f}", end="", file=stream)
        if 0 < labels.sum() < len(labels):
            from fastuq.metrics import auroc

            print(f"  AUROC(sauce) {auroc(labels, scores):.4f}", end="", file=stream)
        print(file=stream)
        if report.protocol is not None and len(report.protocols) > 1:
            # Presets differ by protocol, so pooled scores mix scales: show each protocol.
            from fastuq.metrics import auroc

            for name in sorted(report.protocols):
                keep = report.protocol == name
                y = labels[keep]
                if 0 < y.sum() < len(y):
                    print(f"  {name}: n {keep.sum():,}  accuracy {y.mean():.4f}  "
                          f"AUROC(sauce) {auroc(y, scores[keep]):.4f}", file=stream)
    print(f"wrote {report.output}", file=stream)


def _option_problem(args: argparse.Namespace) -> str | None:
    """An option that would be ignored (or mean nothing), or an unknown ``--method``, as an
    error message."""
    if args.skipped is not None and args.on_error != "skip":
        return "--skipped only applies with --on-error skip (nothing is skipped otherwise)"
    if args.max_skip_fraction is not None and args.on_error != "skip":
        return "--max-skip-fraction only applies with --on-error skip"
    if args.processes is not None and not args.math:
        return "--processes only applies with --math (the math-verify checks)"
    if args.observation_noise is not None and not (
        args.observation_noise >= 0 and args.observation_noise < float("inf")
    ):
        return f"--observation-noise must be finite and >= 0, got {args.observation_noise}"
    if args.engine == "ray" and args.pack != "auto":
        return "--pack applies to the local engine (--engine ray workers pack on the host)"
    if args.engine == "ray" and args.calibration is not None:
        return "--calibration applies to the local engine"
    if args.engine == "ray" and args.per_round:
        return "--per-round applies to the local engine"
    if args.engine == "ray" and args.processes is not None:
        return "--processes is not used with --engine ray (each worker checks its chunks)"
    if args.engine == "ray" and "stack" in _names(args.method):
        return "--method stack applies to the local engine"
    try:
        _run_names(args.method)
    except ValueError as exc:
        return f"--method: {exc}"
    if args.per_round:
        from fastuq.engine.pipeline import check_per_round

        try:
            check_per_round(args.method)
        except ValueError as exc:
            return f"--per-round: {exc}"
    return None


def _names(methods: str) -> list[str]:
    return [m.strip() for m in methods.split(",")]


def _run_names(methods: str) -> list[str]:
    """``--method``'s registered estimators, checked (``stack`` set aside; ``["all"]`` for
    all)."""
    from fastuq.engine.methods import method_list

    names = _names(methods)
    if "stack" not in names:
        return method_list(methods)
    if names.count("stack") > 1:
        raise ValueError(f"estimator 'stack' is named twice in methods {methods!r}")
    own = [m for m in names if m != "stack"]
    if "all" in own:
        raise ValueError("'all' cannot be combined with 'stack'; name the other estimators")
    return method_list(own) if own else []


def _stack(args: argparse.Namespace):
    """The stack of ``--params STACK.json`` (None when ``--params`` is not a stack file),
    with ``args.params`` then cleared (it is not SAUCE's parameters). ValueError when
    ``--method stack`` and a stack file do not come together."""
    from fastuq.evaluation.stack import Stack, is_stack_file

    asked = "stack" in _names(args.method)
    if args.params and is_stack_file(args.params):
        if not asked:
            raise ValueError(f"--params {args.params} is a stack file (fastuq fit --stack): "
                             "add stack to --method to apply it")
        stack = Stack.load(args.params)
        args.params = None
        return stack
    if asked:
        raise ValueError("--method stack needs the stack file: --params STACK.json, written "
                         "by 'fastuq fit --stack CORPUS -o STACK.json'")
    return None


def _stack_params(args: argparse.Namespace, stack, given: dict) -> dict:
    """The parameters the stack's inputs are scored with: those the stack file records,
    with this run's ``--lam``/``--param``/... over them, checked (with the observation noise
    and ``--math``) against the file's record: ValueError naming the estimator, protocol and
    parameter that differ. Sets ``args.observation_noise`` to the file's when not given."""
    from fastuq.decisions.calibration import scoring_record

    if args.observation_noise is None and stack.scoring:
        args.observation_noise = stack.scoring.get("observation_noise")
    params = {**stack.params, **given}
    if args.confidence is not None:
        params["confidence"] = args.confidence
    try:
        stack.check_scoring(scoring_record(stack.estimators, stack.protocols, params,
                                           observation_noise=args.observation_noise,
                                           math=args.math))
    except ValueError as exc:
        raise ValueError(f"--params {args.stack_file}: {exc}") from None
    if args.confidence is not None:
        del params["confidence"]  # score_file takes it from --confidence
    return params


def _check_param_values(args: argparse.Namespace, params: dict) -> None:
    """The estimator parameters' names and values, before anything is read (a parameter
    error is a usage error: exit 2, not a failed run)."""
    from fastuq.engine.registry import check_params

    names = _run_names(args.method)
    given = dict(params)
    if args.confidence is not None:
        given.setdefault("confidence", args.confidence)
    check_params(given, None if names == ["all"] else names)


def _calibration(args: argparse.Namespace, params: dict):
    """The ``--calibration`` file, loaded and checked against this run before anything is
    scored (None without it): its estimators must be scored, and its scores made with the
    parameters, observation noise and ``--math`` setting this run uses for each of its
    protocols. ValueError with the reason otherwise."""
    if args.calibration is None:
        return None
    from fastuq.decisions.calibration import Calibrator, scoring_record
    from fastuq.engine.registry import score_estimator

    cal = Calibrator.load(args.calibration)
    names = _run_names(args.method)
    # a calibrated column is its estimator's (eigval_laplacian_mean: eigval_laplacian's)
    missing = list(dict.fromkeys(
        e for e in (score_estimator(m) or m for m in cal.estimators)
        if names != ["all"] and e not in names))
    if missing:
        raise ValueError(f"--calibration {args.calibration} calibrates "
                         f"{', '.join(cal.estimators)}: add {', '.join(missing)} to --method")
    given = dict(params)
    if args.confidence is not None:
        given.setdefault("confidence", args.confidence)
    try:
        cal.check_scoring(scoring_record(cal.estimators, cal.protocols, given,
                                         observation_noise=args.observation_noise,
                                         math=args.math))
    except ValueError as exc:
        raise ValueError(f"--calibration {args.calibration}: {exc}") from None
    return cal


def run(args: argparse.Namespace) -> int:
    """Run ``fastuq score``; returns the exit status."""
    from fastuq.cli import sample_corpus_path
    from fastuq.engine.files import ProgressBar, score_file
    from fastuq.engine.host import tune_allocator, use_cpu_devices
    from fastuq.io.writers import OutputError, cli_check_outputs

    prog = "fastuq score"
    if args.engine == "ray":
        return _run_ray(args, prog)
    sample = args.sample or args.input is None
    if not sample and not args.output:
        print(f"{prog}: -o/--output is required with INPUT", file=sys.stderr)
        return 2
    source = sample_corpus_path() if sample else Path(args.input)
    cs.check_source(args, source)
    problem = _option_problem(args)
    if problem is not None:
        return cs.fail(prog, problem)
    skipped = args.skipped
    if args.on_error == "skip" and args.output and not skipped:
        skipped = args.output + ".skipped.jsonl"
    rc = cli_check_outputs(prog, [source, args.params, args.calibration],
                           [("-o", args.output, "parquet"), ("--skipped", skipped, "jsonl")])
    if rc is not None:
        return rc
    if args.backend == "jax":
        use_cpu_devices(args.cpu_devices, strict=False)
    tune_allocator()
    args.stack_file = args.params
    try:
        stack = _stack(args)
        sauce, per_protocol = cs.sauce_overrides(args)
        if stack is not None:
            sauce = _stack_params(args, stack, sauce)
        _check_param_values(args, sauce if stack is None else {})
        calibration = _calibration(args, sauce)
    except (ValueError, TypeError, FileNotFoundError) as exc:
        return cs.fail(prog, exc)
    with tempfile.TemporaryDirectory() as tmp:
        output = Path(args.output) if args.output else Path(tmp) / "sample_scores.parquet"
        try:
            with closing(ProgressBar(args.progress)) as bar:
                report = score_file(
                    source, output, methods=args.method, protocol=args.protocol, params=sauce,
                    dtype=args.dtype, backend=args.backend, chunk_rows=args.chunk_rows,
                    progress=bar, observation_noise=args.observation_noise,
                    confidence=args.confidence, on_error=args.on_error,
                    skipped_path=args.skipped, math=args.math, processes=args.processes,
                    max_skip_fraction=args.max_skip_fraction, keep_scores=sample,
                    check=args.check, pack=args.pack, calibration=calibration,
                    stack=stack,
                    per_round=args.per_round,
                )
        except OutputError as exc:
            return cs.fail(prog, exc)
        except (ValueError, OSError, TypeError) as exc:
            return cs.fail(prog, exc)
        if report.left_out:
            print(f"--method all: left out {len(report.left_out)} estimator(s): " + "; ".join(
                f"{k} ({v})" for k, v in report.left_out.items()), file=sys.stderr)
        cs.report_params(prog, per_protocol, report.protocols, args.params)
        if sample:
            if not args.output:
                report.output = "(not kept; pass -o to keep the scores)"
            _summary(report, sys.stdout)
        else:
            print(f"scored {report.n_rows:,} trajectories in {report.seconds:.2f} s -> "
                  f"{report.output}", file=sys.stderr)
        cs.report_skipped(None, report.skipped, report.skipped_path)
    return 0


def _run_ray(args: argparse.Namespace, prog: str) -> int:
    """``fastuq score --engine ray INPUT -o OUT_DIR``: :func:`fastuq.ray.score_to_folder`."""
    from fastuq.io.writers import OutputError

    if args.sample or args.input is None or not args.output:
        return cs.fail(prog, "--engine ray scores INPUT (a file, folder or glob) to -o OUT_DIR; "
                             "give both (the bundled sample is scored locally)")
    problem = _option_problem(args)
    if problem is not None:
        return cs.fail(prog, problem)
    try:
        cs.check_source(args, args.input)
        params, per_protocol = cs.sauce_overrides(args)
        _check_param_values(args, params)
    except (ValueError, TypeError, FileNotFoundError) as exc:
        return cs.fail(prog, exc)
    if args.confidence is not None:
        if "confidence" in params:
            return cs.fail(prog, "confidence is given by --confidence and by --param")
        params["confidence"] = args.confidence
    try:
        from fastuq.ray import score_to_folder

        report = score_to_folder(
            args.input, args.output, skipped_path=args.skipped,
            max_skip_fraction=args.max_skip_fraction, on_error=args.on_error,
            progress=args.progress, methods=args.method, protocol=args.protocol,
            dtype=args.dtype or "float64", backend=args.backend, chunk_rows=args.chunk_rows,
            observation_noise=args.observation_noise, math=args.math, check=args.check,
            **params,
        )
    except OutputError as exc:
        return cs.fail(prog, exc)
    except (ValueError, OSError, TypeError, ImportError) as exc:
        return cs.fail(prog, exc)
    if report.left_out:
        print(f"--method all: left out {len(report.left_out)} estimator(s): " + "; ".join(
            f"{k} ({v})" for k, v in report.left_out.items()), file=sys.stderr)
    if per_protocol is not None:
        scores = report.result.scores
        protocols = (scores.unique("protocol") if "protocol" in scores.columns()
                     else [args.protocol] if args.protocol else [])
        cs.report_params(prog, per_protocol, [p for p in protocols if p is not None],
                         args.params)
    print(f"scored {report.n_rows:,} trajectories in {report.seconds:.2f} s -> "
          f"{report.output}", file=sys.stderr)
    if report.skipped_path is not None:
        print(f"skipped {report.n_skipped:,} bad record(s), listed in {report.skipped_path}",
              file=sys.stderr)
        for reason in report.first_reasons:
            print(f"  {reason}", file=sys.stderr)
    return 0
