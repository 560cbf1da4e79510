"""BCCS (kernels/bccs.py; the ``bccs`` and ``sauce_belief`` registry entries; the
``answer_class``, ``belief`` and ``n_agents`` packed inputs; the simulator's beliefs).

Hand-computed consensus states at every threshold boundary (strict, as DESIGN.md says, in
float64 and float32), the tie rules, the denominators, masked rounds and small shapes are
checked on all four implementations (JAX float64 / float32, NumPy twin float64 / float32)
and the plain-Python reference. Random ragged batches: kernel and twin against the
reference within 1e-12 (float64) and 2e-6 (float32; states compared away from the
thresholds, where float32 rounding may decide a comparison). Chunking and slot padding
change no bit. End to end through ``fastuq score`` / ``eval`` on hand-written and
simulated corpora, and bad beliefs give an error naming the record and the field.
"""

from __future__ import annotations

import json

import jax
import jax.numpy as jnp
import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
import pytest

import fastuq
from fastuq.cli import main
from fastuq.engine.registry import ESTIMATORS
from fastuq.engine.runner import call_kernel
from fastuq.engine.runtime import compiled_count
from fastuq.kernels import bccs as B
from fastuq.synth import corpus
from fastuq.synth.beliefs import add_beliefs, corpus_chunks_with_beliefs, corpus_with_beliefs

NONE, PARTIAL, FULL = B.NONE, B.PARTIAL, B.FULL
FIELDS = B.SUMMARY_FIELDS + B.TRACE_FIELDS
#: Float32 bound on p_s, p_b, dissent and the score against the exact reference: sums of at
#: most 8 beliefs (<= 7 roundings), one division and the inputs' own rounding to float32,
#: each at most 2^-24 relative, on values in [0, 1]: < 10 * 6e-8; stated with margin.
F32_ATOL = 2e-6


# ------------------------------------------------------------------------------ helpers


def _one(rounds, team, mask=None):
    """One trajectory as packed arrays: ``rounds`` = [(classes, beliefs)], ``None`` class:
    no vote. Returns ``(answer_class [T, 1, A], belief, n_agents [1], round_mask [T, 1])``."""
    t = len(rounds)
    a = max(len(c) for c, _ in rounds)
    cls = np.full((t, 1, a), -1, np.int32)
    bel = np.full((t, 1, a), np.nan)
    for k, (classes, beliefs) in enumerate(rounds):
        for j, (c, b) in enumerate(zip(classes, beliefs, strict=True)):
            cls[k, 0, j] = -1 if c is None else c
            bel[k, 0, j] = np.nan if b is None else b
    mask = np.ones((t, 1), bool) if mask is None else np.asarray(mask, bool)[:, None]
    return cls, bel, np.array([float(team)]), mask


def _jax(cls, bel, team, mask, params, dtype):
    with jax.enable_x64(dtype == np.float64):
        out = B.bccs_scan(jnp.asarray(cls), jnp.asarray(bel.astype(dtype)),
                          jnp.asarray(team.astype(dtype)), jnp.asarray(mask), params,
                          fields=FIELDS)
        return {k: np.asarray(v) for k, v in out.items()}


def _all(cls, bel, team, mask, params=B.DEFAULTS) -> dict[str, dict]:
    """Every implementation's outputs (all fields), by label."""
    outs = {}
    for dtype in (np.float64, np.float32):
        name = np.dtype(dtype).name
        outs[f"jax {name}"] = _jax(cls, bel, team, mask, params, dtype)
        outs[f"numpy {name}"] = B.bccs_scan_numpy(cls, bel.astype(dtype), team.astype(dtype),
                                                  mask, params, fields=FIELDS)
    return outs


def _check(rounds, team, *, mask=None, params=B.DEFAULTS, **want):
    """Run one trajectory through every implementation and the reference; assert ``want``
    (per-round lists for trace fields, scalars for summaries) everywhere."""
    cls, bel, n_agents, round_mask = _one(rounds, team, mask)
    ref = B.bccs_trajectory(cls[:, 0], bel[:, 0], float(team), round_mask[:, 0],
                            **params._asdict())
    executed = [r["round_index"] for r in ref["rounds"]]
    ref_trace = {
        "state": [r["state"] for r in ref["rounds"]],
        "p_s": [r["p_s"] for r in ref["rounds"]], "p_b": [r["p_b"] for r in ref["rounds"]],
        "dissent": [r["dissent"] for r in ref["rounds"]],
        "support": [len(r["support"]) for r in ref["rounds"]],
        "round_leader": [r["leader"] for r in ref["rounds"]],
    }
    for label, out in _all(cls, bel, n_agents, round_mask, params).items():
        tol = 1e-12 if "64" in label else F32_ATOL
        for name, values in want.items():
            got = out[name][..., 0]
            if name in B.TRACE_FIELDS:
                got = got[executed]
            np.testing.assert_allclose(got, np.asarray(values, np.float64), rtol=0, atol=tol,
                                       err_msg=f"{label}: {name}")
        for name, values in ref_trace.items():  # and the reference, on every trace field
            np.testing.assert_allclose(out[name][executed, 0], values, rtol=0, atol=tol,
                                       err_msg=f"{label}: {name} vs reference")
        for name in ("score", "first_full", "leader"):
            np.testing.assert_allclose(out[name][0], ref[name], rtol=0, atol=tol,
                                       err_msg=f"{label}: {name} vs reference")
    return ref


