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


def _good_and_bad(tmp_path, n=300, seed=4):
    import json

    rng = np.random.default_rng(seed)
    records = []
    for k in range(n):
        t = int(rng.integers(1, 4))
        records.append({"trajectory_id": f"r{k}", "protocol": "debate" if k % 2 else "dylan",
                        "agreement": list(rng.integers(1, 4, t) / 3.0),
                        "token_entropy": list(rng.exponential(0.3, t))})
    bad = {13: ("agreement", 1.5), 14: ("token_entropy", -1.0), 150: ("token_entropy", None),
           151: ("agreement", None), 299: ("agreement", 2.0)}
    for k, (field, value) in bad.items():
        records[k][field][0] = value
    records[77]["protocol"] = None
    records[200]["agreement"], records[200]["token_entropy"] = [], []
    records[201]["trajectory_id"] = "r5"  # duplicate id within the chunk
    path = tmp_path / "mixed.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in records))
    return path, records, set(bad) | {77, 200, 201}


def test_on_error_skip_conserves_rows_and_lists_reasons(tmp_path):
    import json

    path, records, bad = _good_and_bad(tmp_path)
    out = tmp_path / "s.parquet"
    report = fastuq.score_file(path, out, on_error="skip", chunk_rows=64)
    table = pq.read_table(out)
    kept = [k for k in range(len(records)) if k not in bad]
    assert table["trajectory_id"].to_pylist() == [records[k]["trajectory_id"] for k in kept]
    expected = [fastuq.sauce_score(records[k]["agreement"], records[k]["token_entropy"],
                                   records[k]["protocol"]) for k in kept]
    np.testing.assert_allclose(table["sauce"].to_numpy(), expected, atol=1e-12)
    side = [json.loads(x) for x in (tmp_path / "s.parquet.skipped.jsonl").read_text().splitlines()]
    assert sorted(x["row"] for x in side) == sorted(bad)
    assert len(report.skipped) == len(bad) and table.num_rows + len(side) == len(records)
    reasons = {x["row"]: x["reason"] for x in side}
    assert "agreement = 1.5" in reasons[13] and "protocol" in reasons[77]
    assert "duplicate" in reasons[201] and "no executed round" in reasons[200]
    # Without skip, the first bad record stops the run and nothing is written.
    with pytest.raises(ValueError, match="row 13"):
        fastuq.score_file(path, tmp_path / "t.parquet", chunk_rows=64)
    assert not (tmp_path / "t.parquet").exists()


def test_cli_on_error_skip(tmp_path, capsys):
    path, records, bad = _good_and_bad(tmp_path)
    out = tmp_path / "s.parquet"
    assert main(["score", str(path), "-o", str(out), "--on-error", "skip",
                 "--skipped", str(tmp_path / "bad.jsonl")]) == 0
    assert f"skipped {len(bad)} bad record(s)" in capsys.readouterr().err
    assert len((tmp_path / "bad.jsonl").read_text().splitlines()) == len(bad)
    assert pq.read_table(out).num_rows == len(records) - len(bad)


@pytest.mark.parametrize("chunk_rows", [1, 7, 64, 1000])
def test_chunking_does_not_change_a_bit(tmp_path, chunk_rows):
    from fastuq.synth import corpus, write

    path = tmp_path / "c.parquet"
    write(corpus(500, protocol="mixed", seed=9), path)
    whole = fastuq.score(path, "all", chunk_rows=1 << 16)
    parts = fastuq.score(path, "all", chunk_rows=chunk_rows)
    assert parts.equals(whole)


def test_in_memory_sources(tmp_path):
    import polars as pl

    from fastuq.synth import corpus

    table = corpus(200, protocol="mixed", seed=1)
    ref = fastuq.score(table, "sauce,umas")
    assert fastuq.score(pl.from_arrow(table), "sauce,umas").equals(ref)
    assert fastuq.score(pl.from_arrow(table).lazy(), "sauce,umas").equals(ref)
    expected = [fastuq.sauce_score(a, h, p) for a, h, p in zip(
        table["agreement"].to_pylist(), table["token_entropy"].to_pylist(),
        table["protocol"].to_pylist(), strict=True)]
    np.testing.assert_allclose(ref["sauce"].to_numpy(), expected, atol=1e-12)


def test_agreement_built_from_parsed_answers_when_missing(tmp_path):
    from fastuq.synth import corpus

    table = corpus(300, protocol="mixed", seed=3)
    # Spell some answers differently but equivalently: "12" -> "12.0" votes with "12".
    answers = table["answers"].to_pylist()
    for rec in answers[:50]:
        for rnd in rec:
            if rnd[0] is not None:
                rnd[0] = rnd[0] + ".0"
    import pyarrow as pa

    table = table.set_column(table.column_names.index("answers"), "answers",
                             pa.array(answers, table.schema.field("answers").type))
    without = table.drop_columns(["agreement"])
    path = tmp_path / "noagree.parquet"
    pq.write_table(without, path)
    got = fastuq.score(path, "sauce,mean_agreement")
    ref = fastuq.score(table, "sauce,mean_agreement")  # the simulator's own agreement
    np.testing.assert_allclose(got["sauce"].to_numpy(), ref["sauce"].to_numpy(), atol=1e-12)
    np.testing.assert_allclose(got["mean_agreement"].to_numpy(),
                               ref["mean_agreement"].to_numpy(), atol=1e-12)
    # The same from an in-memory frame, and independently from majority_margin.
    mem = fastuq.score(without, "mean_agreement")["mean_agreement"].to_numpy()
    for k in range(0, 300, 37):
        n = table["n_agents"][k].as_py()
        rounds = [fastuq.majority_margin([None if a is None else str(float(a)) for a in r], n)
                  for r in answers[k]]
        assert mem[k] == pytest.approx(-sum(rounds) / len(rounds), abs=1e-12)


def test_token_entropy_built_from_topk_when_missing(tmp_path):
    from fastuq.synth import corpus

    table = corpus(120, protocol="mixed", seed=4, topk=3)
    got = fastuq.score(table.drop_columns(["token_entropy"]), "sauce")["sauce"].to_numpy()
    for k in range(0, 120, 17):
        rec = table.slice(k, 1).to_pylist()[0]
        ent = [np.mean([fastuq.compute_token_entropy(tk) for tk in rnd if tk is not None])
               for rnd in rec["topk_logprobs"]]
        assert got[k] == pytest.approx(
            fastuq.sauce_score(rec["agreement"], ent, rec["protocol"]), abs=1e-12)


def test_output_gets_the_usual_file_mode(tmp_path):
    import os
    import stat

    path, _ = _corpus(tmp_path)
    out = tmp_path / "s.parquet"
    fastuq.score_file(path, out)
    umask = os.umask(0)
    os.umask(umask)
    assert stat.S_IMODE(out.stat().st_mode) == 0o666 & ~umask  # not mkstemp's 0600
