"""fastuq.signals.final: the one final-answer rule (majority among the active agents that
answer, ties to the lowest slot): hand-worked rounds, and a plain-Python reference over
random rounds."""

from __future__ import annotations

from collections import Counter

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from fastuq.signals import final_answer_slot


def test_hand_worked_rounds():
    cls = np.array([
        [0, 1, 1, 0],     # 2 against 2: the tie goes to class 0, which holds slot 0
        [0, 1, 1, 0],     # slot 3 inactive: class 1 has 2 votes, class 0 one -> slot 1
        [-1, 2, 2, 3],    # slot 0 casts no vote: class 2 wins with 2 -> slot 1
        [5, 7, 7, 7],     # slots 1, 2 pruned: 5 and 7 one vote each, 5 is lower -> slot 0
        [-1, -1, -1, -1], # nobody answers -> -1
        [4, 4, -1, -1],   # both voters inactive -> -1
    ])
    active = np.array([
        [True, True, True, True],
        [True, True, True, False],
        [True, True, True, True],
        [True, False, False, True],
        [True, True, True, True],
        [False, False, True, True],
    ])
    assert final_answer_slot(cls, active).tolist() == [0, 1, 1, 0, -1, -1]
    # without active, every slot that answers votes: row 1 ties 2-2 -> slot 0, row 3 -> 7's
    # slot 1, row 5 -> slot 0
    assert final_answer_slot(cls).tolist() == [0, 0, 1, 1, -1, 0]


def test_shapes_broadcast_and_errors():
    cls = np.array([[[0, 1, 1]], [[2, 2, 0]]])  # [T=2, N=1, A=3]
    assert final_answer_slot(cls, np.array([True, False, True])).tolist() == [[0], [0]]
    assert final_answer_slot(np.zeros((2, 3, 0), np.int64)).shape == (2, 3)
    with pytest.raises(ValueError, match="integers"):
        final_answer_slot(np.array([0.0, 1.0]))
    with pytest.raises(ValueError, match="boolean"):
        final_answer_slot(np.array([0, 1]), np.array([1, 0]))
    with pytest.raises(ValueError, match="does not fit"):
        final_answer_slot(np.array([0, 1]), np.array([True, False, True]))


def _reference(classes: list[int], active: list[bool]) -> int:
    """The rule spelled out: count the votes of the active answering agents per class; of
    the classes with the most, the one whose first voter comes first; its first voter."""
    voters = [(k, c) for k, (c, a) in enumerate(zip(classes, active, strict=True))
              if a and c >= 0]
    if not voters:
        return -1
    votes = Counter(c for _, c in voters)
    most = max(votes.values())
    for k, c in voters:  # in slot order: the first voter of a modal class
        if votes[c] == most:
            return k
    raise AssertionError


@settings(max_examples=200, deadline=None)
@given(st.lists(st.tuples(st.integers(-1, 3), st.booleans()), min_size=1, max_size=9))
def test_matches_a_plain_reference(slots):
    classes = [c for c, _ in slots]
    active = [a for _, a in slots]
    got = final_answer_slot(np.array([classes]), np.array([active]))[0]
    assert got == _reference(classes, active)
