"""The main job: score a corpus chunk by chunk, one output row per input trajectory."""

from __future__ import annotations

import os
import sys
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from fastuq.engine.batch import Batch
from fastuq.engine.inputs import INPUTS, columns_for
from fastuq.engine.registry import ESTIMATORS, check_params, get_estimator
from fastuq.engine.runner import run_estimator
from fastuq.errors import RecordError, TooManySkipped
from fastuq.io.arrow_lists import combined
from fastuq.io.writers import (
    AtomicParquetWriter,
    BackgroundWriter,
    atomic_write_text,
    check_outputs,
)

__all__ = ["CHECKED_NODE_COLUMNS", "ScoreReport", "SeenIds", "available_methods",
           "corpus_columns", "iter_scores", "make_batch", "method_list", "resolve_once",
           "score", "score_file", "score_table", "skip_bad_rows", "structural_problems"]


@dataclass
class ScoreReport:
    """What a scoring run did: rows in and out, seconds, protocols, and (on request) the
    scores and labels for summaries."""

    input: str
    output: str
    n_rows: int = 0
    seconds: float = 0.0
    methods: tuple[str, ...] = ("sauce",)
    protocols: dict[str, int] = field(default_factory=dict)
    scores: dict[str, np.ndarray] = field(default_factory=dict, repr=False)
    correct: np.ndarray | None = field(default=None, repr=False)
    protocol: np.ndarray | None = field(default=None, repr=False)
    skipped: list = field(default_factory=list, repr=False)
    skipped_path: str | None = None
    left_out: dict[str, str] = field(default_factory=dict)


def _missing(est, batch: Batch, params: Mapping[str, object] | None = None) -> list[str]:
    """The packed inputs of ``est`` that ``batch`` cannot build (optional ones never miss)."""
    packing = est.packing(params or {})
    return [i for i in est.inputs if not INPUTS[i].available(batch, packing)]


def available_methods(batch: Batch) -> tuple[str, ...]:
    """Registered estimators whose inputs ``batch`` has, in registry order."""
    return tuple(name for name, est in ESTIMATORS.items() if not _missing(est, batch))


#: Columns read whenever the corpus has them: labels and groups, and (so that validation does
#: not depend on the methods) the per-round signals and the team size, which every record's
#: round structure is checked against.
_ALWAYS = ("question_id", "protocol", "correct", "agreement", "token_entropy", "n_agents")
#: Node columns read whenever the corpus has them (``check="corpus"``, the default), so that a
#: column whose round or slot count disagrees with the others is an error under every method,
#: not only under the methods that read it. The per-token columns (``token_logprobs``,
#: ``topk_logprobs``) and ``texts`` are read only when a method uses them: they are often
#: 10-100x larger than everything else together, and reading them for a check alone would
#: break the memory bound of a chunk.
CHECKED_NODE_COLUMNS = ("answers", "seq_logprob", "n_tokens", "belief", "answer_logprob",
                        "predecessors", "active")
CHECKS = ("corpus", "used")


def method_list(methods: str | Sequence[str]) -> list[str]:
    """Estimator names, checked: none empty, none twice, each registered (or ``["all"]``)."""
    items = ([m.strip() for m in methods.split(",")] if isinstance(methods, str)
             else [str(m).strip() for m in methods])
    if not items or any(not m for m in items):
        raise ValueError(f"no estimator named in methods {methods!r} (an empty name); give "
                         f"names, comma-separated, or 'all'")
    twice = sorted({m for m in items if items.count(m) > 1})
    if twice:
        raise ValueError(f"estimator {twice[0]!r} is named twice in methods {methods!r}")
    if "all" in items and len(items) > 1:
        raise ValueError(f"'all' cannot be combined with other names in methods {methods!r}")
    for m in items:
        if m != "all":
            get_estimator(m)
    return items


def _available_columns(source, candidates: Sequence[str] | None = None) -> set[str] | None:
    """Column names the source has (``None``: unknown), to choose between a column and the
    columns it can be derived from. Files are probed by reading their first record (of the
    ``candidates`` only, when given: the answer is then about those); frames and readers
    are asked for their schema, so a one-shot reader is never consumed."""
    if isinstance(source, (str, os.PathLike, list, tuple)):
        from fastuq.io.readers import iter_chunks

        kw = {} if candidates is None else {"columns": [], "optional_columns": candidates}
        try:
            first = next(iter_chunks(source, chunk_rows=1, validate=False, **kw), None)
        except (ValueError, OSError):
            return None
        if first is None:
            return None
        return {c for c in first.table.column_names if first.table.column(c).null_count == 0}
    if hasattr(source, "collect_schema"):
        names = set(source.collect_schema().names())  # polars DataFrame / LazyFrame
    elif isinstance(getattr(source, "schema", None), pa.Schema):
        names = set(source.schema.names)  # pyarrow Table / RecordBatch / RecordBatchReader
    elif hasattr(source, "column_names"):
        names = set(source.column_names)  # Hugging Face Dataset
    else:
        return None
    if "signals" in names:  # the SAUCE release: the readers lift agreement/token_entropy
        names |= {"agreement", "token_entropy"}
    return names


