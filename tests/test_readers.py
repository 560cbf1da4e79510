"""fastuq.io.readers: every source kind, chunking, projection, errors naming file/line/row, and the
mapping of the SAUCE project's released rollout records."""

import gzip
import json

import numpy as np
import polars as pl
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from fastuq import synth
from fastuq.io.readers import Chunk, count_rows, iter_chunks, read_corpus
from fastuq.signals import agreement_from_answers

N = 240


@pytest.fixture(scope="module")
def corpus():
    return synth.corpus(N, protocol="mixed", topk=2, seed=7).combine_chunks()


def _write(kind, table, folder):
    if kind == "parquet":
        path = folder / "c.parquet"
        pq.write_table(table, path, row_group_size=70)
    elif kind in ("arrow", "feather"):
        path = folder / f"c.{kind}"
        with pa.OSFile(str(path), "wb") as f, pa.ipc.new_file(f, table.schema) as w:
            w.write_table(table, max_chunksize=50)
    elif kind == "ipc-stream":
        path = folder / "c.arrows"
        with pa.OSFile(str(path), "wb") as f, pa.ipc.new_stream(f, table.schema) as w:
            w.write_table(table, max_chunksize=50)
    elif kind in ("jsonl", "jsonl.gz", "ndjson"):
        path = folder / f"c.{kind}"
        text = "".join(json.dumps(r) + "\n" for r in table.to_pylist())
        if kind.endswith(".gz"):
            with gzip.open(path, "wt") as f:
                f.write(text)
        else:
            path.write_text(text)
    else:
        raise AssertionError(kind)
    return path


FILE_KINDS = ["parquet", "arrow", "feather", "ipc-stream", "jsonl", "jsonl.gz", "ndjson"]
FRAME_KINDS = ["table", "polars", "lazy", "batch-reader"]


def _source(kind, table, folder):
    if kind in FILE_KINDS:
        return _write(kind, table, folder)
    if kind == "table":
        return table
    if kind == "polars":
        return pl.from_arrow(table)
    if kind == "lazy":
        return pl.from_arrow(table).lazy()
    if kind == "batch-reader":
        return pa.RecordBatchReader.from_batches(table.schema, table.to_batches(60))
    raise AssertionError(kind)


@pytest.mark.parametrize("kind", FILE_KINDS + FRAME_KINDS)
def test_every_source_reads_the_same_rows_in_order_for_several_chunk_sizes(kind, corpus,
                                                                            tmp_path):
    for chunk_rows in (1, 37, 100, N, 1 << 18):
        if chunk_rows == 1 and kind not in ("parquet", "jsonl"):
            continue  # one-row chunks: slow, and the same code path for every kind
        src = _source(kind, corpus, tmp_path)
        chunks = list(iter_chunks(src, chunk_rows=chunk_rows))
        assert all(isinstance(c, Chunk) for c in chunks)
        sizes = [c.table.num_rows for c in chunks]
        assert all(s == chunk_rows for s in sizes[:-1]) and 0 < sizes[-1] <= chunk_rows
        assert [c.row0 for c in chunks] == list(np.cumsum([0] + sizes[:-1]))
        got = pa.concat_tables([c.table for c in chunks])
        assert got.schema.equals(corpus.schema), kind
        assert got.equals(corpus), (kind, chunk_rows)
        assert all(c.table["answers"].num_chunks == 1 for c in chunks)


@pytest.mark.parametrize("kind", FILE_KINDS + FRAME_KINDS)
def test_column_projection_returns_trajectory_id_and_the_columns_asked(kind, corpus, tmp_path):
    src = _source(kind, corpus, tmp_path)
    got = pa.concat_tables(read_corpus(src, columns=["token_entropy", "answers"],
                                       chunk_rows=64))
    assert got.column_names == ["trajectory_id", "token_entropy", "answers"]
    assert got.equals(corpus.select(got.column_names))


def test_optional_columns_are_read_where_present(corpus, tmp_path):
    path = _write("jsonl", corpus.drop_columns(["correct"]), tmp_path)
    got = pa.concat_tables(read_corpus(path, columns=["agreement"],
                                       optional_columns=["protocol", "correct", "agreement"]))
    assert got.column_names == ["trajectory_id", "agreement", "protocol"]


def test_missing_column_is_named(corpus, tmp_path):
    path = _write("parquet", corpus, tmp_path)
    with pytest.raises(ValueError, match=r"c\.parquet: no column 'belief'"):
        next(read_corpus(path, columns=["belief"]))


