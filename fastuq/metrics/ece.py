"""Expected calibration error of many probability columns with one ``np.bincount``."""

from __future__ import annotations

import numpy as np

__all__ = ["ece_matrix"]


def ece_matrix(labels: np.ndarray, prob: np.ndarray, n_bins: int = 15) -> np.ndarray:
    """ECE ``[C]`` float64 of validated probabilities ``prob [N, C]`` in [0, 1].

    Bin ``i`` is ``[i/n_bins, (i+1)/n_bins)`` (edges ``i / n_bins`` as float64; the last bin
    is closed), and ``ECE = sum_i (n_i / N) |mean label_i - mean prob_i|
    = (1/N) sum_i |sum label_i - sum prob_i|`` (empty bins add nothing).
    """
    n, c = prob.shape
    edges = np.arange(n_bins + 1, dtype=np.float64) / n_bins
    idx = np.searchsorted(edges, prob, side="right") - 1  # [N, C]
    np.minimum(idx, n_bins - 1, out=idx)
    idx += np.arange(c, dtype=idx.dtype) * n_bins
    flat = idx.ravel()
    sum_p = np.bincount(flat, weights=prob.ravel(), minlength=c * n_bins)
    y = np.broadcast_to(labels.astype(np.float64)[:, None], (n, c)).ravel()
    sum_y = np.bincount(flat, weights=y, minlength=c * n_bins)
    return np.abs(sum_y - sum_p).reshape(c, n_bins).sum(axis=1) / n
