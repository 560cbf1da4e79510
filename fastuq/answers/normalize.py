"""Normalising answer strings, and reading their numeric value.

:func:`normalize_answer` is deliberately conservative: each rule below removes only notation
that never changes the value of a final answer, so two different answers do not collide.
Rules, applied in this order:

1. White space at both ends is stripped; a whole-string ``\\boxed{...}`` / ``\\fbox{...}`` is
   unwrapped, and so are braces enclosing the whole answer (before units are read, so
   ``{1128 \\text{ minutes}}`` gives ``1128``).
2. Line breaks and LaTeX spacing commands (``\\!``, ``\\,``, ``\\;``, ``\\:``, ``\\ ``,
   ``\\quad``, ``\\qquad``) and ``\\displaystyle`` are removed.
3. ``\\dfrac``, ``\\tfrac`` and ``\\cfrac`` become ``\\frac``; ``\\left`` and ``\\right`` are
   removed (but ``\\rightarrow``, ``\\leftarrow`` ... are kept).
4. Degrees (``^\\circ``, ``^{\\circ}``, ``°``), dollar signs (``\\$``, ``$``) and percent signs
   (``\\%``, ``%``) are removed: ``50\\%`` and ``50`` are the same answer, as in the MATH
   grader.
5. Text wrappers ``\\text{}``, ``\\textbf{}``, ``\\textit{}``, ``\\mathrm{}``, ``\\mathbf{}``,
   ``\\mbox{}`` are unwrapped (their content kept).
6. A variable prefix is removed when the answer holds one ``=`` and either the left side is
   one or two characters starting with a letter (``x = 5``, ``k=2x+1`` give ``5``, ``2x+1``)
   or the right side is a plain number and the left side a single term with a letter and no
   top-level ``+``, ``-`` or ``,`` (``t(f(-2)) = 5``, ``3a = \\frac{9}{2}`` give ``5``,
   ``\\frac{9}{2}``; equations such as ``2x - y + 8 = 0`` or ``x^2+y^2=1`` are kept).
7. Units: a plain number followed only by words of two or more letters (and spaces, optionally
   ``^2``/``^3``) loses the words: ``5 \\text{ cm}``, ``12 inches``, ``414 green beads`` give
   the number. Nothing else is treated as a unit: ``5x``, ``5 x`` and ``2 pi`` are kept.
8. One leading ``+`` is removed; all remaining white space is removed.
9. Trailing ``.`` and ``,`` are removed; a ``.`` opening a decimal gains its ``0`` (``.5`` ->
   ``0.5``); a one-character sub- or superscript loses its braces (``4210_{5}`` ->
   ``4210_5``, ``x^{2}`` -> ``x^2``).
10. ``\\frac12`` / ``\\frac1{2}`` / ``\\frac{1}2`` become ``\\frac{1}{2}``; ``\\sqrt2`` becomes
    ``\\sqrt{2}``.
11. Thousands separators in a plain number are removed (``1,234`` and ``1{,}234`` give
    ``1234``); a list such as ``1,2`` is left alone.
12. One pair of braces or double quotes enclosing the whole answer is removed (``{5}`` ->
    ``5``, ``"odd"`` -> ``odd``); a leading ``x\\in`` (one letter) is removed
    (``x\\in[-2,7]`` -> ``[-2,7]``).
13. A lone capital choice letter in parentheses loses them: ``(C)``, ``\\text{(C)}`` give
    ``C``.

:func:`numeric_value` then reads a normalised answer as an exact fraction when it is an
integer, a decimal, a scientific-notation number, ``a/b`` or ``\\frac{a}{b}`` (with an
optional sign), and returns ``None`` for anything else. :func:`answer_kind` says what a gold
answer is like (a choice letter, a number, or anything else), which is what
:func:`fastuq.answers.extract_answer` takes as ``kind``.
"""

from __future__ import annotations

import re
from fractions import Fraction
from functools import lru_cache

__all__ = ["answer_kind", "normalize_answer", "numeric_value"]

