"""``fastuq.decisions.calibration`` (:class:`Calibrator`), ``fastuq calibrate`` and ``fastuq
score --calibration``.

References are computed apart from the module, with scikit-learn: ``IsotonicRegression(
increasing=False, out_of_bounds="clip")`` for the isotonic map, ``make_pipeline(
StandardScaler(), LogisticRegression(C=1))`` (tight tolerance) for Platt, ``StratifiedKFold(
shuffle=True, random_state=0)`` per protocol for the held-out probabilities,
``brier_score_loss`` and ``log_loss`` for the metrics, and a plain loop over 15 equal-width bins
for the ECE. Scores are compared in float64 (``--dtype float64`` where ``fastuq score`` would
default to float32 on a GPU). Tolerances: 1e-12 for isotonic values (pooled means; the
summation order differs), 1e-6 for Platt probabilities (scikit-learn's solver stops at its
tolerance), 1e-9 for metrics of isotonic probabilities, 1e-5 for metrics of Platt
probabilities.
"""

from __future__ import annotations

import json

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from sklearn.isotonic import IsotonicRegression
from sklearn.linear_model import LogisticRegression
from sklearn.metrics import brier_score_loss, log_loss
from sklearn.model_selection import StratifiedKFold
from sklearn.pipeline import make_pipeline
from sklearn.preprocessing import StandardScaler

from fastuq.cli import main
from fastuq.decisions import Calibrator, isotonic_fit, isotonic_predict
from fastuq.decisions.calibration import major_version


def _sk_isotonic(x, y):
    return IsotonicRegression(increasing=False, out_of_bounds="clip").fit(x, y.astype(float))


def _sk_platt(x, y):
    return make_pipeline(StandardScaler(), LogisticRegression(C=1.0, tol=1e-12,
                                                              max_iter=10_000)).fit(x[:, None], y)


def _ece_loop(y, p, n_bins=15):
    total = 0.0
    for i in range(n_bins):
        lo, hi = i / n_bins, (i + 1) / n_bins
        inside = [k for k in range(len(p)) if lo <= p[k] < hi or (i == n_bins - 1 and p[k] == 1)]
        if inside:
            total += abs(np.mean(y[inside]) - np.mean(p[inside])) * len(inside)
    return total / len(p)


def _data(n, seed=0, slope=1.5, ties=True):
    rng = np.random.default_rng(seed)
    x = rng.normal(size=n)
    if ties:
        x = np.round(x, 1)  # many tied scores
    y = rng.random(n) < 1 / (1 + np.exp(slope * x))  # higher score, less often correct
    return x, y


# ------------------------------------------------------------------------------- isotonic


@pytest.mark.parametrize("n,ties", [(7, False), (300, True), (5_000, True), (5_000, False)])
def test_isotonic_map_is_scikit_learns(n, ties):
    x, y = _data(n, seed=n, ties=ties)
    thr, val = isotonic_fit(x, y)
    ref = _sk_isotonic(x, y)
    np.testing.assert_array_equal(thr, ref.X_thresholds_)
    np.testing.assert_allclose(val, ref.y_thresholds_, rtol=0, atol=1e-12)
    z = np.concatenate([np.linspace(-6, 6, 301), x])
    np.testing.assert_allclose(isotonic_predict(z, thr, val), ref.predict(z), rtol=0, atol=1e-12)


def test_isotonic_slow_pooling_uses_the_stack_and_is_exact(monkeypatch):
    # means that rise in x except one drop at the start: each vectorised pass pools one pair
    # only, so the stack algorithm finishes the fit
    import fastuq.decisions.isotonic as isotonic

    calls = []
    real = isotonic._pav_stack
    monkeypatch.setattr(isotonic, "_pav_stack",
                        lambda *a: calls.append(1) or real(*a))
    m = 150
    x = np.repeat(np.arange(m + 1, dtype=float), 2 * m)
    y = np.zeros(x.shape[0], bool)
    for k in range(1, m + 1):  # group k: 2m - k correct of 2m (falling in k)
        y[k * 2 * m: k * 2 * m + 2 * m - k] = True
    thr, val = isotonic_fit(x, y)
    assert calls
    ref = _sk_isotonic(x, y)
    np.testing.assert_array_equal(thr, ref.X_thresholds_)
    np.testing.assert_allclose(val, ref.y_thresholds_, rtol=0, atol=1e-12)


