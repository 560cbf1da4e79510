"""The estimator stack (``fastuq.evaluation.stack``), its logistic fit
(``fastuq.metrics.logistic``), ``fastuq fit --stack`` and ``fastuq score --method stack``.

Oracles are scikit-learn's, computed apart from the module: ``make_pipeline(StandardScaler(),
LogisticRegression(C))`` with a tight tolerance for the fits, ``StratifiedKFold(shuffle=True,
random_state=seed)`` per protocol for the cross-fitting, ``roc_auc_score`` and
``brier_score_loss`` for the metrics. Tolerances: 1e-6 on coefficients and probabilities
(scikit-learn's solver stops at its tolerance), 1e-6 on metrics of fitted probabilities;
AUROC of raw scores exactly (1e-12).
"""

from __future__ import annotations

import json

import numpy as np
import pyarrow.parquet as pq
import pytest
from sklearn.linear_model import LogisticRegression
from sklearn.metrics import brier_score_loss, roc_auc_score
from sklearn.model_selection import StratifiedKFold
from sklearn.pipeline import make_pipeline
from sklearn.preprocessing import StandardScaler

from fastuq.cli import main
from fastuq.evaluation.stack import Stack, fit_stack
from fastuq.metrics.logistic import logistic_fit


def _sk(C=1.0):
    return make_pipeline(StandardScaler(),
                         LogisticRegression(C=C, tol=1e-12, max_iter=100_000))


def _data(n=400, seed=0):
    """Three uncertainty columns of differing scale and one constant column; the labels
    depend on the first two."""
    rng = np.random.default_rng(seed)
    a = rng.normal(size=n)
    b = 50.0 * rng.normal(size=n) + 3.0
    y = (-(a + b / 50.0) + rng.normal(size=n)) > 0.0
    c = rng.normal(size=n)
    return {"a": a, "b": b, "noise": c, "flat": np.full(n, 2.5)}, y


@pytest.mark.parametrize("C", [1.0, 0.05])
def test_logistic_fit_is_scikit_learns(C):
    cols, y = _data()
    x = np.column_stack(list(cols.values()))
    mine = logistic_fit(x, y, C=C)
    sk = _sk(C).fit(x, y)
    np.testing.assert_allclose(mine.coef, sk[-1].coef_[0], atol=1e-6)
    assert mine.intercept == pytest.approx(sk[-1].intercept_[0], abs=1e-6)
    assert mine.coef[3] == 0.0  # a constant column standardises to exactly 0
    np.testing.assert_allclose(mine.probability(x), sk.predict_proba(x)[:, 1], atol=1e-6)


def test_logistic_fit_errors():
    x = np.ones((4, 1))
    with pytest.raises(ValueError, match="one class"):
        logistic_fit(x, np.ones(4, bool))
    with pytest.raises(ValueError, match="C must be"):
        logistic_fit(x, np.array([0, 1, 0, 1]), C=0.0)
    with pytest.raises(ValueError, match="finite"):
        logistic_fit(np.array([[0.0], [np.nan], [1.0], [2.0]]), np.array([0, 1, 0, 1]))


def test_held_out_metrics_come_from_models_fitted_on_the_other_folds():
    cols, y = _data(n=500, seed=1)
    st = fit_stack(cols, y, folds=4, seed=3, C=0.5, bootstrap=0)
    x = np.column_stack(list(cols.values()))
    p = np.empty(y.shape[0])
    for train, test in StratifiedKFold(4, shuffle=True, random_state=3).split(x, y):
        p[test] = _sk(0.5).fit(x[train], y[train]).predict_proba(x[test])[:, 1]
    r = st.report_["(no protocol)"]
    assert r["metrics"]["stack"]["auroc"] == pytest.approx(roc_auc_score(y, p), abs=1e-6)
    assert r["metrics"]["stack"]["brier"] == pytest.approx(brier_score_loss(y, p), abs=1e-6)
    full = _sk(0.5).fit(x, y).predict_proba(x)[:, 1]
    assert r["train_auroc"] == pytest.approx(roc_auc_score(y, full), abs=1e-6)
    # the inputs beside it: AUROC of the raw uncertainty, Brier after Platt on the same folds
    for j, name in enumerate(cols):
        assert r["metrics"][name]["auroc"] == pytest.approx(roc_auc_score(y, -x[:, j]),
                                                            abs=1e-12)
        q = np.empty(y.shape[0])
        for train, test in StratifiedKFold(4, shuffle=True, random_state=3).split(x, y):
            q[test] = _sk(0.5).fit(x[train, j:j + 1], y[train]).predict_proba(
                x[test, j:j + 1])[:, 1]
        assert r["metrics"][name]["brier"] == pytest.approx(brier_score_loss(y, q), abs=1e-6)
    # the saved model is the fit on every row; its score is P(wrong)
    np.testing.assert_allclose(st.predict(cols)["stack"], 1.0 - full, atol=1e-6)


