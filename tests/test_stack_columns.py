"""The stack, ``fastuq calibrate`` and ``fastuq select`` take every score column an
estimator declares (``eigval_laplacian_mean`` beside ``eigval_laplacian``), not only the
columns named as an estimator; stack files record the estimator of each input column
(layout 2) and still read layout 1 files.

Oracles are computed apart from the package: the stack applied by hand from the file's
standardisation and coefficients (``1 / (1 + exp(eta))``) to the columns ``fastuq score
--method X`` writes (float64 both, so 1e-12); the stack's model against scikit-learn's
``make_pipeline(StandardScaler(), LogisticRegression(C=1))`` (1e-6, its solver's tolerance);
a Platt map applied by hand (``1 / (1 + exp(-(alpha + beta x)))``, 1e-12); best-of-K by a
plain loop over questions (exact).

``tests/data/stack_layout1.json`` is a stack file as fastuq wrote it before layout 2 (main at
44eb302): ``fastuq fit --stack corpus.parquet --method mean_agreement,eigval_laplacian,
degree_matrix --folds 3 --bootstrap 50 -o stack_layout1.json`` on the first 600 rows of the
sample corpus (the ``corpus`` fixture below).
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from sklearn.linear_model import LogisticRegression
from sklearn.pipeline import make_pipeline
from sklearn.preprocessing import StandardScaler

from fastuq.cli import main
from fastuq.evaluation.stack import Stack, fit_stack

DATA = Path(__file__).parent / "data"
METHODS = "mean_agreement,eigval_laplacian,degree_matrix"
#: The score columns those three estimators write, in the order the scorer writes them.
COLUMNS = ["mean_agreement", "eigval_laplacian", "eigval_laplacian_mean", "degree_matrix",
           "degree_matrix_mean"]
PRODUCERS = {"mean_agreement": "mean_agreement", "eigval_laplacian": "eigval_laplacian",
             "eigval_laplacian_mean": "eigval_laplacian", "degree_matrix": "degree_matrix",
             "degree_matrix_mean": "degree_matrix"}


@pytest.fixture(scope="module")
def corpus(tmp_path_factory):
    from fastuq.cli import sample_corpus_path

    table = pq.read_table(sample_corpus_path()).slice(0, 600)
    path = tmp_path_factory.mktemp("stack_columns") / "corpus.parquet"
    pq.write_table(table, path)
    return path


@pytest.fixture(scope="module")
def inputs(corpus, tmp_path_factory):
    """The input columns as ``fastuq score --method METHODS`` writes them (float64)."""
    out = tmp_path_factory.mktemp("stack_inputs") / "inputs.parquet"
    assert main(["score", str(corpus), "--method", METHODS, "--dtype", "float64",
                 "-o", str(out)]) == 0
    return pq.read_table(out)


def _by_hand(doc, inputs, protocols):
    """P(wrong) of every row from the file's per-protocol model, computed here."""
    out = np.full(inputs.num_rows, np.nan)
    for proto, m in doc["models"].items():
        rows = protocols == proto
        x = np.column_stack([inputs.column(c).to_numpy()[rows] for c in m["columns"]])
        eta = ((x - np.array(m["mean"])) / np.array(m["scale"])) @ np.array(m["coef"]) \
            + m["intercept"]
        out[rows] = 1.0 / (1.0 + np.exp(eta))
    return out


