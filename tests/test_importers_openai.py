"""``fastuq import openai``: OpenAI-shape (chat, legacy completions) and Gemini responses with
log-probabilities, from hand-written fixtures (tests/data/openai) whose answers, agreement,
log-probability sums, entropies and graph are worked out by hand below."""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
import pyarrow.parquet as pq
import pytest

from fastuq.cli import main
from fastuq.importers import detect_format, import_logs, import_openai
from fastuq.importers.openai import load_fields
from fastuq.signals import token_entropy_from_topk

DATA = Path(__file__).parent / "data" / "openai"
CHAT, LEGACY, GEMINI = (DATA / f"{n}_debate.jsonl" for n in ("chat", "legacy", "gemini"))
LEGACY_MAP = {"trajectory_id": "debate.id", "round": "debate.turn", "agent": "debate.speaker",
              "gold": "debate.label"}
TOL = 1e-12


def h2(a: float, b: float) -> float:
    """Entropy (nats) of two alternatives with log-probabilities a, b, renormalised: a
    reference written apart (p = 1 / (1 + e^(b - a)))."""
    p = 1.0 / (1.0 + math.exp(b - a))
    return -(p * math.log(p) + (1 - p) * math.log(1 - p))


def mean(xs) -> float:
    return sum(xs) / len(xs)


def col(table, name):
    return table.column(name).to_pylist()[0]


def close(got, want, tol=TOL):
    """Nested lists equal within ``tol`` (None where None)."""
    if isinstance(want, list):
        assert isinstance(got, list) and len(got) == len(want), (got, want)
        for g, w in zip(got, want, strict=True):
            close(g, w, tol)
    elif want is None:
        assert got is None
    else:
        assert got == pytest.approx(want, abs=tol)


# the chat fixture: "So \boxed{N}" as 4 tokens; per node (chosen log-prob of N, its top-2)
CHAT_N = [[(-0.2, (-0.2, -1.0)), (-1.5, (-0.4, -0.4)), (-0.3, (-0.3, -1.2))],
          [(-0.05, (-0.05, -3.0)), (-0.4, (-0.4, -0.4)), (-0.1, (-0.1, -2.3))]]


def chat_node_entropy(top_n):
    # tokens: "So" (equal pair: ln 2), " \boxed{" (-0.1, -2.0), N (its pair), "}" (-0.01, -6.0)
    return mean([math.log(2), h2(-0.1, -2.0), h2(*top_n), h2(-0.01, -6.0)])


def test_chat_fixture_hand_worked():
    t = import_openai(CHAT)
    assert t.num_rows == 1
    assert col(t, "trajectory_id") == "gsm-1"
    assert col(t, "source") == "openai" and col(t, "protocol") == "debate"
    assert col(t, "n_agents") == 3 and col(t, "agents") == ["a", "b", "c"]
    assert col(t, "answers") == [["42", "41", "42"], ["42", "42", "42"]]
    close(col(t, "agreement"), [2 / 3, 1.0])
    assert col(t, "final_answer") == "42" and col(t, "correct") is True
    # seq_logprob: "So" -0.5, " \boxed{" -0.1, N, "}" -0.01
    close(col(t, "seq_logprob"), [[-0.81, -2.11, -0.91], [-0.66, -1.01, -0.71]])
    assert col(t, "n_tokens") == [[4, 4, 4], [4, 4, 4]]
    close(col(t, "answer_logprob"), [[-0.2, -1.5, -0.3], [-0.05, -0.4, -0.1]])
    h = [[chat_node_entropy(top) for _, top in row] for row in CHAT_N]
    close(col(t, "node_entropy"), h)
    close(col(t, "token_entropy"), [mean(h[0]), mean(h[1])])
    # round 1: a read b and c, b read a, c read nobody; round 0 lines give none
    assert col(t, "predecessors") == [[None, None, None], [[1, 2], [0], []]]
    assert "topk_logprobs" not in t.column_names and "token_logprobs" not in t.column_names


def test_chat_topk_columns_agree_with_the_engine_entropy():
    t = import_openai(CHAT, topk=True)
    assert col(t, "token_logprobs")[1][0] == pytest.approx([-0.5, -0.1, -0.05, -0.01])
    assert col(t, "topk_logprobs")[0][1][2] == pytest.approx([-0.4, -0.4])
    node, rnd = token_entropy_from_topk(t.column("topk_logprobs").combine_chunks())
    close(col(t, "node_entropy"), node.to_pylist()[0], 1e-6)  # float32 top-k column
    close(col(t, "token_entropy"), rnd.to_pylist()[0], 1e-6)