_WRAPPERS = ("\\boxed", "\\fbox")
_TEXT_CMDS = re.compile(r"\\(?:text|textbf|textit|textrm|mathrm|mathbf|mbox)\s*\{")
_SPACING = re.compile(r"\\[!,;: ]|\\q?quad(?![A-Za-z])|\\displaystyle(?![A-Za-z])|[\r\n\t]")
_LEFT_RIGHT = re.compile(r"\\(?:left|right)(?![A-Za-z])")
_DEGREES = re.compile(r"\^\s*\{\s*\\circ\s*\}|\^\s*\\circ(?![A-Za-z])|°")
_PLAIN_NUMBER = r"[-+]?(?:\d{1,3}(?:,\d{3})+|\d+)?(?:\.\d+)?"
_UNITS = re.compile(
    r"^(" + _PLAIN_NUMBER + r")\s*(?!(?:pi|i|e)\b)[A-Za-z]{2,}(?: +[A-Za-z]+)*\s*(?:\^\{?[23]\}?)?$"
)
_VAR_PREFIX = re.compile(r"^\s*[A-Za-z]\w?\s*=(?!=)")
_NUMBER_RHS = re.compile(
    r"^[-+]?(?:\d[\d,]*(?:\.\d+)?|\.\d+|\d+/\d+|\\[dt]?frac\s*\{\d+\}\s*\{\d+\})$"
)
_THOUSANDS = re.compile(r"^-?\d{1,3}(?:,\d{3})+(?:\.\d+)?$")
_CHOICE = re.compile(r"^\(([A-J])\)$|^([A-J])$")
_INT = r"[-+]?\d+"
_DEC = r"[-+]?(?:\d+\.?\d*|\.\d+)(?:[eE][-+]?\d+)?"
_NUM_RE = re.compile(r"^" + _DEC + r"$")
_SLASH_RE = re.compile(r"^(" + _INT + r")/(" + _INT + r")$")
_FRAC_RE = re.compile(r"^([-+]?)\\frac\{(" + _DEC + r")\}\{(" + _DEC + r")\}$")


def _braced_end(s: str, start: int) -> int:
    """Index just past the brace group opening at ``s[start] == '{'``, or -1 if unclosed."""
    depth = 0
    for i in range(start, len(s)):
        if s[i] == "{":
            depth += 1
        elif s[i] == "}":
            depth -= 1
            if depth == 0:
                return i + 1
    return -1


def _unwrap_whole(s: str) -> str:
    changed = True
    while changed:
        changed = False
        if len(s) >= 2 and s[0] == "{" and _braced_end(s, 0) == len(s):
            s = s[1:-1].strip()
            changed = True
        for w in _WRAPPERS:
            if s.startswith(w):
                j = len(w)
                while j < len(s) and s[j] == " ":
                    j += 1
                if j < len(s) and s[j] == "{" and _braced_end(s, j) == len(s):
                    s = s[j + 1 : -1].strip()
                    changed = True
    return s


def _unwrap_text(s: str) -> str:
    while True:
        m = _TEXT_CMDS.search(s)
        if not m:
            return s
        end = _braced_end(s, m.end() - 1)
        if end < 0:
            return s
        s = s[: m.start()] + s[m.end() : end - 1] + s[end:]


def _is_single_term(s: str) -> bool:
    """Has a letter, and no ``+``, ``-`` or ``,`` outside brackets (a sign may lead)."""
    if not re.search(r"[A-Za-z]", s):
        return False
    depth = 0
    for i, c in enumerate(s):
        if c in "([{":
            depth += 1
        elif c in ")]}":
            depth -= 1
        elif c in "+-," and depth == 0 and i > 0:
            return False
    return True


def _fix_fracs(s: str) -> str:
    s = re.sub(r"\\frac\s*(\d)\s*(\d)", r"\\frac{\1}{\2}", s)
    s = re.sub(r"\\frac\s*(\d)\s*\{", r"\\frac{\1}{", s)
    s = re.sub(r"\\frac\s*\{([^{}]*)\}\s*(\d)", r"\\frac{\1}{\2}", s)
    return re.sub(r"\\sqrt\s*(\d)", r"\\sqrt{\1}", s)


