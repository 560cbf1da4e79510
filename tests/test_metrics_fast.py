"""The fast paths of the metrics (issue 12: ``fastuq eval`` on 1e7 trajectories) against the
references they replace.

* ``stratified_folds``: scikit-learn's ``StratifiedKFold(shuffle=True)`` folds, exactly.
* ``bin_index``: the bins of ``searchsorted`` on the edges, exactly (edges and their
  neighbouring floats included).
* The column-by-column Platt engine (``fastuq.metrics.platt_fast``: fold-ordered rows,
  jitted row sums, warm start, quadratic-convergence stop) against the matrix path of
  ``fastuq.metrics.platt`` on the same columns: probabilities to 1e-9 (both stop within
  about 1e-11 of the optimum in parameters), Brier and ECE to 1e-10; and against
  scikit-learn's pipeline to 1e-6 (as the matrix path is tested).
* ``evaluate_groups``: each group's table equals ``evaluate`` on that group's rows (rank
  metrics exactly; Brier-Platt and ECE to 1e-12: the same fits, with the score matrix in
  another memory order, so sums run in another order).
* Float64 ranking by Polars' checked ``arg_sort``: the stable order, and the radix fallback
  when the order it returns is not stable.
"""

from __future__ import annotations

import warnings

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from sklearn.linear_model import LogisticRegression
from sklearn.model_selection import StratifiedKFold
from sklearn.pipeline import make_pipeline
from sklearn.preprocessing import StandardScaler

import fastuq.metrics.platt as platt
from fastuq.metrics import evaluate, evaluate_groups
from fastuq.metrics.ece import bin_edges, bin_index, ece_matrix
from fastuq.metrics.folds import stratified_folds
from fastuq.metrics.rank import _sort64_with, order_keys, radix_sort_with


def _sklearn_folds(y, k, seed):
    fold = np.empty(len(y), np.int64)
    skf = StratifiedKFold(n_splits=k, shuffle=True, random_state=seed)
    for f, (_, test) in enumerate(skf.split(np.zeros((len(y), 1)), y)):
        fold[test] = f
    return fold


@settings(max_examples=150, deadline=None)
@given(
    labels=st.lists(st.booleans(), min_size=2, max_size=80),
    k=st.integers(2, 7),
    seed=st.integers(0, 2**31 - 1),
)
def test_stratified_folds_are_sklearns(labels, k, seed):
    y = np.array(labels)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        try:
            ref = _sklearn_folds(y, k, seed)
        except ValueError:
            with pytest.raises(ValueError):
                stratified_folds(y, k, seed, check_classes=False)
            return
    np.testing.assert_array_equal(stratified_folds(y, k, seed, check_classes=False), ref)


def test_stratified_folds_long_and_first_row_class():
    rng = np.random.default_rng(5)
    for first in (True, False):
        y = rng.random(200_003) < 0.7
        y[0] = first  # scikit-learn numbers classes by first appearance
        np.testing.assert_array_equal(stratified_folds(y, 5, 3), _sklearn_folds(y, 5, 3))


@pytest.mark.parametrize("n_bins", [1, 2, 3, 7, 10, 15, 49, 100])
def test_bin_index_is_searchsorted_on_the_edges(n_bins):
    rng = np.random.default_rng(n_bins)
    e = bin_edges(n_bins)
    k = np.arange(n_bins + 1)
    p = np.concatenate([e, np.nextafter(e, -1.0), np.nextafter(e, 2.0), k * (1.0 / n_bins),
                        rng.random(5000), [0.0, 1.0]])
    p = p[(p >= 0) & (p <= 1)]
    ref = np.minimum(np.searchsorted(e, p, side="right") - 1, n_bins - 1)
    np.testing.assert_array_equal(bin_index(p, n_bins), ref)


# ------------------------------------------------------------------------- Platt


#: The engine's threshold in these tests (the product's is 2**21 rows, where the engine's
#: one-off compilation has paid for itself); the code path is the same.
FAST_ROWS = 1 << 16
N_FAST = FAST_ROWS + 4_321


@pytest.fixture(autouse=True)
def _fast_threshold(monkeypatch):
    monkeypatch.setattr(platt, "FAST_MIN_ROWS", FAST_ROWS)
    # the moment engine (tested below) takes long columns first; the tests before it are
    # the JAX engine's and the matrix path's
    monkeypatch.setattr(platt, "MOMENT_MIN_ROWS", 1 << 62, raising=False)


