"""Tests of fastuq.fit: gradient fitting of SAUCE's parameters on small simulated corpora.

What is asserted: each objective improves on its starting value on the training
trajectories; the constraints hold (lam in [0, 1], q >= 0, sigma2_0 > 0) even with a wild
learning rate; mixed corpora are fitted per protocol on their own trajectories; held-out
metrics equal an independent recomputation (scikit-learn's AUROC, a stable-sort AUARC: 1e-12);
the Platt coefficients equal scikit-learn's unpenalised LogisticRegression (newton-cg,
tol 1e-12: agrees to ~1e-15, asserted to 1e-9 relative); float64 stays scoped.
"""

from __future__ import annotations

import json
import math
import warnings

import numpy as np
import pytest
from sklearn.linear_model import LogisticRegression
from sklearn.metrics import log_loss, roc_auc_score

import fastuq
from fastuq import cli
from fastuq.fit import FitResult, fit_sauce
from fastuq.sweeps import load_sauce_data
from fastuq.synth import corpus


@pytest.fixture(scope="module")
def debate():
    return corpus(3000, protocol="debate", seed=5)


@pytest.fixture(scope="module")
def mixed():
    return corpus(3000, protocol="mixed", seed=6)


def _sklearn_platt(scores, y):
    """Maximum-likelihood (alpha, beta) of P(correct) = sigmoid(alpha + beta * score)."""
    lr = LogisticRegression(C=np.inf, solver="newton-cg", tol=1e-12, max_iter=1000)
    lr.fit(np.asarray(scores, np.float64)[:, None], y)
    return float(lr.intercept_[0]), float(lr.coef_[0, 0]), lr


def _auarc_plain(y, u):
    """Mean over k of the accuracy of the k most certain (stable order for ties)."""
    ys = np.asarray(y, np.float64)[np.argsort(u, kind="stable")]
    return float(np.mean(np.cumsum(ys) / np.arange(1, len(ys) + 1)))


def _check_constraints(params):
    for p in params.values():
        assert 0.0 <= p["lam"] <= 1.0
        assert p["q"] >= 0.0
        assert p["sigma2_0"] > 0.0
        assert all(math.isfinite(v) for v in p.values())


@pytest.mark.parametrize("objective", ["platt_logloss", "soft_auroc"])
def test_fit_improves_training_objective_and_keeps_constraints(debate, objective):
    res = fit_sauce(debate, objective=objective, steps=40, lr=0.05, holdout=0.25,
                    pairs=256)
    assert isinstance(res, FitResult) and list(res.params) == ["debate"]
    start, end = res.train_objective["debate"]
    assert end < start
    assert res.params["debate"] != res.init["debate"]
    assert res.init["debate"] == dict(fastuq.PRESETS["debate"])
    _check_constraints(res.params)
    assert res.history["debate"].shape == (40,)
    assert np.isfinite(res.history["debate"]).all()
    assert res.heldout.height == 1 and res.heldout["n"][0] == 750
    row = res.heldout.row(0, named=True)
    assert 0.5 < row["auroc_fitted"] <= 1 and 0.5 < row["auroc_preset"] <= 1


def test_platt_start_and_end_are_exact_logloss(debate):
    res = fit_sauce(debate, steps=40, holdout=0.0)
    data = load_sauce_data(debate)
    s = fastuq.sauce_batch(data.agreement, data.token_entropy, data.round_mask,
                           dtype="float32", **res.params["debate"])["score"]
    alpha, beta = res.platt["debate"]
    ref_alpha, ref_beta, lr = _sklearn_platt(s, data.labels)
    assert (alpha, beta) == pytest.approx((ref_alpha, ref_beta), rel=1e-9)
    logloss = log_loss(data.labels, lr.predict_proba(s.astype(np.float64)[:, None])[:, 1])
    assert res.train_objective["debate"][1] == pytest.approx(logloss, rel=1e-9)
    # the starting value: the preset parameters' scores, Platt-fitted the same way
    s0 = fastuq.sauce_batch(data.agreement, data.token_entropy, data.round_mask,
                            dtype="float32", **res.init["debate"])["score"]
    _, _, lr0 = _sklearn_platt(s0, data.labels)
    logloss0 = log_loss(data.labels, lr0.predict_proba(s0.astype(np.float64)[:, None])[:, 1])
    assert res.train_objective["debate"][0] == pytest.approx(logloss0, rel=1e-9)
    assert beta < 0  # higher uncertainty, less likely correct
    assert res.heldout is None


def test_wild_learning_rate_still_respects_constraints(debate):
    # lr = 50 throws the unconstrained parameters to their bounds; whatever it lands on (or
    # the start, kept with a RuntimeWarning when the objective got worse) must be valid.
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        res = fit_sauce(debate, steps=40, lr=50.0, holdout=0.0)
    _check_constraints(res.params)
    start, end = res.train_objective["debate"]
    assert end <= start


