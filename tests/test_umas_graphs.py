"""UMAS on explicit interaction graphs, any team size, any length: the engine
(``fastuq.score`` with a ``predecessors`` column, JAX and NumPy backends), the jitted kernel,
its NumPy twin and the kernel module's ``umas_trajectory``, each against the plain-Python
reference in ``tests/_umas_reference.py`` (written from DESIGN.md, importing nothing from
fastuq).

Shapes and values are drawn by hypothesis: rounds, agents, trajectories, ragged round
lengths, team sizes, absent agents, graphs with null trajectories/rounds/nodes, empty lists,
duplicates and self-references, and edge values (one agent, one round, c = 0, c at the
-1e-12 clip, ties). Tolerances: float64 to 1e-12 (relative and absolute); float32 against
the float64 reference to ``F32_BOUND``, relative to the largest |c| of the trajectory.
"""

from __future__ import annotations

import math

import jax
import jax.numpy as jnp
import numpy as np
import pyarrow as pa
import pytest
from _umas_reference import edge_mask_of, umas_reference
from hypothesis import given, settings
from hypothesis import strategies as st

import fastuq
from fastuq.kernels import umas as U

F64 = dict(rtol=1e-12, atol=1e-12)
EPS32 = float(np.finfo(np.float32).eps)
TINY32 = float(np.finfo(np.float32).tiny)


def f32_bound(t_max: int, scale: float) -> float:
    """Stated float32 error bound for a trajectory of ``t_max`` rounds whose largest |c| is
    ``scale``: ``4 * (T + 1) * eps32 * scale``, plus float32's smallest normal number (a
    confidence below it, such as -5e-79, is not representable).

    Why it holds: c_dyn is a convex combination of the node's confidences, so every
    quantity is O(scale); w_ji = c_j / d - 1 >= -1 (c_j and d share a sign), and where w_ji
    is large the sigmoid is flat, so a relative error eps in c_j or d moves sigmoid(w_ji) by
    at most eps * max_x sigmoid'(x) (1 + x) < eps / 2: dividing by a receiver confidence near
    0 (or at the -1e-12 clip) loses nothing. Each round adds O(eps * scale) to c_dyn and the
    running sums, and nothing subtracts like quantities (all c_dyn share one sign)."""
    return 4 * (t_max + 1) * EPS32 * scale + TINY32


# ---------------------------------------------------------------------------------------
# Strategies

# Edge values: zero confidence, the clip at -1e-12 and either side of it, ties (a small pool
# of repeated values), tiny and large magnitudes; plus ordinary draws.
EDGE_VALUES = [0.0, -1e-12, -1e-13, -2e-12, -1.0, -1.0, -2.5, -1e-6, -300.0]
values = st.one_of(st.sampled_from(EDGE_VALUES),
                   st.floats(-60.0, 0.0, allow_nan=False, allow_subnormal=False))


@st.composite
def trajectories(draw, max_team: int = 6, max_rounds: int = 4, schema: bool = False):
    """One trajectory: ``(conf [round][agent] with None, predecessors or None, n_agents)``.

    Team size 1..max_team (sometimes an agent that never speaks); 1..max_rounds rounds,
    each as long as the team or cut short (trailing agents absent); absent agents anywhere;
    at least one node. Graph: None (no column value: default), or per round a list of
    nodes, each None (default), [] (none) or indices of the team (duplicates, self). With
    ``schema``, the graph lines up with ``conf`` round by round and slot by slot, as
    ``fastuq.io.schema.validate`` requires of node columns; without, rounds may also be None or
    cut short (missing entries: default), which ``umas_trajectory`` and the kernels take."""
    team = draw(st.integers(1, max_team))
    t_max = draw(st.integers(1, max_rounds))
    conf = []
    for _ in range(t_max):
        width = draw(st.sampled_from([team, team, draw(st.integers(0, team))]))
        conf.append([draw(st.one_of(values, values, st.none())) for _ in range(width)])
    if not any(c is not None for row in conf for c in row):
        conf[0] = [draw(values)] + conf[0][1:] if conf[0] else [draw(values)]
    preds = None
    if draw(st.booleans()):
        node = st.one_of(st.none(), st.lists(st.integers(0, team - 1), max_size=team + 1))
        preds = []
        for row in conf:
            if not schema and draw(st.integers(0, 5)) == 0:
                preds.append(None)
            else:
                width = len(row) if schema else draw(st.integers(0, team))
                preds.append([draw(node) for _ in range(width)])
    return conf, preds, team