def corpus_columns(
    methods: str | Sequence[str], params: Mapping[str, object], source=None,
    check: str = "corpus",
) -> list[str] | None:
    """Columns to read for ``methods`` with ``params`` (for ``"all"``: what any registered
    estimator reads); with ``check="corpus"`` also the node columns every record is checked
    against. Columns no method reads (the per-token ``token_logprobs``, ``texts``, ...) are
    not read, under ``"all"`` either: they can be most of a corpus's bytes."""
    methods = method_list(methods)
    if "all" in methods:
        methods = list(ESTIMATORS)
    cols = set(_ALWAYS)
    if check == "corpus":
        cols.update(CHECKED_NODE_COLUMNS)
    wanted = [(get_estimator(m), get_estimator(m).packing(params)) for m in methods]
    have: set[str] | None = set()
    derived = [INPUTS[i].columns(packing)[0] for est, packing in wanted
               for i in (*est.inputs, *est.optional_inputs)
               if INPUTS[i].fallbacks(packing) and INPUTS[i].columns(packing)]
    if source is not None and derived:
        # derive an input only where its column is absent (only those columns are probed)
        have = _available_columns(source, sorted(set(derived)))
    for est, packing in wanted:
        cols |= columns_for((*est.inputs, *est.optional_inputs), packing, have)
    return sorted(cols)


def left_out_methods(batch: Batch) -> dict[str, str]:
    """Registered estimators whose inputs ``batch`` lacks: name -> why (``needs X``)."""
    out = {}
    for name, est in ESTIMATORS.items():
        missing = _missing(est, batch)
        if missing:
            cols = dict.fromkeys(INPUTS[i].needs_text(est.packing({})) for i in missing)
            out[name] = f"needs {', '.join(cols)}"
    return out


def _resolve_methods(methods: str | Sequence[str], batch: Batch,
                     params: Mapping[str, object] | None = None) -> tuple[str, ...]:
    methods = method_list(methods)
    if methods == ["all"]:
        found = available_methods(batch)
        if not found:
            raise ValueError(f"{batch.source or 'corpus'}: no estimator has all its inputs")
        return found
    for m in methods:
        est = get_estimator(m)
        # the inputs as the given packing parameters build them (umas with
        # confidence=neg_entropy reads node entropy, not seq_logprob)
        missing = _missing(est, batch, params)
        if missing:
            missing = list(dict.fromkeys(INPUTS[i].needs_text(est.packing(params or {}))
                                         for i in missing))
            raise ValueError(
                f"{batch.source or 'corpus'}: {m} needs {', '.join(missing)}, which the corpus "
                "lacks" + ("; pass --observation-noise R to run SAUCE on agreement alone"
                           if any(x.startswith("token_entropy") for x in missing) else "")
            )
    return tuple(methods)


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


def _prefetch(iterator: Iterator, depth: int = 1, name: str = "fastuq-reader") -> Iterator:
    """Items of ``iterator``, produced by a background thread up to ``depth`` items ahead.

    Reading and decoding (Arrow, Parquet, JSON: C++ that releases the GIL) of the next chunk
    then overlaps with packing and scoring of the current one, on the other core. Memory grows
    by ``depth`` chunks. An exception in the producer is raised here, in order. When the
    consumer stops, the thread stops after its current item and closes ``iterator`` (so a
    prefetch inside it stops too). The thread runs in a copy of the caller's context
    (:func:`fastuq.engine.runtime.in_context`): it sees the caller's ``device_scope``.
    """
    import queue
    import threading

    from fastuq.engine.runtime import in_context

    items: queue.Queue = queue.Queue(maxsize=depth)
    done = object()
    stop = threading.Event()

    def offer(entry) -> bool:
        """Put ``entry`` unless the consumer has stopped; timed, so that a wake-up lost to a
        signal handler's exception in the consumer's thread (SIGTERM) cannot block it."""
        while not stop.is_set():
            try:
                items.put(entry, timeout=0.1)
                return True
            except queue.Full:
                continue
        return False

    def produce() -> None:
        try:
            for item in iterator:
                if not offer(("item", item)):
                    return
            offer(("end", done))
        except BaseException as exc:  # handed to the consumer
            offer(("error", exc))

    def run() -> None:
        try:
            produce()
        finally:
            close = getattr(iterator, "close", None)
            if close is not None:  # a generator: its own cleanup (an inner prefetch) now
                try:
                    close()
                except BaseException:  # noqa: BLE001 - the consumer has gone
                    pass

    thread = threading.Thread(target=in_context(run), name=name, daemon=True)
    thread.start()
    try:
        while True:
            kind, value = items.get()
            if kind == "item":
                yield value
            elif kind == "error":
                raise value
            else:
                return
    finally:
        stop.set()
        while thread.is_alive():  # unblock a producer waiting on a full queue
            try:
                items.get_nowait()
            except queue.Empty:
                pass
            thread.join(timeout=0.05)


@dataclass
class Skipped:
    """A record left out under ``on_error="skip"``: where it was and why."""

    source: str
    row: int
    trajectory_id: str | None
    reason: str


