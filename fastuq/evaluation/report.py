"""One self-contained HTML page about a labelled corpus: what ``fastuq report`` writes.

>>> from fastuq.evaluation.report import build_report, write_report
>>> report = write_report("rollouts.parquet", "report.html")      # build, render, write
>>> report.pooled                                                 # the eval table (Polars)

The page holds, for a reader who did not run anything:

* the corpus summary: trajectories, questions, accuracy, rounds and team sizes, pooled and per
  protocol, and the estimators that could not be scored (with the input each one lacks);
* every estimator's metrics (AUROC, AUARC, PRR, Brier-Platt, ECE, accuracy, n) pooled and per
  protocol -- the numbers :func:`fastuq.evaluation.evaluation_tables` gives, so the same as
  ``fastuq eval --by protocol`` prints for the same corpus and options;
* a risk-coverage plot and one reliability diagram per estimator, pooled and per protocol (the
  plots of ``fastuq eval --plots``, :func:`fastuq.evaluation.plot_risk_coverage` and
  :func:`fastuq.evaluation.plot_reliability`);
* with ``sweep_grid``, the SAUCE sweep heatmap of :func:`fastuq.sweeps.heatmap` and the best
  grid point against the presets (optionally cross-validated);
* every number again, in full precision, as JSON in ``<script type="application/json"
  id="fastuq-report-data">`` (the keys of ``fastuq eval --json`` where they overlap).

Plots are PNG embedded as ``data:`` URIs; the page loads nothing from anywhere (no scripts,
fonts or style sheets from outside), so it can be mailed or archived as one file. Writing is
atomic: a failed run leaves no file behind.

This module builds the :class:`Report` and writes it; :mod:`fastuq.evaluation.report_html`
holds the report's data (:class:`Report`, :class:`Figure`, :class:`SweepSection`) and
renders it as the page.
"""

from __future__ import annotations

import datetime as _dt
import os
import tempfile
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import polars as pl

from fastuq.evaluation.report_html import (
    LOWER_IS_BETTER,
    REPORT_SWEEP_METRICS,
    CalibrationSection,
    Figure,
    Report,
    SweepSection,
    render_html,
)

__all__ = ["LOWER_IS_BETTER", "Figure", "Report", "SweepSection", "build_report", "render_html",
           "write_report"]


#: The group name of trajectories in a corpus without a ``protocol`` column.
_NO_PROTOCOL = "(no protocol)"


# ------------------------------------------------------------------------------- building



def _display_name(source: Any, name: str | None) -> tuple[str, str]:
    """``(display name, source description)`` of what is read."""
    if isinstance(source, str | os.PathLike):
        path = Path(source)
        from fastuq.cli import sample_corpus_path

        shown = path.name or str(path)
        if path.resolve() == sample_corpus_path().resolve():
            shown = f"{shown} (the bundled sample corpus)"
        return name or shown, str(path.resolve())
    if name is None:
        raise ValueError("name= is required when the corpus is not a file or folder "
                         "(it titles the page and every plot caption)")
    return name, f"in-memory {type(source).__name__}"


def _png(draw, *args: Any, **kwargs: Any) -> bytes:
    """Call a plotting function of :mod:`fastuq.evaluation` or :mod:`fastuq.sweeps` (which
    write a file) on a temporary path and return the PNG bytes."""
    with tempfile.TemporaryDirectory(prefix="fastuq-report-") as tmp:
        path = Path(tmp) / "figure.png"
        draw(*args, path, **kwargs)
        return path.read_bytes()


