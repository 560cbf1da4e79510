"""``fastuq gate``: calibrate a pass/fail threshold on a score column whose failure rate among
passed items is at most alpha with confidence 1 - delta
(:func:`fastuq.decisions.threshold.calibrate_threshold`).

Exit status: 0 on success (also when no threshold passes the test: the gate then passes
nothing, and says so), 2 when the calibration could not be done (bad input, missing labels, a
failed join, a refused output).
"""

from __future__ import annotations

import argparse
import math
import sys
from pathlib import Path

from fastuq.cli import options as cs
from fastuq.cli import positive_int


def _open_fraction(text: str) -> float:
    """argparse type: a number strictly between 0 and 1."""
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a number in (0, 1), got {text!r}") from None
    if not 0 < value < 1:
        raise argparse.ArgumentTypeError(f"must be in (0, 1), got {value}")
    return value


def add_parser(sub) -> None:
    """Register ``gate`` on the subparsers ``sub``."""
    p = cs.subcommand(
        sub, "gate",
        help="calibrate a score threshold whose failure rate among passed items is <= alpha",
        description=(
            "Calibrate a gate on score column --score against CORPUS's 'correct' labels: the "
            "loosest threshold such that the failure rate (correct false) among the items it "
            "passes is <= --alpha with confidence 1 - --delta (fixed-sequence testing over the "
            "distinct score values, strictest first, with a one-sided Clopper-Pearson bound). "
            "Items pass iff score <= threshold (uncertainty scores; --higher-passes: score >= "
            "threshold, for confidence scores). Prints the threshold, n, pass rate and failure "
            "rate; -o writes the verdict per trajectory. Exit status: 0 ok, 2 error."
        ),
        epilog="with --scores from a 'score --on-error skip' run, --skipped PATH names that "
               "run's skipped list (default: SCORES.skipped.jsonl when it exists): corpus "
               "trajectories listed there are left out and counted",
    )
    p.add_argument("corpus", metavar="CORPUS",
                   help="labelled corpus (Parquet, JSONL or JSONL.gz); without --scores it "
                        "must hold the score column itself (Parquet, CSV or Arrow IPC)")
    p.add_argument("--scores", metavar="SCORES",
                   help="scores file (Parquet, CSV or Arrow IPC; trajectory_id + score "
                        "columns, e.g. from 'fastuq score'), joined to CORPUS by trajectory_id")
    p.add_argument("--score", required=True, metavar="COLUMN",
                   help="the score column to gate on (e.g. sauce); 'consistency' without "
                        "--scores reads the corpus's consistency column, or, where it has "
                        "none, computes the consistency gate's score from a "
                        "self-consistency corpus (texts: round 0 = the k samples; "
                        "final_answer = the candidate), and passes high scores")
    p.add_argument("--alpha", type=_open_fraction, default=0.1,
                   help="target failure rate among passed items (default 0.1)")
    p.add_argument("--delta", type=_open_fraction, default=0.05,
                   help="allowed probability that the guarantee fails (default 0.05)")
    p.add_argument("--higher-passes", action="store_true",
                   help="pass iff score >= threshold (a confidence score) instead of score <= "
                        "threshold (an uncertainty score, the default)")
    p.add_argument("-o", "--output", metavar="VERDICTS.parquet",
                   help="write trajectory_id, the score and passed (bool) per trajectory")
    p.add_argument("--skipped", metavar="PATH",
                   help="skipped list of the 'score --on-error skip' run that wrote --scores")
    p.add_argument("--chunk-rows", type=positive_int, default=1 << 18,
                   help="records per chunk when reading (default 262144)")
    add_procedure(p)


def _levels(text: str) -> int | str:
    """argparse type: an integer >= 1 or 'distinct'."""
    return text if text == "distinct" else positive_int(text)


