"""``fastuq.gate.calibrate_threshold`` and ``fastuq gate``.

References are computed apart from the module: the Clopper-Pearson bound by bisection on the
exact binomial CDF (``math.comb``) and by ``scipy.stats.binomtest(...).proportion_ci``
(two-sided at 1 - 2 delta = one-sided at 1 - delta), thresholds by hand or by a plain loop
over the candidates. Tolerance on bounds: 1e-9.

The guarantee is checked by simulation: scores u ~ U(0, 1), an item fails with probability u^2,
so the failure rate among the items passed at threshold t (u <= t) is exactly E[u^2 | u <= t] =
t^2 / 3 on the population (an infinite test split). Over 2,000 independent calibration draws
the share of draws whose calibrated threshold has population failure rate > alpha must be <= delta +
3 sqrt(delta (1 - delta) / 2000) (binomial slack).
"""

from __future__ import annotations

import math

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from scipy.stats import binomtest

from fastuq.cli import main
from fastuq.gate import calibrate_threshold, clopper_pearson_upper


def _binom_cdf(k: int, n: int, p: float) -> float:
    return sum(math.comb(n, i) * p**i * (1 - p) ** (n - i) for i in range(k + 1))


def _cp_upper(k: int, n: int, delta: float) -> float:
    """The p with P(Binomial(n, p) <= k) = delta, by bisection (1 when k == n)."""
    if k >= n:
        return 1.0
    lo, hi = 0.0, 1.0
    for _ in range(200):
        mid = (lo + hi) / 2
        if _binom_cdf(k, n, mid) > delta:
            lo = mid
        else:
            hi = mid
    return (lo + hi) / 2


def _reference(scores, correct, alpha, delta):
    """Fixed-sequence testing by a plain loop, starting at the first candidate where zero
    failures would be rejected: (threshold, n passed, failures), or None."""
    best = None
    for t in sorted(set(scores)):
        passed = [c for s, c in zip(scores, correct, strict=True) if s <= t]
        if _cp_upper(0, len(passed), delta) > alpha:
            continue  # no rejection possible yet: not in the sequence
        k = sum(not c for c in passed)
        if _cp_upper(k, len(passed), delta) > alpha:
            break
        best = (t, len(passed), k)
    return best


def _distinct_fs(scores, correct, alpha, delta, **kw):
    """The procedure before the grid, still an option: every distinct score a candidate, one
    fixed sequence from the strictest."""
    return calibrate_threshold(scores, correct, alpha, delta, levels="distinct",
                               procedure="fixed_sequence", **kw)


@pytest.mark.parametrize("k,n", [(0, 1), (0, 5), (1, 10), (3, 10), (9, 10), (10, 10), (7, 200)])
def test_clopper_pearson_matches_bisection_and_binomtest(k, n):
    delta = 0.05
    got = float(clopper_pearson_upper(k, n, delta))
    assert got == pytest.approx(_cp_upper(k, n, delta), abs=1e-9)
    ci = binomtest(k, n).proportion_ci(confidence_level=1 - 2 * delta, method="exact")
    assert got == pytest.approx(ci.high, abs=1e-9)


def test_hand_worked_ten_items():
    # Scores 1..10; items 1-5 and 7 correct, 6 and 8-10 wrong; passing the j lowest gives
    # failures k = 0,0,0,0,0,1,1,2,3,4. Bounds by _cp_upper (one-sided CP, delta 0.1):
    # j=1..10: .900 .684 .536 .438 .369 .510 .453 .538 .599 .646.
    scores = np.arange(1.0, 11.0)
    correct = np.array([1, 1, 1, 1, 1, 0, 1, 0, 0, 0], bool)
    # alpha .5, delta .1: the sequence starts at j=4 (log .1 / log .5 = 3.3), j=4,5 pass,
    # j=6 (.510) fails: threshold 5.
    assert _cp_upper(0, 3, 0.1) > 0.5 >= _cp_upper(0, 4, 0.1)
    assert _cp_upper(0, 5, 0.1) <= 0.5 < _cp_upper(1, 6, 0.1)
    g = _distinct_fs(scores, correct, 0.5, 0.1)
    assert (g.threshold, g.n_passed, g.failures, g.pass_rate) == (5.0, 5, 0, 0.5)
    assert g.failure_rate == 0 and g.upper_bound == pytest.approx(_cp_upper(0, 5, 0.1))
    assert g.passes(scores).tolist() == [True] * 5 + [False] * 5
    # alpha .95: every bound <= .95: everything passes.
    g = _distinct_fs(scores, correct, 0.95, 0.1)
    assert (g.threshold, g.n_passed, g.failures) == (10.0, 10, 4)
    assert g.upper_bound == pytest.approx(_cp_upper(4, 10, 0.1), abs=1e-9)
    # alpha .2: a rejection needs j >= 11 (log .1 / log .8 = 10.3): nothing passes.
    g = _distinct_fs(scores, correct, 0.2, 0.1)
    assert not g.passes_any and g.threshold == -math.inf and g.n_passed == 0
    assert math.isnan(g.failure_rate) and not g.passes(scores).any()
    # alpha .3, delta .5: bounds .5 .293 .206 .159 .129 .264 .228 .321 ...: start j=2,
    # j=8 fails: threshold 7 (k=1).
    g = _distinct_fs(scores, correct, 0.3, 0.5)
    assert _cp_upper(1, 7, 0.5) <= 0.3 < _cp_upper(2, 8, 0.5)
    assert (g.threshold, g.n_passed, g.failures) == (7.0, 7, 1)
    assert g.pass_rate == 0.7 and g.failure_rate == pytest.approx(1 / 7)
    assert g.upper_bound == pytest.approx(_cp_upper(1, 7, 0.5), abs=1e-9)
    for alpha, delta in ((0.5, 0.1), (0.95, 0.1), (0.2, 0.1), (0.3, 0.5)):
        ref = _reference(scores.tolist(), correct.tolist(), alpha, delta)
        g = _distinct_fs(scores, correct, alpha, delta)
        assert ref == ((g.threshold, g.n_passed, g.failures) if g.passes_any else None)


