"""A self-consistency log in the math-evaluation-harness layout (tests/data/math_eval_harness,
written by hand in the layout of ZubinGou/math-evaluation-harness's ``--save_outputs``): it
imports with the generic mapping, and the consistency gate scores, calibrates and applies on
it. Expected values are read off the fixture by hand."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pyarrow.parquet as pq

from fastuq.cli import main

DATA = Path(__file__).resolve().parent / "data" / "math_eval_harness"
LOG = DATA / "gsm8k_sc.jsonl"
MAP = DATA / "map.toml"


def _import(tmp_path, capsys):
    out = tmp_path / "sc.parquet"
    assert main(["import", "generic", "--config", str(MAP), str(LOG), "-o", str(out)]) == 0
    printed = capsys.readouterr().out
    return pq.read_table(out).to_pylist(), printed, out


def test_math_eval_harness_log_imports_as_self_consistency(tmp_path, capsys):
    rows, printed, _ = _import(tmp_path, capsys)
    records = [json.loads(line) for line in LOG.read_text().splitlines()]
    assert len(rows) == len(records) == 32
    assert "protocols: self_consistency 32" in printed
    for row, rec in zip(rows, records, strict=True):
        assert row["protocol"] == "self_consistency"
        assert row["question_id"] == str(rec["idx"])
        assert row["reference"] == rec["gt"]
        assert row["n_agents"] == 4
        assert row["texts"] == [rec["code"]]  # one round: the k samples
    by_id = {r["question_id"]: r for r in rows}
    # by hand: majority answers and their correctness
    assert (by_id["0"]["final_answer"], by_id["0"]["correct"]) == ("23", True)
    assert (by_id["8"]["final_answer"], by_id["8"]["correct"]) == ("84", False)  # area, not 38
    assert (by_id["13"]["final_answer"], by_id["13"]["correct"]) == ("6.25", False)  # 2 of 4
    assert (by_id["27"]["final_answer"], by_id["27"]["correct"]) == ("100", False)  # not 5
    assert by_id["23"]["correct"]  # 1/4, 0.25 and 1/4 vote together against 2
    # wrong majorities: questions 8, 13, 25, 26, 27 and 30
    assert sorted(int(q) for q, r in by_id.items() if not r["correct"]) == [8, 13, 25, 26, 27, 30]


def test_consistency_gate_on_the_log(tmp_path, capsys):
    from fastuq.decisions import calibrate_threshold, corpus_consistency

    rows, _, path = _import(tmp_path, capsys)
    got = corpus_consistency(path)
    assert got["trajectory_id"].to_list() == [r["trajectory_id"] for r in rows]
    score = dict(zip([r["question_id"] for r in rows], got["consistency"].to_list(),
                     strict=True))
    # by hand, the share of the 4 samples whose answer is equivalent to the majority answer
    assert score["0"] == 1.0  # 23 x 4
    assert score["8"] == 0.75  # 84, 84, 38, 84
    assert score["13"] == 0.5  # 7, 6.25, 6.25, 6
    assert score["23"] == 0.75  # 1/4, 0.25, 2, 1/4 against 1/4
    assert score["25"] == 0.5  # 88.67, 88.67, 88, 88.7 against 88.67
    assert score["14"] == 1.0  # 1,000 and 1000 are one answer
    # calibrate on the even questions, apply on the odd ones (alpha = delta = 0.2, one fixed
    # sequence from the strictest level: 8 passed without a failure are needed,
    # 1 - 0.2 ** (1 / 8) = 0.182 <= 0.2)
    s = np.array([score[str(i)] for i in range(32)])
    ok = np.array([{r["question_id"]: r["correct"] for r in rows}[str(i)] for i in range(32)])
    gate = calibrate_threshold(s[0::2], ok[0::2], 0.2, 0.2, higher_passes=True,
                               procedure="fixed_sequence")
    assert gate.threshold == 1.0  # the 1.0s of the even half are all right
    passed = s[1::2] >= gate.threshold
    assert passed.sum() == (s[1::2] == 1.0).sum() > 0
    assert not (~ok[1::2][passed]).any()  # observed failure rate among passed: 0