# ------------------------------------------------------------ hand-computed boundaries


def test_support_share_exactly_two_thirds_is_not_full():
    # 2 of 3 and 4 of 6 agree, all belief on the support (p_b = 1): p_s = 2/3 exactly
    _check([([0, 0, 1], [1.0, 1.0, 0.0])], 3, state=[PARTIAL], p_s=[2 / 3], p_b=[1.0],
           first_full=-1)
    _check([([0, 0, 0, 0, 1, 1], [1, 1, 1, 1, 0, 0])], 6, state=[PARTIAL], p_s=[2 / 3])
    # just above: 3 of 4, 7 of 10
    _check([([0, 0, 0, 1], [1, 1, 1, 0])], 4, state=[FULL], p_s=[0.75], first_full=0)
    _check([([0] * 7 + [1] * 3, [1] * 7 + [0] * 3)], 10, state=[FULL], p_s=[0.7])
    # the threshold is a parameter: below 2/3, two of three is full
    _check([([0, 0, 1], [1.0, 1.0, 0.0])], 3, params=B.BccsParams(theta_s=0.6),
           state=[FULL])


def test_belief_share_exactly_0_8_is_not_full():
    # 4 of 5 agree (p_s = 0.8 > 2/3); beliefs 0.5 each: p_b = 2 / 2.5 = 0.8 exactly
    _check([([0, 0, 0, 0, 1], [0.5] * 5)], 5, state=[PARTIAL], p_b=[0.8], dissent=[0.2])
    # beliefs 1 and 1/4: p_b = 1 / 1.25 = 0.8 as a correctly rounded quotient
    _check([([0, 0, 0, 0, 1], [0.25, 0.25, 0.25, 0.25, 0.25])], 5, state=[PARTIAL])
    _check([([0, 0, 0, 1], [1.0, 0.0, 0.0, 0.25])], 4, state=[PARTIAL], p_b=[0.8])
    # just above: 2 / 2.25; score 1 - p_s p_b = 1 - (4/5)(2/2.25) = 0.65 / 2.25
    _check([([0, 0, 0, 0, 1], [0.5, 0.5, 0.5, 0.5, 0.25])], 5, state=[FULL],
           p_b=[2 / 2.25], score=0.65 / 2.25, final_dissent=0.25 / 2.25)
    cls, bel, team, mask = _one([([0, 0, 0, 0, 1], [0.5] * 5)], 5)
    for label, out in _all(cls, bel, team, mask).items():  # p_b is the float 0.8 itself
        want = np.float32(0.8) if "32" in label else 0.8
        assert out["p_b"][0, 0] == want, label


def test_belief_share_exactly_half_is_none():
    # p_s = 1/2: score 1 - p_b / 2
    _check([([0, 1], [0.5, 0.5])], 2, state=[NONE], p_b=[0.5], score=0.75)
    _check([([0, 1], [0.75, 0.25])], 2, state=[PARTIAL], p_b=[0.75], score=0.625)
    # the threshold is a parameter
    _check([([0, 1], [0.5, 0.5])], 2, params=B.BccsParams(theta_partial=0.25),
           state=[PARTIAL])


def test_ties_between_classes_go_to_the_class_of_the_lowest_slot():
    # classes 1 and 0 have two votes each: the support is slot 0's class, even though the
    # other class holds more belief
    _check([([1, 0, 0, 1], [0.2, 0.9, 0.9, 0.2])], 4, state=[NONE], support=[2],
           p_b=[0.4 / 2.2], round_leader=[0])
    _check([([0, 1], [0.25, 0.75])], 2, p_b=[0.25], round_leader=[0], score=0.875)
    # a three-way tie; class ids carry no order (5 before 3)
    _check([([2, 1, 0], [0.1, 0.8, 0.8])], 3, support=[1], p_s=[1 / 3], round_leader=[0])
    _check([([5, 3], [0.5, 0.5])], 2, round_leader=[0])
    # a modal class wins over a lower-slot minority
    _check([([1, 0, 0], [0.9, 0.3, 0.4])], 3, support=[2], round_leader=[2])


def test_leader_is_the_highest_belief_of_the_support_ties_to_the_lowest_slot():
    _check([([0, 0, 0], [0.5, 0.9, 0.9])], 3, round_leader=[1], leader=1)
    _check([([1, 0, 0, 0], [1.0, 0.3, 0.7, 0.6])], 4, round_leader=[2], leader=2)
    _check([([0, 0], [0.4, 0.4])], 2, round_leader=[0])