@pytest.mark.parametrize("seed", range(6))
def test_pure_noise_columns_stay_near_half_held_out_but_not_in_sample(seed):
    # 60 columns of noise, 200 labels independent of them: a stack evaluated on its own
    # training rows looks useful (in-sample AUROC about 0.8); held out it must not (AUROC
    # within 0.1 of 0.5: about 2.5 standard errors at N = 200).
    rng = np.random.default_rng(seed)
    n = 200
    cols = {f"noise{j}": rng.normal(size=n) for j in range(60)}
    y = rng.random(n) < 0.5
    st = fit_stack(cols, y, folds=5, seed=0, bootstrap=200)
    r = st.report_["(no protocol)"]
    assert abs(r["metrics"]["stack"]["auroc"] - 0.5) < 0.1, r["metrics"]["stack"]
    assert r["train_auroc"] > 0.75, r["train_auroc"]
    # and the stack does not beat the best noise column with any confidence
    d = r["difference"]["auroc"]
    assert d["low"] < 0.0 and d["low"] <= d["estimate"] <= d["high"]


def test_bootstrap_difference_against_the_best_single_estimator():
    cols, y = _data(n=600, seed=2)
    st = fit_stack(cols, y, bootstrap=300)
    r = st.report_["(no protocol)"]
    for metric, higher in (("auroc", True), ("auarc", True), ("brier", False)):
        inputs = {k: v[metric] for k, v in r["metrics"].items() if k != "stack"}
        best = (max if higher else min)(inputs, key=inputs.get)
        d = r["difference"][metric]
        assert d["best"] == best
        assert d["estimate"] == pytest.approx(r["metrics"]["stack"][metric] - inputs[best])
        assert d["low"] <= d["estimate"] <= d["high"] and d["replicates"] == 300
    # a and b together carry more than either: the stack wins AUROC with confidence
    assert r["difference"]["auroc"]["low"] > 0.0


def test_per_protocol_models_and_unknown_protocol():
    cols, y = _data(n=600, seed=4)
    protos = np.where(np.arange(600) % 3 == 0, "debate", "dylan")
    cols["a"] = np.where(protos == "debate", cols["a"] * 10.0, cols["a"])
    st = fit_stack(cols, y, protos, bootstrap=0)
    assert st.protocols == ["debate", "dylan"]
    for proto in st.protocols:
        rows = protos == proto
        x = np.column_stack([cols[c][rows] for c in st.models_[proto]["columns"]])
        sk = _sk().fit(x, y[rows])
        np.testing.assert_allclose(st.models_[proto]["coef"], sk[-1].coef_[0], atol=1e-6)
        assert st.report_[proto]["n"] == int(rows.sum())
    ids = [f"t{k}" for k in range(600)]
    other = np.where(np.arange(600) == 5, "mad", protos).astype(object)
    with pytest.raises(ValueError, match=r"trajectory 't5': protocol 'mad' .*field protocol"):
        st.predict(cols, other, ids=ids)


def test_non_finite_column_left_out_and_errors_name_the_record():
    cols, y = _data(n=200)
    cols["b"] = cols["b"].copy()
    cols["b"][3] = np.nan
    st = fit_stack(cols, y, bootstrap=0)
    assert "b" not in st.estimators
    assert st.report_["(no protocol)"]["left_out"] == {"b": "1 non-finite score(s)"}
    labels = np.array([bool(v) for v in y], object)
    labels[7] = None
    ids = [f"t{k}" for k in range(200)]
    with pytest.raises(ValueError, match=r"trajectory 't7' has no label \(field correct"):
        fit_stack(cols, labels, ids=ids, bootstrap=0)
    with pytest.raises(ValueError, match="protocol 'x'.*at least 5"):
        fit_stack({"a": np.arange(12.0)}, np.arange(12) < 3, "x", bootstrap=0)
    with pytest.raises(ValueError, match="folds"):
        Stack(folds=1)
    with pytest.raises(ValueError, match="C must be"):
        Stack(C=-1.0)