def test_stops_at_first_failure_even_if_later_candidates_pass():
    # 20 correct, then 1 wrong, then 200 correct: the bound at j=21 exceeds alpha though the
    # loosest threshold's bound is below it. Fixed sequence stops: threshold 19 (20 passed).
    scores = np.arange(221.0)
    correct = np.ones(221, bool)
    correct[20] = False
    alpha, delta = 0.2, 0.05
    assert _cp_upper(0, 20, delta) <= alpha < _cp_upper(1, 21, delta)
    assert _cp_upper(1, 221, delta) <= alpha
    g = _distinct_fs(scores, correct, alpha, delta)
    assert (g.threshold, g.n_passed, g.failures) == (19.0, 20, 0)


@pytest.mark.parametrize("seed", range(5))
def test_matches_loop_reference_with_ties(seed):
    rng = np.random.default_rng(seed)
    scores = rng.integers(0, 8, 60).astype(float)  # many ties
    correct = rng.random(60) > scores / 12
    for alpha, delta in ((0.2, 0.1), (0.35, 0.05), (0.5, 0.2)):
        g = _distinct_fs(scores, correct, alpha, delta)
        ref = _reference(scores.tolist(), correct.tolist(), alpha, delta)
        if ref is None:
            assert not g.passes_any
        else:
            assert (g.threshold, g.n_passed, g.failures) == ref
            assert g.passes(scores).sum() == g.n_passed


def test_ties_pass_together():
    scores = [0.1, 0.1, 0.2, 0.2, 0.2, 0.3]
    correct = [True, True, True, False, False, True]
    # delta .5: candidate .1 passes 2 (k=0, bound .293), .2 passes 5 (k=2, bound .5),
    # .3 passes 6 (k=2).
    assert _cp_upper(0, 2, 0.5) <= 0.3 < _cp_upper(2, 5, 0.5)
    g = _distinct_fs(scores, correct, 0.3, 0.5)
    assert (g.threshold, g.n_passed, g.failures) == (0.1, 2, 0)
    assert max(_cp_upper(2, 5, 0.5), _cp_upper(2, 6, 0.5)) <= 0.55
    g = _distinct_fs(scores, correct, 0.55, 0.5)
    assert (g.threshold, g.n_passed, g.failures) == (0.3, 6, 2)
    # alpha .28: the first candidate with a possible rejection would need 3 items; the tie
    # group at .2 jumps from 2 to 5 passed, with 2 failures: bound .5 > .28: nothing.
    assert _cp_upper(0, 2, 0.5) > 0.28 >= _cp_upper(0, 3, 0.5)
    assert not _distinct_fs(scores, correct, 0.28, 0.5).passes_any


def test_all_correct_all_wrong_single_item():
    s = np.linspace(0, 1, 100)
    g = _distinct_fs(s, np.ones(100, bool), 0.05, 0.05)  # needs n >= 59
    assert (g.threshold, g.n_passed, g.failures, g.pass_rate) == (1.0, 100, 0, 1.0)
    assert g.upper_bound == pytest.approx(1 - 0.05 ** (1 / 100))
    g = _distinct_fs(s, np.zeros(100, int), 0.5, 0.05)
    assert not g.passes_any and g.threshold == -math.inf
    assert not _distinct_fs([0.3], [True], 0.1, 0.05).passes_any  # bound 0.95
    g = _distinct_fs([0.3], [1], 0.96, 0.05)
    assert (g.threshold, g.n_passed, g.upper_bound) == (0.3, 1, pytest.approx(0.95))


def test_higher_passes_mirrors_the_default():
    rng = np.random.default_rng(7)
    conf = rng.random(300)
    correct = rng.random(300) < conf  # higher confidence, more often correct
    g = _distinct_fs(conf, correct, 0.15, 0.05, higher_passes=True)
    m = _distinct_fs(-conf, correct, 0.15, 0.05)
    assert g.passes_any
    assert g.threshold == -m.threshold and g.n_passed == m.n_passed
    assert g.failures == m.failures and g.upper_bound == m.upper_bound
    assert g.passes(conf).sum() == g.n_passed
    assert (conf[g.passes(conf)] >= g.threshold).all()
    none = _distinct_fs([0.5], [True], 0.1, 0.05, higher_passes=True)
    assert none.threshold == math.inf and not none.passes([1.0]).any()


