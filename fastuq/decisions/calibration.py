"""Calibrated probabilities of being correct: Platt and isotonic maps of uncertainty scores,
per estimator and protocol, fitted on a labelled corpus, checked out of fold, saved as plain
numbers in JSON and applied to new scores (``fastuq calibrate``, ``fastuq score
--calibration``).

>>> cal = Calibrator("isotonic").fit({"sauce": scores}, correct, protocols)
>>> cal.metrics_["sauce"]["debate"]          # held-out Brier, log-loss, ECE (15 bins)
>>> cal.save("calib.json")
>>> Calibrator.load("calib.json").predict_proba({"sauce": new_scores}, new_protocols)
{'p_correct_sauce': array([...])}

The maps (scores are uncertainties: a higher score means less likely correct):

* ``platt``: ``P(correct | x) = sigmoid(alpha + beta x)``, the fit of Brier-Platt
  (:func:`fastuq.metrics.platt.platt_fit`): the score standardised with the protocol's mean
  and population standard deviation, an L2 penalty ``C`` (default 1, scikit-learn's
  ``LogisticRegression(C=1)``) on the standardised slope, mapped back to the score's scale.
  The file keeps ``alpha, beta`` and the standardised form (``mean, scale, slope,
  intercept``: ``slope = beta scale``, ``intercept = alpha + beta mean``).
* ``isotonic``: the non-increasing step function of the score that is closest to the labels
  in squared error (pool adjacent violators, written here with NumPy: tied scores pooled
  first, then vectorised passes that pool every run of violating blocks at once, the last
  few blocks by the stack algorithm), kept as the points where it changes (``thresholds``
  ascending, ``values`` non-increasing: the first and last score of each constant block, as
  scikit-learn's ``IsotonicRegression(increasing=False)`` keeps them). Applied by linear
  interpolation between the thresholds (``np.interp``); a score below the first threshold
  takes the first value, above the last the last value.

Every probability is clipped to [0, 1]; a NaN score gives a NaN probability.

Held-out metrics: for each protocol the labels are split into ``n_folds`` stratified folds
(:func:`fastuq.metrics.folds.stratified_folds`, the folds of Brier-Platt; seed 0 by default),
each fold's probabilities come from maps fitted on the other folds, and the out-of-fold
probabilities give the Brier score, the log-loss (probabilities clipped to ``[eps, 1 - eps]``,
``eps`` float64's machine epsilon, as scikit-learn's ``log_loss``) and the ECE in
:data:`ECE_BINS` equal-width bins (:func:`fastuq.metrics.ece.ece_matrix`), per protocol and
pooled over protocols. The maps saved are then fitted on every row of the protocol.

A calibration file records the fastuq version, the method, fold count, seed and penalty, the
protocols, each estimator's parameters as they were scored (per protocol, resolved the way
the scorer resolves them: given value, else the protocol's preset, else the default) and the
observation noise. :meth:`Calibrator.load` refuses a file of another fastuq major version
(the first number; for 0.x versions the first two); :meth:`Calibrator.check_scoring`
refuses scores made with other parameters.
"""

from __future__ import annotations

import json
import math
import os
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from fastuq.decisions.fileheader import check_file_header, major_version
from fastuq.decisions.isotonic import isotonic_fit, isotonic_predict
from fastuq.metrics.ece import ece_matrix
from fastuq.metrics.folds import stratified_folds
from fastuq.metrics.inputs import as_labels
from fastuq.metrics.newton import stable_sigmoid
from fastuq.metrics.platt import oof_platt, platt_fit

__all__ = ["CALIBRATION_METHODS", "ECE_BINS", "NO_PROTOCOL", "Calibrator", "calibration_metrics",
           "isotonic_fit", "isotonic_predict", "major_version", "probability_column",
           "scoring_mismatch", "scoring_record"]