def test_save_load_round_trip_and_file_checks(tmp_path):
    cols, y = _data()
    st = fit_stack(cols, y, bootstrap=50)
    st.scoring = {"params": {}, "observation_noise": None, "math": False}
    path = st.save(tmp_path / "stack.json")
    back = Stack.load(path)
    np.testing.assert_array_equal(back.predict(cols)["stack"], st.predict(cols)["stack"])
    assert back.estimators == st.estimators and back.report_ == json.loads(
        path.read_text())["report"]
    doc = json.loads(path.read_text())
    for change, message in (({"fastuq_version": "99.0.0"}, "another major version"),
                            ({"format": "x"}, "not a fastuq stack file"),
                            ({"format_version": 9}, "layout 9")):
        bad = tmp_path / "bad.json"
        bad.write_text(json.dumps({**doc, **change}))
        with pytest.raises(ValueError, match=message):
            Stack.load(bad)
    doc["models"]["(no protocol)"]["coef"] = [1.0]
    bad.write_text(json.dumps(doc))
    with pytest.raises(ValueError, match="coef must be"):
        Stack.load(bad)
    with pytest.raises(ValueError, match="no score column 'a'"):
        back.predict({"b": cols["b"]})
    with pytest.raises(ValueError, match="observation noise"):
        back.check_scoring({"params": {}, "observation_noise": 0.1, "math": False})


# ------------------------------------------------------------------------------- commands


@pytest.fixture(scope="module")
def corpus(tmp_path_factory):
    from fastuq.cli import sample_corpus_path

    table = pq.read_table(sample_corpus_path()).slice(0, 600)
    path = tmp_path_factory.mktemp("stack") / "corpus.parquet"
    pq.write_table(table, path)
    return path


METHODS = "sauce,mean_agreement,last_agreement"


def test_fit_stack_then_score_applies_it(corpus, tmp_path, capsys):
    import fastuq

    out = tmp_path / "stack.json"
    assert main(["fit", "--stack", str(corpus), "--method", METHODS, "--folds", "3",
                 "--bootstrap", "50", "-o", str(out)]) == 0
    text = capsys.readouterr().out
    assert "stack - " in text and "held out" in text
    doc = json.loads(out.read_text())
    assert doc["estimators"] == METHODS.split(",") and doc["folds"] == 3
    assert set(doc["protocols"]) == {"debate", "dylan"}
    scores = tmp_path / "scores.parquet"
    assert main(["score", str(corpus), "--dtype", "float64", "--method", "stack,sauce",
                 "--params", str(out), "-o", str(scores)]) == 0
    got = pq.read_table(scores)
    assert got.column_names == ["trajectory_id", "sauce", "stack"]
    # the oracle: scikit-learn fitted per protocol on fastuq.score's input columns
    table = pq.read_table(corpus)
    ref = fastuq.score(table, methods=METHODS.split(","), dtype="float64")
    y = table.column("correct").to_numpy()
    protos = table.column("protocol").to_numpy(zero_copy_only=False)
    stack = got.column("stack").to_numpy()
    for proto in ("debate", "dylan"):
        rows = protos == proto
        x = np.column_stack([ref.column(m).to_numpy()[rows] for m in METHODS.split(",")])
        p = _sk().fit(x, y[rows]).predict_proba(x)[:, 0]
        np.testing.assert_allclose(stack[rows], p, atol=1e-6)


