"""The decision layers against plain-Python references written apart from them
(tests/_references.py, from DESIGN.md and papers/): BCCS's consensus states, UAAD's risk,
tier, stop and calls, the consistency gate's score, the gate's threshold procedure, and
budget-policy replay. Each reference is first checked on hand-worked cases, then the package
(fastuq.score, the registry's kernels, fastuq.gate, fastuq.replay) is compared with it on
seeded random corpora.

Tolerances: quantities that are exact rationals in the references (p_s, p_b, agreement,
accuracy, means of counts) are compared with the package's float64 values within 1e-12
absolute; risks (float sums) within 1e-12; Clopper-Pearson bounds within 1e-9 relative (the
reference bisects an exact binomial sum, the package uses scipy's beta quantile); integer
outcomes (states, tiers, stop rounds, calls, flips, counts) exactly. Scoring runs in float64
on every device (``dtype="float64"``), so the tolerances hold on a GPU as on a CPU.
"""

from __future__ import annotations

import math
from fractions import Fraction as F

import numpy as np
import pyarrow as pa
import pytest
from _references import (
    FULL_CONSENSUS,
    NO_CONSENSUS,
    PARTIAL_CONSENSUS,
    agreement_exact,
    bccs_round,
    bccs_trajectory_exact,
    binomial_upper_exact,
    consistency_exact,
    gate_bonferroni,
    gate_fixed_sequence,
    gate_multi_start,
    pair_disagreement_exact,
    pass_fraction_grid,
    replay_stop,
    replay_totals,
    replay_trajectory,
    round_answer,
    sauce_exact,
    strictest_first,
    uaad_exact,
    uaad_round_risks,
)

import fastuq
from fastuq.gate import calibrate_threshold, consistency_scores
from fastuq.replay import Policy, replay

TOL = 1e-12
STATE_CODE = {NO_CONSENSUS: 0, PARTIAL_CONSENSUS: 1, FULL_CONSENSUS: 2}


# ------------------------------------------------------------------------ random corpora


def random_rows(seed: int, n: int = 60, *, steps: bool = False, final: bool = True,
                active: bool = False) -> list[dict]:
    """Seeded debates: teams of 1-5 agents, 1-4 rounds, answers "1".."4" drifting towards a
    per-trajectory favourite (so consensus stops happen), null answers (silent or
    unparseable agents), beliefs in [0, 1] (some exactly 0), token entropy, reference "1" or
    "2"; optionally ``final_answer`` (sometimes not the last round's majority, sometimes
    null), ``active`` (an agent dropped from some round on, its answer kept) and step
    signals ``step_h/q/d`` (1-3 steps per speaking agent)."""
    rng = np.random.default_rng(seed)
    rows = []
    for i in range(n):
        team = int(rng.integers(1, 6))
        n_rounds = int(rng.integers(1, 5))
        fav = str(rng.integers(1, 5))
        answers, beliefs = [], []
        for t in range(n_rounds):
            p_fav = min(0.35 + 0.25 * t, 0.95)
            r_ans, r_bel = [], []
            for _ in range(team):
                u = rng.random()
                if u < 0.12:
                    r_ans.append(None)
                    r_bel.append(None)
                    continue
                r_ans.append(fav if rng.random() < p_fav else str(rng.integers(1, 5)))
                r_bel.append(0.0 if rng.random() < 0.05 else round(float(rng.random()), 3))
            answers.append(r_ans)
            beliefs.append(r_bel)
        row = {"trajectory_id": f"s{seed}-{i}", "protocol": "debate", "n_agents": team,
               "answers": answers, "belief": beliefs,
               "token_entropy": [round(float(rng.uniform(0.0, 2.2)), 4)
                                 for _ in range(n_rounds)],
               "reference": str(rng.integers(1, 3))}
        if final:
            u = rng.random()
            row["final_answer"] = (None if u < 0.1 else str(rng.integers(1, 5)) if u < 0.3
                                   else round_answer({"answers": answers}, n_rounds - 1))
        if active:
            drop = [int(rng.integers(1, n_rounds + 1)) if rng.random() < 0.4 else n_rounds
                    for _ in range(team)]
            row["active"] = [[t < drop[a] for a in range(team)] for t in range(n_rounds)]
        if steps:
            cols = {"step_h": [], "step_q": [], "step_d": []}
            for t in range(n_rounds):
                k = [int(rng.integers(1, 4)) for _ in range(team)]
                for c in cols:
                    cols[c].append([None if answers[t][a] is None else
                                    [round(float(rng.random()), 3) for _ in range(k[a])]
                                    for a in range(team)])
            # every executed round needs a step somewhere
            for t in range(n_rounds):
                if all(x is None for x in cols["step_h"][t]):
                    for c in cols:
                        cols[c][t][0] = [round(float(rng.random()), 3)]
            row.update(cols)
        rows.append(row)
    return rows


def table(rows: list[dict]) -> pa.Table:
    t = pa.Table.from_pylist(rows)
    return t.set_column(t.schema.get_field_index("n_agents"), "n_agents",
                        pa.array([r["n_agents"] for r in rows], pa.int32()))


