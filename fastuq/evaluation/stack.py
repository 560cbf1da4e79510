"""The estimator stack: a cross-fitted combination of every score column a corpus
supports, per protocol (``fastuq fit --stack``, ``fastuq score --method stack``).

>>> stack = Stack(folds=5).fit({"mean_agreement": a, "sauce": s}, correct, protocols)
>>> print(stack.summary())          # held-out AUROC / AUARC / Brier, stack vs each input
>>> stack.save("stack.json")
>>> Stack.load("stack.json").predict({"mean_agreement": a2, "sauce": s2}, protocols2)
{'stack': array([...])}             # P(wrong): an uncertainty, higher = less likely correct

The model, per protocol: L2 logistic regression of ``correct`` on the estimators' scores,
each standardised with the training rows' mean and standard deviation
(:func:`fastuq.metrics.logistic.logistic_fit`: scikit-learn's
``make_pipeline(StandardScaler(), LogisticRegression(C=C))``, C = 1 by default). The ``stack``
score is the model's probability of being wrong, ``sigmoid(-eta)``, so that it is an
uncertainty like every other column (its ``P(correct)`` is ``1 - stack``). A column with a
non-finite score in a protocol is left out of that protocol's stack (said in the report).

Held out, never in-sample. The protocol's trajectories are split into ``folds`` stratified
folds (:func:`fastuq.metrics.folds.stratified_folds`: the folds of Brier-Platt; seed 0 by
default); each fold's stack scores come from a model (standardisation and coefficients)
fitted on the other folds only. The stack's AUROC, AUARC and Brier score are those of these
out-of-fold scores. Each input estimator is reported beside it on the same rows: its AUROC
and AUARC (no fitting), and its Brier score after out-of-fold Platt scaling on the same
folds with the same ``C`` (Brier-Platt). The paired bootstrap resamples the protocol's
trajectories (``bootstrap`` replicates, the same rows for both sides) and gives the
percentile interval of "stack minus the best single estimator" for each metric, the best
being the input with the best held-out value of that metric (for the Brier score, lower is
better, so a negative difference favours the stack); the fitted models stay fixed, only the
evaluation sample is resampled. The report also gives the in-sample (training) AUROC of the
model saved: the number a leaky evaluation would show.

The model saved is then fitted on every trajectory of the protocol.

The inputs are score columns, not estimators: an estimator may declare several scores
(:attr:`fastuq.engine.estimator.Estimator.scores`: ``eigval_laplacian`` and
``eigval_laplacian_mean``), and ``fastuq fit --stack`` stacks every one of them the scored
corpus carries (:func:`fastuq.engine.registry.score_outputs`). The stack keeps ``columns``
(its inputs, in order) and ``producers`` (``{column: estimator}``, from
:func:`fastuq.engine.registry.score_estimator`; a column no registered estimator declares is
its own producer, as a Python caller's ``{"a": ...}``); ``estimators`` are the distinct
producers, the estimators to run, each once, to apply it.

How it fits the registry: ``stack`` is not a registry entry (an entry is a kernel over packed
arrays, with fixed parameters and presets) but a step after scoring, as ``--calibration`` is:
:func:`fastuq.engine.files.score_file` (``stack=``) runs the stack's input estimators with
the other methods, then adds the ``stack`` column from their scores. Estimators registered
later (by another module or a user) become inputs of the stacks fitted after them.

A stack file (layout 2) records the fastuq version, the input columns and the estimator
producing each, the estimators and their parameters as they were
scored (the values given, and :func:`fastuq.decisions.calibration.scoring_record` per
protocol), the observation noise, the folds, seed, ``C`` and bootstrap settings, the
models and the report. ``fastuq score --method stack`` scores the inputs with the recorded
parameters and refuses a file whose parameters differ from the run's, or another fastuq
major version (:meth:`Stack.check_scoring`, :meth:`Stack.load`). Layout 1 files (fastuq
before the stack took every score column) stacked estimator columns only, each its own
estimator's, and still load as such; layout 2 exists because its models name columns (such
as ``eigval_laplacian_mean``) that are not estimators, which a layout 1 reader would
misread as estimators to run.
"""

from __future__ import annotations

import json
import math
import os
import warnings
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import numpy as np

