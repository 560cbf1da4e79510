"""UAAD (kernels/uaad.py: the whole formula; fastuq.signals.risk: packing the step columns):
hand-worked routing and stopping at every tier and stop-rule boundary, in float64 and
float32, kernel and twin; the step risk (weights, the max over a round's steps) and the risk
derived from round signals computed by the kernel, its twin and its reference, checked
against hand-worked values and against each other on drawn ragged inputs; errors naming the
record."""

from __future__ import annotations

import math

import jax
import numpy as np
import pyarrow as pa
import pytest
from hypothesis import given
from hypothesis import strategies as st

import fastuq
from fastuq.engine.errors import RecordError
from fastuq.kernels.uaad import pair_disagreement, uaad, uaad_numpy, uaad_reference
from fastuq.signals.risk import pack_steps

#: h alone: the step risk is the step's h exactly (1 * h + 0 * q + 0 * d), so that the
#: boundary cases below hit the tier bounds exactly.
H_ONLY = dict(w_h=1.0, w_q=0.0, w_d=0.0)


def _run(risk0, agreement, dtype=np.float64, **params):
    """One trajectory through kernel, twin and reference (one step per round whose h is
    ``risk0``, weights ``H_ONLY`` unless given); returns the reference's dict after checking
    the three agree exactly (small integers and the inputs themselves)."""
    params = {**H_ONLY, **params}
    t = len(agreement)
    h = np.full((t, 1, 1), risk0, dtype)
    zero = np.zeros((t, 1, 1), dtype)
    smask = np.ones((t, 1, 1), bool)
    a = np.asarray(agreement, dtype)[:, None]
    mask = np.ones((t, 1), bool)
    n = np.array([3.0], dtype)
    with jax.enable_x64(dtype == np.float64):
        got = {k: np.asarray(v) for k, v in
               uaad(h, zero, zero, smask, a, mask, n, **params).items()}
    twin = uaad_numpy(h, zero, zero, smask, a, mask, n, **params)
    ref = uaad_reference(h[:, 0], zero[:, 0], zero[:, 0], smask[:, 0], a[:, 0], mask[:, 0],
                         3.0, **params)
    for k, v in ref.items():
        assert got[k][0] == pytest.approx(v, abs=1e-6), k
        assert twin[k][0] == got[k][0], k
    return ref


@pytest.mark.parametrize("dtype", [np.float64, np.float32])
@pytest.mark.parametrize("risk, tier, stop, calls", [
    # agreement 2/3, 1, 1, 1: stable consensus first at round 2 (moved 1/3, then 0)
    (0.0, 0, 1, 3 + 1 * 1 + 1),        # low: capped at 1 round, 1 agent
    (0.3499, 0, 1, 3 + 1 + 1),
    (0.35, 1, 1, 3 + 3 * 1 + 1),       # the boundary is medium (risk < 0.35 is low)
    (0.6199, 1, 1, 3 + 3 + 1),
    (0.62, 2, 2, 3 + 6 * 2 + 1),       # high: up to 3 rounds, consensus at 2
    (1.0, 2, 2, 3 + 6 * 2 + 1),
])
def test_tiers_and_budgets_by_hand(dtype, risk, tier, stop, calls):
    out = _run(risk, [2 / 3, 1.0, 1.0, 1.0], dtype)
    assert (out["uaad_tier"], out["uaad_stop"], out["uaad_calls"]) == (tier, stop, calls)
    assert out["uaad"] == pytest.approx(risk, abs=1e-7)