def package_bccs_trace(rows: list[dict], backend: str = "jax",
                       **params) -> dict[str, np.ndarray]:
    """The registry's BCCS entry on ``rows``: its packed, checked inputs
    (:func:`fastuq.engine.runner.prepare_estimator`, float64) through the entry's kernel
    module with the per-round trace fields: the JAX kernel (under float64) or its NumPy
    twin."""
    from fastuq.engine.batch import Batch
    from fastuq.engine.registry import get_estimator
    from fastuq.engine.runner import prepare_estimator
    from fastuq.engine.runtime import x64_scope
    from fastuq.kernels.bccs import BccsParams, bccs_scan, bccs_scan_numpy

    est = get_estimator("bccs")
    inputs, _, values = prepare_estimator(est, Batch(table(rows), dtype=np.float64),
                                          params=params, protocol=None)
    p = BccsParams(*(np.asarray(values[k]) for k in ("theta_s", "theta_full",
                                                     "theta_partial")))
    fields = ("p_s", "p_b", "state")
    if backend == "numpy":
        return bccs_scan_numpy(*inputs, p, fields=fields)
    with x64_scope(np.float64):
        out = bccs_scan(*inputs, p, fields=fields)
        return {k: np.asarray(v) for k, v in out.items()}


# ------------------------------------------------------------------ BCCS: hand-worked


def test_bccs_reference_by_hand():
    # 3 agents, two say 7 (beliefs .9 and .6), one says 4 (.5): p_s = 2/3 (not above 2/3),
    # p_b = 1.5 / 2.0 = 3/4: partial (> 1/2), not full
    r = bccs_round(["7", "4", "7"], [0.9, 0.5, 0.6], 3)
    assert (r["p_s"], r["p_b"], r["state"], r["support"]) == (F(2, 3), F(3, 4),
                                                              PARTIAL_CONSENSUS, [0, 2])
    # a 4-agent team, three agree with beliefs .9 .9 .9 and one dissents at .1:
    # p_s = 3/4 > 2/3, p_b = 2.7 / 2.8 > .8: full
    r = bccs_round(["2", "2", "5", "2"], [0.9, 0.9, 0.1, 0.9], 4)
    assert r["p_s"] == F(3, 4) and r["state"] == FULL_CONSENSUS
    assert r["p_b"] == F(0.9) * 3 / (F(0.9) * 3 + F(0.1))
    # a tie 1 against 1 goes to the lowest slot's answer; null answers stay in the team
    r = bccs_round([None, "3", "8", None], [None, 0.2, 0.9, None], 4)
    assert r["support"] == [1] and r["p_s"] == F(1, 4)
    assert r["p_b"] == F(0.2) / (F(0.2) + F(0.9)) and r["state"] == NO_CONSENSUS
    # nobody answers; beliefs all 0
    assert bccs_round([None, None], [None, None], 2)["p_b"] == 0
    assert bccs_round(["1", "1"], [0.0, 0.0], 2)["state"] == NO_CONSENSUS
    # the settled score: 1 - p_s p_b of the last round; a lone answering agent of three with
    # belief .95 has p_b = 1 but p_s = 1/3, so its score is 2/3, not 0
    row = {"n_agents": 3, "answers": [["1", "1", "2"], ["6", None, None]],
           "belief": [[0.9, 0.9, 0.2], [0.95, None, None]]}
    out = bccs_trajectory_exact(row)
    assert out["score"] == F(2, 3) and out["dissent"] == 0 and out["first_full"] == -1
    # beliefs from answer_logprob: exp(0) = 1 each, three of three agree: full at round 0
    row = {"n_agents": 3, "answers": [["5", "5", "5"]], "answer_logprob": [[0.0, 0.0, 0.0]]}
    assert bccs_trajectory_exact(row)["first_full"] == 0


@pytest.mark.parametrize("backend", ["jax", "numpy"])
def test_bccs_states_p_s_and_p_b_match_the_reference_on_random_corpora(backend):
    rows = random_rows(11, 80) + random_rows(12, 40)
    got = package_bccs_trace(rows, backend)
    assert got["p_b"].dtype == np.float64
    for n, row in enumerate(rows):
        ref = bccs_trajectory_exact(row)
        for t, r in enumerate(ref["rounds"]):
            where = f"{row['trajectory_id']} round {t}"
            assert got["p_s"][t, n] == pytest.approx(float(r["p_s"]), abs=TOL), where
            assert got["p_b"][t, n] == pytest.approx(float(r["p_b"]), abs=TOL), where
            assert got["state"][t, n] == STATE_CODE[r["state"]], where


@pytest.mark.parametrize("thresholds", [
    {"theta_s": 0.5, "theta_full": 0.6, "theta_partial": 0.3},
    {"theta_s": 0.75, "theta_full": 0.9, "theta_partial": 0.7},
])
def test_bccs_first_full_through_fastuq_score_matches_the_reference(thresholds):
    rows = random_rows(21, 80)
    got = fastuq.score(table(rows), "bccs", dtype="float64", **thresholds)
    want = [bccs_trajectory_exact(r, **thresholds)["first_full"] for r in rows]
    np.testing.assert_array_equal(got["bccs_first_full"].to_numpy(), want)
    states = package_bccs_trace(rows, **thresholds)["state"]
    for n, row in enumerate(rows):
        ref = bccs_trajectory_exact(row, **thresholds)["rounds"]
        assert [int(states[t, n]) for t in range(len(ref))] == [
            STATE_CODE[r["state"]] for r in ref], row["trajectory_id"]


