"""Budget-policy replay (fastuq.replay, ``fastuq replay``): a hand-built 3-agent, 3-round
corpus whose stop rounds, answers, calls and flips are worked out below by hand; the
vectorized grid evaluation against the direct one; chunking; the DyLAN-style final answer."""

from __future__ import annotations

import json

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from fastuq.cli import main
from fastuq.replay import Policy, grid_sums, pareto_front, replay, stop_rounds

# Reference "5" everywhere. Per trajectory: the answers of rounds 0, 1, 2 (3 agents), and
# worked out by hand: the majority answer per round (ties to the lowest slot), whether it is
# correct, the agreement (modal votes / 3).
#   T1  5 5 3 | 5 5 5 | 5 5 5   majority 5 5 5   correct T T T   agreement 2/3 1 1
#   T2  3 3 5 | 3 5 5 | 5 5 5   majority 3 5 5   correct F T T   agreement 2/3 2/3 1
#   T3  5 3 4 | 3 3 4 | 3 3 3   majority 5 3 3   correct T F F   agreement 1/3 2/3 1
#        (round 0: three classes of one vote each, the tie goes to slot 0's "5")
#   T4  4 4 4 | 4 4 4 | 5 5 5   majority 4 4 5   correct F F T   agreement 1 1 1
ANSWERS = [
    [["5", "5", "3"], ["5", "5", "5"], ["5", "5", "5"]],
    [["3", "3", "5"], ["3", "5", "5"], ["5", "5", "5"]],
    [["5", "3", "4"], ["3", "3", "4"], ["3", "3", "3"]],
    [["4", "4", "4"], ["4", "4", "4"], ["5", "5", "5"]],
]


def _corpus(belief: bool = False) -> pa.Table:
    cols = {
        "trajectory_id": [f"T{k + 1}" for k in range(4)],
        "protocol": ["debate"] * 4,
        "n_agents": pa.array([3] * 4, pa.int32()),
        "reference": ["5"] * 4,
        "answers": ANSWERS,
        "token_entropy": [[0.0, 0.0, 0.0]] * 4,
        "correct": [True, True, False, True],
    }
    if belief:
        cols["belief"] = [[[0.9] * 3] * 3] * 4
    return pa.table(cols)


def _row(result, **match) -> dict:
    rows = [r for r in result.table.to_pylist()
            if all(r[k] == v if not isinstance(v, float) else abs(r[k] - v) < 1e-12
                   for k, v in match.items())]
    assert len(rows) == 1, (match, rows)
    return rows[0]


def test_fixed_rounds_and_the_full_debate_by_hand():
    res = replay(_corpus(), ["fixed"])
    # full debate (stop at round 2): correct T T F T, 9 calls each, T3 flips (right at 0)
    assert res.full["accuracy"] == 0.75 and res.full["calls_mean"] == 9.0
    assert res.full["flips"] == 1
    r1 = _row(res, policy="fixed", rounds=1)  # stop 0: T F T F, 3 calls, no flips
    assert (r1["accuracy"], r1["calls_mean"], r1["flips"], r1["stop_mean"]) == (0.5, 3.0, 0, 0)
    assert r1["calls_saved"] == 36 - 12 and r1["calls_saved_frac"] == pytest.approx(24 / 36)
    r2 = _row(res, policy="fixed", rounds=2)  # stop 1: T T F F, 6 calls, T3 flips
    assert (r2["accuracy"], r2["calls_mean"], r2["flips"]) == (0.5, 6.0, 1)
    r3 = _row(res, policy="fixed", rounds=3)
    assert (r3["accuracy"], r3["calls_mean"], r3["flips"]) == (0.75, 9.0, 1)