from fastuq.decisions.calibration import NO_PROTOCOL, scoring_mismatch
from fastuq.decisions.fileheader import check_file_header
from fastuq.metrics.folds import stratified_folds
from fastuq.metrics.logistic import logistic_fit
from fastuq.metrics.newton import PlattConvergenceWarning, stable_sigmoid
from fastuq.metrics.platt import oof_platt
from fastuq.metrics.rank import rank_metrics

__all__ = ["STACK_COLUMN", "STACK_METRICS", "Stack", "fit_stack", "is_stack_file"]

#: The score column the stack writes.
STACK_COLUMN = "stack"
#: Metrics reported per protocol, and whether higher is better.
STACK_METRICS = {"auroc": True, "auarc": True, "brier": False}
FILE_FORMAT = "fastuq-stack"
FILE_FORMAT_VERSION = 2
#: The layouts this fastuq reads: 1 (one column per estimator, named as it) and 2.
READ_VERSIONS = (1, 2)


def is_stack_file(path: str | os.PathLike) -> bool:
    """Whether ``path`` is a JSON object whose ``format`` is a stack file's (False for other
    JSON, non-JSON or unreadable files: their own loaders say what is wrong)."""
    try:
        doc = json.loads(Path(path).read_text(encoding="utf-8"))
    except (OSError, ValueError, UnicodeDecodeError):
        return False
    return isinstance(doc, dict) and doc.get("format") == FILE_FORMAT


def _protocol_groups(protocols: Any, n: int) -> tuple[list[str], np.ndarray]:
    """``(distinct protocols, code [N])``: None -> :data:`NO_PROTOCOL`, a string for every
    row, else one name per row (no nulls: ValueError naming the row)."""
    if protocols is None:
        return [NO_PROTOCOL], np.zeros(n, np.intp)
    if isinstance(protocols, str):
        return [protocols], np.zeros(n, np.intp)
    if hasattr(protocols, "to_numpy") and not isinstance(protocols, np.ndarray):
        try:
            protocols = protocols.to_numpy(zero_copy_only=False)
        except TypeError:
            protocols = protocols.to_numpy()
    arr = np.asarray(protocols, object)
    if arr.shape != (n,):
        raise ValueError(f"protocols must be one per row ({n}), got shape {arr.shape}")
    nulls = np.array([v is None for v in arr], bool) if n else np.zeros(0, bool)
    if nulls.any():
        raise ValueError(f"row {int(np.argmax(nulls))}: no protocol (field protocol)")
    names, code = np.unique(arr.astype(str), return_inverse=True)
    return [str(p) for p in names], code.astype(np.intp)


def _columns(scores: Any) -> dict[str, np.ndarray]:
    """``{name: float64 [N]}`` of a mapping, Polars DataFrame or pyarrow Table."""
    if hasattr(scores, "column_names") and not isinstance(scores, Mapping):  # pyarrow
        return {c: np.asarray(scores.column(c).to_numpy(), np.float64)
                for c in scores.column_names}
    if hasattr(scores, "get_column"):  # polars
        return {c: np.asarray(scores.get_column(c).to_numpy(), np.float64)
                for c in scores.columns}
    if isinstance(scores, Mapping):
        return {str(k): np.asarray(v, np.float64) for k, v in scores.items()}
    raise TypeError(f"scores must be a mapping name -> [N] scores, a Polars DataFrame or a "
                    f"pyarrow Table, got {type(scores).__name__}")


def _producers(columns: list[str], given: Mapping[str, str] | None) -> dict[str, str]:
    """``{column: estimator}`` of the stack's input ``columns``: ``given``'s, else the
    registered estimator declaring the column as a score, else the column itself."""
    from fastuq.engine.registry import score_estimator

    given = dict(given or {})
    return {c: str(given[c]) if c in given else (score_estimator(c) or c) for c in columns}


def _who(ids: Any, k: int) -> str:
    if ids is None:
        return f"row {k}"
    value = ids[k]
    return f"trajectory {(value.as_py() if hasattr(value, 'as_py') else value)!r}"


def _rank(y: np.ndarray, u: np.ndarray) -> dict[str, np.ndarray]:
    """AUROC and AUARC ``[C]`` of uncertainty columns ``u [N, C]``."""
    return rank_metrics(y, np.ascontiguousarray(u, np.float64), ("auroc", "auarc"))


