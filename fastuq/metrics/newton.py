"""Newton's method for many 2-parameter logistic (Platt) fits at once, shared by the matrix
path (:mod:`fastuq.metrics.platt`) and the column-by-column engine
(:mod:`fastuq.metrics.platt_fast`): the solver, its stopping rules, its convergence warning
and the stable sigmoid. It sits below both so that neither imports the other for it; the
objective and the notation are :mod:`fastuq.metrics.platt`'s (module doc)."""

from __future__ import annotations

from collections.abc import Callable, Sequence

import numpy as np

__all__ = ["MAX_ITER", "PlattConvergenceWarning", "newton_fits", "stable_sigmoid", "unconverged"]

#: Newton iterations at most per fit.
MAX_ITER = 60
_STEP_TOL = 1e-11
#: :func:`newton_fits` with ``quad``: a fresh step this small (relative) may finish a fit,
_QUAD_STEP = 1e-4
#: when the step after it, predicted from the measured contraction, is this small (relative;
#: what _STEP_TOL leaves).
_QUAD_NEXT = 1e-11


class PlattConvergenceWarning(UserWarning):
    """Newton's method did not converge (for example, separable data with ``C=None``)."""


def newton_fits(
    run: Callable[[np.ndarray, np.ndarray, np.ndarray], Sequence[np.ndarray]],
    sy: np.ndarray,
    lam: float,
    v: np.ndarray,
    b: np.ndarray,
    *,
    syz: np.ndarray | None = None,
    quad: bool = False,
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Newton's method on ``0.5 lam v**2 + sum_{training i} logloss(y_i, v z_i + b)`` for
    every fit at once, from ``(v, b)`` (any shape, e.g. ``[F, C]`` or ``[F]``), with step
    halving where the objective rises and a closed-form 2x2 solve per fit.

    ``run(v, b, active)`` returns the training-row sums of ``softplus(t)``, ``q``, ``q z``,
    ``w``, ``w z`` and ``w z**2`` at ``(v, b)`` (see :func:`_pass`); fits not ``active``
    (finished) may be left unsummed. ``sy``: the training-row sums of ``y``; ``syz``: those
    of ``y z``, or None when ``run`` returns them as a seventh sum (read at the first pass).

    A fit stops when its step is below :data:`_STEP_TOL` ``(1 + |v| + |b|)`` (keeping the
    point before the step), or, with ``quad``, when a fresh Newton step is below
    :data:`_QUAD_STEP` of that scale and the contraction measured over its last two fresh
    steps (``c = |d_k| / |d_{k-1}|**2``) predicts the next below :data:`_QUAD_NEXT` of it
    (keeping the point after the step). Returns ``(v, b, done)``, ``done`` false for fits
    that did not stop in :data:`MAX_ITER` passes.
    """
    shape = v.shape
    v_old, b_old = v.copy(), b.copy()
    obj_old = np.full(shape, np.inf)  # objective at the last accepted point
    dv = np.zeros(shape)
    db = np.zeros(shape)
    last = np.full(shape, np.nan)  # size of the last fresh Newton step
    done = np.zeros(shape, bool)
    for _ in range(MAX_ITER):
        s_sp, s_q, s_qz, hbb, hvb, hvv, *rest = run(v, b, ~done)
        if syz is None:
            syz = rest[0]  # fixed by the standardisation
        obj = s_sp - v * syz - b * sy + 0.5 * lam * v * v
        gv = s_qz - syz + lam * v
        gb = s_q - sy
        hvv = hvv + lam
        # Accept the point unless the objective rose (beyond rounding) along the last step;
        # then halve that step instead.
        rose = ~done & (obj > obj_old + 1e-13 * np.abs(obj_old))
        acc = ~done & ~rose
        # Newton step from the point: solve (H + eps I) d = -g in closed form (eps only
        # guards a singular H; it does not move the optimum). Finished fits may not have
        # been summed: their step is not used.
        eps = 1e-13 * (hvv + hbb)
        h11, h12, h22 = hvv + eps, hvb, hbb + eps
        det = np.where(done, 1.0, h11 * h22 - h12 * h12)
        nv = -(h22 * gv - h12 * gb) / det
        nb = -(h11 * gb - h12 * gv) / det
        v_old = np.where(acc, v, v_old)
        b_old = np.where(acc, b, b_old)
        obj_old = np.where(acc, obj, obj_old)
        dv = np.where(acc, nv, np.where(rose, 0.5 * dv, dv))
        db = np.where(acc, nb, np.where(rose, 0.5 * db, db))
        size = np.maximum(np.abs(dv), np.abs(db))
        scale = 1.0 + np.abs(v_old) + np.abs(b_old)
        stop = ~done & (size <= _STEP_TOL * scale)
        if quad:
            c = np.where(np.isfinite(last) & (last > 0),
                         size / np.maximum(last, 1e-300) ** 2, np.inf)
            finish = acc & ~stop & (size <= _QUAD_STEP * scale) & \
                (c * size * size <= _QUAD_NEXT * scale)
            last = np.where(acc, size, last)
            # a fit finished this way keeps the point after its last step
            v_old = np.where(finish, v_old + dv, v_old)
            b_old = np.where(finish, b_old + db, b_old)
            stop |= finish
        done |= stop
        v = np.where(done, v_old, v_old + dv)
        b = np.where(done, b_old, b_old + db)
        if done.all():
            break
    return v, b, done


def unconverged(bad: np.ndarray, most: int = 8) -> str:
    """The fits of ``bad [F, C]`` (True: not converged) in words, by column and fold:
    ``"column 0: folds 1, 3; column 2: fold 0"`` (at most ``most`` columns named)."""
    parts = []
    cols = np.flatnonzero(bad.any(axis=0))
    for c in cols[:most]:
        folds = np.flatnonzero(bad[:, c]).tolist()
        parts.append(f"column {int(c)}: fold{'s' if len(folds) > 1 else ''} "
                     f"{', '.join(map(str, folds))}")
    if len(cols) > most:
        parts.append(f"and {len(cols) - most} more column(s)")
    return "; ".join(parts)


def stable_sigmoid(t: np.ndarray) -> np.ndarray:
    """``1 / (1 + exp(-t))`` as ``exp(t - softplus(t))``: accurate in both tails, no overflow."""
    sp = np.exp(-np.abs(t))
    np.log1p(sp, out=sp)
    sp += np.maximum(t, 0.0)
    return np.exp(t - sp)