def test_uaad_stop_rule_by_hand():
    res = replay(_corpus(), [Policy("uaad", tau_c=[0.6, 0.8], epsilon=[0.05, 0.4])])
    # tau .8, eps .05: T1 stops at 2 (moved 1/3 at round 1, 0 at 2), T2 and T3 reach no
    # stable consensus (cap 2), T4 stops at 1 (unanimous twice): T T F F, calls 9 9 9 6
    r = _row(res, policy="uaad", tau_c=0.8, epsilon=0.05)
    assert (r["accuracy"], r["calls_mean"], r["flips"], r["stop_mean"]) == (0.5, 8.25, 1, 1.75)
    # tau .6, eps .4: everyone stops at round 1: T T F F, 6 calls, T3 flips
    r = _row(res, policy="uaad", tau_c=0.6, epsilon=0.4)
    assert (r["accuracy"], r["calls_mean"], r["flips"], r["stop_mean"]) == (0.5, 6.0, 1, 1.0)
    # UAAD's own budget without routing: Q = 3 + 3 stop + 1
    assert r["calls_uaad_mean"] == 3 + 3 * 1.0 + 1
    # tau .6, eps .05: T1 (moved 1/3 at 1, 0 at 2) -> 2; T2 (2/3 twice) -> 1; T3 -> 2; T4 -> 1
    r = _row(res, policy="uaad", tau_c=0.6, epsilon=0.05)
    assert (r["accuracy"], r["calls_mean"], r["stop_mean"]) == (0.5, 7.5, 1.5)


def test_uaad_route_by_hand():
    # Derived round-0 risk (h = 0: zero entropy): .35 q + .20 d
    #   T1, T2: q = 1/3, d = 2/3 (one agreeing pair of three) -> 0.25, low (cap 1, N = 1)
    #   T3: q = 2/3, d = 1 -> 0.4333, medium (cap 1, N = 3);  T4: 0, low
    # tau .8, eps .05: all stop at round 1 (the cap; T4 by consensus): T T F F
    res = replay(_corpus(), [Policy("uaad_route", tau_c=[0.8], epsilon=[0.05])])
    r = _row(res, policy="uaad_route")
    assert (r["accuracy"], r["calls_mean"], r["flips"], r["stop_mean"]) == (0.5, 6.0, 1, 1.0)
    # Q = M + N R + 1: T1, T2, T4 low 3 + 1 + 1 = 5, T3 medium 3 + 3 + 1 = 7
    assert r["calls_uaad_mean"] == pytest.approx((5 + 5 + 7 + 5) / 4, abs=1e-12)
    assert any("derived" in note for note in res.notes)
    # the tiers' round budgets are parameters: high budgets everywhere give the plain rule
    big = {"rounds_low": 5, "rounds_medium": 5, "rounds_high": 5}
    res = replay(_corpus(), [Policy("uaad_route", tau_c=[0.8], epsilon=[0.05])], params=big)
    assert _row(res, policy="uaad_route")["calls_mean"] == 8.25


def test_uaad_route_matches_the_uaad_kernel_stop():
    import fastuq
    from fastuq.cli import sample_corpus_path

    table = pq.read_table(sample_corpus_path())
    table = table.filter(pa.compute.equal(table.column("protocol"), "debate"))
    scores = fastuq.score(table, methods=["uaad"]).column("uaad_stop").to_numpy()
    res = replay(table, [Policy("uaad_route", tau_c=[0.8], epsilon=[0.05])])
    assert _row(res, policy="uaad_route")["stop_mean"] == pytest.approx(scores.mean(), abs=1e-12)


def test_bccs_first_full_consensus_by_hand():
    # beliefs 0.9 everywhere: full consensus needs all three agents (p_s > 2/3): T1 at round
    # 1, T2 and T3 at 2, T4 at 0 -> correct T T F F, calls 6 9 9 3, T3 flips
    res = replay(_corpus(belief=True), ["bccs"])
    r = _row(res, policy="bccs")
    assert (r["accuracy"], r["calls_mean"], r["flips"], r["stop_mean"]) == (0.5, 6.75, 1, 1.25)


