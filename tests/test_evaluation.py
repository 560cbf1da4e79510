"""Tests of fastuq.evaluation and ``fastuq eval``: the table against scikit-learn and
hand-computed values on the bundled sample, joining scores files to corpus labels, JSON,
markdown, expectation checks (PASS and FAIL) and plots.

Tolerances: AUROC vs scikit-learn and AUARC / accuracy vs plain loops 1e-12 (exact up to
float64 rounding); the engine's SAUCE scores vs the plain-Python filter below 1e-12 (float64,
sums in another order); a scores file joined back to its corpus gives bit-identical numbers
(the same scores, read back, in the same order).
"""

from __future__ import annotations

import json
import math
import subprocess
import sys
import warnings
from decimal import Decimal

import numpy as np
import polars as pl
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from sklearn.metrics import brier_score_loss, roc_auc_score

import fastuq
from fastuq import cli
from fastuq.cli import sample_corpus_path
from fastuq.evaluation import (
    accuracy_coverage,
    check_expectations,
    evaluation_table,
    format_table,
    join_labels,
    parse_expectations,
    reliability_bins,
    round_like,
)
from fastuq.metrics import METRICS, UndefinedMetricWarning, auarc, ece, platt_oof_probabilities

PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"

# SAUCE presets as DESIGN.md settles them (written here by hand, not read from fastuq).
PRESETS = {"debate": (0.95, 0.10, 0.25, 0.0), "dylan": (0.70, 0.001, 0.25, 0.0)}


def sauce_reference(agreement, entropy, protocol):
    """SAUCE written from papers/sauce.md, one record at a time: a scalar Kalman-style filter
    with entropy floored at 1e-8, 1e-8 added to the gain denominator and the posterior
    variance floored at 1e-15; the score is minus the mean posterior mean."""
    lam, q, var, mu = PRESETS[protocol]
    means = []
    for m, h in zip(agreement, entropy, strict=True):
        mu_pred = lam * mu
        var_pred = lam * lam * var + q
        gain = var_pred / (var_pred + max(h, 1e-8) + 1e-8)
        mu = mu_pred + gain * (m - mu_pred)
        var = max((1.0 - gain) * var_pred, 1e-15)
        means.append(mu)
    return -sum(means) / len(means)


def test_sauce_reference_gives_the_published_example():
    # papers/sauce.md: agreement [2/3, 1, 1], entropy [.4, .2, .1], debate -> -0.625135
    assert round(sauce_reference([2 / 3, 1.0, 1.0], [0.4, 0.2, 0.1], "debate"), 6) == -0.625135


@pytest.fixture(scope="module")
def sample_reference():
    """The bundled sample's labels, protocols and SAUCE scores from ``sauce_reference``."""
    rows = pq.read_table(sample_corpus_path()).select(
        ["trajectory_id", "agreement", "token_entropy", "protocol", "correct"]).to_pylist()
    score = np.array([sauce_reference(r["agreement"], r["token_entropy"], r["protocol"])
                      for r in rows])
    return rows, score


@pytest.fixture(autouse=True)
def _eval_command(monkeypatch):
    """Register the subcommand here, whether or not cli.COMMANDS lists it yet."""
    monkeypatch.setitem(cli.COMMANDS, "eval", "fastuq.cli.eval")


@pytest.fixture(scope="module")
def sample():
    """The bundled sample scored with SAUCE, plus a second (noisier) score column."""
    table = fastuq.score(sample_corpus_path(), ["sauce"])
    y = table["correct"].to_numpy().astype(bool)
    sauce = table["sauce"].to_numpy()
    noisy = sauce + np.random.default_rng(0).normal(0, 0.3, sauce.shape)
    return table, y, {"sauce": sauce, "noisy": noisy}


def auarc_loop(y, u):
    """Mean over k of the accuracy of the k most certain rows (Python's sort is stable)."""
    order = sorted(range(len(u)), key=lambda i: u[i])
    total, hits = 0.0, 0
    for k, i in enumerate(order, start=1):
        hits += int(y[i])
        total += hits / k
    return total / len(u)


def run_cli(capsys, *argv):
    rc = cli.main(["eval", *map(str, argv)])
    out, err = capsys.readouterr()
    return rc, out, err


# ------------------------------------------------------------------------------- the table


