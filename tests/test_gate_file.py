"""Calibrate once, apply anywhere: ``fastuq.gate.Gate`` and ``fastuq gate calibrate`` /
``fastuq gate apply``.

Expected values come from ``calibrate_threshold`` run by hand on each group's items (the
per-group guarantee is that function's, applied to the group alone), from thresholds compared
by hand (``score <= threshold``), and from ``fastuq.score`` run on the new data with the
parameters the gate file names.
"""

from __future__ import annotations

import json
import math

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

import fastuq
from fastuq.cli import main
from fastuq.gate import Gate, calibrate_threshold


def _data(seed: int, n: int):
    rng = np.random.default_rng(seed)
    groups = rng.choice(["debate", "dylan"], n)
    u = rng.random(n) + (groups == "dylan") * 2.0  # two scales, as SAUCE's presets give
    p_fail = 0.02 + 0.5 * (u - (groups == "dylan") * 2.0) ** 2
    return u, rng.random(n) >= p_fail, groups


def test_gate_calibrates_and_applies_like_calibrate_threshold():
    u, correct, _ = _data(0, 3000)
    gate = Gate(0.15, 0.05, score="x").calibrate(u, correct)
    want = calibrate_threshold(u, correct, 0.15, 0.05)
    assert gate.calibrations_[None].threshold == want.threshold and want.passes_any
    new = np.random.default_rng(1).random(500)
    np.testing.assert_array_equal(gate.apply(new), new <= want.threshold)
    assert gate.apply([math.nan]).tolist() == [False]  # a missing score never passes


def test_gate_per_group_has_one_threshold_and_guarantee_per_group():
    u, correct, groups = _data(2, 4000)
    gate = Gate(0.15, 0.05, higher_passes=False, procedure="bonferroni", levels=20)
    gate.calibrate(u, correct, groups=groups, by="protocol")
    assert gate.by_ == "protocol" and list(gate.calibrations_) == ["debate", "dylan"]
    for name in ("debate", "dylan"):
        keep = groups == name
        want = calibrate_threshold(u[keep], correct[keep], 0.15, 0.05,
                                   procedure="bonferroni", levels=20)
        got = gate.calibrations_[name]
        assert (got.threshold, got.n_passed, got.failures) == (
            want.threshold, want.n_passed, want.failures)
        assert want.passes_any
    # pooled, the two scales give one threshold that passes (almost) no dylan item
    pooled = calibrate_threshold(u, correct, 0.15, 0.05, procedure="bonferroni", levels=20)
    assert (u[groups == "dylan"] <= pooled.threshold).mean() < 0.05
    rng = np.random.default_rng(3)
    new_groups = rng.choice(["debate", "dylan"], 300)
    new = rng.random(300) + (new_groups == "dylan") * 2.0
    by_hand = np.where(new_groups == "debate",
                       new <= gate.calibrations_["debate"].threshold,
                       new <= gate.calibrations_["dylan"].threshold)
    np.testing.assert_array_equal(gate.apply(new, groups=new_groups), by_hand)
    assert 0.2 < by_hand[new_groups == "dylan"].mean()
    with pytest.raises(ValueError, match="trajectory 't1': protocol 'chateval' has no"):
        gate.apply([0.1, 0.2], groups=["debate", "chateval"], ids=["t0", "t1"])
    with pytest.raises(ValueError, match="give groups"):
        gate.apply([0.1])


def test_gate_refuses_what_it_cannot_do():
    with pytest.raises(ValueError, match="not calibrated"):
        Gate().apply([0.1])
    with pytest.raises(ValueError, match="procedure must be one of"):
        Gate(procedure="holm")
    with pytest.raises(ValueError, match="alpha"):
        Gate(alpha=1.5)
    with pytest.raises(ValueError, match="protocol 'x': score 0 is nan"):
        Gate().calibrate([0.1, math.nan], [1, 1], groups=["y", "x"], by="protocol")
    with pytest.raises(ValueError, match="groups must be 1-D"):
        Gate().calibrate([0.1, 0.2], [1, 1], groups=["a"])
    with pytest.raises(ValueError, match="item 1 has no group"):
        Gate().calibrate([0.1, 0.2], [1, 1], groups=["a", None])
    with pytest.raises(ValueError, match="one length"):
        Gate().calibrate([0.1, 0.2], [1])
    with pytest.raises(TypeError):
        Gate(alhpa=0.1)  # unknown parameters raise


