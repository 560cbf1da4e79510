"""fastuq.importers and ``fastuq import``: DyLAN slices, a hand-written Du file, bad input."""

from __future__ import annotations

import json
import re
from collections import Counter
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

import fastuq
from fastuq import cli
from fastuq.answers import answer_classes, answer_kind, answers_equivalent, extract_answer
from fastuq.importers import import_du, import_dylan, import_logs, parse_gold

DATA = Path(__file__).parent / "data"
DYLAN = DATA / "dylan_math"
DU = DATA / "du_debate.json"
CANONICAL = ["trajectory_id", "question_id", "protocol", "source", "n_agents", "reference",
             "final_answer", "correct", "agreement", "answers", "texts", "flags"]


def _raw_dylan() -> dict[str, list]:
    """trajectory_id -> per history, its assistant texts (read straight from the JSON)."""
    out = {}
    for path in sorted(DYLAN.glob("*.json")):
        for i, value in enumerate(json.loads(path.read_text()).values()):
            out[f"{path.stem}:{i}"] = [[m["content"] for m in h if m["role"] == "assistant"]
                                       for h in value[0]]
    return out


@pytest.fixture(scope="module")
def dylan() -> pa.Table:
    return import_dylan(DYLAN)


@pytest.fixture(scope="module")
def dylan_rows(dylan) -> dict[str, dict]:
    return {r["trajectory_id"]: r for r in dylan.to_pylist()}


def test_dylan_schema(dylan):
    assert dylan.num_rows == 10 + 31 + 3
    assert dylan.column_names[: len(CANONICAL)] == CANONICAL
    assert {"question", "subject", "level"} <= set(dylan.column_names)
    assert "token_entropy" not in dylan.column_names
    s = dylan.schema
    assert s.field("n_agents").type == pa.int32()
    assert s.field("agreement").type == pa.list_(pa.float64())
    assert s.field("answers").type == pa.list_(pa.list_(pa.string()))
    assert s.field("texts").type == pa.list_(pa.list_(pa.string()))
    assert s.field("flags").type == pa.list_(pa.string())
    assert set(dylan.column("protocol").to_pylist()) == {"dylan"}
    assert set(dylan.column("n_agents").to_pylist()) == {4}
    assert len(set(dylan.column("trajectory_id").to_pylist())) == dylan.num_rows


def test_dylan_shapes_histogram_of_the_files(dylan_rows):
    raw = _raw_dylan()
    file_shapes = Counter((len(h), len(h[0])) for h in raw.values())
    # (histories, rounds) as counted in the files; every history has as many rounds as the
    # others of its record
    assert file_shapes == Counter({(3, 1): 10, (4, 1): 2, (3, 2): 11, (4, 2): 4,
                                   (2, 2): 3, (2, 3): 14})
    assert all(len({len(x) for x in h}) == 1 for h in raw.values())
    for tid, histories in raw.items():
        assert len(dylan_rows[tid]["texts"]) == len(histories[0])


def test_dylan_histories_keep_one_slot_each(dylan_rows):
    """Each stored history is one agent: the same slot in every round, slots distinct."""
    for tid, histories in _raw_dylan().items():
        row = dylan_rows[tid]
        texts = row["texts"]
        assert all(len(r) == 4 for r in texts)
        unique = [h for k, h in enumerate(histories) if h not in histories[:k]]
        slots = []
        for h in unique:
            (slot,) = [k for k in range(4) if all(texts[t][k] == h[t] for t in range(len(h)))]
            slots.append(slot)
        assert len(set(slots)) == len(unique)
        if len(histories[0]) == 1 or len(histories) >= 3:
            assert slots == list(range(len(unique))), tid  # file order = team order


def test_dylan_without_recovery_reproduces_file_shapes():
    rows = import_dylan(DYLAN, recover=False).to_pylist()
    raw = _raw_dylan()
    for row in rows:
        histories = raw[row["trajectory_id"]]
        n_unique = len([h for k, h in enumerate(histories) if h not in histories[:k]])
        assert [sum(t is not None for t in r) for r in row["texts"]] == \
            [n_unique] * len(histories[0])
        assert "from_prompts" not in row["flags"]


