"""Every round scored: the per-round score of each estimator whose value is defined after
each round (SAUCE, ``sauce_belief``, the agreement baselines, BCCS, UMAS).

* On drawn ragged inputs (one round, one agent, masked rounds, rounds masked in the middle):
  the per-round kernel's row at a trajectory's last executed round is its score bit for bit,
  its score is the plain kernel's bit for bit, it is NaN exactly in masked rounds, the NumPy
  twin agrees, and every row ``t`` equals the per-trajectory reference of the trajectory cut
  after round ``t`` (an independent check: the reference knows nothing of per-round rows).
* ``fastuq score --per-round`` writes a ``list<double>`` column per estimator, one value per
  executed round, checked against hand-worked values and exact-rational SAUCE on each prefix;
  streamed chunk by chunk, and the score columns unchanged.
* Replay's ``trace:`` policies get their per-round scores from that one scan, with the
  results of the one-call-per-round-prefix path.
"""

from __future__ import annotations

from fractions import Fraction as F

import jax
import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from _references import sauce_exact
from hypothesis import given, settings
from hypothesis import strategies as st

import fastuq
from fastuq.cli import main
from fastuq.engine.inputs import INPUTS
from fastuq.engine.registry import ESTIMATORS
from fastuq.engine.runner import call_kernel, run_estimator_rounds
from fastuq.kernels.umas import pack_edges

PER_ROUND = tuple(name for name, est in ESTIMATORS.items()
                  if getattr(est, "per_round", None) is not None)
T_MAX, A_MAX = 6, 5  # padded extents of the drawn rounds and agents (1 stays 1)


def test_the_estimators_with_a_per_round_score():
    assert set(PER_ROUND) == {"sauce", "sauce_belief", "last_agreement", "mean_agreement",
                              "weighted_agreement", "bccs", "umas"}
    assert ESTIMATORS["bccs"].per_round_column == "bccs_per_round"


def _draw(rng: np.random.Generator, t: int, n: int, a: int, team: int, gaps: bool) -> dict:
    """Inputs of ``n`` trajectories of 1..t rounds and 1..a agents (padded to T_MAX / A_MAX
    unless 1); with ``gaps`` rounds are also masked in the middle (and some trajectory may
    have no executed round at all)."""
    rounds = rng.integers(1, t + 1, n)
    t = 1 if t == 1 else T_MAX
    a_drawn, a = a, (1 if a == 1 else A_MAX)
    mask = np.arange(t)[:, None] < rounds[None, :]
    if gaps:
        mask &= rng.random(mask.shape) < 0.7
    agreement = rng.integers(0, team + 1, (t, n)) / team
    entropy = rng.exponential(0.5, (t, n)) * (rng.random((t, n)) > 0.25)
    agents = rng.integers(1, a_drawn + 1, n)
    node = (np.arange(a)[None, None, :] < agents[None, :, None]) & mask[:, :, None]
    answer_class = rng.integers(0, 3, (t, n, a)).astype(np.int32)
    answer_class[~node | (rng.random(node.shape) < 0.15)] = -1
    belief = rng.random((t, n, a))
    belief[rng.random(belief.shape) < 0.1] = 1.0
    belief[answer_class < 0] = np.nan
    # UMAS: node confidence <= 0 (some exactly 0), nodes only in executed rounds, some
    # executed rounds without a valid node; explicit graphs in half the draws
    node_mask = node & (rng.random(node.shape) < 0.8)
    confidence = -rng.exponential(2.0, (t, n, a)) * (rng.random((t, n, a)) > 0.1)
    confidence[~node_mask] = np.nan
    edges = (pack_edges(rng.random((t, n, a, a)) < 0.6).astype(np.uint32)
             if rng.random() < 0.5 else None)
    for x in (agreement, entropy):
        x[~mask] = np.nan  # padding may hold anything
    return {"agreement": agreement, "token_entropy": entropy, "round_mask": mask,
            "node_confidence": confidence, "node_mask": node_mask, "edges": edges,
            "team_size": np.where(rng.random(n) < 0.7, float(team), 0.0),
            "answer_class": answer_class, "belief": belief,
            "n_agents": np.maximum(agents, team).astype(float)}


def _params(rng: np.random.Generator, est, n: int) -> dict[str, np.ndarray]:
    out = {}
    for p in est.kernel_params:
        lo = -1.0 if p.low is None else p.low
        hi = lo + 10.0 if p.high is None else p.high
        v = rng.uniform(lo, hi, n)
        v[rng.random(n) < 0.2] = hi  # edges: lam = 1, thresholds 1
        if p.low is not None and not p.low_open:
            v[rng.random(n) < 0.2] = p.low  # q = 0, lam = 0
        out[p.name] = np.maximum(v, p.low + 1e-6) if p.low_open else v
    return out


