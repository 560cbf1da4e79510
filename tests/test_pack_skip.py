"""``--on-error skip`` on a pack (``fastuq pack``): a chunk that loses rows to the checks is
scored from the pack's stored inputs, cut to the rows left, and gives the scores and the
skip records of its Parquet source bit for bit -- with the token and node entropies stored
only as derived from ``topk_logprobs``, when the bad rows are the only ones with the widest
team or the most rounds of their chunk, and without ``n_agents``."""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

import fastuq
from fastuq.cli import main, sample_corpus_path
from fastuq.engine.packed import PackedBatch, pack_corpus
from fastuq.engine.pipeline import iter_scores
from fastuq.synth import corpus_with_beliefs

#: Rows per chunk, of the pack and of the Parquet run it is compared with.
CHUNK = 64


def _set(table: pa.Table, name: str, values: list) -> pa.Table:
    field = table.schema.field(name)
    return table.set_column(table.column_names.index(name), field,
                            pa.array(values, field.type))


def _bad_topk_corpus(path, *, n_agents: bool) -> dict[int, str]:
    """A top-k corpus without ``token_entropy`` (both entropies come from the top-k only)
    that passes ``fastuq pack`` but holds records that scoring refuses; returns ``{row:
    what is wrong}``. Row 30, the only six-agent, four-round record of the first chunk, has
    no valid node (every ``seq_logprob`` null): without it the chunk packs to two agent
    slots and three rounds, where the pack stored eight and four. Row 70 names predecessor
    7 in a team of two (found by UMAS's own check, not by the vectorized skip checks). Row
    150 has no valid node either."""
    parts = [
        corpus_with_beliefs(30, protocol="debate", seed=1, n_agents=2, topk=2),
        corpus_with_beliefs(1, protocol="debate", seed=3, n_agents=6, n_rounds=4, topk=2),
        corpus_with_beliefs(89, protocol="debate", seed=4, n_agents=2, topk=2),
        corpus_with_beliefs(80, protocol="mixed", seed=2, topk=2),
    ]
    table = pa.concat_tables(parts, promote_options="default")
    n = table.num_rows
    table = _set(table, "trajectory_id", [f"t{i}" for i in range(n)])
    table = table.drop_columns(["token_entropy"] + ([] if n_agents else ["n_agents"]))
    seq = table["seq_logprob"].to_pylist()
    for i in (30, 150):
        seq[i] = [[None] * len(r) for r in seq[i]]
    table = _set(table, "seq_logprob", seq)
    preds: list = [None] * n
    preds[70] = [[None] * len(r) for r in seq[70]]
    preds[70][1][0] = [7]
    field = pa.field("predecessors", pa.list_(pa.list_(pa.list_(pa.int32()))))
    table = table.append_column(field, pa.array(preds, field.type))
    pq.write_table(table, path)
    return {30: "seq_logprob", 70: "predecessor 7", 150: "seq_logprob"}


def _skip_run(source, dtype: str, chunk_rows: int = 1 << 18, batches=None):
    skipped: list = []
    out: dict[str, list[np.ndarray]] = {}
    for batch, scores in iter_scores(str(source), methods="all", dtype=dtype,
                                     chunk_rows=chunk_rows, backend="numpy",
                                     on_error="skip", skipped=skipped):
        if batches is not None:
            batches.append(batch)
        out.setdefault("trajectory_id", []).append(
            np.asarray(batch.ids.to_pylist(), dtype=object))
        for k, v in scores.items():
            out.setdefault(k, []).append(v)
    return {k: np.concatenate(v) for k, v in out.items()}, skipped


