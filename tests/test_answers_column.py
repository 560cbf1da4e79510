"""``fastuq.answers.extract_answer_column``: the answers of ``extract_answer`` over a column,
text by text (``extract_answer`` is the definition), with Python called once per distinct
text that the vectorized searches do not decide."""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pytest

from fastuq.answers import extract_answer, extract_answer_column

#: Pieces of texts near the fast paths' edges: "answer is" in any case, with ":" and line
#: breaks, numbers with signs, dots and separators, dates, boxes, letters, non-ASCII and the
#: control characters Python's \s reads as white space and Rust's does not.
PIECES = ["The answer is", "answer is:", "ANSWER IS", "Answer  is", "answer\nis", "answers is",
          "is", "answer", "42", "-3", "2.5", "-0.5", "3.", "1,500", "05/01/2021", "3/4", "-",
          ".", ":", "$7$", "\\boxed{5}", "\\frac{1}{2}", "(B)", "(K)", "x", "so", "not",
          "\u00e9", "\u0663", "\x1c", "\x1f", "\xa0", "\r", "\t", "\n", "  ", "=", "7 cm",
          "the final answer is 9", "option (C) 5", "Ответ:"]


def _random_texts(seed: int, n: int) -> list[str | None]:
    rng = np.random.default_rng(seed)
    out: list[str | None] = []
    for _ in range(n):
        if rng.random() < 0.03:
            out.append(rng.choice(["", None, " ", "answer is 5"]))
            continue
        parts = rng.choice(PIECES, rng.integers(1, 7)).tolist()
        seps = rng.choice(["", " ", "\n", ". ", " \t", "\r\n"], len(parts)).tolist()
        out.append("".join(a + b for a, b in zip(parts, seps, strict=True)))
    return out


@pytest.mark.parametrize("seed,block", [(0, None), (1, None), (2, 37)])
def test_column_equals_extract_answer_text_by_text(seed, block, monkeypatch):
    import fastuq.answers.column as column

    if block:  # byte-scan blocks of a few rows, a text split across none
        monkeypatch.setattr(column, "_BLOCK_BYTES", block)
    texts = _random_texts(seed, 4000)
    got = extract_answer_column(texts).to_pylist()
    want = [extract_answer(t) for t in texts]
    bad = [(t, g, w) for t, g, w in zip(texts, got, want, strict=True) if g != w]
    assert not bad, bad[:5]


def test_fast_paths_by_hand():
    texts = ["we sum, then the answer is 42", "So the Answer Is: -3.5.\r", "answer is\n7",
             "no digits at all", "The answer is 42\nmore", "\\boxed{3} the answer is 4",
             "the answer is 1,500", None, "", "caf\u00e9, the answer is 5"]
    got = extract_answer_column(pa.array(texts, pa.string())).to_pylist()
    # rule 2 keeps "1,500" as written (normalize_answer drops the comma)
    assert got == ["42", "-3.5", "7", None, "42", "3", "1,500", None, None, "5"]


def test_python_runs_once_per_distinct_undecided_text(monkeypatch):
    import fastuq.answers.extract as extract

    calls: list[str] = []
    real = extract.extract_answer

    def counting(text, kind=None):
        calls.append(text)
        return real(text, kind)

    monkeypatch.setattr(extract, "extract_answer", counting)
    texts = (["filler words, the answer is 42"] * 500 + ["nothing here"] * 300
             + ["\\boxed{1}", "x = 3 apples"] * 200)
    got = extract_answer_column(texts).to_pylist()
    assert got == ["42"] * 500 + [None] * 300 + ["1", "3"] * 200
    assert sorted(calls) == sorted(["\\boxed{1}", "x = 3 apples"])


def test_input_kinds_and_errors():
    import polars as pl

    texts = ["the answer is 3", None, "(B)", "x"]
    want = ["3", None, "B", None]
    assert extract_answer_column(texts).to_pylist() == want
    assert extract_answer_column(np.array(texts, dtype=object)).to_pylist() == want
    assert extract_answer_column(pl.Series(texts)).to_pylist() == want
    assert extract_answer_column(pa.chunked_array([texts[:2], texts[2:]])).to_pylist() == want
    assert extract_answer_column(pa.array(texts).dictionary_encode()).to_pylist() == want
    assert extract_answer_column(pa.array(texts, pa.large_string()).slice(2)).to_pylist() \
        == want[2:]
    assert extract_answer_column([]).to_pylist() == []
    assert extract_answer_column(pa.array([None, None])).to_pylist() == [None, None]
    with pytest.raises(ValueError, match="got one string"):
        extract_answer_column("the answer is 3")
    with pytest.raises(ValueError, match="texts must be strings"):
        extract_answer_column(pa.array([1, 2]))
    with pytest.raises(ValueError, match="texts must be strings"):
        extract_answer_column([1, 2])


def test_a_date_is_one_answer_not_its_year():
    from fastuq.answers import answers_equivalent

    assert extract_answer("It is due 05/01/2021.") == "05/01/2021"
    assert extract_answer("so on 2021-05-01") == "2021-05-01"
    assert not answers_equivalent(extract_answer("05/01/2021"), extract_answer("04/30/2021"))
    # not dates: a fraction, a range, a subtraction
    assert extract_answer("x is 3/4") == "3/4"
    assert extract_answer("from 2020-2021") == "2021"
    assert extract_answer("12-5") == "5"
    assert extract_answer_column(["due 05/01/2021", "04/30/2021"]).to_pylist() == [
        "05/01/2021", "04/30/2021"]
