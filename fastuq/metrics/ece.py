"""Expected calibration error of many probability columns with one ``np.bincount``, and the
equal-width binning it uses (shared with :func:`fastuq.evaluation.reliability_bins`)."""

from __future__ import annotations

import numpy as np

__all__ = ["bin_edges", "bin_index", "ece_matrix"]


def bin_edges(n_bins: int) -> np.ndarray:
    """Edges ``[n_bins + 1]`` float64 ``i / n_bins`` of ``n_bins`` equal-width bins on [0, 1]."""
    return np.arange(n_bins + 1, dtype=np.float64) / n_bins


def bin_index(prob: np.ndarray, n_bins: int) -> np.ndarray:
    """Bin (intp, the shape of ``prob``) of each probability in [0, 1]: bin ``i`` is
    ``[i/n_bins, (i+1)/n_bins)`` (edges :func:`bin_edges`), the last bin closed.

    ``floor(prob * n_bins)``, then moved by one where rounding put a probability on the
    wrong side of an edge, so the bins are exactly those of ``searchsorted`` on the edges
    (tested), in a few elementwise passes."""
    prob = np.asarray(prob, np.float64)
    idx = np.multiply(prob, n_bins).astype(np.intp)  # floor for prob >= 0
    np.clip(idx, 0, n_bins - 1, out=idx)
    # edges[i] is i / n_bins (bin_edges computes it so): compare without a gather
    idx -= prob < idx / n_bins
    np.maximum(idx, 0, out=idx)
    idx += (prob >= (idx + 1) / n_bins) & (idx < n_bins - 1)
    return idx


def ece_matrix(labels: np.ndarray, prob: np.ndarray, n_bins: int = 15) -> np.ndarray:
    """ECE ``[C]`` float64 of validated probabilities ``prob [N, C]`` in [0, 1].

    Bins as :func:`bin_index`, and ``ECE = sum_i (n_i / N) |mean label_i - mean prob_i|
    = (1/N) sum_i |sum label_i - sum prob_i|`` (empty bins add nothing).
    """
    n, c = prob.shape
    idx = bin_index(prob, n_bins)  # [N, C]
    idx += np.arange(c, dtype=idx.dtype) * n_bins
    flat = idx.ravel()
    sum_p = np.bincount(flat, weights=prob.ravel(), minlength=c * n_bins)
    y = np.broadcast_to(labels.astype(np.float64)[:, None], (n, c)).ravel()
    sum_y = np.bincount(flat, weights=y, minlength=c * n_bins)
    return np.abs(sum_y - sum_p).reshape(c, n_bins).sum(axis=1) / n
