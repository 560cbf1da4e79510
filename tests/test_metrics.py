"""Tests of fastuq.metrics against scikit-learn, plain-loop definitions and hand-computed cases.

Tolerances: AUROC vs scikit-learn 1e-12 (both exact up to float64 rounding); AUARC / PRR /
ECE vs loop references 1e-12; Platt probabilities vs scikit-learn's LogisticRegression with a
tight solver tolerance 1e-6 (scikit-learn's default tol=1e-4 stops lbfgs early, ~1e-4 off).
"""

from __future__ import annotations

import itertools
import subprocess
import sys
import warnings

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st
from sklearn.linear_model import LogisticRegression
from sklearn.metrics import brier_score_loss, roc_auc_score
from sklearn.model_selection import StratifiedKFold
from sklearn.pipeline import make_pipeline
from sklearn.preprocessing import StandardScaler

import fastuq.metrics.rank as rank_mod
from fastuq.metrics import (
    PlattConvergenceWarning,
    UndefinedMetricWarning,
    auarc,
    auroc,
    brier_platt,
    ece,
    evaluate,
    platt_oof_probabilities,
    prr,
)

# ---------------------------------------------------------------- plain-loop references


def auarc_loop(y, u):
    """Mean over k = 1..N of the accuracy of the k most certain, stable order."""
    order = sorted(range(len(u)), key=lambda i: u[i])  # Python's sort is stable
    total, correct = 0.0, 0
    for k, i in enumerate(order, start=1):
        correct += int(y[i])
        total += correct / k
    return total / len(u)


def _tie_averaged_labels(y, u):
    """Labels in ascending-uncertainty order, each replaced by its tie group's mean."""
    order = sorted(range(len(u)), key=lambda i: u[i])
    out = []
    j = 0
    while j < len(order):
        k = j
        while k + 1 < len(order) and u[order[k + 1]] == u[order[j]]:
            k += 1
        mean = sum(float(y[order[i]]) for i in range(j, k + 1)) / (k - j + 1)
        out.extend([mean] * (k - j + 1))
        j = k + 1
    return out


def _rejection_area(ys_most_certain_first):
    """Mean over k = 0..N-1 rejected (most uncertain first) of the retained accuracy."""
    n = len(ys_most_certain_first)
    return sum(sum(ys_most_certain_first[: n - k]) / (n - k) for k in range(n)) / n


def prr_loop(y, u):
    """PRR straight from its definition, ties averaged via tie-group mean labels."""
    n, p = len(y), int(sum(y))
    a_unc = _rejection_area(_tie_averaged_labels(y, u))
    a_rnd = p / n
    a_orc = _rejection_area([1.0] * p + [0.0] * (n - p))
    return (a_unc - a_rnd) / (a_orc - a_rnd)


def prr_all_orders(y, u):
    """PRR averaged over every order of the tied rows (tiny inputs only)."""
    values = sorted(set(u))
    groups = [[i for i in range(len(u)) if u[i] == v] for v in values]
    n, p = len(y), int(sum(y))
    a_rnd = p / n
    a_orc = _rejection_area([1.0] * p + [0.0] * (n - p))
    areas = []
    for perms in itertools.product(*[itertools.permutations(g) for g in groups]):
        order = [i for g in perms for i in g]
        areas.append(_rejection_area([float(y[i]) for i in order]))
    return (sum(areas) / len(areas) - a_rnd) / (a_orc - a_rnd)


def ece_loop(y, p, n_bins=15):
    n, total = len(y), 0.0
    for i in range(n_bins):
        lo, hi = i / n_bins, (i + 1) / n_bins
        idx = [j for j in range(n) if lo <= p[j] < hi or (i == n_bins - 1 and p[j] == 1.0)]
        if idx:
            mean_y = sum(float(y[j]) for j in idx) / len(idx)
            mean_p = sum(float(p[j]) for j in idx) / len(idx)
            total += len(idx) / n * abs(mean_y - mean_p)
    return total


def sklearn_oof(y, x, *, C=1.0, seed=0, tol=1e-10):
    """Out-of-fold probabilities from scikit-learn, one LogisticRegression per fold."""
    skf = StratifiedKFold(n_splits=5, shuffle=True, random_state=seed)
    out = np.empty(len(y))
    xx = np.asarray(x, np.float64)[:, None]
    for train, test in skf.split(xx, y):
        # DESIGN.md: the score is standardised with the training fold's mean and std.
        lr = make_pipeline(StandardScaler(),
                           LogisticRegression(C=np.inf if C is None else C, tol=tol,
                                              max_iter=10_000))
        lr.fit(xx[train], y[train])
        out[test] = lr.predict_proba(xx[test])[:, 1]
    return out