def score_table(
    table: pa.Table, chunk, rows: np.ndarray, resolved: tuple[str, ...] | None, *,
    methods, protocol, params, dtype, backend, observation_noise, math: bool = False,
    processes: int | None = None, info: dict | None = None, pack: str = "host",
) -> tuple[Batch, tuple[str, ...], dict[str, np.ndarray]]:
    """Score one checked chunk: its :class:`Batch`, the methods to run (resolved on the first
    chunk, then passed back in as ``resolved``) and ``{column: float64 scores}`` of every
    estimator. The seam that the Ray runner (:mod:`fastuq.ray`) shares with :func:`score`."""
    batch = make_batch(table, chunk, rows, dtype=dtype, observation_noise=observation_noise,
                       math=math, processes=processes, pack=pack)
    resolved = resolve_once(resolved, methods, batch, params, observation_noise, info,
                            protocol)
    scores = {}
    for m in resolved:
        est = get_estimator(m)
        own = {k: v for k, v in params.items() if k in est.param_names}
        out = run_estimator(est, batch, params=own, protocol=protocol, backend=backend)
        for column, values in out.items():
            scores[column] = np.asarray(values, np.float64)
    return batch, resolved, scores


def make_batch(table, chunk, rows, *, dtype, observation_noise, math, processes,
               pack: str = "host") -> Batch:
    """The :class:`Batch` of rows ``rows`` of a chunk read from ``chunk.source``."""
    return Batch(table, source=chunk.source, row0=chunk.source_row0, rows=rows,
                 dtype=np.dtype(dtype), observation_noise=observation_noise, math=math,
                 processes=processes, pack=pack)


def no_preset_methods(names: Sequence[str], batch: Batch, params: Mapping[str, object],
                      protocol: str | None = None) -> dict[str, str]:
    """Estimators among ``names`` that cannot run on ``batch`` for want of parameters: a
    protocol of the batch (or ``protocol``, the override) has no preset and ``params`` do
    not give every parameter. ``{name: why}`` (the protocols, and every parameter lacking)."""
    out = {}
    for name in names:
        est = get_estimator(name)
        if not est.kernel_params or not est.presets:
            continue
        if protocol is not None:
            protos: list[str | None] = [protocol]
        elif batch.has("protocol"):
            col = batch.column("protocol").cast(pa.string())
            protos = pc.unique(col).to_pylist()
        else:
            protos = [None]
        lacking: dict[str | None, list[str]] = {}
        for proto in protos:
            own = {p.name: (v.get(str(proto)) if isinstance(v := params.get(p.name), Mapping)
                            else v) for p in est.kernel_params}
            missing = est.lacking(proto, own)
            if missing:
                lacking[proto] = missing
        if lacking:
            missing = list(dict.fromkeys(m for ms in lacking.values() for m in ms))
            named = ", ".join("no protocol" if p is None else repr(p) for p in lacking)
            known = sorted(est.presets)
            out[name] = (f"protocol {named} has no preset: needs {', '.join(missing)}, or "
                         f"--protocol {'|'.join(known)}")
    return out


def resolve_once(resolved, methods, batch: Batch, params, observation_noise,
                 info: dict | None, protocol: str | None = None) -> tuple[str, ...]:
    """The methods to run (resolved on the first chunk), with the checks of options that
    would otherwise be ignored: parameters no method takes, and an observation noise on a
    corpus that has token entropy (or for methods that do not read it). ``methods="all"``
    leaves out, with its reason in ``info["left_out"]``, every estimator whose inputs the
    corpus lacks and every one that has no parameter values for a protocol of the first
    chunk (no preset, nothing given)."""
    if resolved is None:
        resolved = _resolve_methods(methods, batch, params)
        if method_list(methods) == ["all"]:
            check_params(params, resolved)
            no_preset = no_preset_methods(resolved, batch, params, protocol)
            resolved = tuple(m for m in resolved if m not in no_preset)
            if not resolved:
                raise ValueError(f"{batch.source or 'corpus'}: no estimator can run: " + "; ".join(
                    f"{k} ({v})" for k, v in no_preset.items()))
            if info is not None:
                info["left_out"] = {**left_out_methods(batch), **no_preset}
        if observation_noise is not None:
            readers = [m for m in resolved
                       if {"token_entropy", "round_entropy"}
                       & {*get_estimator(m).inputs, *get_estimator(m).optional_inputs}]
            if not readers:
                raise ValueError(
                    f"observation noise would be ignored: it stands in for token entropy, "
                    f"which none of the methods ({', '.join(resolved)}) reads")
    if observation_noise is not None and (batch._present("token_entropy")
                                          or batch._present("topk_logprobs")):
        have = "token_entropy" if batch._present("token_entropy") else "topk_logprobs"
        raise ValueError(
            f"{batch.source or 'corpus'}: the corpus has {have}, so the observation noise "
            f"(--observation-noise) would be ignored: drop it")
    return resolved


def _drop(table: pa.Table, rows: np.ndarray, bad: np.ndarray) -> tuple[pa.Table, np.ndarray]:
    if not bad.any():
        return table, rows
    return table.filter(pa.array(~bad)), rows[~bad]


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


