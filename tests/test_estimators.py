"""Every registered estimator through fastuq.score, against plain per-record Python written
from the definitions in DESIGN.md (and the seed/scalar references)."""

import math

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from _references import sauce_exact
from _umas_reference import umas_reference

import fastuq
from fastuq.synth import corpus

#: The presets of DESIGN.md, typed in by hand (not read from the package).
PRESETS_BY_HAND = {
    "debate": {"lam": 0.95, "q": 0.10, "sigma2_0": 0.25, "mu_0": 0.0},
    "dylan": {"lam": 0.70, "q": 0.001, "sigma2_0": 0.25, "mu_0": 0.0},
}

ALL = ("sauce", "umas", "umas_fix", "msp_final", "perplexity_final", "mean_token_entropy",
       "last_agreement", "mean_agreement", "weighted_agreement")


@pytest.fixture(scope="module")
def topk_corpus(tmp_path_factory):
    table = corpus(80, protocol="mixed", seed=5, topk=3)
    path = tmp_path_factory.mktemp("c") / "topk.parquet"
    pq.write_table(table, path)
    return path, table.to_pylist()


def _mean(xs):
    return sum(xs) / len(xs)


def _node_entropy(topk):
    return fastuq.compute_token_entropy(topk)


def _reference(rec, name):
    a, h = rec["agreement"], rec["token_entropy"]
    last = [x for x in rec["seq_logprob"][-1] if x is not None]
    last_ntok = [nt for x, nt in zip(rec["seq_logprob"][-1], rec["n_tokens"][-1], strict=True)
                 if x is not None]
    if name == "sauce":  # exact rationals, apart from the package's filters
        return sauce_exact(a, h, **PRESETS_BY_HAND[rec["protocol"]])["score"]
    if name in ("umas", "umas_fix"):
        return umas_reference(rec["seq_logprob"], n_agents=rec["n_agents"])[name]
    if name == "msp_final":
        return -_mean(last)
    if name == "perplexity_final":
        return _mean([math.exp(-x / n) for x, n in zip(last, last_ntok, strict=True)])
    if name == "mean_token_entropy":
        return _mean([_node_entropy(tk) for rnd in rec["topk_logprobs"] for tk in rnd
                      if tk is not None])
    if name == "last_agreement":
        return -a[-1]
    if name == "mean_agreement":
        return -_mean(a)
    if name == "weighted_agreement":
        w = [1 / max(x, 1e-8) for x in h]
        return -sum(m * wt for m, wt in zip(a, w, strict=True)) / sum(w)
    raise AssertionError(name)


@pytest.mark.parametrize("backend", ["jax", "numpy"])
def test_all_estimators_match_per_record_references(topk_corpus, backend):
    path, records = topk_corpus
    table = fastuq.score(path, "all", backend=backend, chunk_rows=32)
    assert tuple(c for c in table.column_names if c in ALL) == ALL
    for name in ALL:
        expected = [_reference(r, name) for r in records]
        np.testing.assert_allclose(table[name].to_numpy(), expected, rtol=1e-10, atol=1e-10,
                                   err_msg=name)


def test_float32_within_1e5(topk_corpus):
    path, _ = topk_corpus
    f64 = fastuq.score(path, "all")
    f32 = fastuq.score(path, "all", dtype="float32")
    for name in ALL:
        ref = f64[name].to_numpy()
        np.testing.assert_allclose(f32[name].to_numpy(), ref, rtol=1e-5,
                                   atol=1e-5 * max(1.0, np.abs(ref).max()), err_msg=name)