def test_dylan_recovered_texts_are_quoted_in_prompts(dylan_rows):
    prompts = {}
    for path in DYLAN.glob("*.json"):
        for i, value in enumerate(json.loads(path.read_text()).values()):
            prompts[f"{path.stem}:{i}"] = [m["content"] for h in value[0] for m in h
                                           if m["role"] == "user"]
    raw = _raw_dylan()
    n_recovered = 0
    for tid, row in dylan_rows.items():
        stored = {t for h in raw[tid] for t in h}
        extra = [t for r in row["texts"] for t in r if t is not None and t not in stored]
        n_recovered += len(extra)
        assert bool(extra) == ("from_prompts" in row["flags"]), tid
        for t in extra:  # quoted verbatim in a prompt of the same record
            assert any(f"One agent solution: ```{t}```" in p for p in prompts[tid]), tid
    assert n_recovered > 20


def test_dylan_known_records(dylan_rows):
    # 3 histories x 1 round: consensus after the third agent, agent 3 never spoke
    r = dylan_rows["counting_and_probability_228_481_4_3:0"]
    assert [[t is not None for t in row] for row in r["texts"]] == [[True, True, True, False]]
    # 3 x 2: agent 3 answered round 0 (quoted in the round-1 prompts), not round 1
    r = dylan_rows["intermediate_algebra_2193_24256_4_3:0"]
    assert [[t is not None for t in row] for row in r["texts"]] == \
        [[True, True, True, True], [True, True, True, False]]
    assert r["flags"] == ["from_prompts"]
    # the survivors stored in reverse order: history 0 is agent 3, history 1 is agent 2
    # (history 0's round-1 prompt quotes history 1's round-1 answer third; history 1's
    # round-1 prompt quotes history 0's round-0 answer third)
    hist = _raw_dylan()["counting_and_probability_228_481_4_3:2"]
    r = dylan_rows["counting_and_probability_228_481_4_3:2"]
    assert [row[3] for row in r["texts"]] == hist[0]
    assert [row[2] for row in r["texts"]] == hist[1]
    assert [[t is not None for t in row] for row in r["texts"]] == \
        [[False, False, True, True], [True, True, True, True], [False, False, True, True]]
    assert set(r["flags"]) == {"from_prompts", "responses_missing"}
    # the ranker kept the same agent twice: one history, slot unknown
    r = dylan_rows["counting_and_probability_228_481_4_3:4"]
    assert set(r["flags"]) == {"duplicate_history", "slots_by_order"}
    assert [[t is not None for t in row] for row in r["texts"]] == [[True, False, False, False]] * 2
    assert r["agreement"] == [0.25, 0.25]
    # identical texts allow two slot assignments
    assert "slots_ambiguous" in dylan_rows["intermediate_algebra_0_207_4_3:30"]["flags"]


def test_dylan_active_marks_the_rankers_survivors(dylan, dylan_rows):
    """``active`` [round][slot]: all 4 agents until the ranker, which ranks the round-1
    answers of a record without consensus; from round 1 on only the kept histories' slots."""
    assert dylan.schema.field("active").type == pa.list_(pa.list_(pa.bool_()))
    every = [True] * 4
    # the survivors are agents 3 and 2 (stored in reverse order; see above): a 2 x 3 record
    r = dylan_rows["counting_and_probability_228_481_4_3:2"]
    assert r["active"] == [every, [False, False, True, True], [False, False, True, True]]
    # a 2 x 2 record (the survivors, agents 1 and 2, already agree after round 1): the
    # pruned agents 0 and 3 spoke in round 1 (recovered from quotes) but are not active
    r = dylan_rows["intermediate_algebra_0_207_4_3:0"]
    assert r["active"] == [every, [False, True, True, False]]
    assert [t is not None for t in r["texts"][1]] == [True, True, True, False]
    # the ranker kept one agent twice: one survivor, in the first slot (slots_by_order)
    assert dylan_rows["counting_and_probability_228_481_4_3:4"]["active"] == \
        [every, [True, False, False, False]]
    # no ranker (3 or 4 histories): everyone, also an agent never asked (3 x 1)
    for tid, histories in _raw_dylan().items():
        if len(histories) >= 3:
            assert dylan_rows[tid]["active"] == [every] * len(histories[0]), tid