#: The maps :class:`Calibrator` fits.
CALIBRATION_METHODS = ("platt", "isotonic")
#: Equal-width bins of the ECE reported.
ECE_BINS = 15
#: The protocol key of trajectories that have no protocol (a corpus without the column).
NO_PROTOCOL = "(no protocol)"
#: What the ``format`` key of a calibration file says, and the layout's version.
FILE_FORMAT = "fastuq-calibration"
FILE_FORMAT_VERSION = 1
#: How the isotonic map is applied (written into the file).
INTERPOLATION = ("linear between consecutive thresholds (numpy.interp); a score below the "
                 "first threshold takes the first value, above the last the last value; "
                 "clipped to [0, 1]; a NaN score gives NaN")


def probability_column(estimator: str) -> str:
    """The column of ``estimator``'s calibrated probability: ``p_correct_<estimator>``."""
    return f"p_correct_{estimator}"


def _platt_predict(x: np.ndarray, alpha: float, beta: float) -> np.ndarray:
    return np.clip(stable_sigmoid(alpha + beta * np.asarray(x, np.float64)), 0.0, 1.0)


# ------------------------------------------------------------------------------- metrics


def calibration_metrics(labels: Any, probabilities: Any, *, n_bins: int = ECE_BINS
                        ) -> dict[str, float]:
    """``n``, ``accuracy``, ``brier`` (mean squared error of the probabilities), ``log_loss``
    (natural log, probabilities clipped to ``[eps, 1 - eps]`` with ``eps`` float64's machine
    epsilon, as scikit-learn's ``log_loss``) and ``ece`` (``n_bins`` equal-width bins) of
    probabilities ``[N]`` of being correct against ``labels [N]`` (bool)."""
    y = np.asarray(labels, bool)
    p = np.asarray(probabilities, np.float64)
    if p.shape != y.shape or p.ndim != 1 or not p.shape[0]:
        raise ValueError(f"labels {y.shape} and probabilities {p.shape} must be [N] alike, "
                         "N > 0")
    eps = np.finfo(np.float64).eps
    q = np.clip(p, eps, 1.0 - eps)
    yf = y.astype(np.float64)
    return {
        "n": int(y.shape[0]),
        "accuracy": float(yf.mean()),
        "brier": float(np.mean((p - yf) ** 2)),
        "log_loss": float(-np.mean(np.where(y, np.log(q), np.log1p(-q)))),
        "ece": float(ece_matrix(y, p[:, None], n_bins)[0]),
    }


# ------------------------------------------------------------------------------- recording


def _plain(value: Any) -> Any:
    """A parameter value as JSON keeps it: a float, or a string."""
    if isinstance(value, str):
        return value
    if isinstance(value, Mapping) or np.ndim(value):
        raise ValueError("per-trajectory parameter arrays cannot be recorded in a calibration "
                         "file; give one value (per protocol)")
    return float(value)


def scoring_record(
    methods: Sequence[str],
    protocols: Sequence[str],
    params: Mapping[str, Any] | None = None,
    *,
    observation_noise: float | None = None,
    math: bool = False,
) -> dict[str, Any]:
    """How ``methods`` score each of ``protocols`` with estimator parameters ``params`` (as
    :func:`fastuq.score` takes them: a value, or ``{protocol: value}``): ``{"params":
    {estimator: {protocol: {parameter: value}}}, "observation_noise": ..., "math": ...}``,
    each parameter resolved as the scorer resolves it (the value given for the protocol,
    else the protocol's preset, else the default; :data:`NO_PROTOCOL` consults no preset).
    A name of ``methods`` may also be a score column that an estimator declares
    (``eigval_laplacian_mean``, a calibrated column): it is recorded under its own name with
    the parameters of the estimator that writes it
    (:func:`fastuq.engine.registry.score_estimator`).
    ValueError when a protocol has no value for a parameter or a value is out of range;
    TypeError for a parameter no estimator takes."""
    from fastuq.engine.registry import ESTIMATORS, check_params, get_estimator, score_estimator

    params = {k: v for k, v in (params or {}).items() if v is not None}
    check_params(params, None)  # names and ranges (others' parameters may be among them)
    out: dict[str, dict[str, dict[str, Any]]] = {}
    for name in methods:
        est = get_estimator(name if name in ESTIMATORS else (score_estimator(name) or name))
        per: dict[str, dict[str, Any]] = {}
        for proto in protocols:
            own = {k: (v.get(proto) if isinstance(v, Mapping) else v)
                   for k, v in params.items() if k in est.param_names}
            values = est.resolve(None if proto == NO_PROTOCOL else proto, own)
            values.update(est.packing({k: v for k, v in own.items()
                                       if not est.param(k).kernel}))
            per[proto] = {k: _plain(v) for k, v in sorted(values.items())}
        out[name] = per
    return {"params": out,
            "observation_noise": None if observation_noise is None else float(observation_noise),
            "math": bool(math)}