@pytest.mark.parametrize("kwargs,match", [
    (dict(scores=[1, 2], correct=[True]), "length"),
    (dict(scores=[], correct=[]), "no calibration"),
    (dict(scores=[1, float("nan")], correct=[1, 0]), "finite"),
    (dict(scores=[1, float("inf")], correct=[1, 0]), "finite"),
    (dict(scores=[1, 2], correct=[1, 2]), "0/1"),
    (dict(scores=[1, 2], correct=["a", "b"]), "bool"),
    (dict(scores=[[1, 2]], correct=[1]), "1-D"),
    (dict(scores=[1], correct=[1], alpha=0), "alpha"),
    (dict(scores=[1], correct=[1], alpha=1.0), "alpha"),
    (dict(scores=[1], correct=[1], delta=1.5), "delta"),
    (dict(scores=[1], correct=[1], delta="x"), "delta"),
])
def test_validation(kwargs, match):
    kw = dict(alpha=0.1, delta=0.05) | kwargs
    with pytest.raises(ValueError, match=match):
        calibrate_threshold(kw["scores"], kw["correct"], kw["alpha"], kw["delta"])


def test_guarantee_by_simulation():
    rng = np.random.default_rng(20261201)
    alpha, delta, n_cal, splits = 0.1, 0.05, 1000, 2000
    violations = passed_any = 0
    for _ in range(splits):
        u = rng.random(n_cal)
        correct = rng.random(n_cal) >= u**2  # fails with probability u^2
        g = calibrate_threshold(u, correct, alpha, delta)
        if g.passes_any:
            passed_any += 1
            violations += min(g.threshold, 1.0) ** 2 / 3 > alpha  # population rate t^2 / 3
    assert passed_any > 0.95 * splits  # not vacuous: a threshold is found almost always
    assert violations / splits <= delta + 3 * math.sqrt(delta * (1 - delta) / splits)


def _draws(p, draws, n, seed):
    rng = np.random.default_rng(seed)
    u = rng.random((draws, n))
    return u, rng.random((draws, n)) >= p(u)


def test_flat_safe_failure_rate_passes_in_almost_every_draw():
    # 2,000 items failing at 5% everywhere (every threshold safe at alpha .1): the procedure
    # before the grid passed nothing in 78% of the draws (bench/gate_simulation.py)
    u, correct = _draws(lambda u: np.full_like(u, 0.05), 200, 2000, 11)
    gates = [calibrate_threshold(u[d], correct[d], 0.1, 0.05) for d in range(200)]
    nothing = sum(not g.passes_any for g in gates)
    assert nothing / 200 < 0.05
    assert np.mean([g.pass_rate for g in gates]) > 0.9
    assert all(g.procedure == "multi_start" and g.levels == 50 and g.starts == 4 for g in gates)


def test_rising_failure_rate_passes_the_safe_part():
    # p(u) = .02 + .6 u^2: among u <= t the failure rate is .02 + .2 t^2, <= .1 iff
    # t <= sqrt(.4): the safe part is the 63.2% lowest scores
    u, correct = _draws(lambda u: 0.02 + 0.6 * u**2, 200, 2000, 12)
    gates = [calibrate_threshold(u[d], correct[d], 0.1, 0.05) for d in range(200)]
    rates = np.array([g.pass_rate for g in gates])
    assert (rates > 0).mean() > 0.95 and rates.mean() > 0.45  # before: .217 on average
    unsafe = sum(0.02 + 0.2 * min(g.threshold, 1.0) ** 2 > 0.1 for g in gates if g.passes_any)
    assert unsafe / 200 <= 0.05 + 3 * math.sqrt(0.05 * 0.95 / 200)


def test_no_valid_threshold_says_why_and_the_table_has_every_level():
    u = np.linspace(0, 1, 400)
    g = calibrate_threshold(u, np.zeros(400, bool), 0.1, 0.05)  # everything fails
    assert not g.passes_any and g.reason.startswith("no valid threshold")
    assert len(g.table["level"]) == 50 and not any(g.table["rejected"])
    assert g.table["failures"] == g.table["passed"]
    row = {k: v[-1] for k, v in g.table.items()}
    assert (row["passed"], row["pass_fraction"], row["threshold"]) == (400, 1.0, 1.0)
    ok = calibrate_threshold(u, np.ones(400, bool), 0.1, 0.05)
    assert ok.passes_any and ok.reason == "" and ok.n_passed == 400


@pytest.mark.parametrize("kwargs,match", [
    (dict(procedure="holm"), "procedure must be one of"),
    (dict(levels=0), "levels"),
    (dict(levels="all"), "levels"),
    (dict(levels=2.5), "levels"),
    (dict(starts=0), "starts"),
])
def test_unknown_procedures_raise(kwargs, match):
    with pytest.raises(ValueError, match=match):
        calibrate_threshold([0.1, 0.2], [1, 1], 0.1, 0.05, **kwargs)


# --- CLI ------------------------------------------------------------------------------------