def test_dylan_extra_columns(dylan_rows):
    r = dylan_rows["counting_and_probability_228_481_4_3:2"]
    assert r["subject"] == "Counting & Probability"
    assert r["level"] == 5
    assert r["reference"] == r"\frac{40}{243}"
    assert r["question"] == ("We roll a fair 6-sided die 5 times.  What is the probability "
                             "that exactly 3 of the 5 rolls are either a 1 or a 2?")
    assert re.fullmatch(r"[0-9a-f]{16}", r["question_id"])
    assert r["trajectory_id"] == "counting_and_probability_228_481_4_3:2"


def test_dylan_answers_are_extracted_texts(dylan_rows):
    kinds = Counter()
    for row in dylan_rows.values():
        kind = answer_kind(row["reference"])
        kinds[kind] += 1
        for rt, ra in zip(row["texts"], row["answers"], strict=True):
            assert ra == [None if t is None else extract_answer(t, kind) for t in rt]
    assert kinds["choice"] >= 1 and kinds["number"] >= 1 and kinds[None] >= 1


def test_dylan_choice_gold_reads_letters(dylan_rows):
    # intermediate_algebra_0_207 record 28: gold \text{D}; the agents box
    # "\textbf{(E) } f(0) > 5" (read by hand: E) and "\textbf{(D) } f(0) = 5" (D)
    r = dylan_rows["intermediate_algebra_0_207_4_3:28"]
    assert r["reference"] == r"\text{D}"
    assert r["answers"][0] == ["E", "D", "D", "D"]
    assert (r["final_answer"], r["correct"]) == ("D", True)


def test_dylan_agreement_matches_majority_margin(dylan_rows):
    n_rounds_unparseable = 0
    for row in dylan_rows.values():
        assert len(row["agreement"]) == len(row["answers"])
        for answers, agreement in zip(row["answers"], row["agreement"], strict=True):
            ids = answer_classes(answers)
            voted = [None if k < 0 else f"class{k}" for k in ids]
            expected = fastuq.majority_margin(voted, n_agents=row["n_agents"])
            assert agreement == pytest.approx(expected, abs=0, rel=1e-15)
            if all(v is None for v in voted):
                n_rounds_unparseable += 1
                assert agreement == expected == 0.0
                assert "unparseable_round" in row["flags"]
    assert n_rounds_unparseable == 4  # intermediate_algebra_0_207 13 (1 round), 15 (2), 30 (1)


def _survivors_final(histories: list[list[str]], texts: list[list[str | None]],
                     kind) -> str | None:
    """Reference final answer from the raw file: the majority of the last answers of the
    agents whose histories the file keeps (DyLAN's survivors), ties to the lowest slot; each
    history's slot found by matching its texts (never a text recovered from a quote)."""
    unique = [h for k, h in enumerate(histories) if h not in histories[:k]]
    slotted = []
    for h in unique:
        slot = min(k for k in range(4) if all(texts[t][k] == h[t] for t in range(len(h))))
        slotted.append((slot, extract_answer(h[-1], kind)))
    slotted.sort()
    answers = [a for _, a in slotted]
    ids = answer_classes(answers)
    if (ids < 0).all():
        return None
    counts = np.bincount(ids[ids >= 0])
    winner = int(np.flatnonzero(counts == counts.max())[0])  # ties: lowest slot first
    return answers[int(np.flatnonzero(ids == winner)[0])]


def test_dylan_final_answer_is_the_survivors_majority(dylan_rows):
    raw = _raw_dylan()
    for tid, row in dylan_rows.items():
        expected = _survivors_final(raw[tid], row["texts"], answer_kind(row["reference"]))
        assert row["final_answer"] == expected, tid
        if expected is None:
            assert row["correct"] is False
        else:
            assert row["correct"] == answers_equivalent(expected, row["reference"])
    accuracy = np.mean([r["correct"] for r in dylan_rows.values()])
    assert 0.2 < accuracy < 0.8


