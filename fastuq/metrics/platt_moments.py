"""Out-of-fold Platt scaling of long score columns from one pass of Taylor moments.

The model, objective, folds and standardisation are those of :mod:`fastuq.metrics.platt`
(its module doc); this engine only changes how Newton's row sums are obtained.

Every fit's linear predictor is an affine function of the column's standardised score
``g = (x - m) / d`` (``m, d``: the first fit's training mean and standard deviation; any
well-conditioned standardisation serves): ``t = A_f g + B_f``. The fold fits lie within
a few 1e-3 of one another and of a reference ``(A0, B0)`` (one exact fit on a subsample),
so each of Newton's row sums is a short Taylor series about ``t0 = A0 g + B0`` in
``delta = dA g + dB``::

    sum_i h(t_i) g_i**m = sum_{j<=K} 1/j! sum_{a<=j} C(j, a) dA**a dB**(j-a)
                          * sum_i h^(j)(t0_i) g_i**(a+m)

with ``h`` the softplus or its first two derivatives. Every derivative of the softplus is
a polynomial in ``sigma(t0)``, so one pass over the rows collects, per fold segment, the
moments ``sum softplus(t0) g**p`` and ``sum sigma(t0)**k g**p`` (``k, p <= K + 2``; one small
matrix product per chunk of rows), and every Newton iteration of every fold is then
arithmetic on ``[F]`` arrays. Rows with ``|g| >`` :data:`TAIL` are left out of the moments
and summed exactly at each iteration (few rows), so the series' remainder is bounded by
``H (|dA| TAIL + |dB|)**(K+1) / (K+1)!`` per row (``H``: the supremum of the softplus'
``(K+1+j)``-th derivative, computed from its polynomial).

After Newton's method (:func:`fastuq.metrics.newton.newton_fits`) has converged on the
series, that bound on the gradient's error, divided by the smallest eigenvalue of the
Hessian, bounds each fit's distance to the exact optimum; a column is accepted when it is
below ``1e-12 (1 + |v| + |b|)`` for every fold, else the moments are taken again about the
folds' mean solution, and if that fails too the column goes to the exact engine
(:func:`fastuq.metrics.platt_fast.platt_columns`). The held-out probabilities, Brier sum and
ECE bins are then computed exactly, row by row, as in the exact engines.

Cost per row: one ``exp``, one ``log1p``, one division, about 30 elementwise NumPy
operations and a ``[10, rows] x [rows, 9]`` product per chunk (the moments), against two
full Newton passes (each row in four fits) plus the warm start in the exact engine. A jitted
JAX version of the moment pass was tried and was no faster than this NumPy one on a CPU
(1.2 s against 0.85-1.0 s of CPU for 8 columns of 1e6 rows, after compiling), so there is
none. BLAS is held to one thread (:func:`moment_columns`).
"""

from __future__ import annotations

import functools
import math
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor

import numpy as np
from threadpoolctl import threadpool_limits

from fastuq.metrics.ece import bin_index
from fastuq.metrics.newton import newton_fits, stable_sigmoid
from fastuq.metrics.platt_fast import FoldLayout, platt_columns, segment_moments

__all__ = ["MIN_ROWS", "ORDER", "TAIL", "moment_columns"]

#: Taylor order of the series.
ORDER = 6
#: Rows with ``|g|`` above this (standard deviations of the column) are summed exactly.
TAIL = 4.0
#: Rows per chunk of the moment and held-out passes (float64 temporaries of 64 KiB; 8,192
#: measured 100 ms of CPU per 1e6-row column against 115-120 for 4,096, 16,384 or 32,768).
CHUNK = 1 << 13
#: Rows of the subsample the reference fit uses.
REF_ROWS = 1 << 16
#: Shortest column this engine takes (shorter ones: fold spreads too wide for the series).
MIN_ROWS = 1 << 16
#: Accepted bound on a fit's distance to the exact optimum, relative to ``1 + |v| + |b|``.
BOUND = 1e-12


