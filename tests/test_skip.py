"""``on_error="skip"``: one vectorized pass per chunk, reasons that name the input row,
duplicates that point at the first occurrence, limits on how much may be skipped, and the
compact, exact id-uniqueness check."""

import json
import re

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import fastuq
from fastuq.cli import main

KINDS = ("agreement", "entropy", "protocol", "n_agents", "empty", "dup")


def _records(n: int, seed: int = 0) -> list[dict]:
    rng = np.random.default_rng(seed)
    out = []
    for k in range(n):
        t = int(rng.integers(1, 4))
        out.append({"trajectory_id": f"r{k}", "protocol": "debate" if k % 2 else "dylan",
                     "n_agents": 3, "agreement": list(rng.integers(1, 4, t) / 3.0),
                     "token_entropy": list(rng.exponential(0.3, t))})
    return out


def _spoil(records: list[dict], bad: dict[int, str]) -> dict[int, int | None]:
    """Spoil ``records`` in place; returns, for duplicates, the row of the first occurrence."""
    first = {}
    for row, kind in bad.items():
        r = records[row]
        if kind == "agreement":
            r["agreement"][0] = 1.5
        elif kind == "entropy":
            r["token_entropy"][-1] = -0.5
        elif kind == "protocol":
            r["protocol"] = None
        elif kind == "n_agents":
            r["n_agents"] = 0
        elif kind == "empty":
            r["agreement"], r["token_entropy"] = [], []
        else:  # repeat the id of a record that is not spoiled itself
            src = next(k for k in range(row) if k not in bad)
            r["trajectory_id"] = records[src]["trajectory_id"]
            first[row] = src
    return first


def _write(tmp_path, records, name="c.parquet"):
    path = tmp_path / name
    pq.write_table(pa.Table.from_pylist(records, schema=pa.schema([
        ("trajectory_id", pa.string()), ("protocol", pa.string()), ("n_agents", pa.int32()),
        ("agreement", pa.list_(pa.float64())), ("token_entropy", pa.list_(pa.float64()))])),
        path, row_group_size=50)
    return path


def _expected(records, rows):
    return [fastuq.sauce_score(records[k]["agreement"], records[k]["token_entropy"],
                               records[k]["protocol"]) for k in rows]


def _check_run(tmp_path, records, bad, first, chunk_rows, backend="numpy"):
    path = _write(tmp_path, records)
    out = tmp_path / "s.parquet"
    report = fastuq.score_file(path, out, on_error="skip", chunk_rows=chunk_rows,
                               backend=backend)
    side = [json.loads(x) for x in (tmp_path / "s.parquet.skipped.jsonl").read_text()
            .splitlines()]
    assert sorted(x["row"] for x in side) == sorted(bad)
    kept = [k for k in range(len(records)) if k not in bad]
    table = pq.read_table(out)
    assert table["trajectory_id"].to_pylist() == [records[k]["trajectory_id"] for k in kept]
    np.testing.assert_allclose(table["sauce"].to_numpy(), _expected(records, kept), atol=1e-12)
    assert report.n_rows + len(report.skipped) == len(records)
    for x in side:  # every reason names the input row of its record, and its field
        assert f"row {x['row']}" in x["reason"], x
        kind = bad[x["row"]]
        field = {"entropy": "token_entropy", "dup": "trajectory_id", "empty": "agreement"}.get(
            kind, kind)
        assert field in x["reason"], x
        if kind == "dup":
            assert re.search(rf"first at (\S*c\.parquet )?row {first[x['row']]}\)",
                             x["reason"]), x


def test_every_reason_names_its_own_input_row(tmp_path):
    records = _records(200)
    bad = {3: "n_agents", 4: "n_agents", 9: "agreement", 10: "protocol", 77: "n_agents",
           120: "entropy", 121: "empty", 150: "dup", 199: "n_agents"}
    first = _spoil(records, bad)
    _check_run(tmp_path, records, bad, first, chunk_rows=256)


def test_duplicate_in_a_later_chunk_points_at_the_first_occurrence(tmp_path):
    records = _records(120)
    records[100]["trajectory_id"] = records[7]["trajectory_id"]
    records[101]["trajectory_id"] = records[60]["trajectory_id"]
    _check_run(tmp_path, records, {100: "dup", 101: "dup"}, {100: 7, 101: 60}, chunk_rows=32)
    with pytest.raises(ValueError, match=r"row 100: field trajectory_id: duplicate id 'r7' "
                                         r"\(first at \S*c\.parquet row 7\)"):
        fastuq.score_file(tmp_path / "c.parquet", tmp_path / "t.parquet", chunk_rows=32)


