"""The estimator registry: every entry's kernel, twin and per-trajectory reference agree on
drawn ragged inputs; a user's estimator registered from outside the package runs through
``fastuq score``, ``fastuq eval`` and the Python API with no other change."""

from __future__ import annotations

import math

import jax
import jax.numpy as jnp
import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import fastuq
from fastuq.cli import main
from fastuq.engine.inputs import INPUTS
from fastuq.engine.registry import ESTIMATORS, Estimator, Param
from fastuq.engine.runner import call_kernel
from fastuq.kernels.umas import pack_edges

BUILTIN = tuple(ESTIMATORS)


def _bucket(x: int, top: int) -> int:
    """The padded extent of a drawn one: 1 stays 1 (the degenerate shape is a case of its
    own), anything else pads to ``top``, so that the kernels compile once per bucket rather
    than once per drawn shape."""
    return 1 if x == 1 else top


def _draw_inputs(rng: np.random.Generator, t: int, n: int, a: int, team: int,
                 ties: bool) -> dict[str, np.ndarray]:
    """Every packed input for ``n`` ragged trajectories (1..t rounds, 1..a agents), with
    edge values: zero entropy, agreement 0 and 1, equal entropies (ties); and for BCCS:
    answer classes with ties between classes, unparseable answers (-1) and rounds where
    nobody answered, beliefs 0 and 1 (with ``ties``, from a dyadic grid, so that equal
    sums are equal floats and leaders tie). The round, agent and step axes are padded to
    buckets (:func:`_bucket`); the padding is masked like any trajectory's."""
    rounds = rng.integers(1, t + 1, n)
    t, a_drawn = _bucket(t, T_MAX), a
    a = _bucket(a, A_MAX)
    round_mask = np.arange(t)[:, None] < rounds[None, :]
    agreement = rng.integers(0, team + 1, (t, n)) / team
    entropy = rng.exponential(0.5, (t, n)) * (rng.random((t, n)) > 0.25)
    if ties:
        entropy[:] = 0.3
    agents = rng.integers(1, a_drawn + 1, n)
    node_mask = (np.arange(a)[None, None, :] < agents[None, :, None]) & round_mask[:, :, None]
    node_mask &= rng.random(node_mask.shape) < 0.85
    node_mask[0, :, 0] = True  # every trajectory has a valid node
    seq_logprob = -rng.exponential(2.0, (t, n, a)) * (rng.random((t, n, a)) > 0.1)
    n_tokens = rng.integers(1, 20, (t, n, a)).astype(float)
    node_entropy = rng.exponential(0.7, (t, n, a))
    edges = pack_edges(rng.random((t, n, a, a)) < 0.6).astype(np.uint32)
    answer_class = rng.integers(0, 3, (t, n, a)).astype(np.int32)
    answer_class[~node_mask | (rng.random(node_mask.shape) < 0.15)] = -1
    answer_class[~round_mask] = rng.integers(-1, 3, answer_class[~round_mask].shape)
    belief = (rng.integers(0, 5, (t, n, a)) / 4 if ties else rng.random((t, n, a)))
    belief[rng.random(belief.shape) < 0.05] = 1.0
    belief[(answer_class < 0) | ~round_mask[:, :, None]] = np.nan
    # UAAD's steps: 1..3 slots per round (at least one step in an executed round), values
    # with 0, 1 and tier boundaries; half the draws derive the risk from round signals
    s_drawn = int(rng.integers(1, 4))
    s = _bucket(s_drawn, 3)
    step_mask = (rng.random((t, n, s)) < 0.6) & round_mask[:, :, None]
    step_mask &= np.arange(s) < s_drawn
    step_mask[:, :, 0] |= round_mask
    steps = rng.random((3, t, n, s))
    steps[rng.random(steps.shape) < 0.2] = rng.choice([0.0, 0.35, 0.62, 1.0])
    steps[:, ~step_mask] = np.nan  # padding may hold anything
    derived = bool(rng.random() < 0.5)
    # the round's similarity graph: the answer classes (the team's slots, n_agents, are its
    # nodes; equal classes >= 0 are similar) or Jaccard indices of small random token sets
    team_slots = np.minimum(np.maximum(agents, team), a)
    in_team = (np.arange(a)[None, None, :] < team_slots[None, :, None]) & round_mask[:, :, None]
    sets = rng.random((t, n, a, 6)) < rng.uniform(0.1, 0.8)
    inter = (sets[..., :, None, :] & sets[..., None, :, :]).sum(-1)
    union = (sets[..., :, None, :] | sets[..., None, :, :]).sum(-1)
    jaccard = np.divide(inter, union, out=np.zeros(inter.shape), where=union > 0)
    both = in_team[..., :, None] & in_team[..., None, :]
    jaccard = np.where(both, jaccard, 0.0)
    jaccard[..., np.arange(a), np.arange(a)] = in_team
    jaccard[~round_mask] = np.nan  # rounds that did not execute may hold anything
    for x in (agreement, entropy):
        x[~round_mask] = np.nan  # padding may hold anything
    for x in (seq_logprob, n_tokens, node_entropy):
        x[~node_mask] = np.nan
    n_tokens[~node_mask] = 1.0
    return {
        "agreement": agreement, "round_mask": round_mask, "token_entropy": entropy,
        "team_size": np.where(rng.random(n) < 0.7, float(team), 0.0),
        "seq_logprob": seq_logprob, "n_tokens": n_tokens, "node_entropy": node_entropy,
        "node_confidence": seq_logprob, "node_mask": node_mask, "edges": edges,
        "answer_class": answer_class, "belief": belief,
        "step_h": steps[0], "step_q": steps[1], "step_d": steps[2], "step_mask": step_mask,
        "round_entropy": entropy if derived else None,
        "round_classes": answer_class if derived else None,
        "n_agents": np.maximum(agents, team).astype(float),
        "similarity": answer_class if rng.random() < 0.5 else jaccard, "text_similarity": jaccard,
    }