def _scale(conf) -> float:
    return max(abs(c) for row in conf for c in row if c is not None)


def _check_outputs(got: dict, ref: dict, n: int, a_pad: int, tol: dict) -> None:
    """Kernel/twin outputs of trajectory ``n`` against the reference (summaries and traces)."""
    assert got["n_nodes"][n] == ref["n_nodes"]
    np.testing.assert_allclose(got["umas"][n], ref["umas"], **tol)
    np.testing.assert_allclose(got["umas_fix"][n], ref["umas_fix"], **tol)
    t_pad = got["c_dyn"].shape[0]
    for name in ("c_dyn", "w"):
        want = np.full((t_pad, a_pad), np.nan)
        for t, row in enumerate(ref[name]):
            want[t, : len(row)] = [np.nan if x is None else x for x in row]
        np.testing.assert_allclose(got[name][:, n], want, **tol, err_msg=name)


def _pack(batch, t_pad: int, n_pad: int, a_pad: int):
    """Trajectories -> (conf [T, N, A] float64 with NaN, node_mask, edge_mask [T, N, A, A])
    in a padded bucket, nulls in the graph resolved to the default (as the engine does)."""
    conf = np.full((t_pad, n_pad, a_pad), np.nan)
    edges = np.zeros((t_pad, n_pad, a_pad, a_pad), bool)
    for n, (rows, preds, team) in enumerate(batch):
        for t, row in enumerate(rows):
            conf[t, n, : len(row)] = [np.nan if c is None else c for c in row]
        edges[: len(rows), n] = edge_mask_of(preds, rows, team, a_pad)
    return conf, ~np.isnan(conf), edges


def _kernel(conf, mask, edges, dtype):
    with jax.enable_x64(dtype == np.float64):
        out = U.umas_scan(jnp.asarray(conf.astype(dtype)), jnp.asarray(mask),
                          jnp.asarray(edges), fields=U.SUMMARY_FIELDS + U.TRACE_FIELDS)
        return {k: np.asarray(v) for k, v in out.items()}


# ---------------------------------------------------------------------------------------
# Kernel, twin and umas_trajectory against the reference


@settings(max_examples=30, deadline=None)
@given(batch=st.lists(trajectories(), min_size=1, max_size=5), packed=st.booleans())
def test_kernel_and_twin_match_reference_on_drawn_graphs(batch, packed):
    a_pad = 1 << max(0, max(team for _, _, team in batch) - 1).bit_length()
    conf, mask, edges = _pack(batch, 4, 8, a_pad)  # a few bucket shapes: few compiles
    graph = U.pack_edges(edges) if packed else edges
    refs = [umas_reference(rows, preds, team) for rows, preds, team in batch]
    fields = U.SUMMARY_FIELDS + U.TRACE_FIELDS
    twin64 = U.umas_scan_numpy(conf, mask, graph, fields=fields)
    jit64 = _kernel(conf, mask, graph, np.float64)
    twin32 = U.umas_scan_numpy(conf.astype(np.float32), mask, graph, fields=fields)
    jit32 = _kernel(conf, mask, graph, np.float32)
    for n, ((rows, _, _), ref) in enumerate(zip(batch, refs, strict=True)):
        _check_outputs(twin64, ref, n, a_pad, F64)
        _check_outputs(jit64, ref, n, a_pad, F64)
        bound = f32_bound(len(rows), _scale(rows))
        for out in (twin32, jit32):
            assert out["umas"].dtype == np.float32
            assert abs(float(out["umas"][n]) - ref["umas"]) <= bound
            assert abs(float(out["umas_fix"][n]) - ref["umas_fix"]) <= bound
    assert np.isnan(jit64["umas"][len(batch):]).all()  # padded trajectories


