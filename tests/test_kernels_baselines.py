"""Baseline kernels (kernels/baselines.py): each jitted kernel against its NumPy twin,
hand-worked values, masks, padding and named edge cases.

Tolerances: float64 to 1e-12 (inside ``jax.enable_x64(True)``), float32 to 1e-5 (relative).
"""

import math

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from _references import node_baselines_exact, round_baselines_exact
from hypothesis import given, settings
from hypothesis import strategies as st

from fastuq.kernels import baselines as B

TOL = {np.float64: dict(rtol=1e-12, atol=1e-12), np.float32: dict(rtol=1e-5, atol=1e-5)}
NODE_SHAPE = (3, 16, 4)
ROUND_SHAPE = (5, 16)
NODE_ALL = tuple(B.NODE_FIELDS)
ROUND_ALL = tuple(B.ROUND_FIELDS)


def _node_batch(seed, shape=NODE_SHAPE):
    """Ragged node arrays: random masks (absent agents, skipped and missing rounds, empty
    trajectories), NaN / garbage in every masked slot."""
    rng = np.random.default_rng(seed)
    mask = rng.random(shape) < 0.7
    length = rng.integers(0, shape[0] + 1, shape[1])
    mask &= np.arange(shape[0])[:, None, None] < length[None, :, None]
    n_tokens = rng.integers(1, 200, shape)
    lp = -rng.exponential(0.5, shape) * n_tokens
    ent = rng.exponential(0.7, shape)
    ent[rng.random(shape) < 0.1] = 0.0
    lp[~mask], ent[~mask] = np.nan, np.inf
    n_tokens[~mask] = 0
    return mask, lp, n_tokens, ent


def _round_batch(seed, shape=ROUND_SHAPE):
    rng = np.random.default_rng(seed)
    mask = rng.random(shape) < 0.8
    agreement = rng.integers(1, 4, shape) / 3.0
    entropy = rng.exponential(0.5, shape)
    entropy[rng.random(shape) < 0.15] = 0.0
    agreement[~mask], entropy[~mask] = np.nan, -np.inf
    return mask, agreement, entropy


def _node_jax(mask, lp, ntok, ent, dtype, fields=NODE_ALL):
    out = B.node_baselines(
        jnp.asarray(lp.astype(dtype)), jnp.asarray(ntok), jnp.asarray(ent.astype(dtype)),
        jnp.asarray(mask), fields=fields,
    )
    return {k: np.asarray(v) for k, v in out.items()}


def _round_jax(mask, agreement, entropy, dtype, fields=ROUND_ALL, team=None):
    out = B.round_baselines(
        jnp.asarray(agreement.astype(dtype)), jnp.asarray(entropy.astype(dtype)),
        jnp.asarray(mask), fields=fields, team_size=team,
    )
    return {k: np.asarray(v) for k, v in out.items()}


def _assert_close(got, want, dtype):
    for name in want:
        assert got[name].dtype == want[name].dtype == dtype, name
        np.testing.assert_allclose(got[name], want[name], **TOL[dtype], err_msg=name)


# ---------------------------------------------------------------------------------------
# Kernels vs twins


@given(seed=st.integers(0, 2**32 - 1))
def test_node_baselines_jit_match_numpy_twin_on_random_ragged_batches(seed):
    mask, lp, ntok, ent = _node_batch(seed)
    for dtype in (np.float64, np.float32):
        want = B.node_baselines_numpy(
            lp.astype(dtype), ntok, ent.astype(dtype), mask, fields=NODE_ALL
        )
        with jax.enable_x64(dtype == np.float64):
            got = _node_jax(mask, lp, ntok, ent, dtype)
        _assert_close(got, want, dtype)


@given(seed=st.integers(0, 2**32 - 1))
def test_round_baselines_jit_match_numpy_twin_on_random_ragged_batches(seed):
    mask, agreement, entropy = _round_batch(seed)
    for dtype in (np.float64, np.float32):
        want = B.round_baselines_numpy(
            agreement.astype(dtype), entropy.astype(dtype), mask, fields=ROUND_ALL
        )
        with jax.enable_x64(dtype == np.float64):
            got = _round_jax(mask, agreement, entropy, dtype)
        _assert_close(got, want, dtype)