def test_null_answers_stay_in_the_denominator():
    # two of three agents answer, unanimously: p_s = 2/3, not full (as agreement = 2/3)
    _check([([0, None, 0], [1.0, None, 1.0])], 3, state=[PARTIAL], p_s=[2 / 3], p_b=[1.0])
    _check([([0, 0, 0, None], [1.0, 1.0, 1.0, None])], 4, state=[FULL], p_s=[0.75])
    # an agent that spoke but did not parse keeps its belief out of p_b's total
    _check([([0, None, 0, 0], [0.9, 0.9, 0.9, 0.9])], 4, state=[FULL], p_b=[1.0])


def test_a_round_where_nobody_answered():
    _check([([None, None, None], [0.5, None, 0.7])], 3, state=[NONE], p_s=[0.0],
           p_b=[0.0], dissent=[1.0], support=[0], round_leader=[-1], score=1.0, leader=-1)


def test_beliefs_all_zero():
    _check([([0, 0, 1], [0.0, 0.0, 0.0])], 3, state=[NONE], p_b=[0.0], dissent=[1.0],
           round_leader=[0], score=1.0)


def test_rounds_that_did_not_execute_are_ignored():
    rounds = [([0, 1, 1], [0.5, 0.5, 0.5]), ([1, 1, 1], [0.9, 0.8, 0.7]),
              ([0, 0, 0], [1.0, 1.0, 1.0])]
    ref = _check(rounds, 3, mask=[True, True, False], state=[PARTIAL, FULL],
                 first_full=1, score=0.0, leader=0, final_state=FULL, n_rounds=2)
    assert [r["round_index"] for r in ref["rounds"]] == [0, 1]
    cls, bel, team, mask = _one(rounds, 3, [True, True, False])
    short = _one(rounds[:2], 3)
    for (label, out), (_, want) in zip(_all(cls, bel, team, mask).items(),
                                       _all(*short).items(), strict=True):
        for name in B.SUMMARY_FIELDS:
            np.testing.assert_array_equal(out[name], want[name], err_msg=label)
        assert np.isnan(out["p_b"][2, 0]) and out["state"][2, 0] == -1, label
        assert out["support"][2, 0] == -1 and out["round_leader"][2, 0] == -1, label


def test_one_agent():
    _check([([0], [0.3])], 1, state=[FULL], p_s=[1.0], p_b=[1.0], score=0.0, leader=0,
           first_full=0)
    _check([([None], [None])], 1, state=[NONE], score=1.0, leader=-1)


def test_one_round_and_the_summaries_over_rounds():
    _check([([0, 0, 1], [0.9, 0.9, 0.2])], 3, state=[PARTIAL], n_rounds=1, final_state=1,
           final_p_s=2 / 3, final_p_b=1.8 / 2.0, score=1 - 0.6, final_dissent=0.1)
    # none -> partial -> full -> partial: the first full round is 2, the summaries are the
    # last round's
    rounds = [([0, 1, 2], [0.5, 0.5, 0.5]), ([0, 0, 1], [0.6, 0.6, 0.9]),
              ([0, 0, 0], [0.9, 0.8, 0.95]), ([1, 1, 0], [0.4, 0.7, 0.2])]
    _check(rounds, 3, state=[NONE, PARTIAL, FULL, PARTIAL], first_full=2, final_state=1,
           leader=1, score=1 - (2 / 3) * (1.1 / 1.3), final_dissent=0.2 / 1.3, n_rounds=4)


def test_a_lone_answering_agent_is_not_certainty():
    # DESIGN.md: the score is 1 - p_s p_b, so the team counts. One agent of three answers
    # with belief 0.05: p_b = 0.05 / 0.05 = 1 (it used to score 1 - p_b = 0, "certain"),
    # p_s = 1/3, score 2/3; the belief share alone stays available as final_p_b
    _check([([None, 0, None], [None, 0.05, None])], 3, p_s=[1 / 3], p_b=[1.0],
           score=2 / 3, final_p_b=1.0, final_dissent=0.0, state=[PARTIAL])
    # the same agent alone in a team of one is the whole team: 0
    _check([([0], [0.05])], 1, score=0.0)
    # two of three agree with full belief, the third is silent: 1 - 2/3
    _check([([0, 0, None], [0.9, 0.9, None])], 3, score=1 / 3, final_dissent=0.0)


def test_no_executed_round_gives_nan_and_minus_one():
    cls, bel, team, mask = _one([([0], [1.0])], 1, [False])
    for label, out in _all(cls, bel, team, mask).items():
        assert np.isnan(out["score"][0]) and out["first_full"][0] == -1, label
        assert out["leader"][0] == -1 and out["n_rounds"][0] == 0, label