@pytest.mark.parametrize("kind", FILE_KINDS + FRAME_KINDS)
def test_count_rows(kind, corpus, tmp_path):
    src = _source(kind, corpus, tmp_path)
    expect = None if kind in ("jsonl", "jsonl.gz", "ndjson", "ipc-stream", "lazy",
                              "batch-reader") else N
    assert count_rows(src) == expect


def test_folder_and_list_sources_chain_files_in_order(corpus, tmp_path):
    (tmp_path / "shards").mkdir()
    a, b = corpus.slice(0, 100), corpus.slice(100)
    pq.write_table(a, tmp_path / "shards" / "part-0.parquet")
    (tmp_path / "shards" / "part-1.jsonl").write_text(
        "".join(json.dumps(r) + "\n" for r in b.to_pylist()))
    chunks = list(iter_chunks(tmp_path / "shards", chunk_rows=64))
    assert [(c.row0, c.source_row0, c.table.num_rows) for c in chunks] == [
        (0, 0, 64), (64, 64, 36), (100, 0, 64), (164, 64, 64), (228, 128, 12)]
    assert chunks[2].source.endswith("part-1.jsonl")
    assert pa.concat_tables(c.table for c in chunks).equals(corpus)
    files = [tmp_path / "shards" / "part-0.parquet", tmp_path / "shards" / "part-1.jsonl"]
    assert pa.concat_tables(read_corpus(files)).equals(corpus)
    assert count_rows(files) is None
    assert count_rows([files[0], corpus]) == 100 + N


def test_hugging_face_dataset(corpus, monkeypatch):
    # `datasets` is in the test extra: this must run, not skip. Everything stays in memory
    # (no hub, no download, no cache files).
    monkeypatch.setenv("HF_DATASETS_OFFLINE", "1")
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    import datasets

    ds = datasets.Dataset(corpus)
    got = pa.concat_tables(read_corpus(ds, chunk_rows=50))
    assert got.equals(corpus)
    assert ds.cache_files == []
    # built from plain Python lists, as a user would: the types are inferred (int64 team
    # sizes, float64 top-k), and the reader conforms them to the canonical schema
    plain = datasets.Dataset.from_dict(corpus.to_pydict())
    assert plain.features["n_agents"].dtype == "int64"
    got = pa.concat_tables(read_corpus(plain, chunk_rows=64))
    assert got.schema.equals(corpus.schema)
    assert got.equals(corpus)
    assert count_rows(plain) == N
    shuffled = ds.select(list(range(N - 1, -1, -1)))  # an index mapping: rows in new order
    got = pa.concat_tables(read_corpus(shuffled, columns=["agreement"], chunk_rows=77))
    assert got["trajectory_id"].to_pylist() == corpus["trajectory_id"].to_pylist()[::-1]
    assert count_rows(ds) == N


def test_unknown_format_and_missing_file(tmp_path):
    (tmp_path / "x.csv").write_text("a\n1\n")
    with pytest.raises(ValueError, match=r"x\.csv: unknown corpus format"):
        next(read_corpus(tmp_path / "x.csv"))
    with pytest.raises(FileNotFoundError, match="nope.parquet"):
        next(read_corpus(tmp_path / "nope.parquet"))
    with pytest.raises(TypeError, match="cannot read a corpus from int"):
        next(read_corpus(3))


# --- errors that name the place --------------------------------------------------------------


def _jsonl(path, records, raw=None):
    lines = [json.dumps(r) for r in records]
    for at, text in (raw or {}).items():
        lines[at] = text
    path.write_text("\n".join(lines) + "\n")
    return path


def _rec(i, **kw):
    r = {"trajectory_id": f"t{i}", "agreement": [1.0, 0.5], "token_entropy": [0.2, 0.1]}
    r.update(kw)
    return r


def test_jsonl_syntax_error_names_the_line(tmp_path):
    path = _jsonl(tmp_path / "bad.jsonl", [_rec(i) for i in range(20)],
                  {6: '{"trajectory_id": "t6", "agreement": [1.0, 0.5'})
    with pytest.raises(ValueError, match=r"bad\.jsonl: line 7 \(row 6\): invalid JSON"):
        list(read_corpus(path))


