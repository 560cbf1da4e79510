"""Extracting the final answer from one response text.

Rules, tried in order (the first that finds something wins):

1. **Boxed**: the content of the last well-formed ``\\boxed{...}`` or ``\\fbox{...}`` (nested
   braces are matched; a box whose braces never close, as in a truncated response, is skipped
   and the one before it is tried; an empty box is skipped). ``\\boxed 5`` (no braces) gives
   the token after the space, as the MATH reference code reads it.
2. **"The answer is ..."**: the text after the last phrase ``answer is`` (any case, so "The
   final answer is", "the correct answer is" count; an optional ``:`` follows), up to the
   end of the sentence (a ``.`` followed by white space or the end) or of the line.

   * A leading choice ``(X)`` gives the letter ``X``.
   * Prose (two or more words of two or more letters outside ``$...$`` and LaTeX commands,
     as in "that the area is 78 square units"): the first ``$...$`` span or number (rule 4)
     after the last "is" / "are" / "was" / "were" / "equals" / ``=``; else the first span or
     number if at most one word precedes it ("16 right-handed boys", "indeed 720
     degrees"); else, if the text holds no span or number at all, the text itself (a
     worded answer: "no solution", "odd"); else this rule gives up and the next rules read
     the whole response.
   * Otherwise a leading math span (``$...$``, ``$$...$$``, ``\\(...\\)``, ``\\[...\\]``) is
     kept alone, or else the whole text.

   ``$`` signs and trailing ``.`` are stripped.
3. **Choice letter**: the last ``(A)`` .. ``(J)`` with no digit after it in the text.
4. **Last number**: the last integer, decimal (``.5`` included), negative number, number with
   thousands separators (``1,234,567``, returned without the commas) or simple fraction
   (``3/4``, ``\\frac{3}{4}``). A ``-`` counts as a sign only when it does not follow a letter,
   digit or closing bracket (``3-5`` ends in ``5``, not ``-5``).

Nothing found (or ``None`` / empty text): ``None``.
"""

from __future__ import annotations

import re
from collections.abc import Sequence

__all__ = ["extract_answer", "extract_answers"]

_BOX = re.compile(r"\\(?:boxed|fbox)(?![A-Za-z])")
_ANSWER_IS = re.compile(r"\banswer\s+is\b\s*:?[ \t]*", re.IGNORECASE)
_SENTENCE_END = re.compile(r"\.(?=\s|$)")
_MATH_SPANS = (("$$", "$$"), ("$", "$"), ("\\(", "\\)"), ("\\[", "\\]"))
_INLINE_MATH = re.compile(r"\$\$.+?\$\$|\$.+?\$")
_LATEX_CMD = re.compile(r"\\[A-Za-z]+")
_WORD = re.compile(r"(?<![A-Za-z])[A-Za-z]{2,}")
_VERB = re.compile(r"\b(?:is|are|was|were|equals?)\b|=")
_LEADING_CHOICE = re.compile(r"^\(?([A-J])\)(?![\w])")
_CHOICE = re.compile(r"\(([A-J])\)")
_DIGIT = re.compile(r"\d")
_NUMBER = re.compile(
    r"(?:(?<![\w)\]}])-\s?)?"  # a sign, unless it is a binary minus
    r"(?:"
    r"\\[dt]?frac\{\d+\}\{\d+\}"  # \frac{3}{4}
    r"|\d+/\d+(?!\d|\.\d)"  # 3/4
    r"|\d{1,3}(?:,\d{3})+(?:\.\d+)?(?!\d)"  # 1,234,567.5
    r"|\d+(?:\.\d+)?"  # 12, 12.5
    r"|\.\d+"  # .5
    r")"
)


def _braced(text: str, start: int) -> str | None:
    """Content of the brace group opening at ``text[start] == '{'``, or None if unclosed."""
    depth = 0
    for i in range(start, len(text)):
        c = text[i]
        if c == "{":
            depth += 1
        elif c == "}":
            depth -= 1
            if depth == 0:
                return text[start + 1 : i]
    return None