def test_bccs_score_is_one_minus_p_s_p_b_of_the_last_round():
    rows = random_rows(31, 60)
    got = fastuq.score(table(rows), "bccs", dtype="float64")["bccs"].to_numpy()
    want = [float(bccs_trajectory_exact(r)["score"]) for r in rows]
    np.testing.assert_allclose(got, want, rtol=0, atol=TOL)


def test_bccs_score_of_a_lone_answering_agent_by_hand():
    rows = [{"trajectory_id": "lone", "protocol": "debate", "n_agents": 3,
             "answers": [["6", None, None]], "belief": [[0.95, None, None]],
             "token_entropy": [0.1], "reference": "6"}]
    got = fastuq.score(table(rows), "bccs", dtype="float64")["bccs"].to_numpy()
    assert got[0] == pytest.approx(2 / 3, abs=TOL)


# ------------------------------------------------------------------ UAAD: hand-worked


def test_uaad_reference_by_hand_derived_signals():
    # 4 agents; round 0 answers 1 1 2 None: agreement 2/4, q = 1/2, d: pairs of the three
    # answers (1,1) same, (1,2) twice differ: 2/3; h = 0.8 / ln 5.
    # risk = .45 * .8/ln5 + .35 * .5 + .20 * 2/3
    row = {"n_agents": 4, "answers": [["1", "1", "2", None], ["1", "1", "1", "1"],
                                      ["1", "1", "1", "1"]],
           "token_entropy": [0.8, 0.1, 0.05]}
    assert pair_disagreement_exact(row["answers"][0]) == F(2, 3)
    risk0 = 0.45 * (0.8 / math.log(5)) + 0.35 * 0.5 + 0.20 * (2 / 3)
    out = uaad_exact(row)
    assert out["uaad"] == pytest.approx(risk0, abs=TOL)
    assert out["uaad_max_risk"] == pytest.approx(risk0, abs=TOL)  # later rounds: h only
    # risk0 = .160 + .175 + .133 = .468: medium (rounds 1, agents 3); round 1: C = 1 >= .8
    # but moved 1/2 > .05: no stop; the cap is 1 -> stop 1, Q = 4 + 3 * 1 + 1 = 8
    assert (out["uaad_tier"], out["uaad_stop"], out["uaad_calls"]) == (1, 1, 8)
    # high tier (rounds 3, agents 6) with a lower risk_high: the stop is round 2 (C = 1,
    # moved 0), Q = 4 + 6 * 2 + 1 = 17
    out = uaad_exact(row, risk_high=0.4)
    assert (out["uaad_tier"], out["uaad_stop"], out["uaad_calls"]) == (2, 2, 17)
    with pytest.raises(TypeError, match="unknown UAAD parameters"):
        uaad_exact(row, tau=0.8)


def test_uaad_reference_by_hand_step_signals():
    # round 0: agent 0 steps (h, q, d) = (.2, .1, .0), (.9, .5, .5); agent 1 one step
    # (.4, .4, .4): step risks .125, .68, .40 -> round risk .68 (high tier)
    row = {"n_agents": 2, "answers": [["3", "3"], ["3", "3"]],
           "token_entropy": [0.0, 0.0],
           "step_h": [[[0.2, 0.9], [0.4]], [[0.0], [0.0]]],
           "step_q": [[[0.1, 0.5], [0.4]], [[0.0], [0.0]]],
           "step_d": [[[0.0, 0.5], [0.4]], [[0.1], [0.0]]]}
    risks = uaad_round_risks(row)
    assert risks == pytest.approx([0.45 * 0.9 + 0.35 * 0.5 + 0.2 * 0.5, 0.2 * 0.1], abs=TOL)
    out = uaad_exact(row)
    # high: cap min(3, last round 1) = 1; round 1: C = 1 >= .8, moved 0: stop 1
    assert (out["uaad_tier"], out["uaad_stop"], out["uaad_calls"]) == (2, 1, 2 + 6 + 1)


def _check_uaad(rows, **params):
    got = fastuq.score(table(rows), "uaad", dtype="float64", **params)
    for n, row in enumerate(rows):
        want = uaad_exact(row, **params)
        g = {k: got[k][n].as_py() for k in want}
        where = row["trajectory_id"]
        assert g["uaad"] == pytest.approx(want["uaad"], abs=TOL), where
        assert g["uaad_max_risk"] == pytest.approx(want["uaad_max_risk"], abs=TOL), where
        assert (g["uaad_tier"], g["uaad_stop"], g["uaad_calls"]) == (
            want["uaad_tier"], want["uaad_stop"], want["uaad_calls"]), (where, g, want)


@pytest.mark.parametrize("params", [
    {},
    {"tau_c": 0.6, "epsilon": 0.2, "risk_low": 0.3, "risk_high": 0.45, "rounds_high": 2},
    {"w_h": 0.2, "w_q": 0.5, "w_d": 0.3, "entropy_max": 1.5, "epsilon": 0.25,
     "tau_c": 0.75, "rounds_medium": 2, "agents_medium": 2},
])
def test_uaad_derived_signals_match_the_reference_on_random_corpora(params):
    _check_uaad(random_rows(41, 80), **params)


