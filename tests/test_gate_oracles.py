"""Independent oracles for the gate's threshold procedure (``fastuq.gate.calibrate_threshold``).

* MAPIE's ``BinaryClassificationController`` (Learn-then-Test, ``mapie.risk_control``): the
  share of correct items among those the gate passes is the precision among predicted
  positives, and with a binary loss MAPIE's p-value is the exact binomial tail
  ``binom.cdf(k, n, alpha)`` (its Hoeffding p-value is never smaller). Given the same
  candidate list (the thresholds of the levels fastuq tested, strictest first), its
  ``fixed_sequence``, ``bonferroni`` and ``FWERFixedSequenceTesting(n_starts=S)`` must find
  the same valid thresholds, and its best one (the most recall: the loosest) must be fastuq's
  threshold. MAPIE 1.6 counts failures as ``ceil(n * risk)`` in floating point, one too many
  for many (n, k) with its ``precision`` risk; the equality tests give it the failure rate as
  a risk whose value it multiplies back to the true count (:class:`_FailureRate`), and a
  separate test checks that with ``precision`` it is never looser than fastuq. MAPIE's FWER
  procedures are also run on p-values from ``scipy.stats.binomtest``. MAPIE predicts positive
  iff ``proba >= threshold``: the confidence direction (``higher_passes=True``); an
  uncertainty score is given to it negated.
* ``scipy.stats.binomtest``: each level's p-value (one-sided, ``alternative="less"``) and its
  Clopper-Pearson bound (the upper end of the two-sided exact interval at ``1 - 2 delta``).

The slow test checks the guarantee over repeated draws, as MAPIE's theoretical-validity tests
do: a confidence score c ~ U(0, 1) whose item fails with probability (1 - c)^2 / 2, so the
failure rate among the items with c >= t is (1 - t)^2 / 6 on the population.
"""

from __future__ import annotations

import math
import warnings

import numpy as np
import pytest
from mapie.risk_control import BinaryClassificationController, BinaryRisk, precision
from mapie.risk_control.fwer_control import FWERFixedSequenceTesting
from scipy.stats import binomtest

from fastuq.gate import calibrate_threshold


class _FailureRate(BinaryRisk):
    """The failure rate among passed items (1 - precision) as a MAPIE risk, its value the
    largest float r with ceil(n r) == k, so that MAPIE's count ceil(n r) is the true number
    of failures (with ``precision`` it is one too many for many (n, k))."""

    def __init__(self) -> None:
        super().__init__(risk_occurrence=lambda y, p: y.ravel() == 0,
                         risk_condition=lambda y, p: p.ravel() == 1, higher_is_better=False)

    def get_value_and_effective_sample_size(self, y_true, y_pred):
        passed = np.asarray(y_pred).ravel() == 1
        n = int(passed.sum())
        if n == 0:
            return 1, -1
        k = int((np.asarray(y_true).ravel()[passed] == 0).sum())
        r = k / n
        while math.ceil(n * r) > k:
            r = float(np.nextafter(r, 0.0))
        return r, n


def _mapie(conf, correct, params, alpha, delta, procedure, starts, risk="precision"):
    """MAPIE's controller calibrated on confidence scores ``conf`` over ``params`` (in the
    order to test): (valid thresholds as a set, best threshold or None, p-values). ``risk``:
    MAPIE's ``"precision"`` at target 1 - alpha, or ``"failure_rate"`` (:class:`_FailureRate`)
    at alpha; either way the best valid threshold is the one of most recall (the loosest)."""
    fwer = {"fixed_sequence": "fixed_sequence", "bonferroni": "bonferroni",
            "multi_start": FWERFixedSequenceTesting(n_starts=starts)}[procedure]
    target = (precision, 1 - alpha) if risk == "precision" else (_FailureRate(), alpha)
    ctl = BinaryClassificationController(
        predict_function=lambda x: np.column_stack([1 - x, x]), risk=target[0],
        target_level=target[1], confidence_level=1 - delta, best_predict_param_choice="recall",
        list_predict_params=np.asarray(params, float), fwer_method=fwer)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # "all predictions are 0 or 1" for scores off [0, 1]
        ctl.calibrate(np.asarray(conf, float), np.asarray(correct, int))
    return set(ctl.valid_predict_params.tolist()), ctl.best_predict_param, ctl.p_values[:, 0]


