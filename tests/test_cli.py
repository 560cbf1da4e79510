"""The `fastuq score` command on small corpora: Parquet, JSONL(.gz), the bundled sample."""

import gzip
import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

import fastuq
from fastuq.cli import main, sample_corpus_path


def _records(rng, n):
    out = []
    for k in range(n):
        t = int(rng.integers(1, 4))
        out.append(
            {
                "record_uid": f"r{k}",
                "protocol": "debate" if k % 2 else "dylan",
                "signals": {
                    "agreement": list(rng.integers(1, 4, t) / 3.0),
                    "token_entropy": list(rng.exponential(0.3, t)),
                },
                "round_outputs": [{"round_index": i, "agents": []} for i in range(t)],
            }
        )
    return out


def _expected(records):
    return [
        fastuq.sauce_score(r["signals"]["agreement"], r["signals"]["token_entropy"], r["protocol"])
        for r in records
    ]


@pytest.mark.parametrize("suffix", [".jsonl", ".jsonl.gz"])
def test_score_released_jsonl_records(tmp_path, suffix):
    records = _records(np.random.default_rng(0), 57)
    path = tmp_path / f"rollouts{suffix}"
    text = "".join(json.dumps(r) + "\n" for r in records).encode()
    path.write_bytes(gzip.compress(text) if suffix.endswith(".gz") else text)
    out = tmp_path / "scores.parquet"
    assert main(["score", str(path), "-o", str(out), "--chunk-rows", "16"]) == 0
    table = pq.read_table(out)
    assert table.schema.field("sauce").type == pa.float64()
    assert table["trajectory_id"].to_pylist() == [r["record_uid"] for r in records]
    np.testing.assert_allclose(table["sauce"].to_numpy(), _expected(records), atol=1e-12)


def test_score_canonical_parquet_in_chunks_float32(tmp_path):
    records = _records(np.random.default_rng(1), 300)
    table = pa.table(
        {
            "trajectory_id": [r["record_uid"] for r in records],
            "protocol": [r["protocol"] for r in records],
            "agreement": [r["signals"]["agreement"] for r in records],
            "token_entropy": [r["signals"]["token_entropy"] for r in records],
        }
    )
    src = tmp_path / "corpus.parquet"
    pq.write_table(table, src, row_group_size=50)
    out = tmp_path / "scores.parquet"
    assert main(["score", str(src), "-o", str(out), "--chunk-rows", "64",
                 "--dtype", "float32"]) == 0
    got = pq.read_table(out)
    assert got.num_rows == 300
    np.testing.assert_allclose(got["sauce"].to_numpy(), _expected(records), atol=1e-5)


def test_protocol_and_parameter_overrides(tmp_path):
    records = _records(np.random.default_rng(2), 20)
    src = tmp_path / "r.jsonl"
    src.write_text("".join(json.dumps(r) + "\n" for r in records))
    out = tmp_path / "s.parquet"
    assert main(["score", str(src), "-o", str(out), "--protocol", "dylan", "--q", "0.05"]) == 0
    expected = [
        fastuq.sauce_score(r["signals"]["agreement"], r["signals"]["token_entropy"], "dylan",
                           q=0.05)
        for r in records
    ]
    np.testing.assert_allclose(pq.read_table(out)["sauce"].to_numpy(), expected, atol=1e-12)


def test_bad_record_names_file_row_trajectory_and_field_and_writes_nothing(tmp_path, capsys):
    records = _records(np.random.default_rng(3), 10)
    records[7]["signals"]["agreement"][0] = 1.5
    src = tmp_path / "bad.jsonl"
    src.write_text("".join(json.dumps(r) + "\n" for r in records))
    out = tmp_path / "s.parquet"
    assert main(["score", str(src), "-o", str(out)]) == 2  # invalid input
    err = capsys.readouterr().err
    assert "trajectory 'r7' (" in err
    assert "bad.jsonl row 7), round 0: agreement = 1.5 is outside [0, 1]" in err
    assert not out.exists()
    assert list(tmp_path.iterdir()) == [src]  # no temporary file left behind


def test_missing_protocol_is_an_error(tmp_path, capsys):
    src = tmp_path / "c.parquet"
    pq.write_table(pa.table({"trajectory_id": ["a"], "agreement": [[0.5]],
                             "token_entropy": [[0.1]]}), src)
    assert main(["score", str(src), "-o", str(tmp_path / "o.parquet")]) == 2
    assert "protocol" in capsys.readouterr().err


def test_input_requires_output(capsys):
    assert main(["score", "x.parquet"]) == 2


def test_sample_summary(capsys):
    assert sample_corpus_path().exists()
    assert main(["score", "--sample"]) == 0
    out = capsys.readouterr().out
    sample = pq.read_table(sample_corpus_path())
    assert f"scored {sample.num_rows:,} trajectories" in out
    # Pooled and per-protocol AUROC, checked against scikit-learn on the scalar API's scores.
    from sklearn.metrics import roc_auc_score

    rows = sample.select(["agreement", "token_entropy", "protocol", "correct"]).to_pylist()
    score = np.array([fastuq.sauce_score(r["agreement"], r["token_entropy"], r["protocol"])
                      for r in rows])
    y = np.array([r["correct"] for r in rows])
    assert f"AUROC(sauce) {roc_auc_score(y, -score):.4f}" in out
    for proto in ("debate", "dylan"):
        keep = np.array([r["protocol"] == proto for r in rows])
        assert (f"{proto}: n {keep.sum():,}  accuracy {y[keep].mean():.4f}  "
                f"AUROC(sauce) {roc_auc_score(y[keep], -score[keep]):.4f}") in out


def test_help_does_not_import_jax():
    code = (
        "import sys\n"
        "from fastuq.cli import main\n"
        "try:\n    main(['--help'])\nexcept SystemExit:\n    pass\n"
        "import fastuq\n"
        "assert 'jax' not in sys.modules, 'jax imported'\n"
    )
    subprocess.run([sys.executable, "-c", code], check=True, capture_output=True)


def test_suite_runs_against_the_installed_package_only(tmp_path):
    # A directory with a bare fastuq/ first on sys.path, as a source tree in the working
    # directory is under `python -m pytest`: the suite must refuse to run (usage error 4,
    # naming the shadowing path) rather than test that tree. Without it, the same run passes.
    shadow = tmp_path / "shadow"
    (shadow / "fastuq").mkdir(parents=True)
    (shadow / "fastuq" / "__init__.py").write_text("")
    test_file = str(Path(__file__).resolve().parent / "test_pack.py")
    cmd = [sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "-q", test_file]
    res = subprocess.run(cmd, capture_output=True, text=True, timeout=300, cwd=tmp_path,
                         env=dict(os.environ, PYTHONPATH=str(shadow)))
    out = res.stdout + res.stderr
    assert res.returncode == 4, out
    assert "fastuq tests: imported fastuq from" in out and str(shadow / "fastuq") in out
    res = subprocess.run(cmd, capture_output=True, text=True, timeout=300, cwd=tmp_path)
    assert res.returncode == 0, res.stdout + res.stderr


@pytest.mark.parametrize("extra, message", [
    (["--method", "sauce,nope"], "--method: "),
    (["--engine", "ray", "--math", "--processes", "2"],
     "--processes is not used with --engine ray"),
    (["--engine", "ray", "--method", "nope"], "--method: "),
])
def test_score_option_problems_exit_2_before_scoring(tmp_path, capsys, extra, message):
    out = tmp_path / "out"
    rc = main(["score", str(sample_corpus_path()), "-o", str(out), *extra])
    assert rc == 2
    assert message in capsys.readouterr().err
    assert not out.exists()
