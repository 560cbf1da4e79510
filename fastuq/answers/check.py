"""Answer equivalence: one pair, many (answer, gold) pairs, and classes for vote counting.

Two answers are equivalent (``math=False``) when, after :func:`normalize_answer`,

* they are the same non-empty string (this covers choice letters: ``(B)`` and ``B``), or
* both read as numbers (:func:`numeric_value`) within a relative tolerance of ``1e-6``:
  ``|a - b| <= 1e-6 * max(|a|, |b|)``, so ``0.5``, ``.5``, ``1/2`` and ``\\frac{1}{2}`` agree
  and ``0`` only equals ``0``.

With ``math=True`` a pair that fails those checks is also tried with the ``math-verify``
package (``pip install fastuq[math]``), which parses both sides to SymPy and compares them
(``\\frac{x+2}{7}`` vs ``(x+2)/7``, ``\\sqrt{8}`` vs ``2\\sqrt{2}``, ...). Parsing one answer
and comparing one pair take some 10-50 ms each (both are cached per process), up to
``MATH_TIMEOUT_S`` (:mod:`fastuq.answers.symbolic`, which holds the math-verify machinery)
on pathological input, after which the pair counts as not equivalent.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Sequence
from fractions import Fraction

import numpy as np

from fastuq.answers.normalize import normalize_answer, numeric_value
from fastuq.answers.symbolic import (
    RecordedPairs,
    math_verdicts,
    math_verify_available,
    process_pool,
    recording_pairs,
    require_math_verify,
    seeded_verdicts,
    symbolic_equivalent,
)

__all__ = [
    "REL_TOL",
    "require_math_verify",
    "answer_classes",
    "answers_equivalent",
    "check_coded",
    "check_answers",
    "math_verdicts",
    "math_verify_available",
    "RecordedPairs",
    "recording_pairs",
    "seeded_verdicts",
]

#: Relative tolerance of numeric equivalence.
REL_TOL = 1e-6
#: Fewest distinct pairs for which :func:`check_answers` starts worker processes.
MIN_PARALLEL_PAIRS = 256


def _numbers_close(a: Fraction, b: Fraction) -> bool:
    if a == b:
        return True
    try:
        fa, fb = float(a), float(b)
    except OverflowError:  # beyond float (1e400): the same test in exact arithmetic
        return abs(a - b) <= Fraction(REL_TOL) * max(abs(a), abs(b))
    return abs(fa - fb) <= REL_TOL * max(abs(fa), abs(fb))


def _equivalent_normalized(a: str, b: str, math: bool) -> bool:
    if not a or not b:
        return False
    if a == b:
        return True
    va, vb = numeric_value(a), numeric_value(b)
    if va is not None and vb is not None:
        return _numbers_close(va, vb)
    if math:
        return symbolic_equivalent(b, a)
    return False


def answers_equivalent(a: str | None, b: str | None, *, math: bool = False) -> bool:
    """Whether answer ``a`` is equivalent to answer (or gold) ``b``.

    ``None`` or an answer that normalises to ``""`` is equivalent to nothing. With
    ``math=True``, ``b`` is given to math-verify as the gold side.

    Raises:
      ImportError: ``math=True`` and math-verify is not installed (only raised when a pair
        actually needs it).
    """
    if a is None or b is None:
        return False
    return _equivalent_normalized(normalize_answer(a), normalize_answer(b), math)


def _check_chunk(pairs: list[tuple[str, str]], math: bool) -> list[bool]:
    return [_equivalent_normalized(a, b, math) for a, b in pairs]


def check_answers(
    answers: Sequence[str | None],
    golds: Sequence[str | None],
    *,
    math: bool = False,
    processes: int | None = None,
) -> np.ndarray:
    """Element-wise :func:`answers_equivalent` of ``answers[i]`` against ``golds[i]``.

    Each distinct (normalised answer, normalised gold) pair is checked once. With
    ``processes > 1`` and at least ``MIN_PARALLEL_PAIRS`` distinct pairs, the checks are spread
    over that many worker processes (``concurrent.futures.ProcessPoolExecutor``), which pays
    off with ``math=True``; ``None`` (the default) or 1 checks in this process.

    Returns:
      ``[n]`` bool array; ``False`` wherever either side is ``None``.

    Raises:
      ValueError: the sequences differ in length or ``processes`` is below 1.
      ImportError: ``math=True`` without math-verify installed.
    """
    if len(answers) != len(golds):
        raise ValueError(f"answers ({len(answers)}) and golds ({len(golds)}) differ in length")
    if processes is not None and (isinstance(processes, bool) or processes < 1):
        raise ValueError(f"processes must be a positive integer or None, got {processes!r}")
    if math:
        require_math_verify()
    index: dict[tuple[str, str], int] = {}
    rows = np.full(len(answers), -1, np.int64)
    for i, (a, g) in enumerate(zip(answers, golds, strict=True)):
        if a is None or g is None:
            continue
        key = (normalize_answer(a), normalize_answer(g))
        rows[i] = index.setdefault(key, len(index))
    pairs = list(index)
    workers = min(processes or 1, os.cpu_count() or 1, max(1, len(pairs) // 64))
    if workers > 1 and len(pairs) >= MIN_PARALLEL_PAIRS:
        size = -(-len(pairs) // (workers * 4))
        chunks = [pairs[i : i + size] for i in range(0, len(pairs), size)]
        with process_pool(workers) as pool:
            results = [ok for part in pool.map(_check_chunk, chunks, [math] * len(chunks))
                       for ok in part]
    else:
        results = _check_chunk(pairs, math)
    verdict = np.asarray(results + [False], dtype=bool)  # row -1 reads the trailing False
    return verdict[rows]


def check_coded(
    names: Sequence[str | None],
    golds: Sequence[str | None],
    a_idx: np.ndarray,
    g_idx: np.ndarray,
    *,
    math: bool = False,
    processes: int | None = None,
) -> np.ndarray:
    """:func:`check_answers` of ``names[a_idx[i]]`` against ``golds[g_idx[i]]``, for pairs given
    as indices into two lists of distinct strings: the same verdicts, with Python running once
    per distinct string (normalisation, numeric value) rather than once per pair. Pairs are
    decided vectorized (equal normalised strings; numbers within :data:`REL_TOL`, the float
    test :func:`_numbers_close` makes); only with ``math`` do the undecided pairs (neither
    equal nor both numbers) go to math-verify, each distinct pair once.

    Returns ``[len(a_idx)]`` bool; an index of -1 (no answer, no gold) gives False.
    """
    a_idx = np.asarray(a_idx, np.int64)
    g_idx = np.asarray(g_idx, np.int64)
    if a_idx.shape != g_idx.shape:
        raise ValueError(f"a_idx {a_idx.shape} and g_idx {g_idx.shape} differ in shape")
    ids: dict[str, int] = {}

    def encode(items: Sequence[str | None]) -> tuple[np.ndarray, np.ndarray, list[str]]:
        sid = np.full(len(items) + 1, -1, np.int64)  # the last entry stands for index -1
        num = np.full(len(items) + 1, np.nan)
        norm = []
        for i, x in enumerate(items):
            n = normalize_answer(x) if x is not None else ""
            norm.append(n)
            if not n:
                continue
            sid[i] = ids.setdefault(n, len(ids))
            v = numeric_value(n)
            if v is not None:
                try:
                    num[i] = float(v)
                except OverflowError:  # beyond float: left to the exact check
                    num[i] = np.inf
        return sid, num, norm

    sa, va, norm_a = encode(names)
    sg, vg, norm_g = encode(golds)
    ia = np.where(a_idx >= 0, a_idx, len(names))
    ig = np.where(g_idx >= 0, g_idx, len(golds))
    a_s, g_s, a_v, g_v = sa[ia], sg[ig], va[ia], vg[ig]
    valid = (a_s >= 0) & (g_s >= 0)
    out = valid & (a_s == g_s)
    numeric = valid & ~out & ~np.isnan(a_v) & ~np.isnan(g_v)
    finite = numeric & np.isfinite(a_v) & np.isfinite(g_v)
    with np.errstate(invalid="ignore"):
        close = np.abs(a_v - g_v) <= REL_TOL * np.maximum(np.abs(a_v), np.abs(g_v))
    out |= finite & close
    rest = (numeric & ~finite) | (valid & ~out & ~numeric if math else np.zeros_like(out))
    if rest.any():
        pairs = np.unique(np.stack([ia[rest], ig[rest]], axis=1), axis=0)
        if math:
            require_math_verify()
        verdict = _check_chunk([(norm_a[i], norm_g[j]) for i, j in pairs.tolist()], math)
        table = {(int(i), int(j)): v for (i, j), v in zip(pairs.tolist(), verdict,
                                                          strict=True)}
        idx = np.flatnonzero(rest)
        out[idx] = [table[(int(i), int(j))] for i, j in zip(ia[idx], ig[idx], strict=True)]
    return out


def answer_classes(answers: Sequence[str | None], *, math: bool = False) -> np.ndarray:
    """Class ids such that equivalent answers share an id, for counting votes.

    Ids are 0, 1, 2, ... in order of first appearance; ``None`` and answers that normalise to
    ``""`` get -1. Answers fall in one class when their normalised strings are equal or when
    both are numbers within the relative tolerance (numbers are sorted and neighbours within
    tolerance are chained into one class, so ``0.5``, ``1/2`` and ``\\frac{1}{2}`` vote
    together). With ``math=True`` the remaining classes are merged further by math-verify,
    checking every pair of distinct non-numeric normalised answers (plus each against one
    number per numeric class): ``D (D - 1) / 2`` checks for ``D`` distinct answers, 10-50 ms
    each (cached). That is cheap for the handful of answers one question's round gets, so call
    it per question (or per round), not on a whole corpus column.

    Returns:
      ``[n]`` int64 array.
    """
    n = len(answers)
    ids = np.full(n, -1, np.int64)
    norms: dict[str, int] = {}  # distinct normalised answer -> provisional class
    prov = np.full(n, -1, np.int64)
    for i, a in enumerate(answers):
        if a is None:
            continue
        s = normalize_answer(a)
        if s:
            prov[i] = norms.setdefault(s, len(norms))
    distinct = list(norms)
    parent = list(range(len(distinct)))

    def find(x: int) -> int:
        while parent[x] != x:
            parent[x] = parent[parent[x]]
            x = parent[x]
        return x

    def union(x: int, y: int) -> None:
        rx, ry = find(x), find(y)
        if rx != ry:
            parent[max(rx, ry)] = min(rx, ry)

    numeric = [(v, k) for k, s in enumerate(distinct) if (v := numeric_value(s)) is not None]
    numeric.sort(key=lambda t: t[0])
    for (v0, k0), (v1, k1) in zip(numeric, numeric[1:], strict=False):
        if _numbers_close(v0, v1):
            union(k0, k1)
    if math and len(distinct) > 1:
        require_math_verify()
        numeric_ids = {k for _, k in numeric}
        reps = [k for k in range(len(distinct)) if find(k) == k]
        for x in range(len(reps)):
            for y in range(x + 1, len(reps)):
                kx, ky = reps[x], reps[y]
                if kx in numeric_ids and ky in numeric_ids:
                    continue  # numbers were compared exactly above
                a, b = sorted((distinct[kx], distinct[ky]))  # one cache entry per pair
                if find(kx) != find(ky) and symbolic_equivalent(a, b, classes=True):
                    union(kx, ky)
    # renumber classes in order of first appearance
    final: dict[int, int] = {}
    for i in range(n):
        if prov[i] >= 0:
            ids[i] = final.setdefault(find(int(prov[i])), len(final))
    return ids


def vote_classes(
    names: Sequence[str],
    codes: np.ndarray,
    group: np.ndarray | Callable[[], np.ndarray],
    *,
    math: bool = False,
    processes: int | None = None,
) -> np.ndarray:
    """Class ids for counting votes within groups (rounds): equivalent answers of one group
    share an id. Vectorized over slots; Python runs once per distinct answer (and, with
    ``math``, once per distinct pair of classes that meet in a group).

    Without ``math`` this is :func:`answer_classes` on the distinct answers (normalised
    strings, and numbers within tolerance, share a class). With ``math=True`` two classes are
    then merged when math-verify proves their answers equivalent, checking only pairs that
    meet in some group (each distinct pair once, over ``processes`` workers), never all pairs
    of a corpus: a corpus has many distinct answers but a round has a handful.

    Args:
      names: ``[D]`` the distinct answer strings.
      codes: ``[S]`` int index into ``names`` of every slot's answer, -1 for no answer.
      group: ``[S]`` int group (round) of every slot, or a function returning it (only
        called with ``math=True``).

    Returns:
      ``[S]`` int64 class ids, -1 for slots that cannot vote.
    """
    codes = np.asarray(codes)
    if codes.dtype.kind not in "iu":
        codes = codes.astype(np.int64)
    base = answer_classes(list(names))  # per distinct string
    if codes.size and int(codes.min()) >= -1:  # one gather: code -1 takes the appended -1
        cls = np.append(base, np.int64(-1))[codes]
    else:
        cls = np.where(codes >= 0, base[np.maximum(codes, 0)] if len(base) else -1, -1)
    if not math or not (cls >= 0).any():
        return cls
    group = np.asarray(group() if callable(group) else group, np.int64)
    if group.shape != codes.shape:
        raise ValueError(f"group has shape {group.shape}, codes {codes.shape}")
    n_cls = int(cls.max()) + 1
    rep = np.full(n_cls, -1, np.int64)  # one answer string per class: its first name
    valid = base >= 0
    rep[base[valid][::-1]] = np.flatnonzero(valid)[::-1]
    # Distinct (group, class) pairs, sorted; classes at distance d within one group pair up.
    vote = cls >= 0
    key = np.unique(np.stack([group[vote], cls[vote]], axis=1), axis=0)
    pairs = []
    for d in range(1, len(key)):
        same = key[d:, 0] == key[:-d, 0]
        if not same.any():
            break
        pairs.append(np.stack([key[:-d, 1][same], key[d:, 1][same]], axis=1))
    if not pairs:
        return cls
    pairs = np.unique(np.concatenate(pairs), axis=0)
    same = check_answers([names[rep[a]] for a in pairs[:, 0]],
                         [names[rep[b]] for b in pairs[:, 1]], math=True, processes=processes)
    parent = np.arange(n_cls)

    def find(x: int) -> int:
        while parent[x] != x:
            parent[x] = parent[parent[x]]
            x = parent[x]
        return int(x)

    for (a, b), eq in zip(pairs.tolist(), same, strict=True):
        if eq:
            ra, rb = find(a), find(b)
            if ra != rb:
                parent[max(ra, rb)] = min(ra, rb)
    root = np.array([find(k) for k in range(n_cls)])
    return np.where(vote, root[np.maximum(cls, 0)], -1)