def test_trace_threshold_on_mean_agreement_by_hand():
    # mean_agreement after round t = -mean(agreement[0..t]):
    #   T1 -2/3 -5/6 -8/9;  T2 -2/3 -2/3 -7/9;  T3 -1/3 -1/2 -2/3;  T4 -1 -1 -1
    # threshold -0.8: T1 stops at 1, T2 and T3 never (2), T4 at 0 -> T T F F, 6 9 9 3
    res = replay(_corpus(), [Policy("trace", estimator="mean_agreement",
                                    thresholds=[-0.8, 0.0])])
    r = _row(res, policy="trace", threshold=-0.8)
    assert (r["accuracy"], r["calls_mean"], r["flips"], r["stop_mean"]) == (0.5, 6.75, 1, 1.25)
    r = _row(res, policy="trace", threshold=0.0)  # everything passes after round 0
    assert (r["accuracy"], r["calls_mean"], r["stop_mean"]) == (0.5, 3.0, 0.0)


def test_pareto_front_by_hand():
    calls = np.array([3.0, 6.0, 9.0, 6.0, 4.0, 4.0])
    acc = np.array([0.5, 0.5, 0.75, 0.6, 0.4, 0.5])
    # (3, .5) beats (4, .4), (4, .5) and (6, .5); (6, .6) and (9, .75) climb
    assert pareto_front(calls, acc).tolist() == [True, False, True, True, False, False]


@settings(max_examples=60, deadline=None)
@given(seed=st.integers(0, 2**32 - 1), t=st.integers(1, 6), n=st.integers(1, 30),
       g=st.integers(1, 9))
def test_grid_sums_equal_the_direct_evaluation(seed, t, n, g):
    rng = np.random.default_rng(seed)
    active = rng.random((t, n)) < 0.5
    first = rng.integers(0, g + 2, (t, n))  # g and above: never within the grid
    cap = rng.integers(0, t, n)
    metrics = rng.normal(size=(3, t, n))
    got = grid_sums(metrics, active, first, cap, g)
    for j in range(g):
        stop = stop_rounds(active, first, cap, j)
        want = metrics[:, stop, np.arange(n)].sum(axis=1)
        np.testing.assert_allclose(got[:, j], want, rtol=0, atol=1e-9)


def test_replay_is_chunk_invariant():
    from fastuq.cli import sample_corpus_path

    pols = ["fixed", Policy("uaad", tau_c=[0.5, 0.8, 1.0], epsilon=[0.0, 0.1, 0.5]),
            Policy("trace", estimator="sauce", thresholds=[-0.9, -0.6, -0.3])]
    path = sample_corpus_path()
    whole = replay(path, pols, chunk_rows=1 << 18).table
    parts = replay(path, pols, chunk_rows=333).table
    for c in ("accuracy", "calls_mean", "flips", "stop_mean"):
        np.testing.assert_allclose(parts.column(c).to_numpy(), whole.column(c).to_numpy(),
                                   rtol=0, atol=1e-12)


def test_full_debate_matches_the_corpus_labels_on_the_sample():
    from fastuq.cli import sample_corpus_path

    table = pq.read_table(sample_corpus_path())
    res = replay(table, ["fixed"])
    assert res.full["accuracy"] == pytest.approx(
        float(np.mean(table.column("correct").to_numpy())), abs=1e-12)


def test_replay_needs_a_reference_and_rejects_unknown_policies():
    with pytest.raises(ValueError, match="reference"):
        replay(_corpus().drop(["reference"]), ["fixed"])
    with pytest.raises(ValueError, match="unknown policy"):
        Policy("never")
    with pytest.raises(ValueError, match="tau_c"):
        Policy("uaad", tau_c=[1.5])
    with pytest.raises(ValueError, match="estimator"):
        Policy("trace")


