"""PNG reliability diagrams (out-of-fold Platt probabilities, 15 equal-width bins, with
counts) and a risk-coverage plot (:func:`write_plots`, :func:`plot_reliability`,
:func:`plot_risk_coverage`): what ``fastuq eval --plots`` draws. They need matplotlib
(``pip install "fastuq[plot]"``) and draw with the Agg canvas directly
(:func:`agg_figure`), so they neither need a display nor change pyplot's backend. Nothing
here imports JAX.
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import numpy as np
import polars as pl
import pyarrow as pa

from fastuq.evaluation.tables import labels_array, score_columns
from fastuq.metrics import platt_oof_probabilities
from fastuq.metrics.ece import bin_edges, bin_index, ece_matrix

__all__ = ["accuracy_coverage", "agg_figure", "plot_reliability", "plot_risk_coverage",
           "reliability_bins", "write_plots"]


_PLOT_HINT = 'plots need matplotlib; install it with: pip install "fastuq[plot]"'


def agg_figure(width: float, height: float):
    """A matplotlib Figure on an Agg canvas (no pyplot, no global backend change)."""
    try:
        from matplotlib.backends.backend_agg import FigureCanvasAgg
        from matplotlib.figure import Figure
    except ImportError as exc:
        raise ImportError(_PLOT_HINT) from exc
    fig = Figure(figsize=(width, height), dpi=100)
    FigureCanvasAgg(fig)
    return fig


def reliability_bins(
    labels: Any, probabilities: Any, *, n_bins: int = 15
) -> dict[str, np.ndarray]:
    """Per-bin statistics of probabilities of being correct, in ``n_bins`` equal-width bins.

    Bins as :func:`fastuq.metrics.ece`: ``[i/n_bins, (i+1)/n_bins)``, the last closed.
    Returns ``edges [n_bins + 1]``, ``count [n_bins]`` (int64), ``mean_probability`` and
    ``accuracy`` (float64 ``[n_bins]``, NaN in empty bins);
    ``sum(count * |accuracy - mean_probability|) / N`` over non-empty bins is the ECE.
    """
    y = np.asarray(labels_array(labels), dtype=np.float64)
    p = np.asarray(probabilities, dtype=np.float64)
    if p.shape != y.shape or p.ndim != 1:
        raise ValueError(f"labels {y.shape} and probabilities {p.shape} must be [N] alike")
    idx = bin_index(p, n_bins)
    count = np.bincount(idx, minlength=n_bins).astype(np.int64)
    with np.errstate(invalid="ignore", divide="ignore"):
        mean_p = np.bincount(idx, weights=p, minlength=n_bins) / count
        acc = np.bincount(idx, weights=y, minlength=n_bins) / count
    return {"edges": bin_edges(n_bins), "count": count, "mean_probability": mean_p,
            "accuracy": acc}


def accuracy_coverage(labels: Any, scores: Any) -> tuple[np.ndarray, np.ndarray]:
    """The risk-coverage curve as accuracy: ``(coverage [N], accuracy [N])`` where
    ``accuracy[k-1]`` is the accuracy of the ``k`` most certain rows (uncertainty ascending,
    stable sort, so ties keep file order) and ``coverage[k-1] = k / N``. Its mean is AUARC.
    """
    y = np.asarray(labels_array(labels), dtype=np.float64)
    u = np.asarray(scores, dtype=np.float64)
    if u.shape != y.shape or u.ndim != 1:
        raise ValueError(f"labels {y.shape} and scores {u.shape} must be [N] alike")
    k = np.arange(1, y.shape[0] + 1, dtype=np.float64)
    acc = np.cumsum(y[np.argsort(u, kind="stable")]) / k
    return k / y.shape[0], acc


def _thin(n: int, max_points: int = 2000) -> np.ndarray:
    """Indices of at most ``max_points`` points of a curve of ``n``, first and last kept."""
    if n <= max_points:
        return np.arange(n)
    return np.unique(np.linspace(0, n - 1, max_points).round().astype(np.int64))


def _compact(count: int) -> str:
    """``987``, ``12.3k``, ``4.56M``: a count short enough to sit above a narrow bar."""
    if count < 10_000:
        return str(count)
    for div, unit in ((1e9, "G"), (1e6, "M"), (1e3, "k")):
        if count >= div:
            v = count / div
            return f"{v:.3g}{unit}" if v < 1000 else f"{v:.0f}{unit}"
    return str(count)


def _safe_name(name: str) -> str:
    return re.sub(r"[^A-Za-z0-9_.-]+", "_", name).strip("._") or "score"


def plot_reliability(
    labels: Any,
    probabilities: Any,
    path: str | os.PathLike,
    *,
    name: str = "score",
    n_bins: int = 15,
    title: str | None = None,
    xlabel: str = "out-of-fold Platt probability of being correct",
) -> Path:
    """Write a reliability diagram PNG (500 x 600 pixels) of probabilities of being correct.
    ``title``: what the plot shows (e.g. the corpus), put before N and the ECE; ``xlabel``:
    what the probabilities are (the bin count is added).

    Top: observed accuracy per bin (bars) against the bin's mean predicted probability
    (points), the diagonal of perfect calibration, and the ECE in the title. Bottom: the
    number of rows in each bin, written above its bar. Returns ``path``.
    """
    b = reliability_bins(labels, probabilities, n_bins=n_bins)
    n = int(b["count"].sum())
    filled = b["count"] > 0
    p = np.asarray(probabilities, dtype=np.float64)
    ece_value = float(ece_matrix(np.asarray(labels_array(labels)), p[:, None], n_bins)[0])
    width = 1.0 / n_bins
    centers = b["edges"][:-1] + width / 2
    fig = agg_figure(5.0, 6.0)
    grid = fig.add_gridspec(2, 1, height_ratios=(3, 1), hspace=0.08)
    ax = fig.add_subplot(grid[0])
    hist = fig.add_subplot(grid[1], sharex=ax)
    ax.plot([0, 1], [0, 1], ls="--", color="0.5", lw=1, label="perfect calibration")
    ax.bar(centers[filled], b["accuracy"][filled], width=width * 0.9, color="C0", alpha=0.75,
           edgecolor="C0", label="observed accuracy")
    ax.plot(b["mean_probability"][filled], b["accuracy"][filled], "o", color="C3", ms=4,
            label="mean predicted probability")
    ax.set_xlim(0, 1)
    ax.set_ylim(0, 1.08)
    ax.set_ylabel("accuracy (fraction correct)")
    ax.set_title(f"{title or name + ': reliability'}, N = {n:,}, ECE = {ece_value * 100:.2f}%",
                 fontsize=10)
    ax.legend(loc="upper left", fontsize=7, frameon=False)
    ax.tick_params(labelbottom=False)
    hist.bar(centers, b["count"], width=width * 0.9, color="0.45")
    for x, c in zip(centers[filled], b["count"][filled], strict=True):
        hist.annotate(_compact(int(c)), (x, c), xytext=(0, 2), textcoords="offset points",
                      ha="center", va="bottom", fontsize=6.5)
    hist.set_ylim(0, b["count"].max() * 1.3)
    hist.set_xlabel(f"{xlabel} ({n_bins} bins)")
    hist.set_ylabel("count")
    fig.subplots_adjust(left=0.14, right=0.96, top=0.94, bottom=0.09)
    path = Path(path)
    fig.savefig(path, format="png")
    return path


def plot_risk_coverage(
    labels: Any,
    scores: Mapping[str, Any] | pa.Table | pl.DataFrame,
    path: str | os.PathLike,
    *,
    title: str | None = None,
) -> Path:
    """Write one risk-coverage PNG (600 x 450 pixels): for each estimator, the accuracy of
    the retained most-certain fraction against coverage (:func:`accuracy_coverage`, AUARC in
    the legend), with the oracle and random (overall accuracy) references. ``title``: what the
    plot shows (e.g. the corpus), put before N. Returns ``path``.
    """
    y = np.asarray(labels_array(labels)).astype(bool)
    cols = score_columns(scores)
    if isinstance(cols, pl.DataFrame):
        cols = {c: cols[c].to_numpy() for c in cols.columns}
    elif isinstance(cols, pa.Table):
        cols = {c: cols.column(c).to_numpy() for c in cols.column_names}
    n = y.shape[0]
    if n == 0:
        raise ValueError("no rows to plot")
    fig = agg_figure(6.0, 4.5)
    ax = fig.add_subplot()
    keep = _thin(n)
    k = np.arange(1, n + 1)
    oracle = np.minimum(k, int(y.sum())) / k
    ax.plot(k[keep] / n, oracle[keep], ls="--", color="0.3", lw=1,
            label=f"oracle (AUARC {oracle.mean() * 100:.2f})")
    ax.axhline(y.mean(), ls=":", color="0.5", lw=1,
               label=f"random (accuracy {y.mean() * 100:.2f})")
    for j, (name, u) in enumerate(cols.items()):
        cov, acc = accuracy_coverage(y, np.asarray(u))
        ax.plot(cov[keep], acc[keep], color=f"C{j % 10}", lw=1.5,
                label=f"{name} (AUARC {acc.mean() * 100:.2f})")
    ax.set_xlim(0, 1)
    ax.set_ylim(max(0.0, min(y.mean(), 1.0) - 0.1), 1.02)
    ax.set_xlabel("coverage (fraction kept, most certain first)")
    ax.set_ylabel("accuracy of the kept trajectories")
    ax.set_title(f"{title or 'risk-coverage'}, N = {n:,}", fontsize=10)
    ax.grid(alpha=0.3)
    ax.legend(loc="lower left", fontsize=7)
    fig.subplots_adjust(left=0.12, right=0.97, top=0.92, bottom=0.12)
    path = Path(path)
    fig.savefig(path, format="png")
    return path


def write_plots(
    labels: Any,
    scores: Mapping[str, Any] | pa.Table | pl.DataFrame,
    out_dir: str | os.PathLike,
    *,
    n_bins: int = 15,
    n_folds: int = 5,
    seed: int = 0,
    C: float | None = 1.0,
) -> list[Path]:
    """Write ``reliability_<estimator>.png`` per estimator (out-of-fold Platt probabilities
    from :func:`fastuq.metrics.platt_oof_probabilities` with ``n_folds``, ``seed``, ``C``)
    and ``risk_coverage.png`` into ``out_dir`` (created if needed), as a set: they are drawn
    into a temporary folder beside it and moved in together
    (:func:`fastuq.io.writers.atomic_write_files`), so a failure (OSError on a full disk) or
    SIGTERM leaves none of them. Returns the paths written. Reliability diagrams are skipped
    when the probabilities are undefined (single-class labels). Raises ImportError
    suggesting ``pip install "fastuq[plot]"`` when matplotlib is missing (before anything is
    written).
    """
    from fastuq.io.writers import atomic_write_files

    agg_figure(1, 1)  # fail early, before computing anything, when matplotlib is missing
    y = labels_array(labels)
    cols = score_columns(scores)
    if isinstance(cols, pl.DataFrame | pa.Table):
        names = list(cols.columns if isinstance(cols, pl.DataFrame) else cols.column_names)
    else:
        cols = dict(cols)
        names = list(cols)
    prob = np.asarray(platt_oof_probabilities(y, cols, n_folds=n_folds, seed=seed, C=C))

    def draw(out: Path) -> list[Path]:
        paths: list[Path] = []
        used: set[str] = set()
        for j, name in enumerate(names):
            if np.isnan(prob[:, j]).any():
                continue
            stem = _safe_name(name)
            while stem in used:
                stem += "_"
            used.add(stem)
            paths.append(plot_reliability(y, prob[:, j], out / f"reliability_{stem}.png",
                                          name=name, n_bins=n_bins))
        paths.append(plot_risk_coverage(y, cols, out / "risk_coverage.png"))
        return paths

    return atomic_write_files(out_dir, draw)