def test_jsonl_syntax_error_in_a_later_block_names_the_line(tmp_path):
    records = [_rec(i) for i in range(3000)]
    path = _jsonl(tmp_path / "bad.jsonl", records, {2500: '{"trajectory_id": "t2500", }'})
    with gzip.open(tmp_path / "bad.jsonl.gz", "wb") as f:
        f.write(path.read_bytes())
    for p in (path, tmp_path / "bad.jsonl.gz"):
        chunks = []
        with pytest.raises(ValueError, match=r"line 2501 \(row 2500\): invalid JSON"):
            for c in iter_chunks(p, chunk_rows=500, block_size=1 << 14, sample_bytes=4096):
                chunks.append(c)
        assert sum(c.table.num_rows for c in chunks) <= 2500  # earlier chunks came through


def test_jsonl_blank_lines_are_skipped_and_line_numbers_stay_physical(tmp_path):
    path = tmp_path / "blank.jsonl"
    recs = [json.dumps(_rec(i)) for i in range(4)]
    path.write_text(recs[0] + "\n\n" + recs[1] + "\n   \n" + recs[2] + "\n" + "{oops}\n")
    with pytest.raises(ValueError, match=r"blank\.jsonl: line 6 \(row 3\): invalid JSON"):
        list(read_corpus(path))
    path.write_text(recs[0] + "\n\n" + recs[1] + "\n")
    assert pa.concat_tables(read_corpus(path))["trajectory_id"].to_pylist() == ["t0", "t1"]


def test_jsonl_value_of_the_wrong_type_names_the_line(tmp_path):
    recs = [_rec(i) for i in range(300)]
    recs[250]["agreement"] = [1.0, "high"]
    path = _jsonl(tmp_path / "types.jsonl", recs)
    with pytest.raises(ValueError, match=r"types\.jsonl: line 251 \(row 250\): .*"
                                         r"inferred from the first"):
        list(read_corpus(path, sample_bytes=2048, block_size=1 << 13))


def test_jsonl_field_appearing_after_the_sample(tmp_path):
    recs = [_rec(i) for i in range(300)]
    recs[280]["late"] = 1
    path = _jsonl(tmp_path / "late.jsonl", recs)
    with pytest.raises(ValueError, match=r"line 281 \(row 280\): field\(s\) 'late' not in the "
                                         r"schema; the schema was inferred"):
        list(read_corpus(path, sample_bytes=2048))
    # reading only some columns skips unknown fields, as does an explicit schema
    got = pa.concat_tables(read_corpus(path, columns=["agreement"], sample_bytes=2048))
    assert got.num_rows == 300
    schema = pa.schema([("trajectory_id", pa.string()), ("agreement", pa.list_(pa.float64()))])
    got = pa.concat_tables(read_corpus(path, schema=schema))
    assert got.column_names == ["trajectory_id", "agreement"] and got.num_rows == 300


def test_jsonl_array_is_not_json_lines(tmp_path):
    path = tmp_path / "arr.json"
    path.write_text(json.dumps([_rec(0), _rec(1)]))
    with pytest.raises(ValueError, match=r"arr\.json: a JSON array, not JSON Lines"):
        list(read_corpus(path))


def test_validation_errors_name_file_row_and_trajectory(corpus, tmp_path):
    ids = corpus["trajectory_id"].to_pylist()
    ids[150] = ids[120]
    bad = corpus.set_column(0, "trajectory_id", pa.array(ids))
    path = tmp_path / "dup.parquet"
    pq.write_table(bad, path)
    with pytest.raises(ValueError, match=r"dup\.parquet: row 150 \(trajectory_id 't000120'\): "
                                         r"field trajectory_id: duplicate id \(first at row "
                                         r"120\)"):
        list(read_corpus(path, chunk_rows=100))
    assert len(list(read_corpus(path, chunk_rows=100, validate=False))) == 3


def test_jsonl_numbers_for_canonical_strings_are_cast(tmp_path):
    path = _jsonl(tmp_path / "num.jsonl", [
        {"trajectory_id": 1, "reference": 42, "n_agents": 3, "answers": [[1, 2, None]],
         "agreement": [0, 1]},
        {"trajectory_id": 2, "reference": 7, "n_agents": 3, "answers": [[7, 7, 7]],
         "agreement": [1]},
    ])
    got = pa.concat_tables(read_corpus(path, validate=False))
    assert got["trajectory_id"].to_pylist() == ["1", "2"]
    assert got["reference"].to_pylist() == ["42", "7"]
    assert got["answers"].to_pylist() == [[["1", "2", None]], [["7", "7", "7"]]]
    assert got.schema.field("agreement").type == pa.list_(pa.float64())


