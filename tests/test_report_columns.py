"""``fastuq eval --method all`` and ``fastuq report`` evaluate every score column the estimators
write, the black-box family's included: ``answer_entropy``, ``num_answer_sets``, ``cocoa``
(and their ``_mean`` entries), and the last-round and round-mean columns of
``lexical_similarity``, ``eigval_laplacian``, ``degree_matrix`` and ``eccentricity``. The
page lists every column eval produced, with eval's numbers, and two of the round-mean
columns are checked against tests/_references.py's per-trajectory computation and
scikit-learn's AUROC."""

from __future__ import annotations

import json

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from _references import spectral_trajectory
from sklearn.metrics import roc_auc_score
from test_report import _parse

from fastuq.cli import main
from fastuq.report import build_report, render_html

#: The black-box columns a corpus with answers, texts and sequence log-probabilities gets.
BLACK_BOX = {
    "answer_entropy", "answer_entropy_mean", "num_answer_sets", "num_answer_sets_mean",
    "cocoa", "cocoa_mean",
    "lexical_similarity", "lexical_similarity_mean", "eigval_laplacian",
    "eigval_laplacian_mean", "degree_matrix", "degree_matrix_mean", "eccentricity",
    "eccentricity_mean",
}
WORDS = ("the", "answer", "is", "x", "so", "we", "add", "two", "three", "Five", "sum")


def _corpus(n: int = 60, team: int = 3, seed: int = 0):
    """``(table, texts, answers)``: debates of 1-3 rounds of ``team`` agents, labels tied
    loosely to the last round's majority."""
    rng = np.random.default_rng(seed)
    texts, answers, logp, correct = [], [], [], []
    for _ in range(n):
        rounds = int(rng.integers(1, 4))
        ans = [[str(rng.integers(1, 4)) for _ in range(team)] for _ in range(rounds)]
        txt = [[" ".join(rng.choice(WORDS, int(rng.integers(0, 7)))) + f" {a}."
                for a in r] for r in ans]
        texts.append(txt)
        answers.append(ans)
        logp.append([[-float(rng.exponential(1.0)) for _ in range(team)]
                     for _ in range(rounds)])
        last = ans[-1]
        correct.append(bool(last.count(max(set(last), key=last.count)) > 1
                            and rng.random() < 0.8))
    nested = pa.list_(pa.list_(pa.string()))
    table = pa.table({
        "trajectory_id": [f"q{k}" for k in range(n)], "protocol": ["debate"] * n,
        "n_agents": pa.array([team] * n, pa.int32()), "correct": correct,
        "answers": pa.array(answers, nested), "texts": pa.array(texts, nested),
        "seq_logprob": pa.array(logp, pa.list_(pa.list_(pa.float64())))})
    return table, texts, answers


@pytest.fixture(scope="module")
def pages(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("columns")
    table, texts, answers = _corpus()
    corpus, out, ref = tmp / "c.parquet", tmp / "report.html", tmp / "eval.json"
    pq.write_table(table, corpus)
    noise = ["--observation-noise", "0.1", "--backend", "numpy"]  # no compiling: seconds
    assert main(["eval", str(corpus), "--method", "all", *noise, "--json", str(ref)]) == 0
    # the page fastuq report writes, without its plots (matplotlib would take most of the time)
    report = build_report(str(corpus), methods="all", observation_noise=0.1, backend="numpy",
                          plots=False)
    out.write_text(render_html(report))
    return table, texts, answers, json.loads(ref.read_text()), _parse(out.read_text())


def test_eval_evaluates_every_black_box_column(pages):
    _, _, _, ref, _ = pages
    assert BLACK_BOX <= set(ref["estimators"]), BLACK_BOX - set(ref["estimators"])
    # outputs that are not scores stay out
    assert not {"uaad_tier", "uaad_stop", "uaad_calls"} & set(ref["estimators"])


def test_the_report_lists_every_column_eval_produced(pages):
    _, _, _, ref, page = pages
    data = json.loads(page.data_json)
    assert data["estimators"] == ref["estimators"]
    table = next(t for t in page.tables if t and t[0][:2] == ["estimator", "AUROC"])
    assert [row[0] for row in table[1:]] == list(ref["estimators"])


@pytest.mark.parametrize("column, kind", [("lexical_similarity_mean", "lexical"),
                                          ("degree_matrix_mean", "answer")])
def test_round_mean_columns_against_the_reference(pages, column, kind):
    table, texts, answers, ref, page = pages
    rounds = texts if kind == "lexical" else answers
    # rounded: the reference's eigenvalues carry float noise, which would break the ties
    # (many trajectories share a value) that AUROC counts as halves
    want = np.round([spectral_trajectory(r, 3, kind)[column] for r in rounds], 9)
    wrong = ~np.asarray(table["correct"].to_pylist())
    data = json.loads(page.data_json)
    auroc = roc_auc_score(wrong, want)
    assert data["estimators"][column]["auroc"] == pytest.approx(auroc, abs=1e-12)