def _columns(n, seed=0):
    rng = np.random.default_rng(seed)
    y = rng.random(n) < 0.62
    cols = np.column_stack([
        rng.standard_normal(n) - 0.7 * y,                         # plain
        (rng.standard_normal(n) - 0.3 * y) * 30.0 + 1e3,          # scale and offset
        np.exp(2.0 * rng.standard_normal(n) - 0.5 * y),           # heavy right tail
        np.round(rng.random(n) * 3) / 3 - 0.2 * y,                # few values: ties
        np.where(rng.random(n) < 0.999, 0.5, 1.5 + y),            # nearly constant
    ])
    return y, cols


def _matrix_path(monkeypatch, fn, *args, **kwargs):
    monkeypatch.setattr(platt, "FAST_MIN_ROWS", 1 << 62)
    try:
        return fn(*args, **kwargs)
    finally:
        monkeypatch.setattr(platt, "FAST_MIN_ROWS", FAST_ROWS)


@pytest.mark.parametrize("C", [1.0, None, 0.01])
def test_fast_platt_equals_the_matrix_path(monkeypatch, C):
    y, x = _columns(N_FAST, seed=1)
    assert x.shape[0] >= platt.FAST_MIN_ROWS
    calls = []
    real = platt.platt_columns  # the engine of fastuq.metrics.platt_fast, as platt calls it
    monkeypatch.setattr(platt, "platt_columns",
                        lambda *a, **k: calls.append(1) or real(*a, **k))
    fast = platt.oof_platt(y, x, C=C)
    assert calls  # the engine ran
    ref = _matrix_path(monkeypatch, platt.oof_platt, y, x, C=C)
    np.testing.assert_allclose(fast, ref, rtol=0, atol=1e-9)
    brier, ece = platt.oof_briers(y, x, C=C)
    d = ref - y[:, None]
    np.testing.assert_allclose(brier, (d * d).mean(axis=0), rtol=0, atol=1e-10)
    np.testing.assert_allclose(ece, ece_matrix(y, ref, 15), rtol=0, atol=1e-10)


def test_fast_platt_matches_sklearn_pipeline():
    y, x = _columns(N_FAST, seed=2)
    col = x[:, 2]  # the heavy-tailed one
    skf = StratifiedKFold(n_splits=5, shuffle=True, random_state=0)
    ref = np.empty(len(y))
    for train, test in skf.split(col[:, None], y):
        model = make_pipeline(StandardScaler(),
                              LogisticRegression(C=1.0, tol=1e-10, max_iter=10_000))
        model.fit(col[train, None], y[train])
        ref[test] = model.predict_proba(col[test, None])[:, 1]
    np.testing.assert_allclose(platt.oof_platt(y, col[:, None])[:, 0], ref, rtol=0, atol=1e-6)


def test_fast_platt_float32_scores(monkeypatch):
    y, x = _columns(N_FAST, seed=3)
    x32 = x[:, :2].astype(np.float32)
    ref = _matrix_path(monkeypatch, platt.oof_platt, y, x32)
    np.testing.assert_allclose(platt.oof_platt(y, x32), ref, rtol=0, atol=1e-9)


# ------------------------------------------------------------------ Platt from moments


def _moment_engine(monkeypatch):
    """Route columns of ``N_FAST`` rows to the moment engine; returns the list in which each
    column's outcome is recorded (True: the series' bound failed and it was fitted
    exactly)."""
    import fastuq.metrics.platt_moments as pm

    monkeypatch.setattr(platt, "MOMENT_MIN_ROWS", FAST_ROWS)
    fell_back = []
    real = pm._one_column

    def recorded(*args, **kwargs):
        result = real(*args, **kwargs)
        fell_back.append(result is None)
        return result

    monkeypatch.setattr(pm, "_one_column", recorded)
    return fell_back