def test_per_estimator_kernels_match_their_twins_and_the_combined_scan():
    mask, lp, ntok, ent = _node_batch(1)
    r_mask, agreement, entropy = _round_batch(1)
    with jax.enable_x64(True):
        node = _node_jax(mask, lp, ntok, ent, np.float64)
        rounds = _round_jax(r_mask, agreement, entropy, np.float64)
        pairs = [
            (B.msp_final, B.msp_final_numpy, (lp, mask), node["msp_final"]),
            (B.perplexity_final, B.perplexity_final_numpy, (lp, ntok, mask),
             node["perplexity_final"]),
            (B.mean_token_entropy, B.mean_token_entropy_numpy, (ent, mask),
             node["mean_token_entropy"]),
            (B.last_agreement, B.last_agreement_numpy, (agreement, r_mask),
             rounds["last_agreement"]),
            (B.mean_agreement, B.mean_agreement_numpy, (agreement, r_mask),
             rounds["mean_agreement"]),
            (B.weighted_agreement, B.weighted_agreement_numpy, (agreement, entropy, r_mask),
             rounds["weighted_agreement"]),
        ]
        for kernel, twin, args, combined in pairs:
            got = np.asarray(kernel(*(jnp.asarray(a) for a in args)))
            want = twin(*args)
            np.testing.assert_allclose(got, want, **TOL[np.float64], err_msg=kernel.__name__)
            np.testing.assert_allclose(got, combined, **TOL[np.float64], err_msg=kernel.__name__)


# ---------------------------------------------------------------------------------------
# Hand-worked values


def test_hand_worked_node_baselines_last_round_and_all_nodes():
    # One trajectory, 3 rounds x 3 agents; agent 2 is pruned after round 0, round 2 did not
    # execute (all masked), so the final answer nodes are round 1's agents 0 and 1.
    nan = np.nan
    lp = np.array([[-3.0, -6.0, -9.0], [-2.0, -4.0, nan], [nan, nan, nan]])[:, None, :]
    ntok = np.array([[3, 6, 9], [4, 8, 0], [0, 0, 0]])[:, None, :]
    ent = np.array([[0.3, 0.6, 0.9], [0.2, 0.4, nan], [nan, nan, nan]])[:, None, :]
    mask = ~np.isnan(lp)
    msp = -(-2.0 + -4.0) / 2  # 3.0
    ppl = (math.exp(2.0 / 4) + math.exp(4.0 / 8)) / 2  # exp(0.5)
    mte = (0.3 + 0.6 + 0.9 + 0.2 + 0.4) / 5  # 0.48
    with jax.enable_x64(True):
        got = _node_jax(mask, lp, ntok, ent, np.float64)
    want = B.node_baselines_numpy(lp, ntok, ent, mask, fields=NODE_ALL)
    for out in (got, want):
        assert out["msp_final"][0] == pytest.approx(msp, abs=1e-14)
        assert out["perplexity_final"][0] == pytest.approx(ppl, abs=1e-14)
        assert out["mean_token_entropy"][0] == pytest.approx(mte, abs=1e-14)
        assert out["n_final"][0] == 2 and out["n_nodes"][0] == 5


def test_hand_worked_round_baselines_seed_trajectory():
    # agreement [2/3, 1, 1], entropy [.4, .2, .1]; a fourth padded round.
    agreement = np.array([2 / 3, 1.0, 1.0, nan := np.nan])[:, None]
    entropy = np.array([0.4, 0.2, 0.1, nan])[:, None]
    mask = np.array([True, True, True, False])[:, None]
    last = -1.0
    mean = -(2 / 3 + 1 + 1) / 3  # -0.888...
    weighted = -((2 / 3) / 0.4 + 1 / 0.2 + 1 / 0.1) / (1 / 0.4 + 1 / 0.2 + 1 / 0.1)
    with jax.enable_x64(True):
        got = _round_jax(mask, agreement, entropy, np.float64)
    want = B.round_baselines_numpy(agreement, entropy, mask, fields=ROUND_ALL)
    for out in (got, want):
        assert out["last_agreement"][0] == last
        assert out["mean_agreement"][0] == pytest.approx(mean, abs=1e-15)
        assert out["weighted_agreement"][0] == pytest.approx(weighted, abs=1e-15)
        assert out["n_rounds"][0] == 3


