"""The report page: what a report holds (:class:`Report`, its :class:`Figure` s and its
:class:`SweepSection`; :mod:`fastuq.evaluation.report` builds one) and :func:`render_html`,
which renders it as one self-contained HTML page (plots embedded as ``data:`` URIs, every
number again as JSON in ``<script type="application/json" id="fastuq-report-data">``), the
metrics table with the best value of each column in bold (:data:`LOWER_IS_BETTER` says
which way is best).
"""

from __future__ import annotations

import base64
import html
import json
import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import polars as pl

__all__ = ["LOWER_IS_BETTER", "REPORT_SWEEP_METRICS", "CalibrationSection", "Figure", "Report",
           "SweepSection", "render_html"]


#: Metrics of the table for which lower is better (the others: higher is better).
LOWER_IS_BETTER = frozenset({"brier_platt", "ece"})
#: Default sweep metric and the metrics a report's sweep computes.
REPORT_SWEEP_METRICS = ("auroc", "auarc", "prr")

_METRIC_TEXT = {
    "auroc": "AUROC: probability that a correct trajectory is scored less uncertain than a "
             "wrong one (ties count one half); 50 is chance.",
    "auarc": "AUARC: mean accuracy of the kept trajectories over all coverages, most certain "
             "first (the area under the risk-coverage curve drawn as accuracy).",
    "prr": "PRR: prediction rejection ratio, the share of the oracle's gain in that area that "
           "the estimator achieves; 0 is chance, 100 the oracle.",
    "brier_platt": "Brier-Platt: Brier score of out-of-fold Platt-scaled probabilities of "
                   "being correct (5 stratified folds, seed 0); lower is better.",
    "ece": "ECE: expected calibration error of the same probabilities in 15 equal-width bins; "
           "lower is better.",
}


# ------------------------------------------------------------------------ the report's data


@dataclass(frozen=True)
class Figure:
    """One embedded plot: ``png`` bytes, a ``title`` (heading above it) and a ``caption``
    (what it shows, for a reader who did not run it)."""

    key: str
    title: str
    caption: str
    png: bytes


