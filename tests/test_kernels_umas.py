"""UMAS kernels (kernels/umas.py): the jitted scan against its NumPy twin, both against the
reference in tests/_umas_reference.py (written from DESIGN.md apart from the kernel module),
a hand-worked example, invariances and named edge cases. Shapes (T, N, A) are drawn; graphs,
ragged lengths and absent agents come from the drawn seed. More drawn graphs and values:
tests/test_umas_graphs.py.

Tolerances: float64 to 1e-12 (inside ``jax.enable_x64(True)``), float32 kernel vs float32
twin to 1e-5 (relative, the scores are O(1..100)).
"""

import math

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from _umas_reference import umas_reference
from hypothesis import given, settings
from hypothesis import strategies as st

from fastuq.kernels import umas as U

ALL_FIELDS = U.SUMMARY_FIELDS + U.TRACE_FIELDS
TOL = {np.float64: dict(rtol=1e-12, atol=1e-12), np.float32: dict(rtol=1e-5, atol=1e-5)}
SHAPE = (3, 16, 4)  # one padded bucket for most tests: one compile per dtype and graph kind


def _sig(x):
    return 1.0 / (1.0 + math.exp(-x))


def _random_batch(seed, shape=SHAPE, p_node=0.8, p_edge=0.6, p_zero=0.1):
    """Ragged trajectories in a padded bucket: random node masks (including trajectories cut
    short, absent agents and empty trajectories), random graphs, NaN in every padded slot."""
    rng = np.random.default_rng(seed)
    t_max, n, a = shape
    conf = -rng.exponential(4.0, shape)
    conf[rng.random(shape) < p_zero] = 0.0
    mask = rng.random(shape) < p_node
    length = rng.integers(0, t_max + 1, n)  # rounds executed per trajectory
    mask &= np.arange(t_max)[:, None, None] < length[None, :, None]
    conf[~mask] = np.nan
    edges = rng.random((t_max, n, a, a)) < p_edge
    return conf, mask, edges


def _run_jax(conf, mask, edges, dtype, **kw):
    conf = jnp.asarray(conf.astype(dtype))
    edges = None if edges is None else jnp.asarray(edges)
    out = U.umas_scan(conf, jnp.asarray(mask), edges, fields=ALL_FIELDS, **kw)
    return {k: np.asarray(v) for k, v in out.items()}


def _assert_close(got, want, dtype):
    for name in want:
        assert got[name].dtype == want[name].dtype == dtype, name
        np.testing.assert_allclose(got[name], want[name], **TOL[dtype], err_msg=name)


def _python(conf, mask, edges, n, self_edges=False):
    """The reference (tests/_umas_reference.py) for trajectory n from the packed arrays; the
    default graph with self-edges is passed to it as explicit lists."""
    t_max, _, a = mask.shape
    rows = [[float(conf[t, n, i]) if mask[t, n, i] else None for i in range(a)]
            for t in range(t_max)]
    preds = None
    if edges is None and self_edges:
        edges = np.ones((t_max, 1, a, a), bool)
        n = 0
    if edges is not None:
        preds = [[[j for j in range(a) if edges[t, n, i, j]] for i in range(a)]
                 for t in range(t_max)]
    return umas_reference(rows, preds, a)


# ---------------------------------------------------------------------------------------
# Hand-worked example


