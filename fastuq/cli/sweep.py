"""``fastuq sweep``: exact metrics of SAUCE over a parameter grid, written to Parquet."""

from __future__ import annotations

import argparse
import math

from fastuq.cli import options as cs


def add_parser(sub) -> None:
    """Register ``sweep`` on the subparsers ``sub``."""
    sp = cs.subcommand(
        sub, "sweep",
        help="exact AUROC/AUARC/PRR of SAUCE over a parameter grid",
        description=(
            "Score CORPUS with SAUCE at every point of a parameter grid (the Cartesian product "
            "of the values given) and compute exact metrics per point. Each parameter takes "
            "START:STOP:COUNT (COUNT values, both ends included; --log NAME spaces them "
            "evenly in log), a comma list, or one value; parameters not given come from each "
            "trajectory's protocol preset. Writes one row per grid point to OUT (Parquet, "
            "atomically) and prints the best point next to the presets."
        ),
        epilog="example: fastuq sweep corpus.parquet --lam 0.5:1.0:32 --q 1e-3:1:32 --log q "
               "--metric auroc --folds 5 -o sweep.parquet --plot heatmap.png",
    )
    cs.add_corpus(sp, "sweep")
    for name, text in cs.SAUCE_PARAMS:
        sp.add_argument(cs.flag(name), dest=name, metavar="SPEC",
                        help=f"values of {name} ({text})")
    sp.add_argument("--log", action="append", default=[], metavar="NAME",
                    help="space NAME's START:STOP:COUNT values in log (repeatable)")
    sp.add_argument("--metric", default="auroc,auarc",
                    help="metrics, comma-separated, from auroc, auarc, prr; the first selects "
                         "the best point and is plotted (default: auroc,auarc)")
    sp.add_argument("--folds", type=int, help="k-fold cross-validated selection (seed 0)")
    sp.add_argument("-o", "--output", help="output Parquet file, one row per grid point")
    sp.add_argument("--plot", metavar="PNG", help="heatmap of the first metric (needs matplotlib)")
    cs.add_protocol(sp)
    cs.add_source(sp)
    cs.add_dtype(sp, "float32", "scoring and ranking precision (default float32, ample for "
                                "ranking)")
    sp.add_argument("--chunk-points", type=int,
                    help="grid points scored per block (bounds memory; default 2**24 // N)")
    sp.add_argument("--threads", type=int, help="host threads ranking scores (default: cores)")
    cs.add_device(sp)
    sp.add_argument("--rank", choices=("auto", "host", "device"), default="auto",
                    help="rank the scores on the host or where they were computed (auto, "
                         "default: the device when it is a GPU, float32 and no --folds)")
    cs.add_options(sp, params=True)


def _grid(args: argparse.Namespace) -> dict[str, list[float]]:
    from fastuq.evaluation.sweeps import parse_values

    names = list(cs.SAUCE_NAMES)
    unknown = [n for n in args.log if n.replace("-", "_") not in names]
    if unknown:
        raise ValueError(f"--log names unknown parameter(s) {unknown}; known: {names}")
    logs = {n.replace("-", "_") for n in args.log}
    unused = sorted(n for n in logs if getattr(args, n) is None)
    if unused:
        raise ValueError(f"--log {unused[0]} without {cs.flag(unused[0])}: nothing to space "
                         "in log")
    grid = {}
    for name in names:
        spec = getattr(args, name)
        if spec is not None:
            try:
                grid[name] = parse_values(spec, log=name in logs)
            except ValueError as exc:
                raise ValueError(f"{cs.flag(name)}: {exc}") from None
    if not grid:
        raise ValueError(f"give at least one of {', '.join(map(cs.flag, names))}")
    return grid


def _point(row: dict, names) -> str:
    return "  ".join(f"{k} {row[k]:.4g}" for k in names)