@pytest.mark.parametrize("dtype", ["float64", "float32"])
@pytest.mark.parametrize("n_agents", [True, False])
def test_skip_from_a_topk_pack_equals_parquet(tmp_path, n_agents, dtype):
    src = tmp_path / "c.parquet"
    bad = _bad_topk_corpus(src, n_agents=n_agents)
    pack = tmp_path / "c.fqpack"
    manifest = pack_corpus(src, pack, chunk_rows=CHUNK)
    assert manifest["derived_only"] == ["topk_logprobs"] and len(manifest["chunks"]) == 4
    assert manifest["chunks"][0]["n_slots"] == 8  # the bad six-agent record's chunk
    base, base_skipped = _skip_run(src, dtype, chunk_rows=CHUNK)
    assert [s.row for s in base_skipped] == sorted(bad)
    for s in base_skipped:
        assert bad[s.row] in s.reason and f"'t{s.row}'" in s.reason
    assert len(base["trajectory_id"]) == 200 - len(bad)
    # every estimator the corpus supports (it holds no texts)
    want = set(fastuq.ESTIMATORS) - {"lexical_similarity"}
    assert set(base) >= want, sorted(want - set(base))
    batches: list = []
    got, got_skipped = _skip_run(pack, dtype, batches=batches)
    assert all(isinstance(b, PackedBatch) for b in batches)
    assert [b.n for b in batches] == [63, 63, 63, 8]
    assert got_skipped == base_skipped  # source, row, trajectory id and reason
    assert got.keys() == base.keys()
    assert (got["trajectory_id"] == base["trajectory_id"]).all()
    for name in base:
        if name == "trajectory_id":
            continue
        same = got[name].view(np.uint64) == base[name].view(np.uint64)
        assert same.all(), f"{name}: {int((~same).sum())} rows differ"


@pytest.mark.parametrize("n_agents", [True, False])
def test_a_chunk_that_lost_rows_reads_the_stored_inputs_cut_to_its_rows(tmp_path, n_agents):
    """The first chunk without its bad rows: the token and node entropies (stored only as
    derived from the top-k) are the pack's arrays of the rows left, cut to the rounds and
    agent slots those rows need -- the arrays a batch of the same rows of the source
    builds from the top-k, bit for bit. Without ``n_agents`` the slots come from the
    widest top-k round of the rows left (the pack stores each record's)."""
    from fastuq.engine.batch import Batch
    from fastuq.engine.pipeline import make_batch
    from fastuq.io.readers import iter_chunks

    src = tmp_path / "c.parquet"
    _bad_topk_corpus(src, n_agents=n_agents)
    pack_corpus(src, tmp_path / "c.fqpack", chunk_rows=CHUNK)
    chunk = next(iter_chunks(str(tmp_path / "c.fqpack")))
    keep = np.ones(CHUNK, bool)
    keep[30] = False
    table = chunk.table.filter(pa.array(keep))
    rows = np.flatnonzero(keep) + chunk.source_row0
    batch = make_batch(table, chunk, rows, dtype="float64", observation_noise=None,
                       math=False, processes=None)
    assert isinstance(batch, PackedBatch)
    ref = Batch(pq.read_table(src).slice(0, CHUNK).filter(pa.array(keep)))
    assert batch.n_slots == ref.n_slots == 2
    h, mask = batch.rounds("token_entropy")
    h_ref, mask_ref = ref.rounds("token_entropy")
    assert h.shape == (3, 63) and np.array_equal(mask, mask_ref)
    assert np.array_equal(h.view(np.uint64), h_ref.view(np.uint64))
    assert "token_entropy" in batch._from_pack
    for got, want in zip(batch.nodes("node_entropy"), ref.nodes("node_entropy"), strict=True):
        assert got.shape == want.shape and np.array_equal(got, want, equal_nan=True)


