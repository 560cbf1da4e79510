"""Answer entropy, number of answer sets and CoCoA (kernels/answer_sets.py): hand-worked
debates checked against lm-polygraph's definitions, the jitted kernels and NumPy twins
against the exact references of tests/_references.py on drawn ragged batches, exactness
(slot order, slot padding, batch), and the engine's ``--method all``.

Tolerances: float64 to 1e-12 relative. float32, stated per estimator: the entropy's terms
are non-negative (no cancellation), each rounded a few times (share, quotient, log, product)
and added in order, so |error| <= (A + 8) eps32 (1 + H) for A slots; CoCoA's are
non-negative too: relative error <= (log2 A + T + 8) eps32 (products, the slot tree, the
divisions, the sum over T rounds); the number of sets is an integer, exact in both dtypes.
"""

from __future__ import annotations

import math

import jax
import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from _references import answer_sets_exact, cocoa_exact
from hypothesis import given
from hypothesis import strategies as st

import fastuq
from fastuq.cli import main
from fastuq.kernels import answer_sets as S

EPS32 = float(np.finfo(np.float32).eps)
SET_OUTPUTS = ("answer_entropy", "answer_entropy_mean", "num_answer_sets",
               "num_answer_sets_mean")
COCOA_OUTPUTS = ("cocoa", "cocoa_mean")
T_PAD, N_PAD, A_PAD = 6, 8, 16  # padded extents of the drawn batches: one compile per dtype


# ------------------------------------------------------------------- hand-worked debates
#
# lm-polygraph's definitions, with a round's agents as the samples and answer equality as
# the semantic relation (the similarity g_ij is 1 for equal answers, else 0):
#   SemanticEntropy (class probabilities by frequency, the "mean" estimator):
#       -(1/M) sum_j log(|class(j)| / M)
#   NumSemSets: the number of classes
#   CoCoA (SemanticEnrichedMaxprobAveDissimilarity, sample i as the output):
#       (-log p_i) * sum_{j != i} (1 - g_ij) / (M - 1)
# with M the team (an agent without a parseable answer is a sample whose answer nobody
# shares: a class of its own). fastuq's cocoa is the mean over the round's agents of the
# per-agent value.

THREE = {"trajectory_id": "three", "protocol": "debate", "n_agents": 3,
         "answers": [["12", "12", "7"]], "seq_logprob": [[-0.2, -0.9, -1.6]],
         "correct": True}
FIVE = {"trajectory_id": "five", "protocol": "debate", "n_agents": 5,
        # "3/4" and "0.75" are one answer (agreement's equivalence); one agent unparseable
        "answers": [["3/4", "0.75", "1", "2", None], ["0.75"] * 5],
        "seq_logprob": [[-0.5, -1.0, -2.0, -1.0, -3.0], [-0.1] * 5], "correct": False}
DYLAN = {"trajectory_id": "dylan", "protocol": "dylan", "n_agents": 4,
         # two survivors of a team of four agree; the pruned two stay in the team
         "answers": [["5", "5", None, None]], "seq_logprob": [[-1.0, -1.0, None, None]],
         "correct": True}

