"""Exact rank metrics on the device: AUROC, AUARC and PRR of score rows ``[G, N]`` that are
already device arrays (a sweep's score block), sorted where they live.

The same definitions as :mod:`fastuq.metrics.rank` (its docstring has the formulas): each
row is put in stable ascending-score order through one unique 64-bit key per element::

    packed = order_key(x) << 32 | position << 1 | label        (float32 scores)

so one ``jnp.sort`` gives the stable order, the sorted labels (``packed & 1``) and the tie
groups (runs of equal high words) at once. Tie groups' first and last positions come from
cumulative max / min scans. AUROC is an integer ratio whose integer sums are exact (int64),
so it is bit-identical to the host engine's (and equal to scikit-learn's with ties counted one
half); AUARC and PRR are sums of harmonic numbers taken in the device's order, equal to the
host's to float64 rounding (about 1e-15 relative).

Use: on a GPU, where sorting is fast and pulling ``[G, N]`` blocks to the host is not. On a
CPU, XLA's sort is several times slower than the host engine's (DESIGN.md), so
:func:`fastuq.sweeps.sweep` ranks on the host there unless asked (``rank="device"``). Needs
float32 scores (float64 scores are ranked on the host) and ``N < 2**31``. Importing this
module imports JAX (``fastuq.metrics`` does not import it).
"""

from __future__ import annotations

from collections.abc import Sequence
from functools import partial

import jax
import numpy as np

__all__ = ["rank_metrics_device"]


@partial(jax.jit, static_argnames=("which",))
def _metrics(x, labels, which: tuple[str, ...]):
    import jax.numpy as jnp
    from jax import lax

    g, n = x.shape
    u = lax.bitcast_convert_type(jnp.where(x == 0, jnp.zeros_like(x), x), jnp.uint32)
    sign = (u >> 31) == 1
    key = jnp.where(sign, ~u, u | jnp.uint32(1 << 31)).astype(jnp.uint64)
    low = (jnp.arange(n, dtype=jnp.uint64) << 1) | labels.astype(jnp.uint64)
    packed = jnp.sort((key << 32) | low[None, :], axis=1)
    ys = (packed & 1).astype(bool)
    high = packed >> 32
    same = high[:, 1:] == high[:, :-1]
    pos = jnp.arange(n, dtype=jnp.int64)
    start = jnp.concatenate([jnp.ones((g, 1), bool), ~same], axis=1)
    end = jnp.concatenate([~same, jnp.ones((g, 1), bool)], axis=1)
    s = lax.cummax(jnp.where(start, pos[None, :], 0), axis=1)
    e = lax.cummin(jnp.where(end, pos[None, :], n - 1), axis=1, reverse=True)
    k = jnp.arange(1, n + 1, dtype=jnp.float64)
    h = jnp.concatenate([jnp.cumsum((1.0 / k)[::-1])[::-1], jnp.zeros(1)])  # h[j], h[n] = 0
    hcum = jnp.concatenate([jnp.zeros(1), jnp.cumsum(h[:n])])  # H[j] = sum_{i<j} h[i]
    out = {}
    if "auarc" in which:  # sum_{correct} h[j]
        out["dot_h"] = jnp.sum(jnp.where(ys, h[:n][None, :], 0.0), axis=1)
    if "auroc" in which:  # sum_{correct} (s + e), exact
        out["s2"] = jnp.sum(jnp.where(ys, s + e, 0), axis=1)
    if "prr" in which:  # sum_{correct} mean of h over the tie group
        out["u"] = jnp.sum(jnp.where(ys, (hcum[e + 1] - hcum[s]) / (e - s + 1), 0.0), axis=1)
    finite = jnp.all(jnp.isfinite(x), axis=1)
    return out, finite


def rank_metrics_device(labels, x, which: Sequence[str] = ("auroc", "auarc")) -> tuple[
        dict[str, np.ndarray], np.ndarray]:
    """AUROC / AUARC / PRR ``[G]`` (float64, on the host) of score rows ``x [G, N]`` (float32,
    a device or host array) against ``labels [N]`` (bool), ranked on ``x``'s device.

    Returns ``(metrics, finite)``: ``finite [G]`` bool says which rows hold only finite scores
    (the metrics of other rows mean nothing; callers raise). AUROC and PRR are NaN for
    single-class labels, everything is NaN for ``N = 0``.
    """
    import jax.numpy as jnp

    which = tuple(which)
    unknown = set(which) - {"auroc", "auarc", "prr"}
    if unknown:
        raise ValueError(f"unknown rank metrics {sorted(unknown)}")
    y = np.asarray(labels, bool)
    n = y.shape[0]
    if getattr(x, "dtype", None) != np.float32:
        raise ValueError(f"device ranking takes float32 scores, got {getattr(x, 'dtype', None)}")
    if x.ndim != 2 or x.shape[1] != n:
        raise ValueError(f"scores must be [G, {n}], got {tuple(x.shape)}")
    if n >= 1 << 31:
        raise ValueError("device ranking needs N < 2**31")
    g = x.shape[0]
    p = int(y.sum())
    if n == 0:
        return {m: np.full(g, np.nan) for m in which}, np.ones(g, bool)
    with jax.enable_x64(True):
        out, finite = _metrics(x, jnp.asarray(y), which)
        sums = {k: np.asarray(v) for k, v in out.items()}
        finite = np.asarray(finite)
    # the final ratios on the host, written as the host engine writes them (same bits from
    # the same exact integers for AUROC)
    from fastuq.metrics.rank import harmonic_numbers

    res: dict[str, np.ndarray] = {}
    if "auarc" in which:
        res["auarc"] = sums["dot_h"] / n
    if 0 < p < n:
        if "auroc" in which:
            s2 = sums["s2"].astype(np.float64)
            res["auroc"] = (2.0 * p * n - s2 - p * (p + 1.0)) / (2.0 * p * (n - p))
        if "prr" in which:
            h = harmonic_numbers(n)[0]
            res["prr"] = (sums["u"] - p) / (p * h[p])
    return {m: res[m] if m in res else np.full(g, np.nan) for m in which}, finite