# ---------------------------------------------------------------------------------------
# Named edge cases


def test_zero_entropy_round_is_floored_and_dominates_weighted_agreement():
    agreement = np.array([[0.5], [1.0]])
    entropy = np.array([[0.5], [0.0]])
    mask = np.ones((2, 1), bool)
    want = -(0.5 / 0.5 + 1.0 / 1e-8) / (1 / 0.5 + 1 / 1e-8)
    with jax.enable_x64(True):
        got = _round_jax(mask, agreement, entropy, np.float64)["weighted_agreement"][0]
    assert got == pytest.approx(want, abs=1e-15)
    assert B.weighted_agreement_numpy(agreement, entropy, mask)[0] == pytest.approx(want)


def test_last_executed_round_skips_a_trailing_round_without_valid_nodes_and_gaps():
    # Rounds 0 and 2 executed, round 1 has no valid node: the final round is 2.
    lp = np.array([[-1.0, -1.0], [np.nan, np.nan], [-5.0, np.nan]])[:, None, :]
    mask = ~np.isnan(lp)
    with jax.enable_x64(True):
        got = float(B.msp_final(jnp.asarray(lp), jnp.asarray(mask))[0])
    assert got == 5.0 == B.msp_final_numpy(lp, mask)[0]
    r_mask = np.array([[True], [False], [True], [False]])
    agreement = np.array([[0.25], [0.5], [0.75], [1.0]])
    assert B.last_agreement_numpy(agreement, r_mask)[0] == -0.75
    assert float(B.last_agreement(jnp.asarray(agreement), jnp.asarray(r_mask))[0]) == -0.75


def test_trajectory_without_executed_rounds_scores_nan():
    mask, lp, ntok, ent = _node_batch(3)
    mask[:, 0] = False
    r_mask, agreement, entropy = _round_batch(3)
    r_mask[:, 0] = False
    with jax.enable_x64(True):
        node = _node_jax(mask, lp, ntok, ent, np.float64)
        rounds = _round_jax(r_mask, agreement, entropy, np.float64)
    for name in ("msp_final", "perplexity_final", "mean_token_entropy"):
        assert np.isnan(node[name][0]), name
    for name in ("last_agreement", "mean_agreement", "weighted_agreement"):
        assert np.isnan(rounds[name][0]), name
    assert node["n_nodes"][0] == 0 and rounds["n_rounds"][0] == 0


# ---------------------------------------------------------------------------------------
# Invariances


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_padding_invariance_extra_rounds_agents_trajectories_filled_with_nan(dtype):
    mask, lp, ntok, ent = _node_batch(4, shape=(2, 10, 3))
    pad = NODE_SHAPE
    p_mask = np.zeros(pad, bool)
    p_mask[:2, :10, :3] = mask
    p_lp, p_ent = np.full(pad, np.nan), np.full(pad, np.nan)
    p_lp[:2, :10, :3], p_ent[:2, :10, :3] = lp, ent
    p_ntok = np.zeros(pad, int)
    p_ntok[:2, :10, :3] = ntok
    r_mask, agreement, entropy = _round_batch(4, shape=(3, 10))
    q_mask = np.zeros(ROUND_SHAPE, bool)
    q_mask[:3, :10] = r_mask
    q_agr, q_ent = np.full(ROUND_SHAPE, np.nan), np.full(ROUND_SHAPE, np.nan)
    q_agr[:3, :10], q_ent[:3, :10] = agreement, entropy
    with jax.enable_x64(dtype == np.float64):
        a = _node_jax(mask, lp, ntok, ent, dtype)
        b = _node_jax(p_mask, p_lp, p_ntok, p_ent, dtype)
        c = _round_jax(r_mask, agreement, entropy, dtype)
        d = _round_jax(q_mask, q_agr, q_ent, dtype)
    for name in NODE_ALL:
        np.testing.assert_allclose(b[name][:10], a[name], **TOL[dtype], err_msg=name)
    for name in ROUND_ALL:
        np.testing.assert_allclose(d[name][:10], c[name], **TOL[dtype], err_msg=name)
    assert np.isnan(b["msp_final"][10:]).all() and np.isnan(d["mean_agreement"][10:]).all()