def scoring_mismatch(mine: Mapping, now: Mapping, estimators, protocols, *, subject: str,
                     current: str, missing_ok: bool) -> str | None:
    """Why scores made as ``now`` describes (a :func:`scoring_record`) are not made as
    ``mine`` (the record a fitted calibration or stack keeps), or None when they are: the
    observation noise, ``math``, then each estimator's parameters per protocol. Messages
    read ``"{subject} with observation noise X; {current} Y"`` and ``"estimator E, protocol
    P: {subject} with other parameters (...)"``. ``missing_ok``: a parameter set missing on
    either side is not a difference."""
    now = json.loads(json.dumps(now))
    for key, what in (("observation_noise", "observation noise"), ("math", "math")):
        if mine.get(key) != now.get(key):
            return f"{subject} with {what} {mine.get(key)!r}; {current} {now.get(key)!r}"
    for est in estimators:
        for proto in protocols:
            a = (mine.get("params") or {}).get(est, {}).get(proto)
            b = (now.get("params") or {}).get(est, {}).get(proto)
            if a == b or (missing_ok and (a is None or b is None)):
                continue
            diff = [f"{k} {(a or {}).get(k)!r} there, {(b or {}).get(k)!r} here"
                    for k in sorted(set(a or {}) | set(b or {}))
                    if (a or {}).get(k) != (b or {}).get(k)]
            return (f"estimator {est!r}, protocol {proto!r}: {subject} with other parameters "
                    f"({'; '.join(diff)})")
    return None

# ------------------------------------------------------------------------------- the model


def _numpy(values: Any) -> np.ndarray:
    """An Arrow, Polars or array-like column as NumPy."""
    if hasattr(values, "to_numpy"):
        try:
            return values.to_numpy(zero_copy_only=False)
        except TypeError:
            return values.to_numpy()
    return np.asarray(values)


def _score_columns(scores: Any, names: Sequence[str] | None = None) -> dict[str, np.ndarray]:
    """``{name: float64 [N]}`` of a mapping, a Polars DataFrame or a pyarrow Table: every
    column, or those of ``names`` that it has (other columns, such as ids, are not read)."""
    if hasattr(scores, "column_names") and not isinstance(scores, Mapping):  # pyarrow
        have, get = list(scores.column_names), scores.column
    elif hasattr(scores, "get_column"):  # Polars
        have, get = list(scores.columns), scores.get_column
    elif isinstance(scores, Mapping):
        have, get = [str(k) for k in scores], scores.__getitem__
    else:
        raise TypeError(f"scores must be a mapping name -> [N] scores, a Polars DataFrame or "
                        f"a pyarrow Table, got {type(scores).__name__}")
    wanted = have if names is None else [c for c in names if c in have]
    out = {}
    for name in wanted:
        try:
            out[name] = _numpy(get(name)).astype(np.float64)
        except (TypeError, ValueError):
            raise ValueError(f"score column {name!r} does not hold numbers") from None
    return out


def _protocol_codes(protocols: Any, n: int) -> tuple[list[str], np.ndarray]:
    """``(distinct protocols, index [N] into them)``: ``None`` is :data:`NO_PROTOCOL` for
    every row, a string the same protocol for every row, else one per row (Arrow or NumPy;
    no nulls: ValueError naming the row)."""
    if protocols is None:
        return [NO_PROTOCOL], np.zeros(n, np.intp)
    if isinstance(protocols, str):
        return [protocols], np.zeros(n, np.intp)
    import pyarrow as pa
    import pyarrow.compute as pc

    if hasattr(protocols, "to_arrow"):  # Polars Series
        protocols = protocols.to_arrow()
    if isinstance(protocols, pa.ChunkedArray):
        protocols = protocols.combine_chunks()
    if not isinstance(protocols, pa.Array):
        protocols = pa.array(np.asarray(protocols, object), pa.string())
    if len(protocols) != n:
        raise ValueError(f"protocols must be one per row ({n}), got {len(protocols)}")
    if protocols.null_count:
        k = int(np.argmax(protocols.is_null().to_numpy(zero_copy_only=False)))
        raise ValueError(f"row {k}: no protocol (field protocol)")
    if pa.types.is_dictionary(protocols.type):
        protocols = protocols.cast(pa.string())
    enc = pc.dictionary_encode(protocols.cast(pa.string()))
    return ([str(p) for p in enc.dictionary.to_pylist()],
            enc.indices.to_numpy(zero_copy_only=False).astype(np.intp))


