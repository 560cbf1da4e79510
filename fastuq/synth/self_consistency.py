"""Simulated self-consistency corpora: one candidate answer and its ``k`` resampled texts per
question, in the canonical schema (DESIGN.md, "Consistency gate": protocol
``self_consistency``, round 0 of ``texts`` holding the samples as agents, ``final_answer`` the
candidate).

>>> from fastuq.synth.self_consistency import self_consistency_corpus
>>> table = self_consistency_corpus(100_000, k=8, seed=0)

The model, per question: a difficulty ``d ~ Beta(2, 2)``; the model's chance of reaching the
right answer ``p = 1 - d``. The candidate and every sample are right with probability ``p``
each; a wrong one takes one of ``N_WRONG`` wrong answers (so wrong samples sometimes agree
with a wrong candidate, as real ones do). Each text is a short chain of filler words (about
``words`` tokens, drawn from a small vocabulary) ending in ``"the answer is X"``; a fraction
``p_empty`` of the samples come back empty. So a candidate's agreement with its samples
carries real, imperfect signal about its correctness. Vectorized (Arrow string kernels): no
loop runs over questions or samples. Seeded: equal arguments give equal tables.
"""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

__all__ = ["N_WRONG", "self_consistency_corpus"]

#: Wrong answers a question offers.
N_WRONG = 3
_VOCAB = np.array(["we", "compute", "the", "sum", "of", "both", "terms", "then", "divide",
                   "by", "two", "so", "check", "again", "carefully", "first", "next", "step"])


def _texts(rng: np.random.Generator, answers: np.ndarray, words: int) -> pa.Array:
    """One text per answer: filler words, then ``the answer is X``."""
    n = answers.size
    length = np.maximum(1, rng.poisson(words, n))
    offsets = np.concatenate([[0], np.cumsum(length)]).astype(np.int32)
    words_flat = pc.take(pa.array(_VOCAB.tolist(), pa.string()),
                         pa.array(rng.integers(0, _VOCAB.size, int(offsets[-1]))))
    filler = pa.ListArray.from_arrays(pa.array(offsets), words_flat)
    head = pc.binary_join(filler, " ")
    tail = pc.binary_join_element_wise("the answer is", pc.cast(pa.array(answers), pa.string()),
                                       " ")
    return pc.binary_join_element_wise(head, tail, ", ")


def self_consistency_corpus(n: int, *, k: int = 8, seed: int = 0, words: int = 35,
                            p_empty: float = 0.05) -> pa.Table:
    """``n`` simulated self-consistency records (see the module docstring).

    Columns: ``trajectory_id``, ``question_id``, ``protocol`` (``self_consistency``),
    ``n_agents`` (= ``k``), ``reference`` (the right answer), ``final_answer`` (the
    candidate), ``correct``, ``texts`` (``[[k sample texts]]``: one round).
    """
    if n < 0 or k < 1:
        raise ValueError(f"need n >= 0 and k >= 1, got n={n}, k={k}")
    rng = np.random.default_rng([seed, 0x5C])
    p = 1.0 - rng.beta(2.0, 2.0, n)
    gold = rng.integers(10, 1000, n)
    wrong = gold[:, None] + rng.integers(1, 50, (n, N_WRONG))

    def draw(shape):
        right = rng.random(shape) < p.reshape((n,) + (1,) * (len(shape) - 1))
        pick = rng.integers(0, N_WRONG, shape)
        other = np.take_along_axis(wrong, pick.reshape(n, -1), axis=1).reshape(shape)
        return np.where(right, gold.reshape((n,) + (1,) * (len(shape) - 1)), other)

    candidate = draw((n,))
    samples = draw((n, k)).reshape(-1)
    texts = _texts(rng, samples, words)
    empty = rng.random(n * k) < p_empty
    texts = pc.if_else(pa.array(empty), pa.scalar("", pa.string()), texts)
    inner = pa.ListArray.from_arrays(pa.array(np.arange(0, n * k + 1, k, dtype=np.int32)),
                                     texts)
    rounds = pa.ListArray.from_arrays(pa.array(np.arange(n + 1, dtype=np.int32)), inner)
    ids = pc.binary_join_element_wise("sc", pc.cast(pa.array(np.arange(n)), pa.string()), "")
    return pa.table({
        "trajectory_id": ids,
        "question_id": ids,
        "protocol": pa.array(np.full(n, "self_consistency")),
        "n_agents": pa.array(np.full(n, k, np.int32)),
        "reference": pc.cast(pa.array(gold), pa.string()),
        "final_answer": pc.cast(pa.array(candidate), pa.string()),
        "correct": pa.array(candidate == gold),
        "texts": rounds,
    })
