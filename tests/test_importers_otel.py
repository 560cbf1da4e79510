"""The OpenTelemetry importer (``fastuq.importers.otel``): hand-written OTLP JSON exports
(tests/data/otel) of GenAI-convention spans (v1.37.0 shapes) and OpenInference spans, every
expected value -- trajectories, agents, rounds, texts, answers, agreement and the graph from
span parents and links -- worked out by hand from the files."""

from __future__ import annotations

import json
from pathlib import Path

import pyarrow.parquet as pq
import pytest

from fastuq import cli
from fastuq.importers import DETECTABLE, detect_format, import_logs, import_otel, log_files
from fastuq.importers.otel import GENAI_SEMCONV_VERSION
from fastuq.io.schema import validate

OTEL = Path(__file__).parent / "data" / "otel"
GENAI = OTEL / "genai_debate.json"
OPENINFERENCE = OTEL / "openinference_agents.jsonl"


def _rows(table) -> dict[str, dict]:
    return {r["trajectory_id"]: r for r in table.to_pylist()}


def test_genai_conversation_and_root_span_trajectories():
    t = import_otel(GENAI)
    assert t.column_names[-2:] == ["agents", "predecessors"]
    validate(t)
    rows = _rows(t)
    # trace 1 carries gen_ai.conversation.id "conv-7"; trace 2 none: its root span names it
    assert list(rows) == ["genai_debate:conv-7",
                          "genai_debate:0af7651916cd43dd8448eb211c80319c/b000000000000001"]
    r = rows["genai_debate:conv-7"]
    assert (r["protocol"], r["source"], r["n_agents"]) == ("debate", "otel", 3)
    assert r["agents"] == ["Solver A", "Solver B", "Solver C"]  # by start time
    assert r["question"] == ("A baker sells 3 trays of 6 muffins. How many muffins does she "
                             "sell?")  # the user part of the first agent's input messages
    # Solver C's first agent span has no output messages: its last chat span (by end time)
    assert r["texts"][0][2] == "Six muffins a tray, three trays. The answer is 18."
    assert r["answers"] == [["18", "16", "18"], ["18", "18", "17"]]
    assert r["agreement"] == [2 / 3, 2 / 3]
    assert r["final_answer"] == "18"  # the last round's majority
    # no gold in a trace: reference null, correct false until one is joined
    assert (r["reference"], r["correct"]) == (None, False)
    # round 0: parents are the non-agent root span (no reads: default graph); round 1: A
    # links to B's and C's round-0 spans, B to A's, C to none
    assert r["predecessors"] == [[None, None, None], [[1, 2], [0], None]]
    assert r["flags"] == []
    r = rows["genai_debate:0af7651916cd43dd8448eb211c80319c/b000000000000001"]
    assert r["agents"] == ["Planner", "Critic"]
    assert r["answers"] == [["B", "A"], ["B", None]]
    assert r["agreement"] == [0.5, 0.5]
    assert r["final_answer"] == "B"
    # the critic is a child of the planner's span of its own round (not an edge of the
    # round-to-round graph: flagged); in round 1 it also links to the planner's round-0 span
    assert r["predecessors"] == [[None, []], [None, [0]]]
    # the critic's round-1 span has no output and no model span below it
    assert r["texts"][1][1] is None
    assert r["flags"] == ["same_round_reads", "no_output"]


def test_openinference_spans_over_two_export_lines():
    r = _rows(import_otel(OPENINFERENCE))["openinference_agents:s-1"]  # session.id
    assert r["agents"] == ["Alice", "Bob"]
    assert r["question"] == "Is 91 prime? (A) yes (B) no"  # input.value
    # Alice's round-0 AGENT span has no output.value: its LLM span's output message
    assert r["texts"][0] == ["91 = 7 x 13. The answer is (B).",
                             "It has no small factor. The answer is (A)."]
    assert r["answers"] == [["B", "A"], ["B", "B"]]
    assert r["agreement"] == [0.5, 1.0]
    # Alice links to Bob's round-0 span; Bob to Alice's and his own (left out)
    assert r["predecessors"] == [[None, None], [[1], [0]]]
    assert (r["final_answer"], r["flags"]) == ("B", [])


def _export(spans: list[dict]) -> dict:
    return {"resourceSpans": [{"resource": {}, "scopeSpans": [{"scope": {}, "spans": spans}]}]}