def _bootstrap(y: np.ndarray, stack_u: np.ndarray, stack_p: np.ndarray, single_u: np.ndarray,
               single_p: np.ndarray, best: dict[str, int], replicates: int, level: float,
               rng: np.random.Generator) -> dict[str, dict[str, float]]:
    """Percentile intervals of stack minus the best single estimator, per metric, from
    ``replicates`` paired resamples of the rows (the same rows for both sides; rows taken
    in index order, so that ties keep file order as in the metrics)."""
    n = y.shape[0]
    diffs = {m: np.full(replicates, np.nan) for m in STACK_METRICS}
    u = np.column_stack([stack_u, single_u[:, best["auroc"]], single_u[:, best["auarc"]]])
    p = np.column_stack([stack_p, single_p[:, best["brier"]]])
    yf = y.astype(np.float64)
    for r in range(replicates):
        rows = np.sort(rng.integers(0, n, n))
        yr = y[rows]
        m = _rank(yr, u[rows])
        diffs["auroc"][r] = m["auroc"][0] - m["auroc"][1]
        diffs["auarc"][r] = m["auarc"][0] - m["auarc"][2]
        d = p[rows] - yf[rows, None]
        brier = np.einsum("nc,nc->c", d, d) / n
        diffs["brier"][r] = brier[0] - brier[1]
    tail = 50.0 * (1.0 - level)
    out = {}
    for metric, values in diffs.items():
        ok = values[np.isfinite(values)]
        low, high = (np.percentile(ok, [tail, 100.0 - tail]) if ok.size
                     else (math.nan, math.nan))
        out[metric] = {"low": float(low), "high": float(high), "replicates": int(ok.size)}
    return out