def _who(ids: Any, k: int) -> str:
    if ids is None:
        return f"row {k}"
    value = ids[k]
    value = value.as_py() if hasattr(value, "as_py") else value
    return f"trajectory {value!r}"


class Calibrator:
    """Probabilities of being correct from uncertainty scores, in scikit-learn's manner:
    :meth:`fit`, :meth:`predict_proba`, :meth:`save`, :meth:`load` (module doc for the maps
    and metrics).

    Args:
      method: ``"platt"`` (default) or ``"isotonic"``.
      n_folds: stratified folds of the held-out metrics (default 5, at least 2).
      seed: the folds' seed (default 0, Brier-Platt's).
      C: Platt's inverse L2 penalty on the standardised slope (default 1.0; ``None``: none).
      n_bins: the ECE's equal-width bins (default :data:`ECE_BINS`).

    After :meth:`fit`: ``estimators`` and ``protocols`` (sorted) fitted, ``maps_``
    (``{estimator: {protocol: map}}``, plain numbers), ``metrics_`` (``{estimator:
    {protocol or "all": held-out metrics}}``) and ``counts_`` (``{protocol: (n, n
    correct)}``); ``scoring`` holds how the scores were made (:func:`scoring_record`), when
    given.
    """

    def __init__(self, method: str = "platt", *, n_folds: int = 5, seed: int = 0,
                 C: float | None = 1.0, n_bins: int = ECE_BINS) -> None:
        if method not in CALIBRATION_METHODS:
            raise ValueError(f"calibration method must be one of {', '.join(CALIBRATION_METHODS)}"
                             f", got {method!r}")
        if isinstance(n_folds, bool) or int(n_folds) != n_folds or n_folds < 2:
            raise ValueError(f"n_folds must be an integer >= 2, got {n_folds!r}")
        if isinstance(n_bins, bool) or int(n_bins) != n_bins or n_bins < 1:
            raise ValueError(f"n_bins must be an integer >= 1, got {n_bins!r}")
        if C is not None and not (isinstance(C, int | float) and C > 0 and math.isfinite(C)):
            raise ValueError(f"C must be a positive finite number or None, got {C!r}")
        self.method = method
        self.n_folds = int(n_folds)
        self.seed = int(seed)
        self.C = None if C is None else float(C)
        self.n_bins = int(n_bins)
        self.estimators: list[str] = []
        self.protocols: list[str] = []
        self.maps_: dict[str, dict[str, dict[str, Any]]] = {}
        self.metrics_: dict[str, dict[str, dict[str, float]]] = {}
        self.counts_: dict[str, tuple[int, int]] = {}
        self.scoring: dict[str, Any] | None = None
        self.fastuq_version: str | None = None

    def __repr__(self) -> str:
        fitted = f", estimators={self.estimators}, protocols={self.protocols}" \
            if self.estimators else ""
        return f"Calibrator({self.method!r}, n_folds={self.n_folds}{fitted})"

    # -- fitting

    def _fit_map(self, x: np.ndarray, y: np.ndarray) -> list[dict[str, Any]]:
        """The maps of the columns of ``x [n, E]`` fitted on labels ``y [n]``."""
        if self.method == "isotonic":
            out = []
            for j in range(x.shape[1]):
                thr, val = isotonic_fit(x[:, j], y)
                out.append({"thresholds": thr.tolist(), "values": val.tolist()})
            return out
        alpha, beta = platt_fit(y, x, C=self.C)
        mean = x.mean(axis=0)
        scale = x.std(axis=0)
        scale = np.where(scale > 0, scale, 1.0)
        return [{"alpha": float(a), "beta": float(b), "mean": float(m), "scale": float(s),
                 "slope": float(b * s), "intercept": float(a + b * m)}
                for a, b, m, s in zip(alpha, beta, mean, scale, strict=True)]

    def _oof(self, x: np.ndarray, y: np.ndarray, fold: np.ndarray) -> np.ndarray:
        """Out-of-fold probabilities ``[n, E]``."""
        if self.method == "platt":
            return oof_platt(y, x, n_folds=self.n_folds, seed=self.seed, C=self.C)
        prob = np.empty(x.shape, np.float64)
        for f in range(self.n_folds):
            held = fold == f
            for j in range(x.shape[1]):
                thr, val = isotonic_fit(x[~held, j], y[~held])
                prob[held, j] = isotonic_predict(x[held, j], thr, val)
        return prob

    def fit(self, scores: Any, labels: Any, protocols: Any = None, *, ids: Any = None,
            scoring: Mapping[str, Any] | None = None) -> Calibrator:
        """Fit one map per estimator (score column) and protocol, and measure them out of fold.

        Args:
          scores: ``{estimator: [N] uncertainty scores}`` (or a Polars DataFrame / pyarrow
            Table of score columns); finite.
          labels: ``[N]`` bool, correct = True.
          protocols: ``None`` (no protocol: one map per estimator under
            :data:`NO_PROTOCOL`), one protocol name for every row, or ``[N]`` names.
          ids: ``[N]`` trajectory ids, for error messages.
          scoring: how the scores were made (:func:`scoring_record`), saved with the maps.

        Raises:
          ValueError: no score column, lengths that differ, a NaN or infinite score (naming
            the trajectory and the estimator), a null label, or a protocol whose smaller
            class has fewer than ``n_folds`` trajectories.
        """
        cols = _score_columns(scores)
        if not cols:
            raise ValueError("no score column to calibrate")
        names = list(cols)
        y_obj = _numpy(labels)
        if y_obj.dtype == object:
            nulls = np.array([v is None for v in y_obj.ravel()])
            if nulls.any():
                k = int(np.argmax(nulls))
                raise ValueError(f"{_who(ids, k)} has no label (field correct is null)")
            y_obj = y_obj.astype(bool)
        y = as_labels(y_obj)
        n = y.shape[0]
        x = np.empty((n, len(names)), np.float64)
        for j, name in enumerate(names):
            if cols[name].shape != (n,):
                raise ValueError(f"score column {name!r} has shape {cols[name].shape}; the "
                                 f"labels are ({n},)")
            bad = ~np.isfinite(cols[name])
            if bad.any():
                k = int(np.argmax(bad))
                raise ValueError(f"{_who(ids, k)}: score {cols[name][k]} is not finite (field "
                                 f"{name}); calibration needs a finite score for every row")
            x[:, j] = cols[name]
        distinct, code = _protocol_codes(protocols, n)
        order = sorted(range(len(distinct)), key=lambda k: distinct[k])
        maps: dict[str, dict[str, dict[str, Any]]] = {m: {} for m in names}
        metrics: dict[str, dict[str, dict[str, float]]] = {m: {} for m in names}
        oof = np.empty_like(x)
        counts = {}
        for k in order:
            proto = distinct[k]
            rows = np.flatnonzero(code == k)
            yg, xg = y[rows], x[rows]
            try:
                fold = stratified_folds(yg, self.n_folds, self.seed)
            except ValueError as exc:
                raise ValueError(f"protocol {proto!r} ({rows.shape[0]:,} trajectories): "
                                 f"{exc}") from None
            prob = self._oof(xg, yg, fold)
            oof[rows] = prob
            counts[proto] = (int(rows.shape[0]), int(yg.sum()))
            for j, (name, fitted) in enumerate(zip(names, self._fit_map(xg, yg), strict=True)):
                maps[name][proto] = fitted
                metrics[name][proto] = calibration_metrics(yg, prob[:, j], n_bins=self.n_bins)
        for j, name in enumerate(names):
            metrics[name]["all"] = calibration_metrics(y, oof[:, j], n_bins=self.n_bins)
        from fastuq import __version__

        self.estimators = names
        self.protocols = [distinct[k] for k in order]
        self.maps_, self.metrics_, self.counts_ = maps, metrics, counts
        self.scoring = None if scoring is None else json.loads(json.dumps(scoring))
        self.fastuq_version = __version__
        return self

    # -- applying

    def _check_fitted(self) -> None:
        if not self.estimators:
            raise ValueError("this Calibrator is not fitted: call fit() or load() first")

    def predict_proba(self, scores: Any, protocols: Any = None, *, ids: Any = None
                      ) -> dict[str, np.ndarray]:
        """``{p_correct_<estimator>: float64 [N] in [0, 1]}`` for every fitted estimator,
        from the map of each row's protocol (``protocols`` as in :meth:`fit`; other score
        columns are ignored). A NaN score gives NaN. ValueError when a fitted estimator's
        column is missing or a row's protocol has no map (naming the trajectory, with
        ``ids``, and the field)."""
        self._check_fitted()
        cols = _score_columns(scores, self.estimators)
        missing = [m for m in self.estimators if m not in cols]
        if missing:
            raise ValueError(f"no score column {missing[0]!r}: the calibration is of "
                             f"{', '.join(self.estimators)}; score those estimators")
        n = cols[self.estimators[0]].shape[0]
        distinct, code = _protocol_codes(protocols, n)
        unknown = [k for k, p in enumerate(distinct) if p not in self.protocols]
        if unknown:
            row = int(np.argmax(np.isin(code, unknown)))
            raise ValueError(f"{_who(ids, row)}: protocol {distinct[unknown[0]]!r} has no "
                             f"calibration map (calibrated: {', '.join(self.protocols)}) "
                             f"(field protocol)")
        out = {}
        for name in self.estimators:
            x = cols[name]
            if x.shape != (n,):
                raise ValueError(f"score column {name!r} has shape {x.shape}, not ({n},)")
            maps = [self.maps_[name][p] for p in distinct]
            if self.method == "platt":
                alpha = np.array([m["alpha"] for m in maps])[code]
                beta = np.array([m["beta"] for m in maps])[code]
                prob = _platt_predict(x, alpha, beta)
            elif len(maps) == 1:
                prob = isotonic_predict(x, maps[0]["thresholds"], maps[0]["values"])
            else:
                prob = np.empty(n, np.float64)
                for k, m in enumerate(maps):  # one vectorised pass per protocol
                    rows = code == k
                    prob[rows] = isotonic_predict(x[rows], m["thresholds"], m["values"])
            out[probability_column(name)] = prob
        return out

    def check_scoring(self, scoring: Mapping[str, Any]) -> None:
        """ValueError, with the reason, unless ``scoring`` (:func:`scoring_record` of the
        scores to calibrate, for this file's estimators and protocols) matches how the
        calibration's scores were made: the same parameter values per estimator and
        protocol, the same observation noise and ``math``. A calibration that does not record
        how its scores were made (fitted without ``scoring``) is refused too."""
        self._check_fitted()
        if self.scoring is None:
            raise ValueError("the calibration does not record the parameters its scores were "
                             "made with (fit it with scoring=scoring_record(...), as fastuq "
                             "calibrate does), so it cannot be checked against these scores")
        problem = scoring_mismatch(self.scoring, scoring, self.estimators, self.protocols,
                                   subject="the calibration was made from scores",
                                   current="these scores have", missing_ok=True)
        if problem:
            raise ValueError(problem)

    # -- saving

    def to_dict(self) -> dict[str, Any]:
        """Everything the file holds (JSON-ready; see :meth:`save`)."""
        self._check_fitted()
        return {
            "format": FILE_FORMAT,
            "format_version": FILE_FORMAT_VERSION,
            "fastuq_version": self.fastuq_version,
            "method": self.method,
            "n_folds": self.n_folds,
            "seed": self.seed,
            "C": self.C if self.method == "platt" else None,
            "ece_bins": self.n_bins,
            "map": ("P(correct) = sigmoid(alpha + beta * score) (Platt on the standardised "
                    "score: slope, intercept at (score - mean) / scale); clipped to [0, 1]; "
                    "a NaN score gives NaN" if self.method == "platt" else INTERPOLATION),
            "metrics_are": (f"held out: {self.n_folds} stratified folds per protocol (seed "
                            f"{self.seed}), maps fitted on the other folds; log-loss with "
                            f"probabilities clipped to [eps, 1 - eps]; ECE in {self.n_bins} "
                            "equal-width bins; 'all': the protocols' out-of-fold "
                            "probabilities pooled"),
            "estimators": list(self.estimators),
            "protocols": list(self.protocols),
            "counts": {p: {"n": n, "correct": c} for p, (n, c) in self.counts_.items()},
            "scoring": self.scoring,
            "maps": self.maps_,
            "metrics": self.metrics_,
        }

    def save(self, path: str | os.PathLike) -> Path:
        """Write the calibration as JSON to ``path`` atomically (a temporary file renamed into
        place); returns the path."""
        from fastuq.io.writers import atomic_write_text

        path = Path(path)
        atomic_write_text(path, json.dumps(self.to_dict(), indent=1, allow_nan=False) + "\n")
        return path

    @classmethod
    def from_dict(cls, doc: Mapping[str, Any], source: str = "calibration") -> Calibrator:
        """The :class:`Calibrator` of :meth:`to_dict`'s document (``source`` names it in
        errors). ValueError for another format, another fastuq major version or a map that
        is not plain numbers."""
        made = check_file_header(doc, source, "calibration", FILE_FORMAT, FILE_FORMAT_VERSION,
                                 "fastuq calibrate")
        try:
            cal = cls(doc["method"], n_folds=doc["n_folds"], seed=doc["seed"],
                      C=doc.get("C") if doc["method"] == "platt" else 1.0,
                      n_bins=doc["ece_bins"])
            cal.estimators = [str(e) for e in doc["estimators"]]
            cal.protocols = [str(p) for p in doc["protocols"]]
            maps = doc["maps"]
            keys = ("alpha", "beta") if cal.method == "platt" else ("thresholds", "values")
            for est in cal.estimators:
                for proto in cal.protocols:
                    m = maps[est][proto]
                    for key in keys:
                        v = np.asarray(m[key], np.float64)
                        if not np.isfinite(v).all() or (cal.method == "isotonic"
                                                        and (v.ndim != 1 or not v.size)):
                            raise ValueError(f"map {est}/{proto}: {key} must be finite numbers")
                    if cal.method == "isotonic":
                        thr = np.asarray(m["thresholds"], np.float64)
                        if len(m["thresholds"]) != len(m["values"]) or (np.diff(thr) <= 0).any():
                            raise ValueError(f"map {est}/{proto}: thresholds must be strictly "
                                             "increasing, one value each")
            cal.maps_ = {e: {p: dict(maps[e][p]) for p in cal.protocols}
                         for e in cal.estimators}
        except (KeyError, TypeError) as exc:
            raise ValueError(f"{source}: incomplete calibration file (missing or bad "
                             f"{exc})") from None
        except ValueError as exc:
            raise ValueError(f"{source}: {exc}") from None
        cal.metrics_ = dict(doc.get("metrics") or {})
        cal.counts_ = {p: (int(v["n"]), int(v["correct"]))
                       for p, v in (doc.get("counts") or {}).items()}
        cal.scoring = doc.get("scoring")
        cal.fastuq_version = made
        return cal

    @classmethod
    def load(cls, path: str | os.PathLike) -> Calibrator:
        """Read a calibration file written by :meth:`save` (``fastuq calibrate -o``).

        Raises:
          FileNotFoundError: no such file.
          ValueError: not JSON, not a calibration file, another fastuq major version, or a
            map that is not plain finite numbers.
        """
        path = Path(path)
        try:
            doc = json.loads(path.read_text(encoding="utf-8"))
        except json.JSONDecodeError as exc:
            raise ValueError(f"{path}: not JSON ({exc})") from None
        except UnicodeDecodeError:
            raise ValueError(f"{path}: not a text file") from None
        return cls.from_dict(doc, str(path))