def _group_figures(
    group: str,
    where: str,
    labels: np.ndarray,
    scores: pl.DataFrame,
) -> list[Figure]:
    """The risk-coverage plot and one reliability diagram per estimator of one group, as
    ``fastuq eval --plots`` draws them (same Platt folds, seed and bins as the metrics)."""
    from fastuq.evaluation.plots import plot_reliability, plot_risk_coverage
    from fastuq.metrics import platt_oof_probabilities

    n = labels.shape[0]
    names = list(scores.columns)
    figures = [Figure(
        key=f"{group}/risk_coverage",
        title=f"Risk-coverage: {where}",
        caption=(f"Accuracy (fraction correct) of the trajectories kept when only the most "
                 f"certain fraction of {where} (n = {n:,}) is kept, per estimator (AUARC, the "
                 f"curve's mean, in percent in the legend); dashed: the oracle, dotted: no "
                 f"rejection."),
        png=_png(plot_risk_coverage, labels, scores, title=f"risk-coverage: {where}"),
    )]
    prob = np.asarray(platt_oof_probabilities(labels, scores, n_folds=5, seed=0, C=1.0))
    if prob.ndim == 1:
        prob = prob[:, None]
    for j, name in enumerate(names):
        if np.isnan(prob[:, j]).any():  # single-class labels: no probabilities
            continue
        figures.append(Figure(
            key=f"{group}/reliability/{name}",
            title=f"Reliability of {name}: {where}",
            caption=(f"{name} turned into a probability of being correct by out-of-fold Platt "
                     f"scaling (5 folds, seed 0), {where} (n = {n:,}): observed accuracy per "
                     f"probability bin against the diagonal of perfect calibration; below, "
                     f"trajectories per bin."),
            png=_png(plot_reliability, labels, prob[:, j], name=name,
                     title=f"{name} reliability: {where}"),
        ))
    return figures


def _calibration_section(
    calibration: Any,
    where: str,
    labels: np.ndarray,
    scores: pl.DataFrame,
    groups: np.ndarray,
    params: Mapping[str, Any],
    observation_noise: float | None,
    figures: list[Figure] | None,
) -> CalibrationSection:
    """A calibration file (or a fitted :class:`fastuq.decisions.Calibrator`) applied to the
    report's scores: refused (ValueError) when an estimator it calibrates was not scored,
    when the scores were made with other parameters or observation noise, or when a
    protocol has no map; else its metrics here and held out, and (``figures``: the report's
    pooled plots, else none drawn) the reliability diagrams before and after."""
    from fastuq.decisions.calibration import (
        Calibrator,
        calibration_metrics,
        probability_column,
        scoring_record,
    )
    from fastuq.evaluation.plots import plot_reliability

    if isinstance(calibration, Calibrator):
        cal, source = calibration, "(a Calibrator)"
    else:
        cal, source = Calibrator.load(calibration), str(calibration)
    missing = [m for m in cal.estimators if m not in scores.columns]
    if missing:
        from fastuq.engine.registry import score_estimator

        need = list(dict.fromkeys(score_estimator(m) or m for m in missing))
        raise ValueError(f"calibration {source} calibrates {', '.join(cal.estimators)}; "
                         f"the report did not score {', '.join(missing)} (add "
                         f"{', '.join(need)} to the methods)")
    try:
        cal.check_scoring(scoring_record(cal.estimators, cal.protocols, params,
                                         observation_noise=observation_noise))
        prob = cal.predict_proba(scores.select(cal.estimators), groups)
    except ValueError as exc:
        raise ValueError(f"calibration {source}: {exc}") from None
    rows, pairs = [], []
    present = sorted(set(groups.tolist()))
    for est in cal.estimators:
        p = prob[probability_column(est)]
        for group in [*present, "all"] if len(present) > 1 else present:
            keep = np.ones(labels.shape[0], bool) if group == "all" else groups == group
            here = calibration_metrics(labels[keep], p[keep], n_bins=cal.n_bins)
            held = (cal.metrics_.get(est) or {}).get(group) or {}
            rows.append({"estimator": est, "protocol": group, "n": here["n"],
                         **{k: here[k] for k in ("brier", "log_loss", "ece")},
                         **{f"held_out_{k}": held.get(k) for k in ("brier", "log_loss", "ece")}})
        if figures is not None:
            before = next((f for f in figures if f.key == f"all/reliability/{est}"), None)
            after = Figure(
                key=f"calibration/{est}",
                title=f"Reliability of {probability_column(est)}: {where}",
                caption=(f"{est} turned into a probability of being correct by the {cal.method} "
                         f"maps of {source} (each trajectory through its protocol's map), "
                         f"{where} (n = {labels.shape[0]:,}): observed accuracy per probability "
                         f"bin against the diagonal; beside it, before: the out-of-fold Platt "
                         f"probabilities the report fits on this corpus."),
                png=_png(plot_reliability, labels, p, name=probability_column(est),
                         title=f"{probability_column(est)}: {where}",
                         xlabel=f"{cal.method} probability of being correct ({source})"),
            )
            pairs.append((before, after))
    table = pl.DataFrame(rows, schema={
        "estimator": pl.String, "protocol": pl.String, "n": pl.Int64, "brier": pl.Float64,
        "log_loss": pl.Float64, "ece": pl.Float64, "held_out_brier": pl.Float64,
        "held_out_log_loss": pl.Float64, "held_out_ece": pl.Float64})
    return CalibrationSection(source=source, method=cal.method, n_folds=cal.n_folds,
                              table=table, figures=pairs)