def test_cli_replay_writes_table_and_plot(tmp_path, capsys):
    src = tmp_path / "c.parquet"
    pq.write_table(_corpus(), src)
    out, fig = tmp_path / "r.parquet", tmp_path / "r.png"
    rc = main(["replay", str(src), "--policy", "fixed,uaad,trace:mean_agreement",
               "--tau-c", "0.6,0.8", "--epsilon", "0:0.4:3", "--thresholds=-0.8,0",
               "-o", str(out), "--plot", str(fig)])
    assert rc == 0
    text = capsys.readouterr().out
    assert "full debate: accuracy 0.7500" in text and "Pareto front" in text
    table = pq.read_table(out)
    assert table.num_rows == 3 + 2 * 3 + 2
    assert fig.stat().st_size > 1000
    rc = main(["replay", str(src), "--thresholds", "4"])  # no trace policy
    assert rc == 2 and "trace" in capsys.readouterr().err


# --- one final-answer rule: a full-length replay gives the import's answers --------------------

REPO = __import__("pathlib").Path(__file__).resolve().parents[1]
DATA = REPO / "tests" / "data"
#: the 4,800 real DyLAN MATH records beside the repository (as the notebooks read them; CI
#: has them); elsewhere the 44-record slice of the same logs the tests carry
DYLAN_ALL = REPO.parent / "shared" / "data" / "dylan_math"
if not DYLAN_ALL.is_dir():
    DYLAN_ALL = DATA / "dylan_math"


@pytest.fixture(scope="module")
def dylan_all() -> pa.Table:
    from fastuq.importers import import_dylan

    return import_dylan(DYLAN_ALL)


def _last_round(table: pa.Table) -> tuple[np.ndarray, np.ndarray]:
    """(replay's verdict at each trajectory's last round, the slot of its answer there by
    the final-answer rule), from one batch of the whole table."""
    from fastuq.engine.batch import Batch
    from fastuq.replay import round_answer_slots, round_outcomes

    batch = Batch(table)
    out = round_outcomes(batch)
    cols = np.arange(table.num_rows)
    return out.correct[out.last, cols], round_answer_slots(batch)[out.last, cols]


def test_full_length_replay_of_the_dylan_logs_gives_the_imports_answers(dylan_all):
    table = dylan_all
    assert table.num_rows == (4800 if DYLAN_ALL.parent.name == "data" and
                              DYLAN_ALL.parents[1].name == "shared" else 44)
    correct = np.asarray(table.column("correct").to_pylist(), bool)
    finals = table.column("final_answer").to_pylist()
    answers = table.column("answers").to_pylist()
    res = replay(table, ["fixed"])
    assert res.full["accuracy"] == correct.mean()
    # every trajectory, with the corpus's final_answer at the last round ...
    verdict, _ = _last_round(table)
    assert (verdict == correct).all(), np.flatnonzero(verdict != correct)
    # ... and without it: the rule itself over the active agents (the ranker's survivors)
    # gives the importer's answer string and verdict for every record
    bare = table.drop(["final_answer"])
    verdict, slot = _last_round(bare)
    assert (verdict == correct).all(), np.flatnonzero(verdict != correct)
    got = [None if s < 0 else a[-1][s] for a, s in zip(answers, slot.tolist(), strict=True)]
    differ = [i for i, (g, f) in enumerate(zip(got, finals, strict=True)) if g != f]
    assert differ == []
    assert replay(bare, ["fixed"]).full["accuracy"] == correct.mean()


def test_full_length_replay_of_ford_debates_gives_fords_answers():
    # FORD's rule votes over every turn: final/anli:1 (turns A, B, A, C, C) ends agreeing on
    # the gold C, but its final answer is A, so the import, and the full replay, count it
    # wrong; the majority of its last round alone ([C, None]) would be right
    from fastuq.importers import import_ford

    table = import_ford(DATA / "ford")
    correct = np.asarray(table.column("correct").to_pylist(), bool)
    ids = table.column("trajectory_id").to_pylist()
    assert not correct[ids.index("final/anli:1")]
    verdict, _ = _last_round(table)
    assert (verdict == correct).all(), [ids[i] for i in np.flatnonzero(verdict != correct)]
    res = replay(table, ["fixed"])
    assert res.full["accuracy"] == correct.mean() == 6 / 9
    # stopping after round 0 applies the round rule (ties to slot 0), except where round 0
    # is the last round: anli:0 [A, B] -> A right, anli:1 A wrong, copa:0 [A, B] -> A wrong,
    # copa:1 [-, A] -> A wrong, copa:2 A right, copa:3 nothing parses, wrong, the two
    # agreed debates right (their final answers), the round table [B, -, B] -> B wrong
    r = _row(res, policy="fixed", rounds=1)
    assert (r["n"], r["accuracy"]) == (9, 4 / 9)


