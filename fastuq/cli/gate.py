"""``fastuq gate``: a pass/fail threshold on a score column whose failure rate among passed
items is at most alpha with confidence 1 - delta
(:func:`fastuq.decisions.threshold.calibrate_threshold`), in three forms:

* ``fastuq gate CORPUS --score COLUMN``: calibrate and print (``-o``: the verdicts);
* ``fastuq gate calibrate CORPUS --score COLUMN -o gate.json``: calibrate and write the gate
  file (:class:`fastuq.decisions.gatefile.Gate`), scoring CORPUS with the column's estimator
  where it lacks the column;
* ``fastuq gate apply gate.json NEW -o verdicts.parquet``: pass/fail per trajectory of NEW,
  scored with the gate's estimator and parameters where it lacks the column.

Exit status: 0 on success (also when no threshold is valid: the gate then passes nothing, and
says so), 2 when the input or the options are bad (missing labels, a failed join, a bad gate
file, a refused output), 1 when writing failed.
"""

from __future__ import annotations

import argparse
import json
import math
import sys
from pathlib import Path

from fastuq.cli import options as cs
from fastuq.cli import positive_int
from fastuq.decisions.threshold import (
    DEFAULT_LEVELS,
    DEFAULT_PROCEDURE,
    DEFAULT_STARTS,
    GATE_PROCEDURES,
)


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
            "Calibrate a gate on score column --score against CORPUS's 'correct' labels: a "
            "threshold such that the failure rate (correct false) among the items it passes "
            "is <= --alpha with confidence 1 - --delta (candidate pass fractions of the "
            "scores fixed before the labels, each tested with the exact binomial tail, the "
            "family-wise error held by --procedure). Items pass iff score <= threshold "
            "(uncertainty scores; --higher-passes: score >= threshold, for confidence "
            "scores). Prints the procedure, the per-level table, the threshold, n, pass rate "
            "and failure rate; -o writes the verdict per trajectory. 'gate calibrate CORPUS "
            "-o gate.json' writes the gate to a file instead, 'gate apply gate.json NEW -o "
            "verdicts.parquet' applies it. Exit status: 0 ok, 2 bad input, 1 a failed write."
        ),
        epilog="with --scores from a 'score --on-error skip' run, --skipped PATH names that "
               "run's skipped list (default: SCORES.skipped.jsonl when it exists): corpus "
               "trajectories listed there are left out and counted",
    )
    p.usage = ("fastuq gate [calibrate] CORPUS --score COLUMN [options]\n"
               "       fastuq gate apply GATE.json NEW -o VERDICTS.parquet [options]")
    p.add_argument("corpus", metavar="CORPUS",
                   help="labelled corpus (Parquet, JSONL or JSONL.gz); without --scores it "
                        "must hold the score column itself (Parquet, CSV or Arrow IPC), "
                        "except with 'calibrate', which scores it with the column's estimator")
    p.add_argument("more", nargs="*", metavar="PATH", help=argparse.SUPPRESS)
    p.add_argument("--scores", metavar="SCORES",
                   help="scores file (Parquet, CSV or Arrow IPC; trajectory_id + score "
                        "columns, e.g. from 'fastuq score'), joined to CORPUS by trajectory_id")
    p.add_argument("--score", metavar="COLUMN",
                   help="the score column to gate on (e.g. sauce); 'consistency' without "
                        "--scores reads the corpus's consistency column, or, where it has "
                        "none, computes the consistency gate's score from a "
                        "self-consistency corpus (texts: round 0 = the k samples; "
                        "final_answer = the candidate), and passes high scores")
    p.add_argument("--alpha", type=_open_fraction,
                   help="target failure rate among passed items (default 0.1)")
    p.add_argument("--delta", type=_open_fraction,
                   help="allowed probability that the guarantee fails (default 0.05)")
    p.add_argument("--higher-passes", action="store_true",
                   help="pass iff score >= threshold (a confidence score) instead of score <= "
                        "threshold (an uncertainty score, the default)")
    p.add_argument("-o", "--output", metavar="PATH",
                   help="write trajectory_id, the score and passed (bool) per trajectory "
                        "(Parquet); with 'calibrate': the gate file (JSON)")
    p.add_argument("--by", choices=("protocol",),
                   help="one threshold per protocol, each with its own guarantee (for "
                        "mixed corpora, whose protocols score on different scales)")
    p.add_argument("--json", metavar="OUT", dest="json_out",
                   help="also write the numbers as JSON (the gate; with 'apply': the counts "
                        "per group)")
    cs.add_param(p)
    cs.add_source(p)
    cs.add_noise(p)
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
    p.add_argument("--procedure", choices=GATE_PROCEDURES,
                   help="how the family-wise error is held over the candidate levels "
                        f"(default {DEFAULT_PROCEDURE}: --starts fixed sequences at delta / "
                        "starts; fixed_sequence: one, from the strictest; bonferroni: every "
                        "level at delta / levels)")
    p.add_argument("--levels", type=_levels, metavar="M",
                   help=f"candidate pass fractions 1/M..M/M of the scores (default "
                        f"{DEFAULT_LEVELS}), or 'distinct': every distinct score")
    p.add_argument("--starts", type=positive_int,
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
    """Run ``fastuq gate`` (and ``gate calibrate``, ``gate apply``); returns the exit
    status (0 ok, 2 bad input or options, 1 a failed write)."""
    prog = "fastuq gate"
    if args.corpus in ("calibrate", "apply"):
        mode, prog = args.corpus, f"{prog} {args.corpus}"
        want = ["CORPUS"] if mode == "calibrate" else ["GATE.json", "NEW"]
        if len(args.more) != len(want):
            return cs.fail(prog, f"expected {' '.join(want)} after '{mode}', got "
                                 f"{len(args.more)} path(s)")
    elif args.more:
        return cs.fail(prog, f"unexpected argument(s) {' '.join(args.more)} (to apply a gate "
                             f"file: fastuq gate apply GATE.json NEW -o VERDICTS.parquet)")
    else:
        mode = "gate"
    problem = _option_problem(args, mode)
    if problem is not None:
        return cs.fail(prog, problem)
    cs.check_source(args, {"gate": args.corpus, "calibrate": args.more[:1],
                           "apply": args.more[1:]}[mode])
    if mode == "apply":
        return _apply(args, prog)
    return _calibrate(args, prog, mode)


#: Options of calibration that 'gate apply' takes from the gate file, and their defaults.
_CALIBRATION_DEFAULTS = {"alpha": 0.1, "delta": 0.05, "procedure": DEFAULT_PROCEDURE,
                         "levels": DEFAULT_LEVELS, "starts": DEFAULT_STARTS}


def _option_problem(args: argparse.Namespace, mode: str) -> str | None:
    """An option that does not apply to ``mode``, or a missing one, as an error message."""
    if mode == "apply":
        given = [f"--{k.replace('_', '-')}" for k in ("score", "by", "skipped", *
                                                      _CALIBRATION_DEFAULTS)
                 if getattr(args, k) is not None]
        given += ["--higher-passes"] * bool(args.higher_passes)
        given += ["--param"] * bool(args.param)
        given += ["--observation-noise"] * (args.observation_noise is not None)
        if given:
            return (f"{', '.join(given)} do(es) not apply to 'gate apply': the gate file "
                    f"fixes the score, the procedure, the grouping and the estimator's "
                    f"parameters")
        if not args.output:
            return "-o VERDICTS.parquet is required"
        return None
    if args.score is None:
        return "--score COLUMN is required"
    if mode == "gate" and (args.param or args.observation_noise is not None):
        return ("--param and --observation-noise apply to 'gate calibrate' (the estimator's "
                "parameters, recorded in the gate file), not to 'gate CORPUS'")
    if mode == "calibrate" and not args.output:
        return "-o GATE.json is required (the gate file)"
    for name, default in _CALIBRATION_DEFAULTS.items():
        if getattr(args, name) is None:
            setattr(args, name, default)
    return None


def _estimator_of(column: str) -> str | None:
    """The registered estimator whose outputs hold ``column`` (``"consistency"`` for the
    consistency gate's score), else None."""
    if column == "consistency":
        return "consistency"
    from fastuq.engine.registry import ESTIMATORS

    return next((e.name for e in ESTIMATORS.values() if column in e.outputs), None)


def _check_estimator(estimator: str | None, params: dict, where: str) -> None:
    """ValueError naming ``where`` unless ``params`` are parameters ``estimator`` takes."""
    if not params:
        return
    if estimator in (None, "consistency"):
        raise ValueError(f"{where}: parameters {sorted(params)} given, but the score is not "
                         f"computed by a parameterised fastuq estimator")
    from fastuq.engine.registry import check_params

    try:
        check_params(params, [estimator])
    except (TypeError, ValueError) as exc:
        raise ValueError(f"{where}: estimator {estimator!r}: {exc}") from None


def _score_with(source: Path, column: str, estimator: str, params: dict,
                noise: float | None, chunk_rows: int):
    """``trajectory_id`` + ``column`` of ``source`` scored by ``estimator`` (float64)."""
    import tempfile

    from fastuq import evaluation as ev

    if estimator == "consistency":
        from fastuq.decisions.consistency import corpus_consistency

        return corpus_consistency(source, chunk_rows=chunk_rows)
    from fastuq.engine.files import score_file

    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "scores.parquet"
        score_file(source, out, methods=[estimator], params=params or None,
                   observation_noise=noise, dtype="float64", chunk_rows=chunk_rows)
        return ev.read_scores(out, [column])


def _calibrate(args: argparse.Namespace, prog: str, mode: str) -> int:
    """``fastuq gate CORPUS`` (print; ``-o`` verdicts) and ``gate calibrate`` (gate file)."""
    from fastuq import evaluation as ev
    from fastuq.decisions.gatefile import Gate
    from fastuq.io.writers import cli_check_outputs

    source = Path(args.more[0] if mode == "calibrate" else args.corpus)
    kind = "json" if mode == "calibrate" else "parquet"
    # with --scores, --skipped is read (the score run's list): an input too
    rc = cli_check_outputs(prog, [source, args.scores, args.skipped],
                           [("-o", args.output, kind), ("--json", args.json_out, "json")])
    if rc is not None:
        return rc
    skipped = 0
    column = args.score
    estimator = _estimator_of(column)
    try:
        params = cs.parse_params(args.param)
        _check_estimator(estimator, params, "--param")
        labels = ev.read_labels(source, chunk_rows=args.chunk_rows)
        if args.scores:
            scores = ev.read_scores(args.scores, [column])
        elif column == "consistency":
            # the consistency gate's own score, a confidence: the corpus's column when it
            # holds one (a scored file), else computed from its texts
            if "consistency" in _table_columns(source):
                scores = ev.read_scores(source, ["consistency"])
            else:
                from fastuq.decisions.consistency import corpus_consistency

                scores = corpus_consistency(source, chunk_rows=args.chunk_rows)
            args.higher_passes = True
        elif mode == "calibrate" and estimator is not None and (
                column not in _table_columns(source)):
            scores = _score_with(source, column, estimator, params, args.observation_noise,
                                 args.chunk_rows)
        else:
            _require_column(source, column)
            scores = ev.read_scores(source, [column])
        if args.scores:
            listing = cs.skipped_path(args, source, args.scores)
            if args.skipped or listing.exists():
                kept = ev.drop_skipped(labels, scores, ev.read_skipped(listing))
                skipped = labels.height - kept.height
                labels = kept
        elif args.skipped:
            raise ValueError("--skipped only applies with --scores")
        joined = ev.join_labels(labels, scores)
        groups = None
        if args.by:
            if "protocol" not in joined.columns:
                raise ValueError(f"{source}: --by protocol: the corpus has no protocol field")
            groups = joined["protocol"].to_numpy()
            missing = joined["protocol"].is_null().to_numpy()
            if missing.any():
                i = int(missing.argmax())
                raise ValueError(f"{source}: trajectory {joined['trajectory_id'][i]!r}: "
                                 f"field protocol is null (--by protocol needs every one)")
        values = joined[column].cast(float).fill_null(math.nan).to_numpy()
        gate = Gate(args.alpha, args.delta, score=column, higher_passes=args.higher_passes,
                    procedure=args.procedure, levels=args.levels, starts=args.starts,
                    estimator=estimator, params=params,
                    observation_noise=args.observation_noise)
        gate.calibrate(values, joined["correct"].to_numpy(), groups=groups, by=args.by)
    except (ValueError, FileNotFoundError) as exc:
        return cs.fail(prog, exc)
    if skipped:
        print(f"{prog}: skipped {skipped:,} record(s) listed in the skipped list; gating the "
              f"{joined.height:,} scored", file=sys.stderr)
    for group, cal in gate.calibrations_.items():
        _print_calibration(source, column, cal, group, args.by)
    try:
        if args.output and mode == "calibrate":
            gate.save(args.output)
            print(f"wrote {args.output}", file=sys.stderr)
        elif args.output:
            _write_verdicts(args.output, joined, column, values,
                            gate.apply(values, groups=groups), args.by)
            print(f"wrote {args.output}", file=sys.stderr)
        if args.json_out:
            from fastuq.io.writers import atomic_write_text

            atomic_write_text(args.json_out, json.dumps(gate.to_dict(), indent=1,
                                                        allow_nan=False) + "\n")
            print(f"wrote {args.json_out}", file=sys.stderr)
    except OSError as exc:
        return cs.fail(prog, f"cannot write: {exc}", 1)
    return 0


def _print_calibration(source: Path, column: str, gate, group, by) -> None:
    """The procedure, the per-level table and the outcome of one calibration."""
    op = ">=" if gate.higher_passes else "<="
    which = "" if group is None else f" [{by} {group}]"
    print(f"{source.name}{which}: {gate.n_calibration:,} trajectories, score {column!r}, "
          f"alpha {gate.alpha:g}, delta {gate.delta:g}")
    print(procedure_line(gate))
    print_table(gate)
    if gate.passes_any:
        print(f"threshold: pass iff {column} {op} {gate.threshold:.10g}")
    else:
        print(f"threshold: none; {gate.reason} (the gate passes nothing)")
    print(f"passed: {gate.n_passed:,} of {gate.n_calibration:,} (pass rate "
          f"{gate.pass_rate:.4f})")
    level = gate.table["level_delta"][0] if gate.table.get("level_delta") else gate.delta
    print(f"failures among passed: {gate.failures:,} (failure rate "
          f"{_fmt(gate.failure_rate)}, upper bound {_fmt(gate.upper_bound)} at confidence "
          f"{1 - level:.6g})")


def _write_verdicts(path: str, frame, column: str, values, passed, by) -> None:
    """trajectory_id, (protocol,) the score and passed, atomically as Parquet."""
    import pyarrow as pa

    from fastuq.io.writers import atomic_write_parquet

    cols = {"trajectory_id": pa.array(frame["trajectory_id"].to_list(), pa.string())}
    if by:
        cols[by] = pa.array(frame[by].to_list(), pa.string())
    cols[column] = pa.array(values, pa.float64())
    cols["passed"] = pa.array(passed, pa.bool_())
    atomic_write_parquet(pa.table(cols), path)


def _read_ids(source: Path, chunk_rows: int):
    """``trajectory_id`` and, where the corpus has them, ``protocol`` and ``correct`` of every
    record, in input order (no labels needed)."""
    import polars as pl
    import pyarrow as pa

    from fastuq.io.readers import iter_chunks

    tables = [chunk.table for chunk in iter_chunks(
        source, columns=[], optional_columns=["protocol", "correct"], chunk_rows=chunk_rows,
        validate=False)]
    if not tables:
        raise ValueError(f"{source}: the corpus is empty; nothing to apply the gate to")
    frame = pl.from_arrow(pa.concat_tables(tables, promote_options="default"))
    if frame["trajectory_id"].is_null().any():
        raise ValueError(f"{source}: a record has no trajectory_id (row "
                         f"{int(frame['trajectory_id'].is_null().arg_max())})")
    dup = frame["trajectory_id"].is_duplicated()
    if dup.any():
        raise ValueError(f"{source}: trajectory {frame['trajectory_id'][int(dup.arg_max())]!r}"
                         f" appears twice")
    return frame


def _apply(args: argparse.Namespace, prog: str) -> int:
    """``fastuq gate apply GATE.json NEW -o VERDICTS.parquet``."""
    import polars as pl

    from fastuq import evaluation as ev
    from fastuq.decisions.gatefile import Gate
    from fastuq.io.writers import atomic_write_text, cli_check_outputs

    gate_path, new = Path(args.more[0]), Path(args.more[1])
    rc = cli_check_outputs(prog, [gate_path, new, args.scores],
                           [("-o", args.output, "parquet"), ("--json", args.json_out, "json")])
    if rc is not None:
        return rc
    try:
        gate = Gate.load(gate_path)
        column = gate.score
        if column is None:
            raise ValueError(f"{gate_path}: the gate names no score column (field 'score')")
        frame = _read_ids(new, args.chunk_rows)
        if args.scores:
            scores = ev.read_scores(args.scores, [column])
        elif column in _table_columns(new):
            scores = ev.read_scores(new, [column])
        elif gate.estimator is None:
            raise ValueError(f"{new}: no score column {column!r}, and {gate_path} names no "
                             f"estimator to compute it: pass --scores FILE holding it")
        else:
            _check_estimator(gate.estimator, gate.params, f"{gate_path}: estimator params")
            scores = _score_with(new, column, gate.estimator, gate.params,
                                 gate.observation_noise, args.chunk_rows)
        joined = frame.join(scores.select("trajectory_id", column), on="trajectory_id",
                            how="left", maintain_order="left")
        lacking = joined[column].is_null()
        if lacking.any():
            i = int(lacking.arg_max())
            raise ValueError(f"trajectory {joined['trajectory_id'][i]!r}: no {column!r} "
                             f"score for it")
        values = joined[column].cast(pl.Float64).to_numpy()
        groups = None
        if gate.by_ is not None:
            if gate.by_ not in joined.columns or joined[gate.by_].is_null().any():
                i = (int(joined[gate.by_].is_null().arg_max()) if gate.by_ in joined.columns
                     else 0)
                raise ValueError(f"{new}: trajectory {joined['trajectory_id'][i]!r}: field "
                                 f"{gate.by_} is missing; {gate_path} has one threshold per "
                                 f"{gate.by_}")
            groups = joined[gate.by_].to_numpy()
        passed = gate.apply(values, groups=groups, ids=joined["trajectory_id"].to_numpy())
    except (ValueError, FileNotFoundError) as exc:
        return cs.fail(prog, exc)
    summary = _apply_summary(gate, joined, groups, passed)
    for row in summary["groups"]:
        which = "" if row["group"] is None else f" [{gate.by_} {row['group']}]"
        line = (f"{new.name}{which}: passed {row['n_passed']:,} of {row['n']:,} (pass rate "
                f"{row['pass_rate']:.4f})")
        if row.get("failures") is not None:
            line += (f"; failures among passed {row['failures']:,} (failure rate "
                     f"{_fmt(row['failure_rate'] if row['n_passed'] else math.nan)})")
        print(line)
    try:
        _write_verdicts(args.output, joined, column, values, passed, gate.by_)
        print(f"wrote {args.output}", file=sys.stderr)
        if args.json_out:
            atomic_write_text(args.json_out, json.dumps(summary, indent=1) + "\n")
            print(f"wrote {args.json_out}", file=sys.stderr)
    except OSError as exc:
        return cs.fail(prog, f"cannot write: {exc}", 1)
    return 0


def _apply_summary(gate, joined, groups, passed) -> dict:
    """Counts per group (and failures where NEW has labels), for printing and --json."""
    import numpy as np

    labels = (joined["correct"].cast(bool).to_numpy() if "correct" in joined.columns
              and joined["correct"].null_count() == 0 else None)
    rows = []
    for name, cal in gate.calibrations_.items():
        keep = np.ones(len(passed), bool) if groups is None else groups == name
        n, k = int(keep.sum()), int(passed[keep].sum())
        row = {"group": name, "threshold": cal.threshold if cal.passes_any else None,
               "n": n, "n_passed": k, "pass_rate": k / n if n else 0.0}
        if labels is not None:
            f = int((~labels[keep & passed]).sum())
            row["failures"] = f
            row["failure_rate"] = f / k if k else None
        rows.append(row)
    return {"score": gate.score, "by": gate.by_, "n": len(passed),
            "n_passed": int(passed.sum()), "groups": rows}