def add_procedure(p: argparse.ArgumentParser) -> None:
    """Add ``--procedure``, ``--levels`` and ``--starts`` (the threshold procedure)."""
    from fastuq.decisions.threshold import (
        DEFAULT_LEVELS,
        DEFAULT_PROCEDURE,
        DEFAULT_STARTS,
        GATE_PROCEDURES,
    )

    p.add_argument("--procedure", choices=GATE_PROCEDURES, default=DEFAULT_PROCEDURE,
                   help="how the family-wise error is held over the candidate levels "
                        f"(default {DEFAULT_PROCEDURE}: --starts fixed sequences at delta / "
                        "starts; fixed_sequence: one, from the strictest; bonferroni: every "
                        "level at delta / levels)")
    p.add_argument("--levels", type=_levels, default=DEFAULT_LEVELS, metavar="M",
                   help=f"candidate pass fractions 1/M..M/M of the scores (default "
                        f"{DEFAULT_LEVELS}), or 'distinct': every distinct score")
    p.add_argument("--starts", type=positive_int, default=DEFAULT_STARTS,
                   help=f"starts of --procedure multi_start (default {DEFAULT_STARTS})")


def procedure_line(gate) -> str:
    """One line naming a calibration's procedure."""
    grid = ("every distinct score" if gate.levels == "distinct"
            else f"{gate.levels} pass-fraction levels")
    how = {"multi_start": f"multi-start fixed sequence ({gate.starts} starts, each at delta / "
                          f"{gate.starts})",
           "fixed_sequence": "fixed sequence from the strictest level",
           "bonferroni": "Bonferroni over the levels"}[gate.procedure]
    return f"procedure: {how}; candidates: {grid}; exact binomial (Clopper-Pearson) test"


def print_table(gate, stream=None) -> None:
    """The per-level table of a :class:`GateCalibration`, one line per level."""
    t = gate.table
    print("level  pass_frac  threshold         passed  failures  p_value    bound   "
          "tested rejected", file=stream)
    for i in range(len(t["level"])):
        frac = t["pass_fraction"][i]
        print(f"{t['level'][i]:>5}  {'-' if math.isnan(frac) else f'{frac:.4f}':>9}  "
              f"{t['threshold'][i]:<16.10g}  {t['passed'][i]:>6}  {t['failures'][i]:>8}  "
              f"{t['p_value'][i]:<9.3g}  {t['bound'][i]:.4f}  "
              f"{'yes' if t['tested'][i] else 'no':>6} "
              f"{'yes' if t['rejected'][i] else 'no':>8}", file=stream)


def _fmt(x: float) -> str:
    return "n/a" if math.isnan(x) else f"{x:.4f}"


#: File endings of the tables gate reads a score column from (without --scores).
_TABLE_ENDINGS = (".parquet", ".pq", ".csv", ".arrow", ".feather", ".ipc")


def _table_columns(source: Path) -> list[str]:
    """The columns of a Parquet, CSV or Arrow IPC file (``[]`` for any other file: a JSONL
    corpus is not read as a table of scores)."""
    name = source.name.lower()
    if not name.endswith(_TABLE_ENDINGS):
        return []
    import polars as pl

    try:
        if name.endswith(".csv"):
            return list(pl.scan_csv(source).collect_schema().names())
        if name.endswith((".arrow", ".feather", ".ipc")):
            return list(pl.scan_ipc(source).collect_schema().names())
        return list(pl.scan_parquet(source).collect_schema().names())
    except (pl.exceptions.PolarsError, OSError) as exc:
        raise ValueError(f"{source}: cannot read its columns: {str(exc).splitlines()[0]}"
                         ) from None


def _require_column(source: Path, column: str) -> None:
    """ValueError, saying how to get the column, unless the corpus file holds ``column``
    (gating without --scores reads it from the corpus)."""
    name = source.name.lower()
    columns = _table_columns(source)
    if column in columns:
        return
    from fastuq.engine.registry import ESTIMATORS

    method = next((e.name for e in ESTIMATORS.values() if column in e.outputs), None)
    if name.endswith(_TABLE_ENDINGS):
        head = f"{source}: no score column {column!r}"
    else:
        head = (f"{source}: without --scores the corpus itself must hold the score column, "
                f"as a Parquet, CSV or Arrow IPC table; this is not one")
    if method is not None:
        how = (f"{column!r} is a score of fastuq's {method!r} estimator: score the corpus "
               f"first, then gate on the scores: fastuq score {source} --method {method} "
               f"-o scores.parquet && fastuq gate {source} --scores scores.parquet --score "
               f"{column}")
    else:
        how = (f"pass --scores FILE holding it (Parquet, CSV or Arrow IPC: trajectory_id "
               f"and a {column!r} column); no fastuq estimator writes a column of that name")
    raise ValueError(f"{head}; {how}")


