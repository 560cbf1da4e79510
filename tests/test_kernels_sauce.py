"""kernels.sauce: the jitted JAX scan against its NumPy twin and the scalar reference."""

import jax
import numpy as np
import pytest
from _references import sauce_exact
from hypothesis import given, settings
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


def _random_batch(rng, n, t_max, dtype, garbage=np.nan, t_pad=None):
    """``n`` trajectories of 1..t_max rounds, on a round axis of ``t_pad`` (default t_max)."""
    t_pad = t_max if t_pad is None else t_pad
    lengths = rng.integers(1, t_max + 1, n)
    mask = np.arange(t_pad)[:, None] < lengths[None, :]
    a = rng.integers(0, 4, (t_pad, n)) / 3.0
    h = rng.exponential(0.5, (t_pad, n)) * (rng.random((t_pad, n)) > 0.1)  # some zeros
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
    # Drawn shapes padded to buckets, so that the scan compiles once per bucket (4 of them)
    # rather than once per drawn shape (360): the round axis to 9 (masked padding rounds),
    # the trajectories to 40 (more drawn trajectories); 1 stays 1 on both.
    rng = np.random.default_rng(seed)
    n = 1 if n == 1 else 40
    a, h, m = _random_batch(rng, n, t_max, dtype, t_pad=1 if t_max == 1 else 9)
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


# ---------------------------------------------------------------------------------------
# Precision over the whole parameter box of the sweeps, against an exact reference

#: float32 scores are within this of the exact value (absolute, for |mu_0| <= 1: scores and
#: posterior means then lie in [-1, 1]); measured worst case 4.2e-7 over 4e5 random
#: trajectories of the box (T up to 64), so this bound has a 5x margin.
F32_SCORE_BOUND = 2e-6

_box = st.fixed_dictionaries({
    "lam": st.one_of(st.just(1.0), st.floats(1e-3, 1.0)),
    "q": st.one_of(st.just(0.0), st.floats(0.0, 10.0), st.floats(1e-9, 1e-5)),
    "sigma2_0": st.one_of(st.floats(1e-6, 10.0), st.just(0.25)),
    "mu_0": st.one_of(st.just(0.0), st.floats(-1.0, 1.0)),
})


@st.composite
def _trajectory(draw):
    t = draw(st.integers(1, 64))
    team = draw(st.integers(1, 8))
    agreement = [draw(st.integers(0, team)) / team for _ in range(t)]
    entropy = draw(st.lists(st.one_of(st.just(0.0), st.floats(0.0, 10.0),
                                      st.floats(0.0, 1e-6)), min_size=t, max_size=t))
    return agreement, entropy


@settings(max_examples=60, deadline=None)
@given(params=_box, trajectories=st.lists(_trajectory(), min_size=1, max_size=4))
def test_float32_and_float64_match_exact_reference_across_parameter_box(params, trajectories):
    # One padded shape for every example (a compile per shape would dominate the test);
    # the padding is masked, so it never enters a score.
    t_max, n = 64, 4
    a = np.full((t_max, n), np.nan)
    h = np.full((t_max, n), np.nan)
    m = np.zeros((t_max, n), bool)
    for k, (ag, en) in enumerate(trajectories):
        a[: len(ag), k], h[: len(en), k], m[: len(ag), k] = ag, en, True
    p = SauceParams(**params)
    exact = [sauce_exact(ag, en, **params) for ag, en in trajectories]
    want = np.array([e["score"] for e in exact] + [np.nan] * (n - len(trajectories)))
    got64 = _run_jax(a, h, m, p, ("score", "final_mu"))
    twin64 = sauce_scan_numpy(a, h, m, p, fields=("score",))
    np.testing.assert_allclose(got64["score"], want, rtol=0, atol=1e-12)
    np.testing.assert_allclose(twin64["score"], want, rtol=0, atol=1e-12)
    p32 = SauceParams(*(np.float32(v) for v in p))
    a32, h32 = a.astype(np.float32), h.astype(np.float32)
    # The exact filter on the float32-rounded inputs: only the arithmetic is under test.
    exact32 = [sauce_exact(a32[m[:, k], k], h32[m[:, k], k], *(float(v) for v in p32))
               for k in range(len(trajectories))]
    want32 = np.array([e["score"] for e in exact32] + [np.nan] * (n - len(trajectories)))
    got32 = _run_jax(a32, h32, m, p32, ("score",))["score"]
    twin32 = sauce_scan_numpy(a32, h32, m, p32, fields=("score",))["score"]
    np.testing.assert_allclose(got32, want32, rtol=0, atol=F32_SCORE_BOUND)
    np.testing.assert_allclose(twin32, want32, rtol=0, atol=F32_SCORE_BOUND)


def test_float32_q0_zero_entropy_does_not_cancel():
    # q = 0 and zero entropy: P >> R_t, so (1 - K_t) P cancels in float32 (sigma2 collapsed
    # to the 1e-15 floor and the filter froze: the score was off by 1.7e-2 at T = 3 and by
    # up to 0.67 over the box). Both precisions must follow the exact filter.
    for q in (0.0, 1e-6):
        agreement, entropy = [2 / 3, 1.0, 1.0, 1 / 3, 1.0], [0.0] * 5
        params = {"lam": 0.95, "q": q, "sigma2_0": 0.25, "mu_0": 0.0}
        want = sauce_exact(agreement, entropy, **params)["score"]
        a = np.array(agreement)[:, None]
        h = np.zeros_like(a)
        m = np.ones_like(a, bool)
        p32 = SauceParams(*(np.float32(v) for v in params.values()))
        got = _run_jax(a.astype(np.float32), h.astype(np.float32), m, p32, ("score",))
        assert abs(float(got["score"][0]) - want) < F32_SCORE_BOUND
        scalar = fastuq.sauce(agreement, entropy, **params)["score"]
        assert scalar == pytest.approx(want, abs=1e-15)