def test_table_matches_sklearn_and_hand_computation(sample, sample_reference):
    _, y, scores = sample
    df = evaluation_table(y, scores)
    assert df.columns == ["estimator", *METRICS, "accuracy", "n"]
    assert df["estimator"].to_list() == ["sauce", "noisy"]
    assert df["n"].to_list() == [2000, 2000]
    for row in df.iter_rows(named=True):
        u = scores[row["estimator"]]
        assert row["auroc"] == pytest.approx(roc_auc_score(y, -u), abs=1e-12)
        assert row["auarc"] == pytest.approx(auarc_loop(y.tolist(), u.tolist()), abs=1e-12)
        assert row["accuracy"] == pytest.approx(sum(y) / len(y), abs=1e-15)
        p = platt_oof_probabilities(y, u)
        assert row["brier_platt"] == pytest.approx(brier_score_loss(y, p), abs=1e-12)
    # the SAUCE column itself, against the plain-Python filter, and its AUROC from there
    rows, ref = sample_reference
    assert y.tolist() == [r["correct"] for r in rows]
    np.testing.assert_allclose(scores["sauce"], ref, rtol=0, atol=1e-12)
    assert df["auroc"][0] == pytest.approx(roc_auc_score(y, -ref), abs=1e-12)


def test_table_accepts_score_table_frame_and_mapping(sample):
    table, y, scores = sample
    from_arrow = evaluation_table(table["correct"], table)  # trajectory_id/correct dropped
    from_polars = evaluation_table(y, pl.from_arrow(table))
    from_mapping = evaluation_table(y, {"sauce": scores["sauce"]})
    assert from_arrow.equals(from_mapping) and from_polars.equals(from_mapping)
    sub = evaluation_table(y, scores, metrics=("auarc", "auroc"))
    assert sub.columns == ["estimator", "auarc", "auroc", "accuracy", "n"]


def test_table_single_class_is_nan_and_prints_nan():
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UndefinedMetricWarning)
        df = evaluation_table(np.ones(6, bool), {"s": np.arange(6.0)})
    assert math.isnan(df["auroc"][0]) and df["auarc"][0] == pytest.approx(1.0, abs=1e-12)
    assert " nan " in format_table(df)


def test_format_table_text_aligned_percent(sample):
    _, y, scores = sample
    df = evaluation_table(y, scores)
    lines = format_table(df).splitlines()
    assert lines[0].split() == ["estimator", "AUROC", "AUARC", "PRR", "Brier-Platt", "ECE",
                                "accuracy", "n"]
    assert set(lines[1]) == {"-", " "}
    assert len({len(s) for s in lines}) == 1  # right-aligned last column: equal widths
    assert lines[2].split()[:2] == ["sauce", f"{df['auroc'][0] * 100:.2f}"]
    assert lines[2].split()[-1] == "2,000"
    assert format_table(df, percent=False).splitlines()[2].split()[1] == \
        f"{df['auroc'][0]:.4f}"


def test_format_table_markdown_shape(sample):
    _, y, scores = sample
    text = format_table(evaluation_table(y, scores), markdown=True)
    lines = text.splitlines()
    assert len(lines) == 2 + 2
    assert all(s.startswith("| ") or s.startswith("|-") for s in lines)
    assert all(s.endswith("|") and s.count("|") == 9 for s in lines)
    assert lines[1] == "|---|" + "---:|" * 7


# ----------------------------------------------------------------------------- joining


def _labels(ids, correct):
    return pl.DataFrame({"trajectory_id": ids, "correct": correct},
                        schema={"trajectory_id": pl.String, "correct": pl.Boolean})


def test_join_restores_corpus_order_so_ties_keep_file_order():
    labels = _labels(["a", "b", "c", "d"], [True, True, False, False])
    scores = pl.DataFrame({"trajectory_id": ["d", "c", "b", "a"], "s": [0.0] * 4})
    joined = join_labels(labels, scores)
    assert joined["trajectory_id"].to_list() == ["a", "b", "c", "d"]
    # all scores tied: AUARC follows the corpus order, not the scores file's
    got = evaluation_table(joined["correct"], joined.drop("trajectory_id"), metrics=("auarc",))
    assert got["auarc"][0] == pytest.approx(auarc_loop([1, 1, 0, 0], [0.0] * 4))
    assert got["auarc"][0] == pytest.approx((1 + 1 + 2 / 3 + 2 / 4) / 4)
    assert got["auarc"][0] != pytest.approx(auarc_loop([0, 0, 1, 1], [0.0] * 4))