def test_isotonic_edges_by_hand():
    # one score: one threshold, the mean label; outside the range: the end values
    thr, val = isotonic_fit([2.0, 2.0, 2.0, 2.0], [True, False, True, True])
    assert thr.tolist() == [2.0] and val.tolist() == [0.75]
    assert isotonic_predict([-1.0, 2.0, 9.0], thr, val).tolist() == [0.75] * 3
    # scores 0 1 2 3 with labels 1 0 1 0: pooled (1,2) -> 0.5: thresholds 0 1 2 3 values
    # 1 .5 .5 0 (the ends of the pooled block are kept), interpolated linearly between
    thr, val = isotonic_fit([0.0, 1.0, 2.0, 3.0], [True, False, True, False])
    assert thr.tolist() == [0.0, 1.0, 2.0, 3.0] and val.tolist() == [1.0, 0.5, 0.5, 0.0]
    p = isotonic_predict([-5.0, 0.5, 1.5, 2.5, 7.0, np.nan], thr, val)
    np.testing.assert_allclose(p[:5], [1.0, 0.75, 0.5, 0.25, 0.0], rtol=0, atol=1e-15)
    assert np.isnan(p[5])
    with pytest.raises(ValueError, match="finite"):
        isotonic_fit([0.0, np.nan], [True, False])


# ------------------------------------------------------------------------------- Platt


def test_platt_map_is_standardised_logistic_regression():
    x, y = _data(3_000, seed=4, ties=False)
    x = 40 * x - 7  # the scale of a score does not matter
    cal = Calibrator("platt").fit({"s": x}, y)
    ref = _sk_platt(x, y)
    z = np.concatenate([np.linspace(-300, 300, 201), x])
    got = cal.predict_proba({"s": z})["p_correct_s"]
    np.testing.assert_allclose(got, ref.predict_proba(z[:, None])[:, 1], rtol=0, atol=1e-6)
    m = cal.maps_["s"]["(no protocol)"]
    # the standardised form: slope and intercept at (x - mean) / scale
    assert m["mean"] == pytest.approx(x.mean()) and m["scale"] == pytest.approx(x.std())
    lr = ref[-1]
    assert m["slope"] == pytest.approx(lr.coef_[0, 0], abs=1e-5)
    assert m["intercept"] == pytest.approx(lr.intercept_[0], abs=1e-5)


# ------------------------------------------------------------------------------- held out


@pytest.mark.parametrize("method", ["isotonic", "platt"])
def test_held_out_metrics_are_scikit_learns_per_protocol(method):
    rng = np.random.default_rng(11)
    n = 900
    x, y = _data(n, seed=12)
    protos = rng.choice(["debate", "dylan"], n)
    x2 = x + rng.normal(size=n)
    cal = Calibrator(method, n_folds=4).fit({"a": x, "b": x2}, y, protos)
    assert cal.protocols == ["debate", "dylan"]
    tol = 1e-9 if method == "isotonic" else 1e-5
    pooled = {"a": np.empty(n), "b": np.empty(n)}
    for proto in ("debate", "dylan"):
        rows = np.flatnonzero(protos == proto)
        for name, col in (("a", x), ("b", x2)):
            xs, ys = col[rows], y[rows]
            prob = np.empty(rows.shape[0])
            for train, test in StratifiedKFold(4, shuffle=True, random_state=0).split(xs, ys):
                if method == "isotonic":
                    prob[test] = _sk_isotonic(xs[train], ys[train]).predict(xs[test])
                else:
                    prob[test] = _sk_platt(xs[train], ys[train]).predict_proba(
                        xs[test, None])[:, 1]
            pooled[name][rows] = prob
            got = cal.metrics_[name][proto]
            assert got["n"] == rows.shape[0]
            assert got["brier"] == pytest.approx(brier_score_loss(ys, prob), abs=tol)
            assert got["log_loss"] == pytest.approx(log_loss(ys, prob, labels=[False, True]),
                                                    abs=max(tol, 1e-9) * 10)
            assert got["ece"] == pytest.approx(_ece_loop(ys, prob), abs=tol)
    for name in ("a", "b"):
        got = cal.metrics_[name]["all"]
        assert got["brier"] == pytest.approx(brier_score_loss(y, pooled[name]), abs=tol)
        assert got["ece"] == pytest.approx(_ece_loop(y, pooled[name]), abs=tol)