HAND = {
    # three agents, answers {12, 12, 7}:
    #   entropy = -(2 log(2/3) + log(1/3)) / 3 = ln 3 - (2/3) ln 2
    #   sets = 2
    #   cocoa per agent: 0.2 * (1/2), 0.9 * (1/2), 1.6 * (2/2) -> mean (0.1 + 0.45 + 1.6) / 3
    "three": {"answer_entropy": math.log(3) - 2 / 3 * math.log(2),  # 0.636514168294813
              "answer_entropy_mean": 0.636514168294813,
              "num_answer_sets": 2.0, "num_answer_sets_mean": 2.0,
              "cocoa": 2.15 / 3, "cocoa_mean": 2.15 / 3},
    # five agents, round 0 {3/4, 3/4, 1, 2, unparseable}: groups of 2, 1, 1, 1:
    #   entropy = (2/5) ln(5/2) + 3 (1/5) ln 5 = 1.3321790402101221; sets = 4
    #   cocoa: 0.5 * 3/4, 1.0 * 3/4, 2.0 * 4/4, 1.0 * 4/4, 3.0 * 4/4 -> 7.125 / 5 = 1.425
    # round 1, unanimous: entropy 0, sets 1, cocoa 0.1 * 0/4 = 0
    "five": {"answer_entropy": 0.0, "answer_entropy_mean": 1.3321790402101221 / 2,
             "num_answer_sets": 1.0, "num_answer_sets_mean": 2.5,
             "cocoa": 0.0, "cocoa_mean": 1.425 / 2},
    # team of four, two survivors agree: groups 2, 1, 1:
    #   entropy = (1/2) ln 2 + 2 (1/4) ln 4 = 1.5 ln 2; sets 3
    #   cocoa: the two scored agents, 1.0 * (3 - 1)/3 each -> 2/3
    "dylan": {"answer_entropy": 1.5 * math.log(2), "answer_entropy_mean": 1.5 * math.log(2),
              "num_answer_sets": 3.0, "num_answer_sets_mean": 3.0,
              "cocoa": 2 / 3, "cocoa_mean": 2 / 3},
}


def _hand_table() -> pa.Table:
    return pa.Table.from_pylist([THREE, FIVE, DYLAN])


@pytest.mark.parametrize("dtype", ["float64", "float32"])
@pytest.mark.parametrize("backend", ["jax", "numpy"])
def test_hand_worked_three_and_five_agent_debates_match_lm_polygraph_definitions(
        dtype, backend):
    got = fastuq.score(_hand_table(), list(SET_OUTPUTS + COCOA_OUTPUTS), dtype=dtype,
                       backend=backend)
    tol = 1e-12 if dtype == "float64" else 4e-7
    for k, tid in enumerate(got["trajectory_id"].to_pylist()):
        for column, want in HAND[tid].items():
            value = got[column][k].as_py()
            assert value == pytest.approx(want, rel=tol, abs=tol), (tid, column, dtype)
    # the hand numbers are the exact references' too
    for row in (THREE, FIVE, DYLAN):
        want = HAND[row["trajectory_id"]]
        # the references compare answers as strings: spell the equivalent ones alike
        answers = [["0.75" if a == "3/4" else a for a in r] for r in row["answers"]]
        ref = answer_sets_exact(answers, row["n_agents"])
        ref.update(cocoa_exact([list(zip(a, c, strict=True)) for a, c in
                                zip(answers, row["seq_logprob"], strict=True)],
                               row["n_agents"]))
        for column in want:
            assert ref[column] == pytest.approx(want[column], rel=1e-15, abs=1e-15)


def test_cocoa_follows_the_confidence_choice():
    """``confidence=mean_logprob`` is lm-polygraph's CocoaPPL: -seq_logprob / n_tokens."""
    row = {**THREE, "n_tokens": [[2, 3, 4]]}
    got = fastuq.score(pa.Table.from_pylist([row]), "cocoa", confidence="mean_logprob")
    # 0.2/2 * 1/2 + 0.9/3 * 1/2 + 1.6/4 * 1 = 0.05 + 0.15 + 0.4 = 0.6, mean over 3 agents
    assert got["cocoa"][0].as_py() == pytest.approx(0.2, rel=1e-12)


