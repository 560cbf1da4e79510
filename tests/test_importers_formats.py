"""The importers of FORD, LLM-Agora, ChatEval, MAD and the generic mapping, format detection
and ``fastuq import`` without a format: hand-written files in each format (tests/data/ford,
agora, chateval, mad, generic), every expected value worked out by hand from the file."""

from __future__ import annotations

import json
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from fastuq import cli
from fastuq.cli import import_logs as cli_import
from fastuq.importers import (
    DETECTABLE,
    FORMATS,
    detect_format,
    import_agora,
    import_chateval,
    import_ford,
    import_generic,
    import_logs,
    import_mad,
    load_mapping,
    log_files,
)
from fastuq.importers.chateval import read_references, verdict
from fastuq.importers.common import label_answer, short_label

DATA = Path(__file__).parent / "data"
FORD = DATA / "ford"
AGORA = DATA / "agora"
CHATEVAL = DATA / "chateval"
MAD = DATA / "mad"
GENERIC = DATA / "generic"
CANONICAL = ["trajectory_id", "question_id", "protocol", "source", "n_agents", "reference",
             "final_answer", "correct", "agreement", "answers", "texts", "flags"]


def _rows(table: pa.Table) -> dict[str, dict]:
    return {r["trajectory_id"]: r for r in table.to_pylist()}


def _write(path: Path, text: str) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    return path


def _jsonl(path: Path, records: list[dict]) -> Path:
    return _write(path, "".join(json.dumps(r) + "\n" for r in records))


# --- short labels ------------------------------------------------------------------------------


@pytest.mark.parametrize("value,expected", [
    ("B", "B"), ("b", "B"), ("(C)", "C"), ("D)", "D"), ("A.", "A"), (" **B** ", "B"),
    ("Yes", "yes"), ("NO.", "no"), ("True", "true"), ("TIE", "tie"), ('"yes"', "yes"),
    ("None", None), ("null", None), ("", None), (None, None), ("n/a", None),
    (8, "8"), (2.5, "2.5"), ("gpt35", "gpt35"), ("Paris", "Paris"),
    (r"\frac{1}{2}", r"\frac{1}{2}"),
])
def test_short_label(value, expected):
    assert short_label(value) == expected


def test_label_answer_follows_the_gold():
    # a letter gold reads letters only; nothing else falls back to the text
    assert label_answer("I pick (B) here.", "choice") == "B"
    assert label_answer("I agree.", "choice") is None
    # a yes/no gold: the first yes or no word when extraction finds another kind of answer
    assert label_answer("No: 91 = 7 x 13.", None, "no") == "no"
    assert label_answer("Yes, 91 is prime.", None, "no") == "yes"
    assert label_answer("The answer is no.", None, "yes") == "no"
    assert label_answer("91 is 7 times 13.", None, "no") is None
    # a short text with no extractable answer is the label itself (gold neither letter nor
    # number nor yes/no)
    assert label_answer("Paris", None, "Paris") == "Paris"
    assert label_answer("Paris", "number", "7") is None


# --- FORD --------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def ford() -> dict[str, dict]:
    return _rows(import_ford(FORD))


def test_ford_schema_and_order():
    t = import_ford(FORD)
    assert t.column_names == CANONICAL + ["question", "agents"]
    assert t.schema.field("agents").type == pa.list_(pa.string())
    # folder: *.jsonl sorted by path; ids <folder>/<stem>:<line index>
    assert t.column("trajectory_id").to_pylist() == [
        "final/anli:0", "final/anli:1",
        "final/copa:0", "final/copa:1", "final/copa:2", "final/copa:3",
        "round0/copa_agreed:0", "round0/copa_agreed:1", "table/piqa_candidate:0"]
    # a two-agent turn-taking debate (and the round table) is a debate; FORD is its source
    assert set(t.column("protocol").to_pylist()) == {"debate"}
    assert set(t.column("source").to_pylist()) == {"ford"}


def test_ford_round0_agreed(ford):
    r = ford["round0/copa_agreed:0"]  # P = [None, None, B, B]: agreed at round 0
    assert (r["n_agents"], r["reference"], r["answers"], r["agreement"]) == \
        (2, "B", [["B", "B"]], [1.0])
    assert (r["final_answer"], r["correct"], r["flags"]) == ("B", True, [])
    assert r["agents"] == ["chatgpt", "davinci"]
    assert r["question"] == ("The kettle whistled. What was the cause?\n"
                             "(A) The lid was missing. (B) The water boiled.")
    assert r["texts"] == [["Steam escaping through the spout makes the whistle, so boiling "
                           "water is the cause.", "A kettle whistles once its water boils and "
                           "steam is pushed through the spout."]]
    r = ford["round0/copa_agreed:1"]  # StrategyQA style: gold "no", P "No" and "no" agree
    assert (r["reference"], r["answers"], r["agreement"], r["final_answer"], r["correct"]) == \
        ("no", [["no", "no"]], [1.0], "no", True)


def test_ford_debates_to_the_end(ford):
    # A, B, B: davinci's B convinces chatgpt at turn 2; round 1 is partial
    r = ford["final/copa:0"]
    assert r["answers"] == [["A", "B"], ["B", None]]
    assert [[t is not None for t in row] for row in r["texts"]] == [[True, True], [True, False]]
    assert r["agreement"] == [0.5, 0.5]
    assert (r["final_answer"], r["reference"], r["correct"]) == ("B", "B", True)  # B twice
    # an unparseable first turn (P null): no vote; the team agrees on the wrong A
    r = ford["final/copa:1"]
    assert r["answers"] == [[None, "A"], ["A", None]]
    assert r["agreement"] == [0.5, 0.5]
    assert (r["final_answer"], r["correct"], r["flags"]) == ("A", False, [])
    # no agreement in 6 turns: A B A B A B, a 3-3 tie goes to the answer stated first
    r = ford["final/copa:2"]
    assert r["answers"] == [["A", "B"]] * 3
    assert r["agreement"] == [0.5, 0.5, 0.5]
    assert (r["final_answer"], r["reference"], r["correct"]) == ("A", "A", True)
    # "None" twice in round 0: agreement 0 and the flag; then both say C
    r = ford["final/copa:3"]
    assert r["answers"] == [[None, None], ["C", "C"]]
    assert r["agreement"] == [0.0, 1.0]
    assert (r["final_answer"], r["correct"], r["flags"]) == ("C", True, ["unparseable_round"])


def test_ford_agent_renamed_mid_debate_keeps_slot_order(ford):
    # FORD's M names the second debater "davinci" in round 0 and "chatgpt0301" afterwards:
    # the turns still alternate, so turn j is slot j % 2; the names stay metadata
    r = ford["final/anli:0"]
    assert (r["n_agents"], r["agents"], r["flags"]) == (2, ["chatgpt", "davinci"],
                                                        ["agent_renamed"])
    assert r["answers"] == [["A", "B"], ["A", "B"], ["A", "A"]]
    assert r["texts"][1][1].startswith("Sun all day")  # turn 3, the renamed agent's
    assert r["agreement"] == [0.5, 0.5, 1.0]
    # FORD's rule: A four times, B twice
    assert (r["final_answer"], r["reference"], r["correct"]) == ("A", "A", True)