def test_hand_worked_two_agents_two_rounds_default_graph():
    # Round 0: c = [-2, -4] -> c_dyn = c.  Round 1: c = [-1, -3]; each agent reads the other.
    # Agent 0: d = -2, w_10 = (-4 - (-2)) / (-2) = 1,     w_0 = 1 - sigmoid(1)
    #          c_dyn = (1 - w_0) * (-2) + w_0 * (-1)
    # Agent 1: d = -4, w_01 = (-2 - (-4)) / (-4) = -0.5,  w_1 = 1 - sigmoid(-0.5)
    #          c_dyn = (1 - w_1) * (-4) + w_1 * (-3)
    w0 = 1.0 - 1.0 / (1.0 + math.exp(-1.0))  # 0.2689414...
    w1 = 1.0 - 1.0 / (1.0 + math.exp(0.5))  # 0.6224593...
    cd0 = (1.0 - w0) * -2.0 + w0 * -1.0  # -1.7310585...
    cd1 = (1.0 - w1) * -4.0 + w1 * -3.0  # -3.3775406...
    umas = -(-2.0 + -4.0 + cd0 + cd1) / 4.0  # 2.7771498119...
    umas_fix = -(-2.0 + -4.0 + -1.0 + -3.0) / 4.0  # 2.5
    assert umas == pytest.approx(2.7771498119, abs=1e-10)

    conf = np.array([[[-2.0, -4.0]], [[-1.0, -3.0]]])
    mask = np.ones(conf.shape, bool)
    want_cd = np.array([[[-2.0, -4.0]], [[cd0, cd1]]])
    want_w = np.array([[[1.0, 1.0]], [[w0, w1]]])
    with jax.enable_x64(True):
        got = _run_jax(conf, mask, None, np.float64)
    ref = U.umas_scan_numpy(conf, mask, fields=ALL_FIELDS)
    for out in (got, ref):
        assert out["umas"][0] == pytest.approx(umas, abs=1e-14)
        assert out["umas_fix"][0] == pytest.approx(umas_fix, abs=1e-14)
        np.testing.assert_allclose(out["c_dyn"], want_cd, atol=1e-14)
        np.testing.assert_allclose(out["w"], want_w, atol=1e-14)
    py = U.umas_trajectory([[-2.0, -4.0], [-1.0, -3.0]])
    assert py["umas"] == pytest.approx(umas, abs=1e-14)
    assert py["c_dyn"][1] == pytest.approx([cd0, cd1], abs=1e-14)


# ---------------------------------------------------------------------------------------
# Kernel vs twin vs plain Python


@settings(max_examples=20, deadline=None)
@given(
    seed=st.integers(0, 2**32 - 1),
    graph=st.sampled_from(["default", "default_self", "mask", "packed"]),
    p_node=st.sampled_from([0.5, 0.8, 1.0]),
    shape=st.tuples(st.sampled_from([1, 2, 3, 5, 13]), st.sampled_from([1, 7, 16]),
                    st.sampled_from([1, 2, 3, 4, 8])),
)
def test_jit_matches_numpy_twin_on_random_ragged_batches(seed, graph, p_node, shape):
    # T = 13 is rolled (not unrolled) at A >= 4; A = 1 has no peers; N = 1 one trajectory.
    conf, mask, edges = _random_batch(seed, shape=shape, p_node=p_node)
    self_edges = graph == "default_self"
    if graph.startswith("default"):
        edges = None
    elif graph == "packed":
        edges = U.pack_edges(edges)
    for dtype in (np.float64, np.float32):
        want = U.umas_scan_numpy(
            conf.astype(dtype), mask, edges, fields=ALL_FIELDS, self_edges=self_edges
        )
        with jax.enable_x64(dtype == np.float64):
            got = _run_jax(conf, mask, edges, dtype, self_edges=self_edges)
        _assert_close(got, want, dtype)


@given(seed=st.integers(0, 2**32 - 1), explicit=st.booleans(), self_edges=st.booleans(),
       t_max=st.integers(1, 6), a=st.integers(1, 6))
def test_numpy_twin_matches_plain_python_reference(seed, explicit, self_edges, t_max, a):
    conf, mask, edges = _random_batch(seed, shape=(t_max, 4, a))
    if not explicit:
        edges = None
    out = U.umas_scan_numpy(conf, mask, edges, fields=ALL_FIELDS, self_edges=self_edges)
    for n in range(conf.shape[1]):
        py = _python(conf, mask, edges, n, self_edges)
        if py["n_nodes"] == 0:
            assert np.isnan(out["umas"][n]) and np.isnan(out["umas_fix"][n])
            continue
        assert out["umas"][n] == pytest.approx(py["umas"], rel=1e-12, abs=1e-12)
        assert out["umas_fix"][n] == pytest.approx(py["umas_fix"], rel=1e-12, abs=1e-12)
        assert out["n_nodes"][n] == py["n_nodes"]
        for t, row in enumerate(py["c_dyn"]):
            for i, value in enumerate(row):
                if value is None:
                    assert np.isnan(out["c_dyn"][t, n, i])
                else:
                    assert out["c_dyn"][t, n, i] == pytest.approx(value, rel=1e-12, abs=1e-12)


@pytest.mark.parametrize("explicit", [False, True])
def test_many_agents_dense_path_matches_twin(explicit):
    a = U.MAX_UNROLLED_AGENTS + 2
    conf, mask, edges = _random_batch(7, shape=(3, 12, a))
    if not explicit:
        edges = None
    want = U.umas_scan_numpy(conf, mask, edges, fields=ALL_FIELDS)
    with jax.enable_x64(True):
        got = _run_jax(conf, mask, edges, np.float64)
    _assert_close(got, want, np.float64)