@settings(max_examples=12, deadline=None)
@given(data=st.data())
def test_skip_matches_the_clean_records_scored_alone(tmp_path_factory, data):
    n = data.draw(st.integers(30, 150))
    rows = data.draw(st.lists(st.integers(1, n - 1), unique=True, max_size=n // 3))
    bad = {r: data.draw(st.sampled_from(KINDS)) for r in rows}
    records = _records(n, seed=data.draw(st.integers(0, 10)))
    first = _spoil(records, bad)
    tmp = tmp_path_factory.mktemp("skip")
    _check_run(tmp, records, bad, first, chunk_rows=data.draw(st.sampled_from([7, 32, 1000])))


def test_skipping_scores_each_chunk_once_not_once_per_bad_record(tmp_path, monkeypatch):
    import fastuq.engine.pipeline as score_mod  # where make_batch looks Batch up

    calls = []
    original = score_mod.Batch

    class Counting(original):
        def __init__(self, *a, **k):
            calls.append(1)
            super().__init__(*a, **k)

    monkeypatch.setattr(score_mod, "Batch", Counting)
    records = _records(400, seed=2)
    bad = {k: KINDS[k % 5] for k in range(5, 400, 10)}  # 40 bad records, one chunk
    _spoil(records, bad)
    _check_run(tmp_path, records, bad, {}, chunk_rows=1000)
    assert len(calls) <= 2  # one chunk: one batch to resolve and check, one to score


def _bad_corpus(tmp_path, n_bad):
    records = _records(50)
    _spoil(records, {k: "agreement" for k in range(n_bad)})
    return _write(tmp_path, records)


def test_a_run_that_skips_everything_fails_after_writing_the_skip_list(tmp_path, capsys):
    path = _bad_corpus(tmp_path, 50)
    out = tmp_path / "s.parquet"
    assert main(["score", str(path), "-o", str(out), "--on-error", "skip"]) == 1
    err = capsys.readouterr().err
    assert "every record (50) was skipped" in err and "Traceback" not in err
    assert not out.exists()
    assert len((tmp_path / "s.parquet.skipped.jsonl").read_text().splitlines()) == 50
    assert sorted(p.name for p in tmp_path.iterdir()) == ["c.parquet", "s.parquet.skipped.jsonl"]


@pytest.mark.parametrize("limit, ok", [("0.1", False), ("0.2", True), ("0", False)])
def test_max_skip_fraction(tmp_path, capsys, limit, ok):
    path = _bad_corpus(tmp_path, 10)  # 10 of 50: 20%
    out = tmp_path / "s.parquet"
    rc = main(["score", str(path), "-o", str(out), "--on-error", "skip", "--max-skip-fraction",
               limit, "--backend", "numpy"])
    assert rc == (0 if ok else 1)
    assert out.exists() == ok
    assert len((tmp_path / "s.parquet.skipped.jsonl").read_text().splitlines()) == 10
    if not ok:
        assert "10 of 50 records (20.00%) were skipped" in capsys.readouterr().err


# --- the id-uniqueness check ------------------------------------------------------------------


def _feed(seen, ids, chunk):
    found = {}
    for start in range(0, len(ids), chunk):
        part = pa.array(ids[start:start + chunk])
        repeat, first = seen.repeats(part)
        for k in np.flatnonzero(repeat):
            found[start + int(k)] = int(first[k])
        seen.add(part, start, "src", start)
    return found


def _reference_repeats(ids, chunk):
    """Rows whose id appeared in an earlier chunk -> row of the first occurrence."""
    first, out = {}, {}
    for start in range(0, len(ids), chunk):
        part = ids[start:start + chunk]
        for k, x in enumerate(part):
            if x in first and first[x] < start:
                out[start + k] = first[x]
        for k, x in enumerate(part):
            first.setdefault(x, start + k)
    return out


@pytest.mark.parametrize("bits", [64, 3])
def test_seen_ids_exact_even_when_every_hash_collides(monkeypatch, bits):
    from fastuq.engine.scoring import SeenIds

    if bits < 64:  # force collisions: only a few distinct hash values
        real = SeenIds._hash
        monkeypatch.setattr(SeenIds, "_hash", staticmethod(
            lambda ids: real(ids) & np.uint64((1 << bits) - 1)))
    rng = np.random.default_rng(5)
    ids = [f"id{k}" for k in rng.integers(0, 300, 600)]
    for chunk in (64, 7):  # 7: many runs of different sizes, merged at odd points
        seen = SeenIds()
        try:
            assert _feed(seen, ids, chunk) == _reference_repeats(ids, chunk)
        finally:
            seen.close()


@pytest.mark.parametrize("bits", [64, 3])
def test_seen_ids_sorted_then_unsorted(monkeypatch, bits):
    """The shortcut for ascending ids (nothing hashed while every id is greater than the
    last) hands over to the index, built from the spilled ids, at the first chunk out of
    order: repeats of ids from the ascending part are found, naming their first row."""
    from fastuq.engine.scoring import SeenIds

    if bits < 64:
        real = SeenIds._hash
        monkeypatch.setattr(SeenIds, "_hash", staticmethod(
            lambda ids: real(ids) & np.uint64((1 << bits) - 1)))
    rng = np.random.default_rng(11)
    head = [f"id{k:05d}" for k in range(0, 900, 3)]  # ascending, 300 ids
    tail = [f"id{k:05d}" for k in rng.integers(0, 1200, 300)]  # repeats among them
    for ids in (head + tail, head + head[::-1], head + ["zz"] + head[:5]):
        for chunk in (64, 7, 300):
            seen = SeenIds()
            try:
                assert _feed(seen, ids, chunk) == _reference_repeats(ids, chunk)
            finally:
                seen.close()
    seen = SeenIds()  # ascending throughout: nothing indexed
    try:
        assert _feed(seen, head, 64) == {}
        assert not seen._runs
    finally:
        seen.close()


def test_seen_ids_holds_14_to_16_bytes_per_trajectory():
    from fastuq.engine.scoring import SeenIds

    n = 50_000
    seen = SeenIds()
    try:
        _feed(seen, [f"t{k}" for k in range(n)], 8192)
        held = sum(h.nbytes + r.nbytes for h, r in seen._runs)
        runs = [len(h) for h, _ in seen._runs]
        filter_bits = seen._filter.nbytes * 8
    finally:
        seen.close()
    assert held == 12 * n  # 8-byte hash + uint32 row
    assert 16 * n <= filter_bits < 32 * n  # the lookup filter: 2 to 4 bytes per id
    # log-structured runs: sorted, each more than the next one's size (so at most
    # log2(n / chunk) + 1 of them), together holding every id once
    assert sum(runs) == n and all(a > b for a, b in zip(runs, runs[1:], strict=False))
    assert len(runs) <= int(np.log2(n / 8192)) + 1


def test_skip_node_inputs_bad_log_probabilities_and_empty_records(tmp_path):
    rng = np.random.default_rng(7)
    n = 60
    seq = [[[float(-x) for x in rng.exponential(2.0, 3)] for _ in range(int(rng.integers(1, 4)))]
           for _ in range(n)]
    bad = {4: "positive", 5: "nan", 30: "silent", 59: "positive"}
    seq[4][0][1] = 0.5
    seq[5][-1][2] = float("nan")
    seq[30] = [[None, None, None]]
    seq[59][-1][0] = 2.0
    table = pa.table({"trajectory_id": [f"u{k}" for k in range(n)],
                      "protocol": ["debate"] * n, "n_agents": [3] * n, "seq_logprob": seq})
    path = tmp_path / "u.parquet"
    pq.write_table(table, path)
    out = tmp_path / "s.parquet"
    report = fastuq.score_file(path, out, methods="umas,msp_final", on_error="skip",
                               chunk_rows=16, backend="numpy")
    assert sorted(k.row for k in report.skipped) == sorted(bad)
    reasons = {k.row: k.reason for k in report.skipped}
    assert "round 0, agent 1: seq_logprob = 0.5" in reasons[4]
    assert "no valid node" in reasons[30] and "row 30" in reasons[30]
    kept = [k for k in range(n) if k not in bad]
    alone = fastuq.score(table.take(kept), "umas,msp_final", backend="numpy")
    got = pq.read_table(out)
    assert got["trajectory_id"].to_pylist() == [f"u{k}" for k in kept]
    for m in ("umas", "msp_final"):
        np.testing.assert_allclose(got[m].to_numpy(), alone[m].to_numpy(), rtol=0, atol=0)


@pytest.mark.parametrize("methods", ["mean_agreement", ["last_agreement", "mean_agreement"],
                                     "all"])
def test_a_record_without_protocol_is_skipped_whatever_runs(tmp_path, methods):
    # a null protocol was skipped only when SAUCE (which has presets) ran; with other
    # estimators skip mode stopped the run on it, as raise mode does, from Parquet and from
    # a pack alike
    records = _records(40)
    _spoil(records, {6: "protocol"})
    path = _write(tmp_path, records)
    kept = [r["trajectory_id"] for k, r in enumerate(records) if k != 6]
    pack = tmp_path / "c.fqpack"
    assert main(["pack", str(path), "-o", str(pack)]) == 0
    for src in (path, pack):
        out = tmp_path / f"{src.suffix[1:]}.parquet"
        with pytest.raises(ValueError, match=r"'r6' .*row 6\): no protocol \(field protocol\)"):
            fastuq.score_file(src, tmp_path / "raise.parquet", methods=methods)
        report = fastuq.score_file(src, out, methods=methods, on_error="skip")
        side = [json.loads(x) for x in out.with_name(out.name + ".skipped.jsonl")
                .read_text().splitlines()]
        assert [(x["row"], x["trajectory_id"]) for x in side] == [(6, "r6")], src
        assert "no protocol (field protocol)" in side[0]["reason"]
        assert pq.read_table(out)["trajectory_id"].to_pylist() == kept
        assert report.n_rows == 39