@functools.cache
def _derivatives(order: int) -> tuple[np.ndarray, np.ndarray]:
    """``(coef [order + 1, order + 2], sup [order + 1])``: the softplus' ``d``-th derivative
    (``d = 1..order+1`` in rows ``0..order``) as coefficients of ``sigma**k`` (``k = 0..order
    + 1``), and each one's supremum over ``t`` (over ``sigma`` in [0, 1], with a margin)."""
    coef = np.zeros((order + 1, order + 2))
    coef[0, 1] = 1.0  # softplus' = sigma
    k = np.arange(order + 2, dtype=np.float64)
    for d in range(order):  # d/dt sigma**k = k sigma**k - k sigma**(k+1)
        coef[d + 1] += coef[d] * k
        coef[d + 1, 1:] -= (coef[d] * k)[:-1]
    s = np.linspace(0.0, 1.0, 20_001)
    vals = np.abs(np.polynomial.polynomial.polyval(s, coef.T))  # [order + 1, grid]
    return coef, vals.max(axis=1) * 1.01 + 1e-12


def _series_weights(da: np.ndarray, db: np.ndarray, order: int) -> np.ndarray:
    """``W [F, order + 1, order + 1]``: ``W[f, j, a] = C(j, a) da**a db**(j-a) / j!``."""
    nf = da.shape[0]
    w = np.zeros((nf, order + 1, order + 1))
    for j in range(order + 1):
        for a in range(j + 1):
            w[:, j, a] = math.comb(j, a) * da**a * db ** (j - a) / math.factorial(j)
    return w


def _pass(xparts, yparts, m, d, a0, b0, order, tail):
    """The moment pass over a column's fold segments ``xparts`` (labels ``yparts``, 0 / 1,
    int8 or float64; made float64 a chunk at a time):
    ``(Q [F, order + 4, order + 3], syg [F], tails)``. ``Q[k, 0, p]`` is the sum of
    ``softplus(t0) g**p`` and ``Q[k, 1 + i, p]`` that of ``sigma(t0)**i g**p`` over segment
    ``k``'s rows with ``|g| <= tail``; ``syg[k]`` the sum of ``y g`` over all its rows;
    ``tails = (g, y, segment)`` of the rows beyond ``tail``."""
    nf = len(xparts)
    top = order + 2  # highest power of sigma and of g
    q = np.zeros((nf, top + 2, top + 1))
    syg = np.zeros(nf)
    sig = np.empty((top + 2, CHUNK))
    gp = np.empty((top + 1, CHUNK))
    for k in range(nf):
        xk, ykk = xparts[k], yparts[k]
        for r0 in range(0, xk.shape[0], CHUNK):
            g = xk[r0 : r0 + CHUNK] - m
            g /= d
            n = g.shape[0]
            yk = ykk[r0 : r0 + CHUNK].astype(np.float64, copy=False)
            syg[k] += np.dot(g, yk)
            s = sig[:, :n]
            far = np.abs(g) > tail
            if far.any():
                g[far] = 0.0
                s[1] = ~far
            else:
                far = None
                s[1] = 1.0
            t = g * a0
            t += b0
            e = np.abs(t)
            np.negative(e, out=e)
            np.exp(e, out=e)
            np.maximum(t, 0.0, out=s[0])
            s[0] += np.log1p(e)  # softplus(t0)
            np.add(e, 1.0, out=s[2])
            np.divide(np.where(t >= 0, 1.0, e), s[2], out=s[2])  # sigma(t0)
            if far is not None:
                s[0] *= s[1]
                s[2] *= s[1]
            for i in range(3, top + 2):
                np.multiply(s[i - 1], s[2], out=s[i])  # sigma**(i-1), 0 on tail rows
            p = gp[:, :n]
            p[0] = 1.0
            p[1] = g
            for i in range(2, top + 1):
                np.multiply(p[i - 1], g, out=p[i])
            q[k] += s @ p.T
    return q, syg, _tails(xparts, yparts, m, d, tail)