def test_gate_file_round_trip_keeps_every_threshold_bit_for_bit(tmp_path):
    u, correct, groups = _data(4, 2000)
    u = u * (1 + 1e-9 * np.pi)  # thresholds with all 17 digits
    gate = Gate(0.2, 0.1, score="sauce", estimator="sauce", params={"lam": 0.9},
                observation_noise=0.1).calibrate(u, correct, groups=groups, by="protocol")
    path = tmp_path / "gate.json"
    gate.save(path)
    data = json.loads(path.read_text())
    assert data["format"] == "fastuq-gate" and data["fastuq_version"] == fastuq.__version__
    assert data["estimator"] == {"name": "sauce", "params": {"lam": 0.9},
                                 "observation_noise": 0.1}
    assert data["direction"] == "pass iff score <= threshold" and data["by"] == "protocol"
    back = Gate.load(path)
    for name, cal in gate.calibrations_.items():
        got = back.calibrations_[name]
        assert got.threshold == cal.threshold  # exact
        assert got.table == cal.table and got.reason == cal.reason
        assert (got.n_passed, got.failures, got.upper_bound) == (
            cal.n_passed, cal.failures, cal.upper_bound)
    new = u[::-1].copy()
    np.testing.assert_array_equal(back.apply(new, groups=groups[::-1]),
                                  gate.apply(new, groups=groups[::-1]))
    # a gate that passes nothing: its threshold is null in the file and -inf back
    none = Gate(0.01, 0.05).calibrate(np.arange(50.0), np.zeros(50, bool))
    none.save(tmp_path / "none.json")
    entry = json.loads((tmp_path / "none.json").read_text())["gates"][0]
    assert entry["threshold"] is None and entry["reason"].startswith("no valid threshold")
    assert Gate.load(tmp_path / "none.json").calibrations_[None].threshold == -math.inf


@pytest.mark.parametrize("edit,match", [
    (lambda d: "{not json", r"invalid JSON at line 1"),
    (lambda d: json.dumps([1, 2]), "not a gate file"),
    (lambda d: json.dumps(d | {"format": "other"}), "not a gate file"),
    (lambda d: json.dumps(d | {"format_version": 9}), "newer than this fastuq reads"),
    (lambda d: json.dumps(d | {"alpha": "0.1"}), "field 'alpha' must be"),
    (lambda d: json.dumps({k: v for k, v in d.items() if k != "delta"}),
     "field 'delta' is missing"),
    (lambda d: json.dumps(d | {"alpha": 2.0}), "alpha must be a number in"),
    (lambda d: json.dumps(d | {"procedure": "holm"}), "procedure must be one of"),
    (lambda d: json.dumps(d | {"gates": []}), "field 'gates' is empty"),
    (lambda d: json.dumps(d | {"by": "protocol"}), "does not fit 'by'"),
    (lambda d: json.dumps(d | {"higher_passes": 1}), "field 'higher_passes' must be"),
])
def test_bad_gate_files_are_refused_naming_the_field(tmp_path, edit, match):
    u, correct, _ = _data(5, 500)
    good = tmp_path / "good.json"
    Gate(0.2, 0.1).calibrate(u, correct).save(good)
    bad = tmp_path / "bad.json"
    bad.write_text(edit(json.loads(good.read_text())))
    with pytest.raises(ValueError, match=match):
        Gate.load(bad)


# --- the command line ----------------------------------------------------------------------


@pytest.fixture(scope="module")
def corpora(tmp_path_factory):
    folder = tmp_path_factory.mktemp("gatefile")
    cal = fastuq.synth.corpus(1500, protocol="mixed", seed=0)
    new = fastuq.synth.corpus(400, protocol="mixed", seed=1)
    pq.write_table(cal, folder / "cal.parquet")
    pq.write_table(new, folder / "new.parquet")
    return folder, cal, new