@pytest.mark.parametrize("dtype", [np.float64, np.float32])
def test_stop_rule_boundaries_by_hand(dtype):
    high = dict(risk_low=0.0, risk_high=0.0)  # always high: cap 3
    # dominant share exactly tau_c stops (>=); just below does not
    assert _run(1.0, [0.8, 0.8, 0.8], dtype, **high)["uaad_stop"] == 1
    assert _run(1.0, [0.75, 0.75, 0.75], dtype, **high)["uaad_stop"] == 2  # never: last round
    # a change of exactly epsilon stops: 0.8 - 0.75 is 0.05000000000000004 in float64,
    # within the slack; 0.8 - 0.7 = 0.1 does not
    assert _run(1.0, [0.75, 0.8, 0.8], dtype, **high)["uaad_stop"] == 1
    assert _run(1.0, [0.7, 0.8, 0.8], dtype, **high)["uaad_stop"] == 2
    # epsilon = 0 needs no change at all; tau_c = 1 needs unanimity
    assert _run(1.0, [1.0, 1.0], dtype, epsilon=0.0, tau_c=1.0, **high)["uaad_stop"] == 1
    # the round cap binds: rounds_high = 1 stops at 1 even without consensus
    assert _run(1.0, [0.2, 0.4, 1, 1], dtype, rounds_high=1.0, **high)["uaad_stop"] == 1
    # one round: stop 0, calls M + 1
    one = _run(1.0, [1.0], dtype, **high)
    assert (one["uaad_stop"], one["uaad_calls"]) == (0, 3 + 0 + 1)


def test_pair_disagreement_by_hand():
    cls = np.array([[[0, 0, 1, -1], [2, 3, 4, -1], [5, 5, 5, 5], [6, -1, -1, -1],
                     [-1, -1, -1, -1]]], np.int32)
    # pairs that differ: 2 of 3; 3 of 3; 0 of 6; one voter: 0; nobody: 0
    np.testing.assert_allclose(pair_disagreement(cls)[0], [2 / 3, 1.0, 0.0, 0.0, 0.0],
                               rtol=0, atol=1e-15)


def _steps(h, q, d):
    t = pa.list_(pa.list_(pa.list_(pa.float64())))
    return {"step_h": pa.array(h, t), "step_q": pa.array(q, t), "step_d": pa.array(d, t)}


def _three(*arrays):
    return [np.asarray(x) for x in arrays]


def test_step_risk_is_computed_by_the_kernel_twin_and_reference_by_hand():
    # trajectory 0: round 0 has two agents (2 steps, 1 step), round 1 an agent without steps
    # and one with a step; trajectory 1: one round of one step
    h = [[[[0.2, 0.9], [0.5]], [[], [0.4]]], [[[1.0]]]]
    q = [[[[0.1, 0.0], [0.5]], [[], [0.2]]], [[[1.0]]]]
    d = [[[[0.0, 0.5], [0.5]], [[], [0.0]]], [[[0.0]]]]
    sh, sq, sd, smask, rounds = pack_steps(_steps(h, q, d))
    assert rounds.tolist() == [[True, True], [True, False]]
    # the packing alone: a round's steps side by side, padded to a power of two (3 -> 4)
    assert smask.shape == (2, 2, 4)
    assert smask[0, 0].tolist() == [True, True, True, False]
    assert sh[0, 0, :3].tolist() == [0.2, 0.9, 0.5] and sd[1, 0, 0] == 0.0
    agreement = np.array([[2 / 3, 1.0], [1.0, 0.0]])
    n = np.array([2.0, 1.0])
    # steps: .45*.2+.35*.1 = .125; .45*.9+.2*.5 = .505; .45*.5+.35*.5+.2*.5 = .5 -> .505
    want_0 = 0.505
    want_1 = 0.45 * 0.4 + 0.35 * 0.2  # round 1: the one step, .25
    with jax.enable_x64(True):
        got = {k: np.asarray(v) for k, v in
               uaad(sh, sq, sd, smask, agreement, rounds, n).items()}
    twin = uaad_numpy(sh, sq, sd, smask, agreement, rounds, n)
    for out in (got, twin):
        np.testing.assert_allclose(out["uaad"], [want_0, 0.45 + 0.35], rtol=0, atol=1e-15)
        np.testing.assert_allclose(out["uaad_max_risk"], [want_0, 0.8], rtol=0, atol=1e-15)
        assert out["uaad_tier"].tolist() == [1.0, 2.0]
    ref = uaad_reference(sh[:, 0], sq[:, 0], sd[:, 0], smask[:, 0], agreement[:, 0],
                         rounds[:, 0], 2.0)
    assert ref["uaad"] == pytest.approx(want_0, abs=1e-15)
    assert ref["uaad_max_risk"] == pytest.approx(max(want_0, want_1), abs=1e-15)
    # the weights are the kernel's parameters: h alone
    out = uaad_numpy(sh, sq, sd, smask, agreement, rounds, n, **H_ONLY)
    np.testing.assert_allclose(out["uaad"], [0.9, 1.0], rtol=0, atol=0)