def skip_bad_rows(
    chunk, table: pa.Table, problems, resolved, skipped: list, *,
    methods, protocol, params, dtype, observation_noise, math, processes, info,
    pack: str = "host",
) -> tuple[pa.Table, np.ndarray, tuple[str, ...]]:
    """Every bad row of the chunk at once (vectorized checks, on top of the structural ones
    in ``problems``), appended to ``skipped``; returns the chunk without them, the source
    rows of what is left, and the methods."""
    from fastuq.engine.skip import input_problems

    source = chunk.source
    rows = problems.rows
    if table.num_rows:
        batch = make_batch(table, chunk, rows, dtype=dtype,
                           observation_noise=observation_noise, math=math,
                           processes=processes)
        resolved = resolve_once(resolved, methods, batch, params, observation_noise, info,
                                  protocol)
        inputs = set()
        for m in resolved:
            est = get_estimator(m)
            inputs |= set(est.inputs)
            if "node_confidence" in est.inputs:  # checked as the column it is read from
                kind = est.packing(params).get("confidence")
                inputs |= {"node_entropy"} if kind == "neg_entropy" else {"seq_logprob"}
        preset = next((get_estimator(m) for m in resolved if get_estimator(m).presets), None)
        input_problems(
            table, problems, inputs=inputs, protocol=protocol,
            params={} if preset is None else {p.name: params.get(p.name)
                                              for p in preset.kernel_params},
            presets=None if preset is None else preset.presets,
            confidence=params.get("confidence"), estimator=preset,
        )
    if problems.bad:
        idx = sorted(problems.bad)
        tids = table.column("trajectory_id").combine_chunks().take(
            pa.array(idx, pa.int64())).to_pylist()
        for i, tid in zip(idx, tids, strict=True):
            skipped.append(Skipped(source, int(rows[i]), None if tid is None else str(tid),
                                   problems.bad[i]))
        table, rows = _drop(table, rows, problems.mask(table.num_rows))
    return table, rows, resolved


def score_checked_chunk(
    chunk, table: pa.Table, problems, resolved: tuple[str, ...] | None, skipped: list, *,
    backend: str, **kw,
) -> tuple[tuple[Batch, dict[str, np.ndarray]] | None, tuple[str, ...] | None]:
    """Score one checked chunk under ``on_error="skip"``: its bad rows (``problems``, and
    those the vectorized input checks find) are appended to ``skipped``, then the rest is
    scored; a record that a kernel still refuses is skipped too and the chunk scored again
    without it. Returns ``((batch, scores) or None when every row was skipped, methods)``.
    ``kw``: the scoring options of :func:`score_table`."""
    table, rows, resolved = skip_bad_rows(chunk, table, problems, resolved, skipped, **kw)
    while table.num_rows:
        try:
            batch, resolved, scores = score_table(table, chunk, rows, resolved,
                                                  backend=backend, **kw)
        except RecordError as exc:  # a problem the vectorized checks did not foresee
            if exc.row is None:
                raise
            tid = table.column("trajectory_id")[exc.row].as_py()
            skipped.append(Skipped(chunk.source, int(rows[exc.row]),
                                   None if tid is None else str(tid), str(exc)))
            keep = np.ones(table.num_rows, bool)
            keep[exc.row] = False
            table, rows = _drop(table, rows, ~keep)
            continue
        return (batch, scores), resolved
    return None, resolved


def check_skip_options(on_error: str, skipped_path, max_skip_fraction: float | None) -> None:
    """The checks of ``on_error``, ``skipped_path`` and ``max_skip_fraction`` that
    :func:`score_file` and :func:`fastuq.ray.score_to_folder` share (ValueError naming the
    option)."""
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