def test_cli_calibrate_then_apply_scores_new_data_with_the_gates_parameters(corpora, capsys):
    folder, cal, new = corpora
    gate_json, out, js = folder / "g.json", folder / "v.parquet", folder / "a.json"
    rc = main(["gate", "calibrate", str(folder / "cal.parquet"), "--score", "sauce",
               "--alpha", "0.2", "--by", "protocol", "--param", "lam=0.9", "-o",
               str(gate_json)])
    assert rc == 0, capsys.readouterr().err
    text = capsys.readouterr().out
    assert "[protocol debate]" in text and "[protocol dylan]" in text
    # by hand: the corpus scored with lam 0.9, calibrated per protocol
    scored = fastuq.score(cal, "sauce", lam=0.9, dtype="float64")
    s, c = scored["sauce"].to_numpy(), scored["correct"].to_numpy()
    protocol = np.asarray(scored["protocol"].to_pylist())
    data = json.loads(gate_json.read_text())
    assert data["estimator"]["name"] == "sauce" and data["estimator"]["params"] == {"lam": 0.9}
    thresholds = {}
    for entry in data["gates"]:
        keep = protocol == entry["group"]
        want = calibrate_threshold(s[keep], c[keep], 0.2, 0.05)
        assert entry["threshold"] == want.threshold and want.passes_any
        thresholds[entry["group"]] = want.threshold
    # apply: new.parquet has no sauce column: scored with lam 0.9, then each protocol's
    # threshold
    rc = main(["gate", "apply", str(gate_json), str(folder / "new.parquet"), "-o", str(out),
               "--json", str(js)])
    assert rc == 0, capsys.readouterr().err
    fresh = fastuq.score(new, "sauce", lam=0.9, dtype="float64")
    fp = np.asarray(fresh["protocol"].to_pylist())
    fs = fresh["sauce"].to_numpy()
    expect = np.where(fp == "debate", fs <= thresholds["debate"], fs <= thresholds["dylan"])
    table = pq.read_table(out)
    assert table.column_names == ["trajectory_id", "protocol", "sauce", "passed"]
    assert table["trajectory_id"].to_pylist() == new["trajectory_id"].to_pylist()
    np.testing.assert_array_equal(table["passed"].to_numpy(), expect)
    summary = json.loads(js.read_text())
    assert summary["n_passed"] == int(expect.sum()) and summary["n"] == 400
    debate = next(g for g in summary["groups"] if g["group"] == "debate")
    fc = fresh["correct"].to_numpy()
    keep = (fp == "debate") & expect
    assert debate["failures"] == int((~fc[keep]).sum())
    # default parameters would have given other scores: the parameters travel with the gate
    assert not np.array_equal(fastuq.score(new, "sauce", dtype="float64")["sauce"].to_numpy(),
                              fs)


def test_cli_legacy_gate_per_protocol_and_its_verdicts(corpora, tmp_path, capsys):
    folder, cal, _ = corpora
    scores = tmp_path / "s.parquet"
    assert main(["score", str(folder / "cal.parquet"), "-o", str(scores)]) == 0
    out, js = tmp_path / "v.parquet", tmp_path / "g.json"
    assert main(["gate", str(folder / "cal.parquet"), "--scores", str(scores), "--score",
                 "sauce", "--alpha", "0.2", "--by", "protocol", "-o", str(out),
                 "--json", str(js)]) == 0
    printed = capsys.readouterr().out
    s = pq.read_table(scores)["sauce"].to_numpy()
    protocol = np.asarray(cal["protocol"].to_pylist())
    c = cal["correct"].to_numpy()
    verdicts = pq.read_table(out)
    for name in ("debate", "dylan"):
        keep = protocol == name
        want = calibrate_threshold(s[keep], c[keep], 0.2, 0.05)
        assert f"pass iff sauce <= {want.threshold:.10g}" in printed
        np.testing.assert_array_equal(verdicts["passed"].to_numpy()[keep],
                                      s[keep] <= want.threshold)
        entry = next(g for g in json.loads(js.read_text())["gates"] if g["group"] == name)
        assert entry["threshold"] == want.threshold and entry["n_passed"] == want.n_passed
    assert verdicts.column_names == ["trajectory_id", "protocol", "sauce", "passed"]


def test_cli_a_failed_write_exits_1(corpora, tmp_path, monkeypatch, capsys):
    import fastuq.io.writers as writers

    folder, _, _ = corpora
    u, correct, _ = _data(8, 300)
    gate = tmp_path / "gate.json"
    Gate(0.3, 0.1, score="sauce").calibrate(u, correct).save(gate)
    new = tmp_path / "new.parquet"
    pq.write_table(pa.table({"trajectory_id": ["a"], "sauce": [0.1]}), new)

    def full_disk(*args, **kwargs):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(writers, "atomic_write_parquet", full_disk)
    out = tmp_path / "v.parquet"
    assert main(["gate", "apply", str(gate), str(new), "-o", str(out)]) == 1
    assert "No space left on device" in capsys.readouterr().err and not out.exists()