def test_derived_risk_is_computed_by_the_kernel_twin_and_reference_by_hand():
    # one trajectory, two rounds of three agents: round 0 answers 1, 1, 2 (agreement 2/3),
    # entropy ln 5 / 2; round 1 unanimous, entropy 0; a second trajectory: one agent, one
    # round, entropy 2 ln 5 (h capped at 1)
    cls = np.array([[[0, 0, 1], [0, -1, -1]], [[0, 0, 0], [-1, -1, -1]]], np.int32)
    agreement = np.array([[2 / 3, 1.0], [1.0, 0.0]])
    entropy = np.array([[math.log(5) / 2, 2 * math.log(5)], [0.0, 0.0]])
    rounds = np.array([[True, True], [True, False]])
    n = np.array([3.0, 1.0])
    empty = np.zeros((2, 2, 1))
    none = np.zeros((2, 2, 1), bool)
    want = 0.45 / 2 + 0.35 / 3 + 0.2 * 2 / 3  # h = 1/2, q = 1/3, d = 2 of 3 pairs differ
    kw = dict(round_entropy=entropy, round_classes=cls)
    with jax.enable_x64(True):
        got = {k: np.asarray(v) for k, v in
               uaad(empty, empty, empty, none, agreement, rounds, n, **kw).items()}
    twin = uaad_numpy(empty, empty, empty, none, agreement, rounds, n, **kw)
    for out in (got, twin):
        np.testing.assert_allclose(out["uaad"], [want, 0.45], rtol=0, atol=1e-15)
        np.testing.assert_allclose(out["uaad_max_risk"], [want, 0.45], rtol=0, atol=1e-15)
    ref = uaad_reference(empty[:, 0], empty[:, 0], empty[:, 0], none[:, 0], agreement[:, 0],
                         rounds[:, 0], 3.0, round_entropy=entropy[:, 0],
                         round_classes=cls[:, 0])
    assert ref["uaad"] == pytest.approx(want, abs=1e-15)
    assert ref["uaad_max_risk"] == pytest.approx(want, abs=1e-15)  # round 1: risk 0


def test_kernel_refuses_half_of_the_derived_inputs_and_reference_unknown_parameters():
    x = np.zeros((1, 1, 1))
    a, m, n = np.ones((1, 1)), np.ones((1, 1), bool), np.ones(1)
    with pytest.raises(ValueError, match="round_entropy and round_classes"):
        uaad_numpy(x, x, x, m[..., None], a, m, n, round_entropy=a)
    with pytest.raises(ValueError, match="round_entropy and round_classes"):
        uaad(x, x, x, m[..., None], a, m, n, round_classes=np.zeros((1, 1, 1), np.int32))
    with pytest.raises(TypeError, match="unknown UAAD parameters"):
        uaad_reference(x[:, 0], x[:, 0], x[:, 0], m, a[:, 0], m[:, 0], 1.0, w_x=1.0)