def _data(seed: int, n: int):
    """Confidence scores with ties and a failure rate that falls as confidence rises."""
    rng = np.random.default_rng(seed)
    conf = np.round(rng.random(n), 3)
    correct = rng.random(n) >= 0.02 + 0.35 * (1 - conf) ** 2
    return conf, correct


CASES = [("fixed_sequence", 1), ("bonferroni", 1), ("multi_start", 4), ("multi_start", 3)]


def _case(seed: int, procedure: str, starts: int):
    """fastuq's calibration of a seeded data set, and the candidates MAPIE is given: every
    level for Bonferroni (delta / m over all of them), the tested ones for the sequences
    (fastuq leaves out levels no outcome could reject), strictest first."""
    conf, correct = _data(seed, 400 + 150 * seed)
    alpha, delta, levels = [(0.1, 0.05, 50), (0.15, 0.1, 20), (0.08, 0.05, 30),
                            (0.12, 0.2, 50), (0.1, 0.1, 40)][seed]
    g = calibrate_threshold(conf, correct, alpha, delta, higher_passes=True,
                            procedure=procedure, levels=levels, starts=starts)
    t = g.table
    keep = [True] * len(t["level"]) if procedure == "bonferroni" else t["tested"]
    rows = [i for i, k in enumerate(keep) if k]
    # MAPIE orders a fixed sequence by the empirical risk over the list: it must rise from
    # the strictest (first) candidate to the loosest, or MAPIE would test the other way
    rate = [t["failures"][i] / t["passed"][i] for i in rows]
    assert len(rows) > starts and rate[-1] > rate[0]
    valid = {t["threshold"][i] for i in rows if t["rejected"][i]}
    return conf, correct, alpha, delta, g, rows, valid


@pytest.mark.parametrize("procedure,starts", CASES)
@pytest.mark.parametrize("seed", range(5))
def test_mapie_controller_with_exact_counts_reaches_the_same_decisions(seed, procedure, starts):
    conf, correct, alpha, delta, g, rows, valid = _case(seed, procedure, starts)
    t = g.table
    params = [t["threshold"][i] for i in rows]
    got_valid, best, p_mapie = _mapie(conf, correct, params, alpha, delta, procedure, starts,
                                      risk="failure_rate")
    np.testing.assert_allclose(p_mapie, [t["p_value"][i] for i in rows], rtol=1e-9, atol=0)
    assert got_valid == valid
    assert best == (g.threshold if g.passes_any else None)


@pytest.mark.parametrize("procedure,starts", CASES)
@pytest.mark.parametrize("seed", range(5))
def test_mapie_fwer_procedures_on_binomtest_p_values_reject_the_same_levels(seed, procedure,
                                                                            starts):
    from mapie.risk_control.fwer_control import control_fwer

    conf, correct, alpha, delta, g, rows, valid = _case(seed, procedure, starts)
    t = g.table
    p = [binomtest(t["failures"][i], t["passed"][i], alpha, alternative="less").pvalue
         for i in rows]
    fwer = FWERFixedSequenceTesting(n_starts=starts) if procedure == "multi_start" else procedure
    rejected = control_fwer(np.array(p), delta, fwer_method=fwer)
    assert {t["threshold"][rows[j]] for j in rejected} == valid
    assert g.passes_any == bool(valid)


@pytest.mark.parametrize("procedure,starts", CASES)
@pytest.mark.parametrize("seed", range(5))
def test_mapie_precision_controller_is_never_looser(seed, procedure, starts):
    """MAPIE 1.6 with its ``precision`` risk counts a level's failures as
    ceil(n * (1 - precision)) in floating point, one too many for many (n, k) (n = 145,
    k = 1 gives 2): its p-value, the smaller of the Hoeffding bound at the true rate and the
    binomial tail at its count, lies between the tails at k and k + 1, never below fastuq's,
    so it finds a subset of fastuq's valid levels (the same set in most of these cases)."""
    conf, correct, alpha, delta, g, rows, valid = _case(seed, procedure, starts)
    t = g.table
    params = [t["threshold"][i] for i in rows]
    got_valid, _, p_mapie = _mapie(conf, correct, params, alpha, delta, procedure, starts)
    for j, i in enumerate(rows):
        n, k = t["passed"][i], t["failures"][i]
        low = binomtest(k, n, alpha, alternative="less").pvalue
        high = binomtest(min(k + 1, n), n, alpha, alternative="less").pvalue
        assert low * (1 - 1e-9) <= p_mapie[j] <= high * (1 + 1e-9)
    assert got_valid <= valid