def test_a_debate_without_reference_raises_or_is_skipped_and_counted(tmp_path, capsys):
    table = _corpus().set_column(3, "reference", pa.array(["5", None, "5", " "]))
    with pytest.raises(ValueError, match=r"trajectory 'T2' \(.*row 1\): field reference: "
                                         r"no reference"):
        replay(table, ["fixed"])
    skipped: list = []
    res = replay(table, ["fixed"], on_error="skip", skipped=skipped)
    # T1 and T3 remain: full debate T1 right, T3 wrong (see the table at the top)
    assert res.full["n"] == 2 and res.full["accuracy"] == 0.5
    assert [k.trajectory_id for k in res.skipped] == ["T2", "T4"] == \
        [k.trajectory_id for k in skipped]
    assert [k.row for k in res.skipped] == [1, 3]
    src = tmp_path / "c.parquet"
    pq.write_table(table, src)
    assert main(["replay", str(src), "--policy", "fixed"]) == 2
    assert "field reference" in capsys.readouterr().err
    listed = tmp_path / "skipped.jsonl"
    assert main(["replay", str(src), "--policy", "fixed", "--on-error", "skip",
                 "--skipped", str(listed)]) == 0
    captured = capsys.readouterr()
    assert "2 debates; full debate: accuracy 0.5000" in captured.out
    assert "skipped 2 bad record(s)" in captured.err
    assert len(listed.read_text().splitlines()) == 2


def test_pareto_front_collapses_exact_ties():
    from fastuq.replay import tie_counts

    calls = np.array([3.0, 3.0, 6.0, 6.0, 4.0, 9.0])
    acc = np.array([0.5, 0.5, 0.7, 0.7, 0.5, 0.7])
    # (3, .5) twice: the first only; (6, .7) twice: the first only; (4, .5), (9, .7) dominated
    assert pareto_front(calls, acc).tolist() == [True, False, True, False, False, False]
    assert tie_counts(calls, acc).tolist() == [2, 2, 2, 2, 1, 1]
    # replay: fixed rounds=1 and trace threshold 0 both stop every debate after round 0
    # (3 calls, accuracy .5, worked out above); the front lists that point once
    res = replay(_corpus(), ["fixed", Policy("trace", estimator="mean_agreement",
                                             thresholds=[-0.8, 0.0])])
    front = res.front().to_pylist()
    assert [(r["policy"], r["rounds"], r["calls_mean"], r["accuracy"], r["tied"])
            for r in front] == [("fixed", 1, 3.0, 0.5, 2), ("fixed", 3, 9.0, 0.75, 1)]


def test_readme_dylan_replay_example_runs(tmp_path, monkeypatch, capsys):
    # README, "Replay stopping and routing policies": its DyLAN replay line, as written, runs
    # on a DyLAN import (of the slices in tests/data), and the README shows that import
    import shlex

    text = (REPO / "README.md").read_text(encoding="utf-8")
    block = text.split("### Replay stopping and routing policies", 1)[1].split("```bash", 1)[1]
    lines = [ln.split("#")[0].strip() for ln in block.split("```", 1)[0].splitlines()]
    cmds = [shlex.split(ln)[1:] for ln in lines if "dylan.parquet" in ln]
    replays = [c for c in cmds if c[0] == "replay"]
    assert replays, cmds
    monkeypatch.chdir(tmp_path)
    assert main(["import", "dylan", str(DATA / "dylan_math"), "-o", "dylan.parquet"]) == 0
    capsys.readouterr()
    for argv in replays:
        assert main(argv) == 0, (argv, capsys.readouterr().err)
        out = capsys.readouterr().out
        assert "dylan.parquet: 44 debates; full debate: accuracy" in out
        assert "Pareto front" in out
    imports = [c for c in cmds if c[0] == "import"]
    assert [c[:2] + c[-2:] for c in imports] == [["import", "dylan", "-o", "dylan.parquet"]]