def _data(n=400, c=5, seed=0, dtype=np.float32):
    rng = np.random.default_rng(seed)
    y = rng.random(n) < 0.6
    x = rng.standard_normal((n, c)) - 0.8 * y[:, None]
    if c > 2:
        x[:, 1] = np.round(x[:, 1] * 2) / 2  # heavy ties
        x[:, 2] = np.round(x[:, 2])  # heavier ties
    return y, x.astype(dtype)


# ---------------------------------------------------------------- AUROC


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_auroc_matches_sklearn_with_ties(dtype):
    y, x = _data(dtype=dtype)
    if dtype == np.float64:  # not float32 values: the argsort path
        x[:, 3] += 1e-13 * np.arange(len(y))
    got = auroc(y, x)
    ref = [roc_auc_score(y, -x[:, j]) for j in range(x.shape[1])]
    assert got.dtype == np.float64 and got.shape == (x.shape[1],)
    np.testing.assert_allclose(got, ref, rtol=0, atol=1e-12)


def test_auroc_hand_computed_ties():
    # correct u = 0.1, 0.3; wrong u = 0.1, 0.2. Pairs (correct, wrong):
    # (0.1, 0.1) tie -> 1/2; (0.1, 0.2) -> 1; (0.3, 0.1) -> 0; (0.3, 0.2) -> 0.
    # AUROC = 1.5 / 4 = 0.375.
    assert auroc([1, 0, 1, 0], [0.1, 0.1, 0.3, 0.2]) == pytest.approx(0.375, abs=1e-15)
    # all tied: every pair half -> 0.5
    assert auroc([1, 0, 1], [2.0, 2.0, 2.0]) == pytest.approx(0.5, abs=1e-15)


def test_auroc_signed_zero_is_one_value():
    # -0.0 == 0.0: the single pair is a tie -> 1/2 (scikit-learn agrees)
    assert auroc([1, 0], np.array([-0.0, 0.0], np.float32)) == 0.5
    assert roc_auc_score([1, 0], [0.0, -0.0]) == 0.5


def test_auroc_perfect_and_reversed():
    y = np.array([1, 1, 0, 0, 0])
    u = np.array([0.1, 0.2, 0.3, 0.4, 0.5])
    assert auroc(y, u) == 1.0
    assert auroc(y, -u) == 0.0


# ---------------------------------------------------------------- AUARC


def test_auarc_hand_computed_tie_keeps_file_order():
    # sorted ascending, ties in file order: u 0.2 (row 2, y 1), 0.5 (row 0, y 1),
    # 0.5 (row 1, y 0), 0.9 (row 3, y 1); cumsum 1, 2, 2, 3; / k: 1, 1, 2/3, 3/4
    # AUARC = (1 + 1 + 2/3 + 3/4) / 4 = 41/48
    assert auarc([1, 0, 1, 1], [0.5, 0.5, 0.2, 0.9]) == pytest.approx(41 / 48, abs=1e-15)
    # rows 0 and 1 swapped: order y = 1, 0, 1, 1; cumsum 1, 1, 2, 3; / k: 1, 1/2, 2/3, 3/4
    # AUARC = (1 + 1/2 + 2/3 + 3/4) / 4 = 35/48
    assert auarc([0, 1, 1, 1], [0.5, 0.5, 0.2, 0.9]) == pytest.approx(35 / 48, abs=1e-15)


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_auarc_matches_loop(dtype):
    y, x = _data(n=300, dtype=dtype)
    got = auarc(y, x)
    ref = [auarc_loop(y, x[:, j].tolist()) for j in range(x.shape[1])]
    np.testing.assert_allclose(got, ref, rtol=0, atol=1e-12)


def test_auarc_single_class_defined():
    assert auarc([1, 1, 1], [0.3, 0.1, 0.2]) == pytest.approx(1.0)
    assert auarc([0, 0], [0.3, 0.1]) == 0.0


# ---------------------------------------------------------------- PRR