@pytest.fixture()
def files(tmp_path):
    rng = np.random.default_rng(3)
    n = 400
    u = rng.random(n)
    correct = rng.random(n) >= u**2
    ids = [f"t{i}" for i in range(n)]
    corpus = tmp_path / "corpus.parquet"
    pq.write_table(pa.table({"trajectory_id": ids, "correct": correct, "sauce": u}), corpus)
    scores = tmp_path / "scores.parquet"
    order = rng.permutation(n)  # the scores file in another order
    pq.write_table(pa.table({"trajectory_id": [ids[i] for i in order], "sauce": u[order]}),
                   scores)
    return dict(corpus=corpus, scores=scores, u=u, correct=correct, ids=ids)


def test_cli_gate(files, tmp_path, capsys):
    out = tmp_path / "verdicts.parquet"
    rc = main(["gate", str(files["corpus"]), "--scores", str(files["scores"]), "--score",
               "sauce", "--alpha", "0.2", "--delta", "0.1", "-o", str(out)])
    assert rc == 0
    text = capsys.readouterr().out
    g = calibrate_threshold(files["u"], files["correct"], 0.2, 0.1)
    assert g.passes_any
    assert f"pass iff sauce <= {g.threshold:.10g}" in text
    assert f"passed: {g.n_passed:,} of 400 (pass rate {g.pass_rate:.4f})" in text
    assert f"failure rate {g.failure_rate:.4f}" in text
    table = pq.read_table(out)
    assert table.column_names == ["trajectory_id", "sauce", "passed"]
    assert table["trajectory_id"].to_pylist() == files["ids"]  # corpus order
    assert table["passed"].to_pylist() == (files["u"] <= g.threshold).tolist()
    # the corpus holds the score column itself: --scores may be omitted, same verdict
    rc = main(["gate", str(files["corpus"]), "--score", "sauce", "--alpha", "0.2",
               "--delta", "0.1"])
    assert rc == 0 and f"pass iff sauce <= {g.threshold:.10g}" in capsys.readouterr().out


def test_cli_gate_prints_the_procedure_and_the_per_level_table(files, capsys):
    rc = main(["gate", str(files["corpus"]), "--score", "sauce", "--alpha", "0.2",
               "--delta", "0.1", "--levels", "8", "--procedure", "bonferroni"])
    assert rc == 0
    out = capsys.readouterr().out
    assert "procedure: Bonferroni over the levels; candidates: 8 pass-fraction levels" in out
    lines = out.splitlines()
    head = next(i for i, line in enumerate(lines) if line.startswith("level"))
    rows = [line.split() for line in lines[head + 1:head + 9]]
    # level 4 of 8 passes the 200 lowest of 400 scores; its p-value by math.comb
    u, correct = files["u"], files["correct"]
    low = np.argsort(u)[:200]
    k = int((~correct[low]).sum())
    p = math.fsum(math.comb(200, i) * 0.2**i * 0.8 ** (200 - i) for i in range(k + 1))
    assert rows[3][:5] == ["4", "0.5000", f"{np.sort(u)[199]:.10g}", "200", str(k)]
    assert float(rows[3][5]) == pytest.approx(p, rel=1e-2)
    assert float(rows[3][6]) == pytest.approx(_cp_upper(k, 200, 0.1 / 8), abs=1e-4)


def test_cli_gate_higher_passes_and_none(files, capsys):
    rc = main(["gate", str(files["corpus"]), "--score", "sauce", "--higher-passes",
               "--alpha", "0.05"])
    assert rc == 0
    out = capsys.readouterr().out
    assert "threshold: none; no valid threshold" in out


def test_cli_gate_errors(files, tmp_path, capsys):
    corpus = str(files["corpus"])
    assert main(["gate", corpus, "--score", "nope"]) == 2
    assert "no score column 'nope'" in capsys.readouterr().err
    assert main(["gate", corpus, "--score", "sauce", "-o", corpus]) == 2
    assert "cannot write" in capsys.readouterr().err
    assert not (tmp_path / "x.parquet").exists()
    with pytest.raises(SystemExit):
        main(["gate", corpus, "--score", "sauce", "--alpha", "1.5"])


def test_cli_gate_on_a_consistency_column_as_the_readme_says(tmp_path, capsys):
    # README "### Calibrate a gate": fastuq gate scored.parquet --score consistency
    # --higher-passes, the corpus holding the column (it used to demand a texts column)
    rng = np.random.default_rng(5)
    n = 300
    correct = rng.random(n) < 0.7
    conf = np.clip(np.where(correct, 0.8, 0.4) + rng.normal(0, 0.15, n), 0, 1)
    path = tmp_path / "scored.parquet"
    pq.write_table(pa.table({"trajectory_id": [f"t{i}" for i in range(n)],
                             "correct": correct, "consistency": conf}), path)
    out = tmp_path / "v.parquet"
    assert main(["gate", str(path), "--score", "consistency", "--higher-passes",
                 "--levels", "distinct", "--procedure", "fixed_sequence", "-o", str(out)]) == 0
    # by hand: the loosest threshold whose passed items' Clopper-Pearson bound holds,
    # testing from the strictest (highest) score down, stopping at the first failure
    from scipy.stats import beta

    order = np.sort(np.unique(conf))[::-1]
    best = None
    for t in order:
        passed = conf >= t
        k, m = int((~correct[passed]).sum()), int(passed.sum())
        bound = 1.0 if k == m else float(beta.ppf(0.95, k + 1, m - k))
        if m < math.log(0.05) / math.log(0.9):
            continue  # no rejection possible yet: the sequence starts later
        if bound > 0.1:
            break
        best = t
    assert best is not None
    printed = capsys.readouterr().out
    assert f"pass iff consistency >= {best:.10g}" in printed
    np.testing.assert_array_equal(pq.read_table(out)["passed"].to_numpy(), conf >= best)


