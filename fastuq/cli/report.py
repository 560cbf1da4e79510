"""``fastuq report``: one self-contained HTML page about a labelled corpus.

Exit status: 0 on success, 2 when the report could not be made (bad input, missing labels,
a bad option, matplotlib missing); nothing is written then.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from fastuq.cli import options as cs
from fastuq.cli import positive_int

#: The grid a bare ``--sweep`` sweeps: lam x q, q on a log axis.
DEFAULT_GRID = {"lam": "0.5:1.0:21", "q": "1e-3:1:21"}
DEFAULT_LOG = ("q",)


def add_parser(sub) -> None:
    """Register ``report`` on the subparsers ``sub``."""
    p = cs.subcommand(
        sub, "report",
        help="one self-contained HTML page: corpus summary, metrics, plots (and a sweep)",
        description=(
            "Score CORPUS with every estimator whose inputs it has (or --method), evaluate "
            "them against its 'correct' labels pooled and per protocol (the numbers of "
            "'fastuq eval --by protocol'), and write one HTML page with the corpus summary, "
            "the metric tables, a risk-coverage plot and a reliability diagram per estimator "
            "(PNG embedded, nothing loaded from elsewhere) and, with --sweep, the heatmap of a "
            "SAUCE parameter sweep. The page is written atomically. Exit status: 0 ok, 2 error."
        ),
        epilog="examples: fastuq report corpus.parquet -o report.html; fastuq report "
               "dylan.parquet --observation-noise 0.1 --sweep -o report.html; fastuq report "
               "corpus.parquet --grid lam=0.3:1:15 --grid q=1e-3:1:15 --log q -o report.html",
    )
    p.add_argument("corpus", nargs="?",
                   help="labelled corpus (Parquet, JSONL or JSONL.gz, or a folder of them); "
                        "omit for the bundled sample")
    p.add_argument("-o", "--output", required=True, metavar="REPORT.html",
                   help="the page to write (.html)")
    p.add_argument("--method",
                   help="estimators, comma-separated, or 'all' (default: all whose inputs the "
                        "corpus has; the page lists the others and what they lack)")
    p.add_argument("--name", help="the corpus's name on the page (default: its file name)")
    p.add_argument("--title", help="the page title (default: 'fastuq report: NAME')")
    cs.add_protocol(p)
    cs.add_source(p)
    cs.add_dtype(p, "float64", "scoring precision (default float64, as fastuq eval)")
    cs.add_backend(p, "jax", "kernel backend (default jax)")
    cs.add_sauce_params(p)
    cs.add_param(p)
    cs.add_noise(p)
    cs.add_params(p)
    cs.add_check(p)
    p.add_argument("--calibration", metavar="CALIB.json",
                   help="a 'fastuq calibrate' file: add its metrics on this corpus beside its "
                        "held-out ones and reliability diagrams before and after")
    p.add_argument("--bench", metavar="BENCH.json",
                   help="a 'fastuq bench --json' results file: add its table (every "
                        "estimator's cost on the machine that ran it)")
    p.add_argument("--chunk-rows", type=positive_int, default=1 << 18,
                   help="records per chunk when reading (default 262144)")
    sw = p.add_argument_group("sweep (a SAUCE parameter grid and its heatmap)")
    sw.add_argument("--sweep", action="store_true",
                    help="add a sweep; without --grid: lam 0.5:1.0:21 x q 1e-3:1:21 (q in log)")
    sw.add_argument("--grid", action="append", default=[], metavar="NAME=SPEC",
                    help="a swept parameter and its values (START:STOP:COUNT, a,b,c or one "
                         "value), repeatable; implies --sweep")
    sw.add_argument("--log", action="append", default=[], metavar="NAME",
                    help="space NAME's START:STOP:COUNT values in log and draw its axis in log "
                         "(repeatable)")
    sw.add_argument("--sweep-metric", choices=("auroc", "auarc", "prr"), default="auroc",
                    help="the metric drawn and selected by (default auroc)")
    sw.add_argument("--sweep-folds", type=positive_int, metavar="K",
                    help="k-fold cross-validated selection of the grid point (seed 0)")


def _grid(args: argparse.Namespace) -> tuple[dict[str, list[float]] | None, list[str]]:
    """The sweep grid and its log axes from ``--sweep``/``--grid``/``--log`` (None: no
    sweep); ValueError for a malformed or repeated entry or an unknown name."""
    from fastuq.evaluation.sauce_data import PARAMS
    from fastuq.evaluation.sweeps import parse_values

    if not args.sweep and not args.grid:
        if args.log:
            raise ValueError("--log spaces a swept parameter: it needs --sweep or --grid")
        return None, []
    specs: dict[str, str] = {}
    for item in args.grid:
        name, sep, spec = item.partition("=")
        name = name.strip().replace("-", "_")
        if not sep or not name or not spec.strip():
            raise ValueError(f"--grid takes NAME=SPEC (e.g. lam=0.5:1:21), got {item!r}")
        if name not in PARAMS:
            raise ValueError(f"--grid {name}: unknown SAUCE parameter; known: "
                             f"{', '.join(PARAMS)}")
        if name in specs:
            raise ValueError(f"--grid {name} is given twice")
        specs[name] = spec
    logs = [n.strip().replace("-", "_") for n in args.log]
    if not specs:
        specs = dict(DEFAULT_GRID)
        logs = logs or list(DEFAULT_LOG)
    unknown = [n for n in logs if n not in specs]
    if unknown:
        raise ValueError(f"--log {unknown[0]}: not swept (swept: {', '.join(specs)})")
    grid = {}
    for name, spec in specs.items():
        try:
            grid[name] = parse_values(spec, log=name in logs)
        except ValueError as exc:
            raise ValueError(f"--grid {name}: {exc}") from None
    return grid, logs


def run(args: argparse.Namespace) -> int:
    """Run ``fastuq report``; returns the exit status (0 ok, 2 error)."""
    from fastuq.cli import sample_corpus_path
    from fastuq.io.writers import cli_check_outputs

    prog = "fastuq report"
    source = Path(args.corpus) if args.corpus else sample_corpus_path()
    cs.check_source(args, source)
    out = Path(args.output)
    if not out.name.lower().endswith((".html", ".htm")):
        return cs.fail(prog, f"cannot write {out}: a report is HTML; name it {out.stem}.html")
    rc = cli_check_outputs(prog, [source, args.params, args.calibration, args.bench],
                           [("-o", out, None)])
    if rc is not None:
        return rc
    try:
        grid, logs = _grid(args)
        params, per_protocol = cs.sauce_overrides(args)
        if per_protocol is not None:  # build_report applies the file itself
            params = cs.parse_params(args.param)
        if args.backend == "jax":
            from fastuq.engine.host import use_cpu_devices

            use_cpu_devices(None, strict=False)
        from fastuq.evaluation.report import write_report

        report = write_report(
            source, out, methods=args.method or "all", name=args.name, title=args.title,
            protocol=args.protocol, params=params, protocol_params=per_protocol,
            observation_noise=args.observation_noise, dtype=args.dtype, backend=args.backend,
            chunk_rows=args.chunk_rows, check=args.check, sweep_grid=grid,
            sweep_metric=args.sweep_metric, sweep_log=logs, sweep_folds=args.sweep_folds,
            calibration=args.calibration, bench=args.bench,
        )
    except (ValueError, TypeError, FileNotFoundError, ImportError) as exc:
        return cs.fail(prog, exc)
    except OSError as exc:  # writing the page (a full disk, say)
        return cs.fail(prog, exc, 1)
    n = int(report.pooled["n"][0])
    figures = sum(len(f) for f in report.figures.values()) + (report.sweep is not None)
    print(f"{prog}: {n:,} trajectories, {len(report.methods)} estimators, "
          f"{len(report.by_protocol)} protocol(s), {figures} plot(s); wrote {out}",
          file=sys.stderr)
    return 0