def test_agent_order_invariance_of_node_baselines():
    mask, lp, ntok, ent = _node_batch(6)
    perm = np.array([2, 0, 3, 1])
    with jax.enable_x64(True):
        a = _node_jax(mask, lp, ntok, ent, np.float64)
        b = _node_jax(mask[..., perm], lp[..., perm], ntok[..., perm], ent[..., perm],
                      np.float64)
    _assert_close(a, b, np.float64)


# ---------------------------------------------------------------------------------------
# Compilation, inputs, fields


def test_second_call_with_same_shapes_does_not_recompile():
    mask, lp, ntok, ent = _node_batch(7)
    B.msp_final(jnp.asarray(lp, jnp.float32), jnp.asarray(mask))
    before = B.msp_final._cache_size(), B.node_baselines._cache_size()
    mask, lp, ntok, ent = _node_batch(8)
    B.msp_final(jnp.asarray(lp, jnp.float32), jnp.asarray(mask))
    assert (B.msp_final._cache_size(), B.node_baselines._cache_size()) == before


def test_missing_input_or_unknown_field_raises():
    mask, lp, _, _ = _node_batch(9)
    with pytest.raises(ValueError, match="perplexity_final needs n_tokens"):
        B.node_baselines(jnp.asarray(lp), None, None, jnp.asarray(mask),
                         fields=("perplexity_final",))
    with pytest.raises(ValueError, match="needs n_tokens"):
        B.node_baselines_numpy(lp, None, None, mask, fields=("perplexity_final",))
    with pytest.raises(ValueError, match="unknown node baseline"):
        B.node_baselines_numpy(lp, None, None, mask, fields=("nope",))
    r_mask, agreement, _ = _round_batch(9)
    with pytest.raises(ValueError, match="weighted_agreement needs token_entropy"):
        B.round_baselines(jnp.asarray(agreement), None, jnp.asarray(r_mask),
                          fields=("weighted_agreement",))
    with pytest.raises(ValueError, match="unknown round baseline"):
        B.round_baselines_numpy(agreement, None, r_mask, fields=("nope",))


# ---------------------------------------------------------------------------------------
# Drawn shapes against the exact reference (tests/_references.py), ties, slot order


@st.composite
def _node_case(draw):
    # Drawn extents padded to buckets (1 stays 1, else the largest: 6 rounds, 5
    # trajectories, 9 agents) so that the kernels compile per bucket, not per drawn shape:
    # padding rounds and agents are masked, padding trajectories are more drawn ones.
    t_drawn, n, a_drawn = draw(st.integers(1, 6)), draw(st.integers(1, 5)), draw(st.integers(1, 9))
    t, n, a = (1 if x == 1 else top for x, top in ((t_drawn, 6), (n, 5), (a_drawn, 9)))
    rng = np.random.default_rng(draw(st.integers(0, 2**32 - 1)))
    mask = rng.random((t, n, a)) < draw(st.sampled_from([0.3, 0.8, 1.0]))
    mask &= (np.arange(t)[:, None, None] < t_drawn) & (np.arange(a) < a_drawn)
    lp = -rng.exponential(3.0, (t, n, a)) * (rng.random((t, n, a)) > 0.1)  # zeros too
    ntok = rng.integers(1, 60, (t, n, a))
    ent = rng.exponential(0.5, (t, n, a)) * (rng.random((t, n, a)) > 0.2)
    lp[~mask], ent[~mask] = np.nan, np.nan
    return mask, lp, ntok, ent


@settings(max_examples=40, deadline=None)
@given(case=_node_case())
def test_node_baselines_match_exact_reference_on_drawn_shapes(case):
    mask, lp, ntok, ent = case
    fields = ("msp_final", "perplexity_final", "mean_token_entropy")
    want = {f: [] for f in fields}
    for k in range(mask.shape[1]):
        ref = node_baselines_exact(lp[:, k].tolist(), ntok[:, k].tolist(), ent[:, k].tolist(),
                                   mask[:, k].tolist())
        for f in fields:
            want[f].append(ref[f])
    twin = B.node_baselines_numpy(lp, ntok, ent, mask, fields=fields)
    with jax.enable_x64(True):
        got = _node_jax(mask, lp, ntok, ent, np.float64, fields=fields)
    with jax.enable_x64(False):
        got32 = _node_jax(mask, lp, ntok, ent, np.float32, fields=fields)
    for f in fields:
        np.testing.assert_allclose(got[f], want[f], rtol=1e-13, atol=1e-13, err_msg=f)
        np.testing.assert_allclose(twin[f], want[f], rtol=1e-13, atol=1e-13, err_msg=f)
        np.testing.assert_allclose(got32[f], want[f], rtol=2e-6, atol=1e-6, err_msg=f)