def test_fit_errors_name_the_record_and_field():
    x, y = _data(50, seed=1)
    x[17] = np.nan
    ids = [f"t{k}" for k in range(50)]
    with pytest.raises(ValueError, match=r"trajectory 't17'.*field sauce"):
        Calibrator().fit({"sauce": x}, y, ids=ids)
    x, y = _data(50, seed=1)
    y[:] = True
    y[:3] = False  # 3 wrong: fewer than 5 folds
    with pytest.raises(ValueError, match=r"protocol 'debate'.*smaller class has 3"):
        Calibrator().fit({"sauce": x}, y, "debate")
    with pytest.raises(ValueError, match="labels must be 0 or 1"):
        Calibrator().fit({"sauce": x[:4]}, [0, 1, 2, 1])
    with pytest.raises(TypeError):
        Calibrator("platt", folds=3)  # an unknown parameter
    with pytest.raises(ValueError, match="one of platt, isotonic"):
        Calibrator("beta")


def test_predict_proba_protocols_clipping_and_nan():
    x, y = _data(400, seed=2)
    protos = np.array(["a", "b"] * 200)
    cal = Calibrator("isotonic").fit({"s": x}, y, protos)
    refs = {p: _sk_isotonic(x[protos == p], y[protos == p]) for p in ("a", "b")}
    z = np.array([-50.0, 50.0, 0.3, np.nan, -0.2, 0.0])
    zp = np.array(["a", "b", "b", "a", "a", "b"])
    got = cal.predict_proba({"s": z, "other": z}, zp)
    assert list(got) == ["p_correct_s"]
    p = got["p_correct_s"]
    assert np.isnan(p[3])
    want = [refs[q].predict([v])[0] for q, v in zip(zp, z, strict=True) if not np.isnan(v)]
    np.testing.assert_allclose(p[~np.isnan(p)], want, rtol=0, atol=1e-12)
    assert ((p[~np.isnan(p)] >= 0) & (p[~np.isnan(p)] <= 1)).all()
    with pytest.raises(ValueError, match=r"trajectory 'u1': protocol 'c' has no calibration "
                                          r"map.*field protocol"):
        cal.predict_proba({"s": z[:2]}, pa.array(["a", "c"]), ids=["u0", "u1"])
    with pytest.raises(ValueError, match="no score column 's'"):
        cal.predict_proba({"t": z}, zp)


# ------------------------------------------------------------------------------- the file


@pytest.mark.parametrize("method", ["isotonic", "platt"])
def test_save_load_round_trip_is_plain_json(tmp_path, method):
    x, y = _data(500, seed=3)
    protos = np.array(["debate"] * 250 + ["dylan"] * 250)
    cal = Calibrator(method).fit({"sauce": x}, y, protos)
    path = cal.save(tmp_path / "calib.json")
    doc = json.loads(path.read_text())
    assert doc["fastuq_version"] and doc["method"] == method and doc["n_folds"] == 5
    assert doc["protocols"] == ["debate", "dylan"] and doc["estimators"] == ["sauce"]
    assert doc["ece_bins"] == 15
    m = doc["maps"]["sauce"]["dylan"]
    keys = ("thresholds", "values") if method == "isotonic" else ("alpha", "beta")
    for key in keys:
        assert all(isinstance(v, float) for v in np.atleast_1d(m[key]).tolist())
    if method == "isotonic":
        assert "np.interp" in doc["map"] or "numpy.interp" in doc["map"]
    back = Calibrator.load(path)
    z = np.linspace(-4, 4, 97)
    zp = np.array(["debate", "dylan"])[np.arange(97) % 2]
    a = cal.predict_proba({"sauce": z}, zp)["p_correct_sauce"]
    b = back.predict_proba({"sauce": z}, zp)["p_correct_sauce"]
    np.testing.assert_array_equal(a, b)  # JSON keeps every float exactly