def test_a_round_where_nobody_answered_is_the_least_certain():
    rows = [{"trajectory_id": "none", "n_agents": 3, "answers": [[None, None, None]]},
            {"trajectory_id": "one", "n_agents": 3, "answers": [["4", None, None]]},
            {"trajectory_id": "all", "n_agents": 3, "answers": [["4", "4", "4"]]}]
    got = fastuq.score(pa.Table.from_pylist(rows), ["answer_entropy", "num_answer_sets"])
    # nobody / one answer: three groups of one (ln 3, 3 sets); unanimous: 0, 1
    np.testing.assert_allclose(got["answer_entropy"].to_numpy(),
                               [math.log(3), math.log(3), 0.0], rtol=1e-15, atol=0)
    assert got["num_answer_sets"].to_pylist() == [3.0, 3.0, 1.0]


# ------------------------------------------------------------- kernels against references


def _draw(seed: int, ties: bool):
    """A padded ragged batch: 1..T_PAD rounds (some trajectories with none), teams of
    1..A_PAD agents (``n_agents`` sometimes above the slots that speak), answers from a few
    classes (ties between classes) with unparseable / silent agents, confidences with
    zeros, garbage (NaN, random classes) in every masked place."""
    rng = np.random.default_rng(seed)
    rounds = rng.integers(0, T_PAD + 1, N_PAD)
    round_mask = np.arange(T_PAD)[:, None] < rounds[None, :]
    slots = rng.integers(1, A_PAD + 1, N_PAD)
    team = slots + rng.integers(0, 3, N_PAD) * (rng.random(N_PAD) < 0.3)
    speaks = np.arange(A_PAD)[None, None, :] < slots[None, :, None]
    k = 2 if ties else int(rng.integers(1, 7))
    cls = rng.integers(0, k, (T_PAD, N_PAD, A_PAD)).astype(np.int32)
    answered = speaks & round_mask[:, :, None] & (rng.random(cls.shape) > 0.2)
    cls = np.where(answered, cls, -1)
    cls[~round_mask] = rng.integers(-1, 9, cls[~round_mask].shape)  # garbage: masked
    conf = -rng.exponential(1.5, cls.shape) * (rng.random(cls.shape) > 0.1)
    node_mask = speaks & round_mask[:, :, None] & (rng.random(cls.shape) < 0.85)
    conf[~node_mask] = np.nan
    return cls, team.astype(float), round_mask, conf, node_mask


def _references(cls, team, round_mask, conf, node_mask):
    out = {c: [] for c in SET_OUTPUTS + COCOA_OUTPUTS}
    for n in range(cls.shape[1]):
        rounds = [[None if c < 0 else int(c) for c in cls[t, n]]
                  for t in range(cls.shape[0]) if round_mask[t, n]]
        sets = answer_sets_exact(rounds, int(team[n])) if rounds else dict.fromkeys(
            SET_OUTPUTS, math.nan)
        nodes = [[(None if cls[t, n, a] < 0 else int(cls[t, n, a]),
                   float(conf[t, n, a]) if node_mask[t, n, a] else None)
                  for a in range(cls.shape[2])]
                 for t in range(cls.shape[0]) if round_mask[t, n]]
        for column, value in {**sets, **cocoa_exact(nodes, int(team[n]))}.items():
            out[column].append(value)
    return {k: np.asarray(v) for k, v in out.items()}


def _run(cls, team, round_mask, conf, node_mask, dtype, backend):
    if backend == "jax":
        with jax.enable_x64(dtype == np.float64):
            sets = S.answer_sets_scan(cls, team.astype(dtype), round_mask, fields=SET_OUTPUTS)
            coc = S.cocoa_scan(conf.astype(dtype), cls, team.astype(dtype), node_mask,
                               fields=COCOA_OUTPUTS)
            return {k: np.asarray(v) for k, v in {**sets, **coc}.items()}
    sets = S.answer_sets_scan_numpy(cls, team.astype(dtype), round_mask, fields=SET_OUTPUTS)
    coc = S.cocoa_scan_numpy(conf.astype(dtype), cls, team.astype(dtype), node_mask,
                             fields=COCOA_OUTPUTS)
    return {**sets, **coc}