def test_cli_gate_without_the_score_column_says_how_to_get_it(tmp_path, capsys):
    import json

    rows = [{"trajectory_id": f"t{i}", "protocol": "debate", "n_agents": 3, "level": 2,
             "correct": bool(i % 2), "agreement": [1.0], "token_entropy": [0.1]}
            for i in range(6)]
    jsonl = tmp_path / "c.jsonl"
    jsonl.write_text("".join(json.dumps(r) + "\n" for r in rows))
    # a JSONL corpus used to end in a Polars traceback (read as Parquet)
    assert main(["gate", str(jsonl), "--score", "sauce"]) == 2
    err = capsys.readouterr().err
    assert "Traceback" not in err
    assert f"fastuq score {jsonl} --method sauce -o scores.parquet" in err
    assert "--scores scores.parquet --score sauce" in err
    # a table without the column named n_agents and level as its "score columns"
    table = tmp_path / "c.parquet"
    pq.write_table(pa.Table.from_pylist(rows), table)
    assert main(["gate", str(table), "--score", "uaad_max_risk"]) == 2
    err = capsys.readouterr().err
    assert "no score column 'uaad_max_risk'" in err
    assert "score columns: n_agents" not in err
    assert f"fastuq score {table} --method uaad -o scores.parquet" in err
    # --scores given a JSONL file: an error, not a traceback (eval reads scores alike)
    assert main(["gate", str(table), "--scores", str(jsonl), "--score", "sauce"]) == 2
    assert "a scores file is Parquet, CSV or Arrow IPC" in capsys.readouterr().err
    garbage = tmp_path / "s.parquet"
    garbage.write_text("not parquet")
    assert main(["gate", str(table), "--scores", str(garbage), "--score", "sauce"]) == 2
    assert "cannot read it as a Parquet scores file" in capsys.readouterr().err


# --- the gate's agreement score ------------------------------------------------------------


def _reference_score(candidate, samples) -> float:
    """The definition, item by item in plain Python: tests/_references.py's
    ``consistency_exact`` (written apart from fastuq.decisions.consistency; it takes the
    answer extraction and equivalence from fastuq.answers as a black box)."""
    from _references import consistency_exact

    return consistency_exact(candidate, samples)


def test_consistency_scores_hand_worked():
    from fastuq.gate import consistency_scores

    got = consistency_scores(
        ["The answer is 42.", "Paris is the capital", "", "x", "  Yes  ", "3 apples"],
        [["so 42", "It is 41", ""], ["paris   is the CAPITAL", "The capital: Paris!"], ["a"],
         [None, "  "], ["yes"], ["3.0", "4 apples"]])
    # answers 42 and 42 -> 1; 42 and 41 differ -> 0; the empty sample is not usable
    # equal after normalising -> 1; no answer: {the, capital, paris} of 4 tokens -> 3/4
    # no candidate tokens -> 0; no usable sample -> 0 (fails closed); whitespace and case -> 1
    # 3 = 3.0 as numbers -> 1; answers 3 and 4 differ -> 0 (the shared "apples" is moot)
    want = [1 / 2, (1 + 3 / 4) / 2, 0.0, 0.0, 1.0, 1 / 2]
    np.testing.assert_allclose(got, want, rtol=0, atol=1e-15)


def test_consistency_scores_match_the_definition_on_random_texts():
    from fastuq.gate import consistency_scores

    rng = np.random.default_rng(4)
    words = ["The", "answer", "is", "42", "41", "-3", "2.5", "x", "Paris", "  ", "\n", "so",
             "=", "3.0", "3"]

    def text():
        if rng.random() < 0.1:
            return rng.choice(["", "   ", None])
        return " ".join(rng.choice(words, rng.integers(1, 8)).tolist())

    candidates = [text() for _ in range(300)]
    samples = [[text() for _ in range(rng.integers(0, 6))] for _ in range(300)]
    want = [_reference_score(c, s) for c, s in zip(candidates, samples, strict=True)]
    got = consistency_scores(candidates, samples)
    np.testing.assert_allclose(got, want, rtol=0, atol=1e-12)
    assert ((got >= 0) & (got <= 1)).all()