@pytest.mark.parametrize("params", [{}, {"risk_low": 0.5, "risk_high": 0.7, "epsilon": 0.5}])
def test_uaad_step_signals_match_the_reference_on_random_corpora(params):
    _check_uaad(random_rows(43, 60, steps=True), **params)


# ------------------------------------------------------------------ consistency gate


def test_consistency_reference_by_hand():
    # equal normalised texts: 1; both state answers: equal 1 / different 0; else Jaccard of
    # word tokens; empty samples are left out of the mean
    assert consistency_exact("The answer is 42", ["the  ANSWER is 42 "]) == 1.0
    assert consistency_exact("So it is 42.", ["I get 42", "I get 41"]) == 0.5
    # "red apple" vs "red pear": {red} / {red, apple, pear} = 1/3; the blank sample is out
    assert consistency_exact("red apple", ["red pear", "   ", None]) == pytest.approx(1 / 3)
    # one side states no answer: Jaccard, {it, is} / {it, is, 7, unclear} = 1/2
    assert consistency_exact("it is 7", ["it is unclear"]) == pytest.approx(1 / 2)
    assert consistency_exact("anything", []) == 0.0
    assert consistency_exact("anything", ["", " "]) == 0.0


def _agreeing_texts(seed: int, n: int = 300) -> tuple[list[str], list[list[str | None]]]:
    """Texts on which DESIGN's rule and the package's agree: lowercase ASCII words and at
    most one number per text, a sample stating a number only when its candidate states the
    same one or none (so where both state an answer, the answers are equal)."""
    rng = np.random.default_rng(seed)
    words = ["red", "pear", "apple", "the", "sum", "is", "we", "get", "so", "total", "x"]

    def text(number: int | None) -> str:
        k = int(rng.integers(0, 6))
        toks = [words[int(rng.integers(len(words)))] for _ in range(k)]
        if number is not None:
            toks.insert(int(rng.integers(0, k + 1)), str(number))
        return " ".join(toks)

    cands, samples = [], []
    for _ in range(n):
        num = int(rng.integers(0, 50)) if rng.random() < 0.6 else None
        cands.append(text(num))
        own = []
        for _ in range(int(rng.integers(0, 5))):
            u = rng.random()
            if u < 0.1:
                own.append(None if rng.random() < 0.5 else "  ")
            elif num is None or u < 0.6:
                own.append(text(num if num is not None and u < 0.4 else
                                (int(rng.integers(0, 50)) if num is None and u < 0.5
                                 else None)))
            else:
                own.append(text(None))
        samples.append(own)
    return cands, samples


def test_consistency_scores_match_the_reference_where_the_rules_agree():
    cands, samples = _agreeing_texts(51)
    got = consistency_scores(cands, samples)
    want = [consistency_exact(c, s) for c, s in zip(cands, samples, strict=True)]
    np.testing.assert_allclose(got, want, rtol=0, atol=TOL)


def test_consistency_different_final_answers_score_zero():
    # DESIGN: "the final answers decide where both texts state one (... different 0.0)"
    got = consistency_scores(["The answer is 12"], [["The answer is 13"]])
    assert got[0] == consistency_exact("The answer is 12", ["The answer is 13"]) == 0.0


def test_consistency_reads_thousands_separators_as_the_extractor_does():
    got = consistency_scores(["we get 1,000"], [["we get 1000"]])
    assert got[0] == consistency_exact("we get 1,000", ["we get 1000"]) == 1.0


def test_consistency_jaccard_on_unicode_word_tokens():
    c, s = "naïve café", "naïf café"
    # Unicode words: {naïve, café} vs {naïf, café}: 1/3; [a-z0-9]+: {na, ve, caf} vs
    # {na, f, caf}: 2/4
    assert consistency_exact(c, [s]) == pytest.approx(1 / 3, abs=TOL)
    assert consistency_scores([c], [[s]])[0] == pytest.approx(1 / 3, abs=TOL)


# ------------------------------------------------------------------ gate threshold


def test_binomial_upper_bound_by_hand():
    # no failure: (1 - p)^n = delta, p = 1 - delta^(1/n)
    for n in (1, 7, 29, 300):
        assert binomial_upper_exact(0, n, 0.05) == pytest.approx(1 - 0.05 ** (1 / n),
                                                                 rel=1e-12)
    # one failure in two: P(X <= 1) = 1 - p^2 = delta, p = sqrt(1 - delta)
    assert binomial_upper_exact(1, 2, 0.1) == pytest.approx(math.sqrt(0.9), rel=1e-12)
    assert binomial_upper_exact(4, 4, 0.1) == 1.0


