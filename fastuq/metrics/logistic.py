"""L2-regularised logistic regression on standardised columns, fitted by Newton's method in
NumPy (the model of the cross-fitted estimator stack, :mod:`fastuq.evaluation.stack`).

For features ``x [N, E]`` and labels ``y [N]`` (correct = 1) each column is standardised
with the training rows' mean and population standard deviation, ``z = (x - m) / d``
(``d = 1`` where a column is constant, as scikit-learn's ``StandardScaler``), and the model
``P(y = 1 | x) = sigmoid(b + z . w)`` minimises scikit-learn's ``LogisticRegression(C=C)``
objective::

    0.5 ||w||**2 + C * sum_i logloss(y_i, b + z_i . w)          (no penalty on b)

which is what ``make_pipeline(StandardScaler(), LogisticRegression(C=C))`` fits. Newton's
method: the gradient and the ``(E + 1) x (E + 1)`` Hessian from whole-array sums over the
rows, a linear solve, and step halving while the objective would rise. With ``C`` finite and
positive the objective is strictly convex in ``(w, b)`` and bounded below, so the minimiser
exists (separable data included).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from fastuq.metrics.newton import stable_sigmoid

__all__ = ["LogisticModel", "logistic_fit", "standardise"]

#: Newton iterations at most.
MAX_ITER = 100
_STEP_TOL = 1e-12


@dataclass(frozen=True)
class LogisticModel:
    """A fitted model: ``P(y = 1 | x) = sigmoid(intercept + ((x - mean) / scale) . coef)``.

    mean, scale, coef: float64 ``[E]``; intercept: float; iterations: Newton steps taken.
    """

    mean: np.ndarray
    scale: np.ndarray
    coef: np.ndarray
    intercept: float
    iterations: int = 0

    def decision(self, x: np.ndarray) -> np.ndarray:
        """The linear predictor ``[N]`` (log-odds of ``y = 1``) of features ``x [N, E]``."""
        z = (np.asarray(x, np.float64) - self.mean) / self.scale
        return z @ self.coef + self.intercept

    def probability(self, x: np.ndarray) -> np.ndarray:
        """``P(y = 1 | x)`` ``[N]`` float64 of features ``x [N, E]``."""
        return stable_sigmoid(self.decision(x))


def standardise(x: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """``(mean [E], scale [E])`` of the columns of ``x [N, E]``: mean and population standard
    deviation, the scale 1 where a column is constant (scikit-learn's ``StandardScaler``)."""
    x = np.asarray(x, np.float64)
    mean = x.mean(axis=0)
    scale = x.std(axis=0)
    const = (x.max(axis=0) == x.min(axis=0)) | ~(scale > 0)
    return np.where(const, x[0] if x.shape[0] else 0.0, mean), np.where(const, 1.0, scale)


def _objective(z: np.ndarray, y: np.ndarray, w: np.ndarray, b: float, lam: float) -> float:
    t = z @ w + b
    return float(np.sum(np.logaddexp(0.0, t) - y * t) + 0.5 * lam * (w @ w))


def logistic_fit(x: np.ndarray, y: np.ndarray, *, C: float = 1.0) -> LogisticModel:
    """The L2 logistic regression of ``y [N]`` (bool or 0/1) on the standardised columns of
    ``x [N, E]`` (module doc). ``C``: scikit-learn's inverse penalty, finite and > 0.

    Raises ValueError for shapes that do not match, non-finite features, ``C`` not positive
    and finite, or labels of one class only."""
    x = np.asarray(x, np.float64)
    y = np.asarray(y).astype(np.float64)
    if x.ndim != 2 or y.shape != (x.shape[0],) or not x.shape[0]:
        raise ValueError(f"features {x.shape} and labels {y.shape} must be [N, E] and [N], "
                         "N > 0")
    if not (isinstance(C, int | float) and math.isfinite(C) and C > 0):
        raise ValueError(f"C must be a positive finite number, got {C!r}")
    if not np.isfinite(x).all():
        raise ValueError("features must be finite")
    n_pos = float(y.sum())
    if n_pos == 0 or n_pos == y.shape[0]:
        raise ValueError("labels of one class only: the logistic regression is undefined")
    mean, scale = standardise(x)
    z = (x - mean) / scale
    lam = 1.0 / C
    n, e = z.shape
    za = np.concatenate([z, np.ones((n, 1))], axis=1)  # [N, E + 1], intercept last
    theta = np.zeros(e + 1)
    p0 = n_pos / n
    theta[-1] = math.log(p0 / (1.0 - p0))
    penalty = np.full(e + 1, lam)
    penalty[-1] = 0.0
    obj = _objective(z, y, theta[:-1], theta[-1], lam)
    it = 0
    for it in range(1, MAX_ITER + 1):  # noqa: B007 (the count is reported)
        t = za @ theta
        q = stable_sigmoid(t)
        grad = za.T @ (q - y) + penalty * theta
        w = q * (1.0 - q)
        hess = (za * w[:, None]).T @ za + np.diag(penalty)
        hess[np.diag_indices_from(hess)] += 1e-12 * (1.0 + np.abs(np.diag(hess)))
        step = -np.linalg.solve(hess, grad)
        accepted = False
        for _ in range(60):  # halve the step while the objective rises
            cand = theta + step
            new = _objective(z, y, cand[:-1], cand[-1], lam)
            if new <= obj + 1e-13 * abs(obj):
                accepted = True
                break
            step *= 0.5
        if not accepted:
            break
        theta, obj = cand, new
        if np.max(np.abs(step)) <= _STEP_TOL * (1.0 + np.max(np.abs(theta))):
            break
    return LogisticModel(mean=mean, scale=scale, coef=theta[:-1].copy(),
                         intercept=float(theta[-1]), iterations=it)