def test_unknown_field_is_refused():
    cls, bel, team, mask = _one([([0], [1.0])], 1)
    for fn in (B.bccs_scan, B.bccs_scan_numpy):
        with pytest.raises(ValueError, match="unknown BCCS output fields"):
            fn(cls, bel, team, mask, fields=("scores",))


# ------------------------------------------------------------- random ragged batches


def _random_batch(rng, n: int, t: int, a: int):
    """Ragged trajectories (1..t rounds, teams 1..a), 3 answer classes, 20% no vote, a
    third of the trajectories with beliefs on a dyadic grid (ties); padding holds garbage."""
    rounds = rng.integers(1, t + 1, n)
    mask = np.arange(t)[:, None] < rounds[None, :]
    team = rng.integers(1, a + 1, n)
    slots = np.arange(a)[None, None, :] < team[None, :, None]
    cls = rng.integers(0, 3, (t, n, a)).astype(np.int32)
    cls[~slots | (rng.random((t, n, a)) < 0.2)] = -1
    bel = rng.random((t, n, a))
    grid = rng.random(n) < 1 / 3
    bel[:, grid] = rng.integers(0, 5, (t, int(grid.sum()), a)) / 4
    bel[cls < 0] = np.nan
    cls[~mask] = rng.integers(0, 3, cls[~mask].shape)  # masked rounds: anything
    bel[~mask] = rng.random(bel[~mask].shape)
    return cls, bel, team.astype(np.float64), mask


def _references(cls, bel, team, mask, params=B.DEFAULTS):
    """Per trajectory: the reference's summaries and per-round traces (NaN / -1 masked)."""
    t, n, _ = cls.shape
    trace = {k: np.full((t, n), np.nan) for k in ("p_s", "p_b", "dissent", "state")}
    summary = {k: np.zeros(n) for k in ("score", "first_full", "leader")}
    near = np.zeros(n, bool)  # a round within 1e-5 of a threshold
    for k in range(n):
        ref = B.bccs_trajectory(cls[:, k], bel[:, k], team[k], mask[:, k],
                                **params._asdict())
        for r in ref["rounds"]:
            for name in trace:
                trace[name][r["round_index"], k] = r[name]
            # equal fractions (2 of 3 agents, dyadic beliefs) are exact in both dtypes
            near[k] |= any(0 < abs(r[p] - theta) < 1e-5 for p, theta in (
                ("p_s", params.theta_s), ("p_b", params.theta_full),
                ("p_b", params.theta_partial)))
        for name in summary:
            summary[name][k] = ref[name]
    return summary, trace, near


@pytest.mark.parametrize(("seed", "a"), [(0, 7), (1, 4), (2, 12)])  # 12: vectorized path
def test_kernel_twin_and_reference_agree_on_ragged_batches(seed, a):
    rng = np.random.default_rng(seed)
    cls, bel, team, mask = _random_batch(rng, 400, 6, a)
    params = B.BccsParams(*rng.uniform(0.3, 0.9, 3)) if seed else B.DEFAULTS
    summary, trace, near = _references(cls, bel, team, mask, params)
    for label, out in _all(cls, bel, team, mask, params).items():
        f64 = "64" in label
        tol = 1e-12 if f64 else F32_ATOL
        for name in ("p_s", "p_b", "dissent"):
            got = np.where(mask, out[name], np.nan)
            np.testing.assert_allclose(got, trace[name], rtol=0, atol=tol,
                                       err_msg=f"{label} {name}")
        np.testing.assert_allclose(out["score"], summary["score"], rtol=0, atol=tol,
                                   err_msg=label)
        # discrete outputs: exact in float64; in float32 away from the thresholds
        keep = slice(None) if f64 else ~near
        state = np.where(mask, out["state"], np.nan)
        np.testing.assert_array_equal(state[:, keep], trace["state"][:, keep], label)
        for name in ("first_full", "leader"):
            np.testing.assert_array_equal(out[name][keep], summary[name][keep],
                                          f"{label} {name}")
    assert (~near).mean() > 0.9


def _pad_slots(cls, bel, width):
    t, n, a = cls.shape
    c = np.full((t, n, width), -1, np.int32)
    b = np.full((t, n, width), 7.0)  # garbage where nobody voted
    c[..., :a], b[..., :a] = cls, bel
    return c, b


@pytest.mark.parametrize("dtype", [np.float64, np.float32])
@pytest.mark.parametrize("backend", ["jax", "numpy"])
def test_bit_identical_whatever_the_chunk_and_the_slot_padding(dtype, backend):
    rng = np.random.default_rng(7)
    n = 3000
    cls, bel, team, mask = _random_batch(rng, n, 5, 5)
    est = ESTIMATORS["bccs"]
    params = {p.name: np.asarray(p.default, dtype) for p in est.params}

    def run(c, b, chunk=1 << 20):
        return call_kernel(est, [c, b.astype(dtype), team.astype(dtype), mask], {}, params,
                           n=n, dtype=np.dtype(dtype), backend=backend, chunk_size=chunk)

    base = run(cls, bel)
    others = {"chunks of 256": run(cls, bel, 256),
              "8 slots": run(*_pad_slots(cls, bel, 8)),
              "16 slots": run(*_pad_slots(cls, bel, 16))}
    for label, out in others.items():
        for column in est.outputs:
            assert out[column].dtype == dtype
            assert np.array_equal(out[column].view(np.uint8), base[column].view(np.uint8)), (
                f"{column}: {label}")
    if backend == "jax":  # a second chunk of the same bucket shape does not recompile
        before = compiled_count()
        run(*_random_batch(np.random.default_rng(8), n, 5, 5)[:2])
        assert compiled_count() == before