def test_ford_final_answer_is_fords_vote_over_all_turns_not_the_agreed_answer(ford):
    # turns A, B, A, C, C: the debate stops on the agreeing C, C, but every turn votes
    # (process_final.py: max(candidates, key=candidates.count)): A 2, C 2, B 1; the tie goes
    # to A, stated first, so FORD counts this debate wrong
    r = ford["final/anli:1"]
    assert r["answers"] == [["A", "B"], ["A", "C"], ["C", None]]
    assert (r["final_answer"], r["reference"], r["correct"], r["flags"]) == \
        ("A", "C", False, [])


def test_ford_round_table(ford):
    # three agents, R[2 + k] = agent k's messages; turns: chatgpt B, davinci None, gpt4 B,
    # chatgpt A (its second message)
    r = ford["table/piqa_candidate:0"]
    assert (r["n_agents"], r["agents"]) == (3, ["chatgpt", "davinci", "gpt4"])
    assert r["answers"] == [["B", None, "B"], ["A", None, None]]
    assert r["texts"][1][0] == "User3 convinced me: a sealed bag keeps the moisture in."
    assert r["texts"][0][1] == "Bread goes stale either way"
    assert r["agreement"] == [2 / 3, 1 / 3]
    # all turns: B twice, A once
    assert (r["final_answer"], r["reference"], r["correct"]) == ("B", "A", False)


def test_ford_processes_give_the_same_table():
    assert import_ford(FORD, processes=2).equals(import_ford(FORD))


def test_trajectory_ids_name_files_below_their_shared_folder():
    # one file: its stem; files of two folders: their paths below the shared folder
    t = import_ford(FORD / "final" / "copa.jsonl")
    assert t.column("trajectory_id").to_pylist() == [f"copa:{i}" for i in range(4)]
    both = import_chateval([CHATEVAL / "scores" / "pair_comparison_results.json",
                            CHATEVAL / "reversed"])
    assert both.column("trajectory_id").to_pylist() == [
        "scores/pair_comparison_results:0", "scores/pair_comparison_results:1",
        "scores/pair_comparison_results:2", "reversed/pair_comparison_results:0",
        "reversed/pair_comparison_results:1"]
    with pytest.raises(ValueError, match=r"trajectory_id 'copa:0' appears twice \(trajectories "
                                         r"0 and 4 of the import\): a file given twice"):
        import_ford([FORD / "final" / "copa.jsonl"] * 2)


def _ford_record(**changes) -> dict:
    rec = {"Q": "Q1?", "A": "(A)", "O": "(A) x (B) y",
           "R": [{"role": "system", "content": "s"}, {"role": "user", "content": "q"},
                 {"role": "assistant", "content": "a"}, {"role": "user", "content": "b"}],
           "P": ["None", "None", "A", "B"], "M": ["system", "system", "m1", "m2"]}
    rec.update(changes)
    return rec


def test_ford_bad_input_names_file_record_and_field(tmp_path):
    ok = _ford_record()
    cases = [
        (_ford_record(P=["None", "None", "A", "B", "A"],
                      M=["system", "system", "m1", "m2", "m1"]),
         r"record 1 \(line 2, 'Q1\?'\): R has 4 entries but P has 5"),
        (_ford_record(M=["system", "system", "m1", "m1b"], P=["None", "None", "A", "B"],
                      R=_ford_record()["R"] + [{"role": "assistant", "content": "c"}]),
         r"record 1 .*R has 5 entries but P has 4"),
        ({k: v for k, v in ok.items() if k != "A"}, r"record 1 .*missing field 'A'"),
        (_ford_record(P=["None", "None", "A", 2]), r"record 1 .*P\[3\] must be a string"),
        (_ford_record(P=["None", "None", "A"], R=_ford_record()["R"][:3],
                      M=["system", "system", "m1"]),
         r"record 1 .*1 turns for 2 agents"),
    ]
    for k, (bad, pattern) in enumerate(cases):
        path = _jsonl(tmp_path / f"bad{k}.jsonl", [ok, bad])
        with pytest.raises(ValueError, match=rf"bad{k}\.jsonl: " + pattern):
            import_ford(path)
    # M must still be a list of names aligned with P
    seq = _ford_record(M=["system", "system", "m1"])
    path = _jsonl(tmp_path / "order.jsonl", [seq])
    with pytest.raises(ValueError, match=r"record 0 .*M must be a list of model names aligned "
                                         r"with P"):
        import_ford(path)
    # a name that changes for a slot (or swaps with the other's) is metadata: slot order
    swapped = _ford_record(P=["None", "None", "A", "B", "A"],
                           M=["system", "system", "m1", "m2", "m2"],
                           R=_ford_record()["R"] + [{"role": "assistant", "content": "c"}])
    row = import_ford(_jsonl(tmp_path / "swapped.jsonl", [swapped])).to_pylist()[0]
    assert (row["answers"], row["agents"], row["flags"]) == \
        ([["A", "B"], ["A", None]], ["m1", "m2"], ["agent_renamed"])
    path = _write(tmp_path / "broken.jsonl", json.dumps(ok) + "\n{nope\n")
    with pytest.raises(ValueError, match=r"broken\.jsonl: record 1 \(line 2\): malformed JSON"):
        import_ford(path)


# --- LLM-Agora ---------------------------------------------------------------------------------


def test_agora_results():
    t = import_agora(AGORA)  # the folder's *_result*.json; gsm_performance.json is skipped
    assert t.column_names == CANONICAL + ["question", "agents"]
    rows = _rows(t)
    assert list(rows) == ["gsm_result:0", "gsm_result:1", "mmlu_result_cot:0"]
    r = rows["gsm_result:0"]  # GSM8K gold after ####; "question." states no number
    assert (r["protocol"], r["n_agents"], r["agents"]) == \
        ("debate", 3, ["llama", "wizardlm", "orca"])
    assert r["reference"] == "12"
    assert r["answers"] == [["12", "10", None], ["12", "12", "12"], ["12", "12", "12"]]
    assert r["agreement"] == [1 / 3, 1.0, 1.0]
    assert (r["final_answer"], r["correct"], r["flags"]) == ("12", True, [])
    # a null response and a model with one round fewer; the last round ties 8-7, and the
    # tie goes to the first model
    r = rows["gsm_result:1"]
    assert r["reference"] == "7"  # the gold is the JSON number 7
    assert r["answers"] == [["7", "7", "8"], ["8", None, "7"], ["8", "7", None]]
    assert r["texts"][1][1] is None and r["texts"][2][2] is None
    assert r["agreement"] == [2 / 3, 1 / 3, 1 / 3]
    assert (r["final_answer"], r["correct"], r["flags"]) == ("8", False, ["ragged_rounds"])
    # a letter gold: letters only. MMLU/mmlu_inference.py writes [round-1 response, round-2
    # PROMPT, round-2 response] per model: the prompts (template + summary + assistant tag)
    # are dropped, so two rounds remain, read from the first and third entries
    r = rows["mmlu_result_cot:0"]
    assert r["answers"] == [["C", "B", "A"], ["C", "C", "C"]]
    assert r["texts"][1] == ["The answer is (C).", "The answer is (C).",
                             "Jupiter, the gas giant: (C)"]
    assert r["agreement"] == [1 / 3, 1.0]
    assert (r["final_answer"], r["reference"], r["correct"], r["flags"]) == \
        ("C", "C", True, [])


def _agora_prompt(tag: str) -> str:
    return ("SYSTEM: be helpful.\nUSER: ['Here is a summary of responses from other agents: "
            f"all say (C).']\n{tag}")