@lru_cache(maxsize=1 << 16)
def normalize_answer(s: str | None) -> str:
    """A canonical spelling of an answer for comparison (see the module docstring's rules).

    ``None`` gives ``""``. The rules only remove notation; they never evaluate anything, so
    ``0.5`` and ``\\frac{1}{2}`` stay different strings (:func:`numeric_value` and the
    equivalence functions compare them by value).

    >>> normalize_answer(r"$x = \\dfrac{1}{2}$.")
    '\\\\frac{1}{2}'
    >>> normalize_answer(r"\\text{(B)}")
    'B'
    """
    if s is None:
        return ""
    s = _unwrap_whole(s.strip())
    s = _SPACING.sub(" ", s)
    s = re.sub(r"\\[dtc]frac(?![A-Za-z])", r"\\frac", s)
    s = _LEFT_RIGHT.sub("", s)
    s = _DEGREES.sub("", s)
    s = s.replace("\\$", "").replace("$", "").replace("\\%", "").replace("%", "")
    s = _unwrap_text(s).strip()
    if s.count("=") == 1:
        lhs, rhs = (part.strip() for part in s.split("=", 1))
        if _VAR_PREFIX.match(s) or (_is_single_term(lhs) and _NUMBER_RHS.match(rhs)):
            s = rhs
    m = _UNITS.match(s)
    if m and re.search(r"\d", m.group(1)):
        s = m.group(1)
    if s.startswith("+"):
        s = s[1:]
    s = re.sub(r"\s+", "", s)
    s = s.rstrip(".,")
    s = re.sub(r"([_^])\{(\w)\}", r"\1\2", s)
    s = re.sub(r"(?<![\w.])\.(\d)", r"0.\1", s)
    s = _fix_fracs(s)
    s = re.sub(r"(?<=\d)\{,\}(?=\d{3})", ",", s)
    if _THOUSANDS.match(s):
        s = s.replace(",", "")
    if len(s) >= 2 and s[0] == "{" and _braced_end(s, 0) == len(s):
        s = s[1:-1]
    if len(s) >= 2 and s[0] == s[-1] == '"':
        s = s[1:-1]
    s = re.sub(r"^[A-Za-z]\\in(?![A-Za-z])", "", s)
    m = _CHOICE.match(s)
    if m:
        s = (m.group(1) or m.group(2)).upper()
    return s


def _fraction(text: str) -> Fraction | None:
    try:
        return Fraction(text)
    except (ValueError, ZeroDivisionError):
        return None


@lru_cache(maxsize=1 << 16)
def numeric_value(s: str | None) -> Fraction | None:
    """Exact value of a normalised answer that is a plain number or fraction, else ``None``.

    Accepts integers, decimals (``.5``, ``2.``), scientific notation (``1e-3``), ``a/b`` with
    integers, and ``\\frac{a}{b}`` with integer or decimal parts, each with an optional sign.
    A zero denominator gives ``None``.
    """
    if not s:
        return None
    if _NUM_RE.match(s):
        return _fraction(s)
    m = _SLASH_RE.match(s)
    if m:
        den = int(m.group(2))
        return Fraction(int(m.group(1)), den) if den else None
    m = _FRAC_RE.match(s)
    if m:
        num, den = _fraction(m.group(2)), _fraction(m.group(3))
        if num is None or not den:
            return None
        value = num / den
        return -value if m.group(1) == "-" else value
    return None


def answer_kind(gold: str | None) -> str | None:
    """What a gold answer is like: ``"choice"`` when it normalises to one letter ``A``..``J``
    (``B``, ``(B)``, ``\\text{(B)}``), ``"number"`` when :func:`numeric_value` reads it,
    else ``None`` (also for ``None``)."""
    norm = normalize_answer(gold)
    if len(norm) == 1 and "A" <= norm <= "J":
        return "choice"
    if numeric_value(norm) is not None:
        return "number"
    return None