@settings(max_examples=60, deadline=None)
@given(traj=trajectories(max_team=7, max_rounds=6))
def test_umas_trajectory_matches_reference(traj):
    rows, preds, team = traj
    got = U.umas_trajectory(rows, preds, n_agents=team)
    ref = umas_reference(rows, preds, team)
    assert got["n_nodes"] == ref["n_nodes"]
    assert got["umas"] == pytest.approx(ref["umas"], rel=1e-12, abs=1e-12)
    assert got["umas_fix"] == pytest.approx(ref["umas_fix"], rel=1e-12, abs=1e-12)
    for got_row, ref_row in zip(got["c_dyn"], ref["c_dyn"], strict=False):
        for g, r in zip(got_row, ref_row, strict=False):
            assert (g is None) == (r is None)
            if g is not None:
                assert g == pytest.approx(r, rel=1e-12, abs=1e-12)


# ---------------------------------------------------------------------------------------
# The engine: fastuq.score with a predecessors column


def _table(batch, with_n_agents: bool = True) -> pa.Table:
    cols = {
        "trajectory_id": [f"t{k}" for k in range(len(batch))],
        "protocol": ["debate"] * len(batch),
        "seq_logprob": pa.array([rows for rows, _, _ in batch], pa.list_(pa.list_(pa.float64()))),
        "predecessors": pa.array([preds for _, preds, _ in batch],
                                 pa.list_(pa.list_(pa.list_(pa.int32())))),
    }
    if with_n_agents:
        cols["n_agents"] = pa.array([team for _, _, team in batch], pa.int32())
    return pa.table(cols)


@settings(max_examples=20, deadline=None)
@given(batch=st.lists(trajectories(max_rounds=3, schema=True), min_size=1, max_size=6))
def test_engine_matches_reference_on_drawn_corpora(batch):
    # A trajectory without predecessors in a corpus that has the column: its entry is null.
    table = _table(batch)
    want = [umas_reference(rows, preds, team)["umas"] for rows, preds, team in batch]
    fix = [umas_reference(rows, None, team)["umas_fix"] for rows, _, team in batch]
    for backend in ("jax", "numpy"):
        got = fastuq.score(table, ["umas", "umas_fix"], backend=backend)
        np.testing.assert_allclose(got["umas"].to_numpy(), want, **F64, err_msg=backend)
        np.testing.assert_allclose(got["umas_fix"].to_numpy(), fix, **F64, err_msg=backend)