def _tails(xparts, yparts, m, d, tail):
    """``(g, y, segment)`` of the rows with ``|g| > tail``."""
    tg, ty, ts = [], [], []
    for k, (xk, yk) in enumerate(zip(xparts, yparts, strict=True)):
        g = (xk - m) / d
        far = np.flatnonzero(np.abs(g) > tail)
        tg.append(g[far])
        ty.append(yk[far].astype(np.float64, copy=False))
        ts.append(np.full(far.shape[0], k, np.int64))
    return np.concatenate(tg), np.concatenate(ty), np.concatenate(ts)


def _exact_sums(g: np.ndarray, seg: np.ndarray, big_a: np.ndarray, big_b: np.ndarray
                ) -> np.ndarray:
    """``[6, F]``: the sums of ``softplus(t)``, ``sigma``, ``sigma g``, ``w``, ``w g`` and
    ``w g**2`` (``t = A_f g + B_f``, ``w = sigma (1 - sigma)``) over the rows ``g`` whose
    segment ``seg`` is not ``f`` (fit ``f``'s training rows; ``seg = -1``: every fit's)."""
    nf = big_a.shape[0]
    if g.shape[0] == 0:
        return np.zeros((6, nf))
    t = big_a[:, None] * g[None] + big_b[:, None]  # [F, n]
    train = seg[None] != np.arange(nf)[:, None]
    e = np.exp(-np.abs(t))
    sp = np.maximum(t, 0.0) + np.log1p(e)
    r = 1.0 / (1.0 + e)
    q = np.where(t >= 0, 1.0, e) * r
    w = e * r * r
    sp, q, w = (np.where(train, a, 0.0) for a in (sp, q, w))
    return np.stack([sp.sum(1), q.sum(1), q @ g, w.sum(1), w @ g, w @ (g * g)])