@st.composite
def _ragged(draw):
    """A ragged batch: 1..6 trajectories of 1..4 rounds, 1..3 agents of 0..3 steps (at least
    one step per executed round), values on a coarse grid with 0 and 1 (tier bounds and
    ties), answer classes with -1, entropies with 0; and weights summing to 1."""
    n = draw(st.integers(1, 6))
    t_drawn = draw(st.integers(1, 4))
    seed = draw(st.integers(0, 2**32 - 1))
    rng = np.random.default_rng(seed)
    # Drawn extents padded to buckets (1 stays 1, else the largest) so that the kernel
    # compiles per bucket, not per drawn shape: trajectories to 6 (more drawn ones), rounds
    # to 4 and step slots to 6 (masked past the drawn extent).
    n = 1 if n == 1 else 6
    t_max = 1 if t_drawn == 1 else 4
    rounds = rng.integers(1, t_drawn + 1, n)
    width_drawn = int(rng.integers(1, 7))  # step slots
    width = 1 if width_drawn == 1 else 6
    a = int(rng.integers(1, 4))  # answer slots
    mask = np.arange(t_max)[:, None] < rounds[None, :]
    smask = rng.random((t_max, n, width)) < 0.6
    smask[:, :, 0] = True
    smask &= mask[:, :, None] & (np.arange(width) < width_drawn)
    grid = np.array([0.0, 0.1, 0.25, 0.35, 0.5, 0.62, 0.9, 1.0])
    h, q, d = (rng.choice(grid, (t_max, n, width)) for _ in range(3))
    for x in (h, q, d):
        x[~smask] = rng.choice([np.nan, 0.0, 5.0])  # padding may hold anything
    team = int(rng.integers(1, 5))
    agreement = rng.integers(0, team + 1, (t_max, n)) / team
    entropy = rng.choice([0.0, 0.3, 1.0, math.log(5), 3.0], (t_max, n))
    cls = rng.integers(-1, 3, (t_max, n, a)).astype(np.int32)
    w = rng.choice([0.0, 0.2, 0.45, 1.0], 2)
    w_h, w_q = (float(w[0]), float(min(w[1], 1 - w[0])))
    params = dict(w_h=w_h, w_q=w_q, w_d=1.0 - w_h - w_q,
                  entropy_max=float(rng.choice([0.5, math.log(5)])),
                  tau_c=float(rng.choice([0.5, 0.8, 1.0])), epsilon=float(rng.choice([0, .05])),
                  risk_low=0.35, risk_high=0.62)
    derived = draw(st.booleans())
    return dict(h=h, q=q, d=d, smask=smask, agreement=agreement, mask=mask,
                n_agents=np.full(n, float(team)), entropy=entropy, cls=cls, params=params,
                derived=derived)


@pytest.mark.parametrize("dtype, tol", [(np.float64, 1e-12), (np.float32, 1e-6)])
@given(batch=_ragged())
def test_kernel_twin_and_reference_agree_on_drawn_ragged_inputs(dtype, tol, batch):
    """Risks within ``tol`` (float64: 1e-12; float32: 1e-6, a few ulps of values in [0, 1],
    which is what a fused multiply-add may change); tier, stop and calls exactly wherever
    the risk is not within ``tol`` of a tier bound."""
    h, q, d = (batch[k].astype(dtype) for k in ("h", "q", "d"))
    agreement = batch["agreement"].astype(dtype)
    kw = {}
    if batch["derived"]:
        kw = dict(round_entropy=batch["entropy"].astype(dtype), round_classes=batch["cls"])
    args = (h, q, d, batch["smask"], agreement, batch["mask"], batch["n_agents"].astype(dtype))
    params = batch["params"]
    with jax.enable_x64(dtype == np.float64):
        got = {k: np.asarray(v) for k, v in uaad(*args, **kw, **params).items()}
    twin = uaad_numpy(*args, **kw, **params)
    for k in got:
        assert got[k].dtype == dtype and twin[k].dtype == dtype, k
    np.testing.assert_allclose(got["uaad"], twin["uaad"], rtol=0, atol=tol)
    np.testing.assert_allclose(got["uaad_max_risk"], twin["uaad_max_risk"], rtol=0, atol=tol)
    for i in range(len(batch["n_agents"])):
        one = {k: v[:, i] for k, v in kw.items()}
        ref = uaad_reference(h[:, i], q[:, i], d[:, i], batch["smask"][:, i], agreement[:, i],
                             batch["mask"][:, i], float(batch["n_agents"][i]), **one,
                             **params)
        assert ref["uaad"] == pytest.approx(float(twin["uaad"][i]), abs=tol)
        assert ref["uaad_max_risk"] == pytest.approx(float(twin["uaad_max_risk"][i]), abs=tol)
        near = min(abs(ref["uaad"] - params["risk_low"]), abs(ref["uaad"] - params["risk_high"]))
        if near <= tol:
            continue
        for k in ("uaad_tier", "uaad_stop", "uaad_calls"):
            assert got[k][i] == twin[k][i] == ref[k], (k, i)


