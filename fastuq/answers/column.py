"""Final answers of a whole column of texts: :func:`extract_answer_column`.

The answer of each text is :func:`fastuq.answers.extract_answer`'s (``kind=None``), exactly:
the function is the definition, and this module only avoids calling it where the answer is
certain without it, so a column of millions of texts costs one Python call per *distinct*
text that needs one. Two kinds of text are decided by Polars (Rust regex) searches over the
whole column, and only when the text is ASCII without ``\\`` (so no ``\\boxed``) and without
the control characters ``\\x1c``-``\\x1f`` (which Python's ``\\s`` counts as white space and
Rust's does not), where the two regex engines read ``\\s``, ``\\b`` and case alike:

* a text that *ends* with ``answer is`` (any case, ``\\b`` both sides, then white space, an
  optional ``:``, spaces or tabs), a number ``-?[0-9]+(\\.[0-9]+)?``, an optional ``.`` and
  spaces, tabs or ``\\r``: rule 2 of :mod:`fastuq.answers.extract` ("The answer is ...")
  reads the rest of that line, which is the number (no choice letter, no prose, no lead
  word, no math span; ``$`` and a trailing ``.`` stripped), and it comes before rules 3 and
  4; no ``\\boxed`` can precede it (no ``\\``);
* a text with no ASCII digit, no ``answer is`` and no ``(A)`` .. ``(J)``: no rule finds
  anything (rule 4 needs a digit, rule 3 a parenthesised letter, which removing option
  lists never creates), so the answer is ``None``.

Every other text (LaTeX, non-ASCII, answers in prose, ...) goes to ``extract_answer``, once
per distinct text (Arrow dictionary encoding). tests/test_answers_column.py checks the
column against ``extract_answer`` text by text on random texts built from the patterns'
pieces.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import numpy as np

if TYPE_CHECKING:
    import pyarrow as pa

__all__ = ["extract_answer_column", "string_array"]

#: A text whose last line states "answer is <number>" (group 1: the number).
FAST_ANSWER = r"(?i:\banswer\s+is\b)\s*:?[ \t]*(-?[0-9]+(?:\.[0-9]+)?)\.?[ \t\r]*$"
#: What any rule of ``extract_answer`` needs in an ASCII text without ``\\``.
MAYBE_ANSWER = r"[0-9]|(?i:\banswer\s+is\b)|\([A-J]\)"


def extract_answer_column(texts: Any) -> pa.LargeStringArray:
    """``extract_answer(text)`` for every text of a column, as an Arrow ``large_string``
    array (null where a text states no answer, or is null).

    Args:
      texts: ``[N]`` strings: a list (``None`` allowed), a NumPy array, an Arrow string array
        (also chunked, dictionary or view) or a Polars String Series.

    Returns:
      ``pyarrow.LargeStringArray`` of length ``N``.

    Raises:
      ValueError: ``texts`` is one string, or not strings.
    """
    import polars as pl
    import pyarrow as pa
    import pyarrow.compute as pc

    from fastuq.answers.extract import extract_answer

    col = string_array(texts)
    n = len(col)
    if n == 0:
        return pa.array([], pa.large_string())
    valid = (np.ones(n, bool) if col.null_count == 0
             else col.is_valid().to_numpy(zero_copy_only=False))
    safe = valid & _safe_rows(col)
    fast = pl.Series(col).str.extract(FAST_ANSWER, 1)
    fast_hit = safe & fast.is_not_null().to_numpy()
    decided = fast_hit | ~valid
    check = np.flatnonzero(safe & ~fast_hit)  # safe: no answer unless MAYBE_ANSWER is found
    if check.size:
        maybe = pl.Series(col.take(pa.array(check))).str.contains(MAYBE_ANSWER).to_numpy()
        decided[check[~maybe]] = True
    answers = pc.if_else(pa.array(fast_hit), fast.to_arrow().cast(pa.large_string()),
                         pa.scalar(None, pa.large_string()))
    rest = np.flatnonzero(~decided)
    if rest.size:
        enc = pc.dictionary_encode(col.take(pa.array(rest)))
        distinct = enc.dictionary.to_pylist()
        found = pa.array([extract_answer(t) for t in distinct], pa.large_string())
        mask = np.zeros(n, bool)
        mask[rest] = True
        answers = pc.replace_with_mask(answers, pa.array(mask), found.take(enc.indices))
    return answers.cast(pa.large_string())


#: Bytes of text per block of the byte scan: its temporaries stay in cache (on the 2-core bench
#: machine 256 KB took 0.10 s of CPU for 300 MB of text, 64 MB blocks 0.97 s).
_BLOCK_BYTES = 1 << 18


def _safe_rows(col: pa.LargeStringArray) -> np.ndarray:
    """``[N]`` bool: the row is ASCII without ``\\`` and ``\\x1c``-``\\x1f`` (no UTF-8 byte
    ``>= 0x80``, ``0x5C`` or ``0x1C``-``0x1F``), by NumPy on the UTF-8 bytes, in blocks of about
    ``_BLOCK_BYTES`` (a null row reads as its bytes: none)."""
    _, off_buf, data_buf = col.buffers()
    n = len(col)
    off = np.frombuffer(off_buf, np.int64, count=n + 1, offset=8 * col.offset)
    if data_buf is None or off[-1] == off[0]:
        return np.ones(n, bool)
    data = np.frombuffer(data_buf, np.uint8)
    safe = np.ones(n, bool)
    a = 0
    while a < n:
        b = int(np.searchsorted(off, off[a] + _BLOCK_BYTES, side="left"))
        b = min(max(b, a + 1), n)
        lo = int(off[a])
        block = data[lo:off[b]]
        bad = block >= 0x80  # comparisons, not a table lookup: SIMD, some 10x faster
        bad |= block == 0x5C
        bad |= (block - np.uint8(0x1C)) < 4
        if bad.any():
            rows = np.arange(a, b)
            full = rows[off[rows + 1] > off[rows]]
            safe[full] = ~np.logical_or.reduceat(bad, off[full] - lo)
        a = b
    return safe


def string_array(values: Any, name: str = "texts") -> pa.LargeStringArray:
    """``values`` (a Polars Series, an Arrow array or chunked array, a NumPy array or a
    sequence of ``str``/``None``) as one Arrow ``large_string`` array; ValueError naming
    ``name`` when they are not strings, are one string, or are not 1-D."""
    import polars as pl
    import pyarrow as pa

    if isinstance(values, pl.Series):
        values = values.to_arrow()
    if isinstance(values, pa.ChunkedArray):
        values = values.combine_chunks()
    if isinstance(values, pa.Array):
        if pa.types.is_dictionary(values.type):
            values = values.dictionary_decode()
        t = values.type
        if not (pa.types.is_string(t) or pa.types.is_large_string(t)
                or pa.types.is_string_view(t) or pa.types.is_null(t)):
            raise ValueError(f"{name} must be strings, got Arrow type {t}")
        return values.cast(pa.large_string())
    if isinstance(values, (str, bytes)):
        raise ValueError(f"{name} must be a sequence of strings, got one string")
    if isinstance(values, np.ndarray) and values.ndim != 1:
        raise ValueError(f"{name} must be 1-D, got shape {values.shape}")
    try:
        return pa.array(values, pa.large_string())
    except (pa.ArrowException, TypeError, ValueError) as e:
        raise ValueError(f"{name} must be strings (or None): {e}") from None