def test_rolled_scan_gives_the_unrolled_numbers():
    conf, mask, edges = _random_batch(11)
    with jax.enable_x64(True):
        a = _run_jax(conf, mask, edges, np.float64)
        b = _run_jax(conf, mask, edges, np.float64, unroll=1)
    _assert_close(a, b, np.float64)


# ---------------------------------------------------------------------------------------
# Default graphs: the fast path equals explicit edges


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("self_edges", [False, True])
def test_default_graph_fast_path_equals_explicit_edge_path(dtype, self_edges):
    conf, mask, _ = _random_batch(3)
    edges = U.default_edges(mask, U.DEBATE, self_edges=self_edges)
    with jax.enable_x64(dtype == np.float64):
        fast = _run_jax(conf, mask, None, dtype, self_edges=self_edges)
        general = _run_jax(conf, mask, edges, dtype)
        packed = _run_jax(conf, mask, U.pack_edges(edges), dtype)
    # Both paths sum the same terms in the same order (slot j = 0..A-1), so they agree to
    # the last bits. Not always to every bit: XLA's CPU backend contracts a * b + c into
    # fused multiply-adds, and where it does depends on how each program is fused, so a
    # score may differ in its last unit(s) of precision. 4 ulp is a strict bound for that.
    eps = np.finfo(dtype).eps
    for name in ALL_FIELDS:
        np.testing.assert_array_equal(np.isnan(fast[name]), np.isnan(general[name]))
        for other in (general, packed):
            np.testing.assert_allclose(
                fast[name], other[name], rtol=4 * eps, atol=4 * eps, err_msg=name
            )
    np.testing.assert_array_equal(general["umas"], packed["umas"])  # one program, two inputs
    want = U.umas_scan_numpy(conf.astype(dtype), mask, fields=ALL_FIELDS, self_edges=self_edges)
    want_edges = U.umas_scan_numpy(conf.astype(dtype), mask, edges, fields=ALL_FIELDS)
    _assert_close(want_edges, want, dtype)


def test_default_edges_rule_debate_and_dylan_numpy_and_jax():
    mask = np.array([[[1, 1, 1]], [[1, 0, 1]], [[1, 1, 0]]], bool)  # [T=3, N=1, A=3]
    edges = U.default_edges(mask, U.DEBATE)
    assert edges.shape == (3, 1, 3, 3) and edges.dtype == bool
    assert not edges[0].any()  # round 0 has no edges
    # round 1: agents 0 and 2 spoke, each reads the other two of round 0
    np.testing.assert_array_equal(edges[1, 0], [[0, 1, 1], [0, 0, 0], [1, 1, 0]])
    # round 2: agents 0 and 1 spoke; of round 1 only 0 and 2 were active
    np.testing.assert_array_equal(edges[2, 0], [[0, 0, 1], [1, 0, 1], [0, 0, 0]])
    np.testing.assert_array_equal(U.default_edges(mask, U.DYLAN), edges)
    with_self = U.default_edges(mask, U.PROTOCOL_KINDS["dylan"], self_edges=True)
    np.testing.assert_array_equal(with_self[2, 0], [[1, 0, 1], [1, 0, 1], [0, 0, 0]])
    np.testing.assert_array_equal(np.asarray(U.default_edges(jnp.asarray(mask))), edges)
    packed = U.default_edges(mask, packed=True)
    assert packed.dtype == np.uint8 and packed.shape == (3, 1, 3)
    np.testing.assert_array_equal(packed[1, 0], [0b110, 0, 0b011])
    np.testing.assert_array_equal(U.unpack_edges(packed, 3), edges)
    np.testing.assert_array_equal(np.asarray(U.pack_edges(jnp.asarray(edges))), packed)
    with pytest.raises(ValueError, match="protocol kind"):
        U.default_edges(mask, 7)


# ---------------------------------------------------------------------------------------
# Invariances