@pytest.mark.parametrize(
    ("ids", "scored", "message"),
    [
        (["a", "b"], ["a", "b", "zz"], "'zz' is scored but not in the corpus"),
        (["a", "b", "c"], ["a", "c"], "'b' of the corpus has no score"),
        (["a", "b"], ["a", "b", "a"], "duplicate trajectory_id 'a' in the scores (rows 0 and 2)"),
        (["a", "b", "b"], ["a", "b"], "duplicate trajectory_id 'b' in the corpus"),
    ],
)
def test_join_errors_name_the_id(ids, scored, message):
    labels = _labels(ids, [True] * len(ids))
    scores = pl.DataFrame({"trajectory_id": scored, "s": np.arange(len(scored), dtype=float)})
    with pytest.raises(ValueError, match=message.replace("(", r"\(").replace(")", r"\)")):
        join_labels(labels, scores)


def test_join_null_label_names_the_id():
    labels = _labels(["a", "b", "c"], [True, None, False])
    scores = pl.DataFrame({"trajectory_id": ["a", "b", "c"], "s": [1.0, 2.0, 3.0]})
    with pytest.raises(ValueError, match="'b' has no label"):
        join_labels(labels, scores)


@pytest.fixture(scope="module")
def sample_scores_file(tmp_path_factory, sample):
    """The sample's scores in a shuffled order, with an extra unrelated column."""
    table, _, scores = sample
    perm = np.random.default_rng(1).permutation(table.num_rows)
    path = tmp_path_factory.mktemp("scores") / "scores.parquet"
    pq.write_table(
        pa.table({
            "trajectory_id": table["trajectory_id"].take(perm),
            "sauce": scores["sauce"][perm],
            "noisy": scores["noisy"][perm],
        }),
        path,
    )
    return path


def test_cli_scores_file_shuffled_equals_direct_scoring(capsys, tmp_path, sample_scores_file):
    rc, _, err = run_cli(capsys, sample_corpus_path(), "--json", tmp_path / "direct.json")
    assert rc == 0, err
    rc, _, err = run_cli(capsys, sample_corpus_path(), "--scores", sample_scores_file,
                         "--method", "sauce", "--json", tmp_path / "joined.json")
    assert rc == 0, err
    direct = json.loads((tmp_path / "direct.json").read_text())
    joined = json.loads((tmp_path / "joined.json").read_text())
    assert joined["methods"] == ["sauce"]
    assert joined["estimators"] == direct["estimators"]  # bit-identical
    # every score column by default, evaluated together (sums in another order: 1e-12)
    rc, out, err = run_cli(capsys, sample_corpus_path(), "--scores", sample_scores_file,
                           "--json", tmp_path / "both.json")
    assert rc == 0, err
    both = json.loads((tmp_path / "both.json").read_text())
    assert both["methods"] == ["sauce", "noisy"] and "noisy" in out
    assert both["estimators"]["sauce"] == pytest.approx(direct["estimators"]["sauce"],
                                                         abs=1e-12)


def test_cli_scores_file_method_selects_columns(capsys, sample_scores_file):
    rc, out, _ = run_cli(capsys, sample_corpus_path(), "--scores", sample_scores_file,
                         "--method", "noisy")
    assert rc == 0
    assert "noisy" in out and "sauce" not in out.split("\n", 3)[-1]
    rc, _, err = run_cli(capsys, sample_corpus_path(), "--scores", sample_scores_file,
                         "--method", "umas")
    assert rc == 2 and "no score column 'umas'" in err


def _corpus(path, ids, correct=None):
    cols = {"trajectory_id": ids}
    if correct is not None:
        cols["correct"] = pa.array(correct, pa.bool_())
    pq.write_table(pa.table(cols), path)
    return path


def _scores(path, ids):
    pq.write_table(pa.table({"trajectory_id": ids, "s": np.arange(len(ids), dtype=float)}),
                   path)
    return path