def iter_scores(
    source,
    *,
    methods: str | Sequence[str] = ("sauce",),
    protocol: str | None = None,
    params: Mapping[str, object] | None = None,
    dtype: str | np.dtype | None = None,
    backend: str = "jax",
    chunk_rows: int = 1 << 18,
    observation_noise: float | None = None,
    on_error: str = "raise",
    skipped: list[Skipped] | None = None,
    math: bool = False,
    processes: int | None = None,
    info: dict | None = None,
    check: str = "corpus",
    extra_columns: Sequence[str] = (),
    batch_columns: Sequence[str] | None = None,
    pack: str = "auto",
) -> Iterator[tuple[Batch, dict[str, np.ndarray]]]:
    """Score ``source`` chunk by chunk: yields ``(batch, {method: scores [n]})`` in order.

    Args:
      source: anything :func:`fastuq.io.readers.iter_chunks` reads (a file, a folder, a list
        of files, a pyarrow Table, a Polars frame, a Hugging Face dataset).
      methods: estimator names, or ``"all"``: every estimator whose inputs the corpus has.
      params: estimator parameters by name (``lam``, ``q``, ``confidence``, ...); each
        estimator takes the ones it declares. A name no estimator takes is a TypeError; a
        parameter none of the methods takes is a ValueError (both name the estimators that
        do take it).
      on_error: ``"raise"`` (default): the first bad record stops the run with a ValueError
        naming the source, row, trajectory and field. ``"skip"``: bad records are left out
        and appended to ``skipped`` (a caller-owned list) with their reason; every other
        record is scored. Each chunk is checked once, vectorized, and every bad row of it
        dropped at once, so skipping costs time linear in the input. Lines that are not
        valid JSON still stop the run.
      math, processes: when agreement is built from parsed answers, also count answers that
        math-verify proves equivalent as one vote (checked once per distinct pair that meets
        in a round, over ``processes`` workers).
      info: a caller-owned dict; with ``methods="all"``, ``info["left_out"]`` is set to the
        estimators left out and why (``{name: "needs seq_logprob"}``).
      check: ``"corpus"`` (default): every record is checked against every column the
        corpus has except the per-token columns (``token_logprobs``, ``topk_logprobs``) and
        ``texts``, which are read (and checked) only when a method uses them; so a node
        column whose round or slot count disagrees with the others is an error whichever
        methods run. ``"used"``: only the columns the methods read (faster on corpora with
        node columns that the methods do not use; measured in bench/README.md).
      extra_columns: further columns to read into each batch when the corpus has them (for
        callers that need more than the methods read, such as ``reference`` for replay).
      batch_columns: the columns each yielded batch keeps (besides ``trajectory_id``; its
        packed inputs stay cached); default all that were read. Fewer bound the memory of
        the chunks waiting between the pipeline's stages (a top-k column is hundreds of MB
        per chunk). With ``on_error="skip"`` every column is kept.
      dtype: the kernels' float dtype; ``None`` or ``"auto"`` (default): float32 when the
        kernels run on a GPU, float64 otherwise; a dtype given always wins.
      pack: where the per-round inputs are packed and checked: ``"auto"`` (default: on the
        device when the kernels run on a GPU with the JAX backend, else on the host),
        ``"host"`` or ``"device"`` (see :class:`~fastuq.engine.batch.Batch`). Scores are
        bit-identical either way.
    """
    from fastuq.engine.device_pack import default_dtype, resolve_pack
    from fastuq.io.readers import iter_chunks

    check_reading_options(on_error, skipped, observation_noise, check)
    dtype = default_dtype(dtype)
    pack = "device" if resolve_pack(pack, backend) else "host"
    names = method_list(methods)
    params = {k: v for k, v in (params or {}).items() if v is not None}
    check_params(params, None if names == ["all"] else names)
    columns = corpus_columns(methods, params, source, check)
    if columns is not None and extra_columns:
        columns = sorted(set(columns) | set(extra_columns))
    skip = on_error == "skip"
    if columns is None:
        reader = iter_chunks(source, chunk_rows=chunk_rows, validate=not skip,
                             conform=not skip)
    else:
        reader = iter_chunks(source, columns=[], optional_columns=columns,
                             chunk_rows=chunk_rows, validate=not skip, conform=not skip)
    kept = None  # the columns scoring needs; the others were read to be checked only
    if columns is not None and check == "corpus":
        kept = corpus_columns(methods, params, source, "used")
        kept = set(kept) | set(extra_columns) | {"trajectory_id"}
        if kept >= set(columns):
            kept = None
    seen = SeenIds()
    kw = dict(methods=methods, protocol=protocol, params=params, dtype=dtype,
              observation_noise=observation_noise, math=math, processes=processes, info=info,
              pack=pack)
    values = check == "corpus"  # every value of the checked columns, whichever methods run
    if skip:
        stream = _prefetch(_with_value_problems(structural_problems(chunk, seen), values)
                           for chunk in reader)
    else:
        if values:
            reader = (_values_checked(chunk) for chunk in reader)
        if kept is not None:
            reader = (_keep_columns(chunk, kept) for chunk in reader)
        stream = _prefetch(_prepared(_prefetch(reader), seen, backend=backend,
                                     batch_columns=batch_columns, **kw),
                           name="fastuq-prepare")
    resolved: tuple[str, ...] | None = None
    try:
        for item in stream:
            if not skip:
                batch, plans = item
                yield batch, _run_plans(batch, plans, backend)
                continue
            chunk, table, problems = item
            done, resolved = score_checked_chunk(chunk, table, problems, resolved, skipped,
                                                 backend=backend, **kw)
            if done is not None:
                yield done
    finally:
        stream.close()  # stops the pipeline's threads before the id index goes
        seen.close()


def _values_checked(chunk):
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


def _with_value_problems(item, values: bool):
    """:func:`structural_problems`'s ``(chunk, table, problems)`` with the value problems of
    ``check="corpus"`` added to ``problems`` (``values``), for ``on_error="skip"``."""
    if values:
        from fastuq.engine.skip import column_problems

        chunk, table, problems = item
        if table.num_rows:
            column_problems(table, problems)
    return item


def _keep_columns(chunk, kept: set[str]):
    """``chunk`` without the columns that were read only to be checked (run on the reader
    thread, after the checks, so that they do not wait in the queues)."""
    table = chunk.table
    if all(c in kept for c in table.column_names):
        return chunk
    return chunk._replace(table=table.select([c for c in table.column_names if c in kept]))


