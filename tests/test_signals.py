"""Scalar signal helpers (fastuq.signals.scalar) against hand-worked values."""

import math

import pytest

import fastuq


def test_majority_margin_dylan_survivors():
    # Two unanimous survivors of an initial team of three give 2/3.
    assert fastuq.majority_margin(["7", "7"], n_agents=3) == pytest.approx(2 / 3)


def test_majority_margin_unparseable_stay_in_denominator():
    assert fastuq.majority_margin(["A", None, "", "A", "B"]) == pytest.approx(2 / 5)


@pytest.mark.parametrize(
    ("answers", "n"),
    [([None, ""], None), ([None, None, ""], 4), ([], 3), ([None], 1)],
)
def test_majority_margin_round_without_a_parsed_answer_is_zero(answers, n):
    # no agent holds a parsed answer: agreement 0, as the importers and
    # fastuq.signals.agreement_from_answers give it (it raised ValueError before)
    assert fastuq.majority_margin(answers, n_agents=n) == 0.0


@pytest.mark.parametrize(
    ("answers", "n", "match"),
    [
        (["A"], 0, "positive"),
        (["A", "B"], 1, "smaller"),
        (["A", 3], None, "string"),
        (["A"], True, "positive"),
    ],
)
def test_majority_margin_errors(answers, n, match):
    with pytest.raises(ValueError, match=match):
        fastuq.majority_margin(answers, n_agents=n)


def test_token_entropy_renormalises_topk():
    # Two tokens. Token 0: top-2 probs .6/.2 renormalise to .75/.25.
    # Token 1: a single alternative -> entropy 0.
    h0 = -(0.75 * math.log(0.75) + 0.25 * math.log(0.25))
    got = fastuq.compute_token_entropy([[math.log(0.6), math.log(0.2)], [math.log(0.9)]])
    assert got == pytest.approx(h0 / 2, abs=1e-15)


def test_token_entropy_negative_infinity_is_zero_probability():
    got = fastuq.compute_token_entropy([[math.log(0.5), math.log(0.5), -math.inf]])
    assert got == pytest.approx(math.log(2), abs=1e-15)


@pytest.mark.parametrize(
    ("topk", "match"),
    [
        ([], "at least one"),
        ([[]], "token 0"),
        ([[-0.1], [0.2]], "token 1"),
        ([[math.nan]], "token 0"),
        ([[-math.inf]], "finite"),
        ([["a"]], "non-numeric"),
    ],
)
def test_token_entropy_errors(topk, match):
    with pytest.raises(ValueError, match=match):
        fastuq.compute_token_entropy(topk)