class Stack:
    """The cross-fitted estimator stack (module doc): :meth:`fit`, :meth:`predict`,
    :meth:`summary`, :meth:`save`, :meth:`load`.

    Args:
      folds: stratified folds of the cross-fitting (at least 2; default 5).
      seed: the folds' seed (default 0) and, with it, the bootstrap's.
      C: inverse L2 penalty on the standardised coefficients (default 1.0, scikit-learn's).
      bootstrap: paired bootstrap replicates of the differences (default 1000; 0: none).
      level: the intervals' coverage (default 0.95).

    After :meth:`fit`: ``columns`` (every input column used by some protocol, in input
    order), ``producers`` (``{column: estimator producing it}``), ``estimators`` (the
    distinct producers, in column order: what to score to apply the stack), ``protocols``
    (sorted), ``models_`` (``{protocol: {"columns", "mean", "scale",
    "coef", "intercept"}}``, plain numbers), ``report_`` (``{protocol: ...}``, see
    :meth:`summary`), ``counts_``; ``params`` (the estimator parameters given when the
    inputs were scored) and ``scoring`` (:func:`fastuq.decisions.calibration.scoring_record`
    of them) when set by the caller.
    """

    def __init__(self, *, folds: int = 5, seed: int = 0, C: float = 1.0,
                 bootstrap: int = 1000, level: float = 0.95) -> None:
        if isinstance(folds, bool) or int(folds) != folds or folds < 2:
            raise ValueError(f"folds must be an integer >= 2, got {folds!r}")
        if not (isinstance(C, int | float) and not isinstance(C, bool) and math.isfinite(C)
                and C > 0):
            raise ValueError(f"C must be a positive finite number, got {C!r}")
        if isinstance(bootstrap, bool) or int(bootstrap) != bootstrap or bootstrap < 0:
            raise ValueError(f"bootstrap must be an integer >= 0, got {bootstrap!r}")
        if not 0 < level < 1:
            raise ValueError(f"level must be in (0, 1), got {level!r}")
        self.folds, self.seed, self.C = int(folds), int(seed), float(C)
        self.bootstrap, self.level = int(bootstrap), float(level)
        self.estimators: list[str] = []
        self.columns: list[str] = []
        self.producers: dict[str, str] = {}
        self.protocols: list[str] = []
        self.models_: dict[str, dict[str, Any]] = {}
        self.report_: dict[str, dict[str, Any]] = {}
        self.counts_: dict[str, tuple[int, int]] = {}
        self.params: dict[str, Any] = {}
        self.scoring: dict[str, Any] | None = None
        self.fastuq_version: str | None = None

    def __repr__(self) -> str:
        fitted = f", columns={self.columns}, protocols={self.protocols}" \
            if self.columns else ""
        return f"Stack(folds={self.folds}, C={self.C}{fitted})"

    # -- fitting

    def fit(self, scores: Any, labels: Any, protocols: Any = None, *,
            ids: Any = None, producers: Mapping[str, str] | None = None) -> Stack:
        """Fit one stack per protocol on the score columns ``scores`` (``{column: [N]}``,
        a Polars DataFrame or pyarrow Table; uncertainties) against ``labels [N]`` (bool,
        correct = True), cross-fitted and reported held out (module doc).

        ``protocols``: None (one stack, :data:`NO_PROTOCOL`), a name for every row, or
        ``[N]`` names. ``ids``: ``[N]`` trajectory ids for messages. ``producers``:
        ``{column: estimator}`` for columns whose estimator is not the registered one that
        declares the column as a score (default: that one, else the column's own name).

        Raises:
          ValueError: no score column, lengths that differ, a null label (naming the
            trajectory), a protocol whose smaller class has fewer than ``folds``
            trajectories, or a protocol in which no column is finite everywhere.
        """
        cols = _columns(scores)
        if not cols:
            raise ValueError("no score column to stack")
        names = list(cols)
        y_obj = labels.to_numpy(zero_copy_only=False) if hasattr(labels, "to_numpy") and \
            not isinstance(labels, np.ndarray) else np.asarray(labels)
        if y_obj.dtype == object:
            nulls = np.array([v is None for v in y_obj], bool)
            if nulls.any():
                raise ValueError(f"{_who(ids, int(np.argmax(nulls)))} has no label (field "
                                 "correct is null)")
        y = np.asarray(y_obj).astype(bool)
        n = y.shape[0]
        for name in names:
            if cols[name].shape != (n,):
                raise ValueError(f"score column {name!r} has shape {cols[name].shape}; the "
                                 f"labels are ({n},)")
        distinct, code = _protocol_groups(protocols, n)
        rng = np.random.default_rng([self.seed, 3])
        models, report, counts, used = {}, {}, {}, set()
        for k in sorted(range(len(distinct)), key=lambda k: distinct[k]):
            proto = distinct[k]
            rows = np.flatnonzero(code == k)
            try:
                models[proto], report[proto] = self._fit_protocol(
                    {c: cols[c][rows] for c in names}, y[rows], rng)
            except ValueError as exc:
                raise ValueError(f"protocol {proto!r} ({rows.size:,} trajectories): "
                                 f"{exc}") from None
            counts[proto] = (int(rows.size), int(y[rows].sum()))
            used.update(models[proto]["columns"])
        from fastuq import __version__

        self.columns = [c for c in names if c in used]
        self.producers = _producers(self.columns, producers)
        self.estimators = list(dict.fromkeys(self.producers[c] for c in self.columns))
        self.protocols = sorted(models)
        self.models_, self.report_, self.counts_ = models, report, counts
        self.fastuq_version = __version__
        return self

    def _fit_protocol(self, cols: dict[str, np.ndarray], y: np.ndarray,
                      rng: np.random.Generator) -> tuple[dict[str, Any], dict[str, Any]]:
        """One protocol's model (fitted on all its rows) and held-out report."""
        left_out = {}
        for name, x in cols.items():
            bad = int(np.count_nonzero(~np.isfinite(x)))
            if bad:
                left_out[name] = f"{bad:,} non-finite score(s)"
        use = [c for c in cols if c not in left_out]
        if not use:
            raise ValueError("no score column is finite on every trajectory: "
                             + "; ".join(f"{k} ({v})" for k, v in left_out.items()))
        x = np.column_stack([cols[c] for c in use])
        fold = stratified_folds(y, self.folds, self.seed)
        p_oof = np.empty(y.shape[0])
        eta_oof = np.empty(y.shape[0])
        for f in range(self.folds):
            held = fold == f
            model = logistic_fit(x[~held], y[~held], C=self.C)
            eta_oof[held] = model.decision(x[held])
        u_oof = stable_sigmoid(-eta_oof)  # P(wrong): the stack's uncertainty
        p_oof = stable_sigmoid(eta_oof)
        final = logistic_fit(x, y, C=self.C)
        u_train = stable_sigmoid(-final.decision(x))
        # the inputs on the same rows: rank metrics as they are, Brier after Platt on the
        # same folds (Brier-Platt)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", PlattConvergenceWarning)
            platt = oof_platt(y, x, n_folds=self.folds, seed=self.seed, C=self.C)
        ranks = _rank(y, np.column_stack([u_oof, u_train, x]))
        yf = y.astype(np.float64)
        d = np.column_stack([p_oof, platt]) - yf[:, None]
        brier = np.einsum("nc,nc->c", d, d) / y.shape[0]
        metrics = {STACK_COLUMN: {"auroc": float(ranks["auroc"][0]),
                                  "auarc": float(ranks["auarc"][0]), "brier": float(brier[0])}}
        for j, name in enumerate(use):
            metrics[name] = {"auroc": float(ranks["auroc"][2 + j]),
                             "auarc": float(ranks["auarc"][2 + j]),
                             "brier": float(brier[1 + j])}
        best = {}
        for metric, higher in STACK_METRICS.items():
            values = np.array([metrics[c][metric] for c in use])
            best[metric] = int(np.nanargmax(values) if higher else np.nanargmin(values))
        difference = {m: {"best": use[best[m]],
                          "estimate": metrics[STACK_COLUMN][m] - metrics[use[best[m]]][m]}
                      for m in STACK_METRICS}
        if self.bootstrap:
            intervals = _bootstrap(y, u_oof, p_oof, x, platt, best, self.bootstrap,
                                   self.level, rng)
            for m in STACK_METRICS:
                difference[m].update(intervals[m])
        model = {"columns": use, "mean": final.mean.tolist(), "scale": final.scale.tolist(),
                 "coef": final.coef.tolist(), "intercept": float(final.intercept)}
        report = {"n": int(y.shape[0]), "correct": int(y.sum()), "metrics": metrics,
                  "train_auroc": float(ranks["auroc"][1]), "difference": difference,
                  "left_out": left_out}
        return model, report

    # -- applying

    def _check_fitted(self) -> None:
        if not self.models_:
            raise ValueError("this Stack is not fitted: call fit() or load() first")

    def decision(self, scores: Any, protocols: Any = None, *, ids: Any = None) -> np.ndarray:
        """The log-odds of being correct ``[N]`` float64 from each row's protocol's model
        (``scores`` and ``protocols`` as in :meth:`fit`; other columns are ignored). A NaN
        input score gives NaN. ValueError when a column the model uses is missing, or a
        row's protocol has no model (naming the trajectory, with ``ids``, and the field)."""
        self._check_fitted()
        cols = _columns(scores)
        missing = [c for c in self.columns if c not in cols]
        if missing:
            raise ValueError(f"no score column {missing[0]!r} (estimator "
                             f"{self.producers.get(missing[0], missing[0])!r}): the stack "
                             f"combines {', '.join(self.columns)}; score "
                             f"{', '.join(self.estimators)}")
        n = cols[self.columns[0]].shape[0]
        distinct, code = _protocol_groups(protocols, n)
        unknown = [k for k, p in enumerate(distinct) if p not in self.models_]
        if unknown:
            row = int(np.argmax(np.isin(code, unknown)))
            raise ValueError(f"{_who(ids, row)}: protocol {distinct[unknown[0]]!r} has no "
                             f"stack (fitted: {', '.join(self.protocols)}) (field protocol)")
        eta = np.empty(n, np.float64)
        for k, proto in enumerate(distinct):
            m = self.models_[proto]
            rows = code == k
            x = np.column_stack([cols[c][rows] for c in m["columns"]])
            z = (x - np.asarray(m["mean"])) / np.asarray(m["scale"])
            eta[rows] = z @ np.asarray(m["coef"]) + m["intercept"]
        return eta

    def predict(self, scores: Any, protocols: Any = None, *, ids: Any = None
                ) -> dict[str, np.ndarray]:
        """``{"stack": [N]}``: the probability of being wrong (an uncertainty) of every row
        (:meth:`decision`; ``1 - stack`` is the probability of being correct)."""
        return {STACK_COLUMN: stable_sigmoid(-self.decision(scores, protocols, ids=ids))}

    def check_scoring(self, scoring: Mapping[str, Any]) -> None:
        """ValueError, with the reason, unless ``scoring`` (``scoring_record`` of this
        run's parameters for the stack's estimators and protocols) matches the record of
        how the stack's inputs were scored: the same parameter values per estimator and
        protocol, observation noise and ``math``. A stack without a record is refused."""
        self._check_fitted()
        if self.scoring is None:
            raise ValueError("the stack does not record the parameters its inputs were "
                             "scored with, so it cannot be checked against this run")
        problem = scoring_mismatch(self.scoring, scoring, self.estimators, self.protocols,
                                   subject="the stack was fitted on scores made",
                                   current="this run has", missing_ok=False)
        if problem:
            raise ValueError(problem)

    # -- reporting

    def summary(self) -> str:
        """The held-out report as text: per protocol, one line for the stack and one per
        input (AUROC, AUARC, Brier; in-sample AUROC of the saved model), then the paired
        bootstrap intervals of stack minus the best single estimator."""
        self._check_fitted()
        pct = f"{self.level:.0%}"
        lines = [f"stack: L2 logistic regression (C {self.C:g}) on standardised scores, "
                 f"{self.folds}-fold cross-fitted per protocol (seed {self.seed}); metrics "
                 "held out (Brier of the inputs: out-of-fold Platt on the same folds)"]
        for proto in self.protocols:
            r = self.report_[proto]
            lines.append(f"{proto}: n {r['n']:,}, accuracy {r['correct'] / r['n']:.4f}")
            lines.append(f"  {'estimator':<24} {'AUROC':>7} {'AUARC':>7} {'Brier':>7}")
            for name, m in r["metrics"].items():
                lines.append(f"  {name:<24} {m['auroc']:>7.4f} {m['auarc']:>7.4f} "
                             f"{m['brier']:>7.4f}")
            lines.append(f"  (in-sample AUROC of the stack saved: {r['train_auroc']:.4f})")
            for metric, d in r["difference"].items():
                interval = (f" [{d['low']:+.4f}, {d['high']:+.4f}] ({pct}, "
                            f"{d['replicates']} paired bootstrap replicates)"
                            if "low" in d else "")
                lines.append(f"  stack - {d['best']} ({metric}): {d['estimate']:+.4f}"
                             f"{interval}")
            for name, why in r["left_out"].items():
                lines.append(f"  left out: {name} ({why})")
        return "\n".join(lines)

    # -- saving

    def to_dict(self) -> dict[str, Any]:
        """Everything the file holds (JSON-ready; see :meth:`save`)."""
        self._check_fitted()
        return {
            "format": FILE_FORMAT, "format_version": FILE_FORMAT_VERSION,
            "fastuq_version": self.fastuq_version, "folds": self.folds, "seed": self.seed,
            "C": self.C, "bootstrap": self.bootstrap, "level": self.level,
            "score": ("stack = P(wrong) = sigmoid(-(intercept + sum_j coef_j (x_j - mean_j) / "
                      "scale_j)) over the protocol's columns"),
            "estimators": list(self.estimators), "columns": list(self.columns),
            "producers": {c: self.producers[c] for c in self.columns},
            "protocols": list(self.protocols),
            "counts": {p: {"n": n, "correct": c} for p, (n, c) in self.counts_.items()},
            "params": self.params, "scoring": self.scoring,
            "models": self.models_, "report": self.report_,
        }

    def save(self, path: str | os.PathLike) -> Path:
        """Write the stack as JSON to ``path`` atomically; returns the path."""
        from fastuq.io.writers import atomic_write_text

        path = Path(path)
        atomic_write_text(path, json.dumps(self.to_dict(), indent=1, allow_nan=True) + "\n")
        return path

    @classmethod
    def from_dict(cls, doc: Mapping[str, Any], source: str = "stack") -> Stack:
        """The :class:`Stack` of :meth:`to_dict`'s document (``source`` names it in errors).
        Layout 1 documents (no ``columns``: each estimator its own column) are read too.
        ValueError for another format or layout, another fastuq major version, inputs whose
        producers are not among the estimators, or a model that is not plain finite numbers
        of matching lengths."""
        layout = doc.get("format_version") if isinstance(doc, Mapping) else None
        made = check_file_header(doc, source, "stack", FILE_FORMAT,
                                 layout if type(layout) is int and layout in READ_VERSIONS
                                 else FILE_FORMAT_VERSION, "fastuq fit --stack")
        try:
            st = cls(folds=doc["folds"], seed=doc["seed"], C=doc["C"],
                     bootstrap=doc["bootstrap"], level=doc["level"])
            st.estimators = [str(e) for e in doc["estimators"]]
            if layout == 1:
                st.columns = list(st.estimators)
                st.producers = {c: c for c in st.columns}
            else:
                st.columns = [str(c) for c in doc["columns"]]
                st.producers = {str(c): str(e) for c, e in doc["producers"].items()}
                if set(st.producers) != set(st.columns):
                    raise ValueError(f"producers {sorted(st.producers)} must name each of the "
                                     f"columns {st.columns}")
                made_by = list(dict.fromkeys(st.producers[c] for c in st.columns))
                if made_by != st.estimators:
                    raise ValueError(f"the estimators {st.estimators} must be the columns' "
                                     f"producers {made_by}")
            st.protocols = [str(p) for p in doc["protocols"]]
            models = {}
            for proto in st.protocols:
                m = doc["models"][proto]
                cols = [str(c) for c in m["columns"]]
                unknown = [c for c in cols if c not in st.columns]
                if not cols or unknown:
                    raise ValueError(f"model {proto}: columns {cols} must be among the "
                                     f"stack's columns {st.columns}")
                arrays = {}
                for key in ("mean", "scale", "coef"):
                    v = np.asarray(m[key], np.float64)
                    if v.shape != (len(cols),) or not np.isfinite(v).all():
                        raise ValueError(f"model {proto}: {key} must be {len(cols)} finite "
                                         "numbers")
                    arrays[key] = v.tolist()
                if not (arrays["scale"] and min(arrays["scale"]) > 0):
                    raise ValueError(f"model {proto}: scale must be positive")
                intercept = float(m["intercept"])
                if not math.isfinite(intercept):
                    raise ValueError(f"model {proto}: intercept must be finite")
                models[proto] = {"columns": cols, **arrays, "intercept": intercept}
        except (KeyError, TypeError) as exc:
            raise ValueError(f"{source}: incomplete stack file (missing or bad {exc})") from None
        except ValueError as exc:
            raise ValueError(f"{source}: {exc}") from None
        st.models_ = models
        st.report_ = dict(doc.get("report") or {})
        st.counts_ = {p: (int(v["n"]), int(v["correct"]))
                      for p, v in (doc.get("counts") or {}).items()}
        st.params = dict(doc.get("params") or {})
        st.scoring = doc.get("scoring")
        st.fastuq_version = made
        return st

    @classmethod
    def load(cls, path: str | os.PathLike) -> Stack:
        """Read a stack file written by :meth:`save` (``fastuq fit --stack -o``).

        Raises:
          FileNotFoundError: no such file.
          ValueError: not JSON, not a stack file, another fastuq major version, or a model
            that is not plain finite numbers.
        """
        path = Path(path)
        try:
            doc = json.loads(path.read_text(encoding="utf-8"))
        except json.JSONDecodeError as exc:
            raise ValueError(f"{path}: not JSON ({exc})") from None
        except UnicodeDecodeError:
            raise ValueError(f"{path}: not a text file") from None
        return cls.from_dict(doc, str(path))


def fit_stack(scores: Any, labels: Any, protocols: Any = None, *, ids: Any = None,
              folds: int = 5, seed: int = 0, C: float = 1.0, bootstrap: int = 1000,
              level: float = 0.95, producers: Mapping[str, str] | None = None) -> Stack:
    """``Stack(folds=..., seed=..., C=..., bootstrap=..., level=...).fit(scores, labels,
    protocols, ids=ids, producers=producers)``: the cross-fitted stack of the score
    columns (module doc)."""
    return Stack(folds=folds, seed=seed, C=C, bootstrap=bootstrap, level=level).fit(
        scores, labels, protocols, ids=ids, producers=producers)