def test_null_node_is_the_default_graph_and_empty_list_is_no_predecessors():
    # Team of 3, two rounds. Round 1: agent 0 has a null entry (default: reads 1 and 2),
    # agent 1 an empty list (no predecessors: c_dyn = c), agent 2 reads agent 0.
    seq = [[-1.0, -2.0, -4.0], [-0.5, -3.0, -1.0]]
    preds = [[[], [], []], [None, [], [0]]]
    s = 1.0 / (1.0 + math.exp(-1.0))  # w_10 = (-2 + 1) / -1 = 1
    s2 = 1.0 / (1.0 + math.exp(-3.0))  # w_20 = (-4 + 1) / -1 = 3
    w0 = 1.0 - (s + s2) / 2.0
    cd0 = (1 - w0) * -1.0 + w0 * -0.5
    w2 = 1.0 - 1.0 / (1.0 + math.exp(-((-1.0 + 4.0) / -4.0)))  # w_02 = (-1 + 4) / -4
    cd2 = (1 - w2) * -4.0 + w2 * -1.0
    want = -(-1.0 - 2.0 - 4.0 + cd0 - 3.0 + cd2) / 6.0
    assert umas_reference(seq, preds, 3)["umas"] == pytest.approx(want, abs=1e-14)
    assert U.umas_trajectory(seq, preds)["umas"] == pytest.approx(want, abs=1e-14)
    table = _table([(seq, preds, 3)])
    for backend in ("jax", "numpy"):
        got = fastuq.score(table, "umas", backend=backend)["umas"].to_numpy()[0]
        assert got == pytest.approx(want, abs=1e-12), backend
    # A null trajectory entry takes the default graph everywhere; so does a null round or a
    # round list cut short where the caller hands them to umas_trajectory (the engine's
    # schema requires node columns to line up round by round, so they never reach it).
    default = umas_reference(seq, None, 3)["umas"]
    assert default != pytest.approx(want)
    for backend in ("jax", "numpy"):
        got = fastuq.score(_table([(seq, preds, 3), (seq, None, 3)]), "umas", backend=backend)
        np.testing.assert_allclose(got["umas"].to_numpy(), [want, default], **F64)
    assert U.umas_trajectory(seq, [[], None])["umas"] == pytest.approx(default, abs=1e-14)
    short = U.umas_trajectory(seq, [[], [None, []]])["umas"]
    assert short == pytest.approx(umas_reference(seq, [[], [None, [], None]], 3)["umas"])
    assert short != pytest.approx(default)


@pytest.mark.parametrize("team", [33, 40, 64])
def test_explicit_graphs_beyond_32_agents(team):
    # Predecessors in slots 32 and up used to be dropped by uint32 bit rows.
    rng = np.random.default_rng(team)
    batch = []
    for k in range(3):
        rows = [[None if rng.random() < 0.1 else -float(rng.exponential(3.0))
                 for _ in range(team)] for _ in range(3)]
        preds = [[[int(j) for j in rng.choice(team, size=rng.integers(0, 6), replace=False)]
                  if rng.random() < 0.8 else None for _ in range(team)] for _ in range(3)]
        preds[1][0] = [team - 1, 32]  # a node that reads only agents past the first word
        preds[2][team - 1] = list(range(32, team))
        if k == 2:
            preds[2] = [None] * team  # a round of null nodes: the default graph
        batch.append((rows, preds, team))
    want = [umas_reference(rows, preds, team) for rows, preds, team in batch]
    for backend in ("jax", "numpy"):
        got = fastuq.score(_table(batch), "umas", backend=backend)["umas"].to_numpy()
        np.testing.assert_allclose(got, [w["umas"] for w in want], **F64, err_msg=backend)
    # The kernel and its twin on bool masks and on packed words, against the reference.
    a_pad = 64
    conf, mask, edges = _pack(batch, 3, 4, a_pad)
    words = U.pack_edges(edges)
    assert words.shape == (3, 4, a_pad, 2) and words.dtype == np.uint32
    np.testing.assert_array_equal(U.unpack_edges(words, a_pad), edges)
    for graph in (edges, words):
        twin = U.umas_scan_numpy(conf, mask, graph, fields=U.SUMMARY_FIELDS + U.TRACE_FIELDS)
        jit = _kernel(conf, mask, graph, np.float64)
        for n, ref in enumerate(want):
            _check_outputs(twin, ref, n, a_pad, F64)
            _check_outputs(jit, ref, n, a_pad, F64)
    # The reference sees a difference: the edges past slot 31 matter.
    cut = [[[j for j in p if j < 32] if p is not None else None for p in rnd]
           if rnd is not None else None for rnd in batch[0][1]]
    assert umas_reference(batch[0][0], cut, team)["umas"] != pytest.approx(want[0]["umas"])