@pytest.mark.parametrize("C", [1.0, None, 0.01])
def test_moment_platt_equals_the_matrix_path(monkeypatch, C):
    y, x = _columns(N_FAST, seed=1)
    fell_back = _moment_engine(monkeypatch)
    got = platt.oof_platt(y, x, C=C)
    assert len(fell_back) == x.shape[1]
    assert sum(fell_back) <= 1  # the series serves (nearly) every column at this size
    ref = _matrix_path(monkeypatch, platt.oof_platt, y, x, C=C)
    np.testing.assert_allclose(got, ref, rtol=0, atol=1e-9)
    fell_back.clear()
    brier, ece = platt.oof_briers(y, x, C=C)
    assert len(fell_back) == x.shape[1]
    d = ref - y[:, None]
    np.testing.assert_allclose(brier, (d * d).mean(axis=0), rtol=0, atol=1e-10)
    np.testing.assert_allclose(ece, ece_matrix(y, ref, 15), rtol=0, atol=1e-10)


def test_moment_platt_matches_sklearn_pipeline(monkeypatch):
    y, x = _columns(N_FAST, seed=2)
    fell_back = _moment_engine(monkeypatch)
    for j in (0, 2):  # plain, heavy-tailed (rows beyond the series' tail summed exactly)
        col = x[:, j]
        skf = StratifiedKFold(n_splits=5, shuffle=True, random_state=0)
        ref = np.empty(len(y))
        for train, test in skf.split(col[:, None], y):
            model = make_pipeline(StandardScaler(),
                                  LogisticRegression(C=1.0, tol=1e-10, max_iter=10_000))
            model.fit(col[train, None], y[train])
            ref[test] = model.predict_proba(col[test, None])[:, 1]
        np.testing.assert_allclose(platt.oof_platt(y, col[:, None])[:, 0], ref, rtol=0,
                                   atol=1e-6)
    assert fell_back == [False, False]


def test_moment_platt_falls_back_to_the_exact_engine(monkeypatch):
    """A column whose series bound is not met is fitted by the exact engine: with the
    accepted bound at 0 every column falls back, and the results are the exact ones."""
    import fastuq.metrics.platt_moments as pm

    y, x = _columns(N_FAST, seed=4)
    fell_back = _moment_engine(monkeypatch)
    monkeypatch.setattr(pm, "BOUND", 0.0)
    brier, ece = platt.oof_briers(y, x[:, :2])
    assert fell_back == [True, True]
    ref = _matrix_path(monkeypatch, platt.oof_platt, y, x[:, :2])
    d = ref - y[:, None]
    np.testing.assert_allclose(brier, (d * d).mean(axis=0), rtol=0, atol=1e-10)
    np.testing.assert_allclose(ece, ece_matrix(y, ref, 15), rtol=0, atol=1e-10)


def test_moment_series_derivatives_are_the_softplus_derivatives():
    """The softplus' derivatives as polynomials in sigma, worked by hand: s' = sigma,
    s'' = sigma - sigma**2, s''' = sigma - 3 sigma**2 + 2 sigma**3, s'''' = sigma -
    7 sigma**2 + 12 sigma**3 - 6 sigma**4; their suprema 1, 1/4, sqrt(3)/18, 1/8."""
    from fastuq.metrics.platt_moments import _derivatives

    coef, sup = _derivatives(3)
    np.testing.assert_array_equal(coef[:, :5], [[0, 1, 0, 0, 0], [0, 1, -1, 0, 0],
                                                [0, 1, -3, 2, 0], [0, 1, -7, 12, -6]])
    np.testing.assert_allclose(sup, np.array([1, 0.25, 3**0.5 / 18, 0.125]) * 1.01,
                               rtol=1e-6, atol=2e-12)


# ------------------------------------------------------------------------- groups


@pytest.mark.parametrize("n", [3_000, N_FAST])
def test_evaluate_groups_equals_evaluate_per_group(n):
    y, x = _columns(n, seed=4)
    rng = np.random.default_rng(4)
    groups = np.array(["dylan", "debate", "mad"])[rng.integers(0, 3, n)]
    pooled, per_group = evaluate_groups(y, x, groups)

    def same(got, ref, where):
        for key, values in ref.items():
            if key in ("brier_platt", "ece"):
                np.testing.assert_allclose(got[key], values, rtol=0, atol=1e-12,
                                           err_msg=f"{where} {key}")
            else:
                np.testing.assert_array_equal(got[key], values, err_msg=f"{where} {key}")

    same(pooled, evaluate(y, x), "pooled")
    assert list(per_group) == ["debate", "dylan", "mad"]
    for name, table in per_group.items():
        keep = groups == name
        same(table, evaluate(y[keep], x[keep]), name)