def test_a_cut_chunk_counts_votes_among_its_own_rows(tmp_path):
    """Votes are classed per chunk (numbers within the relative tolerance chain into one
    class), so the stored agreement derived from the answers is not that of a chunk that
    lost rows: "1" and "1.0000016" vote together only beside "1.0000008" (1e-6 apart from
    each). A record of three agents holding "1.0000008" is dropped (no valid node); the
    first round of an earlier one, with "1" and "1.0000016", then has agreement 1/3 from
    the source, and the pack agrees."""
    table = pq.read_table(sample_corpus_path()).slice(0, CHUNK).drop_columns(["agreement"])
    answers = table["answers"].to_pylist()
    teams = table["n_agents"].to_pylist()
    good, bad = [i for i, a in enumerate(answers) if teams[i] == 3 and len(a[0]) == 3][:2]
    answers[good][0] = ["1", "1.0000016", "7"]
    answers[bad][0] = ["1.0000008", "5", "9"]
    table = _set(table, "answers", answers)
    seq = table["seq_logprob"].to_pylist()
    seq[bad] = [[None] * len(r) for r in seq[bad]]
    table = _set(table, "seq_logprob", seq)
    src = tmp_path / "c.parquet"
    pq.write_table(table, src)
    pack = tmp_path / "c.fqpack"
    pack_corpus(src, pack, chunk_rows=CHUNK)
    methods = "mean_agreement,answer_entropy,num_answer_sets,sauce,msp_final"
    runs = []
    for source in (src, pack):
        skipped: list = []
        (batch, scores), = iter_scores(str(source), methods=methods, backend="numpy",
                                       dtype="float64", on_error="skip", skipped=skipped,
                                       chunk_rows=CHUNK)
        assert [s.row for s in skipped] == [bad] and batch.n == CHUNK - 1
        runs.append((batch.rounds("agreement")[0], scores))
    (a_src, s_src), (a_pack, s_pack) = runs
    assert a_src[0, good] == 1 / 3
    assert np.array_equal(a_pack.view(np.uint64), a_src.view(np.uint64))
    for name in s_src:
        assert np.array_equal(s_pack[name].view(np.uint64), s_src[name].view(np.uint64)), name


def _cli(*argv) -> int:
    return main([str(a) for a in argv])


@pytest.mark.parametrize("corpus", ["topk", "sample"])
def test_cli_score_skip_from_pack_equals_parquet(tmp_path, corpus):
    """The command line, as the issue reproduces it: ``fastuq pack``, then ``fastuq score
    PACK --method all --on-error skip`` writes the scores and the skipped records of the
    Parquet run (the top-k corpus above; the bundled sample with bad rows: a round's
    agreement outside [0, 1] -- refused by the pack, so given as a protocol with no SAUCE
    preset -- and a record without any valid node)."""
    src = tmp_path / "c.parquet"
    if corpus == "topk":
        _bad_topk_corpus(src, n_agents=True)
        options = ("--method", "all")
    else:
        table = pq.read_table(sample_corpus_path()).slice(0, 300)
        seq = table["seq_logprob"].to_pylist()
        seq[5] = [[None] * len(r) for r in seq[5]]
        table = _set(table, "seq_logprob", seq)
        proto = table["protocol"].to_pylist()
        proto[200] = "round_robin"
        table = _set(table, "protocol", proto)
        pq.write_table(table, src)
        options = ("--method", "sauce,umas,msp_final,mean_agreement,cocoa")
    pack = tmp_path / "c.fqpack"
    assert _cli("pack", src, "-o", pack, "--chunk-rows", CHUNK) == 0
    a, b = tmp_path / "a.parquet", tmp_path / "b.parquet"
    common = ("--on-error", "skip", "--backend", "numpy", *options)
    assert _cli("score", src, "-o", a, "--chunk-rows", CHUNK, *common) == 0
    assert _cli("score", pack, "-o", b, *common) == 0
    ta, tb = pq.read_table(a), pq.read_table(b)
    assert ta.num_rows in (197, 298) and ta.equals(tb)
    sa = (tmp_path / "a.parquet.skipped.jsonl").read_text()
    sb = (tmp_path / "b.parquet.skipped.jsonl").read_text()
    assert sa.count("\n") in (2, 3) and sa == sb