def test_scoring_record_and_check():
    from fastuq.decisions import scoring_record

    rec = scoring_record(["sauce", "umas"], ["debate", "dylan"],
                         {"q": {"dylan": 0.01}, "confidence": "mean_logprob"})
    assert rec["params"]["sauce"]["dylan"] == {"lam": 0.70, "mu_0": 0.0, "q": 0.01,
                                               "sigma2_0": 0.25}
    assert rec["params"]["sauce"]["debate"]["q"] == 0.10  # the preset: not in the mapping
    assert rec["params"]["umas"]["debate"] == {"confidence": "mean_logprob"}
    rec = scoring_record(["umas"], ["(no protocol)"])
    assert rec["params"]["umas"]["(no protocol)"] == {"confidence": "msp"}  # the default
    with pytest.raises(TypeError, match="unknown estimator parameter 'lamm'"):
        scoring_record(["sauce"], ["debate"], {"lamm": 0.9})
    with pytest.raises(ValueError, match="no protocol"):  # no preset without a protocol
        scoring_record(["sauce"], ["(no protocol)"])
    x, y = _data(200, seed=6)
    cal = Calibrator().fit({"sauce": x}, y, "dylan")
    with pytest.raises(ValueError, match="does not record the parameters"):
        cal.check_scoring(scoring_record(["sauce"], ["dylan"]))
    cal.scoring = scoring_record(["sauce"], ["dylan"])
    cal.check_scoring(scoring_record(["sauce"], ["dylan"]))  # the same: no error
    with pytest.raises(ValueError, match="observation noise"):
        cal.check_scoring(scoring_record(["sauce"], ["dylan"], observation_noise=0.1))


def test_major_version_rule():
    assert major_version("0.1.0") == "0.1" and major_version("0.1.7") == "0.1"
    assert major_version("0.2.0") == "0.2"
    assert major_version("1.4.2") == "1" and major_version("1.0") == "1"


def test_load_refuses_other_versions_and_formats(tmp_path):
    x, y = _data(200, seed=5)
    path = Calibrator().fit({"sauce": x}, y).save(tmp_path / "c.json")
    doc = json.loads(path.read_text())
    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps({**doc, "fastuq_version": "7.0.0"}))
    with pytest.raises(ValueError, match="another major version"):
        Calibrator.load(bad)
    bad.write_text(json.dumps({**doc, "format": "other"}))
    with pytest.raises(ValueError, match="not a fastuq calibration file"):
        Calibrator.load(bad)
    maps = json.loads(json.dumps(doc["maps"]))
    maps["sauce"]["(no protocol)"]["alpha"] = "x"
    bad.write_text(json.dumps({**doc, "maps": maps}))
    with pytest.raises(ValueError, match="bad.json"):
        Calibrator.load(bad)
    bad.write_text("{")
    with pytest.raises(ValueError, match="not JSON"):
        Calibrator.load(bad)


def test_file_header_check_serves_calibration_and_stack_files(tmp_path):
    """One header check (fastuq.decisions.fileheader) for both model files: each refusal
    names the file, the kind, and the command that writes one (messages written out here)."""
    from fastuq import __version__
    from fastuq.decisions.fileheader import check_file_header
    from fastuq.evaluation.stack import Stack, fit_stack

    x, y = _data(200, seed=5)
    files = {
        "calibration": (Calibrator().fit({"sauce": x}, y).save(tmp_path / "c.json"),
                        Calibrator.load, "fastuq-calibration", "fastuq calibrate"),
        "stack": (fit_stack({"a": x, "b": -x}, y, bootstrap=0).save(tmp_path / "s.json"),
                  Stack.load, "fastuq-stack", "fastuq fit --stack"),
    }
    layout = {"calibration": 1, "stack": 2}  # the stack's columns and producers: layout 2
    for kind, (path, load, fmt, command) in files.items():
        doc = json.loads(path.read_text())
        bad = tmp_path / f"bad-{kind}.json"
        cases = [
            ({"format": "other"}, f'{bad}: not a fastuq {kind} file (no "format": "{fmt}"); '
                                  f"write one with {command}"),
            ({"format_version": 9}, f"{bad}: {kind} file layout 9; this fastuq reads layout "
                                    f"{layout[kind]}; run {command} again"),
            ({"fastuq_version": "7.0.0"}, f"{bad}: made by fastuq 7.0.0, another major "
                                          f"version than this fastuq {__version__} (scores "
                                          f"may differ); run {command} again"),
        ]
        for change, message in cases:
            bad.write_text(json.dumps({**doc, **change}))
            with pytest.raises(ValueError) as info:
                load(bad)
            assert str(info.value) == message
        assert check_file_header(doc, "x", kind, fmt, layout[kind], command) == \
            doc["fastuq_version"]
        with pytest.raises(ValueError, match="^x: not a fastuq"):
            check_file_header([doc], "x", kind, fmt, layout[kind], command)


# ------------------------------------------------------------------------------- commands


@pytest.fixture(scope="module")
def corpus(tmp_path_factory):
    from fastuq.synth import corpus_with_beliefs

    folder = tmp_path_factory.mktemp("calib")
    path = folder / "corpus.parquet"
    pq.write_table(corpus_with_beliefs(600, protocol="mixed", questions_per_id=4, seed=0), path)
    return path