@dataclass
class SweepSection:
    """The SAUCE sweep of a report: the grid table (one row per point, as
    :func:`fastuq.sweeps.sweep` returns it), the metric plotted and used for selection, the
    swept parameter names, the best point, the preset metrics (``None`` when a protocol has no
    preset), the cross-validated selection (a :class:`fastuq.sweeps.CVSummary` or ``None``)
    and the heatmap."""

    table: pl.DataFrame
    metric: str
    names: tuple[str, ...]
    best: dict[str, float]
    preset: dict[str, float] | None
    cv: Any
    figure: Figure

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready: metric, grid values per parameter, best point, presets, CV folds."""
        cv = None
        if self.cv is not None:
            cv = {"metric": self.cv.metric, "mean_heldout": self.cv.mean_heldout,
                  "mean_preset_heldout": self.cv.mean_preset_heldout,
                  "chosen": self.cv.chosen, "chosen_metric": self.cv.chosen_metric,
                  "folds": _clean(self.cv.folds.to_dicts())}
        return {
            "metric": self.metric,
            "grid": {k: sorted(set(self.table[k].to_list())) for k in self.names},
            "points": self.table.height,
            "best": _clean(self.best),
            "preset": _clean(self.preset),
            "cv": cv,
        }


@dataclass
class CalibrationSection:
    """The calibration file a report applied (``fastuq report --calibration``): its path,
    method and folds; ``table``: one row per estimator and protocol (and ``all``, pooled)
    with ``n`` and the Brier score, log-loss and ECE of the file's probabilities on this
    corpus beside the held-out values the file recorded when it was fitted (``held_out_*``);
    ``figures``: per estimator, the reliability diagram before (the report's own out-of-fold
    Platt probabilities) and after (the file's ``p_correct_<estimator>``)."""

    source: str
    method: str
    n_folds: int
    table: pl.DataFrame
    figures: list[tuple[Figure | None, Figure]] = field(default_factory=list)

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready: the file, its method and folds, the table's rows."""
        return {"file": self.source, "method": self.method, "n_folds": self.n_folds,
                "rows": _clean(self.table.to_dicts())}


@dataclass
class Report:
    """Everything a report page shows (:func:`build_report`); :meth:`html` renders it.

    corpus: the corpus's display name; source: its path (or a description of the object).
    summary: one row per protocol and a last row ``all``: ``protocol``, ``trajectories``,
      ``questions`` (distinct ``question_id``; null without that column), ``accuracy``,
      ``rounds_mean``, ``rounds_max`` (null without per-round or per-node columns),
      ``agents_mean`` (initial team size; null when the corpus does not say).
    methods: the estimators scored, in registry order; left_out: estimator -> why it was not
      scored (``methods="all"`` only).
    pooled, by_protocol: :func:`fastuq.evaluation.evaluation_tables` of every trajectory and
      per protocol (by_protocol empty for a corpus without a ``protocol`` column).
    figures: group (``"all"`` or a protocol) -> its plots.
    sweep: the :class:`SweepSection`, when a grid was given.
    calibration: the :class:`CalibrationSection`, when a calibration file was applied.
    settings: how the corpus was scored (dtype, backend, observation noise, parameters).
    bench: a ``fastuq bench --json`` results file (:func:`fastuq.evaluation.bench.load_bench`)
      whose table the page shows, or ``None``.
    """

    corpus: str
    source: str
    title: str
    summary: pl.DataFrame
    methods: list[str]
    left_out: dict[str, str]
    pooled: pl.DataFrame
    by_protocol: dict[str, pl.DataFrame]
    figures: dict[str, list[Figure]]
    sweep: SweepSection | None = None
    settings: dict[str, Any] = field(default_factory=dict)
    created: str = ""
    calibration: CalibrationSection | None = None
    bench: dict[str, Any] | None = None

    def to_dict(self) -> dict[str, Any]:
        """Every number of the page, fractions in full precision, NaN as ``None``: the keys
        ``n``, ``accuracy``, ``methods``, ``estimators`` and ``by_protocol`` as ``fastuq eval
        --json`` writes them, plus ``summary``, ``left_out``, ``sweep`` and ``settings``."""
        from fastuq import __version__
        from fastuq.evaluation.tables import table_records

        return {
            "fastuq_version": __version__,
            "title": self.title,
            "corpus": self.source,
            "created": self.created,
            "units": "fraction",
            "n": int(self.pooled["n"][0]),
            "accuracy": float(self.pooled["accuracy"][0]),
            "methods": self.methods,
            "left_out": self.left_out,
            "summary": _clean(self.summary.to_dicts()),
            "estimators": table_records(self.pooled),
            "by_protocol": {k: table_records(v) for k, v in self.by_protocol.items()} or None,
            "figures": {g: [f.key for f in figs] for g, figs in self.figures.items()},
            "sweep": None if self.sweep is None else self.sweep.to_dict(),
            "settings": _clean(self.settings),
            "calibration": None if self.calibration is None else self.calibration.to_dict(),
            "bench": None if self.bench is None else _clean(self.bench),
        }

    def html(self) -> str:
        """The page (:func:`render_html`)."""
        return render_html(self)


def _clean(value: Any) -> Any:
    """``value`` with NaN / infinite floats as ``None`` and NumPy scalars as Python ones."""
    if isinstance(value, Mapping):
        return {str(k): _clean(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_clean(v) for v in value]
    if isinstance(value, np.generic):
        value = value.item()
    if isinstance(value, float) and not math.isfinite(value):
        return None
    return value


# ------------------------------------------------------------------------------- rendering

_CSS = """
:root { color-scheme: light; }
body { font: 15px/1.45 system-ui, -apple-system, "Segoe UI", Roboto, "DejaVu Sans", sans-serif;
       margin: 0; color: #1d1d1f; background: #ffffff; }
header { background: #243447; color: #ffffff; padding: 18px 32px; }
header h1 { margin: 0 0 4px; font-size: 24px; }
header p { margin: 0; color: #d5dde6; font-size: 13px; }
main { padding: 8px 32px 40px; max-width: 1500px; }
h2 { border-bottom: 2px solid #243447; padding-bottom: 4px; margin-top: 32px; }
h3 { margin: 20px 0 8px; }
table { border-collapse: collapse; margin: 8px 0 12px; font-variant-numeric: tabular-nums; }
th, td { border: 1px solid #c9ced6; padding: 4px 10px; }
th { background: #eef1f5; text-align: center; }
td.num { text-align: right; }
td.best { font-weight: 700; background: #fff4cc; }
.overview { display: flex; flex-wrap: wrap; gap: 24px; align-items: flex-start; }
.grid { display: flex; flex-wrap: wrap; gap: 16px; }
figure { margin: 8px 0; border: 1px solid #dfe3e8; padding: 8px; background: #ffffff;
         max-width: calc(100% - 18px); }
figure img { display: block; max-width: 100%; height: auto; }
figcaption { font-size: 12.5px; color: #44505c; margin-top: 4px; }
figcaption b { color: #1d1d1f; }
.note { color: #44505c; font-size: 13.5px; max-width: 980px; }
details { margin: 12px 0; }
summary { cursor: pointer; font-weight: 600; }
code { background: #f2f4f7; padding: 0 3px; }
"""


def _e(text: Any) -> str:
    return html.escape(str(text), quote=True)


def _percent(value: Any) -> str:
    return "nan" if value is None or (isinstance(value, float) and math.isnan(value)) \
        else f"{value * 100:.2f}"


def _metrics_table(df: pl.DataFrame) -> str:
    """An evaluation table as HTML: the cells ``fastuq eval`` prints (percent, 2 decimals;
    n with thousands separators), the best value of each metric column in bold."""
    from fastuq.evaluation.tables import METRIC_HEADERS, format_cell

    cols = list(df.columns)
    best: dict[str, float] = {}
    for c in cols:
        if c in _METRIC_TEXT:
            values = [v for v in df[c].to_list() if v is not None and not math.isnan(v)]
            if values:
                best[c] = min(values) if c in LOWER_IS_BETTER else max(values)
    head = "".join(f"<th>{_e(METRIC_HEADERS.get(c, c))}</th>" for c in cols)
    body = []
    for row in df.iter_rows(named=True):
        cells = []
        for c in cols:
            text = format_cell(row[c], c, percent=True, thousands=True)
            if c == "estimator":
                cells.append(f"<td>{_e(text)}</td>")
                continue
            cls = "num best" if c in best and row[c] == best[c] and df.height > 1 else "num"
            cells.append(f'<td class="{cls}" data-metric="{_e(c)}">{_e(text)}</td>')
        body.append("<tr>" + "".join(cells) + "</tr>")
    return (f'<table class="metrics"><thead><tr>{head}</tr></thead>'
            f"<tbody>{''.join(body)}</tbody></table>")


def _summary_table(df: pl.DataFrame) -> str:
    heads = ["protocol", "trajectories", "questions", "accuracy (%)", "rounds (mean)",
             "rounds (max)", "initial team (mean agents)"]
    body = []
    for row in df.iter_rows(named=True):
        cells = [
            row["protocol"],
            f"{row['trajectories']:,}",
            "—" if row["questions"] is None else f"{row['questions']:,}",
            _percent(row["accuracy"]),
            "—" if row["rounds_mean"] is None else f"{row['rounds_mean']:.2f}",
            "—" if row["rounds_max"] is None else f"{row['rounds_max']}",
            "—" if row["agents_mean"] is None else f"{row['agents_mean']:.2f}",
        ]
        tds = [f"<td>{_e(cells[0])}</td>"] + [f'<td class="num">{_e(c)}</td>'
                                               for c in cells[1:]]
        body.append("<tr>" + "".join(tds) + "</tr>")
    head = "".join(f"<th>{_e(h)}</th>" for h in heads)
    return (f'<table class="summary"><thead><tr>{head}</tr></thead>'
            f"<tbody>{''.join(body)}</tbody></table>")


def _png_size(png: bytes) -> tuple[int, int]:
    """``(width, height)`` in pixels from a PNG's IHDR chunk."""
    if png[:8] != b"\x89PNG\r\n\x1a\n" or png[12:16] != b"IHDR":
        raise ValueError("not a PNG image")
    return int.from_bytes(png[16:20], "big"), int.from_bytes(png[20:24], "big")


def _figure_html(fig: Figure) -> str:
    data = base64.b64encode(fig.png).decode("ascii")
    width, height = _png_size(fig.png)
    return (f'<figure id="{_e(fig.key)}" style="width: {width}px">'
            f'<img src="data:image/png;base64,{data}" width="{width}" height="{height}" '
            f'alt="{_e(fig.title)}"><figcaption><b>{_e(fig.title)}.</b> '
            f"{_e(fig.caption)}</figcaption></figure>")


def _group_html(report: Report, group: str, table: pl.DataFrame, heading: str,
                note: str = "", risk_shown: bool = False) -> str:
    """A section of metrics and plots (``risk_shown``: the risk-coverage plot is already on
    the page, in the overview)."""
    figs = report.figures.get(group, [])
    n = int(table["n"][0])
    acc = float(table["accuracy"][0])
    parts = [f'<section id="group-{_e(group)}"><h2>{_e(heading)}</h2>',
             f'<p class="note">{n:,} trajectories of {_e(report.corpus)}, accuracy '
             f"{acc * 100:.2f}%. Metrics in percent; higher is better except Brier-Platt and "
             f"ECE; the best value of each column is in bold.{_e(note)}</p>",
             _metrics_table(table)]
    risk = [] if risk_shown else [f for f in figs if f.key.endswith("/risk_coverage")]
    rel = [f for f in figs if "/reliability/" in f.key]
    if risk:
        parts.append('<div class="grid">' + "".join(_figure_html(f) for f in risk) + "</div>")
    if rel:
        parts.append(f"<h3>Reliability diagrams ({len(rel)} estimators)</h3>")
        parts.append('<div class="grid">' + "".join(_figure_html(f) for f in rel) + "</div>")
    parts.append("</section>")
    return "".join(parts)


def _sweep_html(report: Report) -> str:
    sw = report.sweep
    assert sw is not None
    m = sw.metric
    point = ", ".join(f"{k} = {sw.best[k]:.4g}" for k in sw.names)
    lines = [f"<li>Best of the {sw.table.height:,} grid points by {m.upper()}: {_e(point)}: "
             + ", ".join(f"{k.upper()} {_percent(sw.best[k])}"
                         for k in REPORT_SWEEP_METRICS if k in sw.best) + ".</li>"]
    if sw.preset is not None:
        lines.append("<li>Each protocol's preset parameters: " + ", ".join(
            f"{k.upper()} {_percent(v)}" for k, v in sw.preset.items()) + ".</li>")
    else:
        lines.append("<li>A protocol of the corpus has no preset: no preset reference.</li>")
    if sw.cv is not None:
        cv = sw.cv
        pre = "" if cv.mean_preset_heldout is None else \
            f" (the presets: {_percent(cv.mean_preset_heldout)})"
        lines.append(f"<li>{cv.folds.height}-fold cross-validated selection: the point best on "
                     f"each fold's training part scores a mean held-out {m.upper()} of "
                     f"{_percent(cv.mean_heldout)}{_e(pre)}.</li>")
    return (f'<section id="sweep"><h2>SAUCE parameter sweep</h2>'
            f'<p class="note">Metrics in percent; every value is exact (no binning).</p>'
            f"<ul>{''.join(lines)}</ul>{_figure_html(sw.figure)}</section>")


def _bench_html(data: Mapping[str, Any]) -> str:
    """The estimator-cost section: the ``fastuq bench`` table and the machine it ran on."""
    from fastuq.evaluation.bench import HEADERS, bench_rows, machine_line

    head = "".join(f"<th>{_e(h)}</th>" for h in HEADERS)
    rows = "".join("<tr>" + "".join(f"<td>{_e(c)}</td>" for c in row) + "</tr>"
                   for row in bench_rows(data))
    return ('<section id="bench"><h2>Estimator cost on this machine</h2>'
            f'<p class="note">fastuq bench: {_e(machine_line(data))}. Median of repeated '
            "calls after the compiling one; the floor is the bytes each call reads and writes "
            "over the copy bandwidth measured in the same run; the reference is the "
            "per-trajectory Python definition on a subsample.</p>"
            f"<table><thead><tr>{head}</tr></thead><tbody>{rows}</tbody></table></section>")


def _calibration_html(report: Report) -> str:
    """The calibration section: the table of metrics here and held out, and per estimator
    the reliability diagrams before and after."""
    cal = report.calibration
    assert cal is not None
    heads = ["estimator", "protocol", "n", "Brier here", "Brier held out", "log-loss here",
             "log-loss held out", "ECE here", "ECE held out"]
    keys = ["estimator", "protocol", "n", "brier", "held_out_brier", "log_loss",
            "held_out_log_loss", "ece", "held_out_ece"]
    body = []
    for row in cal.table.iter_rows(named=True):
        cells = [f"<td>{_e(row['estimator'])}</td>", f"<td>{_e(row['protocol'])}</td>",
                 f'<td class="num">{row["n"]:,}</td>']
        for k in keys[3:]:
            v = row[k]
            text = "—" if v is None or (isinstance(v, float) and math.isnan(v)) else f"{v:.4f}"
            cells.append(f'<td class="num" data-metric="{_e(k)}">{text}</td>')
        body.append("<tr>" + "".join(cells) + "</tr>")
    head = "".join(f"<th>{_e(h)}</th>" for h in heads)
    parts = [f'<section id="calibration"><h2>Calibrated probabilities ({_e(cal.method)})</h2>',
             f'<p class="note">The maps of <code>{_e(cal.source)}</code> ({_e(cal.method)}, '
             "one per estimator and protocol) applied to this corpus: Brier score, log-loss "
             "and ECE (15 equal-width bins) of <code>p_correct_ESTIMATOR</code> here, beside "
             f"the values held out in {cal.n_folds} stratified folds when the file was "
             "fitted (fractions; lower is better). On the corpus the file was fitted on, "
             "the values here are in-sample.</p>",
             f'<table class="calibration"><thead><tr>{head}</tr></thead>'
             f"<tbody>{''.join(body)}</tbody></table>"]
    for before, after in cal.figures:
        pair = [f for f in (before, after) if f is not None]
        parts.append('<div class="grid">' + "".join(_figure_html(f) for f in pair) + "</div>")
    parts.append("</section>")
    return "".join(parts)


def render_html(report: Report) -> str:
    """The report as one self-contained HTML page (inline style, PNGs as ``data:`` URIs, no
    script but the JSON data block)."""
    from fastuq import __version__

    total = report.summary.filter(pl.col("protocol") == "all").row(0, named=True)
    risk_all = [f for f in report.figures.get("all", []) if f.key == "all/risk_coverage"]
    left = ""
    if report.left_out:
        left = ('<p class="note">Not scored (inputs missing): ' + "; ".join(
            f"<b>{_e(k)}</b> ({_e(v)})" for k, v in report.left_out.items()) + ".</p>")
    settings = report.settings
    noise = settings.get("observation_noise")
    how = [f"scores in {settings.get('dtype')} on the {settings.get('backend')} backend"]
    if noise is not None:
        how.append(f"constant observation noise R_t = {noise:g} in place of token entropy")
    if settings.get("protocol"):
        how.append(f"every record scored with the {settings['protocol']} preset")
    if settings.get("params"):
        how.append("parameters " + ", ".join(f"{k} = {v}" for k, v in settings["params"].items()))
    overview = [
        '<section id="summary"><h2>Corpus</h2><div class="overview"><div>',
        f'<p class="note"><b>{total["trajectories"]:,}</b> labelled trajectories'
        + ("" if total["questions"] is None else f" of <b>{total['questions']:,}</b> questions")
        + f", accuracy <b>{_percent(total['accuracy'])}%</b>; {len(report.methods)} "
          f"estimators scored: {_e(', '.join(report.methods))}.</p>",
        _summary_table(report.summary),
        left,
        f'<p class="note">How: {_e("; ".join(how))}. Source: <code>{_e(report.source)}</code>.'
        "</p></div>",
    ]
    if risk_all:
        overview.append(_figure_html(risk_all[0]))
    overview.append("</div></section>")
    body = ["".join(overview)]
    protos = list(report.by_protocol)
    if len(protos) > 1:
        heading, note = f"All trajectories ({len(protos)} protocols pooled)", ""
    elif protos:
        heading = f"All trajectories (protocol {protos[0]})"
        note = f" Every trajectory is of protocol {protos[0]}: this is its per-protocol table."
    else:
        heading, note = "All trajectories", " The corpus has no protocol column."
    body.append(_group_html(report, "all", report.pooled, heading, note,
                            risk_shown=bool(risk_all)))
    if len(report.by_protocol) > 1:
        for proto, table in report.by_protocol.items():
            body.append(_group_html(report, proto, table, f"Protocol {proto}"))
    if report.calibration is not None:
        body.append(_calibration_html(report))
    if report.sweep is not None:
        body.append(_sweep_html(report))
    if report.bench is not None:
        body.append(_bench_html(report.bench))
    defs = "".join(f"<li>{_e(t)}</li>" for t in _METRIC_TEXT.values())
    body.append('<section id="definitions"><h2>What the numbers are</h2><ul class="note">'
                f"{defs}<li>Scores are uncertainties: higher means less likely correct. "
                "Pooled metrics of a corpus mixing protocols mix their presets' scales; the "
                "per-protocol tables do not.</li></ul></section>")
    data = json.dumps(report.to_dict(), allow_nan=False, sort_keys=False)
    data = data.replace("<", "\\u003c").replace(">", "\\u003e").replace("&", "\\u0026")
    return (
        "<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">"
        '<meta name="viewport" content="width=device-width, initial-scale=1">'
        f"<title>{_e(report.title)}</title><style>{_CSS}</style></head><body>"
        f"<header><h1>{_e(report.title)}</h1><p>fastuq {_e(__version__)} · "
        f"{_e(report.created)} · corpus {_e(report.corpus)}</p></header>"
        f"<main>{''.join(body)}</main>"
        f'<script type="application/json" id="fastuq-report-data">{data}</script>'
        "</body></html>\n"
    )