def test_fit_stack_and_calibrate_name_the_missing_and_null_labels(corpus, tmp_path, capsys):
    """The label reader both commands share (fastuq.cli.options.corpus_labels): a corpus
    without the correct field, and the first null label by trajectory id (messages written
    out here); exit status 2, nothing written."""
    import pyarrow as pa

    table = pq.read_table(corpus)
    unlabelled = tmp_path / "unlabelled.parquet"
    pq.write_table(table.drop_columns(["correct"]), unlabelled)
    labels = table.column("correct").to_pylist()
    for k in (17, 40, 41):
        labels[k] = None
    holes = tmp_path / "holes.parquet"
    pq.write_table(table.set_column(table.column_names.index("correct"), "correct",
                                    pa.array(labels, pa.bool_())), holes)
    first = table.column("trajectory_id")[17].as_py()
    out = tmp_path / "out.json"
    commands = {"fastuq fit": (["fit", "--stack"], "the stack is fitted to them"),
                "fastuq calibrate": (["calibrate"], "calibration needs them")}
    for prog, (words, purpose) in commands.items():
        args = [*words, "--method", "last_agreement", "-o", str(out)]
        assert main([*args[:len(words)], str(unlabelled), *args[len(words):]]) == 2
        assert capsys.readouterr().err.strip().endswith(
            f"{prog}: error: {unlabelled}: no labels: the corpus has no 'correct' field "
            f"(bool, True = correct); {purpose}")
        assert main([*args[:len(words)], str(holes), *args[len(words):]]) == 2
        assert capsys.readouterr().err.strip().endswith(
            f"{prog}: error: {holes}: trajectory {first!r} has no label (field correct is "
            "null; 3 unlabelled)")
        assert not out.exists()


def test_score_refuses_a_stack_of_other_parameters(corpus, tmp_path, capsys):
    out = tmp_path / "stack.json"
    assert main(["fit", "--stack", str(corpus), "--method", METHODS, "--bootstrap", "0",
                 "-o", str(out)]) == 0
    capsys.readouterr()
    dst = str(tmp_path / "s.parquet")
    assert main(["score", str(corpus), "--method", "stack", "--params", str(out),
                 "--lam", "0.5", "-o", dst]) == 2
    err = capsys.readouterr().err
    assert "estimator 'sauce', protocol 'debate'" in err and "lam 0.95 there, 0.5 here" in err
    assert main(["score", str(corpus), "--method", "stack", "-o", dst]) == 2
    assert "needs the stack file" in capsys.readouterr().err
    assert main(["score", str(corpus), "--params", str(out), "-o", dst]) == 2
    assert "add stack to --method" in capsys.readouterr().err
    assert main(["fit", "--stack", str(corpus), "--steps", "10", "-o", str(out)]) == 2
    assert "--steps applies to SAUCE's fit" in capsys.readouterr().err
    assert main(["fit", str(corpus), "--bootstrap", "10"]) == 2
    assert "--bootstrap applies with --stack" in capsys.readouterr().err


def test_score_uses_the_stacks_observation_noise(corpus, tmp_path, capsys):
    # a corpus without token entropy: SAUCE runs on agreement with the noise the stack
    # was fitted with, taken from the file when the run does not give it
    table = pq.read_table(corpus)
    bare = tmp_path / "bare.parquet"
    pq.write_table(table.drop(["token_entropy"]), bare)
    out = tmp_path / "stack.json"
    assert main(["fit", "--stack", str(bare), "--method", "sauce,mean_agreement",
                 "--observation-noise", "0.2", "--bootstrap", "0", "-o", str(out)]) == 0
    assert json.loads(out.read_text())["scoring"]["observation_noise"] == 0.2
    capsys.readouterr()
    a, b = str(tmp_path / "a.parquet"), str(tmp_path / "b.parquet")
    assert main(["score", str(bare), "--method", "stack", "--params", str(out), "-o", a]) == 0
    assert main(["score", str(bare), "--method", "stack", "--params", str(out),
                 "--observation-noise", "0.2", "-o", b]) == 0
    assert pq.read_table(a).column_names == ["trajectory_id", "stack"]
    assert pq.read_table(a).equals(pq.read_table(b))
    assert main(["score", str(bare), "--method", "stack", "--params", str(out),
                 "--observation-noise", "0.3", "-o", b]) == 2
    assert "observation noise 0.2; this run has 0.3" in capsys.readouterr().err


def test_score_file_stack_argument(corpus, tmp_path):
    from fastuq.engine.files import score_file

    cols, y = _data(n=50)
    st = fit_stack({"mean_agreement": cols["a"]}, y, bootstrap=0)
    with pytest.raises(ValueError, match="'stack' is not among the methods"):
        score_file(corpus, tmp_path / "x.parquet", methods="sauce", stack=st)
    with pytest.raises(ValueError, match="fastuq fit --stack"):
        score_file(corpus, tmp_path / "x.parquet", methods="stack,sauce")
    with pytest.raises(ValueError, match="'all' cannot be combined"):
        score_file(corpus, tmp_path / "x.parquet", methods="stack,all", stack=st)