@given(seed=st.integers(0, 2**32 - 1), explicit=st.booleans())
def test_agent_order_invariance_permuting_slots_with_edges(seed, explicit):
    conf, mask, edges = _random_batch(seed)
    perm = np.random.default_rng(seed).permutation(conf.shape[2])
    if not explicit:
        edges = U.default_edges(mask)
    p_conf, p_mask = conf[..., perm], mask[..., perm]
    p_edges = edges[:, :, perm][..., perm]
    with jax.enable_x64(True):
        a = _run_jax(conf, mask, edges, np.float64)
        b = _run_jax(p_conf, p_mask, p_edges, np.float64)
    for name in U.SUMMARY_FIELDS:
        np.testing.assert_allclose(a[name], b[name], **TOL[np.float64], err_msg=name)
    for name in U.TRACE_FIELDS:
        np.testing.assert_allclose(a[name][..., perm], b[name], **TOL[np.float64])


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("explicit", [False, True])
def test_padding_invariance_extra_rounds_agents_trajectories_filled_with_nan(dtype, explicit):
    conf, mask, edges = _random_batch(5, shape=(2, 10, 3))
    p_conf = np.full(SHAPE, np.nan)  # one more round, 6 more trajectories, one more agent
    p_conf[:2, :10, :3] = conf
    p_mask = np.zeros(SHAPE, bool)
    p_mask[:2, :10, :3] = mask
    p_edges = np.ones(SHAPE + (SHAPE[2],), bool)  # padded edges claim everything: ignored
    p_edges[:2, :10, :3, :3] = edges
    if not explicit:
        edges = p_edges = None
    with jax.enable_x64(dtype == np.float64):
        a = _run_jax(conf, mask, edges, dtype)
        b = _run_jax(p_conf, p_mask, p_edges, dtype)
    for name in U.SUMMARY_FIELDS:
        np.testing.assert_allclose(b[name][:10], a[name], **TOL[dtype], err_msg=name)
    for name in U.TRACE_FIELDS:
        np.testing.assert_allclose(b[name][:2, :10, :3], a[name], **TOL[dtype])
        assert np.isnan(b[name][2:]).all() and np.isnan(b[name][:, :, 3:]).all()
    assert np.isnan(b["umas"][10:]).all() and (b["n_nodes"][10:] == 0).all()


def test_nan_and_inf_in_masked_slots_never_change_a_score():
    conf, mask, edges = _random_batch(9)
    clean = np.where(mask, conf, -1.0)
    dirty = np.where(mask, conf, np.where(np.arange(conf.size).reshape(conf.shape) % 2,
                                          np.nan, np.inf))
    with jax.enable_x64(True):
        for e in (None, edges):
            a = _run_jax(clean, mask, e, np.float64)
            b = _run_jax(dirty, mask, e, np.float64)
            for name in ALL_FIELDS:
                np.testing.assert_array_equal(a[name], b[name], err_msg=name)


# ---------------------------------------------------------------------------------------
# Named edge cases


def _both(conf_rows, preds=None):
    """Score one trajectory ``[T][A]`` (NaN = absent) with the kernel (f64), the twin and
    plain Python. It is embedded as trajectory 0 of the shared padded bucket ``SHAPE``, as
    the engine would pack it (so no new compile); returns the kernel's outputs for it."""
    t_max, _, a_max = SHAPE
    rows = np.array(conf_rows, float)
    conf = np.full(SHAPE, np.nan)
    conf[: rows.shape[0], 0, : rows.shape[1]] = rows
    mask = ~np.isnan(conf)
    edges = None
    if preds is not None:
        edges = np.zeros(SHAPE + (a_max,), bool)
        for t, row in enumerate(preds):
            for i, js in enumerate(row):
                edges[t, 0, i, list(js)] = True
    with jax.enable_x64(True):
        got = _run_jax(conf, mask, edges, np.float64)
    want = U.umas_scan_numpy(conf, mask, edges, fields=ALL_FIELDS)
    _assert_close(got, want, np.float64)
    py_rows = [[None if math.isnan(c) else c for c in row] for row in conf_rows]
    ref = umas_reference(py_rows, preds)
    assert got["umas"][0] == pytest.approx(ref["umas"], abs=1e-12)
    assert U.umas_trajectory(py_rows, preds)["umas"] == pytest.approx(ref["umas"], abs=1e-12)
    assert np.isnan(got["umas"][1:]).all()
    return {
        name: value[0] if name in U.SUMMARY_FIELDS else value[: rows.shape[0], 0, : rows.shape[1]]
        for name, value in got.items()
    }


