"""math-verify behind fastuq's answer checks (``math=True``): the optional package, its
cached parses and verdicts, the dry run that records the pairs a computation needs
(:func:`recording_pairs`), verdicts computed ahead and installed (:func:`seeded_verdicts`),
and :func:`math_verdicts`, which checks many pairs in worker processes under an outer
timeout. :mod:`fastuq.answers.check` uses it and re-exports its public names.
"""

from __future__ import annotations

import multiprocessing
import os
import sys
import threading
import time
from collections.abc import Iterator, Mapping, Sequence
from concurrent.futures import ProcessPoolExecutor
from contextlib import contextmanager
from contextvars import ContextVar
from functools import lru_cache

__all__ = [
    "MATH_TIMEOUT_S",
    "OUTER_TIMEOUT_S",
    "RecordedPairs",
    "equivalent_checked",
    "math_verdicts",
    "math_verify_available",
    "process_pool",
    "recording_pairs",
    "require_math_verify",
    "seeded_verdicts",
    "symbolic_equivalent",
]


def math_verify_available() -> bool:
    """Whether the optional ``math-verify`` package can be imported."""
    try:
        import math_verify  # noqa: F401
    except ImportError:
        return False
    return True


def require_math_verify():
    """The ``math_verify`` module, or ImportError naming the ``fastuq[math]`` extra."""
    try:
        import math_verify
    except ImportError as exc:
        raise ImportError(
            "math=True needs the optional math-verify package: pip install 'fastuq[math]'"
        ) from exc
    return math_verify


#: Seconds math-verify may spend parsing one answer, and comparing one pair (then: not
#: equivalent). Enforced with SIGALRM, so only in the main thread of a process.
MATH_TIMEOUT_S = 3


def _timeout() -> int | None:
    return MATH_TIMEOUT_S if threading.current_thread() is threading.main_thread() else None


@lru_cache(maxsize=1 << 14)
def parse_cached(normalized: str):
    mv = require_math_verify()
    try:
        return mv.parse(f"${normalized}$", parsing_timeout=_timeout())
    except Exception:  # math-verify raises many kinds on odd LaTeX: not equivalent
        return []


#: Verdicts computed ahead (:func:`math_verdicts`, installed by :func:`seeded_verdicts`):
#: ``(gold, answer) -> bool``, consulted before math-verify is called.
_SEEDED: dict[tuple[str, str], bool] = {}
class RecordedPairs:
    """The math-verify checks a dry run (:func:`recording_pairs`) asked for: ``classes``,
    those of :func:`answer_classes` (grouping votes), ``checks``, those of answers against
    golds (:func:`check_answers`, :func:`answers_equivalent`)."""

    def __init__(self) -> None:
        self.classes: set[tuple[str, str]] = set()
        self.checks: set[tuple[str, str]] = set()


#: While :func:`recording_pairs` runs: the pairs math-verify would be asked about.
_RECORDING: ContextVar[RecordedPairs | None] = ContextVar("fastuq_mv_recording", default=None)


def symbolic_equivalent(gold_norm: str, answer_norm: str, classes: bool = False) -> bool:
    """math-verify's verdict on two normalised answers (``gold_norm`` as the gold side): a
    seeded verdict when one is installed (:func:`seeded_verdicts`), "not equivalent" and
    recorded during a dry run (:func:`recording_pairs`; ``classes``: the check groups votes),
    else :func:`equivalent_checked`."""
    key = (gold_norm, answer_norm)
    seeded = _SEEDED.get(key)
    if seeded is not None:
        return seeded
    recording = _RECORDING.get()
    if recording is not None:
        (recording.classes if classes else recording.checks).add(key)
        return False
    return equivalent_checked(gold_norm, answer_norm)


@contextmanager
def recording_pairs() -> Iterator[RecordedPairs]:
    """Within the block, every math-verify check that is not seeded is recorded (in the
    :class:`RecordedPairs` yielded) and answered "not equivalent" instead of run: a dry run
    that collects the pairs a computation needs, to check them all at once with
    :func:`math_verdicts`. As "not equivalent" merges no vote classes, the dry run asks
    :func:`answer_classes` for every pair the real run can ask for."""
    pairs = RecordedPairs()
    token = _RECORDING.set(pairs)
    try:
        yield pairs
    finally:
        _RECORDING.reset(token)