def _prepared(chunks: Iterator, seen: SeenIds, *, methods, protocol, params, dtype,
              backend, observation_noise, math, processes, info,
              batch_columns: Sequence[str] | None = None, pack: str = "host") -> Iterator:
    """``(batch, plans)`` per chunk, in order: the id check against earlier chunks, the
    batch, the methods (resolved on the first chunk) and, for each, its packed and checked
    inputs and parameters (:func:`~fastuq.engine.runner.prepare_estimator`). Everything a
    chunk needs before its kernels, so that it runs on a thread of its own while the
    kernels score the chunk before (whole-array NumPy and Arrow work, which releases the
    GIL). The first problem raises, as the kernels' order would: ids, then each method's
    inputs in method order."""
    from fastuq.engine.runner import prepare_estimator

    resolved: tuple[str, ...] | None = None
    for chunk in chunks:
        table = chunk.table
        rows = np.arange(chunk.source_row0, chunk.source_row0 + table.num_rows)
        ids = combined(table.column("trajectory_id"))
        repeat, first = seen.repeats(ids)
        if repeat.any():
            k = int(np.argmax(repeat))
            raise RecordError(
                f"{chunk.source}: row {int(rows[k])}: field trajectory_id: duplicate "
                f"id {ids[k].as_py()!r} (first at {seen.where(int(first[k]))})", row=k)
        seen.add(ids, chunk.row0, chunk.source, chunk.source_row0)
        batch = make_batch(table, chunk, rows, dtype=dtype,
                           observation_noise=observation_noise, math=math,
                           processes=processes, pack=pack)
        resolved = resolve_once(resolved, methods, batch, params, observation_noise, info,
                                  protocol)
        plans = []
        for m in resolved:
            est = get_estimator(m)
            own = {k: v for k, v in params.items() if k in est.param_names}
            plans.append((est, prepare_estimator(est, batch, params=own, protocol=protocol)))
        if batch_columns is not None:
            keep = {"trajectory_id", *batch_columns}
            batch.table = table.select([c for c in table.column_names if c in keep])
        yield batch, plans


def _run_plans(batch: Batch, plans: list, backend: str) -> dict[str, np.ndarray]:
    """The kernels of prepared estimators: ``{output column: [N] float64}``."""
    from fastuq.engine.runner import call_kernel

    scores = {}
    for est, (inputs, optional, values) in plans:
        out = call_kernel(est, inputs, optional, values, n=batch.n, dtype=batch.dtype,
                          backend=backend)
        for column, v in out.items():
            scores[column] = np.asarray(v, np.float64)
    return scores


def score(
    source,
    methods: str | Sequence[str] = ("sauce",),
    *,
    protocol: str | None = None,
    dtype: str | np.dtype | None = None,
    backend: str = "jax",
    chunk_rows: int = 1 << 18,
    observation_noise: float | None = None,
    math: bool = False,
    check: str = "corpus",
    device: str | None = None,
    pack: str = "auto",
    **params: object,
) -> pa.Table:
    """Score a corpus in memory: a table with ``trajectory_id``, one float64 column per
    method (uncertainty; higher = less likely correct), and ``question_id``, ``protocol`` and
    ``correct`` when the corpus has them. See :func:`score_file` for the arguments; ``params`` are
    estimator parameters (``lam=``, ``q=``, ``confidence=``, ...); ``device``: ``"cpu"``,
    ``"gpu"`` or ``"auto"``/``None`` (JAX's default backend) for the kernels; ``dtype``
    (default: float32 on a GPU, float64 on a CPU) and ``pack`` (``"auto"``: the per-round
    inputs packed and checked on the device on a GPU, on the host otherwise) as in
    :func:`iter_scores`."""
    from fastuq.engine.runtime import device_scope

    tables = []
    with device_scope(device):
        for batch, scores in iter_scores(
            source, methods=methods, protocol=protocol, params=params, dtype=dtype,
            backend=backend, chunk_rows=chunk_rows, observation_noise=observation_noise,
            math=math, check=check, pack=pack,
        ):
            cols = {"trajectory_id": batch.ids, **scores}
            for extra in ("question_id", "protocol", "correct"):
                if extra in batch.table.column_names:
                    cols[extra] = batch.column(extra)
            tables.append(pa.table(cols))
    return pa.concat_tables(tables)


