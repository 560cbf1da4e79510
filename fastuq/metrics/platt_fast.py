"""Out-of-fold Platt scaling of long score columns: the fits of :mod:`fastuq.metrics.platt`,
column by column, with rows in fold order and the row sums in jitted JAX loops.

The model, the objective, the folds and the standardisation are those of
:mod:`fastuq.metrics.platt` (its module doc); only the arithmetic is arranged for long
columns (``N >=`` :data:`fastuq.metrics.platt.FAST_MIN_ROWS`):

* **Fold order.** Rows are permuted once so that each fold is one contiguous segment
  (``bounds [F + 1]``); fit ``f`` trains on the rows outside segment ``f``, two contiguous
  ranges, so no row is computed for a fit it does not train (the matrix path computes every
  fit on every row and masks). The column is gathered into that order once.
* **Moments.** Each fit's training mean and population standard deviation come from
  per-segment sums, means and centred squares (Chan's parallel formula), and its extremes
  from per-segment extremes (one value: mean = that value, scale 1, as StandardScaler).
* **Newton's method** (:func:`fastuq.metrics.newton.newton_fits`, as the matrix path: a
  closed-form 2x2 solve, step halving when the objective rises) runs in two stages: first
  on every ``s``-th row of the fold-ordered column (about :data:`WARM_ROWS` rows, penalty
  scaled by the fraction), a starting point a few 1e-3 from the optimum; then on all rows,
  where Newton's quadratic convergence needs two or three passes. The full-data stage stops
  a fit when its step is below ``1e-11 (1 + |v| + |b|)`` (as the matrix path), or when a
  fresh step is below ``1e-4 (1 + |v| + |b|)`` and the contraction measured over its last
  two fresh steps predicts the step after it below ``1e-11 (1 + |v| + |b|)``; the point
  after the step is returned then.
* **Row sums** (softplus, sigmoid and its derivative, times 1, z and z**2; and y z) are a
  ``fori_loop`` over blocks of :data:`BLOCK` rows (cache-sized on a CPU, one launch per
  block on a GPU), float64, with the loss's terms computed from ``e = exp(-|t|)`` as in
  the matrix path.
* **Held-out rows**: each row's probability under its own fold's standardisation and fit,
  and, in the same loop, the Brier sum and the ECE bin sums (bins exactly those of
  :func:`fastuq.metrics.ece.bin_index`).

Results equal the matrix path's to the Newton tolerance (about 1e-11 in parameters; tested
to 1e-9 in probabilities), and scikit-learn's as the matrix path does. Columns are
independent: :func:`platt_columns` runs them on a pool of one thread per JAX device (the
host's CPU devices of :func:`fastuq.use_cpu_devices`, each on its own core).
"""

from __future__ import annotations

import functools
import threading
import warnings
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor

import numpy as np

from fastuq.metrics.newton import (
    MAX_ITER,
    PlattConvergenceWarning,
    newton_fits,
    stable_sigmoid,
    unconverged,
)

__all__ = ["BLOCK", "WARM_ROWS", "FoldLayout", "fold_moments", "platt_columns",
           "segment_moments"]

#: Rows of the warm-start subsample.
WARM_ROWS = 1 << 19
#: Rows per loop step on a CPU device (float64 temporaries of 128 KiB).
BLOCK = 1 << 14
#: Rows per loop step on an accelerator.
BLOCK_ACCELERATOR = 1 << 20


class FoldLayout:
    """Rows in fold order: ``perm [N]`` (row of each fold-ordered position), ``bounds
    [F + 1]`` (segment ``f`` is ``bounds[f]:bounds[f + 1]``) and the labels ``y [N]`` int8
    in that order."""

    def __init__(self, fold: np.ndarray, labels: np.ndarray) -> None:
        nf = int(fold.max()) + 1
        self.nf = nf
        perm = np.argsort(fold.astype(np.int8 if nf < 128 else np.int64), kind="stable")
        self.perm = perm.astype(np.int32) if fold.shape[0] < 1 << 31 else perm
        counts = np.bincount(fold, minlength=nf)
        self.bounds = np.concatenate([[0], np.cumsum(counts)]).astype(np.int64)
        self.y = labels[self.perm].astype(np.int8)  # 0 / 1 in fold order
        self.n = int(fold.shape[0])
        sy = np.add.reduceat(self.y, self.bounds[:-1], dtype=np.float64) if self.n else \
            np.zeros(nf)
        self.n_train = (self.n - counts).astype(np.float64)  # [F]
        self.sy = sy.sum() - sy  # [F] training-row sums of y