# --- the SAUCE project's released records ------------------------------------------------------


def _agent(aid, answer, text, **extra):
    a = {"response": text, "parsed_answer": answer,
         "quality": {"truncated": False, "format_ok": answer is not None}}
    if aid is not None:
        a["agent_id"] = aid
    a.update(extra)
    return a


def _release(uid, protocol, reference, n, rounds, final, signals, flags, seed):
    return {
        "schema_version": "1.0", "id": seed, "record_uid": uid,
        "question_uid": "math_500/" + uid[-2:], "protocol": protocol, "dataset": "math_500",
        "answer": reference, "num_agents": n,
        "round_outputs": [{"round_index": t, "agents": a} for t, a in enumerate(rounds)],
        "agent_final_answers": [a["parsed_answer"] for a in rounds[-1]],
        "consensus_answer": final, "signals": signals, "quality_flags": flags,
        "observation_noise": 0.05 * seed,
        "metadata": {"model": "Qwen3-4B", "temperature": 0.7, "seed": seed},
    }


SAUCE_RECORDS = [
    # debate, 3 agents x 3 rounds; agent 1 unparseable in round 0, listed out of order
    _release("debate_math_500/0017", "debate", "12", 3, [
        [_agent(0, "12", "so \\boxed{12}"), _agent(2, "14", "\\boxed{14}"),
         _agent(1, None, "I am not sure")],
        [_agent(0, "12", "r1a0"), _agent(1, "12", "r1a1"), _agent(2, "12", "r1a2")],
        [_agent(0, "12", "r2a0"), _agent(1, "12", "r2a1"), _agent(2, "12", "r2a2")],
    ], "12", {"agreement": [1 / 3, 1.0, 1.0], "token_entropy": [0.41, 0.22, 0.13]}, [], 1),
    # DyLAN, 4 agents: consensus after three answers in round 0 (early stop)
    _release("dylan_math_500/0018", "dylan", "\\frac{1}{2}", 4, [
        [_agent(0, "\\frac{1}{2}", "t0"), _agent(1, "\\frac{1}{2}", "t1"),
         _agent(2, "\\frac{1}{2}", "t2")],
    ], "\\frac{1}{2}", {"agreement": [0.75], "token_entropy": [0.3]}, ["early_stop"], 2),
    # DyLAN, 4 agents: the ranker keeps agents 1 and 3 for round 2 (a pruned round)
    _release("dylan_math_500/0019", "dylan", "7", 4, [
        [_agent(0, "7", "a"), _agent(1, "8", "b"), _agent(2, "9", "c"), _agent(3, "7", "d")],
        [_agent(0, "7", "e"), _agent(1, "8", "f"), _agent(2, "7", "g"), _agent(3, "8", "h")],
        [_agent(1, "7", "i"), _agent(3, "7", "j")],
    ], "7", {"agreement": [0.5, 0.5, 0.5], "token_entropy": [0.5, 0.4, 0.2]}, ["pruned"], 3),
    # DyLAN without agent ids: the pruned round is filled by position, and flagged
    _release("dylan_math_500/0020", "dylan", "3", 4, [
        [_agent(None, "3", "k"), _agent(None, "4", "l"), _agent(None, "3", "m"),
         _agent(None, "5", "n")],
        [_agent(None, "3", "o"), _agent(None, "4", "p"), _agent(None, "4", "q"),
         _agent(None, "3", "r")],
        [_agent(None, "3", "s"), _agent(None, "", "t")],
    ], "3", {"agreement": [0.5, 0.5, 0.25], "token_entropy": [0.6, 0.5, 0.3]}, None, 4),
]