def test_prr_hand_computed_ties():
    # u ascending: {0.1: y 1, 0.1: y 0} tied -> mean 1/2 each, 0.2: y 0, 0.3: y 1
    # averaged labels, most certain first: 1/2, 1/2, 0, 1.
    # retained accuracy, k = 0..3 rejected: 2/4, 1/3, 1/2, 1/2 -> AUC_unc = 11/24
    # AUC_rnd = 1/2 = 12/24; oracle 2/4, 2/3, 1, 1 -> AUC_oracle = 19/24
    # PRR = (11/24 - 12/24) / (19/24 - 12/24) = -1/7
    assert prr([1, 0, 1, 0], [0.1, 0.1, 0.3, 0.2]) == pytest.approx(-1 / 7, abs=1e-14)


def test_prr_perfect_constant_reversed():
    y = np.array([1, 0, 1, 1, 0])
    assert prr(y, np.where(y, 0.0, 1.0)) == pytest.approx(1.0, abs=1e-14)
    assert prr(y, np.full(5, 3.0)) == pytest.approx(0.0, abs=1e-14)  # one tie group
    assert prr(y, np.where(y, 1.0, 0.0)) < 0


@pytest.mark.parametrize("seed", range(4))
def test_prr_equals_average_over_all_tie_orders(seed):
    rng = np.random.default_rng(seed)
    y = np.array([1, 0, 1, 0, 1, 1, 0])
    u = rng.integers(0, 3, size=7).astype(float)
    assert prr(y, u) == pytest.approx(prr_all_orders(y, u.tolist()), abs=1e-12)


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_prr_matches_loop(dtype):
    y, x = _data(n=200, dtype=dtype)
    got = prr(y, x)
    ref = [prr_loop(y, x[:, j].tolist()) for j in range(x.shape[1])]
    np.testing.assert_allclose(got, ref, rtol=0, atol=1e-12)


# ---------------------------------------------------------------- Brier-Platt


@pytest.mark.parametrize("C", [1.0, 0.01, None])
def test_platt_matches_sklearn_logistic_regression(C):
    y, x = _data(n=500, c=4, dtype=np.float64)
    x = x * np.array([1.0, 30.0, 0.05, 4.0]) + np.array([0.0, 7.0, -2.0, 100.0])  # raw units
    probs = platt_oof_probabilities(y, x, C=C)
    ref = np.column_stack([sklearn_oof(y, x[:, j], C=C) for j in range(x.shape[1])])
    np.testing.assert_allclose(probs, ref, rtol=0, atol=1e-6)
    got = brier_platt(y, x, C=C)
    brier_ref = [brier_score_loss(y, ref[:, j]) for j in range(x.shape[1])]
    np.testing.assert_allclose(got, brier_ref, rtol=0, atol=1e-7)


def test_platt_float32_scores():
    y, x = _data(n=300, c=2, seed=4)  # float32; scikit-learn gets the same values as float64
    ref = np.column_stack([sklearn_oof(y, x[:, j].astype(np.float64)) for j in range(2)])
    np.testing.assert_allclose(platt_oof_probabilities(y, x), ref, rtol=0, atol=1e-6)


def test_platt_default_sklearn_settings_close():
    # LogisticRegression(C=1.0) as is (lbfgs, tol=1e-4) stops early: ~1e-4 in probabilities.
    y, x = _data(n=300, c=2, seed=3, dtype=np.float64)
    ref = sklearn_oof(y, x[:, 0], tol=1e-4)
    np.testing.assert_allclose(platt_oof_probabilities(y, x[:, 0]), ref, atol=1e-3)


def test_platt_seed_and_constant_column():
    y, x = _data(n=200, c=3, dtype=np.float64)
    x[:, 1] = 0.1  # constant: the fit is the training base rate of each fold
    for C in (1.0, None):
        probs = platt_oof_probabilities(y, x, seed=7, C=C)
        ref = sklearn_oof(y, x[:, 1], seed=7, C=C)
        np.testing.assert_allclose(probs[:, 1], ref, atol=1e-6)
        skf = StratifiedKFold(n_splits=5, shuffle=True, random_state=7)
        for train, test in skf.split(x, y):
            np.testing.assert_allclose(probs[test, 1], y[train].mean(), atol=1e-9)


def test_platt_separable_unpenalized_warns():
    y = np.array([1] * 10 + [0] * 10)
    u = np.arange(20.0)
    with pytest.warns(PlattConvergenceWarning):
        probs = platt_oof_probabilities(y, u, C=None)
    assert np.all(np.isfinite(probs))


def test_brier_too_few_of_a_class_is_nan():
    with pytest.warns(UndefinedMetricWarning):
        assert np.isnan(brier_platt([1] + [0] * 9, np.arange(10.0)))


# ---------------------------------------------------------------- ECE