def test_mapie_on_an_uncertainty_score_negated():
    conf, correct = _data(9, 1500)
    u = 1.0 - conf  # an uncertainty: pass iff u <= threshold
    g = calibrate_threshold(u, correct, 0.1, 0.05)  # the default procedure
    assert g.passes_any and g.procedure == "multi_start"
    params = [-thr for thr, k in zip(g.table["threshold"], g.table["tested"], strict=True) if k]
    valid, best, _ = _mapie(-u, correct, params, 0.1, 0.05, g.procedure, g.starts,
                            risk="failure_rate")
    assert best == -g.threshold
    assert valid == {-thr for thr, r in zip(g.table["threshold"], g.table["rejected"],
                                            strict=True) if r}


@pytest.mark.parametrize("seed", range(3))
def test_binomtest_gives_every_p_value_and_bound(seed):
    conf, correct = _data(20 + seed, 300)
    g = calibrate_threshold(conf, correct, 0.1, 0.05, higher_passes=True, levels=12,
                            procedure=["multi_start", "fixed_sequence", "bonferroni"][seed])
    t = g.table
    for i in range(len(t["level"])):
        n, k, d = t["passed"][i], t["failures"][i], t["level_delta"][i]
        test = binomtest(k, n, 0.1, alternative="less")
        assert t["p_value"][i] == pytest.approx(test.pvalue, rel=1e-9)
        high = binomtest(k, n).proportion_ci(confidence_level=1 - 2 * d, method="exact").high
        assert t["bound"][i] == pytest.approx(high, abs=1e-9)
        assert t["rejected"][i] <= (t["tested"][i] and test.pvalue <= d)


@pytest.mark.slow
@pytest.mark.parametrize("fail", ["falling", "flat 11%"])
def test_guarantee_over_repeated_draws(fail):
    """2,000 calibration draws of 1,000 items per procedure: the share of draws whose
    threshold has a population failure rate above alpha is at most delta plus 3 binomial
    standard errors; MAPIE's fixed sequence on the same draws picks the same thresholds (first
    300 draws)."""
    alpha, delta, n, draws = 0.1, 0.05, 1000, 2000
    slack = 3 * math.sqrt(delta * (1 - delta) / draws)
    rng = np.random.default_rng(2026)
    conf = rng.random((draws, n))
    p_fail = 0.5 * (1 - conf) ** 2 if fail == "falling" else np.full_like(conf, 0.11)
    correct = rng.random((draws, n)) >= p_fail

    def rate(t):  # population failure rate among the items with c >= t
        return (1 - t) ** 2 / 6 if fail == "falling" else 0.11

    for procedure in ("multi_start", "fixed_sequence", "bonferroni"):
        bad = passed = 0
        for d in range(draws):
            g = calibrate_threshold(conf[d], correct[d], alpha, delta, higher_passes=True,
                                    procedure=procedure)
            if g.passes_any:
                passed += 1
                bad += rate(max(g.threshold, 0.0)) > alpha
            if procedure == "fixed_sequence" and d < 300:
                t = g.table
                params = [thr for thr, k in zip(t["threshold"], t["tested"], strict=True)
                          if k]
                if len(params) > 1:
                    _, best, _ = _mapie(conf[d], correct[d], params, alpha, delta,
                                        procedure, 1, risk="failure_rate")
                    assert best == (g.threshold if g.passes_any else None)
        assert bad / draws <= delta + slack, (procedure, bad)
        if fail == "falling":
            assert passed / draws > 0.95, (procedure, passed)  # not vacuous