def test_fit_stack_stacks_the_mean_columns_and_score_applies_them(corpus, inputs, tmp_path,
                                                                  capsys):
    out = tmp_path / "stack.json"
    assert main(["fit", "--stack", str(corpus), "--method", METHODS, "--folds", "3",
                 "--bootstrap", "0", "-o", str(out)]) == 0
    text = capsys.readouterr().out
    assert "eigval_laplacian_mean" in text and "degree_matrix_mean" in text
    doc = json.loads(out.read_text())
    assert doc["format_version"] == 2
    assert doc["columns"] == COLUMNS and doc["producers"] == PRODUCERS
    assert doc["estimators"] == METHODS.split(",")  # each estimator once
    table = pq.read_table(corpus)
    protocols = table.column("protocol").to_numpy(zero_copy_only=False)
    y = table.column("correct").to_numpy()
    assert inputs.column_names == ["trajectory_id", *COLUMNS]
    for proto in ("debate", "dylan"):
        assert doc["models"][proto]["columns"] == COLUMNS
        # the model saved is scikit-learn's on all five columns of the protocol
        rows = protocols == proto
        x = np.column_stack([inputs.column(c).to_numpy()[rows] for c in COLUMNS])
        sk = make_pipeline(StandardScaler(), LogisticRegression(C=1.0, tol=1e-12,
                                                                max_iter=100_000)).fit(x, y[rows])
        np.testing.assert_allclose(doc["models"][proto]["coef"], sk[-1].coef_[0], atol=1e-6)
    scored = tmp_path / "scored.parquet"
    assert main(["score", str(corpus), "--method", "stack", "--params", str(out),
                 "--dtype", "float64", "-o", str(scored)]) == 0
    got = pq.read_table(scored)
    assert got.column_names == ["trajectory_id", "stack"]
    np.testing.assert_allclose(got.column("stack").to_numpy(),
                               _by_hand(doc, inputs, protocols), rtol=0, atol=1e-12)


def test_layout_1_stack_file_still_applies(corpus, inputs, tmp_path):
    # a file main wrote (estimator columns only); its fastuq version set to this one's, so
    # that the layout, not the version check, is what is tested
    import fastuq

    doc = json.loads((DATA / "stack_layout1.json").read_text())
    assert doc["format_version"] == 1 and "columns" not in doc
    doc["fastuq_version"] = fastuq.__version__
    path = tmp_path / "old.json"
    path.write_text(json.dumps(doc))
    st = Stack.load(path)
    assert st.columns == st.estimators == METHODS.split(",")
    assert st.producers == {m: m for m in METHODS.split(",")}
    scored = tmp_path / "scored.parquet"
    assert main(["score", str(corpus), "--method", "stack", "--params", str(path),
                 "--dtype", "float64", "-o", str(scored)]) == 0
    protocols = pq.read_table(corpus).column("protocol").to_numpy(zero_copy_only=False)
    np.testing.assert_allclose(pq.read_table(scored).column("stack").to_numpy(),
                               _by_hand(doc, inputs, protocols), rtol=0, atol=1e-12)


def test_stack_file_layouts_and_producers_checked(tmp_path):
    rng = np.random.default_rng(1)
    n = 120
    cols = {"mean_agreement": rng.normal(size=n), "eigval_laplacian_mean": rng.normal(size=n),
            "mine": rng.normal(size=n)}
    y = rng.random(n) < 0.5
    st = fit_stack(cols, y, bootstrap=0)
    # producers from the registry; a column no estimator declares is its own
    assert st.columns == list(cols)
    assert st.producers == {"mean_agreement": "mean_agreement",
                            "eigval_laplacian_mean": "eigval_laplacian", "mine": "mine"}
    assert st.estimators == ["mean_agreement", "eigval_laplacian", "mine"]
    given = fit_stack(cols, y, bootstrap=0, producers={"mine": "sauce"})
    assert given.estimators == ["mean_agreement", "eigval_laplacian", "sauce"]
    with pytest.raises(ValueError, match="no score column 'eigval_laplacian_mean' "
                                         "\\(estimator 'eigval_laplacian'\\)"):
        st.predict({"mean_agreement": cols["mean_agreement"], "mine": cols["mine"]})
    doc = st.to_dict()
    bad = tmp_path / "bad.json"
    for change, message in (
            ({"format_version": 3},
             "stack file layout 3; this fastuq reads layout 2; run fastuq fit --stack again"),
            ({"producers": {"mean_agreement": "mean_agreement", "mine": "mine"}},
             "producers .* must name each of the columns"),
            ({"estimators": ["mean_agreement", "mine"]}, "must be the columns' producers")):
        bad.write_text(json.dumps({**doc, **change}))
        with pytest.raises(ValueError, match=message):
            Stack.load(bad)
    # layout 1 models may only use columns named as estimators
    old = {**doc, "format_version": 1, "estimators": ["mean_agreement", "mine"]}
    del old["columns"], old["producers"]
    bad.write_text(json.dumps(old))
    with pytest.raises(ValueError, match="must be among the stack's columns"):
        Stack.load(bad)


