"""The per-trajectory SAUCE API (fastuq.engine.sauce): worked examples and every error case."""

import math
from fractions import Fraction

import pytest

import fastuq


def test_worked_example_debate_seed_number():
    result = fastuq.sauce([2 / 3, 1.0, 1.0], [0.4, 0.2, 0.1], protocol="debate")
    assert round(result["score"], 6) == -0.625135


def _hand_filter(obs, noise, lam, q, s2, mu):
    """The update of papers/sauce.md written out independently, round by round, in exact
    rational arithmetic (so the textbook ``(1 - K) P`` is exact here), rounded at the end."""
    F = Fraction
    lam, q, s2, mu = F(lam), F(q), F(s2), F(mu)
    mus, rounds = [], []
    for m, h in zip(obs, noise, strict=True):
        r = max(F(h), F(1e-8))
        mp = lam * mu
        p = lam**2 * s2 + q
        s = p + r + F(1e-8)
        k = p / s
        mu = mp + k * (F(m) - mp)
        s2 = max((1 - k) * p, F(1e-15))
        mus.append(float(mu))
        rounds.append(tuple(float(x) for x in (mu, s2, k, s, F(m) - mp)))
    return mus, rounds


def test_hand_worked_two_round_example_dylan():
    # dylan preset: lam .70, q .001, v0 .25, mu0 0.  Round 0: M=1, H=.5; round 1: M=.5, H=0.
    # Round 0: mu_pred = 0, P = .49*.25 + .001 = .1235, S = .1235 + .5 + 1e-8 = .62350001,
    #   K = .1235/.62350001, mu0 = K*1, s2 = (1-K)*.1235.
    k0 = 0.1235 / 0.62350001
    mu_a = k0
    s2_a = (1 - k0) * 0.1235
    # Round 1: H = 0 is floored to 1e-8. mu_pred = .7 mu_a, P = .49 s2_a + .001,
    #   S = P + 2e-8, K = P/S, mu = mu_pred + K (0.5 - mu_pred).
    mp = 0.7 * mu_a
    p = 0.49 * s2_a + 0.001
    k1 = p / (p + 2e-8)
    mu_b = mp + k1 * (0.5 - mp)
    expected = -(mu_a + mu_b) / 2
    result = fastuq.sauce([1.0, 0.5], [0.5, 0.0], protocol="dylan")
    assert result["score"] == pytest.approx(expected, abs=1e-15)
    trace = result["trace"]
    assert trace["rounds"][0]["K_t"] == pytest.approx(k0, abs=1e-15)
    assert trace["rounds"][1]["S_t"] == pytest.approx(p + 2e-8, abs=1e-15)
    assert trace["final_mu"] == pytest.approx(mu_b, abs=1e-15)
    assert trace["avg_mu"] == pytest.approx((mu_a + mu_b) / 2, abs=1e-15)


def test_trace_fields_match_independent_filter():
    obs, noise = [0.25, 0.5, 1.0, 0.75], [1.2, 0.0, 0.3, 2.0]
    result = fastuq.sauce(obs, noise, "debate", q=0.05, mu_0=0.1)
    _, rounds = _hand_filter(obs, noise, 0.95, 0.05, 0.25, 0.1)
    for got, (mu, s2, k, s, nu) in zip(result["trace"]["rounds"], rounds, strict=True):
        assert (got["mu"], got["sigma2"], got["K_t"], got["S_t"], got["nu_t"]) == pytest.approx(
            (mu, s2, k, s, nu), abs=1e-15
        )
    assert result["trace"]["q"] == 0.05 and result["trace"]["lam"] == 0.95


def test_sauce_score_equals_sauce_and_presets():
    assert fastuq.sauce_score([0.5], [0.2], "dylan") == fastuq.sauce([0.5], [0.2], "dylan")["score"]
    assert fastuq.PRESETS["debate"] == {"lam": 0.95, "q": 0.10, "sigma2_0": 0.25, "mu_0": 0.0}
    assert fastuq.PRESETS["dylan"] == {"lam": 0.70, "q": 0.001, "sigma2_0": 0.25, "mu_0": 0.0}


def test_lambda_kalman_forward_uses_R_as_given():
    out = fastuq.lambda_kalman_forward([1.0], [0.0], lam=1.0, q=0.0, sigma2_0=1.0, mu_0=0.0)
    # K = 1 / (1 + 0 + 1e-8); variance (1 - K) * 1 = 1e-8 / (1 + 1e-8), above the floor.
    # (Computed as 1 - K in floats this cancels: 1 - 1/(1 + 1e-8) is off by 7e-17, 7e-9
    # relative; the filter must not lose those digits.)
    k = 1 / (1 + 1e-8)
    assert out["final_mu"] == pytest.approx(k, abs=1e-15)
    assert out["final_sigma2"] == pytest.approx(1e-8 / (1 + 1e-8), rel=1e-15)


def test_variance_floor_applies():
    out = fastuq.lambda_kalman_forward([1.0], [0.0], lam=0.0, q=0.0, sigma2_0=1.0)
    # P = 0: K = 0, variance 0 -> floored at 1e-15.
    assert out["final_sigma2"] == 1e-15


@pytest.mark.parametrize(
    ("agreement", "entropy", "match"),
    [
        ([], [], "at least one round"),
        ([0.5, 1.0], [0.1], "same length"),
        ([0.5, None], [0.1, 0.2], r"agreement\[1\]"),
        ([math.nan], [0.1], r"agreement\[0\]"),
        ([0.5], [math.inf], r"token_entropy\[0\]"),
        ([1.5], [0.1], r"agreement\[0\] must be in \[0, 1\]"),
        ([-0.1], [0.1], r"agreement\[0\] must be in \[0, 1\]"),
        ([0.5], [-0.2], r"token_entropy\[0\] must be >= 0"),
        ([0.5], ["x"], r"token_entropy\[0\]"),
    ],
)
def test_bad_inputs_raise_value_error(agreement, entropy, match):
    with pytest.raises(ValueError, match=match):
        fastuq.sauce(agreement, entropy)


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({"protocol": "chat"}, "protocol"),
        ({"lam": 1.5}, "lam"),
        ({"q": -1.0}, "q"),
        ({"sigma2_0": 0.0}, "sigma2_0"),
        ({"mu_0": math.nan}, "mu_0"),
    ],
)
def test_bad_parameters_raise(kwargs, match):
    with pytest.raises(ValueError, match=match):
        fastuq.sauce([0.5], [0.1], **kwargs)


def test_measured_zero_entropy_is_valid():
    assert math.isfinite(fastuq.sauce_score([1.0, 1.0], [0.0, 0.0]))
