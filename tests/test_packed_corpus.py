"""``fastuq pack``: a packed corpus scores, evaluates and selects bit-identically to its
Parquet source (float64 and float32, several chunk sizes), and a pack that does not match
its files, its source or this schema version is refused with the reason (exit 2)."""

from __future__ import annotations

import json

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

import fastuq
from fastuq.cli import main, sample_corpus_path
from fastuq.engine.packed import PackedBatch, check_pack, pack_corpus
from fastuq.engine.pipeline import iter_scores
from fastuq.errors import PackError
from fastuq.synth import corpus_with_beliefs


def _topk_corpus(path, *, drop_entropy: bool) -> int:
    """Mixed teams (2, 4, 6 agents), beliefs and top-k log-probabilities: every estimator
    runs. With ``drop_entropy`` the token entropy is derived from the top-k."""
    table = pa.concat_tables([
        corpus_with_beliefs(300, protocol="debate", seed=1, n_agents=2, topk=2),
        corpus_with_beliefs(200, protocol="mixed", seed=2, topk=2),
        corpus_with_beliefs(150, protocol="debate", seed=3, n_agents=6, n_rounds=4, topk=2),
    ], promote_options="default")
    ids = pa.array([f"t{i}" for i in range(table.num_rows)])
    table = table.set_column(table.column_names.index("trajectory_id"), "trajectory_id", ids)
    if drop_entropy and "token_entropy" in table.column_names:
        table = table.drop_columns(["token_entropy"])
    pq.write_table(table, path)
    return table.num_rows


def _scores(source, dtype, chunk_rows=1 << 18, batches=None):
    out: dict[str, list[np.ndarray]] = {}
    for batch, scores in iter_scores(str(source), methods="all", dtype=dtype,
                                     chunk_rows=chunk_rows, backend="numpy"):
        if batches is not None:
            batches.append(batch)
        for k, v in scores.items():
            out.setdefault(k, []).append(v)
    return {k: np.concatenate(v) for k, v in out.items()}