def test_zero_confidence_node_is_clipped_not_divided_by_zero():
    # Round 0: agent 0 has c = 0 -> d_0 = -1e-12, w_10 = (-1 + 1e-12) / -1e-12 = 1e12 - 1,
    # sigmoid = 1, w_0 = 0: agent 0 keeps c_dyn = 0 (its unclipped history).
    # Agent 1: d = -1, w_01 = (0 + 1) / -1 = -1, w_1 = 1 - sigmoid(-1).
    got = _both([[0.0, -1.0], [-0.5, -2.0]])
    w1 = 1.0 - _sig(-1.0)
    assert got["w"][1, 0] == 0.0 and got["c_dyn"][1, 0] == 0.0
    assert got["c_dyn"][1, 1] == pytest.approx((1 - w1) * -1.0 + w1 * -2.0, abs=1e-14)
    # Two zero-confidence agents: w_ji = (0 + 1e-12) / -1e-12 = -1 on both sides.
    got = _both([[0.0, 0.0], [-1.0, -1.0]])
    w = 1.0 - _sig(-1.0)
    np.testing.assert_allclose(got["c_dyn"][1], [w * -1.0] * 2, atol=1e-14)
    assert np.isfinite(got["umas"]).all()


def test_node_without_predecessors_takes_own_confidence():
    # Agent 1 reads nobody at round 1 (explicit graph): w = 1, c_dyn = c.
    got = _both([[-1.0, -2.0], [-3.0, -4.0]], preds=[[[], []], [[1], []]])
    assert got["w"][1, 1] == 1.0 and got["c_dyn"][1, 1] == -4.0
    assert got["w"][1, 0] == pytest.approx(1 - _sig((-2.0 + 1.0) / -1.0), abs=1e-15)
    # A lone agent in the default graph has no peers either.
    got = _both([[-1.0], [-3.0], [-5.0]])
    assert got["umas"] == pytest.approx(3.0) and (got["w"] == 1.0).all()


def test_predecessor_absent_at_previous_round_is_not_counted():
    # Agent 0 at round 1 claims to read agents 1 and 2, but agent 2 did not speak at round 0.
    nan = float("nan")
    got = _both([[-1.0, -2.0, nan], [-3.0, -4.0, -6.0]], preds=[[[], [], []], [[1, 2], [], []]])
    assert got["w"][1, 0] == pytest.approx(1 - _sig((-2.0 + 1.0) / -1.0), abs=1e-15)


def test_agent_absent_at_previous_round_starts_afresh():
    nan = float("nan")
    # Agent 1 skips round 1 and returns at round 2: c_dyn = c there, although it has peers.
    got = _both([[-1.0, -2.0], [-3.0, nan], [-5.0, -7.0]])
    assert got["w"][2, 1] == 1.0 and got["c_dyn"][2, 1] == -7.0
    assert np.isnan(got["c_dyn"][1, 1]) and np.isnan(got["w"][1, 1])
    # Agent 0 at round 1 has no active peer at round 0 (agent 1 was absent there): afresh.
    got = _both([[-1.0, nan], [-3.0, -4.0]])
    assert got["c_dyn"][1, 0] == -3.0 and got["c_dyn"][1, 1] == -4.0


def test_trajectory_of_one_round_gives_umas_equal_umas_fix():
    got = _both([[-1.5, -2.5, -0.25]])
    assert got["umas"] == got["umas_fix"] == pytest.approx(4.25 / 3)
    assert (got["w"] == 1.0).all()


def test_trajectory_without_valid_nodes_scores_nan():
    conf = np.full((2, 3, 2), np.nan)
    mask = np.zeros(conf.shape, bool)
    mask[:, 1] = True
    conf[:, 1] = -1.0
    with jax.enable_x64(True):
        got = _run_jax(conf, mask, None, np.float64)
    assert np.isnan(got["umas"][[0, 2]]).all() and got["umas"][1] == 1.0
    assert list(got["n_nodes"]) == [0, 4, 0]


# ---------------------------------------------------------------------------------------
# Compilation, dtypes, fields


def test_second_call_with_same_shapes_does_not_recompile():
    conf, mask, _ = _random_batch(1, shape=(3, 32, 4))
    first = U.umas_scan(jnp.asarray(conf, jnp.float32), jnp.asarray(mask))
    size = U.umas_scan._cache_size()
    conf2, mask2, _ = _random_batch(2, shape=(3, 32, 4))
    second = U.umas_scan(jnp.asarray(conf2, jnp.float32), jnp.asarray(mask2))
    assert U.umas_scan._cache_size() == size
    assert not np.array_equal(np.asarray(first["umas"]), np.asarray(second["umas"]))