def test_legacy_fixture_with_mapped_fields():
    t = import_openai(LEGACY, fields=LEGACY_MAP)
    assert col(t, "trajectory_id") == "mmlu-7" and col(t, "reference") == "B"
    assert col(t, "agents") == ["alice", "bob"]
    assert col(t, "answers") == [["B", "C"], ["B", "B"]]
    close(col(t, "agreement"), [0.5, 1.0])
    assert col(t, "final_answer") == "B" and col(t, "correct") is True
    # " The" -0.2, " answer" -0.1, " is" -0.1, " (" -0.3, X, ")." -0.05
    close(col(t, "seq_logprob"), [[-1.45, -1.65], [-0.95, -1.05]])
    close(col(t, "answer_logprob"), [[-0.7, -0.9], [-0.2, -0.3]])
    assert col(t, "n_tokens") == [[6, 6], [6, 6]]
    shared = [h2(-0.2, -1.7), h2(-0.1, -2.4), h2(-0.1, -2.4), h2(-0.3, -1.4), h2(-0.05, -3.0)]
    h = [[mean([*shared, x]) for x in (math.log(2), h2(-0.9, -0.6))],
         [mean([*shared, x]) for x in (h2(-0.2, -1.7), h2(-0.3, -1.4))]]
    close(col(t, "node_entropy"), h)
    close(col(t, "token_entropy"), [mean(h[0]), mean(h[1])])
    assert "predecessors" not in t.column_names  # no line gives them


def test_gemini_fixture():
    t = import_openai(GEMINI)
    assert col(t, "reference") == "7" and col(t, "agents") == ["0", "1"]
    assert col(t, "answers") == [["7", "8"], ["7", "7"]]
    close(col(t, "agreement"), [0.5, 1.0])
    assert col(t, "final_answer") == "7" and col(t, "correct") is True
    # "The" -0.1, " result" -0.2, " is" -0.1, " N"
    close(col(t, "seq_logprob"), [[-1.0, -1.4], [-0.7, -0.8]])
    close(col(t, "answer_logprob"), [[-0.6, -1.0], [-0.3, -0.4]])
    shared = [h2(-0.1, -2.4), h2(-0.2, -1.7), h2(-0.1, -2.4)]
    h = [[mean([*shared, h2(*p)]) for p in ((-0.6, -0.8), (-0.5, -1.0))],
         [mean([*shared, h2(*p)]) for p in ((-0.3, -1.4), (-0.4, -1.1))]]
    close(col(t, "node_entropy"), h)


def test_detection_knows_the_shapes():
    for path in (CHAT, LEGACY, GEMINI):
        assert detect_format(path)[0] == "openai"
    assert import_logs("auto", GEMINI).column("source").to_pylist() == ["openai"]


def _lines(path: Path) -> list[dict]:
    return [json.loads(x) for x in path.read_text().splitlines()]


def _write(tmp_path: Path, lines: list[dict], name: str = "x.jsonl") -> Path:
    out = tmp_path / name
    out.write_text("".join(json.dumps(x) + "\n" for x in lines))
    return out


def test_null_logprobs_raise_naming_the_record(tmp_path):
    lines = _lines(CHAT)
    lines[4]["choices"][0]["logprobs"] = None
    with pytest.raises(ValueError, match=r"line 5, 'gsm-1'\): round 1, agent 'b': "
                                         r"choices\[0\]\.logprobs\.content is missing"):
        import_openai(_write(tmp_path, lines))
    lines = _lines(CHAT)
    lines[2]["choices"][0]["logprobs"]["content"][2]["logprob"] = None
    with pytest.raises(ValueError, match=r"round 0, agent 'c': .*logprob\[2\] is None"):
        import_openai(_write(tmp_path, lines))


def test_skip_leaves_the_whole_trajectory_out(tmp_path):
    good = _lines(CHAT)
    bad = _lines(CHAT)
    for x in bad:
        x["trajectory_id"] = "gsm-2"
    del bad[3]["choices"][0]["logprobs"]
    skipped = []
    t = import_logs("openai", _write(tmp_path, good + bad), on_error="skip", skipped=skipped)
    assert t.column("trajectory_id").to_pylist() == ["gsm-1"]
    assert len(skipped) == 1 and "gsm-2" in skipped[0].reason
    assert "round 1, agent 'a'" in skipped[0].reason


def test_no_topk_gives_no_entropy_rather_than_a_guess(tmp_path):
    lines = _lines(CHAT)
    for tok in lines[1]["choices"][0]["logprobs"]["content"]:
        tok["top_logprobs"] = []
    t = import_openai(_write(tmp_path, lines))
    assert col(t, "token_entropy") is None and "no_topk" in col(t, "flags")
    assert col(t, "node_entropy")[0][1] is None
    close(col(t, "node_entropy")[0][0], chat_node_entropy((-0.2, -1.0)))
    close(col(t, "seq_logprob")[0][1], -2.11)


def test_answer_not_in_the_text_is_null(tmp_path):
    lines = _lines(CHAT)[:1]
    msg = lines[0]["choices"][0]
    msg["message"]["content"] = "So 1,000"  # read as 1000: not spelt so in the text
    msg["logprobs"]["content"] = [{"token": "So", "logprob": -0.1, "top_logprobs": []},
                                  {"token": " 1,000", "logprob": -0.2, "top_logprobs": []}]
    t = import_openai(_write(tmp_path, lines))
    assert col(t, "answers") == [["1000"]]
    assert col(t, "answer_logprob") == [[None]]
    close(col(t, "seq_logprob"), [[-0.3]])