def _score_file(
    input,
    output: str | os.PathLike,
    *,
    methods: str | Sequence[str] = ("sauce",),
    protocol: str | None = None,
    lam: float | None = None,
    q: float | None = None,
    sigma2_0: float | None = None,
    mu_0: float | None = None,
    confidence: str | None = None,
    dtype: str | None = None,
    backend: str = "jax",
    chunk_rows: int = 1 << 18,
    observation_noise: float | None = None,
    on_error: str = "raise",
    skipped_path: str | os.PathLike | None = None,
    math: bool = False,
    processes: int | None = None,
    progress: Callable[[int, int | None], None] | None = None,
    keep_scores: bool = False,
    max_skip_fraction: float | None = None,
    check: str = "corpus",
    params: Mapping[str, object] | None = None,
    pack: str = "auto",
    calibration=None,
) -> ScoreReport:
    """Score every trajectory of a corpus and write ``trajectory_id`` + one float64 column
    per estimator to Parquet, in input order, atomically (nothing appears at ``output`` on
    error). Memory is bounded by the chunk, not the corpus.

    Args:
      input: a corpus file (Parquet, Arrow IPC, JSONL, JSONL.gz), a folder or list of them,
        or an in-memory frame (see :func:`fastuq.io.readers.iter_chunks`).
      output: Parquet file to write.
      methods: estimator names (or ``"all"``).
      protocol: preset for every trajectory; default: each record's ``protocol`` field.
      lam, q, sigma2_0, mu_0: SAUCE parameter overrides; confidence: UMAS node confidence
        (``msp``, ``mean_logprob``, ``neg_entropy``).
      dtype: kernel precision, ``"float64"`` or ``"float32"``; default (``None``): float32
        when the kernels run on a GPU, float64 otherwise. Output is float64.
      chunk_rows: records per chunk.
      observation_noise: constant R_t for corpora without token entropy (SAUCE on agreement
        alone); without it, a missing token entropy is an error.
      on_error: ``"raise"`` or ``"skip"`` (see :func:`iter_scores`). With ``"skip"`` the
        skipped records are written, one JSON object per line with ``source``, ``row``,
        ``trajectory_id`` and ``reason``, to ``skipped_path`` (default:
        ``OUTPUT.skipped.jsonl``), and counted in the report. A run that skips every
        record, or more than ``max_skip_fraction`` of them, raises
        :class:`~fastuq.errors.TooManySkipped` (a ValueError) after writing the skip list,
        and writes no scores.
      math, processes: see :func:`iter_scores`.
      progress: called as ``progress(rows_done, rows_total_or_None)`` after each chunk.
      keep_scores: keep the score arrays (and labels) in the report, for summaries.
      max_skip_fraction: with ``on_error="skip"``, the largest fraction of the records that
        may be skipped (default: any but all).
      check: which columns every record is checked against (see :func:`iter_scores`).
      params: parameters of any registered estimator by name (as :func:`score`'s keywords;
        a name also given by its own keyword above is a ValueError).
      pack: where the per-round inputs are packed and checked (``"auto"``, ``"host"``,
        ``"device"``; see :func:`iter_scores`).
      calibration: a fitted :class:`fastuq.decisions.Calibrator` (anything with its
        ``estimators`` and ``predict_proba(scores, protocols, ids=...)``): its
        ``p_correct_<estimator>`` columns (float64 in [0, 1]) are written after the scores,
        each trajectory through its protocol's map (a protocol it has no map for is a
        ValueError). Checking that the scores are made as the calibration's were is the
        caller's (:meth:`~fastuq.decisions.Calibrator.check_scoring`).

    Raises:
      OutputError: (a ValueError) ``output`` or the skip list would replace an input (also
        through a symlink, or inside an input folder whose files would be read), they name
        the same file, a name contradicts its format, or the destination cannot be written;
        found before anything is read.
    """

    from fastuq.io.readers import count_rows

    check_skip_options(on_error, skipped_path, max_skip_fraction)
    check_mode(check)
    output = Path(output)
    side = None
    if on_error == "skip":
        side = Path(skipped_path) if skipped_path else output.with_name(
            output.name + ".skipped.jsonl")
    paths = input if isinstance(input, (list, tuple)) else [input]
    check_outputs([p for p in paths if isinstance(p, (str, os.PathLike))],
                  [("output", output, "parquet"), ("skipped_path", side, "jsonl")])
    named = {"lam": lam, "q": q, "sigma2_0": sigma2_0, "mu_0": mu_0, "confidence": confidence}
    both = sorted(k for k, v in named.items() if v is not None and k in (params or {}))
    if both:
        raise ValueError(f"parameter {both[0]!r} is given twice (by its keyword and in params)")
    params = {**{k: v for k, v in named.items() if v is not None}, **(params or {})}
    total = count_rows(input)
    report = ScoreReport(input=str(input), output=str(output))
    kept: dict[str, list[np.ndarray]] = {}
    kept_correct: list[np.ndarray | None] = []
    kept_protocol: list[np.ndarray] = []
    skipped: list[Skipped] = []
    info: dict = {}
    start = time.perf_counter()
    writer = None
    done = 0
    try:
        for batch, scores in iter_scores(
            input, methods=methods, protocol=protocol, params=params, dtype=dtype,
            backend=backend, chunk_rows=chunk_rows, observation_noise=observation_noise,
            on_error=on_error, skipped=skipped, math=math, processes=processes, info=info,
            check=check, batch_columns=("protocol", "correct"), pack=pack,
        ):
            protos = batch.protocol(protocol) if (protocol or batch.has("protocol")) else None
            if calibration is not None:
                scores = {**scores, **calibration.predict_proba(scores, protos, ids=batch.ids)}
            if writer is None:
                report.methods = tuple(scores)
                schema = pa.schema([("trajectory_id", pa.string())]
                                   + [(m, pa.float64()) for m in scores])
                writer = BackgroundWriter(_score_writer(output, schema))
            writer.write(pa.table({"trajectory_id": batch.ids.cast(pa.string()), **scores},
                                  schema=schema))
            report.n_rows += batch.n
            if isinstance(protos, str):
                report.protocols[protos] = report.protocols.get(protos, 0) + batch.n
            elif protos is not None:
                for item in pc.value_counts(protos).to_pylist():
                    name = str(item["values"])
                    report.protocols[name] = report.protocols.get(name, 0) + item["counts"]
            if keep_scores:
                for m, s in scores.items():
                    kept.setdefault(m, []).append(s)
                kept_correct.append(batch.correct())
                if protos is not None:
                    kept_protocol.append(np.full(batch.n, protos, object)
                                         if isinstance(protos, str)
                                         else protos.to_numpy(zero_copy_only=False))
            done = report.n_rows + len(skipped)
            if progress is not None:
                progress(done, total)
        n_in = report.n_rows + len(skipped)
        too_many = None
        if on_error == "skip" and skipped:
            if not report.n_rows:
                too_many = f"every record ({n_in:,}) was skipped"
            elif max_skip_fraction is not None and len(skipped) > max_skip_fraction * n_in:
                too_many = (f"{len(skipped):,} of {n_in:,} records ({len(skipped) / n_in:.2%}) "
                            f"were skipped, more than max_skip_fraction = {max_skip_fraction}")
        if side is not None:
            atomic_write_text(side, _skip_lines(skipped))
            report.skipped_path = str(side)
        if too_many is not None:
            raise TooManySkipped(f"{too_many}; no scores written; the skipped records and "
                                 f"their reasons are listed in {side}")
        if writer is None:  # no record scored: still write the (empty) output
            names = [m for m in method_list(methods) if m != "all"]
            if calibration is not None:
                names += [f"p_correct_{m}" for m in calibration.estimators]
            report.methods = tuple(names)
            schema = pa.schema([("trajectory_id", pa.string())]
                               + [(m, pa.float64()) for m in names])
            writer = _score_writer(output, schema)
        writer.close()
    except BaseException:
        if writer is not None:
            writer.abort()
        raise
    report.left_out = info.get("left_out", {})
    report.skipped = skipped
    report.seconds = time.perf_counter() - start
    if keep_scores:
        report.scores = {m: np.concatenate(v) for m, v in kept.items()}
        if kept_correct and all(c is not None for c in kept_correct):
            report.correct = np.concatenate(kept_correct)
        if kept_protocol and sum(map(len, kept_protocol)) == report.n_rows:
            report.protocol = np.concatenate(kept_protocol)
    return report