def test_consistency_scores_numbers_by_hand():
    """Where both texts state a final answer (fastuq.answers' reading), the answers decide:
    equivalent 1.0, different 0.0, whatever the texts share; thousands separators, dates,
    fractions, boxes and letters as the extractor reads them."""
    from fastuq.gate import consistency_scores

    cases = [
        ("The answer is 12", ["The answer is 13"], 0.0),  # tokens would give 3/5
        ("we get 1,000", ["we get 1000"], 1.0),  # 1,000 is 1000 (not 000)
        ("1,500", ["2,500", "1500", "1,500.0"], 2 / 3),  # 1500 vs 2500: not 500 and 500
        ("due 05/01/2021", ["04/30/2021 then", "on 05/01/2021"], 1 / 2),  # not the year
        ("\\boxed{\\frac{1}{2}}", ["so it is 0.5", "answer: 1/2", "The answer is (B)"], 2 / 3),
        ("12 apples", ["12 pears", "13 apples"], 1 / 2),  # the numbers decide
        ("The answer is X", ["the answer is x"], 1.0),  # X and x differ; equal texts: 1
        ("\u212a: the answer is (A)", ["k: The answer is (a)", "k: the answer is (b)"],
         1 / 2),  # A and (a) differ, the texts are equal once lowercased (Kelvin sign: k)
        (" Say (B)", ["say (C)", "say  (b) "], 1 / 2),  # B, C: 0; (b) is no letter: {say, b}
        ("-3", ["3-5", "so -3.0"], 1 / 2),  # 3-5 ends in 5
        ("answer 42", ["no number here"], 0.0),  # one answer only: tokens, nothing shared
        ("it is 7", ["seven", "it is"], (0 + 2 / 3) / 2),  # no answer: tokens
    ]
    got = consistency_scores([c for c, _, _ in cases], [s for _, s, _ in cases])
    np.testing.assert_allclose(got, [w for _, _, w in cases], rtol=0, atol=1e-15)
    np.testing.assert_allclose(got, [_reference_score(c, s) for c, s, _ in cases],
                               rtol=0, atol=1e-12)


def test_consistency_scores_text_rules_by_hand():
    """Whitespace as Python's str.isspace (\\x1c-\\x1f and Unicode spaces included), case,
    empty samples, texts without tokens, Unicode word tokens (re's \\w+ of str.lower: accented
    and Cyrillic letters, "_", U+0130 and the Kelvin sign as Python lowercases them, non-ASCII
    tokens of 7 to 9 bytes)."""
    from fastuq.gate import consistency_scores

    cases = [
        ("?", ["\x1f", " ?", "??", "\xa0?\u3000"], (1 + 0 + 1) / 3),  # token-less: equal or 0
        ("?\x1c!", ["? !", "?!"], 0.5),  # \x1c is whitespace
        ("Hello  World", ["hello\x1dworld", "HELLO"], (1 + 1 / 2) / 2),
        ("a", ["\x1c\x1d\x1e\x1f", "", None, " \t\n"], 0.0),  # no usable sample
        ("\u0130stanbul", ["i stanbul", "istanbul"], (1 + 0) / 2),  # -> i, U+0307, stanbul
        ("\u212ax y", ["kx z"], 1 / 3),  # Kelvin sign -> "k": {kx, y} and {kx, z}
        ("caf\u00e9 au lait", ["caf", "caf\u00e9"], (0 + 1 / 3) / 2),  # cafe-acute is a word
        ("\u00c9T\u00c9", ["\u00e9t\u00e9", "t"], (1 + 0) / 2),  # equal lowercased; {ete}
        ("\u041c\u043e\u0441\u043a\u0432\u0430",
         ["\u041e\u0442\u0432\u0435\u0442: \u041c\u043e\u0441\u043a\u0432\u0430"], 1 / 2),
        ("na\u00efve caf\u00e9", ["na\u00eff caf\u00e9"], 1 / 3),  # {cafe} of 3 words
        ("a_b c", ["a_b d", "a b"], (1 / 3 + 0) / 2),  # "_" is a word character
        ("abcdef\u00e9 x", ["abcdef\u00e9", "abcdef", "abcdefg\u00e9"], (1 / 2) / 3),  # 8 bytes
        ("abcde\u00e9 abcdefg\u00e9", ["ABCDE\u00c9", "abcdefg\u00c9"], 1 / 2),  # 7, 9 bytes
    ]
    got = consistency_scores([c for c, _, _ in cases], [s for _, s, _ in cases])
    np.testing.assert_allclose(got, [w for _, _, w in cases], rtol=0, atol=1e-15)
    np.testing.assert_allclose(got, [_reference_score(c, s) for c, s, _ in cases],
                               rtol=0, atol=1e-12)


@pytest.mark.parametrize("length", [7, 8, 9, 15, 16, 17, 24, 63, 64, 65, 100, 300])
def test_consistency_scores_long_tokens_at_text_boundaries(length):
    """A token of any length gets the same id wherever it sits: alone, after another token,
    at the end of a text followed by a text that starts with a token (its bytes lie back to
    back with the next text's)."""
    from fastuq.gate import consistency_scores

    tok = ("abcdefghijklmnopqrstuvwxyz" * 12)[:length]  # no digit: no number
    candidates = [f"{tok} q", tok + "Q", f"z{tok}"]
    samples = [[tok, f"z {tok}", tok], [tok.upper(), f"{tok}q"], [f"z{tok}", tok]]
    # {tok} of {tok, q}, {tok} of {z, tok, q}; {tok} = {tokq}: equal texts, then {tokq}
    # vs {tokq}: 1; ztok: equal, then 0 of {ztok, tok}
    want = [(1 / 2 + 1 / 3 + 1 / 2) / 3, (0 + 1) / 2, (1 + 0) / 2]
    got = consistency_scores(candidates, samples)
    np.testing.assert_allclose(got, want, rtol=0, atol=1e-15)
    np.testing.assert_allclose(got, [_reference_score(c, s)
                                     for c, s in zip(candidates, samples, strict=True)],
                               rtol=0, atol=1e-12)


