"""Extracting the final answer from one response text.

Rules, tried in order (the first that finds something wins):

1. **Boxed**: the content of the last well-formed ``\\boxed{...}`` or ``\\fbox{...}`` (nested
   braces are matched; a box whose braces never close, as in a truncated response, is skipped
   and the one before it is tried; an empty box is skipped, and so is the prompt's placeholder
   ``\\boxed{answer}``, which models echo from "in the form \\boxed{answer}": a box holding
   only the word *answer*, optionally after *your*, *the*, *final*, *numerical*). ``\\boxed 5``
   (no braces) gives the token after the space, as the MATH reference code reads it.
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

   * One leading word (two or more lower-case letters, not a negation nor a function name
     such as ``ln``) before a value that is not prose is dropped: "indeed (7,4)", "still
     36", "also (7,4)" give ``(7,4)``, ``36``, ``(7,4)``; "not 5", "ln 2" are kept.

   ``$`` signs and trailing ``.`` are stripped.
3. **Choice letter**: the last ``(A)`` .. ``(J)`` with no digit after it in the text.
4. **Last number**: the last integer, decimal (``.5`` included), negative number, number with
   thousands separators (``1,234,567``, returned without the commas), simple fraction
   (``3/4``, ``\\frac{3}{4}``) or date (``05/01/2021`` and ``2021-05-01``, kept whole as
   written: two dates agree only when spelled alike, and never by their year alone). A
   ``-`` counts as a sign only when it does not follow a letter, digit or closing bracket,
   nor a digit or closing bracket and one space (``3-5`` and ``40 + 11 - 23`` end in ``5``
   and ``23``, not ``-5`` and ``-23``; ``is -5`` and ``= -5`` are ``-5``).

Nothing found (or ``None`` / empty text): ``None``.

A worked equation on plain numbers reduces to its result: when every part before the last
``=`` is arithmetic on numbers (``30 * 3``, ``40,320 / 8``, ``3 \\times 4``, ``\\frac{1}{2} +
\\frac{1}{2}``: no variable, no word) and the part after it starts with a number, the answer
is that part (``\\boxed{30 * 3 = 90}`` is ``90``, ``\\boxed{16 * 3 = 48 calories}`` is ``48
calories``, then ``48`` with ``kind="number"``); ``2x + 1 = 7`` and ``f(3) = 9`` are kept.

Option lists and echoed questions are not answers (:func:`strip_option_lists`): a run of
consecutive option markers separated by commas, line breaks, "and" or "or" (``A) 1, B) i, C)
32, D) 32i``, an echoed ``A) 0,\\nB) 2,\\nC) 1,\\nD) 3``, also when cut off as in ``A) 0,
B)``), three or more separated by spaces (``(A) shark (B) whale (C) trout``), and letters
listed after "options" / "choices" ("(options A, B, and C)") are removed before the last
``(X)`` (rule 3), the last line and the last marker are read (``kind="choice"`` below). A box
or an "answer is" sentence that holds such a list names several letters and states none.

What the gold answer is like changes what can count as an answer (``kind``, see
:func:`fastuq.answers.answer_kind`):

* ``kind="choice"`` (the gold is a letter ``A``..``J``): the answer is a letter or ``None``,
  never a number (so neither a number that follows a letter option, as in "(D) 45,X", nor a
  list number). Tried in order: the last box that holds a letter (``\\boxed{\\text{B}}``);
  the first letter in the text after the last "answer is" / "answer:" ("The answer is B",
  "the answer is: **B) Media tour**", "The answer is (X) B": ``(X)`` is the prompt's
  placeholder, not an option); a letter ending the last line (or followed by a comma) after
  its start, a ``:``, a ``)`` or "is" ("(X) B", "Answer: C", "**(B)**", "... the closest
  is D, 67.445."); the last option marker anywhere: ``(B)``, ``B)``, ``**B**``, "option B"
  or "choice B" ("(D) 45,X", "(B) 2.66 %"). A box or an "answer is" sentence that marks two
  different letters as options ("(C), (D)", "any of (A), (B) or (C)") states no single
  choice: the answer is ``None``. Markdown ``*``, ``$`` and ``\\text{}``-like wrappers are
  ignored. A bare ``I`` followed by a lower-case word is the pronoun.
* ``kind="number"`` (the gold is a number): the answer the rules above find, and when that
  is not a plain number but a sentence around exactly one number ("Ronnie has $2", "Time =
  16 hours", "answer: 15", "{1128 \\text{ minutes}}", "{4 miles per hour}"), that number.
  Only words (of two or more letters, or ``a`` / ``I``), spaces and ``: = , . ; ! ? ' " ( )
  %`` may surround it, and no letter may touch it; a LaTeX command, an operator, a
  single-letter variable, a math word (``pi``, ``sqrt``, ``ln``, ...), a negation (``not``,
  ``no``, ``never``), a letter touching the number (``5a``) or a second number keeps the
  answer as it is: "7x + 9", "160 \\leq d \\leq 230", "27 selfies, 18 portraits".
* ``kind=None``: the rules above as they are.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import Literal

__all__ = ["AnswerKind", "extract_answer", "extract_answers", "last_boxed", "strip_option_lists"]

#: What the gold answer is like: a choice letter, a number, or anything (``None``).
AnswerKind = Literal["choice", "number"] | None

_BOX = re.compile(r"\\(?:boxed|fbox)(?![A-Za-z])")
#: the placeholder of the "in the form \\boxed{answer}" prompts (Du et al.'s GSM prompt, which
#: LLM-Agora reuses), echoed by models that repeat the prompt: not an answer
_PLACEHOLDER_BOX = re.compile(r"(?:(?:your|the|final|numerical)\s+)*answer", re.IGNORECASE)
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
    r"(?:(?<![\w)\]}])(?<![\d)\]}] )-\s?)?"  # a sign, unless it is a binary minus
    r"(?:"
    r"\d{1,2}/\d{1,2}/\d{2,4}(?![\d/])"  # a date 05/01/2021 (before the fraction 05/01)
    r"|\d{4}-\d{1,2}-\d{1,2}(?![\d-])"  # an ISO date 2021-05-01
    r"|\\[dt]?frac\{\d+\}\{\d+\}"  # \frac{3}{4}
    r"|\d+/\d+(?!\d|\.\d)"  # 3/4
    r"|\d{1,3}(?:,\d{3})+(?:\.\d+)?(?!\d)"  # 1,234,567.5
    r"|\d+(?:\.\d+)?"  # 12, 12.5
    r"|\.\d+"  # .5
    r")"
)


_LEAD_WORD = re.compile(r"^([a-z]{2,})\s+(?=[-+(\[{$\\\d.])")
#: Lead words that change the meaning of what follows (kept): negations and math functions.
_KEEP_LEADS = frozenset(
    "not no never none ln log lg exp sin cos tan cot sec csc arcsin arccos arctan sinh cosh "
    "tanh sqrt mod gcd lcm max min det".split()
)
# choice letters (kind="choice")
_CHOICE_WRAPPERS = re.compile(r"\\(?:text|textbf|textit|textrm|mathrm|mathbf|mbox)\s*")
_CHOICE_TOKEN = re.compile(
    r"(?<![\w\\])\(([A-J])\)"  # (B)
    r"|(?<![\w\\(])([A-J])\)"  # B)
    r"|(?<![\w\\'])([A-J])(?![\w'(])"  # B
)
_CHOICE_MARKER = re.compile(
    r"(?<![\w\\])\(([A-J])\)|(?<![\w\\(])([A-J])\)|\*\*\(?([A-J])\)?\*\*"
    r"|\b(?:[Oo]ption|[Cc]hoice)\s+\(?([A-J])\b"
)
#: An option marker ``(B)`` or ``B)`` (group 1 or 2: its letter), as in an option list.
_OPTION = re.compile(r"(?<![\w\\])\(([A-J])\)|(?<![\w\\(])([A-J])\)")
#: What may separate two options of a list: a short stretch of one line ending with a comma,
#: semicolon, line break, "and" or "or" (``A) 1, B) i``, ``A) Centaurus\nB) Cygnus``).
_OPTION_GAP = re.compile(r"[^\n]{0,80}?(?:[,;]\s*|\n\s*|\s(?:and|or)\s+|[,;]\s*(?:and|or)\s+)",
                         re.IGNORECASE)
#: A gap within a list whose options are separated by spaces alone (``(A) shark (B) whale``):
#: no sentence ends in it.
_OPTION_SPACE_GAP = re.compile(r"[^\n.!?]{0,80}")
#: A gap of any length between two options that each start a line or follow a ``,`` or ``:``
#: (an echoed list of long options, one a line or comma-separated): the rest of one line,
#: ending with a line break or a comma.
_LONG_OPTION_GAP = re.compile(r"[^\n]*?(?:,[ \t]*\n?|\n)[ \t]*")
#: Letters listed as options: "(options A, B, and C)", "choices A or B", "A, B, C and D".
_LETTER_LIST = re.compile(
    r"\b(?:options?|choices?|answers?)\s+\(?[A-J]\)?(?:\s*(?:,\s*(?:(?:and|or)\s+)?|\s(?:and|or)\s+)"
    r"\(?[A-J]\)?(?![\w'])\)?)+"
    r"|(?<![\w\\(])[A-J](?:\s*,\s*[A-J])+,?\s+(?:and|or)\s+[A-J](?![\w'])"
)
_LAST_LINE_CHOICE = re.compile(r"(?:^|[:)]|\bis)\s*\(?([A-J])\)?(?:\s*[.!]?$|,)")
_ANSWER_PHRASE = re.compile(r"\banswer\s*(?:is\b\s*:?|:)[ \t]*", re.IGNORECASE)
# one number in a sentence (kind="number")
_SENTENCE_WORD = re.compile(r"(?<![A-Za-z])(?:[A-Za-z]{2,}(?:['’-][A-Za-z]+)*|[aI])(?![A-Za-z])")
_SENTENCE_PUNCT = re.compile(r"[\s:=,.;!?'\"()%]+")
_NOT_PROSE_WORDS = frozenset(
    "pi sqrt ln log lg exp sin cos tan cot sec csc arcsin arccos arctan sinh cosh tanh "
    "infty infinity mod not no never none".split()
)
_SPACING_CMDS = re.compile(r"\\[!,;: ]|\\q?quad(?![A-Za-z])")


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


def _last_match(pattern: re.Pattern[str], text: str) -> re.Match[str] | None:
    """The last match of ``pattern`` in ``text``, or None."""
    return next(reversed(list(pattern.finditer(text))), None)


def _line_after_last(pattern: re.Pattern[str], text: str) -> str | None:
    """The rest of the line after the last match of ``pattern`` in ``text`` (None: no
    match)."""
    m = _last_match(pattern, text)
    return None if m is None else text[m.end():].split("\n", 1)[0]


def _sentence(line: str) -> str:
    """``line`` up to the end of its first sentence (a ``.`` before white space or the end)."""
    end = _SENTENCE_END.search(line)
    return line[: end.start()] if end else line


def last_boxed(text: str) -> str | None:
    """The content of the last non-empty ``\\boxed{...}`` (or ``\\fbox``; ``\\boxed 5``: the
    token after the space) in ``text``, stripped, that is not the prompts' placeholder
    ``\\boxed{answer}``; ``None`` when there is none."""
    for m in reversed(list(_BOX.finditer(text))):
        i = m.end()
        j = i
        while j < len(text) and text[j] in " \t":
            j += 1
        if j < len(text) and text[j] == "{":
            content = _braced(text, j)
            if content is not None and content.strip() and \
                    not _PLACEHOLDER_BOX.fullmatch(content.strip()):
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
    line = _line_after_last(_ANSWER_IS, text)
    if line is None:
        return None
    line = line.strip()
    choice = _LEADING_CHOICE.match(line)
    if choice:
        return choice.group(1)
    sentence = _sentence(line)
    if _is_prose(sentence):
        candidate = _from_prose(sentence) if _first_value(sentence) else sentence
    else:
        lead = _LEAD_WORD.match(sentence)
        if lead and lead.group(1) not in _KEEP_LEADS:
            sentence = sentence[lead.end():]
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
    verb = _last_match(_VERB, s)
    if verb is not None:
        found = _first_value(s[verb.end() :])
        if found and found[1]:
            return found[1]
    found = _first_value(s)
    if found and found[1] and len(_WORD.findall(s[: found[0]])) <= 1:
        return found[1]
    return None


def _final_choice(text: str) -> str | None:
    text = strip_option_lists(text)
    last = _last_match(_CHOICE, text)
    if last is None or _DIGIT.search(text, last.end()):
        return None
    return last.group(1)


def _last_number(text: str) -> str | None:
    last = _last_match(_NUMBER, text)
    if last is None:
        return None
    return re.sub(r"\s", "", last.group()).replace(",", "")


# --- kind="choice" -----------------------------------------------------------------------------


def _starts_item(text: str, start: int) -> bool:
    """Whether the option marker at ``start`` begins a list item: it starts the text or a
    line, or follows a ``,`` or ``:`` (spaces between allowed)."""
    before = text[max(0, start - 200):start].rstrip(" \t")
    return (not before and start <= 200) or before[-1:] in ("\n", ",", ":")


def strip_option_lists(text: str) -> str:
    """``text`` without its option lists, which name every choice and state none (an echoed
    question, "A) 1, B) i, C) 32, D) 32i do not match", "(options A, B, and C)").

    A list is a run of option markers ``A)`` / ``(A)`` with consecutive letters, each
    separated from the next by a short stretch of one line ending with a comma, semicolon,
    line break, "and" or "or" (two or more markers), by the rest of a line of any length
    ending with a line break or a comma when the marker before it starts the text or a line
    or follows a ``,`` or ``:`` (long options echoed one a line, "?:\nA) ...\nB) ..." or
    "is: A) ..., B) ..."), or by anything but a sentence end when
    the run holds three or more ("(A) shark (B) whale (C) trout"); or letters listed after
    "option(s)", "choice(s)" or "answer(s)", or three or more listed with "and" / "or". Each
    is replaced by a space."""
    marks = [(m.start(), m.end(), m.group(1) or m.group(2)) for m in _OPTION.finditer(text)]
    cut: list[tuple[int, int]] = []
    i = 0
    while i < len(marks):
        j, separated = i, True
        while j + 1 < len(marks) and ord(marks[j + 1][2]) == ord(marks[j][2]) + 1:
            gap = text[marks[j][1]:marks[j + 1][0]]
            if _OPTION_GAP.fullmatch(gap) is None and not (
                    _LONG_OPTION_GAP.fullmatch(gap) and _starts_item(text, marks[j][0])):
                if _OPTION_SPACE_GAP.fullmatch(gap) is None:
                    break
                separated = False
            j += 1
        n = j - i + 1
        if (n >= 2 and separated) or n >= 3:
            cut.append((marks[i][0], marks[j][1]))
            i = j + 1
        else:
            i += 1
    if cut:
        pieces, pos = [], 0
        for a, b in cut:
            pieces += [text[pos:a], " "]
            pos = b
        text = "".join(pieces) + text[pos:]
    return _LETTER_LIST.sub(" ", text)



def _choice_plain(s: str) -> str:
    """``s`` without markdown emphasis, ``$`` and ``\\text{}``-like wrappers (their braces)."""
    s = _CHOICE_WRAPPERS.sub("", s).replace("*", "").replace("$", "")
    return s.replace("{", " ").replace("}", " ")


def _first_choice(s: str) -> str | None:
    """The first choice letter in ``s`` (``(B)``, ``B)`` or a bare ``B``); a bare ``I``
    followed by a lower-case word is the pronoun, not a letter. ``""`` (ambiguous: stop
    looking) when ``s`` marks two different letters as options ("(C), (D)")."""
    s = _choice_plain(s)
    marked = {m.group(1) or m.group(2) for m in _CHOICE_TOKEN.finditer(s) if not m.group(3)}
    if len(marked) > 1:
        return ""
    for m in _CHOICE_TOKEN.finditer(s):
        if m.group(3) == "I" and re.match(r"\s+[a-z]", s[m.end():]):
            continue
        return m.group(1) or m.group(2) or m.group(3)
    return None


def _choice_boxed(text: str) -> str | None:
    for m in reversed(list(_BOX.finditer(text))):
        j = m.end()
        while j < len(text) and text[j] in " \t":
            j += 1
        if j < len(text) and text[j] == "{":
            content = _braced(text, j)
            if content is not None:
                found = _first_choice(content)
                if found is not None:
                    return found
    return None


def _choice_answer_is(text: str) -> str | None:
    line = _line_after_last(_ANSWER_PHRASE, text)
    return None if line is None else _first_choice(_sentence(line))


def _choice_last_line(text: str) -> str | None:
    lines = [ln for ln in text.splitlines() if ln.strip()]
    if not lines:
        return None
    m = _LAST_LINE_CHOICE.search(_choice_plain(lines[-1]).strip())
    return m.group(1) if m else None


def _choice_marker(text: str) -> str | None:
    s = _CHOICE_WRAPPERS.sub("", text).replace("$", "").replace("{", "").replace("}", "")
    last = _last_match(_CHOICE_MARKER, s)
    if last is None:
        return None
    return next(g for g in last.groups() if g)


def _choice_last_line_unlisted(text: str) -> str | None:
    return _choice_last_line(strip_option_lists(text))


def _choice_marker_unlisted(text: str) -> str | None:
    return _choice_marker(strip_option_lists(text))


# --- kind="number" -----------------------------------------------------------------------------


def _strip_outer_braces(s: str) -> str:
    s = s.strip()
    while len(s) >= 2 and s[0] == "{" and _braced(s, 0) == s[1:-1]:
        s = s[1:-1].strip()
    return s


def _single_number(answer: str) -> str | None:
    """The one number of a sentence-like answer ("Ronnie has $2" -> ``2``), else None (see
    ``kind="number"`` in the module docstring)."""
    s = _strip_outer_braces(answer)
    while True:  # unwrap \text{...}-like wrappers, keeping their content
        m = _CHOICE_WRAPPERS.search(s)
        if not m or m.end() >= len(s) or s[m.end()] != "{":
            break
        content = _braced(s, m.end())
        if content is None:
            return None
        s = s[: m.start()] + " " + content + " " + s[m.end() + len(content) + 2:]
    s = _SPACING_CMDS.sub(" ", s).replace("\\$", " ").replace("\\%", "%").replace("$", " ")
    numbers = list(_NUMBER.finditer(s))
    if len(numbers) != 1:
        return None
    number = numbers[0]
    if re.search(r"[A-Za-z]$", s[: number.start()]) or re.match(r"[A-Za-z]", s[number.end():]):
        return None  # a letter touches the number: 5a, x2 (a unit as in 5cm is normalised)
    rest = s[: number.start()] + " " + s[number.end():]
    words = _SENTENCE_WORD.findall(rest)
    if not words or any(w.lower() in _NOT_PROSE_WORDS for w in words):
        return None
    if _SENTENCE_PUNCT.sub("", _SENTENCE_WORD.sub(" ", rest)):
        return None  # something else than words and punctuation: an expression
    return re.sub(r"\s", "", number.group()).replace(",", "")


#: Arithmetic on plain numbers: digits, decimal points, thousands commas, brackets, spaces,
#: ``+ - * / ^ x × · ÷`` and ``\times``, ``\cdot``, ``\div``, ``\frac{a}{b}``.
_ARITHMETIC = re.compile(
    r"(?:\d|[\s.,()\[\]+\-*/^×·÷$]|\\(?:times|cdot|div)(?![A-Za-z])"
    r"|\\[dt]?frac(?=\{)|[{}]|(?<=\s)x(?=\s)|(?<=\d)x(?=\d))+"
)
_EQUALS = re.compile(r"(?<![<>!=\\])=(?!=)")


def _equation_result(answer: str) -> str | None:
    """The result of a worked equation on numbers, ``30 * 3 = 90`` -> ``90`` and ``16 * 3 =
    48 calories`` -> ``48 calories``: the part after the last ``=`` when every part before it
    is arithmetic on plain numbers (no variable, no word) and that part starts with a number;
    else None."""
    parts = _EQUALS.split(answer)
    if len(parts) < 2:
        return None
    *lhs, rhs = parts
    rhs = rhs.strip()
    if not all(_DIGIT.search(p) and _ARITHMETIC.fullmatch(p) for p in lhs):
        return None
    m = _NUMBER.match(rhs.replace("\\$", "").lstrip("$").strip())
    return rhs if m and rhs else None


def _as_number(answer: str) -> str:
    return _single_number(answer) or answer


def extract_answer(text: str | None, kind: AnswerKind = None) -> str | None:
    """The final answer stated in a response, or ``None`` when it states none.

    See the module docstring for the rules (last ``\\boxed{}``, else "The answer is ...",
    else a final choice letter ``(X)``, else the last number). The result is the answer as
    written (not normalised; see :func:`fastuq.answers.normalize_answer`).

    ``kind`` says what the gold answer is like (:func:`fastuq.answers.answer_kind`):
    ``"choice"`` reads only a choice letter (``None`` if the response states none),
    ``"number"`` reduces a sentence around one number to that number; ``None`` (default)
    applies the rules alone. ValueError for any other ``kind``.

    >>> extract_answer(r"So $x = \\boxed{\\frac{1}{2}}$.")
    '\\\\frac{1}{2}'
    >>> extract_answer("Adding, we get 1,234 apples. The answer is 1,234.")
    '1,234'
    >>> extract_answer("no numbers here") is None
    True
    """
    if kind not in (None, "choice", "number"):
        raise ValueError(f"kind must be 'choice', 'number' or None, got {kind!r}")
    if not text:
        return None
    if not isinstance(text, str):
        raise TypeError(f"text must be a string or None, got {type(text).__name__}")
    if kind == "choice":
        # a box or an "answer is" sentence that lists options states no single choice (read
        # on the whole text); the last line and the last marker never come from a list
        rules = (_choice_boxed, _choice_answer_is, _choice_last_line_unlisted,
                 _choice_marker_unlisted)
    else:
        rules = (last_boxed, _answer_is, _final_choice, _last_number)
    for rule in rules:
        found = rule(text)
        if found == "":  # an ambiguous choice ("the answer is (C), (D)"): no answer
            return None
        if found:
            found = _equation_result(found) or found
            return _as_number(found) if kind == "number" else found
    return None


def extract_answers(texts: Sequence[str | None], kind: AnswerKind = None
                    ) -> list[str | None]:
    """:func:`extract_answer` over a sequence of responses (``None`` stays ``None``)."""
    return [extract_answer(t, kind) for t in texts]