@pytest.mark.parametrize(
    ("corpus_ids", "correct", "scored", "message"),
    [
        (["a", "b", "c"], [True, False, True], ["a", "b", "c", "x"],
         "'x' is scored but not in the corpus"),
        (["a", "b", "c"], [True, False, True], ["c", "a"], "'b' of the corpus has no score"),
        (["a", "b", "c"], [True, False, True], ["a", "b", "c", "b"],
         "duplicate trajectory_id 'b'"),
        (["a", "b", "c"], None, ["a", "b", "c"], "no labels"),
        (["a", "b", "c"], [None, None, None], ["a", "b", "c"], "no labels"),
        (["a", "b", "c"], [True, None, False], ["a", "b", "c"], "'b' has no label"),
    ],
)
def test_cli_join_errors(capsys, tmp_path, corpus_ids, correct, scored, message):
    corpus = _corpus(tmp_path / "c.parquet", corpus_ids, correct)
    rc, out, err = run_cli(capsys, corpus, "--scores", _scores(tmp_path / "s.parquet", scored))
    assert rc == 2
    assert err.startswith("fastuq eval: error:") and message in err
    assert out == ""


def test_cli_scoring_corpus_without_labels_is_an_error(capsys, tmp_path):
    table = pq.read_table(sample_corpus_path()).drop_columns(["correct"]).slice(0, 50)
    pq.write_table(table, tmp_path / "unlabelled.parquet")
    rc, _, err = run_cli(capsys, tmp_path / "unlabelled.parquet")
    assert rc == 2 and "no labels" in err and "'correct'" in err


def test_cli_scoring_options_rejected_with_scores(capsys, sample_scores_file):
    rc, _, err = run_cli(capsys, sample_corpus_path(), "--scores", sample_scores_file,
                         "--protocol", "debate")
    assert rc == 2 and "--protocol only apply when scoring" in err


# --------------------------------------------------------------------- output formats


def test_cli_json_content(capsys, tmp_path, sample):
    _, y, scores = sample
    out_path = tmp_path / "sub" / "eval.json"
    rc, out, _ = run_cli(capsys, sample_corpus_path(), "--json", out_path)
    assert rc == 0
    doc = json.loads(out_path.read_text())
    assert doc["fastuq_version"] == fastuq.__version__
    assert doc["corpus"] == str(sample_corpus_path().resolve())
    assert doc["methods"] == ["sauce"] and doc["scores"] is None
    assert doc["n"] == 2000 and doc["units"] == "fraction"
    assert doc["accuracy"] == pytest.approx(y.mean(), abs=1e-15)
    sauce = doc["estimators"]["sauce"]
    assert set(sauce) == {*METRICS, "accuracy", "n"}
    assert sauce["auroc"] == pytest.approx(roc_auc_score(y, -scores["sauce"]), abs=1e-12)
    assert sauce["auroc"] != round(sauce["auroc"], 6)  # full precision, not the display
    # the printed table shows the same numbers in percent
    assert f"{sauce['auroc'] * 100:.2f}" in out and f"{sauce['auarc'] * 100:.2f}" in out


def test_cli_markdown(capsys):
    rc, out, _ = run_cli(capsys, sample_corpus_path(), "--markdown")
    assert rc == 0
    lines = out.strip().splitlines()
    assert len(lines) == 3
    assert lines[0] == ("| estimator | AUROC | AUARC | PRR | Brier-Platt | ECE | accuracy "
                        "| n |")
    assert lines[2].startswith("| sauce | ") and lines[2].endswith(" | 2000 |")


# ------------------------------------------------------------------------- expectations


def _write_expected(path, units, n, metrics):
    body = ", ".join(f'"{k}": {v}' for k, v in metrics.items())
    path.write_text(f'{{"units": "{units}", "n": {n}, "estimators": {{"sauce": {{{body}}}}}}}')
    return path


def test_cli_expect_pass(capsys, tmp_path, sample):
    _, y, scores = sample
    u = scores["sauce"]
    auc = roc_auc_score(y, -u)  # independent of the code under test
    arc = auarc_loop(y.tolist(), u.tolist())
    expected = _write_expected(tmp_path / "exp.json", "percent", 2000, {
        "auroc": f"{auc * 100:.2f}", "auarc": f"{arc * 100:.1f}",
        "accuracy": f"{y.mean() * 100:.2f}",
    })
    rc, out, _ = run_cli(capsys, sample_corpus_path(), "--expect", expected)
    assert rc == 0 and out.splitlines()[-1] == "PASS"
    # fraction units, 4 decimals, written by hand
    expected = _write_expected(tmp_path / "f.json", "fraction", 2000,
                               {"auroc": f"{auc:.4f}", "auarc": f"{arc:.3f}"})
    rc, out, _ = run_cli(capsys, sample_corpus_path(), "--expect", expected)
    assert rc == 0 and out.splitlines()[-1] == "PASS"