def test_float32_in_float32_out_and_x64_does_not_leak():
    conf, mask, _ = _random_batch(4)
    out = U.umas_scan(jnp.asarray(conf, jnp.float32), jnp.asarray(mask), fields=ALL_FIELDS)
    assert all(v.dtype == jnp.float32 for v in out.values())
    with jax.enable_x64(True):
        out = U.umas_scan(jnp.asarray(conf), jnp.asarray(mask), fields=("umas", "c_dyn"))
        assert all(v.dtype == jnp.float64 for v in out.values())
    assert jnp.zeros(1).dtype == jnp.float32


def test_only_requested_fields_are_returned_and_unknown_fields_raise():
    conf, mask, _ = _random_batch(4)
    out = U.umas_scan(jnp.asarray(conf, jnp.float32), jnp.asarray(mask), fields=("umas_fix",))
    assert list(out) == ["umas_fix"]
    with pytest.raises(ValueError, match="unknown UMAS output fields"):
        U.umas_scan(jnp.asarray(conf, jnp.float32), jnp.asarray(mask), fields=("nope",))
    with pytest.raises(ValueError, match="unknown UMAS output fields"):
        U.umas_scan_numpy(conf, mask, fields=("nope",))


def test_ten_thousand_agents_are_refused_with_the_memory_they_would_need(
        tmp_path, capsys, monkeypatch):
    """10,000 agents used to end in XLA's RESOURCE_EXHAUSTED (2.2 TB on 2 CPU cores); the
    runner now refuses before the kernel allocates, naming the bytes of the [N, A, A]
    per-round array for the shape the device gets. The device's memory is set to 1 GiB
    here, so that the refusal does not depend on the machine or on how small a bucket the
    chunk is padded to (one trajectory of 16,384 padded slots already needs 2 GiB)."""
    import re

    import pyarrow as pa
    import pyarrow.parquet as pq

    import fastuq
    from fastuq.cli import main
    from fastuq.engine import memory

    monkeypatch.setattr(memory, "device_memory_bytes", lambda: 1 << 30)
    monkeypatch.setattr(memory, "host_memory_bytes", lambda: 1 << 30)
    a = 10_000
    rng = np.random.default_rng(0)
    table = pa.table({"trajectory_id": ["t"], "protocol": ["debate"], "n_agents": [a],
                      "seq_logprob": [[(-rng.random(a)).tolist(), (-rng.random(a)).tolist()]]})
    with pytest.raises(ValueError, match="refused before allocating it") as info:
        fastuq.score(table, "umas")
    text = str(info.value)
    got = re.search(r"about [\d,.]+ GiB \(([\d,]+) bytes\).*\[N, A, A\] = \[(\d+), 16384, "
                    r"16384\] per-round pairs of (float\d+), more than the 1\.0 GiB", text)
    assert got, text
    need, rows, dtype = int(got[1].replace(",", "")), int(got[2]), got[3]
    # by hand: rows (the padded chunk, one device's share) x A^2 (10,000 padded to the next
    # power of two) x the dtype's bytes
    assert 1 <= rows <= 1024
    assert need == rows * 16_384 * 16_384 * {"float64": 8, "float32": 4}[dtype]
    # the NumPy twin does not pad the chunk: one row of pairs, refused all the same here
    with pytest.raises(ValueError, match=r"\[N, A, A\] = \[1, 16384, 16384\] per-round pairs "
                                         r"of float64, more than the 1\.0 GiB of the host"):
        fastuq.score(table, "umas", backend="numpy", dtype="float64")
    path = tmp_path / "wide.parquet"
    pq.write_table(table, path)
    # a refused run, not a crash (exit 1 here; 2 under main's one exit-status rule)
    assert main(["score", str(path), "--method", "umas", "-o", str(tmp_path / "s.parquet")]
                ) in (1, 2)
    assert "refused before allocating it" in capsys.readouterr().err


def test_largest_array_by_hand():
    # up to 16 slots the inputs [T, N, A] are the largest; beyond, [min(N, BLOCK), A, A]
    assert U.largest_array(3, 1024, 16, np.float32)[0] == 3 * 1024 * 16 * 4
    assert U.largest_array(3, 1024, 32, np.float64)[0] == 1024 * 32 * 32 * 8
    assert U.largest_array(1, 1 << 20, 32, np.float32)[0] == U.BLOCK * 32 * 32 * 4
    assert U.largest_array(3, 1 << 20, 32, np.float32, backend="numpy")[0] == \
        (1 << 20) * 32 * 32 * 4
    assert U.largest_array(400, 8, 64, np.float64)[0] == 400 * 8 * 64 * 8  # inputs win
