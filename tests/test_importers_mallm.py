"""The MALLM importer (``fastuq.importers.mallm``): hand-written output files in the shape
MALLM's ``Scheduler.run_discussion`` dumps (tests/data/mallm), every expected value --
answers, agreement, final answer, flags and the UMAS graph from ``memory_ids`` -- worked out
by hand from the files."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from fastuq import cli
from fastuq.importers import detect_format, import_logs, import_mallm, log_files
from fastuq.io.schema import validate
from tests._umas_reference import umas_reference

MALLM = Path(__file__).parent / "data" / "mallm"
CANONICAL = ["trajectory_id", "question_id", "protocol", "source", "n_agents", "reference",
             "final_answer", "correct", "agreement", "answers", "texts", "flags", "question"]


def _rows(table: pa.Table) -> dict[str, dict]:
    return {r["trajectory_id"]: r for r in table.to_pylist()}


def test_mallm_memory_policy_discussions():
    t = import_mallm(MALLM)
    assert t.column_names == CANONICAL + ["agents", "predecessors", "agreed", "paradigm"]
    validate(t)  # the predecessors column lines up with the node columns
    rows = _rows(t)
    assert list(rows) == ["gpqa_gsm8k:ex-1", "gpqa_gsm8k:ex-2", "older_release:old-1"]
    r = rows["gpqa_gsm8k:ex-1"]
    assert (r["protocol"], r["source"], r["n_agents"], r["paradigm"]) == \
        ("debate", "mallm", 3, "memory")
    assert r["agents"] == ["Botanist", "Chemist", "Teacher"]  # personas' order
    # turn 1: the draft "B", the improvement "(C) Nitrogen", feedback (no solution);
    # turn 2: "B", "B", "Final Solution: B"
    assert r["answers"] == [["B", "C", None], ["B", "B", "B"]]
    assert r["agreement"] == [1 / 3, 1.0]  # modal count over the team of 3
    assert r["texts"][0][2] == "Check which gas the leaves take in, not which they release."
    assert (r["final_answer"], r["reference"], r["correct"]) == ("B", "B", True)
    # memory_ids: turn 1 reads only its own turn (ids 0, [0], [0, 1]): no edges, flagged;
    # turn 2: agent 0 read 0 (its own), 1, 2 -> [1, 2]; agent 1 read 0, 1 (own), 2 and 3
    # (this turn) -> [0, 2]; agent 2 read 1, 2 (own), 3, 4 (this turn) -> [1]
    assert r["predecessors"] == [[[], [], []], [[1, 2], [0, 2], [1]]]
    assert r["flags"] == ["same_turn_reads"]
    assert r["agreed"] == [[None, False, False], [False, True, True]]
    assert r["question"].startswith("Which gas do plants take in")
    # the decision came after agent 1 of turn 2: agent 2's node is null in every column
    r = rows["gpqa_gsm8k:ex-2"]
    assert r["answers"] == [["18", "16", "18"], ["18", "18", None]]
    assert r["agreement"] == [2 / 3, 2 / 3]
    assert r["predecessors"] == [[[], [], []], [[1, 2], [0, 2], None]]
    assert r["texts"][1][2] is None and r["agreed"][1][2] is None
    assert (r["final_answer"], r["reference"], r["correct"]) == ("18", "18", True)


def test_mallm_older_release_spellings_and_undecided():
    # text / extracted_draft instead of message / solution, "answer": null, no personas
    r = _rows(import_mallm(MALLM / "older_release.json"))["older_release:old-1"]
    assert r["agents"] == ["Biologist", "Diver"]  # the order they first speak
    assert r["answers"] == [["A", "B"], ["B", "A"], ["A", "A"]]
    assert r["agreement"] == [0.5, 0.5, 1.0]
    # turn 3: agent 0 read 1 (turn 1: too old), 2 (own), 3 -> [1]; agent 1 read 2 -> [0],
    # 3 (own), 4 (this turn)
    assert r["predecessors"] == [[[], []], [[1], [0]], [[1], [0]]]
    assert r["flags"] == ["same_turn_reads", "earlier_turn_reads", "undecided"]
    # no decision: the last round's majority, A
    assert (r["final_answer"], r["reference"], r["correct"]) == ("A", "A", True)


def _write(tmp_path: Path, records: list[dict], name: str = "run.json") -> Path:
    path = tmp_path / name
    path.write_text(json.dumps(records))
    return path


def _example(**change) -> dict:
    rec = json.loads((MALLM / "gpqa_gsm8k.json").read_text())[1]
    rec.update(change)
    return rec


def test_mallm_agent_missing_from_personas_gets_the_next_slot(tmp_path):
    rec = _example()
    rec["globalMemory"][1].update(agent_id="judge-9", persona="Judge")  # "16", turn 1
    r = import_mallm(_write(tmp_path, [rec])).to_pylist()[0]
    assert (r["n_agents"], r["agents"]) == (4, ["Botanist", "Chemist", "Teacher", "Judge"])
    assert r["answers"] == [["18", None, "18", "16"], ["18", "18", None, None]]
    assert r["agreement"] == [2 / 4, 2 / 4]
    # turn 2: agent 0 read 0 (own), 1 (the judge, slot 3), 2 -> [2, 3]; agent 1 read 0, 1,
    # 2 and 3 (this turn) -> [0, 2, 3]
    assert r["predecessors"][1] == [[2, 3], [0, 2, 3], None, None]
    assert r["flags"] == ["agent_not_in_personas", "same_turn_reads"]


def test_mallm_several_messages_per_turn_and_failed_decision(tmp_path):
    rec = _example(decisionSuccess=False)
    extra = dict(rec["globalMemory"][3], message_id=5, message="On reflection, 17.",
                 solution="17", memory_ids=[3, 4])
    rec["globalMemory"].append(extra)  # agent 0 speaks twice in turn 2: its last counts
    r = import_mallm(_write(tmp_path, [rec])).to_pylist()[0]
    assert r["answers"] == [["18", "16", "18"], ["17", "18", None]]
    assert r["agreement"] == [2 / 3, 1 / 3]
    # the later message read 3 (its own agent) and 4 (this turn): no edge of turn 1 left
    assert r["predecessors"][1] == [[], [0, 2], None]
    assert r["flags"] == ["several_messages_per_turn", "same_turn_reads", "undecided"]
    assert r["final_answer"] == "18"  # finalAnswer still given


@pytest.mark.parametrize("change,message", [
    (lambda r: r["globalMemory"][4].update(memory_ids=[0, 9]),
     r"run\.json: record 0 \('ex-2'\): globalMemory\[4\] \(turn 2\): field 'memory_ids' "
     r"names message 9, which globalMemory does not hold"),
    (lambda r: [m.update(turn=3) for m in r["globalMemory"] if m["turn"] == 2],
     r"record 0 \('ex-2'\): field 'turn' of globalMemory skips turns \(found \[1, 3\]\)"),
    (lambda r: r["globalMemory"][2].update(turn="1"),
     r"record 0 \('ex-2'\): globalMemory\[2\]: field 'turn' must be an integer"),
    (lambda r: r["globalMemory"][1].update(message_id=0),
     r"globalMemory\[1\] \(turn 1\): field 'message_id' 0 repeats"),
    (lambda r: r["globalMemory"][1].update(solution=16),
     r"globalMemory\[1\] \(turn 1\): field 'solution' must be a string or null, got int"),
    (lambda r: r.update(globalMemory=[]),
     r"record 0 \('ex-2'\): field 'globalMemory' must be a non-empty list of messages"),
])
def test_mallm_bad_records_name_record_round_and_field(tmp_path, change, message):
    rec = _example()
    change(rec)
    with pytest.raises(ValueError, match=message):
        import_mallm(_write(tmp_path, [rec]))
    skipped = []
    t = import_logs("mallm", _write(tmp_path, [rec, _example(exampleId="ok")]),
                    on_error="skip", skipped=skipped)
    assert t.column("trajectory_id").to_pylist() == ["run:ok"]
    assert [s.record for s in skipped] == [0]


def test_mallm_graph_reaches_umas(tmp_path):
    # node confidences joined by hand: UMAS then reads the memory_ids graph, not the
    # debate default (every other agent), and equals the plain-Python reference on it
    t = import_mallm(MALLM / "gpqa_gsm8k.json")
    conf = [[[-0.2, -1.5, -0.9], [-0.1, -0.4, -0.3]],
            [[-0.3, -2.0, -0.5], [-0.2, -0.6, None]]]
    t = t.append_column("seq_logprob", pa.array(conf, pa.list_(pa.list_(pa.float64()))))
    got = fastuq_score(t)
    preds = t.column("predecessors").to_pylist()
    want = [umas_reference(c, p, n_agents=3)["umas"] for c, p in zip(conf, preds, strict=True)]
    default = [umas_reference(c, None, n_agents=3)["umas"] for c in conf]
    np.testing.assert_allclose(got, want, rtol=1e-10, atol=0)  # float64, any device
    assert abs(want[0] - default[0]) > 1e-3  # the graph changes the score


def fastuq_score(table: pa.Table) -> list[float]:
    """UMAS of ``table`` through the public scoring API, in float64 on any device."""
    import fastuq

    return fastuq.score(table, "umas", dtype="float64").column("umas").to_pylist()


def test_mallm_detected_and_imported_from_the_command_line(tmp_path, monkeypatch, capsys):
    found, first = detect_format(MALLM)
    assert (found, first) == ("mallm", MALLM / "gpqa_gsm8k.json")
    assert log_files("mallm", MALLM) == [MALLM / "gpqa_gsm8k.json",
                                         MALLM / "older_release.json"]
    assert import_logs("auto", MALLM).equals(import_mallm(MALLM))
    out = tmp_path / "m.parquet"
    monkeypatch.setitem(cli.COMMANDS, "import", "fastuq.cli.import_logs")
    assert cli.main(["import", str(MALLM), "-o", str(out)]) == 0
    text = capsys.readouterr().out
    assert f"detected format: mallm (from {MALLM / 'gpqa_gsm8k.json'})" in text
    assert "imported 3 trajectories" in text
    assert pq.read_table(out).column("predecessors").to_pylist() == \
        import_mallm(MALLM).column("predecessors").to_pylist()
    assert cli.main(["import", "mallm", str(MALLM), "-o", str(out)]) == 0
