"""fastuq.signals: corpus-scale builders against the scalar references, to 1e-12."""

import math

import numpy as np
import pyarrow as pa
import pytest
from hypothesis import given
from hypothesis import strategies as st

from fastuq import compute_token_entropy, majority_margin, synth
from fastuq.io.pack import pack_lists
from fastuq.signals import (
    add_signals,
    agreement_from_answers,
    logprob_stats,
    token_entropy_from_topk,
)

ANSWERS = pa.list_(pa.list_(pa.string()))
TOPK = pa.list_(pa.list_(pa.list_(pa.list_(pa.float32()))))
TOKENS = pa.list_(pa.list_(pa.list_(pa.float64())))

# --- strategies ----------------------------------------------------------------------------------

answer = st.one_of(st.none(), st.just(""), st.sampled_from(["1", "2", "3", "10", "x"]))


@st.composite
def trajectories(draw):
    """(answers rows, n_agents): ragged rounds, pruned rounds (short or null-padded lists),
    single agents, null and empty answers, null trajectories."""
    rows, teams = [], []
    for _ in range(draw(st.integers(0, 8))):
        team = draw(st.integers(1, 5))
        teams.append(team)
        if draw(st.integers(0, 9)) == 0:
            rows.append(None)
            continue
        rounds = []
        for _ in range(draw(st.integers(0, 4))):
            width = draw(st.integers(0, team))  # fewer slots: a pruned round
            rounds.append(draw(st.lists(answer, min_size=width, max_size=width)))
        rows.append(rounds)
    return rows, teams


# --- agreement -----------------------------------------------------------------------------------


def _scalar_agreement(rows, teams):
    out = []
    for rounds, team in zip(rows, teams, strict=True):
        out.append(None if rounds is None else [majority_margin(r, team) for r in rounds])
    return out


def _counted_agreement(rows, teams):
    """A reference apart from fastuq: modal count of non-empty answers over the team size,
    0.0 for a round in which nothing parses."""
    out = []
    for rounds, team in zip(rows, teams, strict=True):
        if rounds is None:
            out.append(None)
            continue
        vals = []
        for r in rounds:
            votes = [a for a in r if a]
            vals.append(max(votes.count(a) for a in votes) / team if votes else 0.0)
        out.append(vals)
    return out


def _close(got, ref):
    assert len(got) == len(ref)
    for g, r in zip(got, ref, strict=True):
        if r is None:
            assert g is None
            continue
        np.testing.assert_allclose(np.array(g, float), np.array(r, float), rtol=0, atol=1e-12)


@given(data=trajectories(), as_array=st.booleans())
def test_agreement_matches_majority_margin_on_ragged_inputs(data, as_array):
    rows, teams = data
    col = pa.array(rows, ANSWERS)
    n_agents = pa.array(teams, pa.int32()) if as_array else np.array(teams)
    ref = _scalar_agreement(rows, teams)
    _close(ref, _counted_agreement(rows, teams))
    got = agreement_from_answers(col, n_agents)
    assert got.type == pa.list_(pa.float64())
    _close(got.to_pylist(), ref)
    no_vote = [None if r is None else [not any(a for a in x) for x in r] for r in rows]
    nan_ref = [None if r is None else [math.nan if bad else v for v, bad in zip(r, b, strict=True)]
               for r, b in zip(ref, no_vote, strict=True)]
    _close(agreement_from_answers(col, n_agents, unparseable="nan").to_pylist(), nan_ref)
    if any(v for b in no_vote if b for v in b):
        with pytest.raises(ValueError, match="round .*no answer in the round is parseable"):
            agreement_from_answers(col, n_agents, unparseable="raise")