def _rounds(batch: Any) -> np.ndarray | None:
    """``[N]`` int64 rounds each trajectory ran: from its per-round agreement (or the answers
    it is derived from), else from its per-node log-probabilities; None when it has neither."""
    if batch.has("agreement"):
        mask = batch.rounds("agreement")[1]
    elif batch.has("seq_logprob"):
        mask = batch.nodes("seq_logprob")[2]
    else:
        return None
    return mask.sum(axis=0).astype(np.int64)


def _summary(frame: pl.DataFrame, has_questions: bool, has_agents: bool,
             has_rounds: bool) -> pl.DataFrame:
    """The per-protocol summary rows and the ``all`` row (see :class:`Report`) of ``frame``
    (``protocol``, ``question``, ``correct``, ``rounds``, ``agents`` per trajectory); the
    columns the corpus cannot fill are null."""

    def row(name: str, df: pl.DataFrame) -> dict[str, Any]:
        return {
            "protocol": name,
            "trajectories": df.height,
            "questions": df["question"].n_unique() if has_questions else None,
            "accuracy": float(df["correct"].mean()),
            "rounds_mean": float(df["rounds"].mean()) if has_rounds else None,
            "rounds_max": int(df["rounds"].max()) if has_rounds else None,
            "agents_mean": float(df["agents"].mean()) if has_agents else None,
        }

    rows = [row(p, frame.filter(pl.col("protocol") == p))
            for p in sorted(frame["protocol"].unique().to_list())]
    rows.append(row("all", frame))
    return pl.DataFrame(rows, schema={
        "protocol": pl.String, "trajectories": pl.Int64, "questions": pl.Int64,
        "accuracy": pl.Float64, "rounds_mean": pl.Float64, "rounds_max": pl.Int64,
        "agents_mean": pl.Float64,
    })


