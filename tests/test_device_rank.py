"""fastuq.metrics.device_rank (ranking on the device, for sweeps on a GPU): the same AUROC as
the host engine bit for bit (and scikit-learn's to 1e-12), AUARC and PRR to float64 rounding,
on random rows with ties, signed zeros and single-class labels; and sweep(rank="device")
against sweep(rank="host"). Runs on whatever device JAX has (a CPU here)."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from sklearn.metrics import roc_auc_score

from fastuq.metrics.device_rank import rank_metrics_device
from fastuq.metrics.rank import rank_metrics_rows

METRICS = ("auroc", "auarc", "prr")


@settings(max_examples=40, deadline=None)
@given(seed=st.integers(0, 2**32 - 1), n=st.integers(1, 300), g=st.integers(1, 4),
       ties=st.booleans(), p_true=st.sampled_from([0.0, 0.3, 0.9, 1.0]))
def test_device_ranking_equals_the_host_engine(seed, n, g, ties, p_true):
    rng = np.random.default_rng(seed)
    y = rng.random(n) < p_true
    x = rng.normal(size=(g, n)).astype(np.float32)
    if ties:
        x = np.round(x * 2).astype(np.float32) / 2
        x[:, : n // 3] = np.where(rng.random((g, n // 3)) < 0.5, -0.0, 0.0)
    got, finite = rank_metrics_device(y, x, METRICS)
    want, _ = rank_metrics_rows(y, x, METRICS)
    assert finite.all()
    np.testing.assert_array_equal(got["auroc"], want["auroc"])  # bit for bit, NaN included
    for m in ("auarc", "prr"):
        np.testing.assert_allclose(got[m], want[m], rtol=1e-12, atol=1e-13, equal_nan=True)
    if 0 < y.sum() < n:
        for r in range(g):
            assert got["auroc"][r] == pytest.approx(roc_auc_score(y, -x[r]), abs=1e-12)


def test_device_ranking_flags_non_finite_rows_and_checks_its_input():
    x = np.zeros((2, 5), np.float32)
    x[1, 3] = np.nan
    _, finite = rank_metrics_device(np.array([1, 0, 1, 0, 1], bool), x)
    assert finite.tolist() == [True, False]
    with pytest.raises(ValueError, match="float32"):
        rank_metrics_device(np.ones(5, bool), x.astype(np.float64))
    with pytest.raises(ValueError, match="unknown"):
        rank_metrics_device(np.ones(5, bool), x, ("auc",))


def test_sweep_ranked_on_the_device_equals_the_host():
    from fastuq import synth
    from fastuq.sweeps import sweep

    table = synth.corpus(3000, protocol="mixed", seed=3)
    grid = {"lam": [0.5, 0.8, 1.0], "q": [0.01, 0.1]}
    host = sweep(table, grid, metrics=METRICS, rank="host")
    dev = sweep(table, grid, metrics=METRICS, rank="device")
    np.testing.assert_array_equal(dev["auroc"].to_numpy(), host["auroc"].to_numpy())
    for m in ("auarc", "prr"):
        np.testing.assert_allclose(dev[m].to_numpy(), host[m].to_numpy(), rtol=1e-12)
    with pytest.raises(ValueError, match="float32"):
        sweep(table, grid, rank="device", dtype="float64")
    with pytest.raises(ValueError, match="rank"):
        sweep(table, grid, rank="gpu")