def test_fixed_sequence_and_bonferroni_references_by_hand():
    # alpha .3, delta .1: n_min = 7 ((.7)^7 = .082 <= .1 < (.7)^6 = .118). Scores 1..10,
    # items 9 and 10 wrong. Candidates 1..6 pass too few; 7 passes 7 with no failure:
    # bound 1 - .1^(1/7) = .280 <= .3, rejected; 8: bound(0, 8) = .250, rejected;
    # 9: one failure in 9, bound(1, 9) = .368 > .3: stop. Threshold 8.
    scores = list(range(1, 11))
    correct = [True] * 8 + [False, False]
    fs = gate_fixed_sequence(scores, correct, strictest_first(scores, False), 0.3, 0.1)
    assert fs["threshold"] == 8 and (fs["n_passed"], fs["failures"]) == (8, 0)
    assert [row[0] for row in fs["table"]] == [7, 8, 9]
    assert fs["upper_bound"] == pytest.approx(1 - 0.1 ** (1 / 8), rel=1e-12)
    # Bonferroni over the 10 candidates at delta / 10 = .01: bound(0, n) = 1 - .01^(1/n)
    # <= .3 needs n >= 13: nothing is safe
    bf = gate_bonferroni(scores, correct, strictest_first(scores, False), 0.3, 0.1)
    assert bf["threshold"] is None
    # over two candidates only (delta / 2 = .05): 8 passes 8, bound 1 - .05^(1/8) = .312
    # > .3; with 20 items scored 1..20, 19 and 20 wrong, candidate 16 passes 16 with no
    # failure (1 - .05^(1/16) = .171): safe, and 18 (bound(0, 18) = .153) safer still
    assert gate_bonferroni(scores, correct, [7, 8], 0.3, 0.1)["threshold"] is None
    s20, c20 = list(range(1, 21)), [True] * 18 + [False, False]
    bf = gate_bonferroni(s20, c20, [16, 18], 0.3, 0.1)
    assert bf["threshold"] == 18 and bf["n_passed"] == 18
    assert bf["upper_bound"] == pytest.approx(1 - 0.05 ** (1 / 18), rel=1e-12)


@pytest.mark.parametrize("higher_passes", [False, True])
@pytest.mark.parametrize("seed", range(6))
def test_calibrate_threshold_matches_the_fixed_sequence_reference(seed, higher_passes):
    rng = np.random.default_rng(seed)
    n = int(rng.integers(30, 250))
    # few distinct values (ties pass together), labels more often right at low uncertainty
    scores = rng.integers(0, 25, n) / 8.0
    key = -scores if higher_passes else scores
    correct = rng.random(n) > 0.02 + 0.4 * (key - key.min()) / (np.ptp(key) + 1e-9)
    alpha, delta = [(0.1, 0.05), (0.2, 0.1), (0.05, 0.2)][seed % 3]
    got = calibrate_threshold(scores, correct, alpha, delta, higher_passes=higher_passes,
                              levels="distinct", procedure="fixed_sequence")
    want = gate_fixed_sequence(scores.tolist(), correct.tolist(),
                               strictest_first(scores.tolist(), higher_passes), alpha, delta,
                               higher_passes=higher_passes)
    if want["threshold"] is None:
        assert got.n_passed == 0 and math.isinf(got.threshold)
        return
    assert got.threshold == want["threshold"]
    assert (got.n_passed, got.failures) == (want["n_passed"], want["failures"])
    assert got.upper_bound == pytest.approx(want["upper_bound"], rel=1e-9)


def _binom_cdf(k: int, n: int, p: float) -> float:
    return math.fsum(math.comb(n, i) * p**i * (1 - p) ** (n - i) for i in range(k + 1))


def test_pass_fraction_grid_and_the_three_procedures_by_hand():
    # 20 items scored 1..20 (uncertainties), items 2, 19 and 20 wrong; 4 levels pass the 5,
    # 10, 15, 20 lowest: failures 1, 1, 1, 3. alpha .3, delta .1.
    scores = np.arange(1.0, 21.0)
    correct = np.ones(20, bool)
    correct[[1, 18, 19]] = False
    assert pass_fraction_grid(scores.tolist(), 4, False) == [5, 10, 15, 20]
    p = {n: _binom_cdf(k, n, 0.3) for n, k in ((5, 1), (10, 1), (15, 1), (20, 3))}
    # p-values .528, .149, .0353, .107; (.7)^n <= level needs n >= 7 at .1, 9 at .05, 11 at .025
    assert p[10] > 0.1 and p[15] <= 0.025 * 2 < p[20] and p[15] > 0.025
    assert 0.7**7 <= 0.1 < 0.7**6 and 0.7**9 <= 0.05 < 0.7**8 and 0.7**11 <= 0.025 < 0.7**10
    # fixed sequence at .1: tested 10, 15, 20; the first (p .149) fails: no valid threshold
    fs = calibrate_threshold(scores, correct, 0.3, 0.1, levels=4, procedure="fixed_sequence")
    assert not fs.passes_any and fs.reason.startswith("no valid threshold")
    assert fs.table["passed"] == [5, 10, 15, 20] and fs.table["failures"] == [1, 1, 1, 3]
    assert fs.table["tested"] == [False, True, True, True]
    assert fs.table["rejected"] == [False] * 4
    assert fs.table["p_value"] == pytest.approx([p[5], p[10], p[15], p[20]], rel=1e-9)
    assert fs.table["pass_fraction"] == [0.25, 0.5, 0.75, 1.0]
    # multi-start, 2 starts at .05: sequence 10, 15, 20; starts at 10 (fails) and 15
    # (rejected, then 20 fails): threshold 15
    ms = calibrate_threshold(scores, correct, 0.3, 0.1, levels=4, procedure="multi_start",
                             starts=2)
    assert (ms.threshold, ms.n_passed, ms.failures) == (15.0, 15, 1)
    assert ms.upper_bound == pytest.approx(binomial_upper_exact(1, 15, 0.05), rel=1e-9)
    assert ms.table["rejected"] == [False, False, True, False]
    assert ms.table["level_delta"] == [0.05] * 4
    assert ms.table["bound"][1:] == pytest.approx(
        [binomial_upper_exact(k, n, 0.05) for n, k in ((10, 1), (15, 1), (20, 3))], rel=1e-9)
    # Bonferroni over 4 levels at .025: 15's p .0353 > .025: none
    bf = calibrate_threshold(scores, correct, 0.3, 0.1, levels=4, procedure="bonferroni")
    assert not bf.passes_any and bf.table["tested"] == [False, False, True, True]
    assert "no valid threshold" in bf.reason
    # the references agree
    cands = pass_fraction_grid(scores.tolist(), 4, False)
    assert gate_fixed_sequence(scores.tolist(), correct.tolist(), cands, 0.3, 0.1)[
        "threshold"] is None
    assert gate_multi_start(scores.tolist(), correct.tolist(), cands, 0.3, 0.1, 2)[
        "threshold"] == 15
    assert gate_bonferroni(scores.tolist(), correct.tolist(), cands, 0.3, 0.1)[
        "threshold"] is None
    # too few items for any level: the reason says how many a level needs
    small = calibrate_threshold(scores[:6], correct[:6], 0.3, 0.1, levels=3)
    assert not small.passes_any and "at least" in small.reason


