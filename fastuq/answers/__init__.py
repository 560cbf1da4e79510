"""Answer parsing and checking: extraction, normalisation, equivalence and vote classes.

* :func:`extract_answer` / :func:`extract_answers`: the final answer stated in a response
  (last ``\\boxed{}``, else "The answer is ...", else a final choice letter, else the last
  number), or ``None``.
* :func:`extract_answer_column`: the same answers for a whole column of texts (Arrow), with
  one Python call per distinct text that a vectorized search cannot decide.
* :func:`answer_kind`: what a gold answer is like (``"choice"``, ``"number"`` or ``None``);
  pass it to ``extract_answer(text, kind)`` so that a letter gold reads only letters and a
  numeric gold reduces a sentence around one number to that number.
* :func:`normalize_answer`: a conservative canonical spelling (each rule documented in
  ``fastuq.answers.normalize``); :func:`numeric_value` reads plain numbers and fractions.
* :func:`answers_equivalent` / :func:`check_answers`: equal normalised strings, or numbers
  within ``1e-6`` relative, or (``math=True``, needs ``pip install 'fastuq[math]'``)
  mathematical equivalence by math-verify.
* :func:`answer_classes`: class ids such that equivalent answers share one (``None`` -> -1),
  which is what agreement counting needs.

Typical use::

    from fastuq.answers import extract_answers, answer_classes
    parsed = extract_answers(round_texts)          # one string or None per agent
    ids = answer_classes(parsed)                   # e.g. [0, 0, 1, -1]
"""

from fastuq.answers.check import (
    REL_TOL,
    answer_classes,
    answers_equivalent,
    check_answers,
    check_coded,
    math_verify_available,
    vote_classes,
)
from fastuq.answers.column import extract_answer_column
from fastuq.answers.extract import AnswerKind, extract_answer, extract_answers
from fastuq.answers.normalize import answer_kind, normalize_answer, numeric_value

__all__ = [
    "REL_TOL",
    "AnswerKind",
    "answer_kind",
    "answer_classes",
    "vote_classes",
    "answers_equivalent",
    "check_answers",
    "check_coded",
    "extract_answer",
    "extract_answers",
    "extract_answer_column",
    "math_verify_available",
    "normalize_answer",
    "numeric_value",
]