@pytest.mark.parametrize("derived", [False, True])
def test_edges_one_round_one_agent_zero_entropy(derived):
    # T = 1, one agent, one step of zeros (or derived: entropy 0, one answer, agreement 1):
    # risk 0, low tier, stop 0, calls M + 1 = 2
    z = np.zeros((1, 1, 1))
    one = np.ones((1, 1))
    kw = dict(round_entropy=np.zeros((1, 1)), round_classes=np.zeros((1, 1, 1), np.int32)) \
        if derived else {}
    args = (z, z, z, np.ones((1, 1, 1), bool), one, one.astype(bool), np.ones(1))
    with jax.enable_x64(True):
        got = {k: float(np.asarray(v)[0]) for k, v in uaad(*args, **kw).items()}
    twin = {k: float(v[0]) for k, v in uaad_numpy(*args, **kw).items()}
    ref = uaad_reference(*(x[:, 0] for x in args[:6]), 1.0,
                         **{k: v[:, 0] for k, v in kw.items()})
    want = {"uaad": 0.0, "uaad_max_risk": 0.0, "uaad_tier": 0.0, "uaad_stop": 0.0,
            "uaad_calls": 2.0}
    assert got == twin == ref == want


@pytest.mark.parametrize("round1", [[[]], [[], None], []], ids=["empty", "null", "no_agents"])
def test_round_without_steps_raises_naming_it(round1):
    # an executed round whose agents have no step has no risk: an error naming the record
    # and round (it used to be risk 0, routing the round to the low tier silently)
    h = [[[[0.2]], [[0.3]]], [[[0.2]], round1]]
    with pytest.raises(RecordError, match=r"trajectory 'b', round 1: no step signals.*"
                                          r"field step_h"):
        pack_steps(_steps(h, h, h), ids=["a", "b"])


def test_score_round_without_steps_raises():
    table = _debate()
    hole = [[[[0.1]] * 3, [[], None, []]], [[[0.0]] * 3] * 2]
    for name, col in _steps(hole, hole, hole).items():
        table = table.append_column(name, col)
    with pytest.raises(ValueError, match=r"trajectory 'a' \(.*row 0\), round 1: no step signals"):
        fastuq.score(table, methods=["uaad"])


@pytest.mark.parametrize("params, match", [
    (dict(risk_low=0.7, risk_high=0.3), r"risk_low must be below risk_high.*0\.7.*0\.3"),
    (dict(risk_low=0.5, risk_high=0.5), r"risk_low must be below risk_high"),
    (dict(agents_medium=2.5), r"agents_medium must be a whole number >= 0, got 2\.5"),
    (dict(rounds_high=1.5), r"rounds_high must be a whole number >= 0, got 1\.5"),
    (dict(w_h=1.0, w_q=1.0, w_d=1.0), r"weights must sum to 1.*= 3"),
    (dict(w_h=0.45, w_q=0.35, w_d=0.1), r"weights must sum to 1.*= 0\.9"),
])
def test_score_refuses_parameters_that_do_not_fit(params, match):
    with pytest.raises(ValueError, match=match):
        fastuq.score(_debate(), methods=["uaad"], **params)


def test_parameters_that_fit_are_accepted():
    # weights given in decimals sum to 1 within rounding; whole numbers as floats
    out = fastuq.score(_debate(), methods=["uaad"], w_h=0.1, w_q=0.2, w_d=0.7,
                       agents_medium=4.0, risk_low=0.2, risk_high=0.9).to_pydict()
    # a: h = 1/2, q = 1/3, d = 2/3 -> medium (0.2 <= risk < 0.9): 3 + 4 * 1 + 1 calls
    assert out["uaad"][0] == pytest.approx(0.1 / 2 + 0.2 / 3 + 0.7 * 2 / 3, abs=1e-12)
    assert out["uaad_calls"][0] == 3 + 4 + 1


def test_per_protocol_risk_bounds_that_cross_name_the_trajectory():
    with pytest.raises(ValueError, match=r"trajectory 'a' \(.*\): uaad: risk_low must be below"):
        fastuq.score(_debate(), methods=["uaad"], risk_low={"debate": 0.8}, risk_high=0.5)


def test_step_column_errors_name_the_record():
    h = [[[[0.2, 0.9]]]]
    with pytest.raises(RecordError, match=r"trajectory 0, round 0, agent 0, step 1: step_q"):
        pack_steps(_steps(h, [[[[0.1, 1.5]]]], h))
    with pytest.raises(RecordError, match=r"step_d has 1 steps but step_h has 2"):
        pack_steps(_steps(h, h, [[[[0.1]]]]))


