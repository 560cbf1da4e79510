"""Brier-Platt (and the out-of-fold Platt probabilities) do not depend on a score's scale.

DESIGN.md (Metrics): the one-feature logistic regression is fitted on the score standardised
with the training fold's mean and standard deviation. The reference here is scikit-learn's
``make_pipeline(StandardScaler(), LogisticRegression(C))`` fitted fold by fold, with a tight
solver tolerance. Tolerances: probabilities vs scikit-learn 1e-6 (lbfgs at tol 1e-10); the
same scores under ``c x + b`` 1e-9 in probabilities and 1e-10 in Brier (float64 rounding of
the affine map and of the Newton fits only).
"""

from __future__ import annotations

import numpy as np
import pytest
from sklearn.linear_model import LogisticRegression
from sklearn.metrics import brier_score_loss
from sklearn.model_selection import StratifiedKFold
from sklearn.pipeline import make_pipeline
from sklearn.preprocessing import StandardScaler

from fastuq.metrics import brier_platt, evaluate, platt_oof_probabilities


def _sklearn_standardised_oof(y, x, *, C=1.0, seed=0):
    skf = StratifiedKFold(n_splits=5, shuffle=True, random_state=seed)
    xx = np.asarray(x, np.float64)[:, None]
    out = np.empty(len(y))
    for train, test in skf.split(xx, y):
        model = make_pipeline(
            StandardScaler(),
            LogisticRegression(C=np.inf if C is None else C, tol=1e-10, max_iter=10_000),
        )
        model.fit(xx[train], y[train])
        out[test] = model.predict_proba(xx[test])[:, 1]
    return out


def _data(n=600, seed=0):
    rng = np.random.default_rng(seed)
    y = rng.random(n) < 0.55
    x = rng.standard_normal(n) - 0.7 * y
    return y, x


@pytest.mark.parametrize("c", [1e-4, 0.01, 1.0, 37.0, 1e5])
@pytest.mark.parametrize("shift", [0.0, -3.0, 250.0])
def test_brier_platt_is_scale_and_shift_invariant(c, shift):
    y, x = _data()
    base_p = platt_oof_probabilities(y, x)
    p = platt_oof_probabilities(y, x * c + shift)
    np.testing.assert_allclose(p, base_p, rtol=0, atol=1e-9)
    assert brier_platt(y, x * c + shift) == pytest.approx(brier_platt(y, x), abs=1e-10)


def test_many_columns_at_different_scales_give_one_brier():
    y, x = _data(n=800, seed=3)
    scales = np.array([1e-3, 0.01, 1.0, 50.0, 1e4])
    shifts = np.array([0.0, 7.0, -2.0, 100.0, 1e3])
    cols = x[:, None] * scales + shifts
    got = brier_platt(y, cols)
    np.testing.assert_allclose(got, np.full(5, got[0]), rtol=0, atol=1e-10)
    ece = evaluate(y, cols, metrics=("ece",))["ece"]
    np.testing.assert_allclose(ece, np.full(5, ece[0]), rtol=0, atol=1e-9)


@pytest.mark.parametrize("C", [1.0, 0.05, None])
@pytest.mark.parametrize("c", [0.01, 1.0, 300.0])
def test_platt_matches_sklearn_on_fold_standardised_scores(C, c):
    y, x = _data(n=500, seed=1)
    x = x * c + 4.0
    ref = _sklearn_standardised_oof(y, x, C=C)
    got = platt_oof_probabilities(y, x, C=C)
    np.testing.assert_allclose(got, ref, rtol=0, atol=1e-6)
    assert brier_platt(y, x, C=C) == pytest.approx(brier_score_loss(y, ref), abs=1e-7)


def test_platt_float32_scores_match_sklearn():
    y, x = _data(n=400, seed=2)
    x32 = (x * 0.01).astype(np.float32)
    ref = _sklearn_standardised_oof(y, x32.astype(np.float64))
    np.testing.assert_allclose(platt_oof_probabilities(y, x32), ref, rtol=0, atol=1e-6)


def test_column_constant_on_one_training_part_only():
    # A score constant on the training folds of some fold but not overall: that fold's
    # standardised training feature is 0 (scale 1, as StandardScaler), so its fit is the
    # training base rate; scikit-learn agrees.
    y, x = _data(n=300, seed=4)
    skf = StratifiedKFold(n_splits=5, shuffle=True, random_state=0)
    _, test0 = next(iter(skf.split(x[:, None], y)))
    z = np.full_like(x, 0.25)
    z[test0] = x[test0]  # only fold 0's held-out rows vary
    got = platt_oof_probabilities(y, z)
    ref = _sklearn_standardised_oof(y, z)
    np.testing.assert_allclose(got, ref, rtol=0, atol=1e-6)
    train0 = np.setdiff1d(np.arange(len(y)), test0)
    np.testing.assert_allclose(got[test0], y[train0].mean(), atol=1e-9)


def test_sauce_scores_on_the_sample_corpus_scale_free():
    # The example: SAUCE scores times 0.01 moved Brier-Platt (0.2073 -> 0.2163).
    import fastuq
    from fastuq.cli import sample_corpus_path

    table = fastuq.score(sample_corpus_path(), "sauce", backend="numpy")
    y = table["correct"].to_numpy()
    s = table["sauce"].to_numpy()
    base = brier_platt(y, s)
    for c in (0.01, 0.5, 20.0):
        assert brier_platt(y, s * c) == pytest.approx(base, abs=1e-10)
    ref = brier_score_loss(y, _sklearn_standardised_oof(y, s))
    assert base == pytest.approx(ref, abs=1e-7)
