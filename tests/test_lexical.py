"""The host side of ``lexical_similarity`` (fastuq/signals/tokens.py, fastuq/signals/lexical.py,
fastuq/signals/rouge.py for ``similarity="rouge_l"``):
the vectorized word tokens and the blocked pair counts of every round, against the plain
per-pair reference of tests/_references.py (``jaccard_matrix``: ``re``'s ``\\w+`` word sets
of the lowercased texts, one pair at a time), on drawn Unicode texts. Bit identity is the
point here: both sides divide the same two integers."""

from __future__ import annotations

import re

import numpy as np
import pyarrow as pa
import pytest
from _references import jaccard_matrix, rouge_l_matrix
from hypothesis import given, settings
from hypothesis import strategies as st

import fastuq
import fastuq.signals.lexical as lexical
import fastuq.signals.rouge as rouge
from fastuq.signals.lexical import pair_counts, round_similarity
from fastuq.signals.tokens import text_token_ids

#: Pieces with the tokenizer's cases: ASCII words, case, digits and ``_``, punctuation and
#: whitespace only, non-ASCII letters and digits (Cyrillic, Greek with a final sigma, Arabic
#: and fullwidth digits, CJK, a dotted capital I that lowercases to two characters), marks
#: and an emoji that are no word characters, a NUL, and tokens of 8, 9, 16 and over 64 bytes.
PIECES = ("a", "b", "The", "the", "THE", "x_1", "42", "٣٤", "１２", "Москва", "ответ",
          "ΟΔΟΣ", "σοφός", "İstanbul", "Straße", "naïve", "字", "😀", "\u0301", "\x00",
          "abcdefgh", "abcdefghi", "abcdefghijklmnop", "q" * 65, "é" * 9, " ", "  ", ",", ".",
          "!?", "\n", "\t", "-")

_TEXT = st.none() | st.just("") | st.lists(st.sampled_from(PIECES), max_size=12).map("".join) \
    | st.text(st.characters(codec="utf-8"), max_size=12)


@st.composite
def _rounds(draw):
    """``(texts [N][T][<= team], team)``: ragged trajectories of ragged rounds."""
    team = draw(st.integers(1, 10))
    texts = [[draw(st.lists(_TEXT, min_size=0, max_size=team))
              for _ in range(draw(st.integers(1, 3)))]
             for _ in range(draw(st.integers(1, 5)))]
    return texts, team


def _reference(texts, team: int, t_max: int) -> np.ndarray:
    """``[T, N, team, team]``: ``jaccard_matrix`` of every executed round (its texts padded
    with missing ones to the team), zeros in rounds that did not execute."""
    want = np.zeros((t_max, len(texts), team, team))
    for n, traj in enumerate(texts):
        for t, agents in enumerate(traj):
            want[t, n] = jaccard_matrix(list(agents) + [None] * (team - len(agents)))
    return want


@pytest.mark.parametrize("block, hash_bits", [(1 << 17, 40), (5, 40), (1 << 17, 65), (3, 65)])
@settings(max_examples=30, deadline=None)
@given(case=_rounds())
def test_round_similarity_equals_the_per_pair_reference(case, block, hash_bits):
    # small blocks put rounds in many blocks; 65 hash bits cannot fit, so every block numbers
    # its distinct ids by rank (the path taken when two ids' hash bits collide)
    texts, team = case
    col = pa.array(texts, pa.list_(pa.list_(pa.string())))
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(lexical, "BLOCK_TOKENS", block)
        mp.setattr(lexical, "MIN_HASH_BITS", hash_bits)
        sim, mask = round_similarity(col, np.full(len(texts), team), team)
    t_max = max(len(t) for t in texts)
    assert sim.shape == (t_max, len(texts), team, team)
    assert np.array_equal(sim, _reference(texts, team, t_max))
    assert np.array_equal(mask, np.arange(t_max)[:, None] < np.array([len(t) for t in texts]))


def test_pair_counts_by_hand_for_a_wide_team():
    # 10 slots (wider than MASK_SLOTS: pairs listed per shared token). Round 0: slots 0 and 9
    # hold {a, b} and {b, c} (share 1), slot 4 holds {a} (shares 1 with slot 0); round 1:
    # slot 2 holds {x} twice over, slot 3 nothing.
    ids = np.array([1, 2, 2, 3, 1, 7, 7], np.uint64)
    first = np.array([0, 2, 4, 5, 7, 7])
    group, slot = np.array([0, 0, 0, 1, 1]), np.array([0, 9, 4, 2, 3])
    got = pair_counts(ids, first, group, slot, 2, 10)
    want = np.zeros((2, 10, 10))
    want[0, 0, 0] = want[0, 9, 9] = 2
    want[0, 4, 4] = want[0, 0, 9] = want[0, 9, 0] = want[0, 0, 4] = want[0, 4, 0] = 1
    want[1, 2, 2] = 1
    assert np.array_equal(got, want)
    # the same rounds in 4 slots (mask histogram): slot 9 -> 3, slot 4 -> 1, slot 3 -> 0
    got = pair_counts(ids, first, group, np.array([0, 3, 1, 2, 0]), 2, 4)
    assert got[0].tolist() == [[2, 1, 0, 1], [1, 1, 0, 0], [0, 0, 0, 0], [1, 0, 0, 2]]
    assert got[1].tolist() == [[0] * 4, [0] * 4, [0, 0, 1, 0], [0] * 4]