def test_dylan_pruned_agents_do_not_vote_for_the_final_answer():
    """Hand-written 2 x 2 record: round 1 of the whole team ties 1-1-2-2 (agents 0 and 1 are
    recovered from the quotes), the ranker kept agents 3 and 2, who both answer 2."""
    (r,) = import_dylan(DATA / "dylan_survivors.json").to_pylist()
    assert r["answers"] == [[None, None, "2", "3"], ["1", "1", "2", "2"]]
    assert set(r["flags"]) == {"from_prompts", "responses_missing"}
    assert r["agreement"] == [0.25, 0.5]
    # the old rule (majority of every recovered round-1 answer, ties to slot 0) gave "1"
    assert (r["final_answer"], r["reference"], r["correct"]) == ("2", "2", True)
    assert (r["question"], r["level"], r["subject"]) == \
        ("What is the smallest prime number?", 1, "Number Theory")
    (kept,) = import_dylan(DATA / "dylan_survivors.json", recover=False).to_pylist()
    assert kept["answers"] == [[None, None, "2", "3"], [None, None, "2", "2"]]
    assert kept["final_answer"] == "2"


def test_dylan_processes_give_the_same_table(dylan):
    assert import_dylan(sorted(DYLAN.glob("*.json")), processes=2).equals(dylan)


def test_du_hand_written_file():
    t = import_du(DU)
    assert t.column_names[: len(CANONICAL)] == CANONICAL
    rows = {r["trajectory_id"]: r for r in t.to_pylist()}
    assert list(rows) == [f"du_debate:{i}" for i in range(5)]
    r = rows["du_debate:0"]  # GSM8K: gold after ####; 5.0 votes with 5
    assert (r["protocol"], r["n_agents"], r["reference"]) == ("debate", 3, "5")
    assert r["answers"] == [["5", "6", "5.0"], ["5", "5", "5"]]
    assert r["agreement"] == pytest.approx([2 / 3, 1.0])
    assert (r["final_answer"], r["correct"], r["flags"]) == ("5", True, [])
    assert r["question"] == "Janet has 3 apples and buys 2 more. How many apples does she have?"
    r = rows["du_debate:1"]  # multiple choice: the team drifts to the wrong letter
    assert r["answers"] == [["B", "C", "B"], ["C", "C", "B"]]
    assert r["agreement"] == pytest.approx([2 / 3, 2 / 3])
    assert (r["reference"], r["final_answer"], r["correct"]) == ("B", "C", False)
    r = rows["du_debate:2"]  # thousands separators in gold and answer; an unparseable agent
    assert r["answers"] == [[None, "1200", "1200.0"]]
    assert r["agreement"] == pytest.approx([2 / 3])
    assert (r["reference"], r["correct"]) == ("1200", True)
    r = rows["du_debate:3"]  # nothing parses in round 0; a 1-1 tie in round 1
    assert r["answers"] == [[None, None], ["7", "9"]]
    assert r["agreement"] == [0.0, 0.5]
    assert r["flags"] == ["unparseable_round"]
    assert (r["final_answer"], r["correct"]) == ("7", True)  # tie -> lowest slot
    r = rows["du_debate:4"]  # \frac{1}{2}, 0.5 and 1/2 vote together; boxed gold
    assert r["answers"] == [[r"\frac{1}{2}", "0.5", "1/2", "2"]]
    assert r["agreement"] == [0.75]
    assert (r["reference"], r["final_answer"], r["correct"]) == \
        (r"\dfrac{1}{2}", r"\frac{1}{2}", True)
    assert rows["du_debate:0"]["question_id"] != rows["du_debate:1"]["question_id"]
    assert import_du(DU)["question_id"].equals(t["question_id"])  # stable


