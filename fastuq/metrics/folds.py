"""Stratified fold assignment shared by out-of-fold Platt scaling, sweeps and fits."""

from __future__ import annotations

import numpy as np

__all__ = ["stratified_folds"]


def stratified_folds(
    labels: np.ndarray, k: int, seed: int = 0, *, check_classes: bool = True
) -> np.ndarray:
    """Fold index ``[N]`` int64 of every row's held-out fold: scikit-learn's
    ``StratifiedKFold(k, shuffle=True, random_state=seed)`` on ``labels [N]`` (bool, correct
    = True) -- the folds of :func:`fastuq.metrics.brier_platt`, of :func:`fastuq.sweep`'s
    cross-validated selection and of :func:`fastuq.fit.fit_sauce`'s held-out metrics.

    Raises ValueError unless ``k`` is an integer >= 2 and, with ``check_classes`` (for
    cross-validation, where every fold must hold both classes), each class has at least
    ``k`` rows. Out-of-fold Platt scaling passes ``check_classes=False``: it needs only 2
    rows of each class (scikit-learn warns when a class has fewer than ``k``).
    """
    from sklearn.model_selection import StratifiedKFold

    if int(k) != k or k < 2:
        raise ValueError(f"folds must be an integer >= 2, got {k!r}")
    labels = np.asarray(labels, bool)
    if check_classes:
        smallest = min(int(labels.sum()), int((~labels).sum()))
        if smallest < k:
            raise ValueError(f"{k}-fold cross-validation needs at least {k} trajectories of "
                             f"each class; the smaller class has {smallest}")
    fold = np.empty(labels.shape[0], np.int64)
    skf = StratifiedKFold(n_splits=int(k), shuffle=True, random_state=seed)
    for f, (_, test) in enumerate(skf.split(np.zeros((labels.shape[0], 1)), labels)):
        fold[test] = f
    return fold