EXPECTED = {
    "trajectory_id": ["debate_math_500/0017", "dylan_math_500/0018", "dylan_math_500/0019",
                      "dylan_math_500/0020"],
    "question_id": ["math_500/17", "math_500/18", "math_500/19", "math_500/20"],
    "protocol": ["debate", "dylan", "dylan", "dylan"],
    "n_agents": [3, 4, 4, 4],
    "reference": ["12", "\\frac{1}{2}", "7", "3"],
    "final_answer": ["12", "\\frac{1}{2}", "7", "3"],
    "agreement": [[1 / 3, 1.0, 1.0], [0.75], [0.5, 0.5, 0.5], [0.5, 0.5, 0.25]],
    "token_entropy": [[0.41, 0.22, 0.13], [0.3], [0.5, 0.4, 0.2], [0.6, 0.5, 0.3]],
    "answers": [
        [["12", None, "14"], ["12", "12", "12"], ["12", "12", "12"]],
        [["\\frac{1}{2}", "\\frac{1}{2}", "\\frac{1}{2}", None]],
        [["7", "8", "9", "7"], ["7", "8", "7", "8"], [None, "7", None, "7"]],
        [["3", "4", "3", "5"], ["3", "4", "4", "3"], ["3", "", None, None]],
    ],
    "texts": [
        [["so \\boxed{12}", "I am not sure", "\\boxed{14}"], ["r1a0", "r1a1", "r1a2"],
         ["r2a0", "r2a1", "r2a2"]],
        [["t0", "t1", "t2", None]],
        [["a", "b", "c", "d"], ["e", "f", "g", "h"], [None, "i", None, "j"]],
        [["k", "l", "m", "n"], ["o", "p", "q", "r"], ["s", "t", None, None]],
    ],
    "flags": [[], ["early_stop"], ["pruned"], ["slots_by_position"]],
}

MAPPED_AWAY = {"record_uid", "question_uid", "answer", "num_agents", "consensus_answer",
               "signals", "quality_flags"}


def _subset(original, read):
    """``read`` holds everything of ``original`` (Arrow fills absent struct keys with None)."""
    if isinstance(original, dict):
        return isinstance(read, dict) and all(_subset(v, read.get(k)) for k, v in
                                              original.items())
    if isinstance(original, list):
        return isinstance(read, list) and len(read) == len(original) and all(
            _subset(a, b) for a, b in zip(original, read, strict=True))
    return original == read


def _check_release(table):
    for name, expect in EXPECTED.items():
        assert table[name].to_pylist() == expect, name
    for i, rec in enumerate(SAUCE_RECORDS):
        for key, value in rec.items():
            if key in MAPPED_AWAY:
                continue
            assert key in table.column_names, key
            assert _subset(value, table[key][i].as_py()), (key, i)
    # the released agreement is the majority margin of the slotted answers
    np.testing.assert_allclose(
        np.asarray(agreement_from_answers(table["answers"], table["n_agents"]).values),
        np.asarray(table["agreement"].combine_chunks().values), atol=1e-12)


@pytest.mark.parametrize("kind", ["jsonl.gz", "jsonl", "parquet", "table"])
def test_sauce_release_maps_to_canonical_columns(kind, tmp_path):
    if kind == "jsonl.gz":
        src = tmp_path / "debate_math_500.jsonl.gz"
        with gzip.open(src, "wt") as f:
            f.writelines(json.dumps(r) + "\n" for r in SAUCE_RECORDS)
    elif kind == "jsonl":
        src = _jsonl(tmp_path / "r.jsonl", SAUCE_RECORDS)
    else:
        src = pa.Table.from_pylist(SAUCE_RECORDS)
        if kind == "parquet":
            pq.write_table(src, tmp_path / "r.parquet")
            src = tmp_path / "r.parquet"
    for chunk_rows in (1, 3, 100):
        table = pa.concat_tables(read_corpus(src, chunk_rows=chunk_rows))
        _check_release(table)
    got = pa.concat_tables(read_corpus(src, columns=["agreement", "answers", "flags"]))
    assert got.column_names == ["trajectory_id", "agreement", "answers", "flags"]
    for name in got.column_names:
        assert got[name].to_pylist() == EXPECTED[name]


@pytest.mark.parametrize("text_type", ["json_extension", "string"])
def test_sauce_agents_stored_as_json_text(text_type):
    """Hugging Face ``datasets`` stores objects of varying keys as ``arrow.json`` text."""
    if text_type == "json_extension" and not hasattr(pa, "json_"):
        pytest.skip("pyarrow without the arrow.json extension type")
    t = pa.Table.from_pylist(SAUCE_RECORDS)
    ro = t["round_outputs"].combine_chunks()
    rounds = ro.flatten()
    agents = rounds.field("agents")
    texts = pa.array([json.dumps(a) for r in SAUCE_RECORDS for rnd in r["round_outputs"]
                      for a in rnd["agents"]], pa.string())
    if text_type == "json_extension":
        texts = pa.ExtensionArray.from_storage(pa.json_(pa.string()), texts)
    agents = pa.ListArray.from_arrays(agents.offsets, texts)
    rounds = pa.StructArray.from_arrays([rounds.field("round_index"), agents],
                                        names=["round_index", "agents"])
    ro = pa.ListArray.from_arrays(ro.offsets, rounds)
    t = t.set_column(t.column_names.index("round_outputs"), "round_outputs", ro)
    got = pa.concat_tables(read_corpus(t, chunk_rows=3))
    for name in ("answers", "texts", "flags"):
        assert got[name].to_pylist() == EXPECTED[name], name
    assert got["round_outputs"].equals(t["round_outputs"])  # the raw column is kept as is