def test_belief_agreement_is_the_p_b_trace_and_sauce_belief_filters_it():
    rng = np.random.default_rng(3)
    cls, bel, team, mask = _random_batch(rng, 200, 4, 5)
    entropy = rng.exponential(0.5, mask.shape)
    with jax.enable_x64(True):
        p_b = np.asarray(B.belief_agreement(cls, bel, mask))
        got = np.asarray(B.sauce_belief(cls, bel, entropy, mask, lam=0.95, q=0.1,
                                        sigma2_0=0.25, mu_0=0.0))
    trace = B.bccs_scan_numpy(cls, bel, team, mask, fields=("p_b",))["p_b"]
    np.testing.assert_array_equal(np.isnan(p_b), ~mask)
    np.testing.assert_allclose(p_b[mask], trace[mask], rtol=0, atol=1e-15)
    np.testing.assert_allclose(B.belief_agreement_numpy(cls, bel, mask)[mask], p_b[mask],
                               rtol=0, atol=1e-15)
    # SAUCE on p_b: the same numbers as fastuq.sauce_batch given p_b as the agreement
    want = fastuq.sauce_batch(np.where(mask, p_b, 0), entropy, mask,
                              protocol="debate")["score"]
    np.testing.assert_allclose(got, want, rtol=0, atol=1e-12)


# -------------------------------------------------------------------------- end to end


_HAND = [
    # r0: 2 of 3 agree, p_b = 1.7 / 2.3 (partial); r1: unanimous, p_b = 1 (full)
    {"trajectory_id": "t0", "n_agents": 3, "correct": True,
     "answers": [["4", "4", "5"], ["4", "4", "4"]],
     "belief": [[0.9, 0.8, 0.6], [0.9, 0.9, 0.7]]},
    # 0.5 and 1/2 vote together (the classes agreement uses): p_s = 2/3, p_b = 0.9 / 1.2
    {"trajectory_id": "t1", "n_agents": 3, "correct": True,
     "answers": [["0.5", "1/2", "3"]], "belief": [[0.4, 0.5, 0.3]]},
    # DyLAN-like: two silent agents in round 1 stay in the denominator (p_s = 1/2)
    {"trajectory_id": "t2", "n_agents": 4, "correct": False,
     "answers": [["7", "8", "7", "9"], [None, "7", None, "7"]],
     "belief": [[0.6, 0.9, 0.5, 0.7], [None, 0.95, None, 0.85]]},
    # a tie: the class of slot 0
    {"trajectory_id": "t3", "n_agents": 2, "correct": False,
     "answers": [["a", "b"]], "belief": [[0.25, 0.75]]},
]
_HAND_WANT = {
    # 1 - p_s p_b of the last round: t0 1 - 1 * 1; t1 1 - (2/3)(0.9/1.2); t2 two of four
    # answer, unanimously: 1 - (1/2) * 1 (1 - p_b alone said 0, certain); t3 1 - (1/2)(1/4)
    "bccs": [0.0, 1 - (2 / 3) * (0.9 / 1.2), 0.5, 0.875],
    "bccs_first_full": [1.0, -1.0, -1.0, -1.0],
    "bccs_leader": [0.0, 1.0, 1.0, 0.0],
}


def _write_jsonl(path, rows):
    path.write_text("".join(json.dumps({"protocol": "debate", **r}) + "\n" for r in rows))
    return path


@pytest.mark.parametrize("dtype", ["float64", "float32"])
def test_fastuq_score_on_a_hand_written_corpus(tmp_path, dtype):
    path = _write_jsonl(tmp_path / "c.jsonl", _HAND)
    out = tmp_path / "s.parquet"
    assert main(["score", str(path), "-o", str(out), "--method", "bccs", "--dtype", dtype,
                 "--no-progress"]) == 0
    table = pq.read_table(out)
    assert table.column_names == ["trajectory_id", *_HAND_WANT]
    for column, want in _HAND_WANT.items():
        np.testing.assert_allclose(table[column].to_numpy(), want, rtol=0,
                                   atol=1e-12 if dtype == "float64" else F32_ATOL,
                                   err_msg=column)


