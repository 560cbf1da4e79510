"""fastuq.answers: extraction on real DyLAN responses, normalisation, equivalence, classes."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from fastuq import answers as A
from fastuq.answers import (
    answer_classes,
    answer_kind,
    answers_equivalent,
    check_answers,
    extract_answer,
    extract_answers,
    normalize_answer,
    numeric_value,
)

DATA = Path(__file__).parent / "data" / "dylan_math"
HAS_MATH_VERIFY = A.math_verify_available()


def _response(stem: str, record: int, history: int, round_: int) -> str:
    data = json.loads((DATA / f"{stem}.json").read_text())
    contexts = list(data.values())[record][0]
    return [m["content"] for m in contexts[history] if m["role"] == "assistant"][round_]


IA = "intermediate_algebra_0_207_4_3"
CP = "counting_and_probability_228_481_4_3"

# (file, record, history, round, the answer the response states), read by hand from the texts.
REAL_RESPONSES = [
    (IA, 0, 0, 0, r"1,\frac{288}{149},3"),  # "... are $\boxed{1,\frac{288}{149},3}.$"
    (IA, 0, 1, 0, "4,-1"),  # "Thus, the solutions are $\boxed{4,-1}.$"
    (IA, 1, 0, 0, "1"),  # "there is only $\boxed{1}$ integer value of $k$ ..., namely $k=2$"
    (IA, 1, 2, 0, r"+\infty"),  # "... = \boxed{+\infty}$ integer values"
    (IA, 2, 0, 0, "12"),  # "... closer ... compared to Sasha's. The answer is 12."
    (IA, 3, 0, 0, "-12"),  # "Therefore, the answer is $\boxed{-12}$."
    (IA, 5, 0, 0, "4"),  # "our final answer is $k= \boxed{4}.$"
    (IA, 5, 3, 0, "0"),  # no box, no "answer is": the last number ("... and $k=0,$ ...")
    (IA, 8, 0, 0, "19-Q"),  # "$A+B+C = -Q+19 = \boxed{19-Q}.$"
    (IA, 8, 2, 0, r"-\frac{16}{9}"),  # nested braces: "\boxed{-\frac{16}{9}}"
    (IA, 20, 0, 0, "75"),  # "Therefore, the answer is $75$."
    (IA, 25, 1, 0, r"\frac{1}{2}\left(1-\frac{1}{10\sqrt[4]{10}}\right)"),  # "answer is $...$."
    (IA, 26, 1, 0, "(x^6 - x + 1)"),  # "The answer is $(x^6 - x + 1)$."
    (CP, 2, 0, 0, r"\frac{320}{729}"),  # "... \approx 0.439$. The answer is $\frac{320}{729}$."
]


@pytest.mark.parametrize("stem,record,history,round_,expected", REAL_RESPONSES)
def test_extract_answer_real_dylan_responses(stem, record, history, round_, expected):
    assert extract_answer(_response(stem, record, history, round_)) == expected


@pytest.mark.parametrize(
    "text,expected",
    [
        (r"so $x = \boxed{\frac{a}{b^{2}}}$ and done", r"\frac{a}{b^{2}}"),  # nested braces
        (r"first \boxed{1}, then \boxed{2}.", "2"),  # the last box
        (r"\fbox{7} is it", "7"),
        (r"\boxed{3} then a cut-off \boxed{\frac{1}{", "3"),  # unclosed box skipped
        (r"empty \boxed{} then 4", "4"),
        (r"\boxed 5$ done", "5"),  # MATH's brace-less form
        (r"The answer is \boxed{4}. The answer is 5.", "4"),  # boxed wins
        ("Adding them: The answer is 1,234.", "1,234"),
        ("The final answer is: $-\\frac{3}{4}$. Done.", "-\\frac{3}{4}"),
        ("so THE ANSWER IS 3.5.", "3.5"),
        ("the answer is (C) because of 5 reasons", "C"),
        ("Thus the answer is that the area is 78 square units.", "78"),
        ("the answer is indeed 720 degrees.", "720"),
        ("The answer is 5, as the first agent found.", "5"),
        ("The answer is no solution.", "no solution"),
        ("I pick (B)", "B"),
        ("I pick (B) over (A)", "A"),  # the last letter
        ("option (B) gives 42 apples", "42"),  # a number after the letter: not a choice
        ("it costs 1,234,567 dollars", "1234567"),
        ("x = 3-5", "5"),  # binary minus
        ("the value is -5.", "-5"),
        ("about .5 of them", ".5"),
        ("a ratio of 3/4.", "3/4"),
        ("with 2.75 left", "2.75"),
    ],
)
def test_extract_answer_rules(text, expected):
    assert extract_answer(text) == expected


@pytest.mark.parametrize("text", [None, "", "No numbers at all.", "The answer is", "(x)"])
def test_extract_answer_none(text):
    assert extract_answer(text) is None


def test_extract_answers_keeps_positions():
    assert extract_answers([r"\boxed{1}", None, "nothing", "7 apples"]) == ["1", None, None, "7"]


def test_extract_answer_rejects_non_strings():
    with pytest.raises(TypeError):
        extract_answer(5)


# --- kind="choice": the gold is a letter (forms seen in Du et al.'s MMLU logs and DyLAN's MATH
# logs; each expected letter read by hand) --------------------------------------------------------
CHOICE_FORMS = [
    ("Turner syndrome is a monosomy of the X chromosome.\n\n(D) 45,X", "D"),  # not 45
    ("The inflation rate is (104.2 - 101.5) / 101.5.\n\n(B) 2.66 %", "B"),  # not 2.66
    ("I recall an extra X. The answer is (X) B", "B"),  # (X) is the prompt's placeholder
    ("Reviewing the options:\n\n(X) B", "B"),
    ("**B) Media tour**", "B"),
    ("Turner syndrome has the 45,X karyotype.\n\n**(B)**", "B"),
    (r"so the shape is $\boxed{\text{B}}$", "B"),
    (r"\boxed{\textbf{(C)}\ 34\ \text{dollars}}", "C"),  # not 34
    (r"\boxed{\text{(E) Cylinder}}", "E"),
    ("The answer is B", "B"),
    ("The answer is B.", "B"),
    ("Final answer: C", "C"),
    ("The answer is: **B) Media tour**", "B"),
    ("The answer is I think (C)", "C"),  # "I think": the pronoun, not option I
    ("The number 67.4 is closest to option D, 67.445.", "D"),
    ("The closest answer to 67.4 is D, 67.445.", "D"),
    ("The 2010th letter is the 2nd letter of the pattern, which is A.", "A"),
    ("I would go with (A) over (B).\n\nSo (B) 12 apples", "B"),  # the last marker
    ("Steps:\n1. Take the two values.\n2. Compute their ratio.\n3. Nothing matches.", None),
    ("Option (B) gives 42 apples, and 42 is also the count in the list item 3.", "B"),
    (r"\boxed{\textbf{(C), (D)}}", None),  # two options marked: no single choice
    ("The answer is any of the options (A), (B), (C), (D), or (E).", None),
    ("It depends on the layer of the atmosphere.", None),
    ("no letter here, only 12 and 3.5", None),
]


@pytest.mark.parametrize("text,expected", CHOICE_FORMS)
def test_extract_choice_letter_when_the_gold_is_a_letter(text, expected):
    assert extract_answer(text, "choice") == expected


def test_extract_choice_never_returns_a_number():
    # the general rules read numbers from these; a letter gold never does
    assert extract_answer("(D) 45,X") == "45"
    assert extract_answer("(B) 2.66 %") == "2.66"
    assert extract_answer("1. first\n2. second") == "2"
    for text in ("(D) 45,X", "(B) 2.66 %", "1. first\n2. second"):
        found = extract_answer(text, "choice")
        assert found is None or found in "ABCDEFGHIJ"


# --- kind="number": the gold is a number ---------------------------------------------------------
NUMBER_FORMS = [
    (r"He keeps $5 - $3, so \boxed{Ronnie has $2}", "2"),
    (r"\boxed{Time = 16 hours}", "16"),
    (r"\boxed{answer: 15}", "15"),
    (r"\boxed{{1128 \text{ minutes}}}", "1128"),
    (r"\boxed{{4 miles per hour}}", "4"),
    (r"\boxed{1,128 minutes}", "1128"),
    (r"\boxed{a total of 15 apples}", "15"),
    (r"\boxed{\frac{1}{2} cup of flour}", r"\frac{1}{2}"),
    # expressions, ranges and lists stay as they are
    (r"\boxed{7x + 9}", "7x + 9"),
    (r"\boxed{160 \leq d \leq 230}", r"160 \leq d \leq 230"),
    (r"\boxed{27 selfies, 18 portraits}", "27 selfies, 18 portraits"),
    (r"\boxed{2 pi}", "2 pi"),  # a math word, not a unit
    (r"\boxed{5a}", "5a"),  # a letter touching the number
    (r"\boxed{3 \sqrt{2} meters}", r"3 \sqrt{2} meters"),  # a LaTeX command
    (r"\boxed{not 5}", "not 5"),  # a negation
    (r"\boxed{\frac{1}{2}}", r"\frac{1}{2}"),
    ("The answer is 16 hours.", "16"),
]


@pytest.mark.parametrize("text,expected", NUMBER_FORMS)
def test_extract_number_from_a_boxed_sentence_when_the_gold_is_a_number(text, expected):
    assert extract_answer(text, "number") == expected


def test_boxed_sentences_stay_sentences_without_a_numeric_gold():
    assert extract_answer(r"\boxed{Ronnie has $2}") == "Ronnie has $2"
    assert extract_answer(r"\boxed{Time = 16 hours}") == "Time = 16 hours"
    assert not answers_equivalent(extract_answer(r"\boxed{answer: 15}"), "15")
    assert answers_equivalent(extract_answer(r"\boxed{answer: 15}", "number"), "15")


@pytest.mark.parametrize(
    "text,expected",
    [
        ("So the point is found: the answer is indeed (7,4).", "(7,4)"),
        ("The answer is still 36.", "36"),
        ("The answer is also (7,4)", "(7,4)"),
        (r"The answer is indeed $\frac{1}{2}$.", r"\frac{1}{2}"),
        ("The answer is not 5.", "not 5"),  # a negation is kept
        ("The answer is ln 2.", "ln 2"),  # so is a function name
        ("The answer is odd.", "odd"),  # a worded answer, nothing after it
    ],
)
def test_extract_drops_a_one_word_lead_after_the_answer_is(text, expected):
    assert extract_answer(text) == expected


@pytest.mark.parametrize(
    "gold,kind",
    [("B", "choice"), ("(C)", "choice"), (r"\text{(E)}", "choice"), (r"\text{D}", "choice"),
     ("5", "number"), ("1,128", "number"), (r"\frac{40}{243}", "number"), ("-0.5", "number"),
     ("x+1", None), ("K", None), ("(1,2)", None), (None, None), ("", None)],
)
def test_answer_kind(gold, kind):
    assert answer_kind(gold) == kind


def test_extract_answer_unknown_kind_raises():
    with pytest.raises(ValueError, match="kind"):
        extract_answer("5", "letter")


@pytest.mark.parametrize(
    "raw,expected",
    [
        (r"$x = \dfrac{1}{2}$.", r"\frac{1}{2}"),
        (r"\boxed{\text{(B)}}", "B"),
        ("(C)", "C"),
        (r"5 \text{ cm}", "5"),
        ("12 inches", "12"),
        ("414 green beads left over", "414"),
        ("2 pi", "2pi"),  # not a unit
        ("5x", "5x"),
        ("x = 5", "5"),
        ("k=2x+1", "2x+1"),
        ("t(f(-2)) = 5", "5"),
        ("2x - y + 3z + 8 = 0", "2x-y+3z+8=0"),  # an equation is kept
        ("f(x)=x+1", "f(x)=x+1"),
        ("+3", "3"),
        (".5", "0.5"),
        (r"\frac12", r"\frac{1}{2}"),
        (r"\sqrt2", r"\sqrt{2}"),
        ("1,234", "1234"),
        ("1{,}234", "1234"),
        (r"10,\!000", "10000"),
        ("1,2", "1,2"),  # a list, not a thousands separator
        ("{5}", "5"),
        (r"90^\circ", "90"),
        (r"50\%", "50"),
        (r"\$4.50", "4.50"),
        (r"\left(1, 2\right)", "(1,2)"),
        (r"x \rightarrow \infty", r"x\rightarrow\infty"),
        (r"\cfrac{25}{16}", r"\frac{25}{16}"),
        ('"odd"', "odd"),
        (r"x\in[-2,7]", "[-2,7]"),
        ("4210_{5}", "4210_5"),
        (r"{1128 \text{ minutes}}", "1128"),  # outer braces go before units are read
        ("{4 miles per hour}", "4"),
        (r"\boxed{{12}}", "12"),
        (None, ""),
    ],
)
def test_normalize_answer(raw, expected):
    assert normalize_answer(raw) == expected


@pytest.mark.parametrize(
    "s,value",
    [("5", 5), ("-2.5", -2.5), ("0.5", 0.5), ("3/4", 0.75), (r"\frac{1}{2}", 0.5),
     (r"-\frac{3}{4}", -0.75), (r"\frac{-3}{4}", -0.75), ("1e-3", 0.001), ("2.", 2)],
)
def test_numeric_value(s, value):
    assert float(numeric_value(s)) == value


@pytest.mark.parametrize("s", ["x", "1/0", r"\frac{1}{0}", r"\sqrt{2}", "1,2", "", None])
def test_numeric_value_none(s):
    assert numeric_value(s) is None


EQUIVALENT = [
    ("0.5", "1/2"),
    ("0.5", r"\frac{1}{2}"),
    (".5", r"\dfrac12"),
    ("1/2", r"\frac{1}{2}"),
    ("5", "5.0"),
    ("5", "5.0000001"),  # within 1e-6 relative
    ("1000000", "1000000.5"),  # within 1e-6 relative
    ("1,234", "1234"),
    ("x = 5", "5"),
    ("$5$", r"\boxed{5}"),
    ("(B)", "B"),
    (r"\text{(C)}", "C"),
    (r"50\%", "50"),
    ("12 inches", "12"),
    (r"\frac{7}{84}", r"\frac{1}{12}"),
    (r"\left( 1, 2 \right)", "(1,2)"),
    ("-3", r"-\frac{6}{2}"),
]
NOT_EQUIVALENT = [
    ("5", "6"),
    ("5", "5.0001"),
    ("0", "1e-9"),  # relative tolerance: 0 only equals 0
    ("A", "B"),
    ("(A)", "1"),
    ("0.333", r"\frac{1}{3}"),
    ("x", "y"),
    ("2x", "x2"),
    ("1,2", "12"),
    (None, "5"),
    ("5", None),
    (None, None),
    ("", ""),
]


@pytest.mark.parametrize("a,b", EQUIVALENT)
def test_answers_equivalent_pairs(a, b):
    assert answers_equivalent(a, b)
    assert answers_equivalent(b, a)


@pytest.mark.parametrize("a,b", NOT_EQUIVALENT)
def test_answers_not_equivalent_pairs(a, b):
    assert not answers_equivalent(a, b)


def test_check_answers_elementwise_and_unique_pairs(monkeypatch):
    import fastuq.answers.check as chk

    calls = []
    real = chk._check_chunk
    monkeypatch.setattr(chk, "_check_chunk", lambda pairs, math: calls.append(pairs) or
                        real(pairs, math))
    answers = ["0.5", ".5", "1/2", "3", None, "B", "3"]
    golds = [r"\frac{1}{2}", "1/2", "0.5", "4", "1", "(B)", "4"]
    got = check_answers(answers, golds)
    assert got.dtype == bool
    np.testing.assert_array_equal(got, [True, True, True, False, False, True, False])
    # ".5" and "0.5" normalise alike; the repeated ("3", "4") pair is checked once
    assert sum(len(p) for p in calls) == 5


def test_check_answers_errors():
    with pytest.raises(ValueError, match="differ in length"):
        check_answers(["1"], ["1", "2"])
    with pytest.raises(ValueError, match="processes"):
        check_answers(["1"], ["1"], processes=0)
    assert check_answers([], []).shape == (0,)


def test_check_answers_processes_match_serial(monkeypatch):
    import fastuq.answers.check as chk

    monkeypatch.setattr(chk, "MIN_PARALLEL_PAIRS", 16)
    rng = np.random.default_rng(0)
    a = [str(x) for x in rng.integers(0, 40, 300)]
    g = [str(x) for x in rng.integers(0, 40, 300)]
    np.testing.assert_array_equal(check_answers(a, g, processes=2), check_answers(a, g))


def test_answer_classes_numbers_and_letters():
    ids = answer_classes(["0.5", r"\frac12", None, "B", "(B)", "", "3", "3.0000001", "1/2"])
    np.testing.assert_array_equal(ids, [0, 0, -1, 1, 1, -1, 2, 2, 0])
    assert ids.dtype == np.int64


def test_answer_classes_first_appearance_order_and_empty():
    np.testing.assert_array_equal(answer_classes(["b", "a", "b", "c"]), [0, 1, 0, 2])
    assert answer_classes([]).shape == (0,)
    np.testing.assert_array_equal(answer_classes([None, None]), [-1, -1])


def test_answer_classes_agree_with_pairwise_equivalence():
    answers = [p for pair in EQUIVALENT + NOT_EQUIVALENT for p in pair]
    ids = answer_classes(answers)
    for i, a in enumerate(answers):
        for j, b in enumerate(answers):
            if answers_equivalent(a, b):
                assert ids[i] == ids[j] >= 0, (a, b)


def test_math_true_without_math_verify_raises(monkeypatch):

    monkeypatch.setitem(sys.modules, "math_verify", None)  # import now fails
    assert not A.math_verify_available()
    with pytest.raises(ImportError, match=r"fastuq\[math\]"):
        check_answers(["x+1"], ["1+x"], math=True)
    with pytest.raises(ImportError, match=r"fastuq\[math\]"):
        answer_classes(["y+2", "2+y"], math=True)
    import fastuq.answers.symbolic as sym

    sym.parse_cached.cache_clear()
    # math=False never needs it
    assert answers_equivalent("0.5", "1/2")


@pytest.mark.skipif(not HAS_MATH_VERIFY, reason="math-verify not installed (fastuq[math])")
@pytest.mark.parametrize(
    "a,b",
    [(r"\frac{x+2}{7}", "(x+2)/7"), (r"\sqrt{8}", r"2\sqrt{2}"),
     (r"\frac{1}{\sqrt{2}}", r"\frac{\sqrt{2}}{2}"), (r"\frac{3\pi}{4}", r"\frac{3}{4}\pi")],
)
def test_math_verify_equivalent(a, b):
    assert not answers_equivalent(a, b)
    assert answers_equivalent(a, b, math=True)


@pytest.mark.skipif(not HAS_MATH_VERIFY, reason="math-verify not installed (fastuq[math])")
def test_math_verify_classes_and_check():
    ids = answer_classes([r"\frac{x+2}{7}", "(x+2)/7", r"\sqrt{8}", r"2\sqrt{2}", "1", "x"],
                         math=True)
    np.testing.assert_array_equal(ids, [0, 0, 1, 1, 2, 3])
    got = check_answers([r"2\sqrt{2}", "3", None], [r"\sqrt{8}", r"\sqrt{8}", "1"], math=True)
    np.testing.assert_array_equal(got, [True, False, False])
    assert not answers_equivalent(r"\sqrt{8}", "3", math=True)


def test_vote_classes_without_math_equal_answer_classes():
    from fastuq.answers import answer_classes, vote_classes

    names = ["12", "12.0", "x", "1/2", "0.5", ""]
    codes = np.array([0, 1, -1, 2, 3, 4, 5, 0])
    got = vote_classes(names, codes, np.array([0, 0, 0, 1, 1, 1, 2, 2]))
    base = answer_classes(names)
    expected = [base[c] if c >= 0 else -1 for c in codes]
    assert got.tolist() == expected
    assert got[0] == got[1] and got[4] == got[5] and got[6] == -1  # "" never votes


@pytest.mark.skipif(not HAS_MATH_VERIFY, reason="math-verify not installed")
def test_vote_classes_math_merges_only_what_math_verify_proves():
    from fastuq.answers import vote_classes

    names = ["x^2+2x", "2x+x^2", "\\sqrt{8}", "2\\sqrt{2}", "7"]
    # Round 0: the two polynomials and 7; round 1: the two roots.
    codes = np.array([0, 1, 4, 2, 3])
    group = np.array([0, 0, 0, 1, 1])
    plain = vote_classes(names, codes, group)
    assert len(set(plain.tolist())) == 5
    merged = vote_classes(names, codes, group, math=True)
    assert merged[0] == merged[1] and merged[3] == merged[4]
    assert merged[2] not in (merged[0], merged[3])


@pytest.mark.skipif(not HAS_MATH_VERIFY, reason="math-verify not installed")
def test_score_math_agreement_from_answers(tmp_path):
    import pyarrow as pa

    import fastuq

    table = pa.table({
        "trajectory_id": ["a", "b"], "protocol": ["debate", "debate"],
        "n_agents": pa.array([3, 3], pa.int32()),
        "answers": pa.array([[["x^2+2x", "2x+x^2", "7"]], [["7", "8", None]]],
                            pa.list_(pa.list_(pa.string()))),
    })
    plain = fastuq.score(table, "mean_agreement")["mean_agreement"].to_numpy()
    merged = fastuq.score(table, "mean_agreement", math=True)["mean_agreement"].to_numpy()
    assert plain.tolist() == [-1 / 3, -1 / 3]
    assert merged.tolist() == [-2 / 3, -1 / 3]


@settings(max_examples=60, deadline=None)
@given(names=st.lists(st.sampled_from(
           ["5", "5.0", "05", "1/2", "0.5", "\\frac{1}{2}", "0.5000001", "x+1", "x + 1", "",
            " ", "-3", "-3.0000001", "1e400", "1e-7", "1.0000001e-7", "A", "a", None]),
           min_size=1, max_size=8),
       golds=st.lists(st.sampled_from(["5", "0.5", "x+1", "-3", "1e400", "1e-7", "A", "",
                                       None]), min_size=1, max_size=5),
       seed=st.integers(0, 2**32 - 1))
def test_check_coded_gives_check_answers_verdicts(names, golds, seed):
    from fastuq.answers import check_answers, check_coded

    rng = np.random.default_rng(seed)
    a = rng.integers(-1, len(names), 40)
    g = rng.integers(-1, len(golds), 40)
    want = check_answers([names[i] if i >= 0 else None for i in a],
                         [golds[j] if j >= 0 else None for j in g])
    got = check_coded(names, golds, a, g)
    assert got.tolist() == want.tolist()


# --- option lists and echoed questions state no answer (texts as in LLM-Agora's MMLU results,
# gauss5930/LLM-Agora MMLU/mmlu_result.json; each expected letter read by hand) -------------------
ECHOED_OPTIONS = [
    ("A) 1, B) i, C) 32, D) 32i do not match", None),
    ("The statements (options A, B, and C) are all true.", None),
    ("All three statements hold (options A, B, and C)", None),
    ("\nFind the degree for the given field extension Q(sqrt(2)) over Q.:\nA) 0,\nB) 2,\nC) 1,\n"
     "D) 3 Explain your answer, putting the answer in the form (X) at the end of your response."
     "\nQ: Find the degree for the given field extension Q(sqrt(2)) over Q.: A) 0, B)", None),
    ("Which is a mammal? (A) shark (B) whale (C) trout", None),
    # a list, then the answer: the answer is read, never a letter of the list
    ("The constellation is W-shaped.\n\nA) Centaurus\nB) Cygnus\nC) Cassiopeia\nD) Cepheus\n\n"
     "The answer is (C) Cassiopeia, as it is W-shaped.", "C"),
    ("Centaurus, B) Cygnus, C) Cassiopeia, D) Cepheus are all in the sky, but only one, "
     "C) Cassiopeia, is W-shaped.", "C"),
    ("The statements (options A, B, and C) are all false, so the answer is (D).", "D"),
    ("Cygnus and Cepheus (options B and D) are not W-shaped; Cassiopeia is, (C).", "C"),
    ("Which is a mammal? (A) shark (B) whale (C) trout. I say (B).", "B"),
    # two letters that are not a list: the later one, as before
    ("I would go with (A) over (B).\n\nSo (B) 12 apples", "B"),
]


@pytest.mark.parametrize("text,expected", ECHOED_OPTIONS)
def test_extract_choice_option_lists_and_echoed_questions_are_not_answers(text, expected):
    assert extract_answer(text, "choice") == expected


# echoed lists whose options are longer than 80 characters (trimmed from real responses of
# LLM-Agora's MMLU/mmlu_result.json, commit fec4297; main read the letter of the last option
# the short-gap rule left uncut): one option a line, or comma-separated after "?:" / "is:"
LONG_ECHOED_OPTIONS = [
    # q81, orca, round 1: main read D
    ("...when reviewing the financial statements of a nonissuer:\n"
     "A) Make inquiries of management concerning restrictions on the availability of cash "
     "balances.\nB) Communicate deficiencies in the design of internal control to the "
     "entity's audit committee.\nC) Examine trend analysis to determine the appropriateness "
     "of the CPA's assessment of detection risk.\nD) Evaluate management's plans for dealing "
     "with negative trends and financial difficulties.\nThe answer is (X) because the question "
     "asks for the procedures a CPA usually performs.", None),
    # q16, llama, round 1, cut off after "C)": main read A (its gap to B) is 86 characters)
    ("...the strongest argument against enforcement of the certificate agreement?:\n"
     "A) The widow was unaware of the certificate agreement until after the employee died.,\n"
     "B) There was no privity of contract between the widow and the hotel.,\nC) The widow",
     None),
    # q76, llama, round 1: short options, but the one before D) is 89 characters: main read D
    ("...attention should be given to the following needs:: A) physical and pharmacological "
     "needs only., B) physical and psychological needs only., C) physical, psychological, and "
     "pharmacological needs followed by regular reassessment., D) none of the above, as the "
     "main priority is to limit drug side effects. Explain your answer.", None),
    # q87, llama, round 1: "is: A) ..., B) ..., C) ..., D) ...": main read D
    ("Bartering as a form of payment for psychological services is: A) allowable only if it "
     "is not clinically contraindicated and the relationship is not exploitative, B) not "
     "allowable under any circumstance, C) allowable only if the dollar value of the "
     "psychological service and of the payment service or goods are established in advance, "
     "D) allowable only if the psychologist feels a client would be denied services",
     None),
    # q47, orca, round 1: a list from the first line, then prose without a letter: main read D
    ("\nA) Yes, robbery is the taking of property from another's person by intimidation "
     "or force.\nB) No, this was not robbery because there was no intimidation, and indeed "
     "no force, against an unconscious victim.\nC) Yes, robbery does not require that the "
     "victim be subdued by force or be placed in fear.\nD) No, this was not robbery because "
     "it occurred in a private home and not in a business establishment or on the street.\n"
     "The man can be convicted of robbery because he took the purse.", None),
    # a real stated answer stays: the long-gap rule needs the first marker to start an item
    ("The answer is (C) because the question asks for the procedures a CPA usually performs "
     "in that context, as stated.\nD) is wrong: it is an audit step.", "C"),
    ("(X) C) James-Lange theory", "C"),
    ("The answer is (C) James-Lange theory", "C"),
    # a long list, then the answer
    ("Which statement holds?:\nA) Make inquiries of management concerning restrictions on "
     "the availability of cash balances.\nB) Communicate deficiencies in the design of "
     "internal control to the entity's audit committee.\nThe answer is (B).", "B"),
]


@pytest.mark.parametrize("text,expected", LONG_ECHOED_OPTIONS)
def test_extract_choice_long_echoed_option_lists_are_not_answers(text, expected):
    assert extract_answer(text, "choice") == expected


def test_extract_final_choice_skips_option_lists_without_a_kind():
    # rule 3 (the last "(X)") under kind=None: an echoed list is not a choice
    assert extract_answer("Which is a mammal? (A) shark (B) whale (C) trout") is None
    assert extract_answer("Which is a mammal? (A) shark (B) whale (C) trout. I say (B)") == "B"


# --- a worked equation on numbers reduces to its result ------------------------------------------
@pytest.mark.parametrize(
    "text,kind,expected",
    [
        (r"\boxed{30 * 3 = 90}", None, "90"),
        (r"\boxed{30 * 3 = 90}", "number", "90"),
        (r"\boxed{16 * 3 = 48 calories}", "number", "48"),
        (r"\boxed{16 * 3 = 48 calories}", None, "48 calories"),  # normalises to 48
        (r"The answer is 40,320 / 8 = 5,040.", None, "5,040"),
        (r"\boxed{3 \times 4 = 12}", None, "12"),
        (r"\boxed{12 x 4 = 48}", None, "48"),
        (r"\boxed{\frac{1}{2} + \frac{1}{2} = 1}", None, "1"),
        (r"\boxed{\frac{2}{1008} = \frac{1}{504}}", None, r"\frac{1}{504}"),
        # not arithmetic on numbers: kept as it is
        (r"\boxed{2x + 1 = 7}", None, "2x + 1 = 7"),
        (r"\boxed{f(3) = 9}", None, "f(3) = 9"),
        (r"\boxed{1 + 2 = 3 = x}", None, "1 + 2 = 3 = x"),
        (r"\boxed{10 \leq 12}", None, r"10 \leq 12"),
    ],
)
def test_extract_boxed_equation_reduces_to_its_result(text, kind, expected):
    assert extract_answer(text, kind) == expected


def test_boxed_equation_results_check_against_the_gold():
    assert answers_equivalent(extract_answer(r"\boxed{16 * 3 = 48 calories}"), "48")
    assert answers_equivalent(extract_answer(r"\boxed{30 * 3 = 90}"), "90")