@given(seed=st.integers(0, 2**32 - 1), ties=st.booleans())
def test_kernels_and_twins_match_the_exact_references_on_ragged_batches(seed, ties):
    cls, team, round_mask, conf, node_mask = _draw(seed, ties)
    want = _references(cls, team, round_mask, conf.astype(np.float32).astype(float),
                       node_mask)
    want64 = _references(cls, team, round_mask, conf, node_mask)
    for dtype in (np.float64, np.float32):
        ref = want64 if dtype == np.float64 else want
        for backend in ("jax", "numpy"):
            got = _run(cls, team, round_mask, conf, node_mask, dtype, backend)
            for column in SET_OUTPUTS + COCOA_OUTPUTS:
                out, exp = got[column], ref[column]
                assert out.dtype == dtype, (column, backend)
                np.testing.assert_array_equal(np.isnan(out), np.isnan(exp), err_msg=column)
                fin = ~np.isnan(exp)
                if dtype == np.float64:
                    bound = 1e-12 * np.maximum(1.0, np.abs(exp[fin]))
                elif column.startswith("num_answer_sets"):
                    bound = np.spacing(np.abs(exp[fin]).astype(np.float32)).astype(float)
                    if column == "num_answer_sets":
                        bound = 0.0 * bound  # an integer: exact
                elif column.startswith("answer_entropy"):
                    bound = (A_PAD + 8) * EPS32 * (1 + exp[fin])
                else:
                    bound = (math.log2(A_PAD) + T_PAD + 8) * EPS32 * np.abs(exp[fin])
                err = np.abs(out[fin].astype(float) - exp[fin])
                assert (err <= bound).all(), (column, backend, dtype, err.max())


def test_entropy_and_sets_ignore_slot_order_slot_padding_and_the_batch():
    """The entropy depends on the class sizes only: permuting the agents, padding the slot
    axis and scoring a trajectory in another batch change no bit (ties stay ties)."""
    cls, team, round_mask, _, _ = _draw(7, ties=True)
    rng = np.random.default_rng(3)
    base = S.answer_sets_scan(cls, team, round_mask, fields=SET_OUTPUTS)
    perm = cls[:, :, rng.permutation(A_PAD)]
    padded = np.concatenate([cls, np.full(cls.shape[:2] + (5,), -1, np.int32)], axis=2)
    for other in (perm, padded):
        got = S.answer_sets_scan(other, team, round_mask, fields=SET_OUTPUTS)
        for column in SET_OUTPUTS:
            np.testing.assert_array_equal(np.asarray(got[column]), np.asarray(base[column]))
    alone = S.answer_sets_scan(cls[:, 2:3], team[2:3], round_mask[:, 2:3], fields=SET_OUTPUTS)
    for column in SET_OUTPUTS:
        np.testing.assert_array_equal(np.asarray(alone[column]), np.asarray(base[column])[2:3])
    # two rounds with the same vote pattern in other slots give equal floats
    a = np.array([[[0, 1, 0, 2, -1, 1]], [[3, 3, -1, 4, 4, 5]]], np.int32)  # sizes 2, 2, 1, +1
    two = S.answer_sets_scan(a, np.array([6.0]), np.array([[True], [True]]),
                             fields=("round_entropy",))["round_entropy"]
    assert np.asarray(two)[0, 0] == np.asarray(two)[1, 0]


def test_unknown_output_fields_are_refused():
    cls, team, round_mask, conf, node_mask = _draw(1, ties=False)
    with pytest.raises(ValueError, match="unknown answer-set output fields"):
        S.answer_sets_scan_numpy(cls, team, round_mask, fields=("entropy",))
    with pytest.raises(ValueError, match="unknown CoCoA output fields"):
        S.cocoa_scan(conf, cls, team, node_mask, fields=("cocoa_last",))


# ------------------------------------------------------------------------------ the engine


