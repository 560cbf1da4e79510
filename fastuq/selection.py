"""Best-of-K selection: for corpora with several trajectories per question, keep the one with
the lowest uncertainty and measure the accuracy of the selection (the UMAS paper's
selective-prediction table). Vectorized: one stable sort per score column."""

from __future__ import annotations

from collections.abc import Mapping

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from fastuq.io.arrow_lists import combined

__all__ = ["best_of_k", "select_best"]


def _codes(question_id) -> np.ndarray:
    if isinstance(question_id, pa.ChunkedArray):
        question_id = combined(question_id)
    if not isinstance(question_id, pa.Array):
        question_id = pa.array(np.asarray(question_id).astype(str))
    if question_id.null_count:
        k = int(np.argmax(question_id.is_null().to_numpy(zero_copy_only=False)))
        raise ValueError(f"row {k}: question_id is missing")
    return pc.dictionary_encode(question_id).indices.to_numpy(zero_copy_only=False)


def select_best(question_id, scores: np.ndarray) -> np.ndarray:
    """Index of the selected trajectory per question: the lowest uncertainty, ties going to
    the first in input order.

    Args:
      question_id: ``[N]`` question ids (strings or an Arrow array).
      scores: ``[N]`` uncertainties (finite).

    Returns:
      ``[Q]`` int indices into the input, one per question in order of first appearance.
    """
    codes = _codes(question_id)
    scores = np.asarray(scores, np.float64)
    if scores.shape != codes.shape:
        raise ValueError(f"scores has shape {scores.shape}, question_id {codes.shape}")
    if not np.isfinite(scores).all():
        k = int(np.argmax(~np.isfinite(scores)))
        raise ValueError(f"row {k}: score {scores[k]} is not finite")
    order = np.lexsort((scores, codes))  # stable: ties keep input order
    first = np.ones(order.size, bool)
    first[1:] = codes[order][1:] != codes[order][:-1]
    return order[first]


def best_of_k(
    question_id, scores: Mapping[str, np.ndarray], correct: np.ndarray
) -> dict[str, object]:
    """Selected accuracy per estimator when keeping the most certain trajectory of each
    question.

    Args:
      question_id: ``[N]`` question ids; several trajectories may share one.
      scores: estimator name -> ``[N]`` uncertainty.
      correct: ``[N]`` bool labels.

    Returns:
      dict with ``n_questions``, ``n_trajectories``, ``k_mean`` (trajectories per question),
      ``accuracy`` (all trajectories), ``random`` (expected accuracy of a uniform pick: the
      mean over questions of the question's accuracy), ``oracle`` (fraction of questions
      with at least one correct trajectory) and ``selected``: name -> selected accuracy.
    """
    correct = np.asarray(correct, bool)
    codes = _codes(question_id)
    if correct.shape != codes.shape:
        raise ValueError(f"correct has shape {correct.shape}, question_id {codes.shape}")
    n_q = int(codes.max()) + 1 if codes.size else 0
    counts = np.bincount(codes, minlength=n_q)
    hits = np.bincount(codes, weights=correct, minlength=n_q)
    selected = {
        name: float(correct[select_best(question_id, s)].mean()) if n_q else float("nan")
        for name, s in scores.items()
    }
    return {
        "n_questions": n_q,
        "n_trajectories": int(codes.size),
        "k_mean": float(codes.size / n_q) if n_q else float("nan"),
        "accuracy": float(correct.mean()) if codes.size else float("nan"),
        "random": float((hits / counts).mean()) if n_q else float("nan"),
        "oracle": float((hits > 0).mean()) if n_q else float("nan"),
        "selected": selected,
    }
