"""`eval`, `select`, `fit` and `sweep` on bad records, corpora without entropy, fitted
parameters and progress, and sweeps / fits of preloaded data.

References are computed apart from the commands: SAUCE by the per-record
``fastuq.sauce_score`` with explicit parameters (or on a corpus with the bad rows removed),
AUROC by scikit-learn, selection by a plain loop over questions. Tolerances: scores 1e-12
(float64), metrics printed in JSON 1e-12, float32 sweeps 1e-6.
"""

from __future__ import annotations

import json
import warnings

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from sklearn.metrics import roc_auc_score

import fastuq
from fastuq.cli import main, sample_corpus_path

BAD = (5, 17, 40)  # rows made invalid in the corpus below


def _reasons():
    return {5: "agreement", 17: "token_entropy", 40: "token_entropy"}


@pytest.fixture(scope="module")
def corpora(tmp_path_factory):
    """``bad``: 400 sample rows (both protocols, 4 trajectories per question), three of them
    invalid; ``clean``: the same without those rows; ``noent``: ``clean`` without token
    entropy; ``const``: ``clean`` with token entropy replaced by 0.3 in every round."""
    d = tmp_path_factory.mktemp("corpora")
    table = pq.read_table(sample_corpus_path()).slice(0, 400)
    rows = table.to_pylist()
    for k, r in enumerate(rows):
        r["question_id"] = f"q{k // 4}"
    rows[5]["agreement"] = [1.5] * len(rows[5]["agreement"])  # agreement outside [0, 1]
    rows[17]["token_entropy"] = [-0.1] * len(rows[17]["token_entropy"])  # negative entropy
    rows[40]["token_entropy"] = rows[40]["token_entropy"] + [0.2]  # one round too many
    schema = table.schema
    paths = {"bad": d / "bad.parquet", "clean": d / "clean.parquet",
             "noent": d / "noent.parquet", "const": d / "const.parquet"}
    pq.write_table(pa.Table.from_pylist(rows, schema=schema), paths["bad"])
    good = [r for k, r in enumerate(rows) if k not in BAD]
    pq.write_table(pa.Table.from_pylist(good, schema=schema), paths["clean"])
    pq.write_table(pa.Table.from_pylist(good, schema=schema).drop_columns(["token_entropy"]),
                   paths["noent"])
    const = [{**r, "token_entropy": [0.3] * len(r["agreement"])} for r in good]
    pq.write_table(pa.Table.from_pylist(const, schema=schema), paths["const"])
    return {k: str(v) for k, v in paths.items()}, good


def _sauce_ref(good, per_protocol=None, entropy=None):
    per_protocol = per_protocol or {}
    return np.array([
        fastuq.sauce_score(r["agreement"], r["token_entropy"] if entropy is None
                           else [entropy] * len(r["agreement"]), r["protocol"],
                           **per_protocol.get(r["protocol"], {}))
        for r in good
    ])


def _skipped_ids(path):
    return [json.loads(line)["trajectory_id"] for line in open(path)]


# ------------------------------------------------------------------- eval


def test_eval_on_error_skip_evaluates_the_rest(corpora, tmp_path, capsys):
    paths, good = corpora
    out = tmp_path / "eval.json"
    listing = tmp_path / "bad.skipped.jsonl"
    assert main(["eval", paths["bad"], "--json", str(out)]) == 2  # raise: the first bad row
    capsys.readouterr()
    assert main(["eval", paths["bad"], "--on-error", "skip", "--skipped", str(listing),
                 "--json", str(out), "--units", "fraction", "--backend", "numpy"]) == 0
    err = capsys.readouterr().err
    assert f"skipped 3 record(s) listed in {listing}" in err
    assert sorted(_skipped_ids(listing)) == sorted(f"t{k:06d}" for k in BAD)
    doc = json.loads(out.read_text())
    assert doc["n"] == 397 and doc["skipped"] == 3
    y = np.array([r["correct"] for r in good])
    ref = roc_auc_score(y, -_sauce_ref(good))
    assert doc["estimators"]["sauce"]["auroc"] == pytest.approx(ref, abs=1e-12)