def _agent_span(**attrs) -> dict:
    base = {"gen_ai.operation.name": "invoke_agent", "gen_ai.agent.name": "A"}
    base.update(attrs)
    return {"traceId": "ab" * 16, "spanId": "cd" * 8, "name": "invoke_agent A",
            "startTimeUnixNano": "1", "attributes": [
                {"key": k, "value": v if isinstance(v, dict) else {"stringValue": v}}
                for k, v in base.items()]}


@pytest.mark.parametrize("span,message", [
    (_agent_span(**{"gen_ai.completion.0.content": "18"}),
     r"t\.json: resourceSpans\[0\]\.scopeSpans\[0\]\.spans\[0\] \(span cdcdcdcdcdcdcdcd, "
     r"'invoke_agent A'\): attribute 'gen_ai\.completion\.0\.content' is the GenAI "
     r"conventions' content shape before v1\.37\.0"),
    (dict(_agent_span(), events=[{"name": "gen_ai.choice"}]),
     r"event 'gen_ai\.choice' is the GenAI conventions' content shape before v1\.37\.0"),
    (_agent_span(**{"gen_ai.output.messages": '{"role": "assistant"}'}),
     r"attribute 'gen_ai\.output\.messages': must be the v1\.37\.0 list of messages"),
    (_agent_span(**{"gen_ai.output.messages": '[{"role": "assistant", "parts": '
                                              '[{"type": "text"}]}]'}),
     r"message 0 part 0: a text part needs a string 'content' \(trajectory "
     r"t:abababababababababababababababab/cdcdcdcdcdcdcdcd, round 0, agent 0, field texts\)"),
    (_agent_span(**{"gen_ai.agent.name": {"fooValue": 1}}),
     r"attribute 'gen_ai\.agent\.name': unknown AnyValue kind 'fooValue'"),
    (_agent_span(**{"gen_ai.agent.name": {"intValue": "x1"}}),
     r"unknown AnyValue kind 'intValue' \(or a str value it cannot hold\)"),
])
def test_unknown_shapes_are_refused_naming_file_span_and_attribute(tmp_path, span, message):
    path = tmp_path / "t.json"
    path.write_text(json.dumps(_export([span])))
    with pytest.raises(ValueError, match=message):
        import_otel(path)


def test_a_trace_without_agent_spans_and_an_agent_without_identity(tmp_path):
    chat = _agent_span(**{"gen_ai.operation.name": "chat"})
    path = tmp_path / "t.json"
    path.write_text(json.dumps(_export([chat])))
    with pytest.raises(ValueError, match=r"t\.json: no agent span \(gen_ai\.operation\.name "
                                         r"'invoke_agent' or openinference\.span\.kind "
                                         r"'AGENT'\) among its 1 spans"):
        import_otel(path)
    nameless = _agent_span()
    nameless["attributes"] = nameless["attributes"][:1]
    path.write_text(json.dumps(_export([nameless])))
    with pytest.raises(ValueError, match=r"an agent span needs 'gen_ai\.agent\.id' or "
                                         r"'gen_ai\.agent\.name'"):
        import_otel(path)
    old = tmp_path / "old.json"
    old.write_text(json.dumps({"resourceSpans": [{"instrumentationLibrarySpans": []}]}))
    with pytest.raises(ValueError, match=r"'instrumentationLibrarySpans' is OTLP before 1\.0"):
        import_otel(old)


def test_otel_detected_dispatched_and_imported_from_the_command_line(tmp_path, monkeypatch,
                                                                     capsys):
    assert GENAI_SEMCONV_VERSION == "1.37.0"
    assert "otel" in DETECTABLE and "mallm" in DETECTABLE
    assert detect_format(GENAI) == ("otel", GENAI)
    assert detect_format(OPENINFERENCE) == ("otel", OPENINFERENCE)
    assert log_files("otel", OTEL) == [GENAI, OPENINFERENCE]
    assert import_logs("auto", OTEL).equals(import_otel(OTEL))
    out = tmp_path / "o.parquet"
    monkeypatch.setitem(cli.COMMANDS, "import", "fastuq.cli.import_logs")
    assert cli.main(["import", str(OTEL), "-o", str(out)]) == 0
    text = capsys.readouterr().out
    assert f"detected format: otel (from {GENAI})" in text
    assert "imported 3 trajectories" in text
    assert pq.read_table(out).column("trajectory_id").to_pylist() == [
        "genai_debate:conv-7", "genai_debate:0af7651916cd43dd8448eb211c80319c/b000000000000001",
        "openinference_agents:s-1"]
