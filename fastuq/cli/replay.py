"""``fastuq replay``: what stopping and routing policies would have cost and gained on saved
full-length debates (:func:`fastuq.decisions.replay.replay`).

Exit status: 0 on success, 2 on bad input (a bad record, a debate without a reference unless
``--on-error skip``) or a refused output.
"""

from __future__ import annotations

import argparse
import math
import sys
from pathlib import Path

from fastuq.cli import options as cs
from fastuq.cli import positive_int


def grid(text: str) -> list[float]:
    """argparse type: ``LO:HI:N`` (N evenly spaced values, ends included), a comma list or
    one number (:func:`fastuq.sweeps.parse_values`, as ``fastuq sweep`` reads its grids)."""
    from fastuq.evaluation.sweeps import parse_values

    try:
        return parse_values(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def add_parser(sub) -> None:
    """Register ``replay`` on the subparsers ``sub``."""
    p = cs.subcommand(
        sub, "replay",
        help="replay stopping/routing policies over saved debates: accuracy vs model calls",
        description=(
            "Apply stopping and routing policies to saved full-length debates and report, per "
            "policy and parameter point, the accuracy of the answer at the stop (the "
            "majority of the round's answers among the active agents, at the last round the "
            "corpus's final_answer, checked against 'reference'), mean and total model "
            "calls, calls saved against the full debate and flips (correct at an earlier "
            "round, wrong at "
            "the stop). Policies: fixed (r = 1..T rounds), uaad (consensus stop: dominant "
            "share >= tau_c and moved <= epsilon), uaad_route (the same under UAAD's risk "
            "tiers), bccs (first full consensus; needs belief) and trace:ESTIMATOR (stop once "
            "the estimator's score of the rounds so far is <= a threshold). Prints the full "
            "debate and the Pareto front of accuracy against calls, one line per distinct "
            "point (with how many grid points tie on it)."
        ),
        epilog="grids: LO:HI:N (N values, ends included) or a comma list; --param sets "
               "estimator parameters (UAAD tiers: --param rounds_high=2, BCCS: --param "
               "theta_full=0.9, SAUCE: --param lam=0.9)",
    )
    cs.add_corpus(p, "replay")
    p.add_argument("--policy", action="append", metavar="POLICY",
                   help="fixed, uaad, uaad_route, bccs or trace:ESTIMATOR; repeatable or "
                        "comma-separated (default: fixed and uaad)")
    p.add_argument("--tau-c", type=grid, metavar="GRID",
                   help="uaad grid of the dominant-share threshold (default 0.5:1:32)")
    p.add_argument("--epsilon", type=grid, metavar="GRID",
                   help="uaad grid of the largest change since the previous round "
                        "(default 0:0.5:32)")
    p.add_argument("--thresholds", metavar="GRID|K",
                   help="trace thresholds: a grid, or K quantiles of the per-round scores of "
                        "the first chunk (default 32); write --thresholds=-0.8,0 for a grid "
                        "that starts with a minus sign")
    p.add_argument("--calls", choices=("team", "nodes"), default="team",
                   help="calls to stop after round t: n_agents (t + 1) (team, default) or the "
                        "answers given in rounds 0..t (nodes; for teams that prune agents)")
    cs.add_param(p)
    cs.add_protocol(p)
    cs.add_source(p)
    cs.add_dtype(p, "float64", help="float dtype of the estimators (default float64)")
    cs.add_backend(p, "jax")
    cs.add_noise(p)
    cs.add_check(p)
    cs.add_skip(p)
    p.add_argument("--math", action="store_true",
                   help="also let answers that math-verify proves equivalent vote together and "
                        "count as correct (pip install 'fastuq[math]'); give it when the corpus "
                        "was imported with --math, so that the full debate's verdicts are the "
                        "import's")
    p.add_argument("--chunk-rows", type=positive_int, default=1 << 18,
                   help="records per chunk (default 262144); every metric is a sum, so "
                        "memory is bounded by the chunk")
    p.add_argument("-o", "--output", metavar="REPLAY.parquet",
                   help="write one row per policy and parameter point")
    p.add_argument("--plot", metavar="FIG.png",
                   help="accuracy against mean calls with the Pareto front (needs matplotlib)")


def _policies(args: argparse.Namespace):
    from fastuq.decisions.replay import Policy

    names = [x.strip() for item in (args.policy or ["fixed,uaad"]) for x in item.split(",")]
    thresholds = None
    if args.thresholds is not None:
        text = args.thresholds
        thresholds = int(text) if text.strip().isdigit() else grid(text)
    out = []
    used_grid = used_th = False
    for name in names:
        if name.startswith("trace:"):
            out.append(Policy("trace", estimator=name.partition(":")[2], thresholds=thresholds))
            used_th = True
        elif name in ("uaad", "uaad_route"):
            out.append(Policy(name, tau_c=args.tau_c, epsilon=args.epsilon))
            used_grid = True
        elif name == "trace":
            raise ValueError("policy trace needs an estimator: trace:sauce, say")
        else:
            out.append(Policy(name))
    if (args.tau_c or args.epsilon) and not used_grid:
        raise ValueError("--tau-c / --epsilon apply to the uaad policies only")
    if thresholds is not None and not used_th:
        raise ValueError("--thresholds applies to trace:ESTIMATOR policies only")
    return out


def _describe(row: dict) -> str:
    p = row["policy"]
    if p == "fixed":
        return f"fixed rounds={row['rounds']}"
    if p in ("uaad", "uaad_route"):
        return f"{p} tau_c={row['tau_c']:.4g} epsilon={row['epsilon']:.4g}"
    if p == "trace":
        return f"trace:{row['estimator']} threshold={row['threshold']:.6g}"
    return p


def run(args: argparse.Namespace) -> int:
    """Run ``fastuq replay``; returns the exit status."""
    from fastuq.io.writers import cli_check_outputs

    prog = "fastuq replay"
    source = cs.corpus_source(prog, args)
    if source is None:
        return 2
    cs.check_source(args, source)
    rc = cli_check_outputs(prog, [source], [("-o", args.output, "parquet"),
                                            ("--plot", args.plot, "png")])
    if rc is not None:
        return rc
    try:
        from fastuq.decisions.replay import plot_replay, replay

        if args.plot:
            try:
                import matplotlib  # noqa: F401
            except ImportError:
                raise ValueError("--plot needs matplotlib: pip install 'fastuq[plot]'") from None
        params = cs.parse_params(args.param)
        result = replay(source, _policies(args), params=params, protocol=args.protocol,
                        calls=args.calls, dtype=args.dtype, backend=args.backend,
                        chunk_rows=args.chunk_rows,
                        observation_noise=args.observation_noise, check=args.check,
                        on_error=args.on_error, math=args.math)
    except (ValueError, TypeError, FileNotFoundError, ImportError) as exc:
        return cs.fail(prog, exc)
    cs.report_skipped(prog, result.skipped,
                      cs.save_skipped(args, result.skipped, source, args.output))
    full = result.full
    print(f"{Path(source).name}: {full['n']:,} debates; full debate: accuracy "
          f"{full['accuracy']:.4f}, {full['calls_mean']:.3f} calls per question "
          f"({full['calls_total']:,.0f} in all), {full['flips']:,} flips")
    front = result.front().to_pylist()
    print(f"Pareto front (accuracy vs mean calls), {len(front)} of "
          f"{result.table.num_rows:,} points:")
    width = max((len(_describe(r)) for r in front), default=10)
    print(f"  {'policy':<{width}}  accuracy  calls/q  saved    flips")
    for r in front:
        saved = r["calls_saved_frac"]
        tied = f"  (+{r['tied'] - 1:,} tied)" if r["tied"] > 1 else ""
        print(f"  {_describe(r):<{width}}  {r['accuracy']:.4f}    {r['calls_mean']:7.3f}  "
              f"{'n/a' if saved is None or math.isnan(saved) else f'{saved:6.1%}'}  "
              f"{r['flips']:>6,}{tied}")
    for note in result.notes:
        print(f"note: {note}", file=sys.stderr)
    try:
        if args.output:
            from fastuq.io.writers import atomic_write_parquet

            atomic_write_parquet(result.table, args.output)
            print(f"wrote {args.output}", file=sys.stderr)
        if args.plot:
            plot_replay(result, args.plot,
                        title=f"budget-policy replay: {Path(source).name}, n = {full['n']:,}")
            print(f"wrote {args.plot}", file=sys.stderr)
    except OSError as exc:
        return cs.fail(prog, f"cannot write: {exc}", 1)
    return 0