def test_eval_scores_of_a_skip_run(corpora, tmp_path, capsys):
    paths, good = corpora
    scores = tmp_path / "s.parquet"
    assert main(["score", paths["bad"], "-o", str(scores), "--on-error", "skip",
                 "--backend", "numpy"]) == 0
    out = tmp_path / "e.json"
    capsys.readouterr()
    # The run's list beside the scores is found; the three are left out and counted.
    assert main(["eval", paths["bad"], "--scores", str(scores), "--json", str(out),
                 "--units", "fraction"]) == 0
    assert "skipped 3 record(s)" in capsys.readouterr().err
    doc = json.loads(out.read_text())
    assert doc["n"] == 397 and doc["skipped"] == 3
    y = np.array([r["correct"] for r in good])
    assert doc["estimators"]["sauce"]["auroc"] == pytest.approx(
        roc_auc_score(y, -_sauce_ref(good)), abs=1e-12)
    # Named explicitly, from elsewhere.
    moved = tmp_path / "list.jsonl"
    (tmp_path / "s.parquet.skipped.jsonl").rename(moved)
    assert main(["eval", paths["bad"], "--scores", str(scores)]) == 2  # no list: unscored
    assert "has no score" in capsys.readouterr().err
    assert main(["eval", paths["bad"], "--scores", str(scores), "--skipped", str(moved)]) == 0
    capsys.readouterr()
    # An unscored id that the list does not name stays an error naming it.
    partial = tmp_path / "partial.jsonl"
    lines = moved.read_text().splitlines(keepends=True)
    partial.write_text("".join(lines[:2]))
    missing = json.loads(lines[2])["trajectory_id"]
    assert main(["eval", paths["bad"], "--scores", str(scores), "--skipped", str(partial)]) == 2
    assert repr(missing) in capsys.readouterr().err


def test_eval_observation_noise_through_the_new_scoring_path(corpora, tmp_path):
    paths, good = corpora
    out = tmp_path / "e.json"
    assert main(["eval", paths["noent"], "--observation-noise", "0.3", "--json", str(out),
                 "--units", "fraction", "--backend", "numpy"]) == 0
    y = np.array([r["correct"] for r in good])
    ref = roc_auc_score(y, -_sauce_ref(good, entropy=0.3))
    assert json.loads(out.read_text())["estimators"]["sauce"]["auroc"] == pytest.approx(
        ref, abs=1e-12)


def _best_of_k_ref(good, scores):
    best = {}
    for k, r in enumerate(good):
        q = r["question_id"]
        if q not in best or scores[k] < scores[best[q]]:
            best[q] = k
    return float(np.mean([good[k]["correct"] for k in best.values()]))


def test_select_on_error_skip(corpora, tmp_path, capsys):
    paths, good = corpora
    out = tmp_path / "sel.json"
    listing = tmp_path / "sel.skipped.jsonl"
    assert main(["select", paths["bad"], "--method", "sauce", "--json", str(out)]) == 2
    capsys.readouterr()
    assert main(["select", paths["bad"], "--method", "sauce", "--on-error", "skip",
                 "--skipped", str(listing), "--json", str(out)]) == 0
    assert f"skipped 3 bad record(s), listed in {listing}" in capsys.readouterr().err
    result = json.loads(out.read_text())
    assert result["n_trajectories"] == 397 and result["skipped"] == 3
    assert result["selected"]["sauce"] == pytest.approx(
        _best_of_k_ref(good, _sauce_ref(good)), abs=1e-12)


def test_skipped_needs_skip(corpora, capsys):
    paths, _ = corpora
    assert main(["select", paths["bad"], "--skipped", "x.jsonl"]) == 2
    assert "--skipped" in capsys.readouterr().err


# ------------------------------------------------------------------- sweep and fit


def _sweep_json(path):
    import polars as pl

    return pl.read_parquet(path)


