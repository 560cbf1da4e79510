"""``fastuq eval``: evaluate uncertainty scores against a corpus's ``correct`` labels.

Exit status: 0 on success (and ``PASS`` with ``--expect``), 1 when ``--expect`` finds a
mismatch or an output could not be written (a full disk), 2 when the evaluation could not be
done (bad input, missing labels, a failed join, an invalid expectations file, matplotlib
missing for ``--plots``, an output refused before any work).
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from fastuq.cli import options as cs
from fastuq.cli import positive_int

_SCORING_ONLY = ("protocol", "observation_noise", "dtype", "backend", *cs.SAUCE_NAMES, "params")


def add_parser(sub) -> None:
    """Register ``eval`` on the subparsers ``sub``."""
    ev = cs.subcommand(
        sub, "eval",
        help="evaluate uncertainty scores against the corpus labels (AUROC, AUARC, ...)",
        description=(
            "Score CORPUS (or read scores from --scores and join them to CORPUS by "
            "trajectory_id) and evaluate every estimator against the corpus's 'correct' "
            "labels: AUROC, AUARC, PRR, Brier-Platt (out-of-fold Platt scaling, 5 stratified "
            "folds, seed 0), ECE (15 bins), accuracy and n. The table is in percent by "
            "default. Exit status: 0 ok, 1 --expect mismatch, 2 error."
        ),
        epilog="with --scores from a 'score --on-error skip' run, --skipped PATH names that "
               "run's skipped list (default: SCORES.skipped.jsonl when it exists): corpus "
               "trajectories listed there are left out and counted",
    )
    ev.add_argument("corpus", nargs="?",
                    help="labelled corpus (Parquet, JSONL or JSONL.gz); omit for the bundled "
                         "sample")
    ev.add_argument("--method",
                    help="estimators, comma-separated, or 'all' (default: sauce when scoring; "
                         "with --scores every score column; with --expect and no --method, the "
                         "estimators the file lists)")
    ev.add_argument("--scores", metavar="SCORES",
                    help="scores file (Parquet, CSV or Arrow IPC; trajectory_id + one column "
                         "per estimator, e.g. from 'fastuq score') to evaluate instead of "
                         "scoring CORPUS")
    ev.add_argument("--metrics",
                    help="metrics, comma-separated (default: auroc,auarc,prr,brier_platt,ece)")
    ev.add_argument("--units", choices=("percent", "fraction"), default="percent",
                    help="units of the printed table (default percent, like the paper's)")
    ev.add_argument("--markdown", action="store_true", help="print a markdown table")
    ev.add_argument("--by", choices=("protocol",),
                    help="also evaluate each protocol on its own (presets put protocols on "
                         "different scales, so pooled metrics of a mixed corpus mix them)")
    ev.add_argument("--json", metavar="OUT", dest="json_out",
                    help="write every number (fractions, full precision), n and metadata")
    ev.add_argument("--plots", metavar="DIR",
                    help="write reliability diagrams and a risk-coverage plot (PNG) to DIR; "
                         'needs matplotlib (pip install "fastuq[plot]")')
    ev.add_argument("--expect", metavar="EXPECTED",
                    help="JSON of expected metrics, compared at the precision each number is "
                         "written with; prints PASS or each mismatch (exit 1)")
    cs.add_protocol(ev, " when scoring")
    cs.add_source(ev)
    cs.add_dtype(ev, None, "kernel precision when scoring (default float64)")
    cs.add_backend(ev, None, "kernel backend when scoring (default jax)")
    cs.add_sauce_params(ev, " when scoring")
    cs.add_param(ev)
    ev.add_argument("--chunk-rows", type=positive_int, default=1 << 18,
                    help="records per chunk when reading (default 262144)")
    cs.add_options(ev, params=True, output=False)


def _split(text: str | None) -> list[str] | None:
    if text is None:
        return None
    return [s.strip() for s in text.split(",") if s.strip()]


def _label_array(table, source: str):
    """The ``correct`` column of a scored table as bool NumPy, or a ValueError."""
    import numpy as np

    if "correct" not in table.column_names:
        raise ValueError(
            f"{source}: no labels: the corpus has no 'correct' field (bool, True = correct); "
            f"evaluation needs them"
        )
    col = table.column("correct")
    if col.null_count == len(col):
        raise ValueError(f"{source}: no labels: every 'correct' value is null")
    if col.null_count:
        if "trajectory_id" in table.column_names:
            k = int(np.flatnonzero(col.is_null().to_numpy(zero_copy_only=False))[0])
            name = table.column("trajectory_id")[k].as_py()
        else:  # fastuq eval keeps no ids: score_corpus noted the first unlabelled one
            name = (table.schema.metadata or {})[cs.UNLABELLED_KEY.encode()].decode()
        raise ValueError(
            f"trajectory {name!r} has no label "
            f"(field correct is null; {col.null_count} unlabelled)"
        )
    return col.to_numpy().astype(bool)


def _check_has_label_field(source: Path) -> None:
    """Fail before scoring when a Parquet corpus has no ``correct`` column at all."""
    if source.name.lower().endswith((".parquet", ".pq")) and source.exists():
        import pyarrow.parquet as pq

        if "correct" not in pq.read_schema(source).names:
            raise ValueError(
                f"{source}: no labels: the corpus has no 'correct' column (bool, True = "
                f"correct); evaluation needs them"
            )


def _evaluate(args, source: Path, methods, metrics, info: dict):
    """(labels, scores mapping or frame, methods used, protocol column (Arrow or Polars) or
    None); ``info`` gets
    ``skipped`` (count) and ``skipped_list`` (path) when records were left out."""
    from fastuq import evaluation as ev

    if args.scores:
        given = [cs.flag(k) for k in _SCORING_ONLY if getattr(args, k) is not None]
        if args.on_error != "raise":
            given.append("--on-error")
        if args.param:
            given.append("--param")
        if given:
            raise ValueError(f"{', '.join(given)} only apply when scoring, not with --scores "
                             "(give a skip run's list with --skipped)")
        labels = ev.read_labels(source, chunk_rows=args.chunk_rows)
        scores = ev.read_scores(args.scores, methods)
        listing = cs.skipped_path(args, source, args.scores)  # the score run's list
        if args.skipped or listing.exists():
            kept = ev.drop_skipped(labels, scores, ev.read_skipped(listing))
            info["skipped"] = labels.height - kept.height
            info["skipped_list"] = str(listing)
            labels = kept
        joined = ev.join_labels(labels, scores)
        names = [c for c in scores.columns if c != "trajectory_id"]
        groups = joined["protocol"] if "protocol" in joined.columns else None
        return joined["correct"].to_numpy(), joined.select(names), names, groups

    from fastuq.engine.host import tune_allocator, use_cpu_devices

    cs.check_skip_args(args)
    _check_has_label_field(source)
    backend = args.backend or "jax"
    if backend == "jax":
        use_cpu_devices(None, strict=False)
    tune_allocator()  # as fastuq score: chunk arrays reuse their pages
    params, per_protocol = cs.sauce_overrides(args)
    table, skipped, listing = cs.score_from_args(
        args, source, methods or ["sauce"], protocol=args.protocol,
        dtype=args.dtype or "float64", backend=backend, chunk_rows=args.chunk_rows,
        params=params, keep=("protocol", "correct"),
    )
    if listing is not None:
        info["skipped"] = len(skipped)
        info["skipped_list"] = str(listing)
    if per_protocol is not None:
        protos = ([args.protocol] if args.protocol else
                  table["protocol"].unique().to_pylist() if "protocol" in table.column_names
                  else [])
        cs.report_params("fastuq eval", per_protocol, protos, args.params)
    from fastuq.engine.host import lean_allocator, release_memory
    from fastuq.engine.registry import score_outputs
    from fastuq.metrics.inputs import ScoreColumns

    labels = _label_array(table, str(source))
    names = score_outputs(table.column_names)
    groups = table["protocol"] if "protocol" in table.column_names else None
    # one float matrix of the scores; the scored table is dropped first and each score
    # column freed once copied, so the scores are never held twice over
    n = table.num_rows
    columns = [table.column(name) for name in names]
    del table
    lean_allocator()  # the metrics' temporaries go back to the system when freed
    scores = ScoreColumns.consume(columns, names, n, after_each=release_memory)
    release_memory()
    return labels, scores, names, groups


def _write_plots(labels, scores, folder: str) -> list[Path]:
    """:func:`fastuq.evaluation.write_plots` (the PNGs move into ``folder`` as a set); an
    OSError says which folder could not be written."""
    from fastuq import evaluation as ev

    try:
        return ev.write_plots(labels, scores, folder)
    except OSError as exc:
        raise OSError(f"cannot write the plots to {folder}: {exc}") from exc


def run(args: argparse.Namespace) -> int:
    """Run ``fastuq eval``; returns the exit status (0 ok, 1 mismatch, 2 error)."""
    import fastuq
    from fastuq import evaluation as ev
    from fastuq.cli import sample_corpus_path
    from fastuq.metrics import METRICS

    source = Path(args.corpus) if args.corpus else sample_corpus_path()
    cs.check_source(args, source)
    from fastuq.io.writers import cli_check_outputs

    # every file read (with --scores, --skipped names the score run's list: an input) ...
    inputs = [source, args.scores, args.expect, args.params,
              args.skipped if args.scores else None]
    # ... against every file written (scoring with --on-error skip writes the skipped list)
    skip_list = None if args.scores else cs.skip_output(args, source)
    rc = cli_check_outputs("fastuq eval", inputs,
                           [("--json", args.json_out, "json"), ("--plots", args.plots, "dir"),
                            ("--skipped", skip_list, "jsonl")])
    if rc is not None:
        return rc
    try:
        expected = ev.load_expectations(args.expect) if args.expect else None
        methods = _split(args.method)
        if methods is None and expected is not None:
            methods = list(expected["estimators"])
        metrics = _split(args.metrics) or list(METRICS)
        unknown = [m for m in metrics if m not in METRICS]
        if unknown:
            raise ValueError(f"unknown metric(s) {', '.join(unknown)}; known: "
                             f"{', '.join(METRICS)}")
        if expected is not None:  # compute whatever the expectations list
            metrics += [m for m in ev.expected_metrics(expected) if m not in metrics]
        info: dict = {}
        labels, scores, names, groups = _evaluate(args, source, methods, metrics, info)
        by_group = {}
        if args.by == "protocol":
            if groups is None:
                raise ValueError(f"{source}: --by protocol needs a protocol column")
            table, by_group = ev.evaluation_tables(labels, scores, groups, metrics=metrics)
        else:
            table = ev.evaluation_table(labels, scores, metrics=metrics)
        plots = _write_plots(labels, scores, args.plots) if args.plots else []
    except (ValueError, FileNotFoundError, ImportError) as exc:
        return cs.fail("fastuq eval", exc)
    except OSError as exc:  # writing: the skipped list or the plots (a full disk, say)
        return cs.fail("fastuq eval", exc, 1)
    if "skipped" in info:
        print(f"fastuq eval: skipped {info['skipped']:,} record(s) "
              f"listed in {info['skipped_list']}; "
              f"evaluating the {len(labels):,} scored", file=sys.stderr)

    percent = args.units == "percent"
    n = int(table["n"][0])
    acc = float(table["accuracy"][0])
    if not args.markdown:
        shown = f"{acc * 100:.2f}%" if percent else f"{acc:.4f}"
        print(f"{source.name}: {n:,} trajectories, accuracy {shown}; metrics in {args.units}"
              f" (higher is better except Brier-Platt and ECE)")
    print(ev.format_table(table, markdown=args.markdown, percent=percent))
    for name, sub in by_group.items():
        print(f"\nprotocol {name}: {int(sub['n'][0]):,} trajectories")
        print(ev.format_table(sub, markdown=args.markdown, percent=percent))
    check = ev.check_expectations(table, expected) if expected is not None else None

    if args.json_out:
        doc = {
            "fastuq_version": fastuq.__version__,
            "corpus": str(source.resolve()),
            "scores": str(Path(args.scores).resolve()) if args.scores else None,
            "methods": names,
            "metrics_computed": metrics,
            "protocol": args.protocol,
            "observation_noise": args.observation_noise,
            "params": str(Path(args.params).resolve()) if args.params else None,
            "skipped": info.get("skipped"),
            "skipped_list": info.get("skipped_list"),
            "dtype": None if args.scores else (args.dtype or "float64"),
            "units": "fraction",
            "n": n,
            "accuracy": acc,
            "estimators": ev.table_records(table),
            "by_protocol": {k: ev.table_records(v) for k, v in by_group.items()} or None,
            "expect": None if check is None else {"file": str(Path(args.expect).resolve()),
                                                  **check.to_dict()},
            "plots": [str(p) for p in plots],
        }
        out = Path(args.json_out)
        from fastuq.io.writers import atomic_write_text

        try:
            atomic_write_text(out, json.dumps(doc, indent=2, allow_nan=False) + "\n")
        except OSError as exc:
            return cs.fail("fastuq eval", f"cannot write {out}: {exc}", 1)
        print(f"wrote {out}", file=sys.stderr)
    if plots:
        print(f"wrote {len(plots)} plot(s) to {args.plots}", file=sys.stderr)
    if check is not None:
        if check.passed:
            print("PASS")
            return 0
        for c in check.mismatches:
            print(c.describe())
        print(f"FAIL: {len(check.mismatches)} of {len(check.comparisons)} expected values "
              f"differ (units: {check.units})")
        return 1
    return 0
