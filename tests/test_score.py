"""fastuq.score / score_file: the chunked pipeline, method selection, observation noise."""

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

import fastuq
from fastuq.cli import main


def _corpus(tmp_path, n=120, entropy=True, seed=0):
    rng = np.random.default_rng(seed)
    lengths = rng.integers(1, 4, n)
    cols = {
        "trajectory_id": [f"t{k}" for k in range(n)],
        "protocol": ["dylan" if k % 3 else "debate" for k in range(n)],
        "agreement": [list(rng.integers(1, 5, t) / 4) for t in lengths],
        "correct": list(rng.random(n) < 0.6),
    }
    if entropy:
        cols["token_entropy"] = [list(rng.exponential(0.3, t)) for t in lengths]
    path = tmp_path / "c.parquet"
    pq.write_table(pa.table(cols), path)
    return path, cols


def test_score_in_memory_equals_scalar_api_and_keeps_labels(tmp_path):
    path, cols = _corpus(tmp_path)
    table = fastuq.score(path, chunk_rows=32)
    expected = [
        fastuq.sauce_score(a, h, p)
        for a, h, p in zip(cols["agreement"], cols["token_entropy"], cols["protocol"],
                           strict=True)
    ]
    np.testing.assert_allclose(table["sauce"].to_numpy(), expected, atol=1e-12)
    assert table["trajectory_id"].to_pylist() == cols["trajectory_id"]
    assert table["correct"].to_pylist() == cols["correct"]


def test_observation_noise_runs_sauce_on_agreement_alone(tmp_path):
    path, cols = _corpus(tmp_path, entropy=False)
    with pytest.raises(ValueError, match="observation-noise"):
        fastuq.score(path)
    table = fastuq.score(path, observation_noise=0.2)
    expected = [
        fastuq.sauce_score(a, [0.2] * len(a), p)
        for a, p in zip(cols["agreement"], cols["protocol"], strict=True)
    ]
    np.testing.assert_allclose(table["sauce"].to_numpy(), expected, atol=1e-12)
    with pytest.raises(ValueError, match="observation noise"):
        fastuq.score(path, observation_noise=-1.0)


def test_method_all_picks_estimators_with_inputs(tmp_path):
    path, _ = _corpus(tmp_path)
    table = fastuq.score(path, "all")
    assert "sauce" in table.column_names
    with pytest.raises(ValueError, match="unknown estimator"):
        fastuq.score(path, "nope")


def test_cli_observation_noise_flag(tmp_path):
    path, cols = _corpus(tmp_path, entropy=False)
    out = tmp_path / "s.parquet"
    assert main(["score", str(path), "-o", str(out), "--observation-noise", "0.5"]) == 0
    expected = [
        fastuq.sauce_score(a, [0.5] * len(a), p)
        for a, p in zip(cols["agreement"], cols["protocol"], strict=True)
    ]
    np.testing.assert_allclose(pq.read_table(out)["sauce"].to_numpy(), expected, atol=1e-12)


def test_empty_corpus_writes_empty_output(tmp_path):
    path = tmp_path / "empty.parquet"
    schema = pa.schema([("trajectory_id", pa.string()), ("protocol", pa.string()),
                        ("agreement", pa.list_(pa.float64())),
                        ("token_entropy", pa.list_(pa.float64()))])
    pq.write_table(schema.empty_table(), path)
    out = tmp_path / "s.parquet"
    report = fastuq.score_file(path, out)
    assert report.n_rows == 0 and pq.read_table(out).num_rows == 0