def test_words_and_bit_rows_agree_for_small_teams():
    # [T, N, A, W] words are accepted for any A, and equal the [T, N, A] bit rows.
    rng = np.random.default_rng(3)
    conf = -rng.exponential(2.0, (3, 5, 4))
    mask = rng.random(conf.shape) < 0.8
    edges = rng.random((3, 5, 4, 4)) < 0.5
    rows = U.pack_edges(edges)
    words = rows.astype(np.uint32)[..., None]
    with jax.enable_x64(True):
        a = U.umas_scan(jnp.asarray(conf), jnp.asarray(mask), jnp.asarray(rows))["umas"]
        b = U.umas_scan(jnp.asarray(conf), jnp.asarray(mask), jnp.asarray(words))["umas"]
    np.testing.assert_array_equal(np.asarray(a), np.asarray(b))
    np.testing.assert_array_equal(U.umas_scan_numpy(conf, mask, words)["umas"],
                                  U.umas_scan_numpy(conf, mask, edges)["umas"])
    with pytest.raises(ValueError, match="at most 32 agents"):
        U.umas_scan_numpy(np.zeros((1, 1, 40)), np.ones((1, 1, 40), bool),
                          np.zeros((1, 1, 40), np.uint32))


# ---------------------------------------------------------------------------------------
# Validation: indices against the trajectory's own team


def _score_error(batch, with_n_agents=True):
    with pytest.raises(ValueError) as info:
        fastuq.score(_table(batch, with_n_agents), "umas")
    return str(info.value)


def test_index_equal_to_team_size_is_refused_though_the_slot_exists():
    # Team of 3 packs to 4 slots; index 3 used to pass. Another trajectory has 4 agents.
    seq = [[-1.0, -2.0, -3.0], [-1.0, -2.0, -3.0]]
    ok = ([[-1.0] * 4, [-1.0] * 4], [[[], [], [], []], [[3], [2], [1], [0]]], 4)
    bad = (seq, [[[], [], []], [[1], [0], [3]]], 3)
    msg = _score_error([ok, bad])
    assert "trajectory 't1'" in msg and "round 1, agent 2" in msg
    assert "predecessor 3" in msg and "team of 3" in msg and "(field predecessors)" in msg
    with pytest.raises(ValueError, match=r"round 1, agent 2: predecessor 3 .*team of 3"):
        U.umas_trajectory(seq, bad[1])
    with pytest.raises(ValueError, match=r"trajectory 'x'.*predecessor 3"):
        U.umas_trajectory(seq, bad[1], n_agents=3, trajectory_id="x")


def test_negative_and_null_indices_and_team_from_widths_without_n_agents():
    seq = [[-1.0, -2.0], [-1.0, -2.0]]
    msg = _score_error([(seq, [[[], []], [[-1], []]], 2)])
    assert "round 1, agent 0: predecessor -1" in msg
    msg = _score_error([(seq, [[[], []], [[], [None]]], 2)])
    assert "round 1, agent 1: predecessor null" in msg
    # Without n_agents the team is the widest round: index 2 names no agent of 2.
    msg = _score_error([(seq, [[[], []], [[2], []]], 2)], with_n_agents=False)
    assert "predecessor 2 is not an agent of the team of 2" in msg


def test_round_count_must_match_the_node_column():
    seq = [[-1.0, -2.0], [-1.0, -2.0]]
    msg = _score_error([(seq, [[[], []]], 2)])  # the schema check, before packing
    assert "predecessors" in msg and "1 rounds" in msg and "seq_logprob has 2" in msg
    from fastuq.engine.batch import Batch

    batch = Batch(_table([(seq, [[[], []]], 2)]))  # packing checks again, unvalidated input
    with pytest.raises(ValueError, match="predecessors has 1 rounds but seq_logprob has 2"):
        batch.edges()
    with pytest.raises(ValueError, match="predecessors has 1 rounds"):
        U.umas_trajectory(seq, [[[], []]])


# ---------------------------------------------------------------------------------------
# Long and wide runs: bounded compile time, same numbers as the twin