def test_calibrate_then_score_adds_scikit_learn_probabilities(corpus, tmp_path, capsys):
    calib = tmp_path / "calib.json"
    assert main(["calibrate", str(corpus), "--method", "sauce,bccs", "--calibrator",
                 "isotonic", "-o", str(calib), "--json"]) == 0
    shown = json.loads(capsys.readouterr().out)
    assert shown["method"] == "isotonic" and shown["estimators"] == ["sauce", "bccs"]
    assert shown["protocols"] == ["debate", "dylan"]
    doc = json.loads(calib.read_text())
    # the parameters as scored: the presets of each protocol
    assert doc["scoring"]["params"]["sauce"]["debate"] == {
        "lam": 0.95, "mu_0": 0.0, "q": 0.10, "sigma2_0": 0.25}
    assert doc["scoring"]["params"]["sauce"]["dylan"]["lam"] == 0.70
    assert doc["scoring"]["params"]["bccs"]["dylan"]["theta_s"] == pytest.approx(2 / 3)
    out = tmp_path / "scored.parquet"
    assert main(["score", str(corpus), "--dtype", "float64", "--method", "sauce,bccs",
                 "--calibration", str(calib), "-o", str(out)]) == 0
    got = pq.read_table(out)
    table = pq.read_table(corpus, columns=["protocol", "correct"])
    protos = np.asarray(table["protocol"].to_pylist())
    y = np.asarray(table["correct"].to_pylist())
    for name in ("sauce", "bccs"):
        s = got[name].to_numpy()
        p = got[f"p_correct_{name}"].to_numpy()
        assert ((p >= 0) & (p <= 1)).all()
        for proto in ("debate", "dylan"):
            keep = protos == proto
            want = _sk_isotonic(s[keep], y[keep]).predict(s[keep])
            np.testing.assert_allclose(p[keep], want, rtol=0, atol=1e-12)


def test_score_refuses_another_calibration(corpus, tmp_path, capsys):
    calib = tmp_path / "calib.json"
    assert main(["calibrate", str(corpus), "-o", str(calib)]) == 0
    out = str(tmp_path / "s.parquet")
    capsys.readouterr()
    # other estimator parameters
    assert main(["score", str(corpus), "--lam", "0.9", "--calibration", str(calib),
                 "-o", out]) == 2
    err = capsys.readouterr().err
    assert "other parameters" in err and "lam 0.95 there, 0.9 here" in err
    # another protocol set: calibrated under one preset, scored per record
    one = tmp_path / "one.json"
    assert main(["calibrate", str(corpus), "--protocol", "debate", "-o", str(one)]) == 0
    capsys.readouterr()
    assert main(["score", str(corpus), "--calibration", str(one), "-o", out]) == 2
    err = capsys.readouterr().err
    assert "protocol 'dylan' has no calibration map" in err and "field protocol" in err
    # another major version
    doc = json.loads(calib.read_text())
    old = tmp_path / "old.json"
    old.write_text(json.dumps({**doc, "fastuq_version": "9.0.0"}))
    assert main(["score", str(corpus), "--calibration", str(old), "-o", out]) == 2
    assert "another major version" in capsys.readouterr().err
    # other estimators' parameters do not matter
    assert main(["score", str(corpus), "--method", "sauce,umas", "--confidence",
                 "mean_logprob", "--calibration", str(calib), "-o", out]) == 0
    assert "p_correct_sauce" in pq.read_table(out).column_names
    (tmp_path / "s.parquet").unlink()
    # an estimator the file calibrates that is not scored
    assert main(["score", str(corpus), "--method", "bccs", "--calibration", str(calib),
                 "-o", out]) == 2
    assert "add sauce to --method" in capsys.readouterr().err
    assert not (tmp_path / "s.parquet").exists()


def test_calibrate_exit_statuses(corpus, tmp_path, capsys, monkeypatch):
    calib = str(tmp_path / "c.json")
    assert main(["calibrate", str(corpus), "--folds", "1", "-o", calib]) == 2
    assert main(["calibrate", str(corpus), "--method", "nope", "-o", calib]) == 2
    assert main(["calibrate", str(corpus), "-o", str(corpus)]) == 2  # output over the input
    unlabelled = tmp_path / "u.parquet"
    pq.write_table(pq.read_table(corpus).drop_columns(["correct"]), unlabelled)
    assert main(["calibrate", str(unlabelled), "-o", calib]) == 2
    assert "no labels" in capsys.readouterr().err
    # a write that fails: a failed run
    import fastuq.decisions.calibration as calibration

    def full_disk(self, path):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(calibration.Calibrator, "save", full_disk)
    assert main(["calibrate", str(corpus), "-o", calib]) == 1
    assert "No space left" in capsys.readouterr().err