@pytest.mark.parametrize("fmt", ["jsonl", "parquet"])
def test_active_column_is_read_and_limits_each_rounds_vote(tmp_path, fmt):
    # a: round 0, all three active: 5 3 3 -> 3 (wrong); round 1 only slot 0 is still in the
    # team: its 5 decides (right) though the pruned agents' 3 3 are in the row.
    # b: no active column entry (null): everyone; 5 3 3 -> 3 (wrong)
    recs = [{"trajectory_id": "a", "n_agents": 3, "reference": "5", "protocol": "debate",
             "answers": [["5", "3", "3"], ["5", "3", "3"]],
             "active": [[True, True, True], [True, False, False]]},
            {"trajectory_id": "b", "n_agents": 3, "reference": "5", "protocol": "debate",
             "answers": [["5", "3", "3"]], "active": None}]
    path = tmp_path / f"c.{fmt}"
    if fmt == "jsonl":
        path.write_text("".join(json.dumps(r) + "\n" for r in recs))
    else:
        pq.write_table(pa.Table.from_pylist(recs), path)
    res = replay(path, ["fixed"])
    assert res.full["accuracy"] == 0.5
    assert _row(res, policy="fixed", rounds=1)["accuracy"] == 0.0


def test_bad_active_values_raise_or_are_skipped(tmp_path):
    recs = [{"trajectory_id": "a", "n_agents": 3, "reference": "5", "protocol": "debate",
             "answers": [["5", "3", "3"], ["5", "3", "3"]], "active": [[1, 1, 1], [1, 0, 0]]},
            {"trajectory_id": "b", "n_agents": 3, "reference": "5", "protocol": "debate",
             "answers": [["5", "3", "3"]], "active": [[1, 2, 1]]},
            {"trajectory_id": "c", "n_agents": 3, "reference": "5", "protocol": "debate",
             "answers": [["5", "5", "3"]], "active": [[1, 1]]}]
    path = tmp_path / "c.parquet"
    pq.write_table(pa.Table.from_pylist(recs), path)
    with pytest.raises(ValueError, match=r"row 1 \(trajectory_id 'b'\): field active: round 0, "
                                         r"agent 1: must be true/false \(or 0/1\), got 2"):
        replay(path, ["fixed"])
    res = replay(path, ["fixed"], on_error="skip")
    assert [k.trajectory_id for k in res.skipped] == ["b", "c"]
    assert "round 0 has 2 agent slots, but answers has 3" in res.skipped[1].reason
    assert (res.full["n"], res.full["accuracy"]) == (1, 1.0)  # a: slot 0's 5 at round 1


def test_cli_replay_math_checks_like_an_import_with_math(tmp_path, capsys):
    # "x^2+2x+1" is "(x+1)^2" only to math-verify: an import with --math labels it correct,
    # and replay --math gives the same verdict; without it the strings differ
    table = pa.table({"trajectory_id": ["m1"], "protocol": ["debate"],
                      "n_agents": pa.array([2], pa.int32()), "reference": ["(x+1)^2"],
                      "answers": [[["x^2+2x+1", "x^2+2x+1"]]], "final_answer": ["x^2+2x+1"]})
    src = tmp_path / "m.parquet"
    pq.write_table(table, src)
    assert main(["replay", str(src), "--policy", "fixed"]) == 0
    assert "full debate: accuracy 0.0000" in capsys.readouterr().out
    assert main(["replay", str(src), "--policy", "fixed", "--math"]) == 0
    assert "full debate: accuracy 1.0000" in capsys.readouterr().out