def test_umas_confidence_variants(topk_corpus):
    path, records = topk_corpus
    mean_lp = fastuq.score(path, "umas", confidence="mean_logprob")["umas"].to_numpy()
    neg_h = fastuq.score(path, "umas", confidence="neg_entropy")["umas"].to_numpy()
    for k, r in enumerate(records[:20]):
        conf = [[None if x is None else x / n for x, n in zip(lr, nr, strict=True)]
                for lr, nr in zip(r["seq_logprob"], r["n_tokens"], strict=True)]
        want = umas_reference(conf, n_agents=r["n_agents"])["umas"]
        assert mean_lp[k] == pytest.approx(want, rel=1e-10)
        conf = [[None if tk is None else -_node_entropy(tk) for tk in rnd]
                for rnd in r["topk_logprobs"]]
        want = umas_reference(conf, n_agents=r["n_agents"])["umas"]
        assert neg_h[k] == pytest.approx(want, rel=1e-10)
    with pytest.raises(ValueError, match="confidence"):
        fastuq.score(path, "umas", confidence="nope")


def _node_table(seq, preds=None, n_agents=3):
    cols = {
        "trajectory_id": [f"t{k}" for k in range(len(seq))],
        "protocol": ["debate"] * len(seq),
        "n_agents": pa.array([n_agents] * len(seq), pa.int32()),
        "seq_logprob": pa.array(seq, pa.list_(pa.list_(pa.float64()))),
    }
    if preds is not None:
        cols["predecessors"] = pa.array(preds, pa.list_(pa.list_(pa.list_(pa.int32()))))
    return pa.table(cols)


def test_umas_reads_explicit_predecessors(tmp_path):
    seq = [[[-1.0, -2.0, -4.0], [-0.5, -3.0, -1.0], [-0.2, None, -0.9]],
           [[-3.0, -1.0, None], [-2.0, -2.5, None]]]
    preds = [[[[], [], []], [[1], [0, 2], []], [[2], None, [0]]],
             [[[], [], None], [[1], [0], None]]]
    path = tmp_path / "g.parquet"
    pq.write_table(_node_table(seq, preds), path)
    got = fastuq.score(path, "umas")["umas"].to_numpy()
    for k in range(2):
        want = umas_reference(seq[k], preds[k], n_agents=3)["umas"]
        assert got[k] == pytest.approx(want, abs=1e-12)
    # The default graph gives a different number on the first record.
    default = umas_reference(seq[0], n_agents=3)["umas"]
    assert abs(default - got[0]) > 1e-6


def test_predecessor_out_of_range_names_trajectory(tmp_path):
    path = tmp_path / "g.parquet"
    pq.write_table(_node_table([[[-1.0, -1.0, -1.0], [-1.0, -1.0, -1.0]]],
                               [[[[], [], []], [[5], [0], [1]]]]), path)
    with pytest.raises(ValueError, match="trajectory 't0'.*predecessor 5.*predecessors"):
        fastuq.score(path, "umas")


def test_positive_logprob_names_trajectory_round_agent(tmp_path):
    path = tmp_path / "bad.parquet"
    pq.write_table(_node_table([[[-1.0, -1.0, -1.0]], [[-1.0, -2.0, -3.0], [-1.0, 0.5, -1.0]]]),
                   path)
    with pytest.raises(ValueError, match=r"'t1' \(.*bad.parquet row 1\), round 1, agent 1: "
                                         r"seq_logprob = 0.5"):
        fastuq.score(path, "msp_final")


def test_node_list_longer_than_team_is_an_error(tmp_path):
    path = tmp_path / "bad.parquet"
    pq.write_table(_node_table([[[-1.0, -1.0, -1.0, -1.0]]], n_agents=3), path)
    with pytest.raises(ValueError, match="seq_logprob"):
        fastuq.score(path, "umas")


def test_missing_inputs_are_named(tmp_path):
    path = tmp_path / "c.parquet"
    pq.write_table(pa.table({"trajectory_id": ["a"], "protocol": ["debate"],
                             "agreement": [[0.5]], "token_entropy": [[0.1]]}), path)
    with pytest.raises(ValueError, match="umas needs seq_logprob"):
        fastuq.score(path, "umas")
    assert fastuq.score(path, "all").column_names == [
        "trajectory_id", "sauce", "last_agreement", "mean_agreement", "weighted_agreement",
        "protocol"]