def test_du_mmlu_letters():
    """Du et al.'s MMLU format (gen_mmlu.py prompts), written by hand: the gold is a letter,
    so every response reads as a letter ("(D) 45,X" is D, never 45; a list number is none)."""
    rows = import_du(DATA / "du_mmlu.json").to_pylist()
    assert [r["reference"] for r in rows] == ["D", "B", "B", "C"]
    assert [r["answers"] for r in rows] == [
        [["D", "B", "D"], ["D", "D", "D"]],  # "(D) 45,X", "(X) B", "**(D)**"; ..., \boxed{\text{D}}
        [["B", None, "C"], ["B", "B", "C"]],  # "(B) 2.66 %"; a numbered list states no letter
        [["B", "A", "A"], ["B", "A", "A"]],  # "**B) Media tour**", "A) Press release", "(X) A"
        [[None, None, None], ["C", "C", "C"]],  # no letter in round 0
    ]
    # count / team size: equal fractions are equal floats, compared exactly
    assert [r["agreement"] for r in rows] == [[2 / 3, 1], [1 / 3, 2 / 3], [2 / 3, 2 / 3], [0, 1]]
    assert [r["final_answer"] for r in rows] == ["D", "B", "A", "C"]
    assert [r["correct"] for r in rows] == [True, True, False, True]
    assert [r["flags"] for r in rows] == [[], [], [], ["unparseable_round"]]


def test_du_gsm_boxed_sentences():
    """Du et al.'s GSM8K format (gen_gsm.py prompts), written by hand: the gold (after ####)
    is a number, so a boxed sentence around one number gives the number; expressions,
    ranges and lists stay unreduced."""
    rows = import_du(DATA / "du_gsm.json").to_pylist()
    assert [r["reference"] for r in rows] == ["2", "16", "1128", "9"]
    assert [r["answers"] for r in rows] == [
        [["2", "2", "3"], ["2", "2", "2"]],  # \boxed{Ronnie has $2}
        [["16", "15", "16"], ["16", "16", "16"]],  # Time = 16 hours, answer: 15, still 16
        [["1128", "4", "1128"]],  # {1128 \text{ minutes}}, {4 miles per hour}, 1,128 minutes
        [["7x + 9", "27 selfies, 18 portraits", r"160 \leq d \leq 230"]],
    ]
    assert [r["agreement"] for r in rows] == [[2 / 3, 1], [2 / 3, 1], [2 / 3], [1 / 3]]
    assert [r["final_answer"] for r in rows] == ["2", "16", "1128", "7x + 9"]
    assert [r["correct"] for r in rows] == [True, True, True, False]


def test_du_biography_logs_are_refused_clearly():
    with pytest.raises(ValueError, match=r"du_biography\.json: record 0 \('Ada Lovelace'\): "
                                         r"value is a list of agent histories without a gold"):
        import_du(DATA / "du_biography.json")


def test_du_ragged_histories(tmp_path):
    path = tmp_path / "ragged.json"
    u = {"role": "user", "content": "q"}
    path.write_text(json.dumps({"q": [[
        [u, {"role": "assistant", "content": r"\boxed{1}"}, u,
         {"role": "assistant", "content": r"\boxed{2}"}],
        [u, {"role": "assistant", "content": r"\boxed{1}"}],
    ], 2]}))
    (r,) = import_du(path).to_pylist()
    assert r["answers"] == [["1", "1"], ["2", None]]
    assert r["agreement"] == [1.0, 0.5]
    assert r["flags"] == ["ragged_rounds"]
    assert (r["reference"], r["correct"]) == ("2", True)


@pytest.mark.parametrize(
    "gold,expected",
    [("a\n#### 1,234", "1234"), ("B", "B"), ("(C)", "C"), (7, "7"), (2.5, "2.5"),
     (r"so \boxed{\frac{1}{2}}", r"\frac{1}{2}"), ("  Paris ", "Paris")],
)
def test_parse_gold(gold, expected):
    assert parse_gold(gold) == expected


def _write(tmp_path: Path, name: str, text: str) -> Path:
    path = tmp_path / name
    path.write_text(text)
    return path