@contextmanager
def seeded_verdicts(verdicts: Mapping[tuple[str, str], bool]) -> Iterator[None]:
    """Within the block, math-verify checks of the ``(gold, answer)`` pairs of ``verdicts``
    return those verdicts (from :func:`math_verdicts`) without running."""
    added = {k: v for k, v in verdicts.items() if k not in _SEEDED}
    _SEEDED.update(added)
    try:
        yield
    finally:
        for k in added:
            _SEEDED.pop(k, None)


@lru_cache(maxsize=1 << 16)
def equivalent_checked(gold_norm: str, answer_norm: str) -> bool:
    """math-verify run on the pair (cached per process): False when either side does not
    parse, the comparison raises or times out (:data:`MATH_TIMEOUT_S`, main thread only)."""
    mv = require_math_verify()
    gold, answer = parse_cached(gold_norm), parse_cached(answer_norm)
    if not gold or not answer:
        return False
    try:
        return bool(mv.verify(gold, answer, timeout_seconds=_timeout()))
    except Exception:
        return False


def process_pool(workers: int) -> ProcessPoolExecutor:
    """A process pool: forked workers, unless JAX is loaded (its threads make ``fork``
    unsafe), then workers from a fork server (scripts then need the usual
    ``if __name__ == "__main__":`` guard)."""
    return ProcessPoolExecutor(max_workers=workers, mp_context=_context())


def _context():
    """Forked workers, unless JAX is loaded (its threads make ``fork`` unsafe), then a fork
    server (or spawn where there is none)."""
    methods = multiprocessing.get_all_start_methods()
    if "fork" in methods and "jax" not in sys.modules:
        return multiprocessing.get_context("fork")
    return multiprocessing.get_context("forkserver" if "forkserver" in methods else "spawn")


#: Seconds one :func:`math_verdicts` check may take in a worker before the worker is stopped
#: and the pair counts as not equivalent (math-verify's own limits, ``MATH_TIMEOUT_S`` for
#: each of the two parses and the comparison, come first; this one catches a check that
#: hangs past them).
OUTER_TIMEOUT_S = 4 * MATH_TIMEOUT_S


def _verdict_worker(conn) -> None:
    """A :func:`math_verdicts` worker: reads chunks of ``(gold, answer)`` pairs, answers each
    pair's verdict as soon as it is known (math-verify's own SIGALRM timeouts work here: this
    is the process's main thread)."""
    import logging

    logging.getLogger("math_verify").setLevel(logging.ERROR)
    while True:
        try:
            chunk = conn.recv()
        except EOFError:
            return
        if chunk is None:
            return
        for gold, answer in chunk:
            conn.send(equivalent_checked(gold, answer))


#: A string in more pairs than this (a small number such as "2") does not tie its pairs
#: into one chunk.
_HUB = 16


def _chunks_by_strings(pairs: list[tuple[str, str]], size: int) -> list[list[tuple[str, str]]]:
    """``pairs`` in chunks of about ``size`` that keep pairs sharing a string together (the
    answers of one question, and its gold), so that a worker parses each string once:
    groups of pairs connected through their strings (strings in more than ``_HUB`` pairs
    connect nothing), largest first, packed whole into chunks; a group of more than
    ``4 size`` pairs is cut into sorted pieces of ``size``."""
    uses: dict[str, int] = {}
    for a, b in pairs:
        uses[a] = uses.get(a, 0) + 1
        uses[b] = uses.get(b, 0) + 1
    parent: dict[str, str] = {}

    def find(x: str) -> str:
        parent.setdefault(x, x)
        while parent[x] != x:
            parent[x] = parent[parent[x]]
            x = parent[x]
        return x

    for a, b in pairs:
        if uses[a] <= _HUB and uses[b] <= _HUB:
            ra, rb = find(a), find(b)
            if ra != rb:
                parent[max(ra, rb)] = min(ra, rb)
    groups: dict[str, list[tuple[str, str]]] = {}
    for a, b in pairs:
        key = find(a) if uses[a] <= _HUB else find(b) if uses[b] <= _HUB else a
        groups.setdefault(key, []).append((a, b))
    chunks: list[list[tuple[str, str]]] = []
    current: list[tuple[str, str]] = []
    for group in sorted(groups.values(), key=len, reverse=True):
        if len(group) > 4 * size:  # a large web of strings: in sorted pieces
            group = sorted(group)
            chunks.extend(group[i:i + size] for i in range(0, len(group), size))
            continue
        current.extend(group)
        if len(current) >= size:
            chunks.append(current)
            current = []
    if current:
        chunks.append(current)
    return chunks