def test_evaluate_groups_arrow_polars_and_single_class_group():
    import polars as pl
    import pyarrow as pa

    rng = np.random.default_rng(6)
    n = 400
    y = rng.random(n) < 0.5
    x = rng.standard_normal((n, 2))
    g = np.where(np.arange(n) < 20, "solo", "many")
    y[:20] = True  # one class only in group "solo"
    with pytest.warns(UserWarning):
        a = evaluate_groups(y, x, pa.chunked_array([g[:150], g[150:]]))
    with pytest.warns(UserWarning):
        b = evaluate_groups(y, x, pl.Series(g))
    for name in ("solo", "many"):
        for key in a[1][name]:
            np.testing.assert_array_equal(a[1][name][key], b[1][name][key])
    assert np.isnan(a[1]["solo"]["auroc"]).all() and np.isnan(a[1]["solo"]["brier_platt"]).all()
    assert np.isfinite(a[1]["solo"]["auarc"]).all()
    with pytest.raises(ValueError, match="length mismatch"):
        evaluate_groups(y, x, g[:-1])


# ------------------------------------------------------------------------- ranking


@settings(max_examples=60, deadline=None)
@given(values=st.lists(st.integers(-6, 6), min_size=2, max_size=300),
       scale=st.sampled_from([1.0, 1e-300, 3.7, -0.0]))
def test_checked_argsort_is_the_stable_order(values, scale):
    x = np.array(values, np.float64) * scale / 7.0
    keys = order_keys(x)
    rows = np.arange(keys.shape[0])
    got_keys, (got_rows,) = _sort64_with(keys, rows)
    ref_keys, (ref_rows,) = radix_sort_with(keys, rows)
    np.testing.assert_array_equal(got_keys, ref_keys)
    np.testing.assert_array_equal(got_rows, ref_rows)
    np.testing.assert_array_equal(got_rows, np.argsort(x, kind="stable"))


def test_checked_argsort_falls_back_when_not_stable(monkeypatch):
    import polars as pl

    x = np.array([3.0, 1.0, 1.0, 2.0, 1.0])
    keys = order_keys(x)
    unstable = np.array([4, 2, 1, 3, 0])  # sorted, but the tie group out of row order

    def fake_arg_sort(self, *args, **kwargs):
        return pl.Series(unstable)

    monkeypatch.setattr(pl.Series, "arg_sort", fake_arg_sort)
    _, (rows,) = _sort64_with(keys, np.arange(5))
    np.testing.assert_array_equal(rows, [1, 2, 4, 3, 0])


def _stable_reference(x, labels, payload):
    order = np.argsort(x + 0.0, kind="stable")  # -0.0 ranks with 0.0
    xs = x[order] + 0.0
    return labels[order], xs[1:] == xs[:-1], payload[order]


@settings(max_examples=80, deadline=None)
@given(values=st.lists(st.integers(-6, 6), min_size=2, max_size=300),
       ulps=st.lists(st.integers(0, 3), min_size=300, max_size=300),
       scale=st.sampled_from([1.0, 1e-300, 3.7, -0.0, 1e300]),
       wide=st.booleans(), max_fix=st.sampled_from([0.0, 0.25, 1.0]))
def test_packed_64bit_sort_is_the_stable_order(values, ulps, scale, wide, max_fix):
    """``packed_sort64`` (one sort of packed top bits, runs of near-equal scores re-sorted)
    gives the labels, tie flags and payloads of ``np.argsort(kind="stable")``, or None when
    more than ``MAX_FIX`` of the rows would need re-sorting."""
    import fastuq.metrics.sort64 as sort64

    x = np.array(values, np.float64) * scale / 7.0
    x = x + np.array(ulps[: x.shape[0]]) * np.spacing(x)  # scores a few ulps apart
    if wide:  # a wide key range: only the top bits of each key fit beside the rows
        x[0] = -1e308
    rng = np.random.default_rng(len(values))
    labels = rng.random(x.shape[0]) < 0.5
    payload = rng.integers(0, 256, x.shape[0]).astype(np.uint8)
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(sort64, "MAX_FIX", max_fix)
        got = sort64.packed_sort64(order_keys(x), labels, [payload])
    if got is None:
        assert max_fix < 1.0
        return
    ys, same, (sorted_payload,), ends = got
    ref = _stable_reference(x, labels, payload)
    np.testing.assert_array_equal(ys, ref[0])
    np.testing.assert_array_equal(same, ref[1])
    np.testing.assert_array_equal(sorted_payload, ref[2])
    assert ends == (int(order_keys(x).min()), int(order_keys(x).max()))