def test_fastuq_eval_and_method_all_on_a_hand_written_corpus(tmp_path, capsys):
    rows = [{**r, "trajectory_id": f"{r['trajectory_id']}-{k}", "correct": bool(k % 2)}
            for k in range(4) for r in _HAND]  # 16 rows: enough for 5 Platt folds
    path = _write_jsonl(tmp_path / "c.jsonl", rows)
    out = tmp_path / "s.parquet"
    assert main(["score", str(path), "-o", str(out), "--method", "all", "--no-progress"]) == 0
    err = capsys.readouterr().err
    assert "sauce_belief (needs token_entropy" in err  # no entropy: left out, and why
    names = pq.read_schema(out).names
    assert {"bccs", "bccs_first_full", "bccs_leader", "mean_agreement"} <= set(names)
    assert main(["eval", str(path), "--method", "bccs", "--no-progress"]) == 0
    text = capsys.readouterr().out
    assert any(line.startswith("bccs ") for line in text.splitlines())
    assert "bccs_leader" not in text  # extra outputs are not evaluated as estimators


def test_thresholds_are_parameters_with_bounds(tmp_path):
    table = pa.Table.from_pylist(_HAND)
    base = fastuq.score(table, "bccs")
    assert base["bccs_first_full"].to_pylist() == _HAND_WANT["bccs_first_full"]
    # theta_s below 2/3 and theta_full below 0.75: t1's only round becomes full
    lax_ = fastuq.score(table, "bccs", theta_s=0.6, theta_full=0.7)
    assert lax_["bccs_first_full"].to_pylist() == [0.0, 0.0, -1.0, -1.0]
    assert lax_["bccs"].to_pylist() == base["bccs"].to_pylist()  # the score is threshold-free
    for name, value in (("theta_s", 1.5), ("theta_full", -0.1), ("theta_partial", np.nan)):
        with pytest.raises(ValueError, match=f"{name} must be"):
            fastuq.score(table, "bccs", **{name: value})
    with pytest.raises(ValueError, match="would be ignored"):
        fastuq.score(table, "mean_agreement", theta_s=0.5)


def _table_reference(table: pa.Table) -> dict[str, np.ndarray]:
    """BCCS per trajectory in plain Python from the rows (the simulator's answers are
    integers, so equal strings are exactly the vote classes)."""
    out = {c: [] for c in _HAND_WANT}
    for row in table.select(["n_agents", "answers", "belief"]).to_pylist():
        classes, beliefs = [], []
        for answers, belief in zip(row["answers"], row["belief"], strict=True):
            ids = {a: k for k, a in enumerate(dict.fromkeys(x for x in answers if x))}
            classes.append([ids[a] if a else -1 for a in answers])
            beliefs.append([np.nan if b is None else b for b in belief])
        ref = B.bccs_trajectory(classes, beliefs, row["n_agents"], [True] * len(classes))
        for column, field in B.OUTPUTS.items():
            out[column].append(ref[field])
    return {k: np.asarray(v) for k, v in out.items()}


def test_fastuq_score_on_a_simulated_corpus_with_beliefs(tmp_path):
    table = corpus_with_beliefs(600, protocol="mixed", seed=5)
    path = tmp_path / "sim.parquet"
    pq.write_table(table, path)
    out = tmp_path / "s.parquet"
    assert main(["score", str(path), "-o", str(out), "--method", "bccs,sauce_belief,sauce",
                 "--no-progress"]) == 0
    got = pq.read_table(out)
    for column, want in _table_reference(table).items():
        np.testing.assert_allclose(got[column].to_numpy(), want, rtol=0, atol=1e-12,
                                   err_msg=column)
    # sauce_belief is SAUCE on p_b, each protocol with its preset
    p_b = [[B.consensus_round(c, b, 1)["p_b"] for c, b in zip(cls, bel, strict=True)]
           for cls, bel in _rows_as_classes(table)]
    want = fastuq.sauce_batch(p_b, table["token_entropy"].to_pylist(),
                              protocol=table["protocol"].to_numpy(zero_copy_only=False))
    np.testing.assert_allclose(got["sauce_belief"].to_numpy(), want["score"], rtol=0,
                               atol=1e-12)
    assert not np.array_equal(got["sauce_belief"].to_numpy(), got["sauce"].to_numpy())


def _rows_as_classes(table):
    for row in table.select(["answers", "belief"]).to_pylist():
        cls, bel = [], []
        for answers, belief in zip(row["answers"], row["belief"], strict=True):
            ids = {a: k for k, a in enumerate(dict.fromkeys(x for x in answers if x))}
            cls.append([ids[a] if a else -1 for a in answers])
            bel.append([np.nan if b is None else b for b in belief])
        yield cls, bel


