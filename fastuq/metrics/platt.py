"""Out-of-fold Platt scaling of many score columns, all columns and folds fitted at once.

For score column ``c`` and fold ``f`` (``StratifiedKFold(n_folds, shuffle=True,
random_state=seed)`` on the labels, so one split serves every column) the score is first
standardised with the training part's mean and (population) standard deviation,
``z = (x - m_fc) / d_fc`` (``d_fc = 1`` where the training part is constant), and the model
``P(correct | x) = sigmoid(v z + b)`` is fitted on the other folds by minimising
scikit-learn's ``LogisticRegression(C=C)`` objective on ``z``::

    0.5 v**2 + C * sum_i logloss(y_i, v z_i + b)        (no penalty on b; C=None: none)

which is what ``make_pipeline(StandardScaler(), LogisticRegression(C=C))`` fits on the
training folds. Because ``z`` is unchanged by ``x -> c x + s`` (``c > 0``), the probabilities
(and Brier-Platt, ECE) do not depend on the scale or offset of a score; the penalty acts on
the same standardised slope for every estimator.

Numerically the rows are first standardised once with the whole column's mean and standard
deviation (``g``); each fold's ``z`` is an affine map of ``g``. The 2-parameter problem is
solved by Newton's method with a closed-form 2x2 solve per (fold, column), step halving
where the objective would rise, and the sums over rows streamed in chunks of about
:data:`CHUNK_ELEMENTS` (folds x rows x columns) elements. Probabilities of held-out rows
use their own fold's standardisation and parameters.

Which engine fits: columns of :data:`MOMENT_MIN_ROWS` rows or more go to
:mod:`fastuq.metrics.platt_moments` (Newton's sums from one pass of Taylor moments, with a
checked bound on each fit's distance to the exact optimum; a column that misses it goes to
the exact engine below); shorter columns from :data:`FAST_MIN_ROWS` rows to the exact
column-by-column engine of :mod:`fastuq.metrics.platt_fast`; the rest to the matrix path
here. All three agree to about 1e-11 in probabilities (tested to 1e-9).

:func:`platt_fit` runs the same fit once on all rows (one training part holding every row)
and maps ``(v, b)`` back to the score's own scale (:mod:`fastuq.fit` reports those
coefficients, unpenalised).
"""

from __future__ import annotations

import warnings

import numpy as np

from fastuq.metrics.ece import ece_matrix
from fastuq.metrics.folds import stratified_folds
from fastuq.metrics.newton import (
    MAX_ITER,
    PlattConvergenceWarning,
    newton_fits,
    stable_sigmoid,
    unconverged,
)
from fastuq.metrics.platt_fast import platt_columns
from fastuq.metrics.platt_moments import MIN_ROWS as MOMENT_MIN_ROWS
from fastuq.metrics.platt_moments import moment_columns

__all__ = [
    "CHUNK_ELEMENTS",
    "FAST_MIN_ROWS",
    "MOMENT_MIN_ROWS",
    "PlattConvergenceWarning",
    "oof_briers",
    "oof_platt",
    "platt_fit",
]

#: Folds x rows x columns per streamed chunk (float64 temporaries of 2 MiB, cache-sized).
CHUNK_ELEMENTS = 1 << 18
#: Rows from which the column-by-column engine of :mod:`fastuq.metrics.platt_fast` fits
#: (fold-ordered rows, jitted row sums, warm start); shorter columns use the matrix path.
#: Measured on 8 columns: at 1e6 rows the matrix path takes 3.1 s and the engine 4.3 s
#: (about 1.5 s of it compiling its loops once per process); at 1e7 the engine needs about
#: 2 s of CPU per column against 4.5 s. Columns of :data:`MOMENT_MIN_ROWS` rows or more go
#: to the moment engine first (2**16: below it the fold fits spread too far for
#: its series); the engine here then serves as its exact fallback.
FAST_MIN_ROWS = 1 << 21


def _penalty(c: float | None) -> float:
    if c is None or np.isinf(c):
        return 0.0
    if not c > 0:
        raise ValueError(f"C must be positive (or None / inf for no penalty), got {c!r}")
    return 1.0 / c