def _last_boxed(text: str) -> str | None:
    for m in reversed(list(_BOX.finditer(text))):
        i = m.end()
        j = i
        while j < len(text) and text[j] in " \t":
            j += 1
        if j < len(text) and text[j] == "{":
            content = _braced(text, j)
            if content is not None and content.strip():
                return content.strip()
        elif j > i:  # "\boxed 5": the token after the space
            token = re.match(r"[^\s$]+", text[j:])
            if token:
                return token.group().rstrip(".")
    return None


def _math_span(s: str) -> str | None:
    for left, right in _MATH_SPANS:
        if s.startswith(left):
            end = s.find(right, len(left))
            if end > len(left):
                return s[len(left) : end]
            return None
    return None


def _answer_is(text: str) -> str | None:
    m = next(reversed(list(_ANSWER_IS.finditer(text))), None)
    if m is None:
        return None
    line = text[m.end() :].split("\n", 1)[0].strip()
    choice = _LEADING_CHOICE.match(line)
    if choice:
        return choice.group(1)
    end = _SENTENCE_END.search(line)
    sentence = line[: end.start()] if end else line
    if _is_prose(sentence):
        candidate = _from_prose(sentence) if _first_value(sentence) else sentence
    else:
        candidate = _math_span(sentence)
        if candidate is None:
            candidate = sentence
    if candidate is None:
        return None
    candidate = candidate.replace("$", "").strip().rstrip(".").strip()
    return candidate or None


def _is_prose(s: str) -> bool:
    """Two or more words of 2+ letters outside ``$...$`` and LaTeX commands."""
    plain = _LATEX_CMD.sub(" ", _INLINE_MATH.sub(" ", s))
    return len(_WORD.findall(plain)) >= 2


def _first_value(s: str) -> tuple[int, str] | None:
    """(position, text) of the first ``$...$`` span or number in ``s``."""
    first_math = _INLINE_MATH.search(s)
    first_number = _NUMBER.search(s)
    if first_math and (not first_number or first_math.start() <= first_number.start()):
        return first_math.start(), first_math.group().strip("$").strip()
    if first_number:
        return first_number.start(), re.sub(r"\s", "", first_number.group()).replace(",", "")
    return None


def _from_prose(s: str) -> str | None:
    """The answer inside a prose answer (see rule 2 of the module docstring)."""
    verb = next(reversed(list(_VERB.finditer(s))), None)
    if verb is not None:
        found = _first_value(s[verb.end() :])
        if found and found[1]:
            return found[1]
    found = _first_value(s)
    if found and found[1] and len(_WORD.findall(s[: found[0]])) <= 1:
        return found[1]
    return None


def _final_choice(text: str) -> str | None:
    last = next(reversed(list(_CHOICE.finditer(text))), None)
    if last is None or _DIGIT.search(text, last.end()):
        return None
    return last.group(1)


def _last_number(text: str) -> str | None:
    last = next(reversed(list(_NUMBER.finditer(text))), None)
    if last is None:
        return None
    return re.sub(r"\s", "", last.group()).replace(",", "")


def extract_answer(text: str | None) -> str | None:
    """The final answer stated in a response, or ``None`` when it states none.

    See the module docstring for the rules (last ``\\boxed{}``, else "The answer is ...",
    else a final choice letter ``(X)``, else the last number). The result is the answer as
    written (not normalised; see :func:`fastuq.answers.normalize_answer`).

    >>> extract_answer(r"So $x = \\boxed{\\frac{1}{2}}$.")
    '\\\\frac{1}{2}'
    >>> extract_answer("Adding, we get 1,234 apples. The answer is 1,234.")
    '1,234'
    >>> extract_answer("no numbers here") is None
    True
    """
    if not text:
        return None
    if not isinstance(text, str):
        raise TypeError(f"text must be a string or None, got {type(text).__name__}")
    for rule in (_last_boxed, _answer_is, _final_choice, _last_number):
        found = rule(text)
        if found:
            return found
    return None


def extract_answers(texts: Sequence[str | None]) -> list[str | None]:
    """:func:`extract_answer` over a sequence of responses (``None`` stays ``None``)."""
    return [extract_answer(t) for t in texts]