def test_agora_mmlu_prompts_are_not_rounds(tmp_path):
    # three agents, [response, prompt, response] each, with three of the templates' tags
    # (trailing whitespace as the endpoints leave it): two rounds, the prompts dropped
    rec = {"question": "Q?: A) x, B) y, C) z, D) w", "answer": "C", "agent_response": {
        "llama": ["I think (A)", _agora_prompt("ASSISTANT: "), "Now (C)"],
        "orca": ["(B)", _agora_prompt("\n### Response:\n"), "(C)"],
        "koala": ["(C)", _agora_prompt("GPT:\n"), "(D)"]}}
    path = _write(tmp_path / "mmlu_result.json", json.dumps([rec]))
    r = import_agora(path).to_pylist()[0]
    assert r["answers"] == [["A", "B", "C"], ["C", "C", "D"]]
    assert r["texts"] == [["I think (A)", "(B)", "(C)"], ["Now (C)", "(C)", "(D)"]]
    assert (r["final_answer"], r["correct"]) == ("C", True)
    # GSM8K/Math shape: three responses (a summary echoed without an assistant tag at its
    # end is a response): three rounds
    gsm = {"question": "Q?", "answer": "#### 4", "agent_response": {
        "m1": ["\\boxed{4}", "4\nUSER: ['Here is a summary of responses from other agents: 4']",
               "\\boxed{4}"],
        "m2": ["\\boxed{3}", "\\boxed{4}", "\\boxed{4}"]}}
    path = _write(tmp_path / "gsm_result.json", json.dumps([gsm]))
    assert import_agora(path).to_pylist()[0]["answers"] == \
        [["4", "3"], ["4", "4"], ["4", "4"]]


@pytest.mark.parametrize("lists,where", [
    # one model's middle entry is a response, the others' prompts
    ({"a": ["(A)", "P", "(C)"], "b": ["(B)", "(B)", "(C)"]}, r"agent_response\['b'\]\[1\] is "
     r"not a prompt"),
    # a prompt as the last entry
    ({"a": ["(A)", "(B)", "P"], "b": ["(B)", "(B)", "(C)"]}, r"agent_response\['a'\]\[2\] is "
     r"a prompt"),
    # prompts in the middle, but a list of four entries
    ({"a": ["(A)", "P", "(C)", "(C)"], "b": ["(B)", "P", "(C)"]}, r"agent_response\['a'\] "
     r"has 4 entries"),
])
def test_agora_misplaced_prompts_raise(tmp_path, lists, where):
    lists = {m: [_agora_prompt("ASSISTANT: ") if t == "P" else t for t in ts]
             for m, ts in lists.items()}
    rec = {"question": "Q?", "answer": "C", "agent_response": lists}
    path = _write(tmp_path / "mmlu_result.json", json.dumps([{**rec}, rec]))
    with pytest.raises(ValueError, match=r"mmlu_result\.json: record 0 \('Q\?'\): " + where):
        import_agora(path)


def test_agora_bad_input(tmp_path):
    path = _write(tmp_path / "x_result.json", json.dumps({"a": 1}))
    with pytest.raises(ValueError, match=r"x_result\.json: expected a JSON list of LLM-Agora"):
        import_agora(path)
    rec = {"question": "Q?", "agent_response": {"m": ["\\boxed{1}"]}, "answer": "1"}
    path = _write(tmp_path / "y_result.json",
                  json.dumps([rec, {k: v for k, v in rec.items() if k != "answer"}]))
    with pytest.raises(ValueError, match=r"y_result\.json: record 1 \('Q\?'\): missing field "
                                         r"'answer'"):
        import_agora(path)
    path = _write(tmp_path / "z_result.json",
                  json.dumps([dict(rec, agent_response={"m": ["ok", 3]})]))
    with pytest.raises(ValueError, match=r"record 0 .*agent_response\['m'\]\[1\] must be a "
                                         r"string or null"):
        import_agora(path)


# --- ChatEval ----------------------------------------------------------------------------------


@pytest.mark.parametrize("text,expected", [
    ("Evidence.\nThe score of Assistant 1: 8\nThe score of Assistant 2: 6", "1"),
    ("The score of Assistant 1: 7\nThe score of Assistant 2: 7.0", "tie"),
    ("the score of assistant 1: **6**\nThe score of Assistant 2: 9", "2"),
    ("Assistant 2", "2"), ("I prefer Assistant 1.", "1"), ("Tie", "tie"),
    ("Assistant 1 and Assistant 2 are equally good.", None),
    ("I need more time.", None), ("", None), (None, None),
])
def test_chateval_verdict(text, expected):
    assert verdict(text) == expected


def test_chateval_scores_with_references():
    results = CHATEVAL / "scores" / "pair_comparison_results.json"
    t = import_chateval(results, references=CHATEVAL / "scores" / "test.json")
    assert t.column_names == CANONICAL + ["question", "agents"]
    rows = _rows(t)
    r = rows["pair_comparison_results:0"]
    assert (r["protocol"], r["source"], r["n_agents"]) == ("debate", "chateval", 3)
    assert r["agents"] == ["General Public", "Critic", "News Author"]
    # 8-6 for gpt35, 7-7, 6-9 for vicuna: one vote each; summed 21 vs 22: vicuna
    assert r["answers"] == [["gpt35", "tie", "vicuna"]]
    assert r["agreement"] == [1 / 3]
    assert (r["final_answer"], r["reference"], r["correct"]) == ("vicuna", "vicuna", True)
    r = rows["pair_comparison_results:1"]  # the critic states no score
    assert r["answers"] == [["gpt35", None, "gpt35"]]
    assert r["agreement"] == [2 / 3]
    # summed over the two that scored: 17.5 vs 13; the humans called it a tie
    assert (r["final_answer"], r["reference"], r["correct"]) == ("gpt35", "tie", False)
    r = rows["pair_comparison_results:2"]  # a question the references lack: no gold
    assert (r["answers"], r["agreement"]) == ([["vicuna"] * 3], [1.0])
    assert (r["final_answer"], r["reference"], r["correct"]) == ("vicuna", None, False)
    # the references as a path or as read_references' mapping give the same table
    refs = read_references(CHATEVAL / "scores" / "test.json")
    assert refs == {"How do I boil an egg?": "vicuna", "Name a primary colour.": "tie"}
    assert import_chateval(results, references=refs).equals(t)
    without = _rows(import_chateval(results))
    assert [r["reference"] for r in without.values()] == [None, None, None]


def test_chateval_reversed_direct_comparison():
    # args.txt says reverse_input=True: Assistant 1 was vicuna, Assistant 2 gpt35
    rows = _rows(import_chateval(CHATEVAL / "reversed"))
    r = rows["pair_comparison_results:0"]
    assert r["answers"] == [["gpt35", "gpt35", "vicuna"]]
    assert r["agreement"] == [2 / 3]
    # no scores: the majority verdict; the gold is the record's own human_results
    assert (r["final_answer"], r["reference"], r["correct"]) == ("gpt35", "gpt35", True)
    assert r["flags"] == ["reversed_input"]
    r = rows["pair_comparison_results:1"]
    assert r["answers"] == [["tie", None, "vicuna"]]
    assert r["agreement"] == [1 / 3]
    # a 1-1 tie between "tie" (first referee) and vicuna: the first referee's
    assert (r["final_answer"], r["reference"], r["correct"]) == ("tie", "tie", True)