def _report_data(path):
    import re

    html = path.read_text()
    block = re.search(r'id="fastuq-report-data">(.*?)</script>', html, re.S).group(1)
    return html, json.loads(block)


def test_report_shows_calibration_before_and_after(corpus, tmp_path, capsys):
    calib = tmp_path / "calib.json"
    assert main(["calibrate", str(corpus), "--calibrator", "isotonic", "-o", str(calib)]) == 0
    page = tmp_path / "r.html"
    assert main(["report", str(corpus), "--method", "sauce", "--calibration", str(calib),
                 "-o", str(page)]) == 0
    html, data = _report_data(page)
    assert 'id="calibration"' in html and 'id="calibration/sauce"' in html
    assert 'id="all/reliability/sauce"' in html  # before, beside after
    rows = {(r["estimator"], r["protocol"]): r for r in data["calibration"]["rows"]}
    assert set(rows) == {("sauce", "debate"), ("sauce", "dylan"), ("sauce", "all")}
    # here: the file's maps on the corpus they were fitted on = scikit-learn's in-sample fit
    out = tmp_path / "scores.parquet"
    assert main(["score", str(corpus), "--dtype", "float64", "-o", str(out)]) == 0
    s = pq.read_table(out)["sauce"].to_numpy()
    table = pq.read_table(corpus, columns=["protocol", "correct"])
    protos = np.asarray(table["protocol"].to_pylist())
    y = np.asarray(table["correct"].to_pylist())
    pooled = np.empty(y.shape[0])
    for proto in ("debate", "dylan"):
        keep = protos == proto
        p = _sk_isotonic(s[keep], y[keep]).predict(s[keep])
        pooled[keep] = p
        assert rows[("sauce", proto)]["brier"] == pytest.approx(brier_score_loss(y[keep], p),
                                                                abs=1e-12)
        assert rows[("sauce", proto)]["ece"] == pytest.approx(_ece_loop(y[keep], p), abs=1e-12)
    assert rows[("sauce", "all")]["brier"] == pytest.approx(brier_score_loss(y, pooled),
                                                            abs=1e-12)
    doc = json.loads(calib.read_text())
    assert rows[("sauce", "dylan")]["held_out_brier"] == doc["metrics"]["sauce"]["dylan"]["brier"]
    # a file made with other parameters is refused, nothing written
    other = tmp_path / "other.html"
    capsys.readouterr()
    assert main(["report", str(corpus), "--method", "sauce", "--lam", "0.9", "--calibration",
                 str(calib), "-o", str(other)]) == 2
    assert "other parameters" in capsys.readouterr().err
    assert not other.exists()


def test_corpus_without_protocols_has_one_map(corpus, tmp_path, capsys):
    bare = tmp_path / "bare.parquet"
    pq.write_table(pq.read_table(corpus).drop_columns(["protocol"]), bare)
    calib = tmp_path / "c.json"
    assert main(["calibrate", str(bare), "--method", "umas", "-o", str(calib)]) == 0
    doc = json.loads(calib.read_text())
    assert doc["protocols"] == ["(no protocol)"]
    assert doc["scoring"]["params"]["umas"]["(no protocol)"] == {"confidence": "msp"}
    out = tmp_path / "s.parquet"
    assert main(["score", str(bare), "--dtype", "float64", "--method", "umas",
                 "--calibration", str(calib), "-o", str(out)]) == 0
    got = pq.read_table(out)
    u = got["umas"].to_numpy()
    y = np.asarray(pq.read_table(bare, columns=["correct"])["correct"].to_pylist())
    want = _sk_platt(u, y).predict_proba(u[:, None])[:, 1]
    np.testing.assert_allclose(got["p_correct_umas"].to_numpy(), want, rtol=0, atol=1e-6)
    # scored with another node confidence: refused
    assert main(["score", str(bare), "--method", "umas", "--confidence", "neg_entropy",
                 "--calibration", str(calib), "-o", str(tmp_path / "t.parquet")]) == 2
    assert "confidence 'msp' there, 'neg_entropy' here" in capsys.readouterr().err