def _debate() -> pa.Table:
    return pa.table({
        "trajectory_id": ["a", "b"],
        "protocol": ["debate", "debate"],
        "n_agents": pa.array([3, 3], pa.int32()),
        "answers": [[["1", "1", "2"], ["1", "1", "1"]], [["7", "7", "7"], ["7", "7", "7"]]],
        "token_entropy": [[math.log(5) / 2, 0.0], [0.0, 0.0]],
        "correct": [True, True],
    })


def test_score_derives_the_risk_from_round_signals():
    out = fastuq.score(_debate(), methods=["uaad"]).to_pydict()
    # a: h = 1/2, q = 1/3, d = 2/3 -> .45/2 + .35/3 + .2*2/3
    want = 0.45 / 2 + 0.35 / 3 + 0.2 * 2 / 3
    assert out["uaad"][0] == pytest.approx(want, abs=1e-12)
    assert out["uaad"][1] == 0.0
    assert out["uaad_tier"] == [1.0, 0.0]
    # a: medium, cap 1; b: stable unanimity at 1
    assert out["uaad_stop"] == [1.0, 1.0]
    assert out["uaad_calls"] == [3 + 3 + 1, 3 + 1 + 1]
    # weights are parameters
    out = fastuq.score(_debate(), methods=["uaad"], w_h=1.0, w_q=0.0, w_d=0.0).to_pydict()
    assert out["uaad"][0] == pytest.approx(0.5, abs=1e-12)


@pytest.mark.parametrize("steps", [False, True])
def test_score_in_float32_with_the_default_weights(steps):
    # the weights are kernel parameters rounded to float32 (0.45 + 0.35 + 0.2 is not 1
    # there): they still fit, and the risk is the hand value within float32 rounding
    table = _debate()
    want = 0.45 / 2 + 0.35 / 3 + 0.2 * 2 / 3
    if steps:
        h = [[[[0.1]] * 3] * 2, [[[0.0]] * 3] * 2]
        for name, col in _steps(h, h, h).items():
            table = table.append_column(name, col)
        want = 0.1
    out = fastuq.score(table, methods=["uaad"], dtype="float32").to_pydict()
    assert out["uaad"][0] == pytest.approx(want, abs=1e-6)
    assert out["uaad_tier"][0] == (1.0 if not steps else 0.0)


def test_score_prefers_step_columns_and_checks_their_rounds():
    table = _debate()
    h = [[[[0.1]] * 3] * 2, [[[0.0]] * 3] * 2]
    for name, col in _steps(h, h, h).items():
        table = table.append_column(name, col)
    out = fastuq.score(table, methods=["uaad"]).to_pydict()
    assert out["uaad"][0] == pytest.approx(0.1, abs=1e-12)  # (.45+.35+.2) * .1
    bad = table.set_column(table.column_names.index("step_h"), "step_h",
                           _steps([[[[0.1]] * 3], [[[0.0]] * 3] * 2], h, h)["step_h"])
    with pytest.raises(ValueError, match="step_h"):
        fastuq.score(bad, methods=["uaad"])
    partial = table.drop(["step_d"])
    with pytest.raises(ValueError, match="missing step_d"):
        fastuq.score(partial, methods=["uaad"])


@pytest.mark.parametrize("given, match", [
    (["risk_low=0.7", "risk_high=0.3"], "risk_low must be below risk_high"),
    (["risk_low=0.7"], "risk_low must be below risk_high"),  # against the default .62
    (["agents_low=2.5"], "agents_low must be a whole number"),
    (["w_h=1"], "weights must sum to 1"),
])
def test_cli_parameter_errors_exit_2_before_reading(tmp_path, capsys, given, match):
    import pyarrow.parquet as pq

    from fastuq.cli import main

    src = tmp_path / "c.parquet"
    pq.write_table(_debate(), src)
    out = tmp_path / "o.parquet"
    args = ["score", str(src), "--method", "uaad", "-o", str(out)]
    for g in given:
        args += ["--param", g]
    assert main(args) == 2
    assert match in capsys.readouterr().err
    assert not out.exists()