def test_tie_groups_number_the_runs_by_hand():
    from fastuq.metrics.sort64 import tie_groups

    # sorted scores 1, 1, 2, 2, 2, 5: same = position ties with the next
    same = np.array([True, False, True, True, False])
    assert tie_groups(same).tolist() == [0, 0, 1, 1, 1, 2]
    assert tie_groups(np.zeros(0, bool)).tolist() == [0]  # one row, one group


def test_packed_64bit_sort_resorts_runs_of_near_equal_scores(monkeypatch):
    """Consecutive float64 values beside a far one share their keys' top bits: the packed
    sort re-sorts that run by the full keys (or gives up when that is too many rows)."""
    import fastuq.metrics.sort64 as sort64

    x = np.concatenate([[-1e308, 5.0], 1.0 + np.arange(40, 0, -1) * 2.0**-52, [1.0 + 2.0**-52]])
    labels = np.arange(x.shape[0]) % 3 == 0
    payload = np.arange(x.shape[0], dtype=np.uint8)
    monkeypatch.setattr(sort64, "MAX_FIX", 1.0)
    ys, same, (rows,), _ = sort64.packed_sort64(order_keys(x), labels, [payload])
    # by hand: -1e308 (row 0), 1 + 1 ulp (rows 41 and 42, tied, in row order), 1 + k ulps
    # for k = 2..40 (rows 40 down to 2), 5.0 (row 1)
    order = [0, 41, 42, *range(40, 1, -1), 1]
    np.testing.assert_array_equal(rows, order)
    np.testing.assert_array_equal(ys, np.array(order) % 3 == 0)
    np.testing.assert_array_equal(np.flatnonzero(same), [1])
    monkeypatch.setattr(sort64, "MAX_FIX", 0.5)  # 41 of 43 rows to re-sort
    assert sort64.packed_sort64(order_keys(x), labels, [payload]) is None


def test_sorted_labels_float64_names_non_finite_scores():
    """The float64 path's finite check (from the keys' extremes) still refuses NaN and
    infinities, and the ranking of finite float64 scores equals the stable order."""
    from fastuq.metrics.rank import sorted_labels

    x = np.array([0.1, 0.3, 0.2, 0.3, -0.7])
    labels = np.array([True, False, True, True, False])
    ys, same, _ = sorted_labels(labels, x, check_finite=True)
    np.testing.assert_array_equal(ys, [False, True, True, False, True])
    np.testing.assert_array_equal(same, [False, False, False, True])
    for bad in (np.inf, -np.inf, np.nan):
        with pytest.raises(ValueError, match="NaN or infinite"):
            sorted_labels(labels, np.array([0.1, bad, 0.2, 0.3, -0.7]), check_finite=True)


def test_evaluate_groups_hands_back_the_harmonic_numbers():
    """The rank stage's cached harmonic numbers (two float64 arrays per length ranked:
    240 MB at 1e7 rows and two halves) are dropped before the Platt fits run."""
    from fastuq.metrics.rank import harmonic_numbers

    rng = np.random.default_rng(5)
    n = 3000
    y = rng.random(n) < 0.6
    x = rng.standard_normal((n, 2))
    harmonic_numbers(n)
    assert harmonic_numbers.cache_info().currsize >= 1
    evaluate_groups(y, x, np.where(rng.random(n) < 0.5, "a", "b"))
    assert harmonic_numbers.cache_info().currsize == 0


def test_check_finite_column_major_names_column_and_row():
    """A column-major score matrix is checked a column at a time; the message still names
    the first bad column and its first bad row, as for a row-major one."""
    from fastuq.metrics.inputs import check_finite

    x = np.zeros((6, 3))
    x[4, 1] = np.nan
    x[2, 2] = np.inf
    for m in (x, np.asfortranarray(x)):
        with pytest.raises(ValueError, match=r"column 1 \('b'\) holds a NaN or infinite "
                                             r"value \(first at row 4: nan\)"):
            check_finite(m, ["a", "b", "c"])
    check_finite(np.asfortranarray(np.ones((5, 2))))