def test_sweep_on_error_skip_and_observation_noise(corpora, tmp_path, capsys):
    paths, good = corpora
    y = np.array([r["correct"] for r in good])
    out = tmp_path / "sw.parquet"
    assert main(["sweep", paths["bad"], "--lam", "0.6,0.9", "-o", str(out)]) == 2
    capsys.readouterr()
    assert main(["sweep", paths["bad"], "--lam", "0.6,0.9", "--dtype", "float64",
                 "--on-error", "skip", "-o", str(out)]) == 0
    listing = tmp_path / "sw.parquet.skipped.jsonl"
    assert f"skipped 3 bad record(s), listed in {listing}" in capsys.readouterr().err
    got = _sweep_json(out)
    for row in got.iter_rows(named=True):
        s = _sauce_ref(good, {p: {"lam": row["lam"]} for p in ("debate", "dylan")})
        assert row["auroc"] == pytest.approx(roc_auc_score(y, -s), abs=1e-12)
    out2 = tmp_path / "sw2.parquet"
    assert main(["sweep", paths["noent"], "--lam", "0.6,0.9", "--dtype", "float64",
                 "--observation-noise", "0.3", "-o", str(out2)]) == 0
    for row in _sweep_json(out2).iter_rows(named=True):
        s = _sauce_ref(good, {p: {"lam": row["lam"]} for p in ("debate", "dylan")},
                       entropy=0.3)
        assert row["auroc"] == pytest.approx(roc_auc_score(y, -s), abs=1e-12)


def test_fit_on_error_skip_and_observation_noise(corpora, tmp_path, capsys):
    from fastuq.fit import fit_sauce

    paths, _ = corpora
    opts = ["--steps", "5", "--holdout", "0", "--dtype", "float64"]
    assert main(["fit", paths["bad"], *opts]) == 2
    capsys.readouterr()
    out = tmp_path / "p.json"
    assert main(["fit", paths["bad"], *opts, "--on-error", "skip", "-o", str(out)]) == 0
    assert "skipped 3 bad record(s), listed in" in capsys.readouterr().err
    got = json.loads(out.read_text())
    assert got["settings"]["skipped"] == 3
    with warnings.catch_warnings():  # dylan's 5 steps do not improve: starting values kept
        warnings.simplefilter("ignore", RuntimeWarning)
        ref = fit_sauce(paths["clean"], steps=5, holdout=0, dtype="float64")
        ref2 = fit_sauce(paths["const"], steps=5, holdout=0, dtype="float64")
    for proto, values in ref.params.items():
        assert got["params"][proto] == pytest.approx(values, abs=1e-10)
    assert got["params"]["debate"] != pytest.approx(got["init"]["debate"], abs=1e-6)
    out2 = tmp_path / "p2.json"
    assert main(["fit", paths["noent"], *opts, "--observation-noise", "0.3",
                 "-o", str(out2)]) == 0
    got2 = json.loads(out2.read_text())
    for proto, values in ref2.params.items():
        assert got2["params"][proto] == pytest.approx(values, abs=1e-10)


# ------------------------------------------------------------------- --params


@pytest.fixture(scope="module")
def params_file(tmp_path_factory):
    """A file as `fastuq fit -o` writes it, naming debate only (dylan keeps its preset)."""
    from fastuq.fit import fit_sauce

    table = pq.read_table(sample_corpus_path()).slice(0, 200)
    res = fit_sauce(table, steps=3, holdout=0, protocol="debate")
    res.params["debate"] = {"lam": 0.8, "q": 0.02, "sigma2_0": 0.5, "mu_0": 0.1}
    path = tmp_path_factory.mktemp("params") / "params.json"
    res.save(path)
    assert list(json.loads(path.read_text())["params"]) == ["debate"]
    return path


DEBATE = {"lam": 0.8, "q": 0.02, "sigma2_0": 0.5, "mu_0": 0.1}


def test_score_params_per_protocol(corpora, params_file, tmp_path, capsys):
    paths, good = corpora
    out = tmp_path / "s.parquet"
    assert main(["score", paths["clean"], "-o", str(out), "--params", str(params_file),
                 "--backend", "numpy"]) == 0
    text = capsys.readouterr().out
    assert "protocol 'dylan' is not in" in text and "preset is used" in text
    got = pq.read_table(out)["sauce"].to_numpy()
    np.testing.assert_allclose(got, _sauce_ref(good, {"debate": DEBATE}), rtol=0, atol=1e-12)
    assert not np.allclose(got, _sauce_ref(good))  # the file did change the debate scores