def run(args: argparse.Namespace) -> int:
    """Run ``fastuq sweep``; returns the exit status."""
    import time

    from fastuq.evaluation.sweeps import heatmap, sweep
    from fastuq.io.writers import atomic_write_parquet, cli_check_outputs

    prog = "fastuq sweep"
    source = cs.corpus_source(prog, args)
    if source is None:
        return 2
    cs.check_source(args, source)
    try:
        grid = _grid(args)
        metrics = tuple(m.strip() for m in args.metric.split(",") if m.strip())
    except ValueError as exc:
        return cs.fail(prog, exc)
    if args.plot:
        try:
            import matplotlib  # noqa: F401
        except ImportError:  # a usage error: the option's extra is not installed
            return cs.fail(prog, "--plot needs matplotlib: pip install 'fastuq[plot]'")
    rc = cli_check_outputs(prog, [source, args.params],
                           [("-o", args.output, "parquet"), ("--plot", args.plot, None),
                            ("--skipped", cs.skip_output(args, source, args.output), "jsonl")])
    if rc is not None:
        return rc
    start = time.perf_counter()
    skipped: list = []
    try:
        cs.check_skip_args(args)
        base = cs.load_params(args)
        data, _ = cs.load_data(prog, args, source, skipped)
        cs.report_params(prog, base, data.protocols, args.params)
        with cs.Progress(args.progress, unit="grid points") as bar:
            table = sweep(data, grid, metrics, dtype=args.dtype, chunk_points=args.chunk_points,
                          folds=args.folds, threads=args.threads, params=base, progress=bar,
                          rank=args.rank)
    except (ValueError, OSError) as exc:  # OSError: also writing the skipped list
        return cs.fail(prog, exc)
    seconds = time.perf_counter() - start
    names = [c for c in table.columns if c in grid]
    metric = metrics[0]
    print(f"swept {table.height:,} grid points in {seconds:.2f} s")
    best_rows = table.filter(~table[metric].is_nan()).sort(metric, descending=True,
                                                          maintain_order=True)
    if best_rows.height:
        best = best_rows.row(0, named=True)
        others = "  ".join(f"{m} {best[m]:.4f}" for m in metrics)
        print(f"best by {metric}: {_point(best, names)}   {others}")
    if table.preset is not None:
        what = "presets (per protocol)" if base is None else f"parameters of {args.params}"
        print(f"{what}:   " + "  ".join(
            f"{m} {v:.4f}" for m, v in table.preset.items()))
    cv = table.cv
    if cv is not None:
        print(f"{len(cv.folds)}-fold cross-validated selection by {metric}:")
        for row in cv.folds.iter_rows(named=True):
            preset = row[f"preset_heldout_{metric}"]
            pre = "" if preset is None or math.isnan(preset) else f"  (presets {preset:.4f})"
            print(f"  fold {row['fold']}: {_point(row, names)}   train {row[f'train_{metric}']:.4f}"
                  f"  held-out {row[f'heldout_{metric}']:.4f}{pre}")
        pre = "" if cv.mean_preset_heldout is None else \
            f"  (presets {cv.mean_preset_heldout:.4f})"
        print(f"  mean held-out {metric} {cv.mean_heldout:.4f}{pre}; chosen on all data: "
              f"{_point(cv.chosen, names)}  {metric} {cv.chosen_metric:.4f}")
    if args.output:
        try:
            atomic_write_parquet(table.to_arrow(), args.output)
        except OSError as exc:
            return cs.fail(prog, f"cannot write {args.output}: {exc}", 1)
        print(f"wrote {args.output}")
    if args.plot:
        try:
            heatmap(table, metric, args.plot, log=[n.replace("-", "_") for n in args.log])
        except (ImportError, ValueError, OSError) as exc:  # OSError: the write failed (1)
            return cs.fail(prog, f"--plot: {exc}", 1 if isinstance(exc, OSError) else 2)
        print(f"wrote {args.plot}")
    return 0