def _standardised(x: np.ndarray, r0: int, rows: int, mean: np.ndarray, scale: np.ndarray):
    """Rows ``r0:r0+rows`` of ``x`` standardised with every fold's training mean and scale
    ``[F, C]``: ``z [F, C, R]`` float64 (rows innermost)."""
    z = np.array(x[r0 : r0 + rows].T, dtype=np.float64)[None]  # [1, C, R]
    z = z - mean[:, :, None]
    z /= scale[:, :, None]
    return z


def _fold_extremes(x: np.ndarray, fold: np.ndarray, nf: int) -> tuple[np.ndarray, np.ndarray]:
    """Each fold's training part's minimum and maximum ``[F, C]`` of ``x`` (the other
    folds' extremes, from per-fold extremes)."""
    nc = x.shape[1]
    lo = np.empty((nf, nc))
    hi = np.empty((nf, nc))
    for f in range(nf):
        part = x[fold == f]
        lo[f] = part.min(axis=0)
        hi[f] = part.max(axis=0)
    others = ~np.eye(nf, dtype=bool)
    t_lo = np.array([lo[others[f]].min(axis=0) for f in range(nf)])
    t_hi = np.array([hi[others[f]].max(axis=0) for f in range(nf)])
    return t_lo, t_hi


def _fold_moments(
    x: np.ndarray, train: np.ndarray, t_lo: np.ndarray, t_hi: np.ndarray, rows: int
) -> tuple[np.ndarray, np.ndarray]:
    """Each fit's training mean and population standard deviation ``[F, C]`` of ``x``.

    ``train [F, N]`` (0 / 1) marks each fit's training rows, ``t_lo, t_hi [F, C]`` their
    extremes. A column whose training part holds one value gets that value as its mean (so
    ``z`` is exactly 0 there) and scale 1, as scikit-learn's ``StandardScaler`` does."""
    n, nc = x.shape
    nf = train.shape[0]
    n_train = train.sum(axis=1)[:, None]  # [F, 1]
    const = t_lo == t_hi
    # Two streamed passes in float64: the mean (about the column's mean), then the variance.
    centre = x.mean(axis=0, dtype=np.float64)
    acc = np.zeros((nf, nc))
    for r0 in range(0, n, rows):
        acc += train[:, r0 : r0 + rows] @ (x[r0 : r0 + rows] - centre)
    mean = centre + acc / n_train
    mean = np.where(const, t_lo, mean)
    var = np.zeros((nf, nc))
    ones = np.ones((1, nc))
    for r0 in range(0, n, rows):
        d = _standardised(x, r0, rows, mean, np.broadcast_to(ones, (nf, nc)))
        d *= d
        var += (d @ train[:, r0 : r0 + rows, None])[..., 0]
    scale = np.sqrt(var / n_train)
    scale = np.where(const | (scale == 0), 1.0, scale)
    return mean, scale


def _pass(x, train, mean, scale, v, b, *, rows):
    """One streamed pass over the rows at parameters ``v, b [F, C]``.

    Returns ``S [6, F, C]``: the training-row sums of ``softplus(t)``, ``q``, ``q z``,
    ``w``, ``w z`` and ``w z**2`` with ``t = v z + b``, ``q = sigmoid(t)``,
    ``w = q (1 - q)``, all from ``e = exp(-|t|)`` (SIMD exp/log1p, no overflow):
    ``softplus(t) = max(t, 0) + log1p(e)``, ``q = exp(t - softplus(t))``,
    ``w = e / (1 + e)**2``. Arrays are ``[F, C, R]`` (rows innermost); the masked sums
    over rows are batched matrix-vector products with the training mask.
    """
    nf, nc = v.shape
    sums = np.zeros((6, nf, nc, 1))
    vb, bb = v[:, :, None], b[:, :, None]
    for r0 in range(0, x.shape[0], rows):
        z = _standardised(x, r0, rows, mean, scale)  # [F, C, R]
        m = train[:, r0 : r0 + rows, None]  # [F, R, 1]
        t = vb * z
        t += bb  # [F, C, R]
        e = np.abs(t)
        np.negative(e, out=e)
        np.exp(e, out=e)
        sp = np.maximum(t, 0.0)
        sp += np.log1p(e)
        sums[0] += sp @ m
        np.subtract(t, sp, out=t)
        q = np.exp(t, out=t)  # sigmoid(t), accurate in both tails
        sums[1] += q @ m
        q *= z
        sums[2] += q @ m
        d = e + 1.0
        e /= d
        e /= d  # w = q (1 - q)
        sums[3] += e @ m
        e *= z
        sums[4] += e @ m
        e *= z
        sums[5] += e @ m
    return sums[..., 0]