def test_cli_expect_fail_prints_each_mismatch(capsys, tmp_path, sample):
    _, y, scores = sample
    auc = roc_auc_score(y, -scores["sauce"]) * 100
    wrong = f"{auc + 0.06:.2f}"
    expected = _write_expected(tmp_path / "exp.json", "percent", 1999, {
        "auroc": wrong, "auarc": "99.9",
    })
    rc, out, _ = run_cli(capsys, sample_corpus_path(), "--expect", expected, "--json",
                         tmp_path / "o.json")
    assert rc == 1
    lines = out.splitlines()
    assert "PASS" not in lines
    assert "n: expected 1999, got 2000" in lines
    assert f"sauce auroc: expected {wrong}, got {auc:.2f}" in lines
    assert any(s.startswith("sauce auarc: expected 99.9, got ") for s in lines)
    assert lines[-1].startswith("FAIL: 3 of 3")
    doc = json.loads((tmp_path / "o.json").read_text())
    assert doc["expect"]["passed"] is False
    assert [c["ok"] for c in doc["expect"]["comparisons"]] == [False, False, False]


def test_cli_expect_unevaluated_estimator_and_bad_file(capsys, tmp_path):
    path = tmp_path / "e.json"
    path.write_text('{"units": "percent", "estimators": {"umas": {"auroc": 70.0}}}')
    rc, out, _ = run_cli(capsys, sample_corpus_path(), "--method", "sauce", "--expect", path)
    assert rc == 1 and "umas auroc: expected 70.0, got nothing" in out
    path.write_text('{"estimators": {"sauce": {"auroc": 70.0}}}')
    rc, _, err = run_cli(capsys, sample_corpus_path(), "--expect", path)
    assert rc == 2 and '"units"' in err
    path.write_text('{"units": "percent", "estimators": {"sauce": {"auroc_": 70.0}}}')
    rc, _, err = run_cli(capsys, sample_corpus_path(), "--expect", path)
    assert rc == 2 and "unknown metric 'auroc_'" in err


def test_displayed_precision_and_rounding_rule():
    spec = parse_expectations('{"units": "percent", "estimators": {"s": {"auroc": 68.80, '
                              '"auarc": 68.8, "prr": 69}}}')
    assert spec["estimators"]["s"]["auroc"].as_tuple().exponent == -2  # trailing zero kept
    df = pl.DataFrame({"estimator": ["s"], "auroc": [0.68804], "auarc": [0.68804],
                       "prr": [0.6851], "accuracy": [0.5], "n": [10]})
    check = check_expectations(df, spec)
    assert check.passed, [c.describe() for c in check.mismatches]
    assert [str(c.got) for c in check.comparisons] == ["68.80", "68.8", "69"]
    # half to even on exact binary ties; the float's exact value otherwise (1.005 < 1.005)
    assert round_like(0.125, Decimal("0.12")) == Decimal("0.12")
    assert round_like(0.375, Decimal("0.38")) == Decimal("0.38")
    assert round_like(0.6875, Decimal("68.8"), scale=2) == Decimal("68.8")
    # 0.6865 is 0.68649999999999999911... as a float: 68.6 here, while the float product
    # 0.6865 * 100 == 68.65 exactly and round(68.65, 1) gives 68.7 (the documented difference)
    assert round_like(0.6865, Decimal("68.6"), scale=2) == Decimal("68.6")
    assert round(0.6865 * 100, 1) == 68.7
    assert round_like(1.005, Decimal("1.00")) == Decimal("1.00")
    assert round_like(float("nan"), Decimal("1.0")) is None


# -------------------------------------------------------------------------------- plots


def _png_shape(path):
    from matplotlib.image import imread

    assert path.read_bytes()[:8] == PNG_SIGNATURE
    return imread(path).shape


def test_cli_plots_are_valid_pngs(capsys, tmp_path, sample_scores_file, monkeypatch):
    import matplotlib

    # the pixel sizes below are figsize x the figure's dpi; a user's matplotlibrc may set
    # another savefig.dpi, so the test states matplotlib's default
    monkeypatch.setitem(matplotlib.rcParams, "savefig.dpi", "figure")
    out_dir = tmp_path / "plots"
    rc, _, err = run_cli(capsys, sample_corpus_path(), "--scores", sample_scores_file,
                         "--plots", out_dir)
    assert rc == 0, err
    assert sorted(p.name for p in out_dir.iterdir()) == [
        "reliability_noisy.png", "reliability_sauce.png", "risk_coverage.png"]
    assert _png_shape(out_dir / "reliability_sauce.png") == (600, 500, 4)
    assert _png_shape(out_dir / "risk_coverage.png") == (450, 600, 4)