def math_verdicts(pairs: Sequence[tuple[str, str]], processes: int | None = None, *,
                  timeout: float | None = None) -> dict[tuple[str, str], bool]:
    """math-verify's verdict for each distinct ``(gold, answer)`` pair of normalised
    answers, the checks spread over ``processes`` worker processes (default 1; at most one
    per CPU), each check under an outer ``timeout`` (default :data:`OUTER_TIMEOUT_S`): a
    worker that exceeds it is stopped and replaced, and its pair counts as not equivalent,
    as a check math-verify times out itself does (so does a verdict that arrives after the
    deadline). A chunk keeps together the pairs that
    share strings (:func:`_chunks_by_strings`), so a worker parses each string once.

    Raises ImportError without math-verify."""
    require_math_verify()
    todo = sorted(set(pairs))
    out: dict[tuple[str, str], bool] = {}
    if not todo:
        return out
    timeout = OUTER_TIMEOUT_S if timeout is None else timeout
    workers = max(1, min(processes or 1, os.cpu_count() or 1, len(todo)))
    chunks = _chunks_by_strings(todo, max(1, min(32, len(todo) // (workers * 8))))
    ctx = _context()
    from multiprocessing.connection import wait

    def start():
        here, there = ctx.Pipe()
        proc = ctx.Process(target=_verdict_worker, args=(there,), daemon=True)
        proc.start()
        there.close()
        return proc, here

    pool = [start() for _ in range(workers)]
    busy: dict[int, list] = {}  # worker -> [pending pairs, deadline]
    next_chunk = 0

    def feed(w: int) -> None:
        nonlocal next_chunk
        if next_chunk < len(chunks):
            chunk = chunks[next_chunk]
            next_chunk += 1
            pool[w][1].send(chunk)
            busy[w] = [list(chunk), time.monotonic() + timeout]

    try:
        for w in range(workers):
            feed(w)
        while busy:
            now = time.monotonic()
            wait_for = max(0.0, min(d for _, d in busy.values()) - now)
            ready = wait([pool[w][1] for w in busy], timeout=wait_for)
            for w in list(busy):
                conn = pool[w][1]
                pending, _ = busy[w]
                if conn in ready:
                    try:
                        verdict = bool(conn.recv())
                        # an answer that comes after the deadline timed out all the same
                        out[pending.pop(0)] = verdict and time.monotonic() <= busy[w][1]
                    except EOFError:  # the worker died: its pair is not equivalent
                        out[pending.pop(0)] = False
                        pool[w][0].join(1)
                        pool[w] = start()
                        if pending:
                            pool[w][1].send(pending)
                    busy[w][1] = time.monotonic() + timeout
                elif time.monotonic() >= busy[w][1]:  # hung past the outer timeout
                    out[pending.pop(0)] = False
                    pool[w][0].kill()
                    pool[w][0].join(1)
                    pool[w] = start()
                    if pending:
                        pool[w][1].send(pending)
                        busy[w][1] = time.monotonic() + timeout
                if not pending:
                    del busy[w]
                    feed(w)
    finally:
        for _, conn in pool:
            try:
                conn.send(None)
            except (OSError, ValueError):
                pass
            conn.close()
        for proc, _ in pool:
            proc.join(1)
            if proc.is_alive():
                proc.kill()
                proc.join(1)
    return out