@pytest.mark.parametrize("procedure", ["fixed_sequence", "multi_start", "bonferroni"])
@pytest.mark.parametrize("higher_passes", [False, True])
@pytest.mark.parametrize("seed", range(4))
def test_calibrate_threshold_on_the_grid_matches_the_references(seed, higher_passes, procedure):
    rng = np.random.default_rng(100 + seed)
    n = int(rng.integers(150, 600))
    scores = rng.integers(0, 40, n) / 8.0  # ties: levels can land in one tie group
    key = -scores if higher_passes else scores
    correct = rng.random(n) > 0.01 + 0.3 * ((key - key.min()) / (np.ptp(key) + 1e-9)) ** 2
    alpha, delta = [(0.1, 0.05), (0.15, 0.1), (0.2, 0.05), (0.08, 0.2)][seed]
    levels, starts = [(20, 4), (50, 4), (30, 3), (13, 2)][seed]
    got = calibrate_threshold(scores, correct, alpha, delta, higher_passes=higher_passes,
                              procedure=procedure, levels=levels, starts=starts)
    cands = pass_fraction_grid(scores.tolist(), levels, higher_passes)
    assert got.table["threshold"] == cands
    args = (scores.tolist(), correct.tolist(), cands, alpha, delta)
    if procedure == "fixed_sequence":
        want = gate_fixed_sequence(*args, higher_passes=higher_passes)
    elif procedure == "bonferroni":
        want = gate_bonferroni(*args, higher_passes=higher_passes)
    else:
        want = gate_multi_start(*args, starts, higher_passes=higher_passes)
        valid = [t for t, r in zip(got.table["threshold"], got.table["rejected"],
                                   strict=True) if r]
        assert valid == want["valid"]
    if want["threshold"] is None:
        assert got.n_passed == 0 and math.isinf(got.threshold) and got.reason
        return
    assert got.threshold == want["threshold"] and not got.reason
    assert (got.n_passed, got.failures) == (want["n_passed"], want["failures"])
    assert got.upper_bound == pytest.approx(want["upper_bound"], rel=1e-9)


# ------------------------------------------------------------------ replay


def test_replay_reference_by_hand():
    # 3 agents, reference "5"; majority per round: 3 (tie 3/5/4 -> slot 0), 5, 5; the
    # corpus's final_answer "4" replaces the last round's majority
    row = {"n_agents": 3, "reference": "5", "final_answer": "4",
           "answers": [["3", "5", "4"], ["5", "5", "3"], ["5", "5", "5"]]}
    assert [round_answer(row, t) for t in range(3)] == ["3", "5", "4"]
    assert replay_trajectory(row, 1) == {"correct": True, "calls": 6, "flip": False}
    assert replay_trajectory(row, 2) == {"correct": False, "calls": 9, "flip": True}
    # active agents only: slot 1 is out of the team in round 1, so its "3" does not vote;
    # the voters are slots 0 and 2 ("5" and "3"): a tie, to the lowest slot's "5" (with every
    # agent voting, "3" wins 2 to 1)
    row2 = {**row, "active": [[True] * 3, [True, False, True], [True] * 3],
            "answers": [["3", "5", "4"], ["5", "3", "3"], ["5", "5", "5"]]}
    assert round_answer(row2, 1) == "5"
    assert round_answer({**row2, "active": None}, 1) == "3"
    # calls by nodes: the answers given
    row3 = {**row, "answers": [["3", None, "4"], [None, None, "5"], ["5", "5", "5"]]}
    assert replay_trajectory(row3, 1, "nodes")["calls"] == 3
    # uaad stop: C = 2/3, 1, 1; round 1 moved 1/3 (> .05, <= .34), round 2 moved 0
    row4 = {"n_agents": 3, "answers": [["1", "1", "2"], ["1", "1", "1"], ["1", "1", "1"]]}
    assert replay_stop(row4, "uaad", tau_c=0.8, epsilon=0.05) == 2
    assert replay_stop(row4, "uaad", tau_c=0.8, epsilon=0.34) == 1
    assert replay_stop(row4, "fixed", rounds=7) == 2
    assert replay_stop(row4, "trace", scores=[0.5, -0.1, -0.9], threshold=0.0) == 1