def test_mixed_corpus_is_fitted_per_protocol_on_its_own_trajectories(mixed):
    both = fit_sauce(mixed, steps=40, holdout=0.0)
    assert sorted(both.params) == ["debate", "dylan"]
    assert both.init["dylan"] == dict(fastuq.PRESETS["dylan"])
    dylan_only = mixed.filter(np.asarray(mixed.column("protocol").to_pylist()) == "dylan")
    alone = fit_sauce(dylan_only, steps=40, holdout=0.0)
    assert alone.params["dylan"] == pytest.approx(both.params["dylan"], rel=1e-6)
    _check_constraints(both.params)


def test_cv_heldout_metrics_match_an_independent_recomputation(mixed):
    from fastuq.sweeps import stratified_folds

    res = fit_sauce(mixed, steps=40, folds=2)
    tab = res.heldout
    assert tab.height == 2 * 3  # folds x (all, debate, dylan)
    assert set(tab["protocol"]) == {"all", "debate", "dylan"}
    data = load_sauce_data(mixed)
    fold = stratified_folds(data.labels, 2, 0)
    test = fold == 1
    protos = np.asarray(data.protocols)[data.protocol_codes]
    pre = fastuq.sauce_batch(data.agreement, data.token_entropy, data.round_mask,
                             protocol=protos, dtype="float32")["score"]
    row = tab.filter((tab["split"] == 1) & (tab["protocol"] == "all")).row(0, named=True)
    assert row["n"] == test.sum()
    assert row["auroc_preset"] == pytest.approx(
        roc_auc_score(data.labels[test], -pre[test].astype(np.float64)), abs=1e-12)
    assert row["auarc_preset"] == pytest.approx(_auarc_plain(data.labels[test], pre[test]),
                                                abs=1e-12)
    means = res.heldout_mean()
    assert set(means) == {"all", "debate", "dylan"}
    assert "held-out metrics (2-fold cross-validation)" in res.summary()


def test_float64_fit_is_scoped(debate):
    import jax

    before = jax.config.jax_enable_x64  # False unless the user set JAX_ENABLE_X64
    res = fit_sauce(debate, steps=40, holdout=0.0, dtype="float64")
    _check_constraints(res.params)
    assert jax.config.jax_enable_x64 == before
    assert res.settings["dtype"] == "float64"


def test_init_dict_and_errors(debate):
    res = fit_sauce(debate, steps=40, holdout=0.0, init={"lam": 0.5})
    assert res.init["debate"] == {"lam": 0.5, "q": 0.1, "sigma2_0": 0.25, "mu_0": 0.0}
    with pytest.raises(ValueError, match="objective"):
        fit_sauce(debate, objective="brier")
    with pytest.raises(ValueError, match="init"):
        fit_sauce(debate, init={"lam": 2.0})
    y = np.ones(debate.num_rows, bool)
    with pytest.raises(ValueError, match="held-out split needs"):
        fit_sauce(debate, labels=y)
    with pytest.raises(ValueError, match="all correct"):
        fit_sauce(debate, labels=y, holdout=0.0, steps=5)


def test_save_and_cli_write_json(tmp_path, monkeypatch, capsys):
    monkeypatch.setitem(cli.COMMANDS, "fit", "fastuq.cli.fit")
    out = tmp_path / "params.json"
    rc = cli.main(["fit", "--sample", "--steps", "40", "-o", str(out)])
    assert rc == 0
    text = capsys.readouterr().out
    assert "held-out metrics" in text and "dylan" in text
    saved = json.loads(out.read_text())
    assert sorted(saved["params"]) == ["debate", "dylan"]
    _check_constraints(saved["params"])
    assert saved["settings"]["steps"] == 40 and saved["heldout"]
    assert not list(tmp_path.glob(".*tmp"))


def test_a_fit_warning_names_its_fold():
    # lr = 50 overshoots: some fits end worse than they started and keep the start, with a
    # warning; each warning names which fit it is (it used to name the protocol only, the
    # same text for every fold and the final fit)
    data = corpus(600, protocol="debate", seed=1)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        fit_sauce(data, steps=40, lr=50.0, folds=3)
    texts = [str(w.message) for w in caught if issubclass(w.category, RuntimeWarning)
             and "did not improve" in str(w.message)]
    assert texts  # the case this test is about happens
    labels = []
    for text in texts:
        head = text.split(": the fit did not improve")[0]
        assert head.startswith("protocol 'debate', "), text
        labels.append(head.removeprefix("protocol 'debate', "))
    allowed = {f"fold {f} of 3 (fitted on the others)" for f in range(3)}
    allowed.add("final fit on all trajectories")
    assert set(labels) <= allowed, labels
    assert len(set(labels)) == len(labels)  # one warning per fit, each its own