def test_method_all_includes_them_where_the_corpus_has_their_inputs(tmp_path, capsys):
    rows = [{k: v for k, v in r.items() if k != "seq_logprob"} for r in (THREE, FIVE, DYLAN)]
    without = fastuq.score(pa.Table.from_pylist(rows), "all").column_names
    assert set(SET_OUTPUTS) <= set(without) and not set(COCOA_OUTPUTS) & set(without)
    path = tmp_path / "hand.parquet"
    pq.write_table(_hand_table(), path)
    out = tmp_path / "scores.parquet"
    assert main(["score", str(path), "--method", "all", "-o", str(out), "--no-progress"]) == 0
    assert set(SET_OUTPUTS + COCOA_OUTPUTS) <= set(pq.read_table(out).column_names)
    capsys.readouterr()
    assert main(["eval", str(path), "--method", "all", "--no-progress"]) == 0
    printed = capsys.readouterr().out
    for column in SET_OUTPUTS + COCOA_OUTPUTS:
        assert column in printed, column


def test_cocoa_without_log_probabilities_names_what_it_needs():
    rows = [{k: v for k, v in THREE.items() if k != "seq_logprob"}]
    with pytest.raises(ValueError, match="cocoa needs seq_logprob"):
        fastuq.score(pa.Table.from_pylist(rows), "cocoa")


@pytest.mark.parametrize("dtype", [np.float64,
                                   pytest.param(np.float32, marks=pytest.mark.slow)])
def test_scores_are_bit_identical_across_slot_widths_and_batches(dtype):
    """The same trajectories padded to 4 or 8 slots (unrolled code) or 16 (array code), and
    scored 3 at a time instead of 512: the same bits for every output (the module
    docstring's invariance). Two draws: answers in 4 slots, and in all 8 slots (teams of
    2..10, some members silent). Before: CoCoA moved by an ulp between 4 and 8 slots and
    between 8 and 16, the entropy between 8 and 16 (XLA fused products into the sums for some
    widths, and divided by broadcast arrays as products with the reciprocal)."""
    rng = np.random.default_rng(5)
    t, n = 3, 512

    def pad(x, width, v):
        return np.concatenate([x, np.full(x.shape[:2] + (width - x.shape[2],), v, x.dtype)],
                              axis=2)

    for used, widths in ((4, (4, 8, 16)), (8, (8, 16))):
        cls = rng.integers(-1, 3, (t, n, used)).astype(np.int32)
        team = rng.integers(max(used - 2, 2), used + 3, n).astype(dtype)
        round_mask = np.arange(t)[:, None] < rng.integers(1, t + 1, n)[None, :]
        conf = (-rng.exponential(1.0, cls.shape)).astype(dtype)
        node_mask = (rng.random(cls.shape) < 0.9) & round_mask[:, :, None]
        runs = {}
        with jax.enable_x64(dtype == np.float64):
            shapes = [(width, slice(None)) for width in widths] + [(8, slice(0, 3))]
            for width, rows in shapes:
                c = pad(cls, width, -1)[:, rows]
                got = {**S.answer_sets_scan(c, team[rows], round_mask[:, rows],
                                            fields=SET_OUTPUTS),
                       **S.cocoa_scan(pad(conf, width, 0)[:, rows], c, team[rows],
                                      pad(node_mask, width, False)[:, rows],
                                      fields=COCOA_OUTPUTS)}
                runs[(width, rows.stop)] = {k: np.asarray(v) for k, v in got.items()}
        base = runs[(widths[0], None)]
        for (width, stop), got in runs.items():
            for column in SET_OUTPUTS + COCOA_OUTPUTS:
                want = base[column][:stop]
                assert got[column].dtype == dtype
                same = got[column].view(np.uint8).reshape(len(want), -1) == want.view(
                    np.uint8).reshape(len(want), -1)
                assert same.all(), (f"{column}: {used} slots used, width {width}, rows "
                                    f"{stop}: {int((~same.all(1)).sum())} rows differ")