def test_bad_mapping_and_graph(tmp_path):
    with pytest.raises(ValueError, match="unknown key 'speaker'"):
        load_fields({"speaker": "x"})
    toml = tmp_path / "map.toml"
    toml.write_text('[openai]\ntrajectory_id = "debate.id"\nround = "debate.turn"\n'
                    'agent = "debate.speaker"\ngold = "debate.label"\n')
    assert load_fields(toml)["agent"] == "debate.speaker"
    assert import_openai(LEGACY, fields=toml).column("final_answer").to_pylist() == ["B"]
    lines = _lines(CHAT)
    lines[3]["predecessors"] = ["b", "z"]
    with pytest.raises(ValueError, match="round 1, agent 'a': predecessors names agent 'z'"):
        import_openai(_write(tmp_path, lines))


def test_cli_import_map_and_errors(tmp_path, capsys):
    out = tmp_path / "c.parquet"
    argv = ["import", "openai", str(LEGACY), "-o", str(out)]
    for k, v in LEGACY_MAP.items():
        argv += ["--map", f"{k}={v}"]
    assert main(argv) == 0
    assert pq.read_table(out).column("final_answer").to_pylist() == ["B"]
    assert main(["import", "openai", str(LEGACY), "-o", str(out)]) == 2  # default fields
    assert "missing field 'trajectory_id'" in capsys.readouterr().err
    assert main(["import", "openai", str(LEGACY), "-o", str(out), "--map", "agent"]) == 2
    assert main(["import", "ford", str(LEGACY), "-o", str(out), "--map", "a=b"]) == 2


def test_scores_on_an_openai_import():
    """UMAS, MSP, perplexity, mean token entropy, BCCS and SAUCE run on the import; the
    static ones checked by hand from the fixture's sums."""
    import fastuq

    t = import_openai(CHAT)
    s = fastuq.score(t, ["umas", "umas_fix", "msp_final", "perplexity_final",
                         "mean_token_entropy", "bccs", "sauce"], dtype="float64")
    row = s.to_pylist()[0]
    seq = [[-0.81, -2.11, -0.91], [-0.66, -1.01, -0.71]]
    assert row["umas_fix"] == pytest.approx(-mean(seq[0] + seq[1]), abs=1e-9)
    assert row["msp_final"] == pytest.approx(-mean(seq[1]), abs=1e-9)
    assert row["perplexity_final"] == pytest.approx(mean([math.exp(-x / 4) for x in seq[1]]),
                                                    abs=1e-9)
    h = [chat_node_entropy(top) for r in CHAT_N for _, top in r]
    assert row["mean_token_entropy"] == pytest.approx(mean(h), abs=1e-9)
    assert row["bccs"] == pytest.approx(0.0, abs=1e-9)  # all three say 42 in the last round
    assert np.isfinite(row["umas"]) and np.isfinite(row["sauce"])


def _snake(x):
    """The Gemini REST JSON's camelCase keys as the Python SDK's model_dump writes them."""
    rename = {"logprobsResult": "logprobs_result", "topCandidates": "top_candidates",
              "chosenCandidates": "chosen_candidates", "logProbability": "log_probability"}
    if isinstance(x, dict):
        return {rename.get(k, k): _snake(v) for k, v in x.items()}
    if isinstance(x, list):
        return [_snake(v) for v in x]
    return x


def test_gemini_sdk_spelling_reads_the_same(tmp_path):
    lines = [_snake(x) for x in _lines(GEMINI)]
    assert "logprobs_result" in lines[0]["candidates"][0]
    t = import_openai(_write(tmp_path, lines))
    close(col(t, "seq_logprob"), [[-1.0, -1.4], [-0.7, -0.8]])
    close(col(t, "answer_logprob"), [[-0.6, -1.0], [-0.3, -0.4]])
    assert detect_format(tmp_path / "x.jsonl")[0] == "openai"


def test_a_node_twice_or_several_choices_raise(tmp_path):
    lines = _lines(CHAT)
    with pytest.raises(ValueError, match=r"round 0, agent 'a': a second response \(the first "
                                         r"is on line 1\)"):
        import_openai(_write(tmp_path, [*lines, lines[0]]))
    lines[0]["choices"].append(lines[0]["choices"][0])
    with pytest.raises(ValueError, match=r"round 0, agent 'a': choices must hold exactly one "
                                         r"object .* got 2"):
        import_openai(_write(tmp_path, lines))


def test_cli_map_file_and_topk(tmp_path):
    toml = tmp_path / "map.toml"
    toml.write_text("[openai]\n" + "".join(f'{k} = "{v}"\n' for k, v in LEGACY_MAP.items()))
    out = tmp_path / "c.parquet"
    assert main(["import", "openai", str(LEGACY), "-o", str(out), "--map", str(toml),
                 "--topk"]) == 0
    t = pq.read_table(out)
    assert col(t, "topk_logprobs")[0][0][4] == pytest.approx([-0.7, -0.7])
    assert col(t, "token_logprobs")[1][1] == pytest.approx([-0.2, -0.1, -0.1, -0.3, -0.3,
                                                            -0.05])
