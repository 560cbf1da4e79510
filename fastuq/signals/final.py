"""The team's answer of a round: one rule, shared by the importers' ``final_answer`` and by
replay's answer at every stop (DESIGN.md, "Final answer").

The answer is the majority among the **active** agents that **speak** (cast a vote: a parsed
answer, grouped into vote classes as agreement counts them); a tie goes to the class holding
the lowest such slot. For DyLAN the active agents of the rounds after the ranker are its
survivors, so a pruned agent's answer (recovered from a quote) never votes.

Whole arrays, no loop over records or rounds: the votes of every class are counted by
comparing each slot with every other (``A`` whole-array passes over ``[..., A]``).
"""

from __future__ import annotations

import numpy as np

__all__ = ["final_answer_slot"]


def final_answer_slot(answer_class: np.ndarray, active: np.ndarray | None = None) -> np.ndarray:
    """The slot whose answer is the team's answer, for every round of every trajectory.

    Args:
      answer_class: ``[..., A]`` integer vote class of each slot (equal ids: equivalent
        answers); ``-1`` where the agent casts no vote (did not speak, or its answer did not
        parse).
      active: ``[..., A]`` bool (broadcast against ``answer_class``), whether the agent is
        still in the team; ``None``: every slot.

    Returns:
      ``[...]`` int64: among the slots that are active and vote, the lowest slot of the class
      with the most votes; of several classes with equally many, the one whose lowest slot
      is lowest; ``-1`` where no active slot votes.

    Example: classes ``[0, 1, 1, 0]`` with slot 2 inactive give slot 0 (class 0 has 2 votes,
    class 1 only 1); all active, 2 against 2, the tie goes to class 0's slot 0.
    """
    cls = np.asarray(answer_class)
    if cls.ndim < 1:
        raise ValueError("answer_class must have an agent axis (shape [..., A])")
    if cls.dtype.kind not in "iu":
        raise ValueError(f"answer_class must hold integers, got dtype {cls.dtype}")
    vote = cls >= 0
    if active is not None:
        act = np.asarray(active)
        if act.dtype != np.bool_:
            raise ValueError(f"active must be boolean, got dtype {act.dtype}")
        try:
            vote = vote & np.broadcast_to(act, cls.shape)
        except ValueError:
            raise ValueError(f"active of shape {act.shape} does not fit answer_class of shape "
                             f"{cls.shape}") from None
    masked = np.where(vote, cls, -1)
    count = np.zeros(cls.shape, np.int32)
    for b in range(cls.shape[-1]):
        count += (masked == masked[..., b:b + 1]) & vote[..., b:b + 1]
    count *= vote
    if cls.shape[-1] == 0:
        return np.full(cls.shape[:-1], -1, np.int64)
    # the first slot holding the largest count is the lowest member of the winning class
    top = np.argmax(count, axis=-1)
    best = np.take_along_axis(count, top[..., None], axis=-1)[..., 0]
    return np.where(best > 0, top, -1).astype(np.int64)