def test_consistency_scores_long_samples_among_short_ones():
    """A sample of thousands of tokens in a task of short ones gets a matrix of its own
    (wider than 2040 columns: the plain count); values as the definition's. Tokens without
    digits, so that no text states an answer."""
    from fastuq.gate import consistency_scores

    def w(i: int) -> str:  # w + i in base 26, letters only
        out = ""
        while True:
            i, r = divmod(i, 26)
            out = chr(97 + r) + out
            if not i:
                return "w" + out

    candidates = [" ".join(w(i) for i in range(3000)), "a b"]
    samples = [[" ".join(w(i) for i in range(0, 6000, 2)), w(1), "x"],
               ["a", "b c"] + ["b  A"] * 30]
    # {w0, w2, .., w5998} and {w0, .., w2999}: 1500 of 4500; {w1}: 1 of 3000; {x}: 0
    want = [(1 / 3 + 1 / 3000 + 0) / 3, (1 / 2 + 1 / 3 + 30 * 1) / 32]
    got = consistency_scores(candidates, samples)
    np.testing.assert_allclose(got, want, rtol=0, atol=1e-15)
    np.testing.assert_allclose(got, [_reference_score(c, s)
                                     for c, s in zip(candidates, samples, strict=True)],
                               rtol=0, atol=1e-12)


def test_whitespace_is_pythons():
    from fastuq.gate import WHITESPACE

    assert set(WHITESPACE) == {c for c in map(chr, range(0x110000)) if c.isspace()}


def test_consistency_scores_unicode_fuzz():
    """Random texts from atoms with numbers, chains, case, Python-only whitespace, non-ASCII
    letters and digits, long tokens, glued to each other: exactly the definition's values."""
    from fastuq.gate import consistency_scores

    rng = np.random.default_rng(12)
    atoms = ["The", "answer", "is", "42", "-3", "2.5", "1.2.3", "Paris", "PARIS", "  ", "\n",
             "\x1c", "\xa0", "\u3000", "=", "3.0", "007", "carefully", "Supercalifragilistic",
             "abcdefgh", "abcdefghi", "\u0130stanbul", "\u212a", "\u039f\u0394\u039f\u03a3",
             "\u0663", "\u0661\u0662.\u0665", "-", "-.5", ".", "5.", "-0", "!", "\u00e9",
             "\u65e5\u672c", "1" * 20, "x2y3", "_", "\u20ac5"]

    def text():
        if rng.random() < 0.05:
            return rng.choice(["", "   ", None, "\x1c", "?", " ?", "!!"])
        parts = rng.choice(atoms, rng.integers(1, 9)).tolist()
        seps = rng.choice(["", " ", ", ", "\n", "."], len(parts))
        return "".join(a + b for a, b in zip(parts, seps, strict=True))

    candidates = [text() for _ in range(1500)]
    samples = [[text() for _ in range(rng.integers(0, 7))] if rng.random() > 0.03 else None
               for _ in range(1500)]
    want = [_reference_score(c, s) for c, s in zip(candidates, samples, strict=True)]
    # the reference sums Fractions: equal up to the float mean's rounding
    np.testing.assert_allclose(consistency_scores(candidates, samples), want, rtol=0,
                               atol=1e-12)


def test_consistency_scores_same_in_any_chunking(monkeypatch):
    """Tiny tasks (many chunks), one thread or several: the same values."""
    import fastuq.decisions.consistency as gate
    from fastuq.synth.self_consistency import self_consistency_corpus

    table = self_consistency_corpus(400, k=5, seed=9)
    cand = table.column("final_answer")
    samples = table.column("texts").combine_chunks().flatten()
    want = gate.consistency_scores(cand, samples)
    monkeypatch.setattr(gate, "_CHUNK_BYTES", 300)
    for threads in (1, 3):
        monkeypatch.setattr(gate, "_threads", lambda threads=threads: threads)
        np.testing.assert_array_equal(gate.consistency_scores(cand, samples), want)
    rows = table.to_pylist()
    np.testing.assert_allclose(
        want, [_reference_score(r["final_answer"], r["texts"][0]) for r in rows], rtol=0,
        atol=1e-12)