def test_eval_and_sweep_params(corpora, params_file, tmp_path, capsys):
    paths, good = corpora
    y = np.array([r["correct"] for r in good])
    ref = _sauce_ref(good, {"debate": DEBATE})
    out = tmp_path / "e.json"
    assert main(["eval", paths["clean"], "--params", str(params_file), "--json", str(out),
                 "--units", "fraction", "--backend", "numpy"]) == 0
    assert "protocol 'dylan' is not in" in capsys.readouterr().out
    assert json.loads(out.read_text())["estimators"]["sauce"]["auroc"] == pytest.approx(
        roc_auc_score(y, -ref), abs=1e-12)
    # sweep: the swept lam replaces the file's; the other three come from it (debate).
    sw = tmp_path / "sw.parquet"
    assert main(["sweep", paths["clean"], "--lam", "0.5,0.8", "--dtype", "float64",
                 "--params", str(params_file), "-o", str(sw)]) == 0
    text = capsys.readouterr().out
    assert "protocol 'dylan' is not in" in text
    for row in _sweep_json(sw).iter_rows(named=True):
        s = _sauce_ref(good, {"debate": {**DEBATE, "lam": row["lam"]},
                              "dylan": {"lam": row["lam"]}})
        assert row["auroc"] == pytest.approx(roc_auc_score(y, -s), abs=1e-12)
    line = next(t for t in text.splitlines() if t.startswith("parameters of"))
    assert f"auroc {roc_auc_score(y, -ref):.4f}" in line


@pytest.mark.parametrize("doc, match", [
    ({"params": {"debate": {"lamda": 0.5}}}, "unknown parameter"),
    ({"params": {"debate": {"lam": 0.5}}, "extra": 1}, "unknown key"),
    ({"params": {"debate": {"lam": 1.5}}}, "out of range"),
    ({"params": {"debate": {"q": "x"}}}, "finite number"),
    ({"estimator": "umas", "params": {"debate": {"lam": 0.5}}}, "only sauce"),
])
def test_params_file_errors(tmp_path, capsys, doc, match):
    path = tmp_path / "p.json"
    path.write_text(json.dumps(doc))
    for cmd in (["score", "--sample", "-o", str(tmp_path / "o.parquet")],
                ["eval"], ["sweep", "--sample", "--lam", "0.5"]):
        assert main([*cmd, "--params", str(path)]) != 0
        assert match in capsys.readouterr().err


def test_params_and_explicit_sauce_flags_exclude(tmp_path, params_file, capsys):
    assert main(["score", "--sample", "--params", str(params_file), "--lam", "0.5"]) == 2
    assert "exclude each other" in capsys.readouterr().err


# ------------------------------------------------------------------- progress


@pytest.mark.parametrize("cmd, unit", [
    (["eval", "--backend", "numpy"], "trajectories"),
    (["select", "{clean}", "--method", "sauce"], "trajectories"),
    (["sweep", "{clean}", "--lam", "0.5,0.9"], "grid points"),
    (["fit", "{clean}", "--steps", "2", "--holdout", "0"], "fits"),
])
def test_long_commands_show_progress(corpora, cmd, unit, capsys):
    paths, _ = corpora
    cmd = [c.format(**paths) for c in cmd]
    assert main([*cmd, "--progress"]) == 0
    err = capsys.readouterr().err
    assert "\r[" in err and unit in err
    assert main([*cmd, "--no-progress"]) == 0
    assert "\r[" not in capsys.readouterr().err


# ------------------------------------------------------------------- SauceData


def test_sweep_and_fit_take_loaded_sauce_data(corpora):
    from fastuq.fit import fit_sauce
    from fastuq.sweeps import load_sauce_data, sweep

    paths, _ = corpora
    data = load_sauce_data(paths["clean"], dtype="float64")
    grid = {"lam": [0.6, 0.9], "q": [0.01, 0.1]}
    a = sweep(data, grid, ("auroc", "prr"), dtype="float64")
    b = sweep(paths["clean"], grid, ("auroc", "prr"), dtype="float64")
    assert a.equals(b) and a.preset == b.preset
    fa = fit_sauce(data, steps=3, holdout=0, dtype="float64")
    fb = fit_sauce(paths["clean"], steps=3, holdout=0, dtype="float64")
    assert fa.params == fb.params
    # dtype and overrides apply to loaded data as to a file.
    c = sweep(load_sauce_data(paths["clean"]), grid, ("auroc",), protocol="debate")
    d = sweep(paths["clean"], grid, ("auroc",), protocol="debate")
    np.testing.assert_allclose(c["auroc"].to_numpy(), d["auroc"].to_numpy(), atol=1e-6)
