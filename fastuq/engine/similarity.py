"""The packed similarity of each round's agents, for ``lexical_similarity`` and the spectral
scores (:mod:`fastuq.kernels.spectral`): built on the host from a :class:`Batch`, once per
chunk, and checked against the rounds of agreement.

* :func:`answer_labels` (``similarity="answer"``): ``[T, N, A]`` int, the vote class of every
  node (:meth:`Batch.answer_classes`, the classes agreement counts, computed once per chunk
  and shared with the ``answer_class`` input), ``-1`` where the agent cast no vote (silent,
  null or unparseable answer) and in padding, in the narrowest of int8, int16 and int32 that
  holds the chunk's class ids (no second pass over the answers: the kernel compares the
  classes itself). The team (``n_agents``) says which slots are nodes: an agent of the team
  without a vote is a set of its own.
* :func:`text_similarity` (``similarity="lexical"``): ``[T, N, A, A]`` float, the token-set
  Jaccard index of the agents' ``texts`` (:func:`fastuq.signals.lexical.round_similarity`),
  1 on the diagonal of the team's slots; ``text_similarity(batch, "rouge_l")``
  (``similarity="rouge_l"``): the ROUGE-L F-measure of the texts' token sequences instead
  (:mod:`fastuq.signals.rouge`).

The team is ``n_agents``, else the widest round of the column the labels come from.
"""

from __future__ import annotations

import numpy as np

from fastuq.engine.batch import Batch
from fastuq.errors import RecordError

__all__ = ["SIMILARITIES", "answer_labels", "narrow_classes", "text_similarity"]

#: The values of the ``similarity`` parameter of the spectral estimators.
SIMILARITIES = ("answer", "lexical", "rouge_l")


def _same_rounds(batch: Batch, mask: np.ndarray, other: np.ndarray, field: str) -> None:
    la, lb = mask.sum(axis=0), other.sum(axis=0)
    if mask.shape[1] != other.shape[1] or (la != lb).any():
        n = int(np.argmax(la != lb)) if (la != lb).any() else 0
        raise RecordError(
            f"trajectory {batch.labels[n]}: agreement has {int(la[n])} rounds but {field} has "
            f"{int(lb[n])} (field {field})", row=n)


def narrow_classes(classes: np.ndarray) -> np.ndarray:
    """Answer classes ``[..., A]`` int (``-1``: no vote) in the narrowest of int8, int16 and
    int32 that holds them (the same array when it is already that type): equal stays equal,
    and the kernel's compares read 1, 2 or 4 bytes per node."""
    top = int(classes.max(initial=-1))
    dtype = np.int8 if top <= np.iinfo(np.int8).max else (
        np.int16 if top <= np.iinfo(np.int16).max else np.int32)
    return classes.astype(dtype, copy=False)


def answer_labels(batch: Batch) -> np.ndarray:
    """``[T, N, A]`` answer classes for the spectral scores (module docstring); cached per
    batch."""
    if "similarity:answer" not in batch._cache:
        classes, ans_rounds = batch.answer_classes()
        mask = batch.rounds("agreement")[1]
        _same_rounds(batch, mask, ans_rounds, "answers")
        batch._cache["similarity:answer"] = narrow_classes(classes)
    return batch._cache["similarity:answer"]


def text_similarity(batch: Batch, measure: str = "jaccard") -> np.ndarray:
    """``[T, N, A, A]`` lexical similarity in ``batch.dtype`` (module docstring), token-set
    Jaccard (``measure="jaccard"``) or ROUGE-L (``"rouge_l"``); cached per batch. Raises
    ValueError naming the column when the corpus has no ``texts``."""
    cache = "similarity:lexical" if measure == "jaccard" else f"similarity:{measure}"
    if cache not in batch._cache:
        from fastuq.signals.lexical import round_similarity

        if not batch.has("texts"):
            raise ValueError(f"{batch.source or 'corpus'}: lexical similarity needs the texts "
                             "column ([round][agent] response texts)")
        mask = batch.rounds("agreement")[1]
        a_max = batch.n_slots
        team = np.minimum(batch.team_sizes("texts"), a_max)
        sim, text_rounds = round_similarity(batch.column("texts"), team, a_max,
                                            dtype=batch.dtype, labels=batch.labels,
                                            measure=measure)
        if text_rounds.shape[0] < mask.shape[0]:
            pad = mask.shape[0] - text_rounds.shape[0]
            text_rounds = np.pad(text_rounds, ((0, pad), (0, 0)))
            sim = np.pad(sim, ((0, pad), (0, 0), (0, 0), (0, 0)))
        _same_rounds(batch, mask, text_rounds, "texts")
        batch._cache[cache] = sim[:mask.shape[0]]
    return batch._cache[cache]