def test_sauce_belief_is_sauce_when_everyone_answers_with_equal_beliefs():
    rows = [{"trajectory_id": f"t{k}", "protocol": p, "n_agents": 3,
             "answers": a, "belief": [[0.5] * 3] * len(a), "token_entropy": h}
            for k, (p, a, h) in enumerate([
                ("debate", [["1", "2", "1"], ["1", "1", "1"]], [0.4, 0.2]),
                ("dylan", [["3", "4", "5"]], [0.1]),
                ("debate", [["2", "2", "2"], ["2", "3", "2"], ["2", "2", "2"]],
                 [0.3, 0.3, 0.05])])]
    got = fastuq.score(pa.Table.from_pylist(rows), "sauce,sauce_belief")
    np.testing.assert_array_equal(got["sauce_belief"].to_numpy(), got["sauce"].to_numpy())


def test_answer_classes_are_computed_once_with_agreement(monkeypatch):
    """``answer_class`` and the agreement derived from ``answers`` share one vote-class
    computation (Batch.vote_classes), so they can never disagree on what an equal answer is."""
    import fastuq.answers
    from fastuq.engine.batch import Batch

    calls = []
    real = fastuq.answers.vote_classes

    def counting(*args, **kwargs):
        calls.append(1)
        return real(*args, **kwargs)

    monkeypatch.setattr(fastuq.answers, "vote_classes", counting)
    batch = Batch(pa.Table.from_pylist(_HAND))
    agreement, mask = batch.rounds("agreement")
    classes, class_mask = batch.answer_classes()
    assert len(calls) == 1
    assert classes.shape == (2, 4, 4) and classes.dtype == np.int32
    np.testing.assert_array_equal(class_mask, mask)
    # t1: "0.5" and "1/2" share a class; agreement counts them together
    assert classes[0, 1, 0] == classes[0, 1, 1] != classes[0, 1, 2]
    assert agreement[0, 1] == 2 / 3
    # silent agents and padding slots are -1
    assert classes[1, 2, 0] == -1 and classes[1, 2, 2] == -1 and (classes[:, 3, 2:] == -1).all()


# ------------------------------------------------------------------------- bad beliefs


def _bad_corpus(path, belief):
    rows = [dict(r) for r in _HAND]
    rows[2] = {**rows[2], "belief": belief}
    pq.write_table(pa.Table.from_pylist(rows), path)
    return path


@pytest.mark.parametrize(("belief", "message"), [
    ([[0.6, 1.5, 0.5, 0.7], [None, 0.95, None, 0.85]],
     "round 0, agent 1: belief = 1.5 is not a finite probability in [0, 1]"),
    ([[0.6, 0.9, 0.5, 0.7], [None, -0.25, None, 0.85]],
     "round 1, agent 1: belief = -0.25 is not a finite probability"),
    ([[0.6, 0.9, 0.5, float("nan")], [None, 0.95, None, 0.85]],
     "round 0, agent 3: belief = nan is not a finite probability"),
    ([[0.6, 0.9, 0.5, 0.7], [None, 0.95, None, None]],
     "round 1, agent 3: belief is missing (null) where the agent answered (field belief)"),
])
def test_bad_beliefs_name_the_record_round_agent_and_field(tmp_path, capsys, belief, message):
    path = _bad_corpus(tmp_path / "bad.parquet", belief)
    out = tmp_path / "s.parquet"
    assert main(["score", str(path), "-o", str(out), "--method", "bccs",
                 "--no-progress"]) == 2  # an input error
    err = [x for x in capsys.readouterr().err.splitlines() if x.strip()]
    assert len(err) == 1 and err[0].startswith("fastuq score: error: ")
    assert "trajectory 't2' (" in err[0] and "bad.parquet row 2)" in err[0], err[0]
    assert message in err[0], err[0]
    assert not out.exists()
    with pytest.raises(ValueError, match="trajectory 't2'.*belief"):
        fastuq.score(path, "bccs")
    # skipping leaves the bad record out and scores the others as before
    assert main(["score", str(path), "-o", str(out), "--method", "bccs", "--on-error",
                 "skip", "--no-progress"]) == 0
    got = pq.read_table(out)
    assert got["trajectory_id"].to_pylist() == ["t0", "t1", "t3"]
    np.testing.assert_allclose(got["bccs"].to_numpy(),
                               np.asarray(_HAND_WANT["bccs"])[[0, 1, 3]], atol=1e-12)
    skipped = [json.loads(x) for x in (tmp_path / "s.parquet.skipped.jsonl").read_text()
               .splitlines()]
    assert [s["trajectory_id"] for s in skipped] == ["t2"] and "belief" in skipped[0]["reason"]


def test_a_corpus_without_beliefs_says_bccs_needs_them(tmp_path):
    rows = [{k: v for k, v in r.items() if k != "belief"} for r in _HAND]
    with pytest.raises(ValueError, match="bccs needs belief"):
        fastuq.score(pa.Table.from_pylist(rows), "bccs")
    assert "bccs" not in fastuq.score(pa.Table.from_pylist(rows), "all").column_names


def test_belief_rounds_must_match_the_answers(tmp_path):
    rows = [dict(r) for r in _HAND]
    rows[0] = {**rows[0], "belief": rows[0]["belief"][:1]}
    with pytest.raises(ValueError, match=r"t0.*field belief: 1 rounds, but"):
        fastuq.score(pa.Table.from_pylist(rows), "bccs")