def _sweep_section(
    source: Any,
    where: str,
    grid: Mapping[str, Sequence[float]],
    *,
    metric: str,
    log: Sequence[str],
    folds: int | None,
    protocol: str | None,
    observation_noise: float | None,
    dtype: str,
    base: Mapping[str, Mapping[str, float]] | None,
) -> SweepSection:
    """Run :func:`fastuq.sweeps.sweep` over ``grid`` and draw its heatmap."""
    from fastuq.evaluation.sweeps import heatmap, sweep

    if metric not in REPORT_SWEEP_METRICS:
        raise ValueError(f"sweep metric must be one of {REPORT_SWEEP_METRICS}, got {metric!r}")
    unknown = [k for k in log if k not in grid]
    if unknown:
        raise ValueError(f"sweep log axis {unknown[0]!r} is not swept (swept: {list(grid)})")
    metrics = (metric, *(m for m in REPORT_SWEEP_METRICS if m != metric))
    table = sweep(source, grid, metrics, protocol=protocol, dtype=dtype, folds=folds,
                  params=base, observation_noise=observation_noise)
    names = tuple(c for c in table.columns if c in grid)
    ranked = table.filter(~table[metric].is_nan()).sort(metric, descending=True,
                                                       maintain_order=True)
    if not ranked.height:
        raise ValueError(f"the sweep's {metric} is undefined at every grid point "
                         "(single-class labels?)")
    best = ranked.row(0, named=True)
    swept = " x ".join(names)
    title = f"SAUCE {metric.upper()} over {swept}, {where}"
    png = _png(heatmap, table, metric, log=list(log), title=title)
    preset = getattr(table, "preset", None)
    cv = getattr(table, "cv", None)
    figure = Figure(
        key="sweep/heatmap",
        title=f"SAUCE sweep: {swept}",
        caption=(f"Exact {metric.upper()} of SAUCE at each of the {table.height:,} grid points "
                 f"({where}); parameters not swept keep each protocol's preset. The star marks "
                 f"the best point."),
        png=png,
    )
    return SweepSection(table=table, metric=metric, names=names, best=dict(best),
                        preset=preset, cv=cv, figure=figure)