def _replay_rows(result, policy: str) -> list[dict]:
    return [r for r in result.table.to_pylist() if r["policy"] == policy]


def _same(got: dict, want: dict, where) -> None:
    assert got["n"] == want["n"], where
    assert got["accuracy"] == pytest.approx(want["accuracy"], abs=TOL), where
    assert got["calls_total"] == pytest.approx(want["calls_total"], abs=TOL), where
    assert got["calls_mean"] == pytest.approx(want["calls_mean"], abs=TOL), where
    assert got["flips"] == want["flips"], where
    assert got["stop_mean"] == pytest.approx(want["stop_mean"], abs=TOL), where


@pytest.mark.parametrize(("seed", "calls", "final", "active"), [
    (61, "team", True, False), (62, "nodes", True, True), (63, "team", False, True),
])
def test_replay_matches_the_reference_on_random_corpora(seed, calls, final, active):
    rows = random_rows(seed, 70, final=final, active=active)
    taus, epss = [0.5, 0.8, 1.0], [0.0, 0.05, 0.25]
    thresholds = [-0.9, -0.6, -0.3]
    pols = [Policy("fixed"), Policy("uaad", tau_c=taus, epsilon=epss), Policy("bccs"),
            Policy("trace", estimator="mean_agreement", thresholds=thresholds)]
    res = replay(table(rows), pols, calls=calls, dtype="float64")
    t_max = max(len(r["answers"]) for r in rows)

    fixed = _replay_rows(res, "fixed")
    assert [r["rounds"] for r in fixed] == list(range(1, t_max + 1))
    for r in fixed:
        _same(r, replay_totals(rows, "fixed", calls, rounds=r["rounds"]), r)
    full = replay_totals(rows, "fixed", calls, rounds=t_max)
    assert res.full["accuracy"] == pytest.approx(full["accuracy"], abs=TOL)
    assert res.full["flips"] == full["flips"]

    uaad = _replay_rows(res, "uaad")
    assert len(uaad) == len(taus) * len(epss)
    for r in uaad:
        _same(r, replay_totals(rows, "uaad", calls, tau_c=r["tau_c"], epsilon=r["epsilon"]),
              r)

    (bccs,) = _replay_rows(res, "bccs")
    _same(bccs, replay_totals(rows, "bccs", calls), bccs)

    # mean_agreement after round t: minus the mean of the exact agreements of rounds 0..t

    per_round = []
    for row in rows:
        c = [agreement_exact(a, row["n_agents"]) for a in row["answers"]]
        per_round.append([float(-sum(c[:t + 1]) / (t + 1)) for t in range(len(c))])
    trace = _replay_rows(res, "trace")
    assert [r["threshold"] for r in trace] == thresholds
    for r in trace:
        _same(r, replay_totals(rows, "trace", calls, scores=per_round,
                               threshold=r["threshold"]), r)


def test_replay_trace_on_sauce_matches_the_exact_filter():
    """``trace:sauce`` stops at the first round whose SAUCE score of rounds 0..t (debate
    preset) is at most the threshold; the scores from :func:`sauce_exact` on each prefix."""
    rows = random_rows(71, 60)

    per_round = []
    for row in rows:
        c = [float(agreement_exact(a, row["n_agents"])) for a in row["answers"]]
        h = row["token_entropy"]
        per_round.append([sauce_exact(c[:t + 1], h[:t + 1], 0.95, 0.10, 0.25, 0.0)["score"]
                          for t in range(len(c))])
    thresholds = [-0.7, -0.5, -0.3, -0.1]
    res = replay(table(rows), [Policy("trace", estimator="sauce", thresholds=thresholds)],
                 dtype="float64")
    for r in _replay_rows(res, "trace"):
        _same(r, replay_totals(rows, "trace", scores=per_round, threshold=r["threshold"]), r)