class _Series:
    """Newton's row sums of every fold fit from the moments of one :func:`_pass`."""

    def __init__(self, q, syg, sy, tails, a0, b0, order, a, c):
        self._sy = sy  # [F] training-row sums of y
        self.order, self.a0, self.b0, self.a, self.c = order, a0, b0, a, c
        coef, sup = _derivatives(order + 1)
        self.sup = sup
        nf = q.shape[0]
        total = q.sum(axis=0)
        qt = total[None] - q  # [F, 2 + top, top + 1] training moments
        # T[f, d, p]: sum of softplus^(d)(t0) g**p, d = 0..order+2
        self.t = np.concatenate([qt[:, :1], np.einsum("dk,fkp->fdp", coef, qt[:, 1:])], axis=1)
        self.n_bulk = qt[:, 1, 0]
        self.even = qt[:, 1, 0::2]  # sums of g**0, g**2, ... over bulk training rows
        self.syg = syg.sum() - syg
        self.tails = tails
        self.nf = nf

    def params(self, v, b):
        big_a = v * self.a
        return big_a, v * self.c + b

    def sums(self, v, b):
        """``[7, F]``: what :func:`fastuq.metrics.newton.newton_fits`' ``run`` returns, in
        each fit's own standardisation, plus the sum of ``y z``."""
        k = self.order
        big_a, big_b = self.params(v, b)
        w = _series_weights(big_a - self.a0, big_b - self.b0, k)  # [F, K+1, K+1]

        def series(jh, m):
            return np.einsum("fja,fja->f", w, self.t[:, jh : jh + k + 1, m : m + k + 1])

        s = np.stack([series(0, 0), series(1, 0), series(1, 1), series(2, 0), series(2, 1),
                      series(2, 2)])
        g, _, seg = self.tails
        s += _exact_sums(g, seg, big_a, big_b)
        a, c = self.a, self.c
        sp, sq, sqg, sw, swg, swgg = s
        sy = self._sy
        return np.stack([sp, sq, a * sqg + c * sq, sw, a * swg + c * sw,
                         a * a * swgg + 2 * a * c * swg + c * c * sw,
                         a * self.syg + c * sy])

    def distance(self, v, b, lam):
        """Bound ``[F]`` on each fit's distance to the exact optimum (module doc)."""
        k = self.order
        big_a, big_b = self.params(v, b)
        da, db = np.abs(big_a - self.a0), np.abs(big_b - self.b0)
        # bounds on the sums of |g|**p (p <= k + 2) over bulk training rows: even powers
        # exact, odd ones by |g|**p <= (|g|**(p-1) + |g|**(p+1)) / 2
        even = self.even
        absm = np.empty((self.nf, k + 3))
        absm[:, 0::2] = even[:, : (k + 4) // 2]
        odd = np.arange(1, k + 3, 2)
        absm[:, odd] = 0.5 * (even[:, (odd - 1) // 2] + even[:, (odd + 1) // 2])
        coef = self.sup[k + 1] / math.factorial(k + 1)  # softplus^(k+2) bounds sigma's rest

        def rest(m):
            return coef * sum(math.comb(k + 1, j) * da**j * db ** (k + 1 - j) * absm[:, j + m]
                              for j in range(k + 2))

        e0, e1 = rest(0), rest(1)
        gv = np.abs(self.a) * e1 + np.abs(self.c) * e0
        gb = e0
        s = self.sums(v, b)
        h11, h12, h22 = s[5] + lam, s[4], s[3]
        tr, det = h11 + h22, h11 * h22 - h12 * h12
        low = tr / 2 - np.sqrt(np.maximum(tr * tr / 4 - det, 0.0))
        return np.hypot(gv, gb) / np.maximum(low, 1e-300)


def _reference(xparts, yparts, m, d, n_train, lam, rows=REF_ROWS):
    """``(A0, B0)``: one exact fit of every row (a subsample of about :data:`REF_ROWS`
    rows, penalty scaled to its size) on the globally standardised score."""
    n = sum(xp.shape[0] for xp in xparts)
    stride = max(1, n // rows)
    g = (np.concatenate([xp[::stride] for xp in xparts]) - m) / d
    ys = np.concatenate([yp[::stride] for yp in yparts]).astype(np.float64, copy=False)
    seg = np.full(g.shape[0], -1, np.int64)
    sy = np.array([ys.sum()])
    pbar = min(max(float(sy[0]) / g.shape[0], 1e-6), 1 - 1e-6)
    v, b, _ = newton_fits(lambda v, b, active: _exact_sums(g, seg, v, b), sy,
                          lam * g.shape[0] / n_train, np.zeros(1),
                          np.array([math.log(pbar / (1 - pbar))]), syz=np.array([ys @ g]))
    return float(v[0]), float(b[0])


def _heldout(xparts, yparts, mean, scale, v, b, n_bins, probs):
    """Exact held-out pass: ``(Brier sum, ECE numerator)``; fills ``probs`` (one ``[n_k]``
    per segment) when given."""
    brier = 0.0
    sum_p = np.zeros(n_bins)
    sum_y = np.zeros(n_bins)
    for k, (xk, ykk) in enumerate(zip(xparts, yparts, strict=True)):
        for r0 in range(0, xk.shape[0], CHUNK):
            t = (xk[r0 : r0 + CHUNK] - mean[k]) / scale[k]
            t *= v[k]
            t += b[k]
            p = stable_sigmoid(t)
            yk = ykk[r0 : r0 + CHUNK].astype(np.float64, copy=False)
            dlt = p - yk
            brier += float(np.dot(dlt, dlt))
            idx = bin_index(p, n_bins)
            sum_p += np.bincount(idx, weights=p, minlength=n_bins)
            sum_y += np.bincount(idx, weights=yk, minlength=n_bins)
            if probs is not None:
                probs[k][r0 : r0 + CHUNK] = p
    return brier, float(np.abs(sum_y - sum_p).sum())


def _one_column(layout: FoldLayout, x: np.ndarray, lam: float, n_bins: int, want_prob: bool,
                order: int = ORDER, tail: float = TAIL):
    """``(probabilities [N] in row order or None, Brier, ECE)`` of one column, or None when
    the series' bound is not met (the caller fits it exactly). The labels stay the layout's
    int8 (each pass makes a chunk of them float64), so no float64 copy of them is held."""
    if order % 2:
        raise ValueError(f"the series' order must be even (its bound uses the moments of "
                         f"g**(order + 2)), got {order}")
    xs = np.take(np.asarray(x, np.float64), layout.perm)
    y = layout.y
    cuts = list(zip(layout.bounds[:-1], layout.bounds[1:], strict=True))
    xparts = [xs[lo:hi] for lo, hi in cuts]
    yparts = [y[lo:hi] for lo, hi in cuts]
    mean, scale = segment_moments(xparts)
    # any well-conditioned standardisation serves for g: the first fit's
    m, d = float(mean[0]), float(scale[0])
    a = d / scale  # z_f = a_f g + c_f
    c = (m - mean) / scale
    a0, b0 = _reference(xparts, yparts, m, d, float(layout.n_train.mean()), lam)
    pbar = layout.sy / layout.n_train
    v0 = np.full(layout.nf, a0) / a
    b0s = b0 - v0 * c
    for _ in range(2):
        q, syg, tails = _pass(xparts, yparts, m, d, a0, b0, order, tail)
        ser = _Series(q, syg, layout.sy, tails, a0, b0, order, a, c)
        if not np.all(np.isfinite(v0)):
            v0, b0s = np.zeros(layout.nf), np.log(pbar / (1 - pbar))
        v, b, done = newton_fits(lambda v, b, active, ser=ser: ser.sums(v, b), layout.sy, lam,
                                 v0, b0s)
        if done.all() and np.all(ser.distance(v, b, lam) <= BOUND * (1 + np.abs(v) +
                                                                     np.abs(b))):
            probs = [np.empty(xp.shape[0]) for xp in xparts] if want_prob else None
            brier, ece_num = _heldout(xparts, yparts, mean, scale, v, b, n_bins, probs)
            prob = None
            if probs is not None:
                prob = np.empty(layout.n)
                prob[layout.perm] = np.concatenate(probs)
            return prob, brier / layout.n, ece_num / layout.n
        # expand again about the folds' mean solution
        big_a, big_b = ser.params(v, b)
        w = layout.n_train / layout.n_train.sum()
        a0, b0 = float(w @ big_a), float(w @ big_b)
        v0, b0s = v, b
    return None


def moment_columns(
    labels: np.ndarray,
    columns: Sequence[np.ndarray],
    fold: np.ndarray,
    lam: float,
    *,
    n_bins: int = 15,
    want_prob: bool = False,
    workers: int | None = None,
) -> tuple[list[np.ndarray | None], np.ndarray, np.ndarray]:
    """Out-of-fold Platt scaling of each column ``[N]`` of ``columns`` from Taylor moments
    (module doc): ``(probabilities [N] per column (None unless ``want_prob``), Brier [C],
    ECE [C])`` float64, as :func:`fastuq.metrics.platt_fast.platt_columns` (same arguments;
    columns whose series bound fails are fitted by it). Columns run on ``workers`` threads
    (default: the usable cores, at most the columns)."""
    import os

    layout = FoldLayout(np.asarray(fold), np.asarray(labels, bool))
    nc = len(columns)
    if workers is None:
        workers = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else \
            (os.cpu_count() or 1)
    workers = max(1, min(workers, nc))

    def job(j):
        return _one_column(layout, columns[j], lam, n_bins, want_prob)

    # one BLAS thread: the products here are small, and a threaded BLAS under load spins
    with threadpool_limits(1):
        if workers == 1:
            results = [job(j) for j in range(nc)]
        else:
            with ThreadPoolExecutor(workers) as pool:
                results = list(pool.map(job, range(nc)))
    failed = [j for j, r in enumerate(results) if r is None]
    if failed:
        probs, brier, ece = platt_columns(labels, [columns[j] for j in failed], fold, lam,
                                          n_bins=n_bins, want_prob=want_prob)
        for i, j in enumerate(failed):
            results[j] = (probs[i], float(brier[i]), float(ece[i]))
    return ([r[0] for r in results], np.array([r[1] for r in results], np.float64),
            np.array([r[2] for r in results], np.float64))