def test_chateval_bad_input(tmp_path):
    rec = {"question": "Q?", "response": {"a": "x", "b": "y"},
           "evaluation": [{"role": "r", "evaluation": "Assistant 1"}], "human_results": "c"}
    path = _write(tmp_path / "res.json", json.dumps([rec]))
    with pytest.raises(ValueError, match=r"res\.json: record 0 \('Q\?'\): gold 'c' is neither "
                                         r"a response name \(a, b\) nor 'tie'"):
        import_chateval(path)
    path = _write(tmp_path / "one.json", json.dumps([dict(rec, response={"a": "x"})]))
    with pytest.raises(ValueError, match=r"record 0 .*'response' must be an object holding "
                                         r"the two"):
        import_chateval(path)
    path = _write(tmp_path / "refs.json", json.dumps([{"question": "Q?"}]))
    with pytest.raises(ValueError, match=r"refs\.json: record 0: expected an object with string "
                                         r"'question' and 'human_results'"):
        import_chateval(tmp_path / "res.json", references=path)


# --- MAD ---------------------------------------------------------------------------------------


def test_mad_debates():
    t = import_mad(MAD)  # 0-config.json (the run's prompts) is skipped
    assert t.column_names == CANONICAL + ["question", "agents"]
    rows = _rows(t)
    assert list(rows) == ["0", "1", "2"]  # the file names below the folder
    r = rows["0"]  # the affirmative side gives in; the moderator decides "(B)"
    assert (r["protocol"], r["source"], r["n_agents"]) == ("debate", "mad", 2)
    assert r["agents"] == ["Affirmative side", "Negative side"]
    assert r["answers"] == [["A", "B"], ["B", "B"]]
    assert r["agreement"] == [0.5, 1.0]
    assert (r["final_answer"], r["reference"], r["correct"], r["flags"]) == \
        ("B", "B", True, [])
    assert r["texts"][0] == ["Plants breathe like we do, so the answer is (A).",
                             "I disagree: plants fix carbon dioxide. The answer is (B)."]
    # yes/no gold: "Yes, 91 is prime ...", "No: 91 = 7 x 13." ...; nobody decided, so the
    # last round's 1-1 tie goes to the affirmative side
    r = rows["1"]
    assert r["answers"] == [["yes", "no"], ["yes", "no"]]
    assert r["agreement"] == [0.5, 0.5]
    assert (r["final_answer"], r["reference"], r["correct"], r["flags"]) == \
        ("yes", "no", False, ["undecided"])
    # the affirmative side speaks three times, the negative twice; "I need to think more."
    # states no letter; the decision "Option C"; the gold from "reference": "(C)"
    r = rows["2"]
    assert r["answers"] == [["A", None], ["C", "C"], ["C", None]]
    assert r["agreement"] == [0.5, 1.0, 0.5]
    assert (r["final_answer"], r["reference"], r["correct"], r["flags"]) == \
        ("C", "C", True, ["ragged_rounds"])


def test_mad_bad_input(tmp_path):
    path = _write(tmp_path / "7.json", json.dumps({"debate_topic": "T?", "players": {
        "Affirmative side": [{"role": "assistant", "content": "yes"}]}}))
    with pytest.raises(ValueError, match=r"7\.json: record 0 \('T\?'\): players has no "
                                         r"'Negative side'"):
        import_mad(path)
    path = _write(tmp_path / "8.json", json.dumps({"players": {}}))
    with pytest.raises(ValueError, match=r"8\.json: record 0: missing field 'debate_topic' "
                                         r"\(or 'source'\)"):
        import_mad(path)
    path = _write(tmp_path / "9.json", json.dumps({"debate_topic": "T?", "players": {
        "Affirmative side": [{"role": "assistant", "content": "yes"}],
        "Negative side": [{"role": "judge", "content": "no"}]}}))
    with pytest.raises(ValueError, match=r"players\['Negative side'\]\[0\] has unknown role "
                                         r"'judge'"):
        import_mad(path)


# --- the generic mapping -----------------------------------------------------------------------


def test_generic_nested_layout():
    t = import_generic(GENERIC / "nested.jsonl", config=GENERIC / "nested.toml")
    assert t.column_names == CANONICAL + ["question", "agents"]
    rows = _rows(t)
    assert list(rows) == ["nested:0", "nested:1", "nested:2"]  # the blank line is no record
    r = rows["nested:0"]
    assert (r["question_id"], r["protocol"], r["n_agents"]) == ("q1", "debate", 3)
    assert r["question"] == "Which is a mammal? (A) shark (B) whale"
    # picks "B", "(A)", null; then "b", "B", "B"; the gold "(B)" from meta.gold
    assert r["answers"] == [["B", "A", None], ["B", "B", "B"]]
    assert r["texts"][0] == ["A whale breathes air, so (B).", "Sharks live in the sea too: (A)",
                             "Not sure yet."]
    assert r["agreement"] == [1 / 3, 1.0]
    assert (r["final_answer"], r["reference"], r["correct"]) == ("B", "B", True)
    r = rows["nested:1"]  # Yes/No spelled both ways; round 1 has two nodes only
    assert r["answers"] == [["yes", "no", "yes"], ["no", "no", None]]
    assert r["agreement"] == [2 / 3, 2 / 3]
    assert (r["final_answer"], r["reference"], r["correct"]) == ("no", "yes", False)
    r = rows["nested:2"]  # an integer id and gold, 8 and "8.0" vote together; no verdict
    assert (r["question_id"], r["reference"]) == ("3", "8")
    assert r["answers"] == [["8", "6", "8.0"]]
    assert r["agreement"] == [2 / 3]
    assert (r["final_answer"], r["correct"]) == (None, False)


def test_generic_long_layout_jsonl_and_parquet(tmp_path):
    t = import_generic(GENERIC / "long.jsonl", config=GENERIC / "long.toml")
    rows = _rows(t)
    assert list(rows) == ["r1", "r2", "r3"]
    r = rows["r1"]  # rows out of order; agents sorted alice, bob, carol; rounds 1, 2
    assert (r["question_id"], r["protocol"], r["n_agents"], r["agents"]) == \
        ("101", "debate", 3, ["alice", "bob", "carol"])
    assert r["source"] == "generic"  # the defaults: a debate, from the generic mapping
    assert r["texts"] == [[r"2 + 3 = \boxed{5}", "The answer is 5.", "I think it is 6."],
                          [r"\boxed{5}", r"Checking again: \boxed{5}", None]]
    # no answer column: extracted from the texts, guided by the numeric gold "#### 5"
    assert r["answers"] == [["5", "5", "6"], ["5", "5", None]]
    assert r["agreement"] == [2 / 3, 2 / 3]
    assert (r["final_answer"], r["reference"], r["correct"]) == ("5", "5", True)
    r = rows["r2"]  # one round: 6, no number, a null response
    assert r["answers"] == [["6", None, None]]
    assert r["agreement"] == [1 / 3]
    assert (r["final_answer"], r["correct"]) == ("6", False)
    r = rows["r3"]  # two agents; 3/2 and 1.5 agree with the boxed \frac{3}{2}
    assert (r["n_agents"], r["agents"], r["answers"], r["agreement"]) == \
        (2, ["alice", "bob"], [["3/2", "1.5"]], [1.0])
    assert (r["final_answer"], r["reference"], r["correct"]) == ("3/2", r"\frac{3}{2}", True)
    # the same rows as Parquet
    records = [json.loads(line) for line in (GENERIC / "long.jsonl").read_text().splitlines()]
    pq.write_table(pa.Table.from_pylist(records), tmp_path / "long.parquet")
    config = load_mapping(GENERIC / "long.toml")
    with pytest.raises(ValueError, match="no input files found"):  # format = "jsonl"
        import_generic(tmp_path, config=config)
    # without input.format the suffix tells: the folder's *.parquet
    parquet = import_generic(tmp_path, config={**_toml(GENERIC / "long.toml"),
                                               "input": {"layout": "long"}})
    assert parquet.equals(t)