def test_cli_gate_file_errors(corpora, tmp_path, capsys):
    folder, _, _ = corpora
    new = str(folder / "new.parquet")
    u, correct, _ = _data(6, 400)
    good = tmp_path / "gate.json"
    Gate(0.2, 0.1, score="sauce", estimator="sauce").calibrate(u, correct).save(good)
    out = str(tmp_path / "v.parquet")
    bad = tmp_path / "bad.json"
    bad.write_text("{oops")
    assert main(["gate", "apply", str(bad), new, "-o", out]) == 2
    assert "not a gate file (invalid JSON at line 1" in capsys.readouterr().err
    # a gate file whose parameters are not the estimator's (BCCS's theta_s under SAUCE)
    other = json.loads(good.read_text())
    other["estimator"]["params"] = {"theta_s": 0.7}
    bad.write_text(json.dumps(other))
    assert main(["gate", "apply", str(bad), new, "-o", out]) == 2
    err = capsys.readouterr().err
    assert "estimator params: estimator 'sauce'" in err and "theta_s" in err
    other["estimator"]["params"] = {"lam": -3.0}  # out of range
    bad.write_text(json.dumps(other))
    assert main(["gate", "apply", str(bad), new, "-o", out]) == 2
    assert "lam" in capsys.readouterr().err
    # outputs never overwrite inputs; options the file fixes are refused; -o is required
    assert main(["gate", "apply", str(good), new, "-o", new]) == 2
    assert "cannot write" in capsys.readouterr().err
    assert main(["gate", "apply", str(good), new, "-o", str(tmp_path / "x.json")]) == 2
    capsys.readouterr()
    assert main(["gate", "apply", str(good), new, "-o", out, "--alpha", "0.3"]) == 2
    assert "--alpha do(es) not apply to 'gate apply'" in capsys.readouterr().err
    assert main(["gate", "apply", str(good), new]) == 2
    assert "-o VERDICTS.parquet is required" in capsys.readouterr().err
    assert main(["gate", "apply", str(good)]) == 2
    assert "expected GATE.json NEW" in capsys.readouterr().err
    cal = str(folder / "cal.parquet")
    assert main(["gate", "calibrate", cal, "--score", "sauce"]) == 2
    assert "-o GATE.json is required" in capsys.readouterr().err
    assert main(["gate", "calibrate", cal, "--score", "sauce", "-o", cal]) == 2
    assert "cannot write" in capsys.readouterr().err
    assert main(["gate", "calibrate", cal, "--score", "sauce", "--param", "theta_s=0.7",
                 "-o", str(tmp_path / "g.json")]) == 2
    assert "theta_s" in capsys.readouterr().err
    assert main(["gate", cal, "extra.parquet", "--score", "sauce"]) == 2
    assert "unexpected argument" in capsys.readouterr().err
    assert not (tmp_path / "v.parquet").exists() and not (tmp_path / "g.json").exists()


def test_cli_apply_names_the_trajectory_of_an_unknown_protocol(corpora, tmp_path, capsys):
    folder, _, _ = corpora
    u, correct, groups = _data(7, 600)
    gate = tmp_path / "gate.json"
    Gate(0.2, 0.1, score="sauce").calibrate(u, correct, groups=groups, by="protocol").save(gate)
    new = tmp_path / "new.parquet"
    pq.write_table(pa.table({"trajectory_id": ["a", "b", "c"],
                             "protocol": ["debate", "chateval", "dylan"],
                             "sauce": [0.1, 0.2, 2.1]}), new)
    assert main(["gate", "apply", str(gate), str(new), "-o", str(tmp_path / "v.parquet")]) == 2
    assert "trajectory 'b': protocol 'chateval' has no calibrated threshold" in (
        capsys.readouterr().err)
    # a table holding the column is applied as it is (no estimator named, none needed)
    pq.write_table(pa.table({"trajectory_id": ["a", "c"], "protocol": ["debate", "dylan"],
                             "sauce": [0.1, 2.1]}), new)
    out = tmp_path / "v.parquet"
    assert main(["gate", "apply", str(gate), str(new), "-o", str(out)]) == 0
    g = Gate.load(gate)
    assert pq.read_table(out)["passed"].to_pylist() == [
        0.1 <= g.calibrations_["debate"].threshold, 2.1 <= g.calibrations_["dylan"].threshold]