def score_file(input, output: str | os.PathLike, *, device: str | None = None,
               **kwargs) -> ScoreReport:
    from fastuq.engine.runtime import device_scope

    with device_scope(device):
        return _score_file(input, output, **kwargs)


def _with_device_doc() -> None:
    """``score_file`` shows ``_score_file``'s signature and docstring, plus ``device``."""
    import inspect

    sig = inspect.signature(_score_file)
    device = inspect.Parameter("device", inspect.Parameter.KEYWORD_ONLY, default=None,
                               annotation="str | None")
    score_file.__signature__ = sig.replace(parameters=[*sig.parameters.values(), device])
    score_file.__doc__ = (_score_file.__doc__ or "") + (
        "\n    device: ``\"cpu\"``, ``\"gpu\"`` or ``\"auto\"``/``None`` (JAX's default "
        "backend, a GPU when there is one): where the kernels run.\n")


_with_device_doc()


def _score_writer(output: Path, schema: pa.Schema) -> AtomicParquetWriter:
    """The scores' Parquet writer. No dictionary encoding (ids are unique, scores nearly so:
    a dictionary is built and then abandoned) and no statistics for the id column (min/max
    over every id string): together a third of the time of the default settings, and a
    smaller file."""
    return AtomicParquetWriter(output, schema, use_dictionary=False,
                               write_statistics=[n for n in schema.names
                                                 if n != "trajectory_id"])


def _skip_lines(skipped: list[Skipped]) -> str:
    """The skip list as JSON Lines (``source``, ``row``, ``trajectory_id``, ``reason``),
    encoded column-wise by Polars rather than one ``json.dumps`` per record."""
    import polars as pl

    if not skipped:
        return ""
    frame = pl.DataFrame({
        "source": [k.source for k in skipped], "row": [k.row for k in skipped],
        "trajectory_id": [k.trajectory_id for k in skipped],
        "reason": [k.reason for k in skipped],
    }, schema={"source": pl.String, "row": pl.Int64, "trajectory_id": pl.String,
               "reason": pl.String})
    return frame.write_ndjson()


class ProgressBar:
    """A one-line progress bar on stderr (only drawn when stderr is a terminal or forced)."""

    def __init__(self, enabled: bool | None = None, stream=None,
                 unit: str = "trajectories", show_rate: bool = True) -> None:
        self.stream = sys.stderr if stream is None else stream
        self.enabled = self.stream.isatty() if enabled is None else enabled
        self.unit = unit
        self.show_rate = show_rate
        self.start = time.perf_counter()

    def __call__(self, done: int, total: int | None) -> None:
        if not self.enabled:
            return
        rate = ""
        if self.show_rate:
            rate = f" {done / max(time.perf_counter() - self.start, 1e-9):,.0f}/s"
        if total:
            bar = "#" * int(30 * done / total)
            line = f"\r[{bar:<30}] {done:,}/{total:,} {self.unit}{rate}"
        else:
            line = f"\r{done:,} {self.unit}{rate}"
        self.stream.write(line)
        self.stream.flush()

    def close(self) -> None:
        if self.enabled:
            self.stream.write("\n")
            self.stream.flush()
