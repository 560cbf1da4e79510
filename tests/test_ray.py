"""Cluster scoring on Ray Data (:mod:`fastuq.ray`), on a local Ray instance with 2 CPUs.

A simulated corpus of three files (two Parquet, one JSON Lines, one in a subfolder) holds bad
records and ids repeated within a chunk, across chunks and across files. Every score, skip
record, error message and metric of the Ray path must equal the single-process run's
(``fastuq.score_file`` / ``fastuq.score`` / ``fastuq.metrics``), computed independently in
this process: scores bit for bit, in the same order.

The test extra installs ``fastuq[ray]``, so this module runs in CI (it is never skipped).
"""

from __future__ import annotations

import json

import numpy as np
import polars as pl
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import ray
import ray.data
from _ray_cluster import ray_cluster  # noqa: F401 - the local_ray fixture

import fastuq
import fastuq.ray as fray
import fastuq.ray.driver
import fastuq.ray.repeats
from fastuq.cli import main
from fastuq.metrics import auarc, auroc
from fastuq.synth import corpus

# A local Ray instance and its worker processes, end to end: run by .ci/run's second step.
pytestmark = pytest.mark.slow

CHUNK = 40
METHODS = "sauce,umas,msp_final"
OUTPUTS = ["sauce", "umas", "msp_final"]


def _part(n: int, seed: int, prefix: str) -> pa.Table:
    t = corpus(n, protocol="mixed", seed=seed)
    return t.set_column(0, "trajectory_id", pa.array([f"{prefix}{i}" for i in range(n)]))


def _spoil(t: pa.Table, row: int, column: str, value) -> pa.Table:
    records = t.to_pylist()
    records[row][column] = value
    return pa.Table.from_pylist(records, schema=t.schema)


def _write_corpus(root, *, bad: bool = True, repeats: bool = True):
    """Three files, 260 records; with ``bad`` and ``repeats``: 2 bad values, a null id and
    4 repeated ids (in one chunk, in a later chunk of the same file, in another file)."""
    a, b, c = _part(100, 1, "a"), _part(90, 2, "b"), _part(70, 3, "c")
    if bad:
        a = _spoil(a, 5, "agreement", [1.5, 0.2, 0.3])
        b = _spoil(b, 8, "trajectory_id", None)
        c = _spoil(c, 3, "n_agents", 0)
    if repeats:
        a = _spoil(a, 10, "trajectory_id", "a3")  # same chunk as a3 (rows 0-39)
        a = _spoil(a, 50, "trajectory_id", "a3")  # a later chunk of the same file
        b = _spoil(b, 7, "trajectory_id", "a20")  # another file
        c = _spoil(c, 60, "trajectory_id", "b1")  # read before sub/b.parquet: b1 repeats it
    (root / "sub").mkdir(parents=True)
    pq.write_table(a, root / "a.parquet", row_group_size=30)
    pq.write_table(b, root / "sub" / "b.parquet")
    pl.from_arrow(c).write_ndjson(root / "c.jsonl")
    return root


@pytest.fixture(scope="module")
def data(tmp_path_factory):
    return _write_corpus(tmp_path_factory.mktemp("corpus") / "corpus")


@pytest.fixture(scope="module")
def reference(data, tmp_path_factory):
    """The single-process run: scores file, its skip list, labels and protocols."""
    out = tmp_path_factory.mktemp("ref") / "ref.parquet"
    report = fastuq.score_file(data, out, methods=METHODS, on_error="skip", chunk_rows=CHUNK,
                               keep_scores=True)
    skipped = [json.loads(line) for line in
               (out.parent / "ref.parquet.skipped.jsonl").read_text().splitlines()]
    return pq.read_table(out), skipped, report