def _toml(path: Path) -> dict:
    import tomllib

    return tomllib.loads(path.read_text())


def test_generic_agent_round_dict_with_bare_texts(tmp_path):
    # an LLM-Agora-like line: {agent: [text per round]}; the node is the text itself
    path = _jsonl(tmp_path / "runs.jsonl", [
        {"q": "1+1?", "gold": 2, "by_agent": {"m1": [r"\boxed{2}", r"\boxed{2}"],
                                              "m2": [r"\boxed{3}"]}}])
    config = {"input": {"layout": "nested"},
              "trajectory": {"question_id": "q", "reference": "gold", "rounds": "by_agent",
                             "order": "agent_round"},
              "node": {"text": "."}}
    (r,) = import_generic(path, config=config).to_pylist()
    assert (r["agents"], r["answers"], r["agreement"]) == \
        (["m1", "m2"], [["2", "3"], ["2", None]], [0.5, 0.5])
    assert (r["question"], r["final_answer"], r["correct"]) == ("1+1?", "2", True)


def test_generic_mapping_is_validated(tmp_path):
    def bad(text: str, pattern: str) -> None:
        path = _write(tmp_path / "m.toml", text)
        with pytest.raises(ValueError, match=r"m\.toml: " + pattern):
            load_mapping(path)

    base = '[input]\nlayout = "nested"\n[trajectory]\nquestion_id = "id"\nrounds = "r"\n'
    bad(base + '[node]\ntext = "t"\nanswr = "a"\n', r"unknown key 'node\.answr' \(known in "
        r"\[node\]: text, answer, round, agent\)")
    bad(base + '[node]\ntext = "t"\n[extra]\nx = "y"\n', r"unknown table \[extra\]")
    bad(base + '[node]\ntext = "t"\nround = "k"\n',
        r"key 'node\.round' is only for layout = 'long'")
    bad(base, r"\[node\] needs 'text' or 'answer'")
    bad('[input]\nlayout = "wide"\n', r"input\.layout must be one of 'nested', 'long', got "
        r"'wide'")
    bad('[trajectory]\nquestion_id = "id"\n', r"missing key 'input\.layout'")
    bad('[input]\nlayout = "long"\n[trajectory]\nquestion_id = "id"\n[node]\ntext = "t"\n'
        'agent = "a"\n', r"missing key 'node\.round' \(required with layout = 'long'\)")
    bad(base.replace('"id"', "3") + '[node]\ntext = "t"\n',
        r"trajectory\.question_id must be a non-empty string, got 3")
    bad("[input\n", "malformed TOML")
    with pytest.raises(ValueError, match=r"mapping: unknown key 'input\.colour'"):
        load_mapping({"input": {"layout": "long", "colour": "x"}})
    with pytest.raises(FileNotFoundError):
        load_mapping(tmp_path / "missing.toml")


def test_generic_bad_records_name_file_record_and_field(tmp_path):
    config = GENERIC / "nested.toml"
    good = {"id": "a", "prompt": "p", "meta": {"gold": "A"}, "verdict": "A",
            "turns": [[{"say": "x", "pick": "A"}]]}
    path = _jsonl(tmp_path / "n.jsonl", [good, {k: v for k, v in good.items() if k != "meta"}])
    with pytest.raises(ValueError, match=r"n\.jsonl: record 1 \('a'\): missing field "
                                         r"'meta\.gold' \(trajectory\.reference"):
        import_generic(path, config=config)
    path = _jsonl(tmp_path / "m.jsonl", [dict(good, turns=[[{"say": "x"}]])])
    with pytest.raises(ValueError, match=r"m\.jsonl: record 0 \('a'\): round 0 agent 0 has no "
                                         r"'pick' \(node\.answer\)"):
        import_generic(path, config=config)
    path = _jsonl(tmp_path / "t.jsonl", [dict(good, turns="x")])
    with pytest.raises(ValueError, match=r"record 0 .*rounds 'turns' must be a non-empty list"):
        import_generic(path, config=config)
    long = GENERIC / "long.toml"
    row = {"run": "r", "qid": 1, "question": "q", "gold": "1", "round": 0, "agent": "x",
           "response": "1"}
    path = _jsonl(tmp_path / "d.jsonl", [row, row])
    with pytest.raises(ValueError, match=r"d\.jsonl: record 1 \('1'\): a second node for agent "
                                         r"'x' in round 0 \(the first is record 0\)"):
        import_generic(path, config=long)
    path = _jsonl(tmp_path / "q.jsonl", [row, dict(row, agent="y", question="other")])
    with pytest.raises(ValueError, match=r"q\.jsonl: record 1 .*'question' "
                                         r"\(trajectory\.question\) differs from record 0's"):
        import_generic(path, config=long)
    path = _jsonl(tmp_path / "r.jsonl", [dict(row, round="first")])
    with pytest.raises(ValueError, match=r"r\.jsonl: record 0 .*round 'round' must be an "
                                         r"integer, got 'first'"):
        import_generic(path, config=long)
    path = _jsonl(tmp_path / "n.jsonl", [{k: v for k, v in row.items() if k != "qid"}])
    with pytest.raises(ValueError, match=r"n\.jsonl: record 0: missing field 'qid' "
                                         r"\(trajectory\.question_id = 'qid'\)"):
        import_generic(path, config=long)
    path = _write(tmp_path / "x.parquet", "not parquet")
    with pytest.raises(ValueError, match=r"x\.parquet: not a readable Parquet file"):
        import_generic(path, config={**_toml(long), "input": {"layout": "long"}})


# --- detection and dispatch --------------------------------------------------------------------


@pytest.mark.parametrize("src,fmt", [
    (FORD, "ford"), (AGORA, "agora"), (CHATEVAL / "reversed", "chateval"), (MAD, "mad"),
    (DATA / "dylan_math", "dylan"), (DATA / "du_debate.json", "du"),
    (DATA / "du_biography.json", "du"),
])
def test_detect_format(src, fmt):
    found, first = detect_format(src)
    assert found == fmt
    assert first in log_files(fmt, src)


def test_detect_format_refuses_clearly(tmp_path):
    with pytest.raises(ValueError, match=r"long\.jsonl: cannot tell the format \(recognised: "
                                         r"dylan, du, ford, agora, chateval, mad(, \w+)*\); "
                                         r"name the format.*generic --config"):
        detect_format(GENERIC / "long.jsonl")
    both = _write(tmp_path / "both.json", json.dumps(
        [{"agent_response": {}, "evaluation": [], "response": {}}]))
    with pytest.raises(ValueError, match=r"both\.json: ambiguous, it fits agora and chateval"):
        detect_format(both)
    with pytest.raises(FileNotFoundError):
        detect_format(tmp_path / "missing")