def test_bad_input_names_file_and_record(tmp_path):
    bad = _write(tmp_path, "broken.json", '{"q": [')
    with pytest.raises(ValueError, match=r"broken\.json: malformed JSON"):
        import_dylan(bad)
    with pytest.raises(ValueError, match=r"broken\.json: malformed JSON"):
        import_du(bad)
    arr = _write(tmp_path, "list.json", "[1, 2]")
    with pytest.raises(ValueError, match=r"list\.json: expected one JSON object"):
        import_du(arr)
    ok = [[{"role": "user", "content": "q"}, {"role": "assistant", "content": "1"}]]
    wrong = _write(tmp_path, "wrong.json", json.dumps({"q1": [ok, "1"], "q2": [ok]}))
    with pytest.raises(ValueError, match=r"wrong\.json: record 1 \('q2'\): value must be"):
        import_du(wrong)
    with pytest.raises(ValueError, match=r"wrong\.json: record 0 \('q1'\): value must be"):
        import_dylan(wrong)
    role = _write(tmp_path, "role.json", json.dumps(
        {"q": [[[{"role": "bot", "content": "1"}]], "1"]}))
    with pytest.raises(ValueError, match=r"role\.json: record 0 .*unknown role 'bot'"):
        import_du(role)
    silent = _write(tmp_path, "silent.json", json.dumps(
        {"q": [[[{"role": "user", "content": "q"}]], "1", 1, "Algebra"]}))
    with pytest.raises(ValueError, match=r"silent\.json: record 0 .*no assistant message"):
        import_dylan(silent)
    five = _write(tmp_path, "five.json", json.dumps({"q": [ok * 5, "1", 1, "Algebra"]}))
    with pytest.raises(ValueError, match=r"five\.json: record 0 .*5 histories"):
        import_dylan(five)
    with pytest.raises(FileNotFoundError):
        import_du(tmp_path / "missing.json")
    with pytest.raises(ValueError, match="unknown log format"):
        import_logs("nope", DU)


def _main(monkeypatch, argv: list[str]) -> int:
    monkeypatch.setitem(cli.COMMANDS, "import", "fastuq.cli.import_logs")
    return cli.main(argv)


def test_cli_import_writes_parquet(tmp_path, monkeypatch, capsys):
    out = tmp_path / "sub" / "corpus.parquet"
    assert _main(monkeypatch, ["import", "du", str(DU), "-o", str(out)]) == 0
    table = pq.read_table(out)
    assert table.equals(import_du(DU))
    assert [p.name for p in out.parent.iterdir()] == ["corpus.parquet"]  # no temp file left
    text = capsys.readouterr().out
    assert "imported 5 trajectories" in text
    assert "accuracy 0.8000 (4 of 5)" in text
    assert "[3, 3]: 2" in text
    assert "unparseable answers: 3 of" in text
    assert "wrote" in text


def test_cli_import_dylan_folder(tmp_path, monkeypatch, capsys):
    out = tmp_path / "dylan.parquet"
    assert _main(monkeypatch, ["import", "dylan", str(DYLAN), "-o", str(out)]) == 0
    assert pq.read_metadata(out).num_rows == 44
    assert "protocols: dylan 44" in capsys.readouterr().out


def test_cli_import_bad_input_fails_cleanly(tmp_path, monkeypatch, capsys):
    bad = _write(tmp_path, "bad.json", "{nope")
    out = tmp_path / "out.parquet"
    assert _main(monkeypatch, ["import", "du", str(bad), "-o", str(out)]) == 2
    assert "bad.json: malformed JSON" in capsys.readouterr().err
    assert list(tmp_path.iterdir()) == [bad]  # nothing written
    assert _main(monkeypatch, ["import", "du", str(DU), "-o", str(out),
                               "--processes", "0"]) == 2


# --- --math: every distinct math-verify check once, over worker processes -----------------------
HAS_MATH_VERIFY = __import__("fastuq.answers.check", fromlist=["x"]).math_verify_available()