def _newton(
    x: np.ndarray,
    train: np.ndarray,
    y: np.ndarray,
    mean: np.ndarray,
    scale: np.ndarray,
    lam: float,
    rows: int,
) -> tuple[np.ndarray, np.ndarray]:
    """Platt parameters ``(v, b)`` ``[F, C]`` of every fit (module doc): the minimiser of
    ``0.5 lam v**2 + sum_{training i} logloss(y_i, v z_i + b)`` with ``z = (x - mean) /
    scale``, for ``x [N, C]``, training rows ``train [F, N]`` (0 / 1), labels ``y [N]``
    (0 / 1 float64) and the fits' standardisation ``mean, scale [F, C]``
    (:func:`newton_fits` with the sums of :func:`_pass`)."""
    n = x.shape[0]
    nf, nc = mean.shape
    # Training-row sums of y and y z per fit: the loss's linear part is analytic,
    # sum_i y_i t_i = v * syz + b * sy.
    sy = (train @ y)[:, None]  # [F, 1]
    syz = np.zeros((nf, nc))
    ty = train * y
    for r0 in range(0, n, rows):
        syz += (_standardised(x, r0, rows, mean, scale) @ ty[:, r0 : r0 + rows, None])[..., 0]
    pbar = sy[:, 0] / train.sum(axis=1)  # [F] training base rate, in (0, 1)
    v0 = np.zeros((nf, nc))
    b0 = np.repeat(np.log(pbar / (1.0 - pbar))[:, None], nc, axis=1)
    v, b, done = newton_fits(
        lambda v, b, active: _pass(x, train, mean, scale, v, b, rows=rows), sy, lam, v0, b0,
        syz=syz)
    if not done.all():
        warnings.warn(
            f"Platt scaling: Newton's method did not converge in {MAX_ITER} iterations for "
            f"{int((~done).sum())} (fold, column) fits: {unconverged(~done)} (separable "
            f"scores with C=None?)",
            PlattConvergenceWarning,
            stacklevel=4,
        )
    return v, b