def test_consistency_scores_input_kinds():
    """Lists, NumPy, Arrow (string, large_string, string_view, list_view, chunked, sliced:
    offsets not at 0) and Polars inputs give the same scores."""
    import polars as pl
    import pyarrow as pa

    from fastuq.gate import consistency_scores

    candidates = ["a 1", None, "b c", "2", "x y z", "", "7"]
    samples = [["a", "1"], ["q"], None, ["2.0", None, " "], [], ["?"], ["seven 7", "8"]]
    want = [_reference_score(c, s) for c, s in zip(candidates, samples, strict=True)]
    np.testing.assert_array_equal(consistency_scores(candidates, samples), want)
    np.testing.assert_array_equal(
        consistency_scores(np.array(candidates, dtype=object), samples), want)
    for ctype, stype in ((pa.string(), pa.list_(pa.string())),
                         (pa.large_string(), pa.large_list(pa.large_string()))):
        c, s = pa.array(candidates, ctype), pa.array(samples, stype)
        np.testing.assert_array_equal(consistency_scores(c, s), want)
        np.testing.assert_array_equal(  # sliced: offset 2
            consistency_scores(c.slice(2), s.slice(2)), want[2:])
        np.testing.assert_array_equal(
            consistency_scores(pa.chunked_array([c.slice(0, 3), c.slice(3)]),
                               pa.chunked_array([s.slice(0, 3), s.slice(3)])), want)
    np.testing.assert_array_equal(
        consistency_scores(pa.array(candidates, pa.string_view()),
                           pa.array(samples, pa.list_view(pa.string_view()))), want)
    np.testing.assert_array_equal(
        consistency_scores(pl.Series(candidates), pl.Series(samples)), want)
    assert consistency_scores([], []).shape == (0,)


@pytest.mark.parametrize("candidates,samples,match", [
    (["a", "b"], [["a"]], "1 items for 2 candidates"),
    ("abc", [["a"]], "one string"),
    (["a", "b"], [["a"], "b"], "a string where a list belongs"),
    ([1, 2], [["a"], ["b"]], "candidates must be strings"),
    (["a"], [[1]], "samples must be lists of strings"),
    (np.array([["a"]]), [["a"]], "1-D"),
    (None, [["a"]], "candidates must be strings"),
])
def test_consistency_scores_bad_input(candidates, samples, match):
    from fastuq.gate import consistency_scores

    with pytest.raises(ValueError, match=match):
        consistency_scores(candidates, samples)


def test_consistency_scores_bad_arrow_types():
    import pyarrow as pa

    from fastuq.gate import consistency_scores

    with pytest.raises(ValueError, match="candidates must be strings, got Arrow type int64"):
        consistency_scores(pa.array([1]), [["a"]])
    with pytest.raises(ValueError, match="samples must be lists of strings, got Arrow type"):
        consistency_scores(["a"], pa.array([[1]]))


def test_gate_computes_consistency_from_a_self_consistency_corpus(tmp_path, capsys):
    """A hand-written self-consistency corpus (protocol self_consistency: round 0 holds the
    k samples, final_answer the candidate): the scores are the definition's, and the gate
    calibrates on them as a confidence (high passes)."""
    import json

    import pyarrow.parquet as pq

    from fastuq.cli import main
    from fastuq.gate import calibrate_threshold, corpus_consistency

    rng = np.random.default_rng(8)
    rows = []
    for k in range(80):
        gold = int(rng.integers(0, 50))
        candidate = str(gold if rng.random() < 0.6 else gold + 1)
        samples = [f"so the answer is {gold if rng.random() < 0.7 else gold + 2}"
                   for _ in range(int(rng.integers(1, 6)))]
        rows.append({"trajectory_id": f"q{k}", "protocol": "self_consistency",
                     "n_agents": len(samples), "texts": [samples], "final_answer": candidate,
                     "correct": candidate == str(gold)})
    path = tmp_path / "sc.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    want = np.array([_reference_score(r["final_answer"], r["texts"][0]) for r in rows])
    got = corpus_consistency(path, chunk_rows=16)  # several chunks
    assert got["trajectory_id"].to_list() == [r["trajectory_id"] for r in rows]
    np.testing.assert_allclose(got["consistency"].to_numpy(), want, rtol=0, atol=1e-12)

    out = tmp_path / "v.parquet"
    assert main(["gate", str(path), "--score", "consistency", "--alpha", "0.3",
                 "--delta", "0.1", "-o", str(out)]) == 0
    printed = capsys.readouterr().out
    expected = calibrate_threshold(want, np.array([r["correct"] for r in rows]), 0.3, 0.1,
                                   higher_passes=True)
    assert f"{expected.n_passed:,} of 80" in printed
    verdicts = pq.read_table(out)
    np.testing.assert_array_equal(verdicts["passed"].to_numpy(),
                                  want >= expected.threshold)


def test_simulated_self_consistency_corpus_carries_signal(tmp_path):
    import pyarrow.parquet as pq
    from sklearn.metrics import roc_auc_score

    from fastuq.gate import corpus_consistency
    from fastuq.synth.self_consistency import self_consistency_corpus

    table = self_consistency_corpus(1500, k=6, seed=3)
    assert table.equals(self_consistency_corpus(1500, k=6, seed=3))  # seeded
    assert not table.equals(self_consistency_corpus(1500, k=6, seed=4))
    path = tmp_path / "sc.parquet"
    pq.write_table(table, path)  # the readers validate it against the canonical schema
    got = corpus_consistency(path, chunk_rows=500)
    rows = table.to_pylist()
    want = [_reference_score(r["final_answer"], r["texts"][0]) for r in rows]
    np.testing.assert_allclose(got["consistency"].to_numpy(), want, rtol=0, atol=1e-12)
    labels = np.array([r["correct"] for r in rows])
    assert all(len(r["texts"]) == 1 and len(r["texts"][0]) == 6 for r in rows)
    assert 0.3 < labels.mean() < 0.7
    assert roc_auc_score(labels, want) > 0.75  # real, imperfect signal
