"""The corpus checks of a scoring run, before any kernel sees a chunk.

The options of a run (:func:`check_reading_options`, :func:`check_skip_options`,
:func:`check_mode` over :data:`CHECKS`); each chunk conformed and validated with every bad
row collected (:func:`check_chunk`, :func:`structural_problems`) and the values of the
checked columns (:func:`values_checked` under ``on_error="raise"``,
:func:`with_value_problems` under ``"skip"``); the trajectory ids that repeat an earlier
chunk's (:class:`SeenIds`); and the record of a row left out (:class:`Skipped`). The
vectorized per-input checks of ``on_error="skip"`` are :mod:`fastuq.engine.skip`'s; the
pipeline that runs these checks is :mod:`fastuq.engine.pipeline`.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from fastuq.errors import RecordError
from fastuq.io.arrow_lists import combined

__all__ = ["CHECKS", "SeenIds", "Skipped", "check_chunk", "check_mode",
           "check_reading_options", "check_skip_options", "structural_problems",
           "values_checked", "with_value_problems"]

#: What ``check=`` accepts (see :func:`fastuq.engine.pipeline.iter_scores`).
CHECKS = ("corpus", "used")


class SeenIds:
    """Trajectory ids seen so far, to find an id that repeats an earlier chunk's, exactly.

    Memory: 64-bit hashes with, beside each, its corpus row (uint32 while the corpus has
    fewer than 2**32 rows), and a filter of 16 to 32 bits per id: 14 to 16 bytes per
    trajectory, up to 28 while two runs merge (about 1.6 GB for 1e8 trajectories). The
    hashes are kept as sorted runs of doubling sizes (a log-structured merge: a new chunk's
    run is merged with the last run while that is no larger), so each hash is copied
    O(log(N / chunk)) times over the whole corpus: time O(N log N), not the
    O(N**2 / chunk) of merging every chunk into one array.
    A lookup first tests one bit of the filter (a one-hash Bloom filter indexed by the
    hash's top bits, which says "not seen" for 94% to 97% of new ids); only the rest are
    searched for in the runs.
    The ids themselves are spilled to a temporary file (their UTF-8 bytes and end offsets,
    written once per chunk and read only on a hash match), so a match is verified against
    the stored id: two different ids that share a hash (probability about N**2 / 2**65)
    are not mistaken for a duplicate, and a duplicate names the row of its first occurrence.

    Sorted corpora (the usual layout: ids written in increasing order) take a shortcut:
    while every id so far is non-null and greater than the one before it, no id can repeat
    an earlier one, so a chunk is checked by comparing its ids with their neighbours and
    its first id with the last one seen, and no hash is computed or held (the ids are only
    spilled). The first chunk that breaks the order builds the index from the spilled ids,
    as it would have been, and the check goes on as above.
    """

    def __init__(self) -> None:
        self._runs: list[tuple[np.ndarray, np.ndarray]] = []  # (sorted hashes, their rows)
        self._filter = np.zeros(1 << 13, np.uint8)  # 2**16 bits; grows with the ids held
        self._held = 0
        self._pending: tuple[np.ndarray, np.ndarray] | None = None
        self._chunks: list[tuple[int, str, int]] = []  # (first corpus row, source, its row)
        self._data = self._offsets = None
        self._nbytes = 0
        self._count = 0
        self._ascending = True  # every id so far non-null and increasing: nothing indexed
        self._last: str | None = None  # the last id added while ascending
        self._pending_ascending: pa.Array | None = None  # ids repeats() found ascending

    def _spill(self) -> None:
        import tempfile

        self._data = tempfile.TemporaryFile(prefix="fastuq-ids-")
        self._offsets = tempfile.TemporaryFile(prefix="fastuq-ids-")

    def close(self) -> None:
        for f in (self._data, self._offsets):
            if f is not None:
                f.close()
        self._data = self._offsets = None

    def where(self, row: int) -> str:
        """``SOURCE row R`` of corpus row ``row``."""
        import bisect

        k = bisect.bisect_right([c[0] for c in self._chunks], row) - 1
        start, source, row0 = self._chunks[k]
        return f"{source} row {row0 + row - start}"

    def _stored_id(self, row: int) -> str:
        self._offsets.seek(8 * row)
        end = int(np.frombuffer(self._offsets.read(8), np.int64)[0])
        start = 0
        if row:
            self._offsets.seek(8 * (row - 1))
            start = int(np.frombuffer(self._offsets.read(8), np.int64)[0])
        self._data.seek(start)
        return self._data.read(end - start).decode("utf-8")

    def _continues(self, ids: pa.Array) -> bool:
        """Whether ``ids`` keeps the corpus ascending: non-null, each greater than the one
        before it, the first greater than the last id seen (UTF-8 byte order, which is code
        point order, as Python compares strings)."""
        n = len(ids)
        if ids.null_count:
            return False
        if n > 1 and not pc.all(pc.greater(ids.slice(1), ids.slice(0, n - 1))).as_py():
            return False
        return self._last is None or not n or str(ids[0].as_py()) > self._last

    def repeats(self, ids: pa.Array) -> tuple[np.ndarray, np.ndarray]:
        """``(repeat [n] bool, first [n] int64)``: which ids (non-null) were seen in an
        earlier chunk, and the corpus row of each one's first occurrence (-1 elsewhere).
        The hashes are kept for :meth:`add`."""
        n = len(ids)
        self._pending_ascending = None
        if self._ascending:
            if self._continues(ids):
                self._pending = None
                self._pending_ascending = ids
                return np.zeros(n, bool), np.full(n, -1, np.int64)
            self._build()
        h = self._hash(ids)
        order = np.argsort(h)
        self._pending = (h, order)
        repeat = np.zeros(n, bool)
        first = np.full(n, -1, np.int64)
        if not self._runs or not n:
            return repeat, first
        hs = h[order]
        maybe = self._may_hold(hs)
        if not maybe.all():
            order, hs = order[maybe], hs[maybe]
        candidates: dict[int, list[int]] = {}  # chunk position -> corpus rows with its hash
        for hashes, rows in self._runs:
            lo = np.searchsorted(hashes, hs, side="left")
            hit = hashes[np.minimum(lo, len(hashes) - 1)] == hs
            if not hit.any():
                continue
            hi = np.searchsorted(hashes, hs[hit], side="right")
            for k, a, b in zip(order[hit].tolist(), lo[hit].tolist(), hi.tolist(),
                               strict=True):
                candidates.setdefault(k, []).extend(int(r) for r in rows[a:b])
        if not candidates:
            return repeat, first
        valid = ids.is_valid().to_numpy(zero_copy_only=False)
        for k, rows in candidates.items():
            if not valid[k]:
                continue
            text = ids[k].as_py()
            for row in sorted(rows):  # verify: hashes may collide
                if self._stored_id(row) == text:
                    repeat[k], first[k] = True, row
                    break
        return repeat, first

    def _slots(self, hashes: np.ndarray) -> np.ndarray:
        """Filter bit of each hash: its top log2(filter bits) bits."""
        return hashes >> np.uint64(64 - int(np.log2(len(self._filter) * 8)))

    def _may_hold(self, hashes: np.ndarray) -> np.ndarray:
        """False where a hash is certainly not held (its filter bit is clear)."""
        slot = self._slots(hashes)
        return ((self._filter[slot >> np.uint64(3)] >> (slot & np.uint64(7)).astype(np.uint8))
                & 1).astype(bool)

    def _mark(self, hashes: np.ndarray) -> None:
        """Set the filter bits of ``hashes`` (sorted, so equal bytes are adjacent)."""
        if not len(hashes):
            return
        slot = self._slots(hashes)
        byte = slot >> np.uint64(3)
        bit = np.left_shift(np.uint8(1), (slot & np.uint64(7)).astype(np.uint8))
        starts = np.flatnonzero(np.r_[True, byte[1:] != byte[:-1]])
        self._filter[byte[starts]] |= np.bitwise_or.reduceat(bit, starts)

    def _hold(self, run: tuple[np.ndarray, np.ndarray]) -> None:
        """Add a sorted run to the filter, doubling the filter (rebuilt from every run)
        while it has fewer than 16 bits per id held."""
        self._held += len(run[0])
        if len(self._filter) * 8 < 16 * self._held:
            size = len(self._filter)
            while size * 8 < 16 * self._held:
                size *= 2
            self._filter = np.zeros(size, np.uint8)
            for hashes, _ in self._runs:
                self._mark(hashes)
        self._mark(run[0])

    @staticmethod
    def _merge(a: tuple[np.ndarray, np.ndarray],
               b: tuple[np.ndarray, np.ndarray]) -> tuple[np.ndarray, np.ndarray]:
        """Two sorted runs merged into one (linear: no sort of the whole)."""
        (ha, ra), (hb, rb) = a, b
        pos = np.searchsorted(ha, hb, side="right") + np.arange(len(hb))
        total = len(ha) + len(hb)
        take_a = np.ones(total, bool)
        take_a[pos] = False
        hashes = np.empty(total, np.uint64)
        hashes[take_a] = ha
        hashes[pos] = hb
        rows = np.empty(total, np.result_type(ra.dtype, rb.dtype))
        rows[take_a] = ra
        rows[pos] = rb
        return hashes, rows

    def add(self, ids: pa.Array, row0: int, source: str, source_row0: int) -> None:
        """Record ``ids`` (corpus rows ``row0, row0 + 1, ...``; null ids are not kept);
        reuses the hashes of the last :meth:`repeats` call on the same ids."""
        n = len(ids)
        ascending = self._pending_ascending is ids
        self._pending_ascending = None
        if self._ascending and not ascending and n:
            if self._continues(ids):
                ascending = True
            else:
                self._build()
        if ascending:
            self._pending = None
            if n:
                self._chunks.append((row0, source, source_row0))
                self._store(ids, n)
                self._last = str(ids[n - 1].as_py())
            return
        if self._pending is not None and len(self._pending[0]) == n:
            h, order = self._pending
        else:
            h = self._hash(ids)
            order = np.argsort(h)
        self._pending = None
        if not n:
            return
        self._chunks.append((row0, source, source_row0))
        self._store(ids, n)
        self._index(ids, h, order, row0)

    def _build(self) -> None:
        """Leave the ascending shortcut: index every id spilled so far, chunk by chunk, as
        :meth:`add` would have."""
        self._ascending = False
        self._last = None
        if not self._count:
            return
        self._data.flush()
        self._offsets.flush()
        self._offsets.seek(0)
        ends = np.frombuffer(self._offsets.read(8 * self._count), np.int64)
        starts = [c[0] for c in self._chunks] + [self._count]
        for a, b in zip(starts[:-1], starts[1:], strict=True):
            lo = int(ends[a - 1]) if a else 0
            self._data.seek(lo)
            data = self._data.read(int(ends[b - 1]) - lo)
            offs = np.concatenate([[0], ends[a:b] - lo]).astype(np.int64)
            ids = pa.LargeStringArray.from_buffers(b - a, pa.py_buffer(offs.tobytes()),
                                                   pa.py_buffer(data))
            h = self._hash(ids)
            self._index(ids, h, np.argsort(h), a)

    def _index(self, ids: pa.Array, h: np.ndarray, order: np.ndarray, row0: int) -> None:
        """Hold the hashes ``h`` of ``ids`` (``order`` sorts them), corpus rows from
        ``row0``."""
        n = len(ids)
        valid = ids.is_valid().to_numpy(zero_copy_only=False)
        order = order[valid[order]]
        row_dtype = np.uint32 if row0 + n <= np.iinfo(np.uint32).max else np.int64
        run = (h[order], (order + row0).astype(row_dtype))
        self._hold(run)
        while self._runs and len(self._runs[-1][0]) <= len(run[0]):
            run = self._merge(self._runs.pop(), run)
        self._runs.append(run)

    def _store(self, ids: pa.Array, n: int) -> None:
        """Spill ``ids`` (UTF-8 bytes + end offsets, one per corpus row, nulls as empty)."""
        if self._data is None:
            self._spill()
        text = ids.cast(pa.large_string())
        offs = np.frombuffer(text.buffers()[1], np.int64)[text.offset: text.offset + n + 1]
        data = text.buffers()[2]
        if data is not None and offs[-1] > offs[0]:
            self._data.seek(0, 2)
            self._data.write(memoryview(data)[int(offs[0]):int(offs[-1])])
        self._offsets.seek(0, 2)
        self._offsets.write((offs[1:] - offs[0] + self._nbytes).astype(np.int64).tobytes())
        self._nbytes += int(offs[-1] - offs[0])
        self._count += n

    @staticmethod
    def _hash(ids: pa.Array) -> np.ndarray:
        import polars as pl

        return pl.Series(ids).hash(seed=0).to_numpy()


@dataclass
class Skipped:
    """A record left out under ``on_error="skip"``: where it was and why."""

    source: str
    row: int
    trajectory_id: str | None
    reason: str


def structural_problems(chunk, seen: SeenIds):
    """Conform and check one chunk, collecting every bad row (run on the prefetch thread,
    so that it overlaps scoring the previous chunk): ``(chunk, table, problems)``."""
    rows = np.arange(chunk.source_row0, chunk.source_row0 + chunk.table.num_rows)

    def earlier_chunks(problems, ids: pa.Array) -> None:
        repeat, first = seen.repeats(ids)  # before the in-chunk check: name the first one
        if repeat.any():
            problems.add(repeat, "trajectory_id",
                         lambda i: f"duplicate id (first at {seen.where(int(first[i]))})")

    table, problems, ids = check_chunk(chunk.table, chunk.source, rows, earlier_chunks)
    seen.add(ids, chunk.row0, chunk.source, chunk.source_row0)
    return chunk, table, problems


def check_chunk(table: pa.Table, source: str, rows: np.ndarray,
                repeats: Callable[[object, pa.Array], None], problems=None):
    """Conform and check one chunk (``rows``: the source row of each of its rows), collecting
    every bad row: ``(table, problems, ids)``. ``repeats(problems, ids)`` adds the rows whose
    id repeats one of an earlier chunk, after conforming and before the in-chunk checks (so
    that a duplicate names the first occurrence). With ``problems`` (a collecting
    :class:`~fastuq.io.schema.Problems`), ``table`` is already conformed and ``problems``
    holds what conforming found. The per-chunk step of ``on_error="skip"``, shared with
    :mod:`fastuq.ray`, which conforms on its readers and finds the repeats by a distributed
    pass instead."""
    from fastuq.io.schema import Problems, conform, validate

    if "trajectory_id" not in table.column_names:
        validate(table, source=source, row0=int(rows[0]) if len(rows) else 0)  # raises
    if problems is None:
        problems = Problems(table, source, rows=rows, first_only=False)
        table = conform(table, source=source, problems=problems)
        problems.table = table
    ids = combined(table.column("trajectory_id"))
    repeats(problems, ids)
    validate(table, source=source, problems=problems)
    return table, problems, ids


def check_skip_options(on_error: str, skipped_path, max_skip_fraction: float | None) -> None:
    """The checks of ``on_error``, ``skipped_path`` and ``max_skip_fraction`` that
    :func:`~fastuq.engine.files.score_file` and :func:`fastuq.ray.score_to_folder` share
    (ValueError naming the option)."""
    if on_error not in ("raise", "skip"):
        raise ValueError(f"on_error must be 'raise' or 'skip', got {on_error!r}")
    if skipped_path is not None and on_error != "skip":
        raise ValueError("skipped_path (--skipped) is only written with on_error='skip' "
                         "(--on-error skip)")
    if max_skip_fraction is not None:
        if on_error != "skip":
            raise ValueError("max_skip_fraction (--max-skip-fraction) only applies with "
                             "on_error='skip' (--on-error skip)")
        if not 0 <= max_skip_fraction <= 1:
            raise ValueError(f"max_skip_fraction must be in [0, 1], got {max_skip_fraction}")


def check_mode(check: str) -> None:
    """ValueError unless ``check`` is one of :data:`CHECKS`."""
    if check not in CHECKS:
        raise ValueError(f"check must be one of {', '.join(map(repr, CHECKS))}, got {check!r}")


def check_reading_options(on_error: str, skipped: list | None,
                          observation_noise: float | None, check: str = "corpus") -> None:
    """ValueError for an ``on_error`` other than raise/skip, skip without a list to collect
    the skipped records, an observation noise that is not a finite number >= 0, or an
    unknown ``check``."""
    check_mode(check)
    if on_error not in ("raise", "skip"):
        raise ValueError(f"on_error must be 'raise' or 'skip', got {on_error!r}")
    if on_error == "skip" and skipped is None:
        raise ValueError("on_error='skip' needs a list to collect the skipped records")
    if observation_noise is not None and not (
        np.isfinite(observation_noise) and observation_noise >= 0
    ):
        raise ValueError(f"observation noise must be finite and >= 0, got {observation_noise}")


def values_checked(chunk):
    """``chunk``, after checking the values of every column of
    :data:`~fastuq.engine.skip.CORPUS_CHECKED_VALUES` it has (``check="corpus"``; run on
    the reader thread, before the columns read only for the check are dropped). Raises
    :class:`RecordError` naming the first bad record (its trajectory, source row, round,
    agent and field)."""
    from fastuq.engine.skip import column_problems
    from fastuq.io.schema import Problems

    table = chunk.table
    rows = np.arange(chunk.source_row0, chunk.source_row0 + table.num_rows)
    problems = Problems(table, chunk.source, rows=rows, first_only=False)
    column_problems(table, problems)
    if problems.bad:
        first = min(problems.bad)
        raise RecordError(problems.bad[first], row=first)
    return chunk


def with_value_problems(item, values: bool):
    """:func:`structural_problems`'s ``(chunk, table, problems)`` with the value problems of
    ``check="corpus"`` added to ``problems`` (``values``), for ``on_error="skip"``."""
    if values:
        from fastuq.engine.skip import column_problems

        chunk, table, problems = item
        if table.num_rows:
            column_problems(table, problems)
    return item
