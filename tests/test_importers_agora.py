"""LLM-Agora's GSM8K and Math result files (gauss5930/LLM-Agora ``GSM8K/gsm_result.json``,
``Math/math_result.json``): responses that run on into turns the model writes for the other
speakers, and the prompt's ``\\boxed{answer}`` placeholder echoed back. The files under
tests/data/agora_turns are hand-written in the shape of those files (texts shortened and
reworded); every expected value is worked out by hand from the file."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from fastuq.answers import extract_answer
from fastuq.importers import detect_format, import_agora, import_logs
from fastuq.importers.agora import own_turn

TURNS = Path(__file__).parent / "data" / "agora_turns"


def _rows(folder: Path) -> dict[str, dict]:
    return {r["trajectory_id"]: r for r in import_agora(folder).to_pylist()}


def test_gsm_turns_and_placeholder_box():
    r = _rows(TURNS)["gsm_result:0"]
    assert r["reference"] == "10"  # the number after "####"
    assert r["agents"] == ["llama", "wizardlm", "orca"]
    # round 1: llama echoes the prompt, "\boxed{answer}" and all; its last number is the
    # question's 40 (not the word "answer"); wizardlm's empty response states nothing
    # rounds 2 and 3: llama says "10 miles" / "10" and then writes a USER turn echoing the
    # summary (20, 12 in it): its answer is the 10 of its own turn
    assert r["answers"] == [["40", None, "10"], ["10", "12", "10"], ["10", "12", "10"]]
    assert r["texts"][1][0] == "10 miles" and r["texts"][2][0] == "10"
    assert r["agreement"] == [1 / 3, 2 / 3, 2 / 3]
    # last round 10, 12, 10: the majority is 10, the gold
    assert (r["final_answer"], r["correct"], r["flags"]) == ("10", True, ["continued_turn"])


def test_math_turns():
    r = _rows(TURNS)["math_result:0"]
    assert r["reference"] == "13"
    # llama: round 1 ends "4-1? A: The result of " (last number 1); round 2 "= 13" then a
    # USER/ASSISTANT exchange; round 3 "13." then USER/SYSTEM turns ending "2+3*4"
    assert r["answers"] == [["1", None, "19"], ["13", "5", "13"], ["13", "5", "13"]]
    assert r["texts"][2][0] == "13."
    assert (r["final_answer"], r["correct"], r["flags"]) == ("13", True, ["continued_turn"])


def test_turns_cut_only_at_a_line_opening_a_speaker_tag(tmp_path):
    assert own_turn("16 miles\nUSER: [\"Here is a summary: 52") == ("16 miles", True)
    assert own_turn("48.\n\n  ### User:\nthanks") == ("48.", True)
    assert own_turn("SYSTEM: hello 5") == ("", True)  # a response that is all another turn
    # a tag inside a line is text: nothing cut
    assert own_turn("The USER: field says 7") == ("The USER: field says 7", False)
    assert own_turn(None) == (None, False)
    # an MMLU-shaped record (response, prompt, response): the prompt is still recognised by
    # its assistant tag and dropped, the responses' own turns kept
    prompt = ("SYSTEM: be helpful.\nUSER: ['Here is a summary of responses from other agents: "
              "(B)']\nASSISTANT: ")
    rec = {"question": "Q?: A) x, B) y", "answer": "B", "agent_response": {
        "m1": ["(A)\nUSER: no, (B)", prompt, "(B)"], "m2": ["(B)", prompt, "(B)"]}}
    path = tmp_path / "mmlu_result.json"
    path.write_text(json.dumps([rec]))
    r = import_agora(path).to_pylist()[0]
    assert r["answers"] == [["A", "B"], ["B", "B"]]
    assert r["flags"] == ["continued_turn"]


@pytest.mark.parametrize("text,kind,expected", [
    # the GSM prompt echoed: "\boxed{answer}" is its placeholder, not an answer
    ("Tom has 3 boxes. Your final answer should be a single numerical number, in the form "
     "\\boxed{answer}, at the end of your response.\nTom has 3 boxes of", "number", "3"),
    ("So \\boxed{12}. (Your final answer should be in the form \\boxed{answer}.)", "number", "12"),
    ("in the form \\boxed{Your Final Answer}", None, None),
    ("the box \\boxed{answers: 4}", None, "answers: 4"),  # not the bare placeholder
])
def test_placeholder_box_is_not_an_answer(text, kind, expected):
    assert extract_answer(text, kind) == expected


@pytest.mark.parametrize("text,expected", [
    # Math/math_result.json's truncated step-by-step expressions: a minus after a number and
    # a space is the operation, not the sign of the last number
    ("40 + 11 - 23\n\n40 + 11 - 23 =", "23"),
    ("24 + 26 * 4 + 3 - 5 * 6 = 24 + 26 * 4 + 3 - 5", "5"),
    ("(40 * 1) + 11 - (23 * 1) - 4", "4"),
    # a sign after a word, "=" or a line break stays a sign
    ("the result of the expression is -359.", "-359"),
    ("= -146", "-146"),
    ("First, we calculate:\n\n-378\n", "-378"),
])
def test_spaced_binary_minus_is_no_sign(text, expected):
    assert extract_answer(text) == expected


def test_the_files_are_detected_as_agora():
    assert detect_format(TURNS)[0] == "agora"
    t = import_logs("agora", TURNS)
    assert t.column("source").to_pylist() == ["agora", "agora"]
    assert t.column("correct").to_pylist() == [True, True]