def run(args: argparse.Namespace) -> int:
    """Run ``fastuq gate``; returns the exit status (0 ok, 2 error)."""
    from fastuq import evaluation as ev
    from fastuq.io.writers import cli_check_outputs

    prog = "fastuq gate"
    source = Path(args.corpus)
    # with --scores, --skipped is read (the score run's list): an input too
    rc = cli_check_outputs(prog, [source, args.scores, args.skipped],
                           [("-o", args.output, "parquet")])
    if rc is not None:
        return rc
    skipped = 0
    try:
        labels = ev.read_labels(source, chunk_rows=args.chunk_rows)
        if args.scores:
            scores = ev.read_scores(args.scores, [args.score])
        elif args.score == "consistency":
            # the consistency gate's own score, a confidence: the corpus's column when it
            # holds one (a scored file), else computed from its texts
            if "consistency" in _table_columns(source):
                scores = ev.read_scores(source, ["consistency"])
            else:
                from fastuq.decisions.consistency import corpus_consistency

                scores = corpus_consistency(source, chunk_rows=args.chunk_rows)
            args.higher_passes = True
        else:
            _require_column(source, args.score)
            scores = ev.read_scores(source, [args.score])
        if args.scores:
            listing = cs.skipped_path(args, source, args.scores)
            if args.skipped or listing.exists():
                kept = ev.drop_skipped(labels, scores, ev.read_skipped(listing))
                skipped = labels.height - kept.height
                labels = kept
        elif args.skipped:
            raise ValueError("--skipped only applies with --scores")
        joined = ev.join_labels(labels, scores)
        from fastuq.decisions.threshold import calibrate_threshold

        values = joined[args.score].cast(float).fill_null(math.nan).to_numpy()
        gate = calibrate_threshold(values, joined["correct"].to_numpy(), args.alpha,
                                   args.delta, higher_passes=args.higher_passes,
                                   procedure=args.procedure, levels=args.levels, starts=args.starts)
    except (ValueError, FileNotFoundError) as exc:
        return cs.fail(prog, exc)
    if skipped:
        print(f"{prog}: skipped {skipped:,} record(s) listed in the skipped list; gating the "
              f"{joined.height:,} scored", file=sys.stderr)

    op = ">=" if gate.higher_passes else "<="
    print(f"{source.name}: {gate.n_calibration:,} trajectories, score {args.score!r}, "
          f"alpha {gate.alpha:g}, delta {gate.delta:g}")
    print(procedure_line(gate))
    print_table(gate)
    if gate.passes_any:
        print(f"threshold: pass iff {args.score} {op} {gate.threshold:.10g}")
    else:
        print(f"threshold: none; {gate.reason} (the gate passes nothing)")
    print(f"passed: {gate.n_passed:,} of {gate.n_calibration:,} (pass rate "
          f"{gate.pass_rate:.4f})")
    print(f"failures among passed: {gate.failures:,} (failure rate "
          f"{_fmt(gate.failure_rate)}, {1 - gate.delta:g} upper bound "
          f"{_fmt(gate.upper_bound)})")

    if args.output:
        import pyarrow as pa

        from fastuq.io.writers import atomic_write_parquet

        table = pa.table({
            "trajectory_id": pa.array(joined["trajectory_id"].to_list(), pa.string()),
            args.score: pa.array(values, pa.float64()),
            "passed": pa.array(gate.passes(values), pa.bool_()),
        })
        try:
            atomic_write_parquet(table, args.output)
        except OSError as exc:
            return cs.fail(prog, f"cannot write {args.output}: {exc}", 1)
        print(f"wrote {args.output}", file=sys.stderr)
    return 0