@st.composite
def _round_case(draw):
    t_drawn = draw(st.integers(1, 20))  # past 12 rounds the scan is rolled (another path)
    n = draw(st.integers(1, 6))
    team = draw(st.integers(1, 12))
    # Drawn extents padded to buckets so that the kernels compile per bucket, not per drawn
    # shape: rounds to 1, 12 (unrolled) or 20 (rolled), masked past the drawn length;
    # trajectories to 1 or 6 (more drawn ones).
    t = 1 if t_drawn == 1 else 12 if t_drawn <= 12 else 20
    n = 1 if n == 1 else 6
    rng = np.random.default_rng(draw(st.integers(0, 2**32 - 1)))
    mask = np.arange(t)[:, None] < rng.integers(0, t_drawn + 1, n)[None, :]
    agreement = rng.integers(0, team + 1, (t, n)) / team
    entropy = rng.exponential(0.5, (t, n)) * (rng.random((t, n)) > 0.2)
    agreement[~mask], entropy[~mask] = np.nan, np.nan
    return mask, agreement, entropy, team


@settings(max_examples=40, deadline=None)
@given(case=_round_case(), with_team=st.booleans())
def test_round_baselines_match_exact_reference_on_drawn_shapes(case, with_team):
    mask, agreement, entropy, team = case
    n = mask.shape[1]
    team_size = np.full(n, float(team)) if with_team else None
    want = {f: [] for f in ("last_agreement", "mean_agreement", "weighted_agreement")}
    for k in range(n):
        rounds = mask[:, k]
        if not rounds.any():
            for f in want:
                want[f].append(np.nan)
            continue
        ref = round_baselines_exact(agreement[rounds, k].tolist(), entropy[rounds, k].tolist(),
                                    team if with_team else None)
        for f in want:
            want[f].append(ref[f])
    fields = tuple(want)
    twin = B.round_baselines_numpy(agreement, entropy, mask, team_size=team_size, fields=fields)
    with jax.enable_x64(True):
        got = _round_jax(mask, agreement, entropy, np.float64, fields, team_size)
    with jax.enable_x64(False):
        got32 = _round_jax(mask, agreement, entropy, np.float32, fields, team_size)
    for f in fields:
        # With a team size, mean and last agreement are one correctly rounded division of
        # integers: exactly the reference, in both dtypes.
        if with_team and f != "weighted_agreement":
            np.testing.assert_array_equal(got[f], want[f], err_msg=f)
            np.testing.assert_array_equal(twin[f], want[f], err_msg=f)
            np.testing.assert_array_equal(got32[f], np.float32(want[f]), err_msg=f)
        np.testing.assert_allclose(got[f], want[f], rtol=1e-13, atol=1e-13, err_msg=f)
        np.testing.assert_allclose(twin[f], want[f], rtol=1e-13, atol=1e-13, err_msg=f)
        np.testing.assert_allclose(got32[f], want[f], rtol=2e-6, atol=2e-6, err_msg=f)


@pytest.mark.parametrize("dtype", [np.float64, np.float32])
def test_round_baselines_rolled_and_unrolled_scans_agree_bit_for_bit(dtype):
    """The rolled scan carries the first round's R_t; the unrolled one computes the weights
    up front: the same divisions, so the same bits (one machine, one dtype)."""
    rng = np.random.default_rng(11)
    t, n = 15, 4000
    mask = np.arange(t)[:, None] < rng.integers(0, t + 1, n)[None, :]
    team = rng.integers(1, 9, n).astype(float)
    agreement = rng.integers(0, 9, (t, n)) % (team + 1) / team
    entropy = rng.exponential(0.5, (t, n)) * (rng.random((t, n)) > 0.2)
    with jax.enable_x64(dtype == np.float64):
        args = (jnp.asarray(agreement, dtype), jnp.asarray(entropy, dtype), jnp.asarray(mask))
        outs = [B.round_baselines(*args, team_size=jnp.asarray(team, dtype), fields=ROUND_ALL,
                                  unroll=u) for u in (1, 4, True)]
        outs = [{k: np.asarray(v) for k, v in o.items()} for o in outs]
    for other in outs[1:]:
        for f in ROUND_ALL:
            np.testing.assert_array_equal(outs[0][f], other[f], err_msg=f)