@pytest.mark.parametrize(("t_max", "team"), [(1000, 2), (200, 8), (50, 64)])
def test_long_and_wide_runs_score_through_the_public_path(t_max, team):
    # Fully unrolled, T = 1000 x A = 2 or T = 200 x A = 8 did not finish compiling (the
    # unrolled rounds fuse into one expression whose size grows exponentially with T).
    rng = np.random.default_rng(t_max + team)
    n = 3
    seq = [[[None if rng.random() < 0.05 else -float(rng.exponential(2.0))
             for _ in range(team)] for _ in range(t_max - k)] for k in range(n)]
    table = pa.table({
        "trajectory_id": [f"t{k}" for k in range(n)], "protocol": ["debate"] * n,
        "n_agents": pa.array([team] * n, pa.int32()),
        "seq_logprob": pa.array(seq, pa.list_(pa.list_(pa.float64()))),
    })
    jax_scores = fastuq.score(table, "umas")["umas"].to_numpy()
    twin = fastuq.score(table, "umas", backend="numpy")["umas"].to_numpy()
    np.testing.assert_allclose(jax_scores, twin, **F64)
    f32 = fastuq.score(table, "umas", dtype="float32")["umas"].to_numpy()
    scale = max(abs(c) for traj in seq for row in traj for c in row if c is not None)
    assert np.abs(f32 - twin).max() <= f32_bound(t_max, scale)
    if t_max * team <= 2000:  # the plain-Python reference, where it is quick
        want = [umas_reference(rows, None, team)["umas"] for rows in seq]
        np.testing.assert_allclose(twin, want, **F64)


# ---------------------------------------------------------------------------------------
# Float32: no cancellation in w = 1 - mean sigmoid(w_ji)


def test_float32_keeps_a_tiny_weight_that_one_minus_sigmoid_rounded_to_zero():
    # Round 1, agent 2 (c_dyn = -4.9e-12) reads agents far less confident: w_02 ~ 8.6e12,
    # w_12 = 22.1, so w_2 = (sigmoid(-8.6e12) + sigmoid(-22.1)) / 2 = 1.25e-10. As
    # 1 - mean sigmoid(w_j2) in float32 that is 1 - 1 = 0, which leaves c_dyn = -4.9e-12
    # instead of -3.1e-10; round 2 then weighs ratios against a receiver 60x too small and
    # the score moved by ~0.1 (bound: 8e-5). Computed as mean sigmoid(-w_ji): no loss.
    seq = [[-42.1, -1.127e-10, -4.876e-12], [-1.0, -2.0, -2.47], [-1e-9, -3.0, -9.3]]
    ref = umas_reference(seq, None, 3)
    assert ref["w"][1][2] == pytest.approx(1.25e-10, rel=0.02)
    bound = f32_bound(3, 42.1)
    conf = np.array(seq, float)[:, None, :]
    mask = np.ones(conf.shape, bool)
    for dtype in (np.float32, np.float64):
        twin = U.umas_scan_numpy(conf.astype(dtype), mask, fields=("umas", "w"))
        with jax.enable_x64(dtype == np.float64):
            jit = U.umas_scan(jnp.asarray(conf.astype(dtype)), jnp.asarray(mask),
                              fields=("umas", "w"))
        tol = bound if dtype == np.float32 else 1e-12
        for out in (twin, jit):
            assert abs(float(out["umas"][0]) - ref["umas"]) <= tol
            assert float(out["w"][1, 0, 2]) == pytest.approx(ref["w"][1][2], rel=1e-5, abs=0)
    table = _table([(seq, None, 3)])
    for backend in ("jax", "numpy"):
        got = fastuq.score(table, "umas", backend=backend, dtype="float32")["umas"].to_numpy()
        assert abs(got[0] - ref["umas"]) <= bound, backend
    assert U.umas_trajectory(seq)["umas"] == pytest.approx(ref["umas"], rel=1e-12)