@pytest.fixture(scope="module")
def ray_run(local_ray, data):
    """The Ray run of the same corpus, its ids checked in many buckets (the shuffle a
    large corpus gets), in batches of 25 rows that cut the reader's chunks and join files
    (as GPU actors, which must be given a batch size, get them; the CLI test below runs
    the CPU actors' whole blocks)."""
    saved = fastuq.ray.repeats.BUCKET_IDS, fastuq.ray.driver._batch_size
    fastuq.ray.repeats.BUCKET_IDS = 64  # 260 ids: 5 buckets
    fastuq.ray.driver._batch_size = lambda num_gpus, chunk_rows: 25
    try:
        res = fray.score_dataset(data, METHODS, on_error="skip", chunk_rows=CHUNK)
    finally:
        fastuq.ray.repeats.BUCKET_IDS, fastuq.ray.driver._batch_size = saved
    scores = pa.concat_tables(res.scores.iter_batches(batch_size=None, batch_format="pyarrow"))
    return res, scores


def test_scores_and_skipped_records_equal_the_single_process_run(ray_run, reference):
    res, scores = ray_run
    ref, ref_skipped, report = reference
    assert res.methods == tuple(OUTPUTS) and res.outputs == tuple(OUTPUTS)
    assert scores.column_names == ["trajectory_id", *OUTPUTS, "question_id", "protocol",
                                   "correct"]
    assert scores.select(ref.column_names).equals(ref)  # bit for bit, in input order
    assert scores.column("correct").to_numpy().tolist() == report.correct.tolist()
    assert scores.column("protocol").to_pylist() == report.protocol.tolist()
    # every input row: one score row or one skip record
    assert res.n_rows == report.n_rows == 253 and res.n_skipped == 7
    assert res.n_rows + res.n_skipped == 260
    skipped = res.skipped.take_all()
    assert skipped == ref_skipped  # same records, reasons, order
    reasons = {(k["source"].rsplit("/", 1)[1], k["row"]): k["reason"] for k in skipped}
    assert "duplicate id (first at row 3)" in reasons["a.parquet", 10]
    assert reasons["a.parquet", 50].endswith("a.parquet row 3)")
    assert reasons["b.parquet", 7].endswith("a.parquet row 20)")
    assert reasons["b.parquet", 1].endswith("c.jsonl row 60)")  # c.jsonl sorts before sub/
    assert "null id" in reasons["b.parquet", 8]


def test_rank_metrics_equal_the_single_process_metrics(ray_run, reference):
    res, _ = ray_run
    _, _, report = reference
    got = fray.rank_metrics(res.scores)
    assert set(got) == set(OUTPUTS)
    for m in OUTPUTS:
        assert got[m] == {"auroc": auroc(report.correct, report.scores[m]),
                          "auarc": auarc(report.correct, report.scores[m])}
    with pytest.raises(ValueError, match="no score column 'nope'"):
        fray.rank_metrics(res.scores, ["nope"])


def _single_error(path, **kw) -> str:
    with pytest.raises(ValueError) as info:
        fastuq.score_file(path, path.parent / "x.parquet", chunk_rows=CHUNK, **kw)
    return str(info.value)


def test_raise_mode_stops_with_the_single_process_message(local_ray, tmp_path):
    repeated = _write_corpus(tmp_path / "repeated", bad=False)
    expected = _single_error(repeated, methods="sauce")
    assert "duplicate id" in expected
    with pytest.raises(ValueError) as info:  # found by the id pass, before any scoring
        fray.score_dataset(repeated, "sauce", chunk_rows=CHUNK)
    assert str(info.value) == expected

    bad = tmp_path / "bad"
    (bad / "sub").mkdir(parents=True)
    pq.write_table(_part(50, 4, "p"), bad / "p.parquet")
    pq.write_table(_spoil(_part(60, 5, "q"), 45, "agreement", [2.0, 0.5, 0.5]),
                   bad / "sub" / "q.parquet")
    expected = _single_error(bad, methods="sauce")
    assert "q.parquet: row 45" in expected
    with pytest.raises(ValueError) as info:  # raised on a worker, passed on unchanged
        fray.score_dataset(bad, "sauce", chunk_rows=CHUNK)
    assert str(info.value) == expected

    with pytest.raises(TypeError, match="unknown estimator parameter 'lamb'"):
        fray.score_dataset(bad, "sauce", lamb=0.5)
    with pytest.raises(ValueError, match="would be ignored"):
        fray.score_dataset(bad, "sauce", confidence="msp")