def _draw_params(rng: np.random.Generator, est: Estimator, n: int) -> dict[str, np.ndarray]:
    """Per-trajectory values inside each parameter's bounds (edges included: lam = 1,
    q = 0)."""
    out = {}
    for p in est.kernel_params:
        lo = -1.0 if p.low is None else p.low
        hi = lo + 10.0 if p.high is None else p.high
        v = rng.uniform(lo, hi, n)
        v[rng.random(n) < 0.2] = hi if p.high is not None else v[0]
        if p.low is not None and not p.low_open:
            v[rng.random(n) < 0.2] = p.low
        if p.low_open:
            v = np.maximum(v, p.low + 1e-6)
        out[p.name] = v
    return out


def _slice(name: str, x: np.ndarray, k: int):
    return x[k] if INPUTS[name].axis == 0 else x[:, k]


def _reference(est: Estimator, arrays: dict, params: dict, n: int) -> dict[str, np.ndarray]:
    """``{output: [n] float64}`` from the per-trajectory reference."""
    ref = est.reference_fn()
    out = []
    for k in range(n):
        args = [_slice(i, arrays[i], k) for i in est.inputs]
        kw = {i: _slice(i, arrays[i], k) for i in est.optional_inputs
              if arrays[i] is not None}
        kw.update({p: float(v[k]) for p, v in params.items()})
        value = ref(*args, **kw)
        out.append(value if isinstance(value, dict) else {est.outputs[0]: value})
    return {o: np.asarray([r[o] for r in out], np.float64) for o in est.outputs}


T_MAX, A_MAX = 6, 5  # the largest drawn rounds and agents: the padded extents


@settings(max_examples=20, deadline=None)
@given(seed=st.integers(0, 2**32 - 1), t=st.integers(1, T_MAX), n=st.integers(1, 5),
       a=st.integers(1, A_MAX), team=st.integers(1, 7), ties=st.booleans())
def test_every_estimator_kernel_twin_and_reference_agree(seed, t, n, a, team, ties):
    rng = np.random.default_rng(seed)
    arrays = _draw_inputs(rng, t, n, a, team, ties)
    for name in BUILTIN:
        est = ESTIMATORS[name]
        params = _draw_params(rng, est, n)
        want = _reference(est, arrays, params, n)
        for dtype, rtol in ((np.float64, 1e-11), (np.float32, 1e-4)):
            def cast(x, dtype=dtype):
                return x.astype(dtype) if x.dtype.kind == "f" else x

            inputs = [cast(arrays[i]) for i in est.inputs]
            optional = {i: None if arrays[i] is None else cast(arrays[i])
                        for i in est.optional_inputs}
            values = {p: v.astype(dtype) for p, v in params.items()}
            with jax.enable_x64(dtype == np.float64):
                got = call_kernel(est, inputs, optional, values, n=n, dtype=np.dtype(dtype),
                                  backend="jax")
            twin = call_kernel(est, inputs, optional, values, n=n, dtype=np.dtype(dtype),
                               backend="numpy")
            for column in est.outputs:  # every output column, not only the score
                scale = np.maximum(1.0, np.abs(want[column]))
                for label, out in (("kernel", got[column]), ("twin", twin[column])):
                    assert out.dtype == dtype, (column, label)
                    np.testing.assert_allclose(
                        out / scale, want[column] / scale, rtol=0, atol=rtol,
                        err_msg=f"{name}: {column} {label} {np.dtype(dtype)}")


def test_registry_declares_each_entry_completely():
    for name, est in ESTIMATORS.items():
        assert est.name == name and est.outputs
        for i in (*est.inputs, *est.optional_inputs):
            assert i in INPUTS, (name, i)
        for backend in ("jax", "numpy"):
            assert callable(est.kernel_fn(backend))
        assert callable(est.reference_fn())
        for protocol, preset in est.presets.items():
            for p in est.kernel_params:
                assert p.inside(np.asarray(preset[p.name])), (name, protocol, p.name)