def test_import_logs_dispatch():
    assert set(FORMATS) == set(cli_import.FORMATS)
    assert set(DETECTABLE) == set(FORMATS) - {"generic"}
    calls = []
    assert import_logs("auto", MAD, progress=lambda done, total: calls.append((done, total))) \
        .equals(import_mad(MAD))
    assert calls == [(1, 3), (2, 3), (3, 3)]  # after each file
    assert import_logs("generic", GENERIC / "nested.jsonl", config=GENERIC / "nested.toml") \
        .equals(import_generic(GENERIC / "nested.jsonl", config=GENERIC / "nested.toml"))
    with pytest.raises(TypeError, match=r"format 'ford' takes no option 'config' \(its "
                                        r"options: none\)"):
        import_logs("ford", FORD, config="x.toml")
    with pytest.raises(ValueError, match="unknown log format 'nope'"):
        import_logs("nope", FORD)


# --- fastuq import -----------------------------------------------------------------------------


def _main(monkeypatch, argv: list[str]) -> int:
    monkeypatch.setitem(cli.COMMANDS, "import", "fastuq.cli.import_logs")
    return cli.main(argv)


def test_cli_import_detects_and_says_so(tmp_path, monkeypatch, capsys):
    out = tmp_path / "ford.parquet"
    assert _main(monkeypatch, ["import", str(FORD), "-o", str(out)]) == 0
    text = capsys.readouterr().out
    assert f"detected format: ford (from {FORD / 'final' / 'anli.jsonl'})" in text
    assert "imported 9 trajectories" in text
    assert "protocols: debate 9" in text
    assert "sources: ford 9" in text
    assert pq.read_table(out).equals(import_ford(FORD))
    # naming the format: no detection line, the same table
    out2 = tmp_path / "ford2.parquet"
    assert _main(monkeypatch, ["import", "ford", str(FORD), "-o", str(out2)]) == 0
    assert "detected format" not in capsys.readouterr().out
    assert pq.read_table(out2).equals(pq.read_table(out))


def test_cli_import_generic_and_options(tmp_path, monkeypatch, capsys):
    out = tmp_path / "g.parquet"
    # --config implies generic
    assert _main(monkeypatch, ["import", str(GENERIC / "long.jsonl"), "--config",
                               str(GENERIC / "long.toml"), "-o", str(out)]) == 0
    assert "imported 3 trajectories" in capsys.readouterr().out
    assert pq.read_table(out).equals(import_generic(GENERIC / "long.jsonl",
                                                    config=GENERIC / "long.toml"))
    # the spelling: the format, the option, then the logs
    out2 = tmp_path / "g2.parquet"
    assert _main(monkeypatch, ["import", "generic", "--config", str(GENERIC / "long.toml"),
                               str(GENERIC / "long.jsonl"), "-o", str(out2)]) == 0
    assert pq.read_table(out2).equals(pq.read_table(out))
    capsys.readouterr()
    out = tmp_path / "c.parquet"
    assert _main(monkeypatch, ["import", "chateval",
                               str(CHATEVAL / "scores" / "pair_comparison_results.json"),
                               "--references", str(CHATEVAL / "scores" / "test.json"),
                               "-o", str(out)]) == 0
    assert "accuracy 0.3333 (1 of 3)" in capsys.readouterr().out
    # an option of another format, a missing mapping, a bad mapping, an unknown layout
    assert _main(monkeypatch, ["import", "mad", str(MAD), "--config", "m.toml",
                               "-o", str(out)]) == 2
    assert "--config is for generic logs, not mad" in capsys.readouterr().err
    assert _main(monkeypatch, ["import", str(MAD), "--references", "r.json",
                               "-o", str(out)]) == 2
    assert "--references is for chateval logs, and" in capsys.readouterr().err
    assert _main(monkeypatch, ["import", "generic", str(GENERIC), "-o", str(out)]) == 2
    assert "generic needs --config" in capsys.readouterr().err
    bad = _write(tmp_path / "bad.toml", '[input]\nlayout = "long"\nwho = "x"\n')
    assert _main(monkeypatch, ["import", "generic", str(GENERIC), "--config", str(bad),
                               "-o", str(out)]) == 2
    assert "unknown key 'input.who'" in capsys.readouterr().err
    assert _main(monkeypatch, ["import", str(GENERIC / "long.jsonl"), "-o", str(out)]) == 2
    err = capsys.readouterr().err
    assert "cannot tell the format (recognised: dylan, du, ford, agora, chateval, mad" in err
    assert _main(monkeypatch, ["import", "ford", "-o", str(out)]) == 2
    assert "give the logs to import after ford" in capsys.readouterr().err


# --- fastuq's own imports score with the default presets ---------------------------------------


def _sauce_by_hand(agreement: list[float], r: float, lam=0.95, q=0.10, v0=0.25, mu0=0.0
                   ) -> float:
    """SAUCE's score under the debate preset with R_t = r in every round, written out from
    DESIGN.md (predict, gain with 1e-8 in the denominator, update; -mean of the means)."""
    mu, var, means = mu0, v0, []
    for m in agreement:
        mu_pred, var_pred = lam * mu, lam * lam * var + q
        gain = var_pred / (var_pred + r + 1e-8)
        mu = mu_pred + gain * (m - mu_pred)
        var = max((1 - gain) * var_pred, 1e-15)
        means.append(mu)
    return -sum(means) / len(means)


@pytest.mark.parametrize("fmt, src", [("ford", [FORD / "final", FORD / "round0"]),
                                      ("agora", [AGORA])])
def test_ford_and_agora_imports_score_eval_report_with_the_defaults(
        fmt, src, tmp_path, monkeypatch, capsys):
    corpus = tmp_path / f"{fmt}.parquet"
    assert _main(monkeypatch, ["import", fmt, *map(str, src), "-o", str(corpus)]) == 0
    t = pq.read_table(corpus)
    # the protocol is the interaction structure (presets exist), the format is the source
    assert set(t.column("protocol").to_pylist()) == {"debate"}
    assert set(t.column("source").to_pylist()) == {fmt}
    assert t.schema.field("source").type == pa.string()
    # the logs carry no log-probabilities: SAUCE runs on agreement with a constant noise
    noise = ["--observation-noise", "0.1"]
    scores = tmp_path / "s.parquet"
    assert _main(monkeypatch, ["score", str(corpus), "-o", str(scores), *noise]) == 0
    got = dict(zip(*pq.read_table(scores).select(["trajectory_id", "sauce"]).to_pydict()
                   .values(), strict=True))
    for tid, agreement in zip(t.column("trajectory_id").to_pylist(),
                              t.column("agreement").to_pylist(), strict=True):
        assert got[tid] == pytest.approx(_sauce_by_hand(agreement, 0.1), rel=1e-9, abs=1e-12)
    assert _main(monkeypatch, ["eval", str(corpus), *noise]) == 0
    assert _main(monkeypatch, ["report", str(corpus), *noise, "-o",
                               str(tmp_path / "r.html")]) == 0
    capsys.readouterr()
    assert _main(monkeypatch, ["score", str(corpus), "--method", "all", *noise, "-o",
                               str(tmp_path / "all.parquet")]) == 0
    out = capsys.readouterr().err
    assert "sauce" in pq.read_table(tmp_path / "all.parquet").column_names
    assert "has no preset" not in out
    assert _main(monkeypatch, ["score", str(corpus), "--method", "all", "-o",
                               str(tmp_path / "all2.parquet")]) == 0


def _mystery_corpus(path: Path) -> Path:
    pq.write_table(pa.table({
        "trajectory_id": ["a", "b", "c"], "protocol": ["mystery", "mystery", "debate"],
        "source": ["ford", "ford", "ford"],  # metadata: never picks a preset
        "n_agents": pa.array([2, 2, 2], pa.int32()),
        "agreement": [[0.5, 1.0], [1.0], [0.5]], "correct": [True, False, True]}), path)
    return path