def test_calibrate_maps_the_mean_columns_and_score_applies_them(corpus, inputs, tmp_path,
                                                                capsys):
    cal = tmp_path / "cal.json"
    assert main(["calibrate", str(corpus), "--method", "eigval_laplacian", "--dtype",
                 "float64", "-o", str(cal)]) == 0
    capsys.readouterr()
    doc = json.loads(cal.read_text())
    assert doc["estimators"] == ["eigval_laplacian", "eigval_laplacian_mean"]
    # recorded with the parameters of the estimator that writes the column
    assert doc["scoring"]["params"]["eigval_laplacian_mean"] == \
        doc["scoring"]["params"]["eigval_laplacian"]
    out = tmp_path / "p.parquet"
    assert main(["score", str(corpus), "--method", "eigval_laplacian", "--dtype", "float64",
                 "--calibration", str(cal), "-o", str(out)]) == 0
    got = pq.read_table(out)
    protocols = pq.read_table(corpus).column("protocol").to_numpy(zero_copy_only=False)
    x = inputs.column("eigval_laplacian_mean").to_numpy()
    want = np.empty_like(x)
    for proto in ("debate", "dylan"):
        m = doc["maps"]["eigval_laplacian_mean"][proto]
        rows = protocols == proto
        want[rows] = 1.0 / (1.0 + np.exp(-(m["alpha"] + m["beta"] * x[rows])))
    np.testing.assert_allclose(got.column("p_correct_eigval_laplacian_mean").to_numpy(), want,
                               rtol=0, atol=1e-12)
    # the estimator to add is named once, not once per column
    assert main(["score", str(corpus), "--method", "sauce", "--calibration", str(cal),
                 "-o", str(out)]) == 2
    assert capsys.readouterr().err.strip().endswith(
        "calibrates eigval_laplacian, eigval_laplacian_mean: add eigval_laplacian to --method")
    # and the report names the estimator too, not the columns it lacks
    assert main(["report", str(corpus), "--method", "sauce", "--calibration", str(cal),
                 "-o", str(tmp_path / "r.html")]) == 2
    assert capsys.readouterr().err.strip().endswith(
        "(add eigval_laplacian to the methods)")


def test_select_ranks_every_score_column(corpus, tmp_path, capsys):
    # select scores at the default precision (float32 on a GPU): the oracle's scores too
    table = pq.read_table(corpus)
    qid = pa.array([f"q{k // 3}" for k in range(table.num_rows)], pa.string())
    grouped = tmp_path / "grouped.parquet"
    pq.write_table(table.set_column(table.column_names.index("question_id"), "question_id",
                                    qid), grouped)
    out = tmp_path / "sel.json"
    assert main(["select", str(grouped), "--method", "eigval_laplacian", "--json",
                 str(out)]) == 0
    scored = tmp_path / "scores.parquet"
    assert main(["score", str(grouped), "--method", "eigval_laplacian", "-o", str(scored)]) == 0
    inputs = pq.read_table(scored)
    capsys.readouterr()
    selected = json.loads(out.read_text())["selected"]
    assert list(selected) == ["eigval_laplacian", "eigval_laplacian_mean"]
    y = table.column("correct").to_numpy()
    for name in selected:
        u = inputs.column(name).to_numpy()
        picks = [min(range(k, k + 3), key=lambda i: (u[i], i)) for k in range(0, len(u), 3)]
        assert selected[name] == y[picks].mean()
