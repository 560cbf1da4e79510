"""UAAD (kernels/uaad.py, fastuq.signals.risk): hand-worked routing and stopping at every
tier and stop-rule boundary, in float64 and float32, kernel and twin; the step risk from
canonical step columns and derived from round signals; errors naming the record."""

from __future__ import annotations

import math

import jax
import numpy as np
import pyarrow as pa
import pytest

import fastuq
from fastuq.engine.errors import RecordError
from fastuq.kernels.uaad import uaad, uaad_numpy, uaad_reference
from fastuq.signals.risk import pair_disagreement, round_risk_from_steps


def _run(risk0, agreement, dtype=np.float64, **params):
    """One trajectory through kernel, twin and reference; returns the reference's dict after
    checking the three agree exactly (small integers and the inputs themselves)."""
    t = len(agreement)
    risk = np.full((t, 1), risk0, dtype)
    a = np.asarray(agreement, dtype)[:, None]
    mask = np.ones((t, 1), bool)
    n = np.array([3.0], dtype)
    with jax.enable_x64(dtype == np.float64):
        got = {k: np.asarray(v) for k, v in uaad(risk, a, mask, n, **params).items()}
    twin = uaad_numpy(risk, a, mask, n, **params)
    ref = uaad_reference(risk[:, 0], a[:, 0], mask[:, 0], 3.0, **params)
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


def test_round_risk_from_step_columns_by_hand():
    # trajectory 0: round 0 has two agents (2 steps, 1 step), round 1 an agent without steps
    # and one with a step
    h = [[[[0.2, 0.9], [0.5]], [[], [0.4]]], [[[1.0]]]]
    q = [[[[0.1, 0.0], [0.5]], [[], [0.2]]], [[[1.0]]]]
    d = [[[[0.0, 0.5], [0.5]], [[], [0.0]]], [[[0.0]]]]
    risk, mask = round_risk_from_steps(_steps(h, q, d), (0.45, 0.35, 0.20))
    # steps: .45*.2+.35*.1 = .125; .45*.9+.2*.5 = .505; .5*(1) = .5 -> round max .505
    assert mask.tolist() == [[True, True], [True, False]]
    assert risk[0, 0] == pytest.approx(0.505, abs=1e-15)
    assert risk[1, 0] == pytest.approx(0.45 * 0.4 + 0.35 * 0.2, abs=1e-15)  # the one step
    assert risk[0, 1] == pytest.approx(0.45 + 0.35, abs=1e-15)


@pytest.mark.parametrize("round1", [[[]], [[], None], []], ids=["empty", "null", "no_agents"])
def test_round_without_steps_raises_naming_it(round1):
    # an executed round whose agents have no step has no risk: an error naming the record
    # and round (it used to be risk 0, routing the round to the low tier silently)
    h = [[[[0.2]], [[0.3]]], [[[0.2]], round1]]
    with pytest.raises(RecordError, match=r"trajectory 'b', round 1: no step signals.*"
                                          r"field step_h"):
        round_risk_from_steps(_steps(h, h, h), (0.45, 0.35, 0.20), ids=["a", "b"])


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
        round_risk_from_steps(_steps(h, [[[[0.1, 1.5]]]], h), (0.45, 0.35, 0.2))
    with pytest.raises(RecordError, match=r"step_d has 1 steps but step_h has 2"):
        round_risk_from_steps(_steps(h, h, [[[[0.1]]]]), (0.45, 0.35, 0.2))


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