def test_plot_data_agree_with_metrics(sample):
    _, y, scores = sample
    p = platt_oof_probabilities(y, scores["sauce"])
    b = reliability_bins(y, p, n_bins=15)
    assert b["count"].sum() == len(y) and len(b["count"]) == 15
    filled = b["count"] > 0
    gap = np.abs(b["accuracy"] - b["mean_probability"])[filled]
    assert np.sum(b["count"][filled] * gap) / len(y) == pytest.approx(ece(y, p), abs=1e-12)
    cov, acc = accuracy_coverage(y, scores["sauce"])
    assert cov[-1] == 1.0 and acc[-1] == pytest.approx(y.mean())
    assert acc.mean() == pytest.approx(auarc(y, scores["sauce"]), abs=1e-12)


def test_plots_without_matplotlib_suggest_the_extra(capsys, tmp_path, monkeypatch):
    monkeypatch.setitem(sys.modules, "matplotlib.figure", None)
    rc, _, err = run_cli(capsys, sample_corpus_path(), "--plots", tmp_path / "p")
    assert rc == 2 and 'pip install "fastuq[plot]"' in err
    assert not (tmp_path / "p").exists()


def test_modules_do_not_import_jax():
    code = ("import sys, fastuq.evaluation, fastuq.cli.eval; "
            "assert 'jax' not in sys.modules and 'matplotlib' not in sys.modules")
    subprocess.run([sys.executable, "-c", code], check=True)


def test_cli_jsonl_corpus_with_csv_scores(capsys, tmp_path):
    rng = np.random.default_rng(3)
    n = 40
    correct = rng.random(n) < 0.6
    ids = [f"{k:03d}" for k in range(n)]  # leading zeros must survive the CSV reader
    corpus = tmp_path / "c.jsonl"
    corpus.write_text("".join(
        json.dumps({"record_uid": i, "correct": bool(c), "signals": {"agreement": [1.0]}}) + "\n"
        for i, c in zip(ids, correct, strict=True)
    ))
    u = rng.normal(size=n) - correct
    perm = rng.permutation(n)
    scores = tmp_path / "s.csv"
    scores.write_text("trajectory_id,mine\n" + "".join(f"{ids[k]},{float(u[k])!r}\n" for k in perm))
    rc, out, err = run_cli(capsys, corpus, "--scores", scores, "--units", "fraction")
    assert rc == 0, err
    row = out.splitlines()[-1].split()
    assert row[0] == "mine" and row[1] == f"{roc_auc_score(correct, -u):.4f}"
    assert row[-1] == str(n)


@pytest.mark.parametrize("with_scores_file", [False, True])
def test_eval_by_protocol_matches_sklearn_per_protocol(tmp_path, capsys, with_scores_file,
                                                      sample_reference):
    rows, score = sample_reference
    y = np.array([r["correct"] for r in rows])
    proto = np.array([r["protocol"] for r in rows])
    argv = [str(sample_corpus_path()), "--by", "protocol", "--units", "fraction",
            "--json", str(tmp_path / "e.json")]
    if with_scores_file:
        scores = tmp_path / "s.parquet"
        pq.write_table(pa.table({"trajectory_id": [r["trajectory_id"] for r in rows][::-1],
                                 "sauce": score[::-1]}), scores)
        argv += ["--scores", str(scores)]
    code, out, _ = run_cli(capsys, *argv)
    assert code == 0 and "protocol debate: 1,000 trajectories" in out
    doc = json.loads((tmp_path / "e.json").read_text())
    for name in ("debate", "dylan"):
        keep = proto == name
        got = doc["by_protocol"][name]["sauce"]
        assert got["n"] == keep.sum()
        assert got["auroc"] == pytest.approx(roc_auc_score(y[keep], -score[keep]), abs=1e-9)
    assert doc["estimators"]["sauce"]["auroc"] == pytest.approx(roc_auc_score(y, -score),
                                                                abs=1e-9)