def test_protocol_without_a_preset_lists_every_missing_parameter(tmp_path, monkeypatch,
                                                                  capsys):
    corpus = _mystery_corpus(tmp_path / "m.parquet")
    noise = ["--observation-noise", "0.1"]
    assert _main(monkeypatch, ["score", str(corpus), "-o", str(tmp_path / "s.parquet"),
                               *noise]) != 0
    err = capsys.readouterr().err
    assert "trajectory 'a'" in err and "field protocol" in err
    assert "protocol 'mystery' has no preset" in err
    assert "lam, q, sigma2_0, mu_0 have no value" in err
    assert "--lam, --q, --sigma2-0, --mu-0" in err
    assert "--protocol debate|dylan" in err
    # what the caller gives is not listed
    assert _main(monkeypatch, ["score", str(corpus), "-o", str(tmp_path / "s.parquet"),
                               *noise, "--lam", "0.9", "--mu-0", "0"]) != 0
    err = capsys.readouterr().err
    assert "q, sigma2_0 have no value" in err and "lam," not in err
    # --protocol, as suggested, scores every record under that preset
    assert _main(monkeypatch, ["score", str(corpus), "-o", str(tmp_path / "s.parquet"),
                               *noise, "--protocol", "debate"]) == 0
    got = pq.read_table(tmp_path / "s.parquet").column("sauce").to_pylist()
    want = [_sauce_by_hand(a, 0.1) for a in ([0.5, 1.0], [1.0], [0.5])]
    assert got == pytest.approx(want, rel=1e-9, abs=1e-12)
    # from Python: the same message
    import fastuq

    with pytest.raises(ValueError, match=r"lam, q, sigma2_0, mu_0 have no value.*--protocol"):
        fastuq.sauce_batch([[0.5, 1.0]], [[0.1, 0.1]], protocol="mystery")


def test_method_all_leaves_out_an_estimator_without_preset_with_a_note(tmp_path, monkeypatch,
                                                                        capsys):
    corpus = _mystery_corpus(tmp_path / "m.parquet")
    out = tmp_path / "all.parquet"
    assert _main(monkeypatch, ["score", str(corpus), "--method", "all", "--observation-noise",
                               "0.1", "-o", str(out)]) == 0
    text = capsys.readouterr().err  # the note goes where --method all's notes go
    assert ("sauce (protocol 'mystery' has no preset: needs lam, q, sigma2_0, mu_0, or "
            "--protocol debate|dylan)") in text
    cols = pq.read_table(out).column_names
    assert "sauce" not in cols
    # the agreement baselines need no preset and still run: minus the last agreement
    assert pq.read_table(out).column("last_agreement").to_pylist() == [-1.0, -1.0, -0.5]
    # with every parameter given, nothing is left out for want of a preset
    assert _main(monkeypatch, ["score", str(corpus), "--method", "all", "--observation-noise",
                               "0.1", "--lam", "0.9", "--q", "0.1", "--sigma2-0", "0.25",
                               "--mu-0", "0", "-o", str(out)]) == 0
    assert "has no preset" not in capsys.readouterr().err
    assert "sauce" in pq.read_table(out).column_names


# --- self-consistency logs through the generic mapping -----------------------------------------


def test_generic_self_consistency_samples_with_gold_joined_from_a_second_file():
    t = import_generic(GENERIC / "sc.jsonl", config=GENERIC / "sc.toml")
    rows = _rows(t)
    assert list(rows) == ["sc:0", "sc:1"]
    r = rows["sc:0"]  # three samples: 72, 72, 70 -> round 0; gold "#### 72" (id 1, line 2)
    assert (r["question_id"], r["protocol"], r["source"], r["n_agents"]) == \
        ("1", "self_consistency", "gsm8k_sc", 3)
    assert r["reference"] == "72"
    assert r["answers"] == [["72", "72", "70"]]
    assert r["agreement"] == [2 / 3]
    assert (r["final_answer"], r["correct"]) == ("72", True)
    r = rows["sc:1"]  # qid "2" matches the gold's integer id 2; a null sample is a null node
    assert (r["question_id"], r["n_agents"], r["reference"]) == ("2", 5, "10")
    assert r["texts"][0][2] is None
    # "$10" and "10" vote together, "600" alone, "I am not sure." states nothing
    assert r["answers"] == [["10", "10", None, "600", None]]
    assert r["agreement"] == [2 / 5]
    assert (r["final_answer"], r["correct"], r["flags"]) == ("10", True, [])


def test_generic_gold_file_errors(tmp_path):
    (tmp_path / "sc.jsonl").write_text((GENERIC / "sc.jsonl").read_text())
    base = _toml(GENERIC / "sc.toml")
    gold = tmp_path / "gold.jsonl"
    gold.write_text('{"id": 1, "answer": "#### 72"}\n{"id": "1", "answer": "#### 7"}\n')
    with pytest.raises(ValueError, match=r"gold.jsonl: record 1 \('1'\): question id repeats "
                                         r"record 0's \(gold.key\)"):
        load_mapping({**base, "gold": {"file": str(gold), "key": "id", "answer": "answer"}})
    gold.write_text('{"id": 1, "answer": "#### 72"}\n')
    mapping = load_mapping({**base, "gold": {"file": str(gold), "key": "id",
                                             "answer": "answer"}})
    with pytest.raises(ValueError, match=r"sc.jsonl: record 1 \('2'\): question id '2' is not "
                                         r"in the \[gold\] file"):
        import_generic(tmp_path / "sc.jsonl", config=mapping)
    with pytest.raises(ValueError, match=r"gold.jsonl: record 0: missing field 'gold' "
                                         r"\(gold.answer\)"):
        load_mapping({**base, "gold": {"file": str(gold), "key": "id", "answer": "gold"}})
    with pytest.raises(ValueError, match=r"missing key 'gold.answer'"):
        load_mapping({**base, "gold": {"file": str(gold), "key": "id"}})
    with pytest.raises(ValueError, match=r"trajectory.reference or a \[gold\] file"):
        load_mapping({**base, "trajectory": {**base["trajectory"], "reference": "g"}})
    with pytest.raises(ValueError, match=r"rounds .* or trajectory.samples .*not both"):
        load_mapping({**base, "trajectory": {**base["trajectory"], "rounds": "r"}})
    with pytest.raises(FileNotFoundError, match="no such gold file"):
        load_mapping({**base, "gold": {"file": str(tmp_path / "nope.jsonl"), "key": "id",
                                       "answer": "answer"}})
    with pytest.raises(ValueError, match=r"samples 'samples' must be a non-empty list"):
        bad = tmp_path / "bad.jsonl"
        bad.write_text('{"qid": 1, "samples": []}\n')
        import_generic(bad, config=mapping)