# ------------------------------------------------------------------- a user's estimator


def _toy_kernel(agreement, round_mask, *, margin):
    return -jnp.min(jnp.where(round_mask, agreement, jnp.inf), axis=0) + margin


def _toy_twin(agreement, round_mask, *, margin):
    return -np.min(np.where(round_mask, agreement, np.inf), axis=0) + margin


def _toy_reference(agreement, round_mask, *, margin):
    values = [float(x) for x, m in zip(agreement, round_mask, strict=True) if m]
    return -min(values) + margin if values else math.nan


TOY = Estimator(
    name="toy_min_agreement", inputs=("agreement", "round_mask"),
    params=(Param("margin", default=0.0, low=0.0, doc="added to every score"),),
    kernel=_toy_kernel, twin=_toy_twin, reference=_toy_reference,
    description="minus the lowest agreement of any executed round",
)


@pytest.fixture
def toy():
    fastuq.register_estimator(TOY)
    try:
        yield TOY
    finally:
        fastuq.unregister_estimator(TOY.name)


def _toy_corpus(path, n=60):
    rng = np.random.default_rng(3)
    agreements = [list(rng.integers(0, 4, rng.integers(1, 4)) / 3) for _ in range(n)]
    rows = [
        {"trajectory_id": f"t{k}", "protocol": "debate", "n_agents": 3,
         "correct": bool(rng.random() < 0.3 + 0.5 * min(a)),
         "agreement": a, "token_entropy": [0.2] * len(a)}
        for k, a in enumerate(agreements)
    ]
    pq.write_table(pa.Table.from_pylist(rows), path)
    want = np.array([-min(r["agreement"]) for r in rows])
    return want, np.array([r["correct"] for r in rows])


def test_a_registered_estimator_runs_through_score_eval_and_the_api(toy, tmp_path, capsys):
    corpus = tmp_path / "c.parquet"
    want, labels = _toy_corpus(corpus)
    out = tmp_path / "s.parquet"
    # fastuq score, by name and under --method all
    assert main(["score", str(corpus), "-o", str(out), "--method", "toy_min_agreement"]) == 0
    np.testing.assert_array_equal(pq.read_table(out)["toy_min_agreement"].to_numpy(), want)
    assert main(["score", str(corpus), "-o", str(out), "--method", "all"]) == 0
    assert "toy_min_agreement" in pq.read_schema(out).names
    # its parameter from the command line
    assert main(["score", str(corpus), "-o", str(out), "--method", "toy_min_agreement",
                 "--param", "margin=0.25"]) == 0
    np.testing.assert_array_equal(pq.read_table(out)["toy_min_agreement"].to_numpy(),
                                  want + 0.25)
    assert main(["score", str(corpus), "-o", str(out), "--param", "margin=0.25"]) == 2
    assert "would be ignored" in capsys.readouterr().err
    assert main(["score", str(corpus), "-o", str(out), "--param", "margin"]) == 2
    # fastuq eval: its AUROC is scikit-learn's on the same scores
    from sklearn.metrics import roc_auc_score

    capsys.readouterr()
    assert main(["eval", str(corpus), "--method", "toy_min_agreement"]) == 0
    text = capsys.readouterr().out
    auroc = roc_auc_score(~labels, want)
    row = next(x for x in text.splitlines() if x.startswith("toy_min_agreement"))
    assert row.split()[1] == f"{100 * auroc:.2f}"  # percent
    # the Python API, with its parameter, on both backends
    for backend in ("jax", "numpy"):
        got = fastuq.score(corpus, "toy_min_agreement", margin=0.5, backend=backend)
        np.testing.assert_array_equal(got["toy_min_agreement"].to_numpy(), want + 0.5)
    with pytest.raises(ValueError, match="margin must be >= 0"):
        fastuq.score(corpus, "toy_min_agreement", margin=-1.0)
    with pytest.raises(ValueError, match="would be ignored"):
        fastuq.score(corpus, "sauce", margin=0.5)


def test_register_refuses_what_would_break_the_engine(toy):
    with pytest.raises(ValueError, match="already registered"):
        fastuq.register_estimator(TOY)
    with pytest.raises(ValueError, match="unknown packed input"):
        fastuq.register_estimator(Estimator(
            name="bad", inputs=("agreements",), kernel=_toy_kernel, twin=_toy_twin,
            reference=_toy_reference))
    with pytest.raises(ValueError, match="output column"):
        fastuq.register_estimator(Estimator(
            name="other", inputs=("agreement", "round_mask"), outputs=("sauce",),
            kernel=_toy_kernel, twin=_toy_twin, reference=_toy_reference))
    with pytest.raises(ValueError, match="differs"):
        fastuq.register_estimator(Estimator(
            name="other", inputs=("agreement", "round_mask"), params=(Param("lam"),),
            kernel=_toy_kernel, twin=_toy_twin, reference=_toy_reference))
    assert "bad" not in fastuq.ESTIMATORS and "other" not in fastuq.ESTIMATORS
