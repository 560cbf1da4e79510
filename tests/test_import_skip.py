"""``import --on-error skip`` record by record: every input trajectory gets exactly one output
row or one skip record, in every format; FORD's JSONL records (and the generic mapping's
nested JSONL lines) are skipped one at a time, not a file at a time.

The expected rows are those of an import of the same file without the corruption (or
without the bad line), read by the importer in its default mode; the record counts are
counted from the fixture files with ``json`` here, apart from the importers."""

from __future__ import annotations

import json
import re
import shutil
from collections.abc import Callable
from pathlib import Path

import pyarrow.parquet as pq
import pytest

from fastuq import cli
from fastuq.importers import import_logs

DATA = Path(__file__).parent / "data"
COPA = DATA / "ford" / "final" / "copa.jsonl"


def _main(monkeypatch, argv: list[str]) -> int:
    monkeypatch.setitem(cli.COMMANDS, "import", "fastuq.cli.import_logs")
    return cli.main(argv)


def _lines(path: Path) -> list[str]:
    return [x for x in path.read_text(encoding="utf-8").splitlines() if x.strip()]


def _drop(rec: dict, key: str) -> dict:
    return {k: v for k, v in rec.items() if k != key}


# --- FORD: a bad record among good ones --------------------------------------------------------

# (name, how line 1 of copa.jsonl is spoilt, what its error says after "copa.jsonl: record
# 1 (line 2": the question when the record has one, and the field)
_FORD_BAD: list[tuple[str, Callable[[str], str], str]] = [
    ("malformed_json", lambda line: line[: len(line) // 2], r"\): malformed JSON"),
    ("not_an_object", lambda line: "[1, 2]", r"\): expected a JSON object, got list"),
    ("missing_Q", lambda line: json.dumps(_drop(json.loads(line), "Q")),
     r"\): missing field 'Q'"),
    ("missing_A", lambda line: json.dumps(_drop(json.loads(line), "A")),
     r", 'The glass fell[^']*'\): missing field 'A'"),
    ("A_not_str", lambda line: json.dumps({**json.loads(line), "A": 1}),
     r", 'The glass fell[^']*'\): field 'A' must be a str, got int"),
    ("R_not_list", lambda line: json.dumps({**json.loads(line), "R": "text"}),
     r", 'The glass fell[^']*'\): field 'R' must be a list, got str"),
    ("P_item_int", lambda line: json.dumps(
        {**json.loads(line), "P": json.loads(line)["P"][:-1] + [3]}),
     r", 'The glass fell[^']*'\): P\[\d+\] must be a string or null, got int"),
    ("P_too_long", lambda line: json.dumps(
        {**json.loads(line), "P": json.loads(line)["P"] + ["A"],
         "M": json.loads(line)["M"] + ["x"]}),
     r", 'The glass fell[^']*'\): R has \d+ entries but P has \d+"),
    ("M_misaligned", lambda line: json.dumps(
        {**json.loads(line), "M": json.loads(line)["M"][:-1]}),
     r", 'The glass fell[^']*'\): M must be a list of model names aligned with P"),
]


@pytest.mark.parametrize("spoil,pattern", [c[1:] for c in _FORD_BAD],
                         ids=[c[0] for c in _FORD_BAD])
def test_ford_on_error_skip_leaves_out_the_bad_record_alone(tmp_path, monkeypatch, capsys,
                                                           spoil, pattern):
    lines = _lines(COPA)
    assert len(lines) == 4
    bad = 1
    path = tmp_path / "with_bad" / "copa.jsonl"
    path.parent.mkdir()
    path.write_text("\n".join(lines[:bad] + [spoil(lines[bad])] + lines[bad + 1:]) + "\n")
    clean = tmp_path / "without" / "copa.jsonl"  # the file without the bad line
    clean.parent.mkdir()
    clean.write_text("\n".join(lines[:bad] + lines[bad + 1:]) + "\n")
    where = rf"copa\.jsonl: record {bad} \(line {bad + 1}"

    # without skip: the error names the file, the record, its line and the field
    with pytest.raises(ValueError, match=where + pattern):
        import_logs("ford", path)

    skipped: list = []
    table = import_logs("ford", path, on_error="skip", skipped=skipped)
    expected = import_logs("ford", clean)
    assert expected.num_rows == 3
    assert table.num_rows + len(skipped) == len(lines)
    # the good records, as when the bad line is not there; the bad line keeps its index, so
    # the records after it keep their ids
    assert table.column("trajectory_id").to_pylist() == ["copa:0", "copa:2", "copa:3"]
    assert table.drop(["trajectory_id"]).equals(expected.drop(["trajectory_id"]))
    assert len(skipped) == 1
    (k,) = skipped
    assert (Path(k.source), k.record) == (path, bad)
    assert re.search(where + pattern, k.reason), k.reason

    # the CLI: the same rows, the bad record listed once with its reason
    out = tmp_path / "out.parquet"
    assert _main(monkeypatch, ["import", "ford", str(path), "-o", str(out),
                               "--on-error", "skip"]) == 0
    printed = capsys.readouterr().out
    assert "imported 3 trajectories" in printed and "skipped 1 record(s)" in printed
    assert pq.read_table(out).select(table.column_names).equals(table)
    listed = [json.loads(x) for x in _lines(Path(f"{out}.skipped.jsonl"))]
    assert len(listed) == 1
    assert (Path(listed[0]["source"]), listed[0]["row"]) == (path, bad)
    assert re.search(where + pattern, listed[0]["reason"])
    # without --on-error skip: an input error (exit 2) that says where
    assert _main(monkeypatch, ["import", "ford", str(path), "-o", str(tmp_path / "x.parquet")]
                 ) == 2
    assert re.search(where + pattern, capsys.readouterr().err)


# --- every format: rows + skips == records ----------------------------------------------------


def _json_object(name: str, index: int, spoil: Callable[[object], object]):
    """A JSON object file (``{key: record}``) with record ``index`` spoilt."""
    def make(src: Path, dst: Path) -> int:
        data = json.loads(src.read_text(encoding="utf-8"))
        key = list(data)[index]
        data[key] = spoil(data[key])
        dst.write_text(json.dumps(data), encoding="utf-8")
        return len(data)
    return name, make


def _json_list(name: str, index: int, spoil: Callable[[object], object]):
    """A JSON list file with record ``index`` spoilt."""
    def make(src: Path, dst: Path) -> int:
        data = json.loads(src.read_text(encoding="utf-8"))
        data[index] = spoil(data[index])
        dst.write_text(json.dumps(data), encoding="utf-8")
        return len(data)
    return name, make


def _jsonl_line(name: str, index: int, spoil: Callable[[str], str]):
    """A JSONL file (one record per line) with line ``index`` spoilt."""
    def make(src: Path, dst: Path) -> int:
        lines = _lines(src)
        lines[index] = spoil(lines[index])
        dst.write_text("\n".join(lines) + "\n", encoding="utf-8")
        return len(lines)
    return name, make


def _long_row(name: str, index: int, key: str, value: object):
    """A long-layout JSONL file (one row per node) with row ``index``'s ``key`` set to
    ``value``; its records are the distinct ``run`` values (the mapping's trajectory id)."""
    def make(src: Path, dst: Path) -> int:
        rows = [json.loads(x) for x in _lines(src)]
        rows[index][key] = value
        dst.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
        return len({r["run"] for r in rows})
    return name, make


def _set(key: object, value: object) -> Callable[[object], object]:
    def spoil(rec):
        rec = list(rec) if isinstance(rec, list) else dict(rec)
        rec[key] = value
        return rec
    return spoil


# (format, fixture file, the files to copy beside it, how one record is spoilt, options)
_AUDIT = [
    ("dylan", DATA / "dylan_math" / "intermediate_algebra_2193_24256_4_3.json", [],
     _json_object("gold_list", 1, _set(1, ["1"])), {}),
    ("dylan", DATA / "dylan_math" / "intermediate_algebra_2193_24256_4_3.json", [],
     _json_object("not_a_record", 2, lambda rec: "text"), {}),
    ("du", DATA / "du_gsm.json", [], _json_object("gold_list", 2, _set(1, [3])), {}),
    ("du", DATA / "du_mmlu.json", [], _json_object("no_histories", 0, _set(0, [])), {}),
    ("agora", DATA / "agora" / "gsm_result.json", [],
     _json_list("answer_list", 1, _set("answer", [12])), {}),
    ("chateval", DATA / "chateval" / "scores" / "pair_comparison_results.json", [],
     _json_list("no_evaluation", 1, _set("evaluation", [])), {}),
    ("ford", COPA, [], _jsonl_line("malformed_json", 2, lambda x: x[:-5]), {}),
    ("ford", COPA, [], _jsonl_line("P_not_list", 0, lambda x: json.dumps(
        {**json.loads(x), "P": "A"})), {}),
    ("ford", DATA / "ford" / "final" / "anli.jsonl", [],
     _jsonl_line("missing_R", 1, lambda x: json.dumps(_drop(json.loads(x), "R"))), {}),
    ("generic", DATA / "generic" / "nested.jsonl", ["nested.toml"],
     _jsonl_line("malformed_json", 1, lambda x: "{" + x), {"config": "nested.toml"}),
    ("generic", DATA / "generic" / "nested.jsonl", ["nested.toml"],
     _jsonl_line("turns_not_list", 2, lambda x: json.dumps({**json.loads(x), "turns": 5})),
     {"config": "nested.toml"}),
    ("generic", DATA / "generic" / "sc.jsonl", ["sc.toml", "sc_gold.jsonl"],
     _jsonl_line("samples_empty", 0, lambda x: json.dumps({**json.loads(x), "samples": []})),
     {"config": "sc.toml"}),
    ("generic", DATA / "generic" / "long.jsonl", ["long.toml"],
     _long_row("round_not_int", 3, "round", "two"), {"config": "long.toml"}),
]


@pytest.mark.parametrize(
    "fmt,fixture,beside,spoilt,options", _AUDIT,
    ids=[f"{c[0]}-{c[1].stem}-{c[3][0]}" for c in _AUDIT])
def test_every_format_gives_each_trajectory_one_row_or_one_skip(tmp_path, fmt, fixture,
                                                                beside, spoilt, options):
    _, make = spoilt
    folder = tmp_path / "in"
    folder.mkdir()
    for name in beside:
        shutil.copy(fixture.parent / name, folder / name)
    path = folder / fixture.name
    n_records = make(fixture, path)
    options = {k: folder / v for k, v in options.items()}
    clean = {r["trajectory_id"]: r for r in import_logs(fmt, fixture, **options).to_pylist()}
    assert len(clean) == n_records
    with pytest.raises(ValueError, match=r"record \d+"):
        import_logs(fmt, path, **options)
    skipped: list = []
    table = import_logs(fmt, path, on_error="skip", skipped=skipped, **options)
    assert table.num_rows + len(skipped) == n_records
    assert len(skipped) == 1 and skipped[0].record is not None  # one record, not the file
    assert Path(skipped[0].source) == path
    # the others are imported as from the unspoilt file, under the same ids
    rows = table.to_pylist()
    assert all(r == clean[r["trajectory_id"]] for r in rows)
    assert len({r["trajectory_id"] for r in rows}) == n_records - 1


def test_mad_skips_a_bad_debate_file_alone(tmp_path):
    """MAD holds one debate per file: a bad file is that debate's one skip record."""
    folder = tmp_path / "mad"
    shutil.copytree(DATA / "mad", folder)
    debates = sorted(p for p in folder.glob("*.json") if not p.name.endswith("-config.json"))
    bad = debates[1]
    obj = json.loads(bad.read_text(encoding="utf-8"))
    obj["players"] = []
    bad.write_text(json.dumps(obj), encoding="utf-8")
    clean = {r["trajectory_id"]: r for r in import_logs("mad", DATA / "mad").to_pylist()}
    skipped: list = []
    table = import_logs("mad", folder, on_error="skip", skipped=skipped)
    assert table.num_rows + len(skipped) == len(debates) == len(clean)
    assert [(Path(k.source), k.record) for k in skipped] == [(bad, None)]
    assert "missing field 'players'" in skipped[0].reason
    assert all(r == clean[r["trajectory_id"]] for r in table.to_pylist())


def test_generic_long_row_without_a_trajectory_leaves_the_file_out(tmp_path):
    """In the long layout a row that cannot be given to a trajectory (not JSON) could be a
    node of any of them: the whole file is left out, as one skip naming the line."""
    shutil.copy(DATA / "generic" / "long.toml", tmp_path / "long.toml")
    lines = _lines(DATA / "generic" / "long.jsonl")
    lines[4] = "{nope"
    path = tmp_path / "long.jsonl"
    path.write_text("\n".join(lines) + "\n")
    skipped: list = []
    table = import_logs("generic", path, on_error="skip", skipped=skipped,
                        config=tmp_path / "long.toml")
    assert table.num_rows == 0
    assert [(Path(k.source), k.record) for k in skipped] == [(path, None)]
    assert re.search(r"long\.jsonl: record 4 \(line 5\): malformed JSON", skipped[0].reason)