def test_agora_mmlu_echoed_option_lists_give_no_letter():
    # hand-written in the shape of LLM-Agora's MMLU/mmlu_result.json: agents that echo the
    # question or an option list state no letter (main read B, D and C from the lists, so the
    # second question's last round tied C against B and the final answer was C, wrong)
    rows = _rows(import_agora(DATA / "agora_echo"))
    # (each model's middle entry is the round-2 prompt, which repeats the question's option
    # list: not a round)
    r = rows["mmlu_result:0"]
    assert r["reference"] == "C"
    assert r["answers"] == [["C", None, "C"], [None, "C", "C"]]
    assert r["agreement"] == [2 / 3, 2 / 3]
    assert (r["final_answer"], r["correct"]) == ("C", True)
    r = rows["mmlu_result:1"]
    assert r["reference"] == "B"
    assert r["answers"] == [[None, None, "B"], [None, None, "B"]]
    assert r["agreement"] == [1 / 3, 1 / 3]
    assert (r["final_answer"], r["correct"]) == ("B", True)


# --- fastuq import: --on-error skip, formats detected per file, a format named twice ------------


def _bad_agora(folder: Path) -> Path:
    """A copy of gsm_result.json whose record 1 has a list for its answer, and a second
    result file cut off mid-JSON."""
    folder.mkdir()
    data = json.loads((AGORA / "gsm_result.json").read_text())
    data[1]["answer"] = [12]
    (folder / "gsm_result.json").write_text(json.dumps(data))
    (folder / "cut_result.json").write_text('[{"agent_response": ')
    return folder


def test_cli_import_on_error_skip_lists_bad_records_and_files(tmp_path, monkeypatch, capsys):
    bad = _bad_agora(tmp_path / "bad")
    out = tmp_path / "a.parquet"
    # an input error: exit 2 (fastuq.cli.exit_status)
    assert _main(monkeypatch, ["import", "agora", str(bad), "-o", str(out)]) == 2
    assert "cut_result.json: malformed JSON" in capsys.readouterr().err  # the first file
    assert not out.exists()
    assert _main(monkeypatch, ["import", "agora", str(bad), "-o", str(out), "--on-error",
                               "skip"]) == 0
    assert "skipped 2 record(s)" in capsys.readouterr().out
    t = pq.read_table(out)  # record 0 of gsm_result.json is all that is left
    assert t.column("trajectory_id").to_pylist() == ["gsm_result:0"]
    lines = [json.loads(x) for x in (tmp_path / "a.parquet.skipped.jsonl").read_text()
             .splitlines()]
    by_file = {Path(x["source"]).name: x for x in lines}
    assert set(by_file) == {"gsm_result.json", "cut_result.json"}
    assert by_file["gsm_result.json"]["row"] == 1
    assert "field 'answer' must be a string or a number" in by_file["gsm_result.json"]["reason"]
    assert by_file["cut_result.json"]["row"] is None  # the whole file
    assert "malformed JSON" in by_file["cut_result.json"]["reason"]
    # --skipped, and --max-skip-fraction: 2 of 3 skipped is too many, nothing written
    listing = tmp_path / "list.jsonl"
    out2 = tmp_path / "b.parquet"
    assert _main(monkeypatch, ["import", "agora", str(bad), "-o", str(out2), "--on-error",
                               "skip", "--skipped", str(listing), "--max-skip-fraction",
                               "0.5"]) == 1
    assert "2 of 3 records" in capsys.readouterr().err
    assert listing.exists() and not out2.exists()
    # the skip options need --on-error skip
    assert _main(monkeypatch, ["import", "agora", str(bad), "-o", str(out2), "--skipped",
                               str(listing)]) == 2
    assert "--skipped only applies with --on-error skip" in capsys.readouterr().err


def test_import_logs_on_error_skip_from_python(tmp_path):
    bad = _bad_agora(tmp_path / "bad")
    skipped: list = []
    t = import_logs("agora", bad, on_error="skip", skipped=skipped)
    assert t.num_rows == 1
    assert sorted((Path(k.source).name, k.record) for k in skipped) == \
        [("cut_result.json", None), ("gsm_result.json", 1)]
    with pytest.raises(ValueError, match="on_error must be 'raise' or 'skip'"):
        import_logs("agora", bad, on_error="ignore")


def test_import_detects_each_files_format_in_a_mixed_call(tmp_path, monkeypatch, capsys):
    srcs = [MAD, FORD / "final", AGORA]
    t = import_logs("auto", srcs)
    # each file through its own importer, as when imported alone (ids: paths below the
    # folder every file shares)
    alone = {fmt: import_logs(fmt, p) for fmt, p in zip(("mad", "ford", "agora"), srcs,
                                                        strict=True)}
    assert t.column("source").to_pylist() == ["mad"] * 3 + ["ford"] * 6 + ["agora"] * 3
    assert t.column("trajectory_id").to_pylist() == [
        "mad/0", "mad/1", "mad/2", "ford/final/anli:0", "ford/final/anli:1",
        "ford/final/copa:0", "ford/final/copa:1",
        "ford/final/copa:2", "ford/final/copa:3", "agora/gsm_result:0", "agora/gsm_result:1",
        "agora/mmlu_result_cot:0"]
    for fmt, table in alone.items():
        mine = t.filter(pa.compute.equal(t.column("source"), fmt))
        for col in ("final_answer", "correct", "answers", "agreement", "reference"):
            assert mine.column(col).to_pylist() == table.column(col).to_pylist(), (fmt, col)
    out = tmp_path / "m.parquet"
    assert _main(monkeypatch, ["import", *map(str, srcs), "-o", str(out)]) == 0
    text = capsys.readouterr().out
    assert "detected formats: mad (3 files" in text and "ford (2 files," in text
    assert "sources: agora 3, ford 6, mad 3" in text
    assert pq.read_table(out).num_rows == 12
    # an option of a format none of the files has
    assert _main(monkeypatch, ["import", *map(str, srcs), "--no-recover", "-o",
                               str(out)]) == 2
    assert "--no-recover is for dylan logs, and the logs read as mad, ford, agora" in \
        capsys.readouterr().err


def test_cli_import_format_named_twice_is_an_argument_error(tmp_path, monkeypatch, capsys):
    import shutil

    shutil.copytree(MAD, tmp_path / "mad")
    monkeypatch.chdir(tmp_path)
    out = tmp_path / "o.parquet"
    # a folder named like the format: main imported it twice and failed on duplicate ids
    assert _main(monkeypatch, ["import", "mad", "mad", "-o", str(out)]) == 2
    err = capsys.readouterr().err
    assert "the format name 'mad' is given twice, and 'mad' is a folder here" in err
    assert "fastuq import ./mad" in err and "appears twice" not in err
    assert not out.exists()
    # as suggested: the folder once, its format detected
    assert _main(monkeypatch, ["import", "./mad", "-o", str(out)]) == 0
    assert pq.read_table(out).column("trajectory_id").to_pylist() == ["0", "1", "2"]
    # the format named twice where no such folder exists; a folder given twice; a format
    # name among the sources
    monkeypatch.chdir(tmp_path / "mad")
    assert _main(monkeypatch, ["import", "mad", "mad", "0.json", "-o", str(out)]) == 2
    assert "the format name 'mad' is given twice: name the format once" in \
        capsys.readouterr().err
    monkeypatch.chdir(tmp_path)
    assert _main(monkeypatch, ["import", "./mad", "mad/", "-o", str(out)]) == 2
    assert "'mad/' is given twice (as './mad')" in capsys.readouterr().err
    assert _main(monkeypatch, ["import", "./mad", "ford", "-o", str(out)]) == 2
    assert "'ford' among the logs is a format name" in capsys.readouterr().err
    assert _main(monkeypatch, ["import", "ford", str(FORD / "final"), "agora", "-o",
                               str(out)]) == 2
    assert "'agora' after the format ford is a format name" in capsys.readouterr().err