def test_a_token_longer_than_64_bytes_ending_the_text():
    # a token of more than 64 bytes that ends the last text and has no byte after it: on the
    # main branch of 2026-12-01 this raised IndexError (no zero byte to find its end by)
    long = "r" * 200
    ids, first = text_token_ids(pa.array([long]))
    assert first.tolist() == [0, 1]
    again, _ = text_token_ids(pa.array([f"x {long} y", long.upper()]))
    assert again.tolist() == [again[0], ids[0], again[2], ids[0]]
    assert len({again[0], ids[0], again[2]}) == 3


@settings(max_examples=40, deadline=None)
@given(texts=st.lists(_TEXT, max_size=8))
def test_token_ids_follow_the_word_sets(texts):
    # a text's distinct ids are as many as its re words, and two texts share as many ids as
    # they share words (whole-column tokenization, non-ASCII rows included)
    ids, first = text_token_ids(pa.array(texts, pa.string()))
    words = [set(re.findall(r"\w+", t.lower())) if t is not None else set() for t in texts]
    sets = [set(ids[first[k]:first[k + 1]].tolist()) for k in range(len(texts))]
    for k, w in enumerate(words):
        assert len(sets[k]) == len(w)
        for j in range(k):
            assert len(sets[k] & sets[j]) == len(w & words[j])


# ---------------------------------------------------------------- ROUGE-L (similarity=rouge_l)

#: Long texts too: more than 64 tokens make the LCS bit vectors several words long.
_LONG = st.lists(st.sampled_from(("a", "b", "c", "The", "ΟΔΟΣ", "x_1", "42")), min_size=60,
                 max_size=150).map(" ".join)


@st.composite
def _rouge_rounds(draw):
    team = draw(st.integers(1, 6))
    text = _TEXT | _LONG
    texts = [[draw(st.lists(text, max_size=team)) for _ in range(draw(st.integers(1, 2)))]
             for _ in range(draw(st.integers(1, 4)))]
    return texts, team


@pytest.mark.parametrize("hashed", [True, False])
@settings(max_examples=30, deadline=None)
@given(case=_rouge_rounds())
def test_rouge_l_equals_the_dynamic_programme(case, hashed):
    # hashed=False: a mix that sends every id to 0 collides, so tokens are numbered by rank
    texts, team = case
    col = pa.array(texts, pa.list_(pa.list_(pa.string())))
    with pytest.MonkeyPatch.context() as mp:
        if not hashed:
            mp.setattr(rouge, "fmix64", lambda k: k * np.uint64(0))
        sim, _ = round_similarity(col, np.full(len(texts), team), team, measure="rouge_l")
    want = np.zeros_like(sim)
    for n, traj in enumerate(texts):
        for t, agents in enumerate(traj):
            want[t, n] = rouge_l_matrix(list(agents) + [None] * (team - len(agents)))
    np.testing.assert_allclose(sim, want, rtol=1e-14, atol=0)


def test_rouge_l_by_hand():
    # "the cat sat on the mat" (6 tokens) and "The cat, on mat!" (4): LCS "the cat on mat" = 4,
    # P = 4/4, R = 4/6, F = 2 (2/3) / (5/3) = 0.8; "a b c d" and "d c b a": LCS 1, F = 1/4;
    # "x" and nothing: 0 (an empty text scores 0); "a a b" and "a b b": LCS "a b" = 2, F = 2/3
    texts = [[["the cat sat on the mat", "The cat, on mat!", "a b c d", "d c b a", "x", ""]],
             [["a a b", "a b b"]]]
    col = pa.array(texts, pa.list_(pa.list_(pa.string())))
    sim, _ = round_similarity(col, np.array([6, 2]), 6, measure="rouge_l")
    assert sim[0, 0, 0, 1] == sim[0, 0, 1, 0] == pytest.approx(0.8, abs=1e-15)
    assert sim[0, 0, 2, 3] == pytest.approx(0.25, abs=1e-15)
    assert sim[0, 0, 4, 5] == 0.0 and sim[0, 0, 0, 2] == 0.0
    assert sim[0, 1, 0, 1] == pytest.approx(2 / 3, abs=1e-15)
    assert np.array_equal(np.diagonal(sim[0], axis1=1, axis2=2), [[1] * 6, [1, 1, 0, 0, 0, 0]])


@pytest.mark.parametrize("backend", ["jax", "numpy"])
def test_spectral_scores_on_rouge_l_by_hand(backend):
    # W = [[1, .8, 0], [.8, 1, 0], [0, 0, 1]] (the pairs above and "a b", sharing nothing):
    # DegMat = 1 - (3 + 1.6) / 9 = 22/45; the block {0, 1} has D = 1.8 and normalised
    # eigenvalues 1 and 1/9 (lambda 0 and 8/9), {2} lambda 0: EigVal = 1 + 1/9 + 1 = 19/9
    table = pa.table({
        "trajectory_id": ["t0"], "protocol": ["debate"], "n_agents": pa.array([3], pa.int32()),
        "answers": pa.array([[["1", "2", "3"]]], pa.list_(pa.list_(pa.string()))),
        "texts": pa.array([[["the cat sat on the mat", "the cat on mat", "a b"]]],
                          pa.list_(pa.list_(pa.string())))})
    got = fastuq.score(table, "degree_matrix,eigval_laplacian", similarity="rouge_l",
                       backend=backend, dtype="float64")
    assert got["degree_matrix"][0].as_py() == pytest.approx(22 / 45, rel=1e-12)
    assert got["eigval_laplacian"][0].as_py() == pytest.approx(19 / 9, rel=1e-12)