def test_replay_of_real_dylan_logs_matches_the_reference():
    """The 44 real DyLAN MATH debates of tests/data (imported; ``active`` and
    ``final_answer`` from the importer): fixed and uaad policies, calls by nodes. The
    reference compares answers as strings, so every answer, final answer and reference is
    first put in ``fastuq.answers.normalize_answer``'s canonical spelling (a black box here:
    what counts as one answer is not what this test is about)."""
    from pathlib import Path

    from fastuq.answers import normalize_answer
    from fastuq.importers import import_dylan

    def norm(x):
        return (normalize_answer(x) or None) if x is not None else None

    t = import_dylan(Path(__file__).resolve().parent / "data" / "dylan_math")
    rows = []
    for r in t.to_pylist():
        rows.append({**r, "answers": [[norm(x) for x in a] for a in r["answers"]],
                     "final_answer": norm(r["final_answer"]),
                     "reference": norm(r["reference"])})
    assert len(rows) == 44 and any(not all(a) for r in rows for a in r["active"])
    taus, epss = [0.5, 0.8, 1.0], [0.0, 0.05, 0.25]
    res = replay(t, [Policy("fixed"), Policy("uaad", tau_c=taus, epsilon=epss)],
                 calls="nodes", dtype="float64")
    for r in _replay_rows(res, "fixed"):
        _same(r, replay_totals(rows, "fixed", "nodes", rounds=r["rounds"]), r)
    for r in _replay_rows(res, "uaad"):
        _same(r, replay_totals(rows, "uaad", "nodes", tau_c=r["tau_c"],
                               epsilon=r["epsilon"]), r)


def test_a_change_equal_to_epsilon_stops_in_uaad_and_in_replay():
    """DESIGN: the consensus stop needs the share "moved <= epsilon": a change exactly equal
    to epsilon stops. 5 agents: C goes 3/5 -> 4/5 (moved 1/5, which float64 computes as
    0.20000000000000007); 4 agents: 3/4 -> 1 (moved 1/4 exactly). With tau_c 0.6 and
    epsilon 0.2 / 0.25 both stop at round 1, by hand and in the package."""
    rows = [
        {"trajectory_id": "five", "protocol": "debate", "n_agents": 5, "reference": "2",
         "answers": [["2", "2", "2", "1", "3"], ["2", "2", "2", "2", "3"],
                     ["2", "2", "2", "2", "2"]], "token_entropy": [2.0, 2.0, 2.0]},
        {"trajectory_id": "four", "protocol": "debate", "n_agents": 4, "reference": "2",
         "answers": [["2", "2", "2", "1"], ["2", "2", "2", "2"], ["2", "2", "2", "2"]],
         "token_entropy": [2.0, 2.0, 2.0]},
    ]
    assert [replay_stop(r, "uaad", tau_c=0.6, epsilon=e)
            for r, e in zip(rows, (0.2, 0.25), strict=True)] == [1, 1]
    # just below the change: no stop until the change is 0 (round 2)
    assert [replay_stop(r, "uaad", tau_c=0.6, epsilon=e)
            for r, e in zip(rows, (0.19, 0.24), strict=True)] == [2, 2]
    got = fastuq.score(table(rows[:1]), "uaad", dtype="float64", tau_c=0.6, epsilon=0.2)
    assert got["uaad_stop"][0].as_py() == uaad_exact(rows[0], tau_c=0.6, epsilon=0.2)[
        "uaad_stop"] == 1  # high tier (h = 1 with entropy 2 > ln 5): cap 2
    got = fastuq.score(table(rows[1:]), "uaad", dtype="float64", tau_c=0.6, epsilon=0.25)
    assert got["uaad_stop"][0].as_py() == 1
    res = replay(table(rows), [Policy("uaad", tau_c=[0.6], epsilon=[0.19, 0.2, 0.24, 0.25])],
                 dtype="float64")
    # stops (five, four) per epsilon: .19 -> (2, 2), .2 -> (1, 2), .24 -> (1, 2),
    # .25 -> (1, 1); mean stop rounds 2, 1.5, 1.5, 1
    assert [r["stop_mean"] for r in _replay_rows(res, "uaad")] == [2.0, 1.5, 1.5, 1.0]
    for r in _replay_rows(res, "uaad"):
        _same(r, replay_totals(rows, "uaad", tau_c=0.6, epsilon=r["epsilon"]), r)


@pytest.mark.parametrize("params", [{}, {"risk_low": 0.3, "risk_high": 0.5, "rounds_high": 2,
                                         "agents_medium": 2}])
def test_replay_uaad_route_matches_the_reference(params):
    """``uaad_route``: UAAD's stop under its tier's round cap (:func:`uaad_exact`'s
    ``uaad_stop``), the saved debate's answer, calls and flips at that stop, and UAAD's own
    budget ``Q = M + N R + 1`` (``calls_uaad_mean``)."""
    rows = random_rows(81, 70)
    taus, epss = [0.5, 0.8], [0.0, 0.25]
    res = replay(table(rows), [Policy("uaad_route", tau_c=taus, epsilon=epss)],
                 params=params, dtype="float64")
    got = _replay_rows(res, "uaad_route")
    assert len(got) == 4
    for r in got:
        ref = [uaad_exact(row, **params, tau_c=r["tau_c"], epsilon=r["epsilon"])
               for row in rows]
        outs = [replay_trajectory(row, u["uaad_stop"]) for row, u in zip(rows, ref,
                                                                          strict=True)]
        n = len(rows)
        want = {"n": n, "accuracy": sum(o["correct"] for o in outs) / n,
                "calls_total": sum(o["calls"] for o in outs),
                "calls_mean": sum(o["calls"] for o in outs) / n,
                "flips": sum(o["flip"] for o in outs),
                "stop_mean": sum(u["uaad_stop"] for u in ref) / n}
        _same(r, want, r)
        assert r["calls_uaad_mean"] == pytest.approx(
            sum(u["uaad_calls"] for u in ref) / n, abs=TOL), r