def _cut(name: str, x: np.ndarray, k: int, t: int):
    """Trajectory ``k``'s slice of input ``name``, with the round mask cut after round
    ``t`` (the trajectory stopped there)."""
    if x is None:
        return None
    x = x[k] if INPUTS[name].axis == 0 else x[:, k]
    if name in ("round_mask", "node_mask"):
        x = x.copy()
        x[t + 1:] = False
    return x


def _executed(est, arrays: dict) -> np.ndarray:
    """``[T, N]`` the rounds an estimator scores: its round mask, or (UMAS) the rounds with
    a valid node."""
    if "round_mask" in est.inputs:
        return arrays["round_mask"]
    return arrays["node_mask"].any(axis=2)


def _last_executed(mask: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Each trajectory's last executed round, and whether it has one."""
    any_ = mask.any(axis=0)
    return np.where(any_, mask.shape[0] - 1 - np.argmax(mask[::-1], axis=0), 0), any_


@pytest.mark.slow
@settings(max_examples=15, deadline=None)
@given(seed=st.integers(0, 2**32 - 1), t=st.integers(1, T_MAX), n=st.integers(1, 5),
       a=st.integers(1, A_MAX), team=st.integers(1, 6), gaps=st.booleans())
def test_per_round_scores_from_the_scan(seed, t, n, a, team, gaps):
    _check_per_round(seed, t, n, a, team, gaps)


@pytest.mark.parametrize("t, n, a, team, gaps", [
    (T_MAX, 5, A_MAX, 3, True),  # ragged, rounds masked in the middle
    (1, 3, 1, 1, False),  # one round, one agent
])
def test_per_round_scores_from_the_scan_fixed_draws(t, n, a, team, gaps):
    """The drawn check of :func:`test_per_round_scores_from_the_scan` (a slow test) on two
    fixed draws, float64 only (the compiles dominate), in the default suite."""
    _check_per_round(20261201, t, n, a, team, gaps, dtypes=(np.float64,))


def _check_per_round(seed: int, t: int, n: int, a: int, team: int, gaps: bool,
                     dtypes=(np.float64, np.float32)) -> None:
    assert PER_ROUND, "no estimator declares a per-round score"
    rng = np.random.default_rng(seed)
    arrays = _draw(rng, t, n, a, team, gaps)
    for name in PER_ROUND:
        est = ESTIMATORS[name]
        mask = _executed(est, arrays)
        last, has = _last_executed(mask)
        params = _params(rng, est, n)
        ref = est.reference_fn()
        # the reference of every trajectory cut after every round: float64, plain Python
        want = np.full(mask.shape, np.nan)
        for k in range(n):
            for r in np.flatnonzero(mask[:, k]):
                args = [_cut(i, arrays[i], k, r) for i in est.inputs]
                kw = {i: _cut(i, arrays[i], k, r) for i in est.optional_inputs}
                kw.update({p: float(v[k]) for p, v in params.items()})
                value = ref(*args, **kw)
                want[r, k] = value[est.outputs[0]] if isinstance(value, dict) else value
        # float64: twin and reference within 1e-11 (scaled); float32: 1e-4, the kernels'
        # float32 rounding over a few rounds of a filter
        for dtype, tol in ((np.float64, 1e-11), (np.float32, 1e-4)):
            if dtype not in dtypes:
                continue

            def cast(x, dtype=dtype):
                return x.astype(dtype) if x.dtype.kind == "f" else x

            inputs = [cast(arrays[i]) for i in est.inputs]
            optional = {i: None if arrays[i] is None else cast(arrays[i])
                        for i in est.optional_inputs}
            values = {p: v.astype(dtype) for p, v in params.items()}
            col = est.per_round_column
            runs = {}
            for backend in ("jax", "numpy"):
                with jax.enable_x64(dtype == np.float64):
                    plain = call_kernel(est, inputs, optional, values, n=n,
                                        dtype=np.dtype(dtype), backend=backend)
                    both = call_kernel(est, inputs, optional, values, n=n,
                                       dtype=np.dtype(dtype), backend=backend, per_round=True)
                what = f"{name} {backend} {np.dtype(dtype)}"
                for out in est.outputs:  # the outputs are the plain kernel's, bit for bit
                    assert np.array_equal(both[out], plain[out], equal_nan=True), (what, out)
                rows = np.asarray(both[col])
                assert rows.shape == mask.shape and rows.dtype == dtype, what
                assert np.array_equal(np.isnan(rows), ~mask), what  # NaN exactly when masked
                score = np.asarray(both[est.outputs[0]])
                # the row of the last executed round is the score, bit for bit
                assert np.array_equal(rows[last, np.arange(n)][has], score[has]), what
                assert np.isnan(score[~has]).all(), what
                scale = np.maximum(1.0, np.abs(np.nan_to_num(want)))
                np.testing.assert_allclose(rows / scale, want / scale, rtol=0, atol=tol,
                                           err_msg=what)
                runs[backend] = rows
            np.testing.assert_allclose(runs["jax"], runs["numpy"], rtol=0,
                                       atol=1e-12 if dtype == np.float64 else 1e-5)


def test_per_round_list_keeps_executed_rounds_in_order():
    from fastuq.engine.pipeline import per_round_list

    values = np.array([[1.0, 4.0, np.nan], [2.0, np.nan, np.nan], [3.0, 5.0, np.nan]])
    mask = np.array([[True, True, False], [True, False, False], [True, True, False]])
    got = per_round_list(values, mask)
    assert got.type == pa.list_(pa.float64())
    assert got.to_pylist() == [[1.0, 2.0, 3.0], [4.0, 5.0], []]
    with pytest.raises(ValueError, match="same"):
        per_round_list(values, mask[:2])


def _hand_corpus(tmp_path):
    """Four debates with hand-checkable per-round scores: three rounds of a team of three,
    one round (T = 1), one agent, and a longer one."""
    cols = {
        "trajectory_id": ["three", "one_round", "one_agent", "four"],
        "protocol": ["debate"] * 4,
        "n_agents": [3, 2, 1, 4],
        "agreement": [[1 / 3, 2 / 3, 1.0], [0.5], [1.0, 1.0], [0.5, 0.75, 0.75, 1.0]],
        "token_entropy": [[0.5, 0.5, 0.5], [0.2], [0.0, 0.3], [0.4, 0.4, 0.4, 0.4]],
        "correct": [True, False, True, True],
    }
    path = tmp_path / "hand.parquet"
    pq.write_table(pa.table(cols), path)
    return path, cols


METHODS = "sauce,last_agreement,mean_agreement,weighted_agreement"


@pytest.mark.parametrize("chunk_rows", [1, 3, 1000])
def test_score_file_writes_a_per_round_list_column(tmp_path, chunk_rows):
    path, cols = _hand_corpus(tmp_path)
    out, plain = tmp_path / "per_round.parquet", tmp_path / "plain.parquet"
    assert main(["score", str(path), "-o", str(out), "--method", METHODS, "--per-round",
                 "--chunk-rows", str(chunk_rows)]) == 0
    assert main(["score", str(path), "-o", str(plain), "--method", METHODS]) == 0
    got, base = pq.read_table(out), pq.read_table(plain)
    for name in METHODS.split(","):
        assert got.schema.field(f"{name}_per_round").type == pa.list_(pa.float64())
        assert got[name].equals(base[name])  # the scores are unchanged
        lists = got[f"{name}_per_round"].to_pylist()
        assert [len(x) for x in lists] == [len(a) for a in cols["agreement"]]
        assert [x[-1] for x in lists] == got[name].to_pylist()  # bit for bit
    # by hand: minus the last round's agreement, minus the running mean
    f = float
    assert got["last_agreement_per_round"].to_pylist() == [
        [-f(F(1, 3)), -f(F(2, 3)), -1.0], [-0.5], [-1.0, -1.0], [-0.5, -0.75, -0.75, -1.0]]
    means = [[-f(F(1, 3)), -0.5, -f(F(2, 3))], [-0.5], [-1.0, -1.0],
             [-0.5, -0.625, -f(F(2, 3)), -0.75]]
    assert got["mean_agreement_per_round"].to_pylist() == means
    # equal entropies: weighted agreement is the mean; one agent with 0 then 0.3 entropy:
    # both rounds agree fully, so every weighting gives -1
    weighted = got["weighted_agreement_per_round"].to_pylist()
    for k in (0, 1, 3):
        assert weighted[k] == means[k]
    assert weighted[2] == [-1.0, -1.0]
    # SAUCE on every prefix in exact rationals (debate preset)
    preset = dict(lam=0.95, q=0.10, sigma2_0=0.25, mu_0=0.0)
    for k, (a, h) in enumerate(zip(cols["agreement"], cols["token_entropy"], strict=True)):
        want = [sauce_exact(a[:t + 1], h[:t + 1], **preset)["score"] for t in range(len(a))]
        np.testing.assert_allclose(got["sauce_per_round"][k].as_py(), want, rtol=0,
                                   atol=1e-15)


def test_per_round_refuses_an_estimator_without_one(tmp_path, capsys):
    path, _ = _hand_corpus(tmp_path)
    rc = main(["score", str(path), "-o", str(tmp_path / "o.parquet"), "--method",
               "sauce,msp_final", "--per-round"])
    err = capsys.readouterr().err
    assert rc == 2 and "msp_final has no per-round score" in err and "sauce" in err
    assert not (tmp_path / "o.parquet").exists()
    # --method all: those with a per-round score write it, the others do not
    assert main(["score", str(path), "-o", str(tmp_path / "all.parquet"), "--method", "all",
                 "--per-round"]) == 0
    names = pq.read_table(tmp_path / "all.parquet").column_names
    assert "sauce_per_round" in names and "mean_agreement_per_round" in names
    assert not any(n.startswith("uaad") and n.endswith("_per_round") for n in names)


def test_an_empty_corpus_still_has_the_per_round_columns(tmp_path):
    path = tmp_path / "empty.parquet"
    pq.write_table(pa.table({"trajectory_id": pa.array([], pa.string()),
                             "agreement": pa.array([], pa.list_(pa.float64())),
                             "token_entropy": pa.array([], pa.list_(pa.float64()))}), path)
    out = tmp_path / "o.parquet"
    fastuq.score_file(path, out, methods=["sauce"], protocol="debate", per_round=True)
    schema = pq.read_schema(out)
    assert schema.field("sauce_per_round").type == pa.list_(pa.float64())


def test_run_estimator_rounds_is_one_scan_with_the_prefix_results():
    from fastuq.engine.batch import Batch
    from fastuq.synth import corpus_with_beliefs

    batch = Batch(corpus_with_beliefs(300, protocol="debate", seed=3), dtype=np.float64)
    assert PER_ROUND, "no estimator declares a per-round score"
    for name in PER_ROUND:
        est = ESTIMATORS[name]
        scan = run_estimator_rounds(est, batch, params={}, protocol="debate", backend="jax")
        prefix = run_estimator_rounds(est, batch, params={}, protocol="debate",
                                      backend="jax", by_prefix=True)
        assert np.array_equal(np.isnan(scan), np.isnan(prefix)), name
        np.testing.assert_allclose(scan, prefix, rtol=0, atol=1e-12, err_msg=name)


def test_replay_trace_policies_reuse_the_scan(monkeypatch):
    """Replay's ``trace:`` policies on the one-scan per-round scores give the table of the
    one-call-per-round-prefix path (which every per-round check above is independent of)."""
    import fastuq.engine.runner as runner
    from fastuq.decisions.replay import Policy, replay
    from fastuq.synth import corpus_with_beliefs

    table = corpus_with_beliefs(400, protocol="debate", seed=5)
    policies = [Policy("trace", estimator=name, thresholds=7)
                for name in ("sauce", "mean_agreement", "bccs")]
    calls = []
    scan = runner.run_estimator_rounds

    def counted(*args, **kw):
        calls.append(kw.get("by_prefix", False))
        return scan(*args, **kw)

    monkeypatch.setattr(runner, "run_estimator_rounds", counted)
    fast = replay(table, policies).table
    assert calls == [False, False, False]
    monkeypatch.setattr(runner, "run_estimator_rounds",
                        lambda *a, **kw: scan(*a, **kw, by_prefix=True))
    slow = replay(table, policies).table
    assert fast.column_names == slow.column_names
    for name in fast.column_names:
        a, b = fast[name].to_pylist(), slow[name].to_pylist()
        if fast.schema.field(name).type in (pa.float64(), pa.float32()):
            np.testing.assert_allclose(np.asarray(a, float), np.asarray(b, float), rtol=0,
                                       atol=1e-12, err_msg=name)
        else:
            assert a == b, name


def test_trace_keeps_every_trajectorys_team_size_in_every_round():
    """Vote counts make equal true means equal floats (``[0.4, 1, 1]`` of a team of five:
    -0.8 exactly, where the float mean of the fractions is -0.7999999999999999). Every
    trajectory's per-round trace keeps its team size in every round, whatever its index in
    the chunk (the prefix path used to cut ``team_size``, one value per trajectory, as if it
    had a round axis, and trajectories after the round index lost their vote counts)."""
    from fastuq.engine.batch import Batch

    n = 6
    table = pa.table({
        "trajectory_id": [f"t{k}" for k in range(n)], "protocol": ["debate"] * n,
        "n_agents": pa.array([5] * n, pa.int32()),
        "agreement": [[0.4, 1.0, 1.0]] * n,
    })
    batch = Batch(table, dtype=np.float64)
    want = np.array([[-0.4] * n, [-0.7] * n, [-0.8] * n])  # -2/5, -7/10, -12/15
    assert -(0.4 + 1.0 + 1.0) / 3 != -0.8  # the fractions' float mean is not -0.8
    for kw in ({}, {"by_prefix": True}):  # replay's default, then the prefix path
        got = run_estimator_rounds(ESTIMATORS["mean_agreement"], batch, params={},
                                   protocol="debate", backend="jax", **kw)
        assert np.array_equal(got, want), (kw, got)