@pytest.mark.parametrize("dtype", ["float64", "float32"])
@pytest.mark.parametrize("drop_entropy", [False, True])
def test_pack_scores_bit_identical_to_parquet(tmp_path, dtype, drop_entropy):
    src = tmp_path / "c.parquet"
    n = _topk_corpus(src, drop_entropy=drop_entropy)
    for pack_rows in (97, 650, 4096):  # chunks that cut teams of every size, and one chunk
        # the same chunks from Parquet (the NumPy twin of UMAS is not chunk-invariant in
        # the last bit: 7 of 650 rows differ by 4.4e-16 between 97- and 256-row chunks)
        base = _scores(src, dtype, chunk_rows=pack_rows)
        # every estimator but those reading texts (the simulated corpus holds none)
        want = set(fastuq.ESTIMATORS) - {"lexical_similarity"}
        assert set(base) >= want, sorted(want - set(base))
        pack = tmp_path / f"c{pack_rows}.fqpack"
        manifest = pack_corpus(src, pack, chunk_rows=pack_rows)
        assert manifest["rows"] == n and len(manifest["chunks"]) == -(-n // pack_rows)
        assert manifest["derived_only"] == ["topk_logprobs"]
        batches: list = []
        got = _scores(pack, dtype, batches=batches)
        assert all(isinstance(b, PackedBatch) for b in batches)
        assert set(got) == set(base)
        for name in base:
            assert got[name].shape == (n,)
            same = got[name].view(np.uint64) == base[name].view(np.uint64)
            assert same.all(), f"{name}: {int((~same).sum())} of {n} rows differ"


def test_pack_uses_its_stored_inputs(tmp_path):
    """The kernels' inputs come from the pack: the top-k column is not in it, yet the
    entropies derived from it (and the node arrays) are the ones built from the source."""
    src = tmp_path / "c.parquet"
    _topk_corpus(src, drop_entropy=True)
    pack_corpus(src, tmp_path / "p.fqpack", chunk_rows=1 << 18)
    from fastuq.engine.batch import Batch
    from fastuq.io.readers import iter_chunks

    chunk = next(iter_chunks(str(tmp_path / "p.fqpack"), columns=[],
                             optional_columns=["topk_logprobs", "n_agents", "answers"]))
    assert "topk_logprobs" not in chunk.table.column_names
    packed = PackedBatch(chunk.table, chunk.packed)
    ref = Batch(pq.read_table(src))
    h, mask = packed.rounds("token_entropy")
    h_ref, mask_ref = ref.rounds("token_entropy")
    assert np.array_equal(mask, mask_ref) and np.array_equal(h, h_ref, equal_nan=True)
    for got, want in zip(packed.nodes("node_entropy"), ref.nodes("node_entropy"), strict=True):
        assert np.array_equal(got, want, equal_nan=True)
    assert packed.n_slots == ref.n_slots == 8


def _cli(*argv) -> int:
    return main([str(a) for a in argv])


def test_cli_score_eval_select_from_pack_equal_parquet(tmp_path, capsys):
    src = sample_corpus_path()
    pack = tmp_path / "s.fqpack"
    assert _cli("pack", src, "-o", pack, "--chunk-rows", 700) == 0
    said = capsys.readouterr().out
    assert "2,000 trajectories in 3 chunks" in said and "x the source's" in said
    for dtype in ("float64", "float32"):
        a, b = tmp_path / f"a{dtype}.parquet", tmp_path / f"b{dtype}.parquet"
        assert _cli("score", src, "-o", a, "--method", "all", "--dtype", dtype,
                    "--chunk-rows", 512) == 0
        assert _cli("score", pack, "-o", b, "--method", "all", "--dtype", dtype) == 0
        ta, tb = pq.read_table(a), pq.read_table(b)
        assert ta.column_names == tb.column_names and ta.num_rows == 2000
        for name in ta.column_names[1:]:
            x, y = ta[name].to_numpy(), tb[name].to_numpy()
            assert np.array_equal(x.view(np.uint64), y.view(np.uint64)), (dtype, name)
        assert ta["trajectory_id"].equals(tb["trajectory_id"])
    ja, jb = tmp_path / "a.json", tmp_path / "b.json"
    assert _cli("eval", src, "--method", "all", "--json", ja, "--chunk-rows", 300) == 0
    assert _cli("eval", pack, "--method", "all", "--json", jb) == 0
    ea, eb = json.loads(ja.read_text()), json.loads(jb.read_text())
    assert ea["n"] == eb["n"] == 2000 and len(ea["estimators"]) >= 9
    assert ea["estimators"] == eb["estimators"] and ea["accuracy"] == eb["accuracy"]
    sa, sb = tmp_path / "sa.json", tmp_path / "sb.json"
    assert _cli("select", src, "--json", sa) == 0
    assert _cli("select", pack, "--json", sb) == 0
    assert json.loads(sa.read_text()) == json.loads(sb.read_text())


def test_pack_refused_when_files_source_or_version_differ(tmp_path, capsys):
    src = tmp_path / "c.parquet"
    pq.write_table(pq.read_table(sample_corpus_path()), src)
    pack = tmp_path / "c.fqpack"
    assert _cli("pack", src, "-o", pack, "--chunk-rows", 1000) == 0
    assert _cli("pack", "--verify", pack, "--source", src, "--hashes") == 0
    capsys.readouterr()
    # a chunk file that is not the one the manifest describes
    chunk = pack / "chunk-00001.arrow"
    saved = chunk.read_bytes()
    chunk.write_bytes(saved + b"\0")
    assert _cli("score", pack, "-o", tmp_path / "x.parquet") == 2
    err = capsys.readouterr().err
    assert "chunk-00001.arrow has" in err and "the manifest says" in err and "re-pack" in err
    chunk.write_bytes(saved[:-1] + bytes([saved[-1] ^ 1]))  # same size, other bytes
    assert _cli("pack", "--verify", pack, "--hashes") == 2
    assert "SHA-256" in capsys.readouterr().err
    chunk.write_bytes(saved)
    # the source changed since it was packed
    table = pq.read_table(src)
    pq.write_table(table.slice(0, 1999), src)
    assert _cli("pack", "--verify", pack, "--source", src) == 2
    assert "changed since it was packed" in capsys.readouterr().err
    with pytest.raises(PackError, match="changed since it was packed"):
        check_pack(pack, source=src)
    # another schema version
    manifest = json.loads((pack / "manifest.json").read_text())
    manifest["schema_version"] = 99
    (pack / "manifest.json").write_text(json.dumps(manifest))
    assert _cli("eval", pack) == 2
    err = capsys.readouterr().err
    assert "pack schema version 99" in err and "fastuq pack SOURCE -o" in err


def test_pack_refuses_a_bad_corpus_and_writes_nothing(tmp_path):
    table = pq.read_table(sample_corpus_path()).slice(0, 50)
    ids = table["trajectory_id"].to_pylist()
    ids[40] = ids[3]
    table = table.set_column(0, "trajectory_id", pa.array(ids))
    src = tmp_path / "dup.parquet"
    pq.write_table(table, src)
    with pytest.raises(ValueError, match=f"row 40: field trajectory_id: duplicate id {ids[3]!r}"):
        pack_corpus(src, tmp_path / "d.fqpack", chunk_rows=16)
    assert not (tmp_path / "d.fqpack").exists()


@pytest.mark.slow  # four commands twice each on the sample (about 20 s on 2 cores)
def test_cli_sweep_fit_replay_calibrate_from_pack_equal_parquet(tmp_path, capsys):
    src = sample_corpus_path()
    pack = tmp_path / "s.fqpack"
    assert _cli("pack", src, "-o", pack, "--chunk-rows", 700) == 0
    for label, source in (("a", src), ("b", pack)):
        assert _cli("sweep", source, "--lam", "0.5:1:3", "--q", "0.01:1:3",
                    "-o", tmp_path / f"sweep_{label}.parquet") == 0
        assert _cli("fit", source, "--steps", 5, "-o", tmp_path / f"fit_{label}.json") == 0
        assert _cli("replay", source, "--policy", "fixed,uaad",
                    "-o", tmp_path / f"replay_{label}.parquet") == 0
        assert _cli("calibrate", source, "--method", "sauce",
                    "-o", tmp_path / f"cal_{label}.json") == 0
    for name in ("sweep", "replay"):
        a = pq.read_table(tmp_path / f"{name}_a.parquet")
        b = pq.read_table(tmp_path / f"{name}_b.parquet")
        assert a.num_rows > 0 and a.equals(b), name
    for name in ("fit", "cal"):
        a = json.loads((tmp_path / f"{name}_a.json").read_text())
        b = json.loads((tmp_path / f"{name}_b.json").read_text())
        assert a == b, name


def test_pack_in_a_list_is_refused_not_read_as_its_chunk_files(tmp_path):
    src = sample_corpus_path()
    pack = tmp_path / "s.fqpack"
    pack_corpus(src, pack, chunk_rows=1000)
    with pytest.raises(ValueError, match="s.fqpack: a fastuq pack is read only as a whole"):
        fastuq.score([str(src), str(pack)], "sauce")


@pytest.mark.parametrize("options", [("--on-error", "skip", "--method", "all"),
                                     ("--check", "used")])
def test_cli_score_options_from_pack_equal_parquet(tmp_path, options):
    src = sample_corpus_path()
    pack = tmp_path / "s.fqpack"
    pack_corpus(src, pack, chunk_rows=700)
    a, b = tmp_path / "a.parquet", tmp_path / "b.parquet"
    assert _cli("score", src, "-o", a, "--chunk-rows", 700, *options) == 0
    assert _cli("score", pack, "-o", b, *options) == 0
    ta, tb = pq.read_table(a), pq.read_table(b)
    assert ta.num_rows == 2000 and ta.equals(tb)


def test_pack_manifest_hashes_are_those_of_the_files(tmp_path):
    """The chunk files are hashed as they are written: each chunk's size and SHA-256 in the
    manifest are those of its file's bytes, read back here with hashlib; the source's too."""
    import hashlib

    src = tmp_path / "c.parquet"
    _topk_corpus(src, drop_entropy=False)
    manifest = pack_corpus(src, tmp_path / "c.fqpack", chunk_rows=200)
    assert len(manifest["chunks"]) == 4
    for entry in manifest["chunks"]:
        data = (tmp_path / "c.fqpack" / entry["file"]).read_bytes()
        assert entry["bytes"] == len(data)
        assert entry["sha256"] == hashlib.sha256(data).hexdigest()
    st = src.stat()
    assert manifest["sources"] == [{"path": str(src), "resolved": str(src.resolve()),
                                    "bytes": st.st_size, "mtime_ns": st.st_mtime_ns,
                                    "sha256": hashlib.sha256(src.read_bytes()).hexdigest()}]


def test_pack_stores_the_node_arrays_of_the_lists(tmp_path):
    """A stored node array, read back time-major, is the corpus's lists placed slot by slot
    (a plain loop over the Python lists here), NaN and mask false elsewhere; the answer
    classes are -1 off the answered slots."""
    src = tmp_path / "c.parquet"
    _topk_corpus(src, drop_entropy=False)
    pack_corpus(src, tmp_path / "c.fqpack", chunk_rows=256)
    from fastuq.io.packfile import pack_chunks

    for chunk in pack_chunks(tmp_path / "c.fqpack"):
        rows = chunk.table.column("seq_logprob").to_pylist()
        answers = chunk.table.column("answers").to_pylist()
        values = chunk.arrays.array("nodes", "seq_logprob")
        mask = chunk.arrays.array("nodes", "seq_logprob", "node_mask")
        classes = chunk.arrays.array("classes", "answers")
        t_max, n, a = values.shape
        assert a == chunk.arrays.n_slots and n == len(rows)
        expect = np.full((t_max, n, a), np.nan)
        answered = np.zeros((t_max, n, a), bool)
        for k, traj in enumerate(rows):
            for t, rnd in enumerate(traj or []):
                for j, v in enumerate(rnd):
                    if v is not None:
                        expect[t, k, j] = v
                    answered[t, k, j] = bool(answers[k][t][j]) if answers[k] else False
        np.testing.assert_array_equal(values, expect)
        np.testing.assert_array_equal(mask, ~np.isnan(expect))
        assert ((classes >= 0) <= answered).all() and (classes[~answered] == -1).all()


def test_pack_error_in_a_later_chunk_stops_every_stage(tmp_path):
    """A bad record in the fourth chunk (read on the reader thread while earlier chunks are
    built and written) raises with its record and field, writes nothing and leaves no
    thread of the pack running."""
    import threading

    table = pq.read_table(sample_corpus_path()).slice(0, 80)
    agreement = table["agreement"].to_pylist()
    agreement[70] = [1.5] * len(agreement[70])
    table = table.set_column(table.column_names.index("agreement"), "agreement",
                             pa.array(agreement, table.schema.field("agreement").type))
    src = tmp_path / "bad.parquet"
    pq.write_table(table, src)
    before = threading.active_count()
    with pytest.raises(ValueError, match=r"row 70.*agreement"):
        pack_corpus(src, tmp_path / "b.fqpack", chunk_rows=16)
    assert not (tmp_path / "b.fqpack").exists()
    assert not [p for p in tmp_path.iterdir() if p.name != "bad.parquet"]
    assert threading.active_count() == before


def test_pack_round_checks_are_not_run_again_where_they_passed(tmp_path, monkeypatch):
    """The pack records per chunk that its stored agreement and token entropy pass the
    scoring checks; a float64 run from the pack does not check them again (a run from the
    Parquet does, once per chunk and input), a float32 run checks the token entropy (a
    finite float64 may overflow a float32), and a pack without the record (an older one)
    checks both. The scores are the Parquet's either way."""
    import fastuq.engine.inputs as inputs

    src = tmp_path / "c.parquet"
    _topk_corpus(src, drop_entropy=False)
    pack = tmp_path / "c.fqpack"
    manifest = pack_corpus(src, pack, chunk_rows=256)
    assert [c["checked_rounds"] for c in manifest["chunks"]] == \
        [["agreement", "token_entropy"]] * 3
    calls: list[bool] = []
    real = inputs.validate_rounds

    def counting(a, h, mask, ids, *, agreement=True):
        calls.append(agreement)
        return real(a, h, mask, ids, agreement=agreement)

    monkeypatch.setattr(inputs, "validate_rounds", counting)

    def run(source, dtype):
        calls.clear()
        out = [s["sauce"] for _, s in iter_scores(str(source), dtype=dtype, chunk_rows=256,
                                                  backend="numpy")]
        return np.concatenate(out), list(calls)

    ref, checks = run(src, "float64")
    assert checks == [True, False] * 3  # agreement, then token entropy, in every chunk
    got, checks = run(pack, "float64")
    assert checks == []
    np.testing.assert_array_equal(got, ref)
    ref32, _ = run(src, "float32")
    got, checks = run(pack, "float32")
    assert checks == [False] * 3  # the token entropy only
    np.testing.assert_array_equal(got, ref32)
    for c in manifest["chunks"]:
        del c["checked_rounds"]
    (pack / "manifest.json").write_text(json.dumps(manifest))
    got, checks = run(pack, "float64")
    assert checks == [True, False] * 3
    np.testing.assert_array_equal(got, ref)


def test_topk_entropies_are_derived_once_per_chunk(tmp_path, monkeypatch):
    """Packing a top-k corpus without token_entropy builds the token entropy and the node
    entropy of each chunk from one pass over its top-k log-probabilities (it took two), and
    scores from the pack still equal those from the Parquet."""
    import fastuq.signals as signals

    src = tmp_path / "c.parquet"
    _topk_corpus(src, drop_entropy=True)
    calls: list[int] = []
    real = signals.token_entropy_from_topk

    def counting(col, *, ids=None):
        calls.append(len(col))
        return real(col, ids=ids)

    monkeypatch.setattr(signals, "token_entropy_from_topk", counting)
    manifest = pack_corpus(src, tmp_path / "c.fqpack", chunk_rows=256)
    assert calls == [c["rows"] for c in manifest["chunks"]] == [256, 256, 138]
    assert {"__fq__rounds__token_entropy", "__fq__nodes__node_entropy"} <= \
        set(manifest["chunks"][0]["shapes"])
    calls.clear()
    ref = _scores(src, "float64", chunk_rows=256)
    assert calls == [256, 256, 138]
    got = _scores(tmp_path / "c.fqpack", "float64")
    assert got.keys() == ref.keys()
    for k in ref:
        np.testing.assert_array_equal(got[k], ref[k], err_msg=k)
