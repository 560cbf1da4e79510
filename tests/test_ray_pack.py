"""The Ray engine (:mod:`fastuq.ray`) scoring a pack (``fastuq pack``), on a local Ray
instance with 2 CPUs: one work item per chunk file, memory-mapped by the scoring actor.
Its scores and skip records must equal, bit for bit and in order, the Ray run on the
same corpus from Parquet (read in the pack's chunks) and the single-process run on the
pack, each computed independently in this process.

The test extra installs ``fastuq[ray]``, so this module runs in CI (it is never skipped).
"""

from __future__ import annotations

import json

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from _ray_cluster import ray_cluster  # noqa: F401 - the local_ray fixture

import fastuq
import fastuq.ray as fray
from fastuq.cli import main
from fastuq.engine.packed import pack_corpus
from fastuq.synth import corpus_with_beliefs

# A local Ray instance and its worker processes, end to end: run by .ci/run's second step.
pytestmark = pytest.mark.slow

CHUNK = 64
# with the node entropy that only the pack holds (derived from the top-k), also under skip
# in the chunks that lose rows (scored from the stored arrays of the rows left)
METHODS = "sauce,umas,mean_token_entropy,bccs"


@pytest.fixture(scope="module")
def corpus(tmp_path_factory):
    """260 records of mixed teams with beliefs and top-k log-probabilities (which the pack
    holds only as the node entropy derived from them), two of them under a protocol
    without a preset (skipped by SAUCE under ``on_error="skip"``); and its pack in chunks
    of 64 (5 chunk files)."""
    root = tmp_path_factory.mktemp("corpus")
    table = pa.concat_tables([
        corpus_with_beliefs(160, protocol="mixed", seed=4, topk=2),
        corpus_with_beliefs(100, protocol="debate", seed=5, n_agents=5, topk=2),
    ], promote_options="default")
    records = table.to_pylist()
    for i, r in enumerate(records):
        r["trajectory_id"] = f"t{i}"
    records[17]["protocol"] = records[200]["protocol"] = "nopreset"
    table = pa.Table.from_pylist(records, schema=table.schema)
    src = root / "c.parquet"
    pq.write_table(table, src)
    pack = root / "c.fqpack"
    manifest = pack_corpus(src, pack, chunk_rows=CHUNK)
    assert len(manifest["chunks"]) == 5 and manifest["derived_only"] == ["topk_logprobs"]
    return src, pack


def _table(res) -> pa.Table:
    return pa.concat_tables(res.scores.iter_batches(batch_size=None, batch_format="pyarrow"))


def test_ray_scores_a_pack_as_parquet_and_the_local_engine(local_ray, corpus, tmp_path):
    src, pack = corpus
    # the single-process run on the pack (its skip list beside)
    local = fastuq.score_file(pack, tmp_path / "local.parquet", methods=METHODS,
                              on_error="skip", keep_scores=True)
    ref = pq.read_table(tmp_path / "local.parquet")
    ref_skipped = [json.loads(line) for line in
                   (tmp_path / "local.parquet.skipped.jsonl").read_text().splitlines()]
    assert local.n_rows == 258 and len(ref_skipped) == 2
    assert [k["row"] for k in ref_skipped] == [17, 200]
    assert all(k["source"] == str(src) for k in ref_skipped)  # named by the source file

    from_pack = fray.score_dataset(pack, METHODS, on_error="skip")
    from_parquet = fray.score_dataset(src, METHODS, on_error="skip", chunk_rows=CHUNK)
    assert from_pack.methods == tuple(METHODS.split(","))
    assert from_pack.outputs == from_parquet.outputs and "bccs" in from_pack.outputs
    got, want = _table(from_pack), _table(from_parquet)
    assert got.column_names == ["trajectory_id", *from_pack.outputs, "question_id",
                                "protocol", "correct"]
    assert got.equals(want)  # bit for bit, in input order
    assert got.select(ref.column_names).equals(ref)
    assert from_pack.n_rows == 258 and from_pack.n_skipped == 2
    assert from_pack.skipped.take_all() == from_parquet.skipped.take_all() == ref_skipped
    assert "ids" in from_pack.stages


def test_ray_pack_raise_mode_and_the_cli(local_ray, corpus, tmp_path, capsys):
    src, pack = corpus
    with pytest.raises(ValueError) as info:  # raised on a worker, passed on unchanged
        fray.score_dataset(pack, "sauce")
    assert "protocol 'nopreset' has no preset" in str(info.value)
    assert "row 17" in str(info.value)

    # under one preset every record scores: Ray on the pack equals Ray on the Parquet
    # (in the pack's chunks) and the local engine on the pack, the node entropy included
    local = tmp_path / "local.parquet"
    assert main(["score", str(pack), "-o", str(local), "--method", METHODS,
                 "--protocol", "debate"]) == 0
    from_parquet = fray.score_dataset(src, METHODS, protocol="debate", chunk_rows=CHUNK)
    from_pack = fray.score_dataset(pack, METHODS, protocol="debate")
    assert from_pack.methods == tuple(METHODS.split(",")) and from_pack.n_rows == 260
    assert _table(from_pack).equals(_table(from_parquet))
    ref = pq.read_table(local)
    assert ref.column_names == ["trajectory_id", *from_pack.outputs]
    assert _table(from_pack).select(ref.column_names).equals(ref)
    out = tmp_path / "scores"
    assert main(["score", "--engine", "ray", str(pack), "-o", str(out), "--method", METHODS,
                 "--protocol", "debate", "--no-progress"]) == 0
    assert "scored 260 trajectories" in capsys.readouterr().err
    assert pq.read_table(out).equals(pq.read_table(local))
    # refused before any work: an output inside the pack
    assert main(["score", "--engine", "ray", str(pack), "-o", str(pack / "out")]) == 2
    assert "cannot write" in capsys.readouterr().err