def _du_math_log(path: Path) -> Path:
    """Two Du-format debates, three agents, two rounds, whose answers are equal only by
    math-verify ((x+2)/7 and \\frac{x+2}{7}; \\sqrt{8} and 2\\sqrt{2})."""
    def debate(rounds):
        return [[m for r in agent for m in ({"role": "user", "content": "Solve."},
                                            {"role": "assistant", "content": r})]
                for agent in zip(*rounds, strict=True)]

    log = {
        "Simplify (x + 2) / 7.": [debate([
            [r"So \boxed{(x+2)/7}", r"We get \boxed{\frac{x+2}{7}}", r"\boxed{x+2}"],
            [r"\boxed{(x+2)/7}", r"\boxed{(x+2)/7}", r"\boxed{(x+2)/7}"]]), r"\frac{x+2}{7}"],
        "Simplify sqrt(8).": [debate([
            [r"\boxed{\sqrt{8}}", r"\boxed{2\sqrt{2}}", r"\boxed{3}"],
            [r"\boxed{\sqrt{8}}", r"\boxed{\sqrt{8}}", r"\boxed{2\sqrt{2}}"]]), r"2\sqrt{2}"],
    }
    path.write_text(json.dumps(log))
    return path


@pytest.mark.skipif(not HAS_MATH_VERIFY, reason="math-verify not installed (fastuq[math])")
def test_import_math_over_workers_equals_checking_in_process(tmp_path):
    from fastuq.importers.common import derive_columns
    from fastuq.importers.du import parse_du_file

    log = _du_math_log(tmp_path / "math.json")
    # worked by hand: math-verify joins (x+2)/7 with \frac{x+2}{7}, \sqrt{8} with 2\sqrt{2}
    by_hand = {"agreement": [[2 / 3, 1.0], [2 / 3, 1.0]], "final_answer": ["(x+2)/7", r"\sqrt{8}"],
               "correct": [True, True]}
    plain = import_du(log).to_pydict()
    assert plain["agreement"] == [[1 / 3, 1.0], [1 / 3, 2 / 3]]
    assert plain["correct"] == [False, False]
    # the reference: derived in this process, math-verify called pair by pair
    records = parse_du_file(log)
    for r in records:
        r.source = "du"
    want = derive_columns(records, math=True)
    for name, values in by_hand.items():
        assert want[name] == values, name
    for processes in (None, 2, 3):
        got = import_du(log, math=True, processes=processes).to_pydict()
        for name, values in want.items():
            if name == "active" and all(v is None for v in values):
                assert name not in got  # the table leaves out an all-null "active"
                continue
            assert got[name] == values, (processes, name)


@pytest.mark.slow  # worker processes over many files
@pytest.mark.skipif(not HAS_MATH_VERIFY, reason="math-verify not installed (fastuq[math])")
def test_import_math_of_many_files_over_workers_equals_one_process(tmp_path):
    # several files and processes > 1: parsing, the dry run and the derivation run in worker
    # processes too; the table must be the one the single-process import gives, and match
    # what was worked out by hand for the two debates of each file
    logs = [_du_math_log(tmp_path / f"math{i}.json") for i in range(3)]
    want = import_du(logs, math=True)
    assert want.column("correct").to_pylist() == [True, True] * 3
    assert want.column("final_answer").to_pylist() == ["(x+2)/7", r"\sqrt{8}"] * 3
    assert want.column("agreement").to_pylist() == [[2 / 3, 1.0], [2 / 3, 1.0]] * 3
    for processes in (2, 3):
        got = import_du(logs, math=True, processes=processes)
        assert got.equals(want), processes


@pytest.mark.skipif(not HAS_MATH_VERIFY, reason="math-verify not installed (fastuq[math])")
def test_math_verdicts_outer_timeout_counts_a_hung_check_as_not_equivalent():
    from fastuq.answers.check import math_verdicts

    pairs = [(r"\frac{x+2}{7}", "(x+2)/7"), (r"\sqrt{8}", r"2\sqrt{2}"), ("x", "y"),
             (r"\frac{x+2}{7}", "(x+2)/7")]  # a pair given twice is checked once
    assert math_verdicts(pairs, 2) == {(r"\frac{x+2}{7}", "(x+2)/7"): True,
                                       (r"\sqrt{8}", r"2\sqrt{2}"): True, ("x", "y"): False}
    # no check can answer within a microsecond: each worker is stopped and replaced, every
    # pair counts as not equivalent, and the call still returns
    assert math_verdicts(pairs, 2, timeout=1e-6) == dict.fromkeys(set(pairs), False)
    assert math_verdicts([], 2) == {}