@given(data=trajectories(), cut=st.integers(0, 3))
def test_agreement_on_sliced_and_chunked_columns(data, cut):
    rows, teams = data
    cut = min(cut, len(rows))
    col = pa.array(rows, ANSWERS).slice(cut)
    chunked = pa.chunked_array([col[: len(col) // 2], col[len(col) // 2:]], type=ANSWERS)
    ref = _scalar_agreement(rows[cut:], teams[cut:])
    for c in (col, chunked):
        _close(agreement_from_answers(c, np.array(teams[cut:])).to_pylist(), ref)


def test_agreement_dylan_survivors_keep_the_team_denominator():
    col = pa.array([[["7", "8", "9"], [None, "7", "7"]]], ANSWERS)
    assert agreement_from_answers(col, 3).to_pylist() == [[1 / 3, 2 / 3]]


def test_agreement_single_agent_and_default_team_size():
    col = pa.array([[["4"]], [["4", None], ["", "5"]]], ANSWERS)
    assert agreement_from_answers(col).to_pylist() == [[1.0], [0.5, 0.5]]
    assert agreement_from_answers(col, np.array([1, 3])).to_pylist() == [[1.0], [1 / 3, 1 / 3]]


def test_agreement_equivalent_answers_vote_together_with_classes():
    col = pa.array([[["1/2", "0.5", "\\frac{1}{2}", "2"]], [["abc", None, "2"]]], ANSWERS)
    classes = np.array([0, 0, 0, 1, -1, -1, 1])  # "abc" unparseable: -1
    got = agreement_from_answers(col, 4, classes=classes).to_pylist()
    assert got == [[3 / 4], [1 / 4]]
    # default: exact string equality
    assert agreement_from_answers(col, 4).to_pylist() == [[1 / 4], [1 / 4]]


def test_agreement_classes_of_wrong_length_raise():
    col = pa.array([[["1", "2"]]], ANSWERS)
    with pytest.raises(ValueError, match="one id per answer slot"):
        agreement_from_answers(col, 2, classes=np.array([0]))


def test_agreement_unparseable_round_is_zero_by_default():
    # round 1 of t-b: no agent holds a parsed answer -> 0, as majority_margin and the
    # importers give it (this raised ValueError before)
    col = pa.array([[["1", "1"]], [["2", "2"], [None, ""]]], ANSWERS)
    assert agreement_from_answers(col, 2).to_pylist() == [[1.0], [1.0, 0.0]]
    assert majority_margin([None, ""], 2) == 0.0
    values, mask = agreement_from_answers(col, 2, padded=True)
    assert values[:, 1].tolist() == [1.0, 0.0] and mask[:, 1].tolist() == [True, True]
    assert add_signals(pa.table({"answers": col, "n_agents": [2, 2]}))[
        "agreement"].to_pylist() == [[1.0], [1.0, 0.0]]
    # a round without slots and without a team size: no agent holds an answer either
    assert agreement_from_answers(pa.array([[["3"], []]], ANSWERS)).to_pylist() == [[1.0, 0.0]]
    with pytest.raises(ValueError, match="unparseable must be"):
        agreement_from_answers(col, 2, unparseable="skip")


def test_agreement_unparseable_round_names_trajectory_and_round():
    col = pa.array([[["1", "1"]], [["2", "2"], [None, ""]]], ANSWERS)
    ids = pa.array(["t-a", "t-b"])
    with pytest.raises(ValueError, match=r"trajectory 't-b' \(row 1\): round 1: no answer"):
        agreement_from_answers(col, 2, ids=ids, unparseable="raise")
    got = agreement_from_answers(col, 2, unparseable="nan").to_pylist()
    assert got[0] == [1.0] and got[1][0] == 1.0 and math.isnan(got[1][1])


def test_score_derives_zero_agreement_for_an_unparseable_round():
    """``fastuq score`` / ``eval`` build agreement from ``answers`` when a corpus has no
    agreement column: a round where nothing parses counts 0 (it raised before)."""
    import fastuq

    table = pa.table({
        "trajectory_id": ["a", "b"], "protocol": ["debate", "debate"],
        "n_agents": pa.array([2, 2], pa.int32()),
        "answers": pa.array([[[None, None], ["7", "7"]], [["7", "8"], ["7", "7"]]], ANSWERS),
    })
    out = fastuq.score(table, ["mean_agreement", "last_agreement"])
    # a: rounds 0 and 1 -> mean of (0, 1); b: mean of (1/2, 1); scores are -agreement
    assert out["mean_agreement"].to_pylist() == pytest.approx([-0.5, -0.75], abs=1e-12)
    assert out["last_agreement"].to_pylist() == pytest.approx([-1.0, -1.0], abs=1e-12)


def test_agreement_more_slots_than_team_raises():
    col = pa.array([[["1", "1", "1"]]], ANSWERS)
    with pytest.raises(ValueError, match=r"row 0: round 0: answers has 3 slots, more than "
                                         r"n_agents = 2"):
        agreement_from_answers(col, 2)
    with pytest.raises(ValueError, match="n_agents must be positive"):
        agreement_from_answers(col, 0)


def test_agreement_wide_rounds_use_the_sorting_path():
    rng = np.random.default_rng(0)
    rows = [[[str(v) if v >= 0 else None for v in rng.integers(-1, 4, 40)] for _ in range(3)]
            for _ in range(20)]
    ref = _scalar_agreement(rows, [40] * 20)
    _close(agreement_from_answers(pa.array(rows, ANSWERS), 40).to_pylist(), ref)


def test_agreement_padded_equals_pack_lists():
    t = synth.corpus(300, protocol="mixed", seed=3)
    values, mask = agreement_from_answers(t["answers"], t["n_agents"], padded=True)
    ref, ref_mask = pack_lists(t["agreement"])
    np.testing.assert_array_equal(mask, ref_mask)
    np.testing.assert_allclose(values[mask], ref[ref_mask], rtol=0, atol=1e-12)


def test_agreement_reproduces_the_simulators_column():
    t = synth.corpus(2000, protocol="mixed", seed=5)
    got = agreement_from_answers(t["answers"], t["n_agents"], ids=t["trajectory_id"])
    np.testing.assert_allclose(np.asarray(got.values),
                               np.asarray(t["agreement"].combine_chunks().values), atol=1e-12)


# --- token entropy -------------------------------------------------------------------------------

logprob = st.one_of(st.floats(-30, 0, allow_nan=False, width=32), st.just(-math.inf))


@st.composite
def topk_trajectories(draw):
    """[traj][round][agent][token][k]: ragged tokens and k, silent agents (None), at least one
    speaking agent per round and one finite value per token."""
    rows = []
    for _ in range(draw(st.integers(0, 5))):
        if draw(st.integers(0, 9)) == 0:
            rows.append(None)
            continue
        team = draw(st.integers(1, 3))
        rounds = []
        for _ in range(draw(st.integers(0, 3))):
            nodes = []
            for a in range(draw(st.integers(1, team))):
                if a > 0 and draw(st.booleans()) and draw(st.booleans()):
                    nodes.append(None)
                    continue
                tokens = []
                for _ in range(draw(st.integers(1, 4))):
                    k = draw(st.integers(1, 4))
                    vals = draw(st.lists(logprob, min_size=k, max_size=k))
                    vals[draw(st.integers(0, k - 1))] = draw(
                        st.floats(-20, 0, allow_nan=False, width=32))
                    tokens.append(vals)
                nodes.append(tokens)
            rounds.append(nodes)
        rows.append(rounds)
    return rows


@given(rows=topk_trajectories(), same_k=st.booleans())
def test_token_entropy_matches_compute_token_entropy(rows, same_k):
    if same_k:  # the fast path: one k for every token (sorted: the finite value stays)
        def k3(tokens):
            return None if tokens is None else [(sorted(t, reverse=True) * 3)[:3] for t in tokens]

        rows = [None if r is None else [[k3(n) for n in rnd] for rnd in r] for r in rows]
    node, rnd = token_entropy_from_topk(pa.array(rows, TOPK))
    assert node.type == pa.list_(pa.list_(pa.float64()))
    assert rnd.type == pa.list_(pa.float64())
    node, rnd = node.to_pylist(), rnd.to_pylist()
    for i, traj in enumerate(rows):
        if traj is None:
            assert node[i] is None and rnd[i] is None
            continue
        assert len(rnd[i]) == len(traj)
        for t, agents in enumerate(traj):
            ref = [None if a is None else compute_token_entropy(a) for a in agents]
            assert len(node[i][t]) == len(ref)
            for g, r in zip(node[i][t], ref, strict=True):
                assert (g is None) == (r is None)
                if r is not None:
                    assert abs(g - r) <= 1e-12
            spoke = [r for r in ref if r is not None]
            assert abs(rnd[i][t] - sum(spoke) / len(spoke)) <= 1e-12


def test_token_entropy_reproduces_the_simulators_column():
    t = synth.corpus(500, protocol="mixed", topk=4, seed=2)
    _, rnd = token_entropy_from_topk(t["topk_logprobs"])
    np.testing.assert_allclose(np.asarray(rnd.values),
                               np.asarray(t["token_entropy"].combine_chunks().values),
                               rtol=0, atol=1e-12)


@pytest.mark.parametrize(
    ("node", "message"),
    [
        ([], r"round 1, agent 1: topk_logprobs: the response has no measured token"),
        ([[-0.1], [float("nan"), -1.0]],
         r"round 1, agent 1, token 1, alternative 0: .*must be <= 0 and not NaN"),
        ([[-0.1, 0.5]], r"round 1, agent 1, token 0, alternative 1: .*<= 0"),
        ([[-0.1], []], r"round 1, agent 1, token 1: .*the token has no log-probabilities"),
        ([[-math.inf, -math.inf]], r"round 1, agent 1, token 0: .*no finite log-probability"),
        ([[-0.1, None]], r"round 1, agent 1, token 0, alternative 1: .*null log-probability"),
    ],
    ids=["no_tokens", "nan", "positive", "token_without_alternatives", "all_minus_inf",
         "null_value"],
)
def test_token_entropy_errors_name_trajectory_round_agent(node, message):
    good = [[-0.5, -1.0]]
    rows = [[[good]], [[good, good], [good, node]]]
    with pytest.raises(ValueError, match=r"trajectory 'b' \(row 1\): " + message):
        token_entropy_from_topk(pa.array(rows, TOPK), ids=["a", "b"])


def test_token_entropy_round_without_a_speaker_raises():
    rows = [[[[[-0.1, -2.0]]], [None, None]]]
    with pytest.raises(ValueError, match=r"row 0: round 1: .*no agent of the round"):
        token_entropy_from_topk(pa.array(rows, TOPK))


# --- log-prob statistics -------------------------------------------------------------------------

token_lp = st.floats(-50, 0, allow_nan=False)


@given(rows=st.lists(st.one_of(st.none(), st.lists(st.lists(st.one_of(
    st.none(), st.lists(token_lp, max_size=6)), min_size=0, max_size=3), max_size=3)),
    max_size=6))
def test_logprob_stats_match_plain_sums(rows):
    stats = logprob_stats(pa.array(rows, TOKENS))
    seq, mean, n_tok = (c.to_pylist() for c in stats)
    assert stats.n_tokens.type == pa.list_(pa.list_(pa.int32()))
    for i, traj in enumerate(rows):
        if traj is None:
            assert seq[i] is None and mean[i] is None and n_tok[i] is None
            continue
        for t, agents in enumerate(traj):
            for a, toks in enumerate(agents):
                if toks is None:
                    assert seq[i][t][a] is None and n_tok[i][t][a] is None
                    continue
                assert abs(seq[i][t][a] - sum(toks)) <= 1e-12 * max(1.0, abs(sum(toks)))
                assert n_tok[i][t][a] == len(toks)
                if toks:
                    assert abs(mean[i][t][a] - sum(toks) / len(toks)) <= 1e-12
                else:
                    assert mean[i][t][a] is None


def test_logprob_stats_positive_value_names_the_token():
    rows = [[[[-0.1, -0.2]], [[-0.3], [-0.1, 0.2]]]]
    with pytest.raises(ValueError, match=r"trajectory 'x' \(row 0\): round 1, agent 1, "
                                         r"token 1: token_logprobs"):
        logprob_stats(pa.array(rows, TOKENS), ids=pa.array(["x"]))


def test_logprob_stats_reproduce_the_simulators_columns():
    t = synth.corpus(400, protocol="mixed", topk=3, seed=1)
    stats = logprob_stats(t["token_logprobs"])
    ref = t["seq_logprob"].combine_chunks().values.values.to_numpy(zero_copy_only=False)
    got = stats.seq_logprob.values.values.to_numpy(zero_copy_only=False)
    np.testing.assert_allclose(got, ref, rtol=1e-12, atol=1e-9)
    assert stats.n_tokens.equals(t["n_tokens"].combine_chunks())


def test_add_signals_fills_missing_columns_only():
    t = synth.corpus(200, protocol="mixed", topk=2, seed=4)
    bare = t.drop_columns(["agreement", "token_entropy", "seq_logprob", "n_tokens"])
    full = add_signals(bare)
    for name in ("agreement", "token_entropy", "seq_logprob"):
        np.testing.assert_allclose(
            np.asarray(pa.chunked_array(full[name]).combine_chunks().flatten().flatten()
                       if name == "seq_logprob" else full[name].combine_chunks().flatten(),
                       float),
            np.asarray(t[name].combine_chunks().flatten().flatten() if name == "seq_logprob"
                       else t[name].combine_chunks().flatten(), float),
            rtol=1e-12, atol=1e-9)
    assert "mean_logprob" in full.column_names
    kept = add_signals(t)
    assert kept["agreement"].equals(t["agreement"])