# ------------------------------------------------------------------------ the simulator


def test_simulated_beliefs_leave_every_other_column_unchanged():
    kw = {"protocol": "mixed", "seed": 11, "topk": 2}
    plain = corpus(300, **kw)
    with_b = corpus_with_beliefs(300, **kw)
    assert with_b.column_names == [*plain.column_names[:-1], "belief", "flags"]
    for name in plain.column_names:
        assert with_b.column(name).equals(plain.column(name)), name
    assert with_b.schema.field("belief").type == pa.list_(pa.list_(pa.float64()))


def test_simulated_beliefs_are_seeded_chunked_and_valid():
    a = corpus_with_beliefs(70_000, protocol="debate", seed=3)  # two generation chunks
    b = corpus_with_beliefs(70_000, protocol="debate", seed=3)
    c = corpus_with_beliefs(70_000, protocol="debate", seed=4)
    assert a.column("belief").equals(b.column("belief"))
    assert not a.column("belief").equals(c.column("belief"))
    chunks = list(corpus_chunks_with_beliefs(70_000, protocol="debate", seed=3))
    assert len(chunks) == 2 and pa.concat_tables(chunks).equals(a)
    beliefs = pc.list_flatten(pc.list_flatten(a["belief"]))
    spoke = pc.list_flatten(pc.list_flatten(a["seq_logprob"])).is_valid()
    assert beliefs.is_valid().equals(spoke)  # null exactly where the agent did not speak
    values = beliefs.drop_null().to_numpy()
    assert ((values > 0) & (values < 1)).all()


def test_simulated_beliefs_carry_a_real_but_imperfect_signal():
    table = corpus_with_beliefs(20_000, protocol="mixed", seed=0)
    answers = pc.list_flatten(pc.list_flatten(table["answers"]))
    beliefs = pc.list_flatten(pc.list_flatten(table["belief"])).to_numpy(zero_copy_only=False)
    rounds = pc.list_value_length(table["answers"]).to_numpy()
    slots = pc.list_value_length(pc.list_flatten(table["answers"])).to_numpy()
    record = np.repeat(np.repeat(np.arange(table.num_rows), rounds), slots)
    right = pc.equal(answers, pc.take(table["reference"], pa.array(record)))
    right = right.fill_null(False).to_numpy(zero_copy_only=False)
    parsed = answers.is_valid().to_numpy(zero_copy_only=False)
    assert np.nanmean(beliefs[right]) > np.nanmean(beliefs[parsed & ~right]) + 0.1
    scores = fastuq.score(table, "bccs,mean_agreement")
    labels = table["correct"].to_numpy()
    auroc = fastuq.metrics.auroc(labels, scores["bccs"].to_numpy())
    assert 0.6 < auroc < 0.9, auroc


def test_add_beliefs_refuses_what_it_cannot_use():
    table = corpus(5, seed=1)
    with pytest.raises(ValueError, match="no reference column"):
        add_beliefs(table.drop_columns(["reference"]))
    with pytest.raises(ValueError, match="already has a belief column"):
        add_beliefs(add_beliefs(table))
    empty = corpus_with_beliefs(0)
    assert empty.num_rows == 0 and "belief" in empty.column_names


def test_beliefs_derived_from_answer_logprob():
    """Without a ``belief`` column the belief is exp(answer_logprob), the probability of the
    answer's tokens: the same scores as the beliefs given directly (to float rounding)."""
    table = corpus_with_beliefs(300, protocol="mixed", seed=11)
    belief = table.column("belief").to_pylist()
    logp = [[[None if b is None else float(np.log(b)) if b > 0 else -800.0 for b in r]
             for r in rows] for rows in belief]
    derived = table.drop(["belief"]).append_column(
        "answer_logprob", pa.array(logp, pa.list_(pa.list_(pa.float64()))))
    want = fastuq.score(table, "bccs,sauce_belief")
    got = fastuq.score(derived, "bccs,sauce_belief")
    for column in ("bccs", "bccs_first_full", "bccs_leader", "sauce_belief"):
        np.testing.assert_allclose(got[column].to_numpy(), want[column].to_numpy(), rtol=0,
                                   atol=1e-12, err_msg=column)
    bad = [[[0.1 if k == 1 and t == 0 and a == 0 else x for a, x in enumerate(r)]
            for t, r in enumerate(rows)] for k, rows in enumerate(logp)]
    bad_table = derived.set_column(derived.column_names.index("answer_logprob"),
                                   "answer_logprob",
                                   pa.array(bad, pa.list_(pa.list_(pa.float64()))))
    with pytest.raises(ValueError, match=r"round 0, agent 0: answer_logprob = 0.1 is not a "
                                         r"finite log-probability"):
        fastuq.score(bad_table, "bccs")