def test_ece_hand_computed():
    # 0.1 -> bin 1 (1.5), 0.15 -> bin 2 (2.25), 0.9 -> bin 13 (13.5), 1.0 -> bin 14 (closed)
    # ECE = (|0 - 0.1| + |1 - 0.15| + |1 - 0.9| + |1 - 1|) / 4 = 1.05 / 4 = 0.2625
    assert ece([0, 1, 1, 1], [0.1, 0.15, 0.9, 1.0]) == pytest.approx(0.2625, abs=1e-15)
    # 0.1 and 0.12 share bin 1: (2/2) |1/2 - 0.11| = 0.39
    assert ece([1, 0], [0.1, 0.12]) == pytest.approx(0.39, abs=1e-15)
    # 1/15 opens bin 1, 0.0 is in bin 0: (1/2)|1 - 0| + (1/2)|0 - 1/15| = 1/2 + 1/30
    assert ece([1, 0], [0.0, 1 / 15]) == pytest.approx(0.5 + 1 / 30, abs=1e-15)


@pytest.mark.parametrize("n_bins", [15, 4])
def test_ece_matches_loop(n_bins):
    rng = np.random.default_rng(5)
    y = rng.random(300) < 0.5
    p = rng.random((300, 3))
    p[:10, 0] = np.arange(10) / n_bins % 1.0  # values on bin edges
    p[10, 1] = 1.0
    got = ece(y, p, n_bins=n_bins)
    ref = [ece_loop(y, p[:, j].tolist(), n_bins) for j in range(3)]
    np.testing.assert_allclose(got, ref, rtol=0, atol=1e-12)


def test_ece_rejects_non_probabilities():
    with pytest.raises(ValueError, match="column 0"):
        ece([1, 0], [0.2, 1.5])


# ---------------------------------------------------------------- shared behaviour


@pytest.mark.parametrize("metric", [auroc, auarc, prr, brier_platt])
def test_multi_column_equals_per_column(metric):
    y, x = _data(n=150, c=4)
    together = metric(y, x)
    apart = [metric(y, x[:, j]) for j in range(x.shape[1])]
    assert isinstance(apart[0], float)
    np.testing.assert_allclose(together, apart, rtol=0, atol=1e-12)


def test_multi_block_equals_single_block(monkeypatch):
    y, x = _data(n=120, c=7)
    whole = {m.__name__: m(y, x) for m in (auroc, auarc, prr)}
    monkeypatch.setattr(rank_mod, "BLOCK_ELEMENTS", 250)  # 2 columns per block
    for m in (auroc, auarc, prr):
        np.testing.assert_allclose(m(y, x), whole[m.__name__], rtol=0, atol=1e-15)


@pytest.mark.parametrize("metric", [auroc, prr, brier_platt])
def test_single_class_is_nan_with_warning(metric):
    for y in ([1] * 12, [0] * 12):
        with pytest.warns(UndefinedMetricWarning):
            assert np.isnan(metric(y, np.arange(12.0)))
        with pytest.warns(UndefinedMetricWarning):
            assert np.isnan(metric(y, np.ones((12, 3)))).all()


def test_platt_metrics_need_a_class_as_large_as_the_folds():
    # 3 correct, 3 wrong: scikit-learn's StratifiedKFold(5) refuses it (every class smaller
    # than n_splits); Brier-Platt and ECE are NaN with a warning, the rank metrics defined,
    # and evaluate (fastuq eval) finishes; with 3 folds, or 5 rows in one class, it is fit

    y, x = np.array([1, 1, 1, 0, 0, 0], bool), np.arange(6.0)
    with pytest.raises(ValueError):
        list(StratifiedKFold(5, shuffle=True, random_state=0).split(x[:, None], y))
    with pytest.warns(UndefinedMetricWarning, match="at least 5 rows"):
        assert np.isnan(brier_platt(y, x))
    with pytest.warns(UndefinedMetricWarning):
        table = evaluate(y, x[:, None], names=["s"])
    assert np.isnan(table["brier_platt"]).all() and np.isnan(table["ece"]).all()
    assert table["auroc"][0] == pytest.approx(roc_auc_score(y, -x))
    assert np.isfinite(brier_platt(y, x, n_folds=3))
    y5 = np.array([1, 1, 1, 1, 1, 0, 0, 0], bool)
    assert np.isfinite(brier_platt(y5, np.arange(8.0)))


