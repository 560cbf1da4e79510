"""kernels.sauce: the jitted JAX scan against its NumPy twin and the scalar reference."""

import jax
import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

import fastuq
from fastuq.kernels.sauce import (
    SUMMARY_FIELDS,
    TRACE_FIELDS,
    SauceParams,
    sauce_scan,
    sauce_scan_numpy,
)

ALL = SUMMARY_FIELDS + TRACE_FIELDS
TOL = {np.float64: 1e-12, np.float32: 1e-5}


def _random_batch(rng, n, t_max, dtype, garbage=np.nan):
    lengths = rng.integers(1, t_max + 1, n)
    mask = np.arange(t_max)[:, None] < lengths[None, :]
    a = rng.integers(0, 4, (t_max, n)) / 3.0
    h = rng.exponential(0.5, (t_max, n)) * (rng.random((t_max, n)) > 0.1)  # some zeros
    a[~mask] = garbage
    h[~mask] = garbage
    return a.astype(dtype), h.astype(dtype), mask


def _params(rng, n, per_trajectory, dtype):
    if per_trajectory:
        return SauceParams(
            rng.uniform(0, 1, n).astype(dtype), rng.uniform(0, 0.5, n).astype(dtype),
            rng.uniform(0.01, 1, n).astype(dtype), rng.uniform(-0.5, 0.5, n).astype(dtype),
        )
    return SauceParams(0.95, 0.1, 0.25, 0.0)


def _run_jax(a, h, m, p, fields):
    with jax.enable_x64(a.dtype == np.float64):
        out = sauce_scan(a, h, m, p, fields=fields)
        return {k: np.asarray(v) for k, v in out.items()}


@given(
    seed=st.integers(0, 2**32 - 1),
    n=st.integers(1, 40),
    t_max=st.integers(1, 9),
    dtype=st.sampled_from([np.float64, np.float32]),
    per_trajectory=st.booleans(),
)
def test_jax_matches_numpy_twin_on_random_ragged_batches(seed, n, t_max, dtype, per_trajectory):
    rng = np.random.default_rng(seed)
    a, h, m = _random_batch(rng, n, t_max, dtype)
    p = _params(rng, n, per_trajectory, dtype)
    got = _run_jax(a, h, m, p, ALL)
    ref = sauce_scan_numpy(a, h, m, p, fields=ALL)
    for name in ALL:
        assert got[name].dtype == dtype
        np.testing.assert_allclose(got[name], ref[name], rtol=TOL[dtype], atol=TOL[dtype],
                                   err_msg=name)


@given(seed=st.integers(0, 2**32 - 1), n=st.integers(1, 12), t_max=st.integers(1, 6))
def test_twin_matches_scalar_reference_float64(seed, n, t_max):
    rng = np.random.default_rng(seed)
    a, h, m = _random_batch(rng, n, t_max, np.float64)
    lam, q, s2, mu = rng.uniform(0, 1), rng.uniform(0, 1), rng.uniform(0.01, 1), rng.normal()
    ref = sauce_scan_numpy(a, h, m, SauceParams(lam, q, s2, mu), fields=ALL)
    for k in range(n):
        rounds = m[:, k]
        one = fastuq.sauce(list(a[rounds, k]), list(h[rounds, k]), lam=lam, q=q, sigma2_0=s2,
                           mu_0=mu)
        assert ref["score"][k] == pytest.approx(one["score"], abs=1e-12)
        assert ref["final_sigma2"][k] == pytest.approx(one["trace"]["final_sigma2"], abs=1e-12)
        assert ref["avg_sigma2"][k] == pytest.approx(one["trace"]["avg_sigma2"], abs=1e-12)
        got_k = ref["K_t"][rounds, k]
        np.testing.assert_allclose(got_k, [r["K_t"] for r in one["trace"]["rounds"]], atol=1e-12)


def test_masked_rounds_do_not_update_or_enter_means_even_in_the_middle():
    # A non-prefix mask: round 1 is masked for trajectory 0 and must be skipped entirely.
    a = np.array([[0.5, 0.5], [0.0, 0.0], [1.0, 1.0]])
    h = np.array([[0.2, 0.2], [9.0, 9.0], [0.1, 0.1]])
    m = np.array([[True, True], [False, True], [True, True]])
    out = _run_jax(a, h, m, SauceParams(0.95, 0.1, 0.25, 0.0), ALL)
    expected = fastuq.sauce([0.5, 1.0], [0.2, 0.1])["score"]
    assert out["score"][0] == pytest.approx(expected, abs=1e-12)
    assert np.isnan(out["mu"][1, 0]) and not np.isnan(out["mu"][1, 1])
    assert out["n_rounds"].tolist() == [2.0, 3.0]


def test_no_rounds_gives_nan_score():
    a = np.zeros((2, 1))
    out = _run_jax(a, a, np.zeros((2, 1), bool), SauceParams(0.95, 0.1, 0.25, 0.0), ("score",))
    assert np.isnan(out["score"][0])


@pytest.mark.parametrize("unroll", [1, 2, True])
def test_unroll_does_not_change_numbers(unroll):
    rng = np.random.default_rng(3)
    a, h, m = _random_batch(rng, 50, 7, np.float64)
    p = SauceParams(0.7, 0.001, 0.25, 0.0)
    with jax.enable_x64(True):
        base = np.asarray(sauce_scan(a, h, m, p)["score"])
        other = np.asarray(sauce_scan(a, h, m, p, unroll=unroll)["score"])
    np.testing.assert_allclose(other, base, rtol=1e-13, atol=1e-13)


def test_unknown_field_rejected():
    a = np.zeros((1, 1), np.float32)
    with pytest.raises(ValueError, match="unknown SAUCE output"):
        sauce_scan_numpy(a, a, np.ones((1, 1), bool), SauceParams(1.0, 0.0, 1.0, 0.0),
                         fields=("nope",))


def test_float32_matches_float64_reference_to_1e5():
    rng = np.random.default_rng(11)
    a, h, m = _random_batch(rng, 500, 15, np.float64)
    p = SauceParams(0.95, 0.1, 0.25, 0.0)
    ref = sauce_scan_numpy(a, h, m, p)["score"]
    got = _run_jax(a.astype(np.float32), h.astype(np.float32), m, p, ("score",))["score"]
    np.testing.assert_allclose(got, ref, atol=1e-5)


@pytest.mark.parametrize("per_trajectory", [False, True])
def test_cache_blocked_path_equals_single_pass(per_trajectory):
    rng = np.random.default_rng(5)
    a, h, m = _random_batch(rng, 4096, 9, np.float64)
    p = _params(rng, 4096, per_trajectory, np.float64)
    with jax.enable_x64(True):
        whole = sauce_scan(a, h, m, p, fields=ALL, block=0)
        blocked = sauce_scan(a, h, m, p, fields=ALL, block=1024)
        for name in ALL:
            np.testing.assert_array_equal(np.asarray(blocked[name]), np.asarray(whole[name]),
                                          err_msg=name)
    with pytest.raises(ValueError, match="does not divide"):
        sauce_scan(a[:, :1000], h[:, :1000], m[:, :1000], SauceParams(0.9, 0.1, 0.2, 0.0),
                   block=512)