def build_report(
    corpus: Any,
    *,
    methods: str | Sequence[str] = "all",
    name: str | None = None,
    title: str | None = None,
    protocol: str | None = None,
    params: Mapping[str, Any] | None = None,
    protocol_params: Mapping[str, Mapping[str, float]] | None = None,
    observation_noise: float | None = None,
    dtype: str = "float64",
    backend: str = "jax",
    chunk_rows: int = 1 << 18,
    check: str = "corpus",
    plots: bool = True,
    sweep_grid: Mapping[str, Sequence[float]] | None = None,
    sweep_metric: str = "auroc",
    sweep_log: Sequence[str] = (),
    sweep_folds: int | None = None,
    sweep_dtype: str = "float32",
    calibration: Any = None,
    bench: str | os.PathLike | Mapping[str, Any] | None = None,
) -> Report:
    """Score ``corpus``, evaluate every estimator pooled and per protocol, and draw the plots.

    Args:
      corpus: a labelled corpus (a Parquet / JSONL / JSONL.gz file or folder; or anything
        :func:`fastuq.engine.scoring.iter_scores` reads, with ``name``).
      methods: estimator names, or ``"all"`` (every estimator whose inputs the corpus has;
        the others are listed with what they lack).
      name: the corpus's name on the page (default: the file name).
      title: the page title (default ``"fastuq report: NAME"``).
      protocol: preset for every record (default: each record's ``protocol``).
      params: estimator parameters by name, as :func:`fastuq.score` takes them (``lam=0.9``,
        ``{"lam": {"debate": 0.9}}``, ``theta_s=0.7``...); an unknown name raises.
      protocol_params: per-protocol SAUCE parameters (:func:`fastuq.fit.load_params` of a
        ``fastuq fit -o`` file), applied when scoring and as the sweep's base; excludes
        SAUCE parameters in ``params``.
      observation_noise: constant R_t for corpora without token entropy (SAUCE, UAAD).
      dtype, backend, chunk_rows, check: as :func:`fastuq.score` (the defaults of ``fastuq
        eval``).
      plots: draw the risk-coverage and reliability plots (needs matplotlib).
      sweep_grid: SAUCE parameter -> values; when given, :func:`fastuq.sweeps.sweep` over
        their Cartesian product and its heatmap are added.
      sweep_metric: the sweep metric plotted and selected by (``auroc``, ``auarc``, ``prr``).
      sweep_log: swept parameters drawn on a log axis.
      sweep_folds: k for the sweep's cross-validated selection (None: none).
      sweep_dtype: the sweep's scoring and ranking precision (``float32`` as ``fastuq
        sweep``).
      calibration: a ``fastuq calibrate`` file (or a fitted
        :class:`fastuq.decisions.Calibrator`) to apply: adds the calibration section (its
        metrics on this corpus beside its held-out ones, reliability before and after).
        ValueError when it calibrates an estimator not scored, was made with other
        parameters, lacks a protocol of the corpus or is of another fastuq major version.
      bench: a ``fastuq bench --json`` results file (or its loaded dict): adds its table
        (the estimators' cost on the machine that ran it). ValueError when it is not one.

    Returns:
      a :class:`Report`.

    Raises:
      ValueError: a corpus without labels or with a null label, bad parameters or grid;
      FileNotFoundError: no such corpus; ImportError: ``plots`` without matplotlib.
    """
    import pyarrow as pa

    from fastuq.engine.pipeline import iter_scores
    from fastuq.engine.registry import score_outputs
    from fastuq.evaluation.tables import evaluation_tables

    if bench is not None:  # checked before any work
        from fastuq.evaluation.bench import load_bench

        bench = load_bench(bench)
    if plots:
        from fastuq.evaluation.plots import agg_figure

        agg_figure(1, 1)  # ImportError with the install hint before any work
    shown, source_text = _display_name(corpus, name)
    params = dict(params or {})
    if protocol_params is not None:
        from fastuq.evaluation.fit import per_parameter
        from fastuq.evaluation.sauce_data import PARAMS
        from fastuq.evaluation.sweeps import check_protocol_params

        protocol_params = check_protocol_params(protocol_params, "protocol_params: ")
        both = sorted(set(params) & set(PARAMS))
        if both:
            raise ValueError(f"SAUCE parameter {both[0]!r} is given both in params and in "
                             "protocol_params")
        params.update(per_parameter(protocol_params))

    info: dict[str, Any] = {}
    tables: list[pa.Table] = []
    meta: list[pa.Table] = []
    has_questions = has_agents = has_rounds = True
    for batch, scores in iter_scores(
        corpus, methods=methods, protocol=protocol, params=params, dtype=dtype,
        backend=backend, chunk_rows=chunk_rows, observation_noise=observation_noise,
        check=check, info=info,
    ):
        if "correct" not in batch.table.column_names:
            raise ValueError(f"{source_text}: no labels: the corpus has no 'correct' field "
                             "(bool, True = correct); a report needs them")
        correct = batch.column("correct").cast(pa.bool_())
        if correct.null_count:
            k = int(np.flatnonzero(correct.is_null().to_numpy(zero_copy_only=False))[0])
            raise ValueError(f"trajectory {batch.ids[k].as_py()!r} has no label (field correct "
                             f"is null; {correct.null_count} unlabelled in its chunk)")
        tables.append(pa.table({"trajectory_id": batch.ids,
                                **{k: scores[k] for k in score_outputs(scores)}}))
        if protocol is None and "protocol" not in batch.table.column_names:
            protos: Any = _NO_PROTOCOL  # estimators without presets need none
        else:
            protos = batch.protocol(protocol)
        has_questions &= "question_id" in batch.table.column_names
        agents_known = batch.has("n_agents") or batch.has("seq_logprob")
        has_agents &= agents_known
        rounds = _rounds(batch)
        has_rounds &= rounds is not None
        meta.append(pa.table({
            "protocol": pa.array(np.full(batch.n, protos)) if isinstance(protos, str)
            else protos,
            "question": (batch.column("question_id").cast(pa.string()) if has_questions
                         else pa.nulls(batch.n, pa.string())),
            "correct": correct,
            "rounds": pa.array(np.zeros(batch.n, np.int64) if rounds is None else rounds),
            "agents": pa.array(batch.team_sizes().astype(np.float64) if agents_known
                               else np.zeros(batch.n)),
        }))
    if not tables:
        raise ValueError(f"{source_text}: the corpus holds no trajectory")
    scored = pl.from_arrow(pa.concat_tables(tables))
    info_frame = pl.from_arrow(pa.concat_tables(meta))
    assert isinstance(scored, pl.DataFrame) and isinstance(info_frame, pl.DataFrame)
    names = [c for c in scored.columns if c != "trajectory_id"]
    score_frame = scored.select(names)
    labels = info_frame["correct"].to_numpy()
    groups = info_frame["protocol"].to_numpy()

    # fastuq eval --by protocol's tables (the same function, so the same bits)
    pooled, by_protocol = evaluation_tables(labels, score_frame, info_frame["protocol"])
    by_protocol.pop(_NO_PROTOCOL, None)
    protocols = sorted(by_protocol)

    figures: dict[str, list[Figure]] = {}
    if plots:
        figures["all"] = _group_figures("all", f"all of {shown}", labels, score_frame)
        if len(protocols) > 1:
            for proto in protocols:
                keep = groups == proto
                figures[proto] = _group_figures(
                    proto, f"protocol {proto} of {shown}", labels[keep],
                    score_frame.filter(pl.Series(keep)))

    calibrated = None
    if calibration is not None:
        calibrated = _calibration_section(
            calibration, f"all of {shown}", labels, score_frame, groups, params,
            observation_noise, figures.get("all") if plots else None)

    sweep = None
    if sweep_grid is not None:
        from fastuq.evaluation.sauce_data import PARAMS

        base = protocol_params
        scalar = {k: v for k, v in params.items()
                  if k in PARAMS and k not in sweep_grid and not isinstance(v, Mapping)}
        if base is None and scalar:  # --lam ... given for scoring: the sweep's base too
            base = {p: dict(scalar) for p in protocols}
        sweep = _sweep_section(corpus, f"{shown}, n = {labels.shape[0]:,}", sweep_grid,
                               metric=sweep_metric, log=sweep_log, folds=sweep_folds,
                               protocol=protocol, observation_noise=observation_noise,
                               dtype=sweep_dtype, base=base)

    settings = {
        "methods": methods if isinstance(methods, str) else list(methods),
        "protocol": protocol, "dtype": dtype, "backend": backend,
        "observation_noise": observation_noise,
        "params": {k: (dict(v) if isinstance(v, Mapping) else v) for k, v in params.items()},
        "platt": "out-of-fold, 5 stratified folds, seed 0, C = 1", "ece_bins": 15,
    }
    return Report(
        corpus=shown,
        source=source_text,
        title=title or f"fastuq report: {shown}",
        summary=_summary(info_frame, has_questions, has_agents, has_rounds),
        methods=names,
        left_out=dict(info.get("left_out") or {}),
        pooled=pooled,
        by_protocol=by_protocol,
        figures=figures,
        sweep=sweep,
        settings=settings,
        created=_dt.datetime.now(_dt.UTC).strftime("%Y-%m-%d %H:%M UTC"),
        calibration=calibrated,
        bench=bench,
    )



def write_report(corpus: Any, path: str | os.PathLike, **kwargs: Any) -> Report:
    """:func:`build_report` (``kwargs`` are its arguments) and write the page to ``path``
    (``.html`` or ``.htm``) atomically: nothing appears at ``path`` unless everything was
    computed and written. Returns the :class:`Report`."""
    from fastuq.io.writers import OutputError, atomic_write_text, check_outputs

    path = Path(path)
    if not path.name.lower().endswith((".html", ".htm")):
        raise OutputError(path, f"a report is HTML; name it {path.stem}.html")
    check_outputs([corpus] if isinstance(corpus, str | os.PathLike) else [],
                  [("-o", path, None)])
    report = build_report(corpus, **kwargs)
    atomic_write_text(path, render_html(report))
    return report
