"""The packed similarity of each round's agents, for ``lexical_similarity`` and the spectral
scores (:mod:`fastuq.kernels.spectral`): built on the host from a :class:`Batch`, once per
chunk, and checked against the rounds of agreement.

* :func:`answer_labels` (``similarity="answer"``): ``[T, N, A]`` float, each node's label
  is the lowest slot of its round whose answer is in the same vote class
  (:meth:`Batch.answer_classes`, the classes agreement counts); an agent of the team that
  cast no vote (silent, null or unparseable answer) is labelled with its own slot (a set of
  its own); slots past the team, and rounds that did not execute, hold -1.
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

__all__ = ["SIMILARITIES", "answer_labels", "text_similarity"]

#: The values of the ``similarity`` parameter of the spectral estimators.
SIMILARITIES = ("answer", "lexical", "rouge_l")


def _same_rounds(batch: Batch, mask: np.ndarray, other: np.ndarray, field: str) -> None:
    la, lb = mask.sum(axis=0), other.sum(axis=0)
    if mask.shape[1] != other.shape[1] or (la != lb).any():
        n = int(np.argmax(la != lb)) if (la != lb).any() else 0
        raise RecordError(
            f"trajectory {batch.labels[n]}: agreement has {int(la[n])} rounds but {field} has "
            f"{int(lb[n])} (field {field})", row=n)


def answer_labels(batch: Batch) -> np.ndarray:
    """``[T, N, A]`` labels in ``batch.dtype`` (module docstring); cached per batch."""
    if "similarity:answer" not in batch._cache:
        classes, ans_rounds = batch.answer_classes()
        mask = batch.rounds("agreement")[1]
        _same_rounds(batch, mask, ans_rounds, "answers")
        a_max = classes.shape[-1]
        team = np.minimum(batch.team_sizes("answers"), a_max)
        labels = np.full(classes.shape, -1.0, batch.dtype)
        voted = classes >= 0
        for a in range(a_max):  # the lowest slot b <= a of the same class
            rep = np.full(classes.shape[:2], a, np.int64)
            for b in range(a - 1, -1, -1):
                rep = np.where(voted[..., b] & (classes[..., b] == classes[..., a]), b, rep)
            labels[..., a] = np.where(voted[..., a], rep, a)
        in_team = (np.arange(a_max)[None, None, :] < team[None, :, None]) & mask[:, :, None]
        labels[~in_team] = -1.0
        batch._cache["similarity:answer"] = labels
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