def fold_moments(xs: np.ndarray, bounds: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Each fit's training mean and population standard deviation ``[F]`` of the
    fold-ordered column ``xs [N]`` float64 (module doc)."""
    return segment_moments([xs[lo:hi] for lo, hi in zip(bounds[:-1], bounds[1:], strict=False)])


def segment_moments(parts: Sequence[np.ndarray]) -> tuple[np.ndarray, np.ndarray]:
    """:func:`fold_moments` of a column given as its fold segments ``parts`` (``[n_k]``
    float64 each, segment ``k`` the rows of held-out fold ``k``)."""
    counts = np.array([p.shape[0] for p in parts], np.float64)
    n = float(counts.sum())
    s1 = np.array([p.sum() for p in parts])
    m_k = s1 / counts  # segment means
    q_k = np.empty_like(m_k)  # centred squares per segment
    for k, p in enumerate(parts):
        d = p - m_k[k]
        q_k[k] = np.dot(d, d)
    lo_k = np.array([p.min() for p in parts])
    hi_k = np.array([p.max() for p in parts])
    nf = counts.shape[0]
    others = ~np.eye(nf, dtype=bool)
    n_train = n - counts
    # Training mean: the training segments' means weighted by their sizes, about the column
    # mean (so that a large common offset cancels before the weighted sum).
    centre = float(s1.sum() / n)
    mean = centre + np.array([(counts[o] * (m_k[o] - centre)).sum() for o in others]) / n_train
    var = np.array([(q_k[o] + counts[o] * (m_k[o] - mean[f]) ** 2).sum()
                    for f, o in enumerate(others)]) / n_train
    t_lo = np.array([lo_k[o].min() for o in others])
    t_hi = np.array([hi_k[o].max() for o in others])
    const = t_lo == t_hi
    mean = np.where(const, t_lo, mean)
    scale = np.sqrt(var)
    scale = np.where(const | (scale == 0), 1.0, scale)
    return mean, scale


@functools.cache
def _programs(block: int, nf: int, n_bins: int) -> tuple[Callable, Callable]:
    """The jitted row-sum loop and held-out loop for ``block`` rows per step, ``nf`` folds
    and ``n_bins`` ECE bins."""
    import jax
    import jax.numpy as jnp
    from jax import lax

    def over_range(xb, yb, lo, hi, fn, init):
        """``fn(x [block], y [block], keep [block] | None) -> [K]`` summed over the rows
        ``lo:hi`` of the blocked ``xb, yb [M, block]``: one step per block touching the
        range, without a mask where the block lies inside it."""
        pos = jnp.arange(block, dtype=lo.dtype)

        def body(j, acc):
            x = lax.dynamic_index_in_dim(xb, j, keepdims=False)
            y = lax.dynamic_index_in_dim(yb, j, keepdims=False).astype(xb.dtype)
            start = j * block
            whole = (start >= lo) & (start + block <= hi)
            idx = start + pos
            return acc + lax.cond(whole, lambda: fn(x, y, None),
                                  lambda: fn(x, y, (idx >= lo) & (idx < hi)))

        first = lo // block
        last = jnp.maximum(first, (hi + block - 1) // block)
        return lax.fori_loop(first, last, body, init)

    def fit_terms(mean, scale, v, b):
        def fn(x, y, keep):
            z = (x - mean) / scale
            t = v * z + b
            e = jnp.exp(-jnp.abs(t))
            sp = jnp.maximum(t, 0.0) + jnp.log1p(e)
            r = 1.0 / (1.0 + e)
            q = jnp.where(t >= 0, 1.0, e) * r
            w = e * r * r
            parts = (sp, q, q * z, w, w * z, w * z * z, y * z)
            if keep is not None:
                parts = tuple(jnp.where(keep, p, 0.0) for p in parts)
            return jnp.stack([p.sum() for p in parts])

        return fn

    @jax.jit
    def sums(xb, yb, bounds, mean, scale, v, b, active):
        """``[7, F]``: each active fit's training-row sums of softplus(t), q, q z, w, w z,
        w z**2 and y z at its parameters ``v, b [F]`` (zeros for the others)."""
        n = bounds[-1]
        zero = jnp.zeros(7, xb.dtype)

        def fit(f, out):
            fn = fit_terms(mean[f], scale[f], v[f], b[f])
            got = lax.cond(
                active[f],
                lambda: (over_range(xb, yb, bounds[0], bounds[f], fn, zero)
                         + over_range(xb, yb, bounds[f + 1], n, fn, zero)),
                lambda: zero)
            return out.at[:, f].set(got)

        return lax.fori_loop(0, nf, fit, jnp.zeros((7, nf), xb.dtype))

    @jax.jit
    def heldout(xb, yb, bounds, mean, scale, v, b):
        """``[1 + 2 n_bins]``: the Brier sum of the held-out probabilities, then the ECE
        bin sums of the probabilities and of the labels."""

        def segment(k, out):
            def fn(x, y, keep):
                z = (x - mean[k]) / scale[k]
                t = v[k] * z + b[k]
                sp = jnp.maximum(t, 0.0) + jnp.log1p(jnp.exp(-jnp.abs(t)))
                p = jnp.exp(t - sp)  # sigmoid(t), as fastuq.metrics.newton.stable_sigmoid
                d = p - y
                # ECE bins as fastuq.metrics.ece.bin_index: floor(p n), moved across an
                # edge i / n_bins where rounding put p on the wrong side of it.
                i = jnp.clip(jnp.floor(p * n_bins), 0, n_bins - 1)
                i = jnp.maximum(i - (p < i / n_bins), 0)
                i = (i + ((p >= (i + 1) / n_bins) & (i < n_bins - 1))).astype(jnp.int32)
                yv = y
                if keep is not None:
                    d = jnp.where(keep, d, 0.0)
                    p = jnp.where(keep, p, 0.0)
                    yv = jnp.where(keep, y, 0.0)
                acc = jnp.zeros(1 + 2 * n_bins, xb.dtype)
                acc = acc.at[0].set((d * d).sum())
                acc = acc.at[1 + i].add(p)
                return acc.at[1 + n_bins + i].add(yv)

            return out + over_range(xb, yb, bounds[k], bounds[k + 1], fn, out * 0.0)

        return lax.fori_loop(0, nf, segment, jnp.zeros(1 + 2 * n_bins, xb.dtype))

    return sums, heldout


def _block_for(device) -> int:
    return BLOCK if device.platform == "cpu" else BLOCK_ACCELERATOR


def _blocked(values: np.ndarray, block: int, dtype=np.float64, *,
             rows: int | None = None) -> np.ndarray:
    """``values [N]`` zero-padded to ``[M, block]``: ``M`` rounded up to a multiple of an
    eighth of its power of two (at most 12.5% padding, few compiled shapes). ``rows``:
    allocate for that many rows (padding zeroed, the first ``rows`` left to the caller)."""
    n = values.shape[0] if rows is None else rows
    m = max(1, -(-n // block))
    step = max(1, 1 << max(0, (m - 1).bit_length() - 3))
    m = -(-m // step) * step
    if rows is None:
        out = np.zeros(m * block, dtype)
        out[:n] = values
    else:
        out = np.empty(m * block, dtype)
        out[n:] = 0
    return out.reshape(m, block)


def _one_column(
    layout: FoldLayout, x: np.ndarray, lam: float, device, n_bins: int, want_prob: bool
) -> tuple[np.ndarray | None, float, np.ndarray, np.ndarray]:
    """Fit one column ``x [N]``: ``(held-out probabilities [N] in row order or None, Brier,
    ECE, converged [F] per fold)``."""
    import jax

    nf = layout.nf
    block = _block_for(device)
    # the column in fold order, gathered straight into its padded blocked buffer
    x_blocked = _blocked(np.empty(0), block, np.float64, rows=layout.n)
    xs = x_blocked.reshape(-1)[: layout.n]
    np.take(np.asarray(x, np.float64), layout.perm, out=xs)
    mean, scale = fold_moments(xs, layout.bounds)
    sums, heldout = _programs(block, nf, n_bins)
    pbar = layout.sy / layout.n_train
    v0 = np.zeros(nf)
    b0 = np.log(pbar / (1.0 - pbar))

    def runner(xv, yv, bounds, blocked=None):
        xb = jax.device_put(_blocked(xv, block) if blocked is None else blocked, device)
        yb = jax.device_put(_blocked(yv, block, np.int8), device)
        bd = jax.device_put(bounds, device)
        ms = jax.device_put(np.stack([mean, scale]), device)

        def run(v, b, active):
            out = sums(xb, yb, bd, ms[0], ms[1], jax.device_put(v, device),
                       jax.device_put(b, device), jax.device_put(active, device))
            return np.asarray(out)

        return run, (xb, yb, bd, ms)

    with jax.enable_x64(True):
        v, b = v0, b0
        stride = layout.n // WARM_ROWS
        if stride >= 2:
            # warm start: every stride-th row of each segment (segments stay contiguous)
            pick = np.concatenate([np.arange(lo, hi, stride) for lo, hi in
                                   zip(layout.bounds[:-1], layout.bounds[1:], strict=False)])
            counts = np.array([len(range(lo, hi, stride)) for lo, hi in
                               zip(layout.bounds[:-1], layout.bounds[1:], strict=False)])
            sub_bounds = np.concatenate([[0], np.cumsum(counts)]).astype(np.int64)
            ysub = layout.y[pick]
            s_y = np.add.reduceat(ysub, sub_bounds[:-1], dtype=np.float64)
            sub_train = (sub_bounds[-1] - counts).astype(np.float64)
            run, _ = runner(xs[pick], ysub, sub_bounds)
            v, b, _ = newton_fits(run, s_y.sum() - s_y,
                                  lam * float(sub_train.mean() / layout.n_train.mean()), v, b)
        run, (xb, yb, bd, ms) = runner(xs, layout.y, layout.bounds, x_blocked)
        v, b, done = newton_fits(run, layout.sy, lam, v, b, quad=True)
        acc = np.asarray(heldout(xb, yb, bd, ms[0], ms[1], jax.device_put(v, device),
                                 jax.device_put(b, device)))
    brier = acc[0]
    ece = float(np.abs(acc[1 + n_bins:] - acc[1 : 1 + n_bins]).sum()) / layout.n
    prob = None
    if want_prob:
        prob = np.empty(layout.n)
        seg = np.repeat(np.arange(nf), np.diff(layout.bounds))
        t = (xs - mean[seg]) / scale[seg]
        t *= v[seg]
        t += b[seg]
        prob[layout.perm] = stable_sigmoid(t)
    return prob, float(brier) / layout.n, ece, np.asarray(done, bool)


def platt_columns(
    labels: np.ndarray,
    columns: Sequence[np.ndarray],
    fold: np.ndarray,
    lam: float,
    *,
    n_bins: int = 15,
    want_prob: bool = False,
) -> tuple[list[np.ndarray | None], np.ndarray, np.ndarray]:
    """Out-of-fold Platt scaling of each column ``[N]`` of ``columns`` (any sequence; items
    are read by index when a worker takes them, so a lazy one holds one column per worker in
    memory): ``(probabilities
    [N] per column (None unless ``want_prob``), Brier [C], ECE [C])`` float64, with held-out
    folds ``fold [N]`` (int, 0..F-1, every fold non-empty) and penalty ``lam = 1 / C``.

    Columns run on a pool of one thread per JAX device of the default backend.
    """
    import jax

    layout = FoldLayout(np.asarray(fold), np.asarray(labels, bool))
    devices = jax.local_devices()
    lock = threading.Lock()
    free = list(devices)

    def job(j: int):
        with lock:
            device = free.pop()
        try:  # a lazy sequence converts its column here, one per worker at a time
            return _one_column(layout, columns[j], lam, device, n_bins, want_prob)
        finally:
            with lock:
                free.append(device)

    workers = max(1, min(len(devices), len(columns)))
    if workers == 1:
        results = [job(j) for j in range(len(columns))]
    else:
        with ThreadPoolExecutor(workers) as pool:
            results = list(pool.map(job, range(len(columns))))
    failed = ~np.column_stack([r[3] for r in results]) if results else np.zeros((0, 0), bool)
    if failed.any():
        warnings.warn(
            f"Platt scaling: Newton's method did not converge in {MAX_ITER} iterations for "
            f"{int(failed.sum())} (fold, column) fits: {unconverged(failed)} (separable "
            f"scores with C=None?)",
            PlattConvergenceWarning,
            stacklevel=3,
        )
    return ([r[0] for r in results], np.array([r[1] for r in results]),
            np.array([r[2] for r in results]))