@pytest.mark.parametrize("metric", [auroc, auarc, prr, brier_platt, ece])
@pytest.mark.parametrize("bad", [np.nan, np.inf, -np.inf])
def test_non_finite_scores_raise_naming_column(metric, bad):
    x = np.full((6, 3), 0.5)
    x[4, 2] = bad
    with pytest.raises(ValueError, match="column 2"):
        metric([1, 0, 1, 0, 1, 0], x)


@pytest.mark.parametrize("metric", [auroc, auarc, prr, brier_platt, ece])
def test_length_mismatch_and_bad_labels_raise(metric):
    with pytest.raises(ValueError, match="length mismatch"):
        metric([1, 0, 1], [0.1, 0.2])
    with pytest.raises(ValueError, match="0 or 1"):
        metric([1, 2], [0.1, 0.2])


def test_import_is_light():
    code = (
        "import sys, fastuq; before = set(sys.modules); import fastuq.metrics; "
        "new = set(sys.modules) - before; "
        "print(sorted(m for m in new if m.split('.')[0] in ('jax', 'sklearn', 'scipy')))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"


# ---------------------------------------------------------------- evaluate


def test_evaluate_mapping_table_and_values():
    y, x = _data(n=200, c=3)
    mapping = {"b": x[:, 0], "a": x[:, 1], "c": x[:, 2]}
    res = evaluate(y, mapping)
    assert list(res) == ["name", "n", "accuracy", "auroc", "auarc", "prr", "brier_platt", "ece"]
    assert res["name"].tolist() == ["b", "a", "c"]
    assert res["n"].tolist() == [200] * 3
    np.testing.assert_allclose(res["accuracy"], y.mean())
    for m in (auroc, auarc, prr, brier_platt):
        np.testing.assert_allclose(res[m.__name__], m(y, x), rtol=0, atol=1e-15)
    probs = platt_oof_probabilities(y, x)
    np.testing.assert_allclose(res["ece"], ece(y, probs), rtol=0, atol=1e-15)
    # Brier of the shared probabilities, by scikit-learn
    np.testing.assert_allclose(
        res["brier_platt"], [brier_score_loss(y, probs[:, j]) for j in range(3)], atol=1e-12
    )


def test_evaluate_polars_and_arrow_and_subset():
    import polars as pl
    import pyarrow as pa

    y, x = _data(n=100, c=3)
    x = x[:, 1:]
    ref = evaluate(y, x, metrics=("auroc", "prr"), names=["u", "v"])
    assert list(ref) == ["name", "n", "accuracy", "auroc", "prr"]
    for table in (
        pl.DataFrame({"u": x[:, 0], "v": x[:, 1]}),
        pa.table({"u": x[:, 0], "v": x[:, 1]}),
    ):
        res = evaluate(y, table, metrics=("auroc", "prr"))
        assert res["name"].tolist() == ["u", "v"]
        np.testing.assert_allclose(res["auroc"], ref["auroc"], atol=1e-15)
        np.testing.assert_allclose(res["prr"], ref["prr"], atol=1e-15)
    assert pl.DataFrame(ref).shape == (2, 5)
    with pytest.raises(ValueError, match="unknown metric"):
        evaluate(y, x, metrics=("auc",))


def test_evaluate_single_class():
    with warnings.catch_warnings(record=True) as rec:
        warnings.simplefilter("always")
        res = evaluate([1] * 10, np.arange(20.0).reshape(10, 2))
    assert {type(w.message) for w in rec} == {UndefinedMetricWarning}
    assert np.isnan(res["auroc"]).all() and np.isnan(res["prr"]).all()
    assert np.isnan(res["brier_platt"]).all() and np.isnan(res["ece"]).all()
    np.testing.assert_allclose(res["auarc"], 1.0)


# ---------------------------------------------------------------- property tests

_many_ties = st.integers(min_value=2, max_value=40).flatmap(
    lambda n: st.tuples(
        st.lists(st.booleans(), min_size=n, max_size=n).filter(lambda v: 0 < sum(v) < n),
        st.lists(st.integers(-3, 3), min_size=n, max_size=n),
        st.sampled_from(["float32", "float64", "float64+0.1"]),
    )
)


@given(_many_ties)
def test_property_rank_metrics_with_many_ties(case):
    y_list, u_list, kind = case
    y = np.array(y_list)
    u = np.array(u_list, kind[:7]) / 2  # halves: exact in both dtypes
    if kind == "float64+0.1":
        u += 0.1  # no longer float32 values: the argsort path; ties stay ties
    assert auroc(y, u) == pytest.approx(roc_auc_score(y, -u), abs=1e-12)
    assert auarc(y, u) == pytest.approx(auarc_loop(y, u.tolist()), abs=1e-12)
    assert prr(y, u) == pytest.approx(prr_loop(y, u.tolist()), abs=1e-12)
    # two columns at once agree with one at a time
    x = np.column_stack([u, -u])
    np.testing.assert_allclose(auroc(y, x), [auroc(y, u), auroc(y, -u)], atol=1e-15)


@given(
    st.lists(st.tuples(st.booleans(), st.floats(0, 1)), min_size=1, max_size=40),
    st.integers(1, 20),
)
def test_property_ece_matches_loop(pairs, n_bins):
    y = np.array([a for a, _ in pairs])
    p = np.array([b for _, b in pairs])
    assert ece(y, p, n_bins=n_bins) == pytest.approx(ece_loop(y, p.tolist(), n_bins), abs=1e-12)


def _separable_in_one_fold(fold_k: int):
    """Labels, scores and sklearn's folds (5, shuffled, seed 0) where only the training part
    of fold ``fold_k`` (every other fold) is separable: a positive scored above every
    negative and a negative below every positive, both in fold ``fold_k``, cross the classes
    in every other training part."""
    from sklearn.model_selection import StratifiedKFold

    y = np.array([1, 0] * 15)
    fold = np.empty(y.size, np.int64)
    for f, (_, test) in enumerate(StratifiedKFold(5, shuffle=True, random_state=0).split(
            np.zeros(y.size), y)):
        fold[test] = f
    u = np.where(y == 1, 0.0, 10.0) + np.arange(y.size) * 0.01  # positives lower
    i = np.flatnonzero((fold == fold_k) & (y == 1))[0]
    j = np.flatnonzero((fold == fold_k) & (y == 0))[0]
    u[i], u[j] = 20.0, -10.0
    return y, u, fold


@pytest.mark.parametrize("fold_k", [1, 4])
def test_platt_warning_names_the_fold_that_did_not_converge(fold_k):
    y, u, fold = _separable_in_one_fold(fold_k)
    with pytest.warns(PlattConvergenceWarning, match=rf"1 \(fold, column\) fits: "
                                                     rf"column 0: fold {fold_k} \("):
        platt_oof_probabilities(y, u, C=None)
    # the column-by-column engine (used from 2**21 rows) names them alike
    from fastuq.metrics.platt_fast import platt_columns

    with pytest.warns(PlattConvergenceWarning, match=rf"1 \(fold, column\) fits: "
                                                     rf"column 1: fold {fold_k} \("):
        platt_columns(y.astype(bool), [np.arange(y.size) % 7 * 1.0, u], fold, 0.0)


def test_score_columns_consume_copies_chunks_and_frees_each_column():
    """``ScoreColumns.consume``: Arrow columns of several chunks (and NumPy ones) become one
    column-major matrix of their common float dtype, equal value for value to the inputs;
    each list entry is dropped (None) as soon as it is copied, before ``after_each`` runs."""
    import pyarrow as pa

    from fastuq.metrics.inputs import ScoreColumns

    rng = np.random.default_rng(3)
    a = rng.standard_normal(10)
    b = rng.integers(0, 5, 10)
    c = rng.standard_normal(10).astype(np.float32)
    columns = [pa.chunked_array([a[:3], a[3:7], a[7:]]),
               pa.chunked_array([b[:5], b[5:]]), c]
    seen = []
    s = ScoreColumns.consume(columns, ["a", "b", "c"], 10,
                             after_each=lambda: seen.append(list(columns)))
    assert s.x.dtype == np.float64 and s.x.shape == (10, 3) and s.x.flags.f_contiguous
    assert np.array_equal(s["a"], a) and np.array_equal(s["b"], b.astype(np.float64))
    assert np.array_equal(s["c"], c.astype(np.float64)) and s.names == ["a", "b", "c"]
    assert [[col is None for col in state] for state in seen] == [
        [True, False, False], [True, True, False], [True, True, True]]
    f32 = ScoreColumns.consume([pa.chunked_array([c[:4], c[4:]])], ["c"], 10)
    assert f32.x.dtype == np.float32 and np.array_equal(f32["c"], c)
    with pytest.raises(ValueError, match="score column 'a' has 9 rows, expected 10"):
        ScoreColumns.consume([pa.array(a[:9])], ["a"], 10)
    with pytest.raises(ValueError, match="2 names for 1 score columns"):
        ScoreColumns.consume([a], ["a", "b"], 10)