def oof_platt(
    labels: np.ndarray,
    x: np.ndarray,
    *,
    n_folds: int = 5,
    seed: int = 0,
    C: float | None = 1.0,
) -> np.ndarray:
    """Out-of-fold Platt probabilities ``[N, C]`` float64 for validated ``x [N, C]``.

    ``labels`` is bool ``[N]`` with at least 2 rows of each class (the caller checks).
    """
    n, nc = x.shape
    fold = stratified_folds(labels, n_folds, seed, check_classes=False)
    if n >= min(MOMENT_MIN_ROWS, FAST_MIN_ROWS) and nc:
        engine = moment_columns if n >= MOMENT_MIN_ROWS else platt_columns
        probs, _, _ = engine(labels, [x[:, j] for j in range(nc)], fold, _penalty(C),
                             want_prob=True)
        return np.column_stack(probs)
    nf = int(fold.max()) + 1
    train = (fold[None, :] != np.arange(nf)[:, None]).astype(np.float64)  # [F, N]
    rows = max(1, CHUNK_ELEMENTS // max(1, nf * nc))
    mean, scale = _fold_moments(x, train, *_fold_extremes(x, fold, nf), rows)  # [F, C] each
    v, b = _newton(x, train, labels.astype(np.float64), mean, scale, _penalty(C), rows)

    out = np.empty((n, nc), np.float64)
    step = rows * nf
    for r0 in range(0, n, step):
        sl = slice(r0, r0 + step)
        f = fold[sl]
        t = (x[sl] - mean[f]) / scale[f]  # each row's held-out fold's standardisation
        t *= v[f]  # and parameters
        t += b[f]
        out[sl] = stable_sigmoid(t)
    return out


def oof_briers(
    labels: np.ndarray,
    x: np.ndarray,
    *,
    n_folds: int = 5,
    seed: int = 0,
    C: float | None = 1.0,
    n_bins: int = 15,
) -> tuple[np.ndarray, np.ndarray]:
    """Brier score and ECE ``([C], [C])`` float64 of the out-of-fold Platt probabilities of
    every column of validated ``x [N, C]`` (:func:`oof_platt`'s), without keeping the
    probabilities: long columns (:data:`MOMENT_MIN_ROWS`) get both from the held-out pass of
    :mod:`fastuq.metrics.platt_moments`, one column per worker at a time."""
    return oof_briers_columns(labels, [x[:, j] for j in range(x.shape[1])], n_folds=n_folds,
                              seed=seed, C=C, n_bins=n_bins)


def oof_briers_columns(
    labels: np.ndarray,
    columns,
    *,
    n_folds: int = 5,
    seed: int = 0,
    C: float | None = 1.0,
    n_bins: int = 15,
) -> tuple[np.ndarray, np.ndarray]:
    """:func:`oof_briers` of a sequence of validated columns ``[N]`` (read by index; a lazy
    sequence keeps one column per worker in memory on the long-column path)."""
    n, nc = labels.shape[0], len(columns)
    if n < min(MOMENT_MIN_ROWS, FAST_MIN_ROWS) or nc == 0:
        x = np.empty((nc, n), np.result_type(*(columns[j].dtype for j in range(nc)))
                     if nc else np.float64).T
        for j in range(nc):
            x[:, j] = columns[j]
        prob = oof_platt(labels, x, n_folds=n_folds, seed=seed, C=C)
        d = prob - labels[:, None]
        return np.einsum("nc,nc->c", d, d) / n, ece_matrix(labels, prob, n_bins)
    fold = stratified_folds(labels, n_folds, seed, check_classes=False)
    if n_folds < 128:  # held through the fits: one byte per row, not eight
        fold = fold.astype(np.int8)
    engine = moment_columns if n >= MOMENT_MIN_ROWS else platt_columns
    _, brier, ece = engine(labels, columns, fold, _penalty(C), n_bins=n_bins)
    return brier, ece


def platt_fit(
    labels: np.ndarray, x: np.ndarray, *, C: float | None = 1.0
) -> tuple[np.ndarray, np.ndarray]:
    """In-sample Platt scaling of every column of validated ``x [N, C]``: ``(alpha [C],
    beta [C])`` float64 of ``P(correct) = sigmoid(alpha + beta * x)``.

    The same fit as :func:`oof_platt`'s, on all rows at once (one training part holding
    every row): standardised score, penalty ``C`` on the standardised slope (``C=None``:
    none, the maximum-likelihood fit, which does not depend on the standardisation), then
    mapped back to the score's own scale, ``beta = v / d``, ``alpha = b - beta m``.
    ``labels`` is bool ``[N]`` holding both classes. :class:`PlattConvergenceWarning` when
    Newton's method does not converge (separable scores with ``C=None``).
    """
    n, nc = x.shape
    train = np.ones((1, n))
    rows = max(1, CHUNK_ELEMENTS // max(1, nc))
    lo = x.min(axis=0)[None].astype(np.float64)
    hi = x.max(axis=0)[None].astype(np.float64)
    mean, scale = _fold_moments(x, train, lo, hi, rows)  # [1, C] each
    v, b = _newton(x, train, labels.astype(np.float64), mean, scale, _penalty(C), rows)
    beta = v[0] / scale[0]
    return b[0] - beta * mean[0], beta