def test_tied_mean_and_weighted_agreement_are_equal_floats():
    # Three trajectories with true mean agreement 4/5 (team of 5): plain float sums give
    # -0.7999999999999999 / -0.8000000000000002 and turn this tie into an ordering.
    agreement = np.array([[0.4, 0.6, 0.8], [1.0, 0.8, 0.8], [1.0, 1.0, 0.8]])
    entropy = np.full((3, 3), 0.3)  # equal weights: weighted agreement is the mean too
    mask = np.ones((3, 3), bool)
    team = np.full(3, 5.0)
    for dtype in (np.float64, np.float32):
        want = dtype(-0.8)  # the float nearest -4/5
        twin = B.round_baselines_numpy(agreement.astype(dtype), entropy.astype(dtype), mask,
                                       team_size=team, fields=ROUND_ALL)
        with jax.enable_x64(dtype == np.float64):
            got = _round_jax(mask, agreement, entropy, dtype, team=team)
        for out in (twin, got):
            assert out["mean_agreement"].tolist() == [want] * 3
            assert out["weighted_agreement"].tolist() == [want] * 3


def test_tied_agreement_gets_tied_scores_through_the_engine():
    import pyarrow as pa

    import fastuq

    rows = [
        {"trajectory_id": f"t{i}", "protocol": "debate", "n_agents": 5, "agreement": a,
         "token_entropy": [0.2] * 3}
        for i, a in enumerate([[0.4, 1, 1], [0.6, 0.8, 1], [0.8, 0.8, 0.8], [0.2, 1, 1]])
    ]
    table = pa.Table.from_pylist(rows)
    for backend in ("jax", "numpy"):
        for dtype in ("float64", "float32"):
            out = fastuq.score(table, "mean_agreement,weighted_agreement", backend=backend,
                               dtype=dtype)
            for name in ("mean_agreement", "weighted_agreement"):
                col = out[name].to_numpy()
                assert col[0] == col[1] == col[2] == np.float64(np.dtype(dtype).type(-0.8))
                assert col[3] > col[0]  # 11/15 < 4/5: less agreement, more uncertainty


@settings(max_examples=25, deadline=None)
@given(seed=st.integers(0, 2**32 - 1), width=st.sampled_from([1, 2, 3, 4, 5, 7, 8]))
def test_slot_sums_do_not_depend_on_slot_padding_or_batch_size(seed, width):
    rng = np.random.default_rng(seed)
    x = -rng.exponential(3.0, (3, 37, width)) * 10.0 ** rng.integers(-8, 8, (3, 37, width))
    mask = rng.random(x.shape) < 0.8
    padded = np.concatenate([x, np.full((3, 37, 16 - width), np.nan)], axis=2)
    p_mask = np.concatenate([mask, np.zeros((3, 37, 16 - width), bool)], axis=2)
    with jax.enable_x64(True):
        a = _node_jax(mask, x, np.ones(x.shape, int), -x, np.float64)
        b = _node_jax(p_mask, padded, np.ones(padded.shape, int), -padded, np.float64)
        c = _node_jax(mask[:, :5], x[:, :5], np.ones((3, 5, width), int), -x[:, :5],
                      np.float64)
    twin = B.node_baselines_numpy(padded, np.ones(padded.shape, int), -padded, p_mask,
                                  fields=NODE_ALL)
    for name in NODE_ALL:
        assert np.array_equal(a[name], b[name], equal_nan=True), name
        assert np.array_equal(a[name][:5], c[name], equal_nan=True), name
        if name == "perplexity_final":  # exp: XLA's and NumPy's differ in the last bit
            np.testing.assert_allclose(twin[name], a[name], rtol=1e-14)
        else:  # the same additions in the same order: the same bits
            assert np.array_equal(twin[name], a[name], equal_nan=True), name