def test_sauce_one_based_and_string_agent_ids(tmp_path):
    recs = [
        _release("r/01", "dylan", "1", 3, [
            [_agent(1, "1", "a"), _agent(2, "1", "b"), _agent(3, "2", "c")],
            [_agent(3, "1", "d")]], "1", {"agreement": [2 / 3, 1 / 3],
                                          "token_entropy": [0.1, 0.1]}, [], 1),
        _release("r/02", "dylan", "1", 3, [
            [_agent(2, "5", "a"), _agent(1, "5", "b")]], "5",
            {"agreement": [2 / 3], "token_entropy": [0.1]}, [], 2),
    ]
    expect = [[["1", "1", "2"], [None, None, "1"]], [["5", "5", None]]]
    for chunk_rows in (1, 2):  # decided per record: the same whatever the chunking
        got = pa.concat_tables(read_corpus(pa.Table.from_pylist(recs), chunk_rows=chunk_rows))
        assert got["answers"].to_pylist() == expect
    for r in recs:
        for rnd in r["round_outputs"]:
            for a in rnd["agents"]:
                a["agent_id"] = f"agent_{a['agent_id'] - 1}"
    for chunk_rows in (1, 2):
        got = pa.concat_tables(read_corpus(pa.Table.from_pylist(recs), chunk_rows=chunk_rows))
        assert got["answers"].to_pylist() == expect
        assert got["flags"].to_pylist() == [[], []]
    for r in recs:
        for rnd in r["round_outputs"]:
            for a in rnd["agents"]:
                a["agent_id"] = {"agent_0": "alice", "agent_1": "bob", "agent_2": "carol"}[
                    a["agent_id"]]
    got = pa.concat_tables(read_corpus(pa.Table.from_pylist(recs)))
    assert got["answers"].to_pylist() == [expect[0], [["5", "5", None]]]


def test_sauce_two_responses_for_one_agent_in_a_round_is_an_error():
    rec = _release("r/dup", "debate", "1", 2, [[_agent(0, "1", "a"), _agent(0, "1", "b")]],
                   "1", {"agreement": [1.0], "token_entropy": [0.1]}, [], 1)
    with pytest.raises(ValueError, match=r"row 0 \(trajectory_id 'r/dup'\): field "
                                         r"round_outputs: round 0 has two responses for agent "
                                         r"slot 0"):
        list(read_corpus(pa.Table.from_pylist([rec])))


def test_sauce_signals_only_records_like_the_cli_fixture(tmp_path):
    recs = [{"record_uid": f"r{k}", "protocol": "debate",
             "signals": {"agreement": [1.0, 0.5], "token_entropy": [0.2, 0.3]},
             "round_outputs": [{"round_index": i, "agents": []} for i in range(2)]}
            for k in range(5)]
    path = _jsonl(tmp_path / "cli.jsonl", recs)
    got = pa.concat_tables(read_corpus(path, columns=["agreement", "token_entropy"],
                                       optional_columns=["protocol", "correct"]))
    assert got.column_names == ["trajectory_id", "agreement", "token_entropy", "protocol"]
    assert got["trajectory_id"].to_pylist() == [f"r{k}" for k in range(5)]
    assert got["agreement"].to_pylist() == [[1.0, 0.5]] * 5


def test_folder_files_lists_corpus_files_below_a_folder(tmp_path):
    from fastuq.io.readers import folder_files

    (tmp_path / "b").mkdir()
    for name in ("b/z.parquet", "a.jsonl.gz", ".hidden.parquet", "notes.txt", "c.arrow"):
        (tmp_path / name).write_bytes(b"")
    assert folder_files(tmp_path) == [tmp_path / "a.jsonl.gz", tmp_path / "b" / "z.parquet",
                                      tmp_path / "c.arrow"]
    (tmp_path / "empty").mkdir()
    with pytest.raises(ValueError, match="no corpus files"):
        folder_files(tmp_path / "empty")