def test_cli_writes_parquet_dataset_folders_atomically(local_ray, data, reference, tmp_path,
                                                       capsys):
    ref, ref_skipped, _ = reference
    out = tmp_path / "scores"
    rc = main(["score", "--engine", "ray", str(data), "-o", str(out), "--method", METHODS,
               "--on-error", "skip", "--chunk-rows", str(CHUNK), "--no-progress"])
    err = capsys.readouterr().err
    assert rc == 0, err
    assert "scored 253 trajectories" in err and "skipped 7 bad record(s)" in err
    # read back in file-name order, the rows are in input order: the single-process file
    assert pq.read_table(out).equals(ref)
    assert pq.read_table(tmp_path / "scores.skipped").to_pylist() == ref_skipped
    assert sorted(p.name for p in tmp_path.iterdir()) == ["scores", "scores.skipped"]

    # refused before any work: an output that is, or lies in, the input folder
    for target in (data, data / "sub" / "out"):
        assert main(["score", "--engine", "ray", str(data), "-o", str(target)]) == 2
        assert "cannot write" in capsys.readouterr().err
    assert not (data / "sub" / "out").exists()

    # too many skipped: the skip list replaces the previous one (a folder of Parquet files
    # only), the scores folder is left as it was, exit 1
    before = {p.name: p.stat().st_mtime_ns for p in out.iterdir()}
    old_skip_files = sorted(p.name for p in (tmp_path / "scores.skipped").iterdir())
    assert main(["score", "--engine", "ray", str(data), "-o", str(out), "--method", METHODS,
                 "--on-error", "skip", "--max-skip-fraction", "0.01", "--chunk-rows",
                 str(CHUNK), "--no-progress"]) == 1
    assert "7 of 260 records (2.69%) were skipped" in capsys.readouterr().err
    assert {p.name: p.stat().st_mtime_ns for p in out.iterdir()} == before
    assert pq.read_table(tmp_path / "scores.skipped").to_pylist() == ref_skipped
    assert sorted(p.name for p in (tmp_path / "scores.skipped").iterdir()) != old_skip_files

    # a failed run (a repeated id under --on-error raise) leaves nothing behind
    failed = tmp_path / "failed"
    assert main(["score", "--engine", "ray", str(data), "-o", str(failed), "--chunk-rows",
                 str(CHUNK), "--no-progress"]) == 2  # an input error
    assert "duplicate id" in capsys.readouterr().err
    assert sorted(p.name for p in tmp_path.iterdir()) == ["scores", "scores.skipped"]


def test_a_ray_dataset_from_elsewhere(local_ray):
    """A dataset fastuq did not read: scores equal ``fastuq.score``; with no row order to
    keep a first occurrence by, every occurrence of a repeated id is skipped."""
    table = _part(120, 6, "r")
    table = _spoil(table, 30, "trajectory_id", "r90")
    table = _spoil(table, 7, "agreement", [1.5, 0.1])
    ds = ray.data.from_arrow([table.slice(0, 50), table.slice(50)])
    res = fray.score_dataset(ds, "sauce", on_error="skip", chunk_rows=CHUNK)
    skipped = res.skipped.take_all()
    assert sorted(k["trajectory_id"] for k in skipped) == ["r7", "r90", "r90"]
    assert all(k["source"] == fray.DATASET_SOURCE and k["row"] is None for k in skipped)
    assert sum("2 occurrences" in k["reason"] for k in skipped) == 2
    keep = pa.array(np.isin(np.arange(120), [7, 30, 90], invert=True))
    expected = fastuq.score(table.filter(keep), "sauce", chunk_rows=CHUNK)
    got = pa.concat_tables(res.scores.iter_batches(batch_size=None, batch_format="pyarrow"))
    # Ray gives the blocks of a dataset it did not read in no set order: compare by id
    got = got.sort_by("trajectory_id")
    assert got.equals(expected.select(got.column_names).sort_by("trajectory_id"))
