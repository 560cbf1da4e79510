"""Packing a corpus once (``fastuq pack``) and scoring from the pack.

:func:`pack_corpus` reads a corpus chunk by chunk, runs every check a scoring run makes
(the schema, every value of every column, ids unique across the corpus), builds each
chunk's packed inputs with the same :class:`~fastuq.engine.batch.Batch` code a scoring run
uses (float64; per-round ``[T, N]`` arrays and their round masks, per-node ``[T, N, A]``
arrays and their masks, the vote classes of the answers, the agreement derived from the
answers, the token and node entropies derived from ``topk_logprobs``, and each record's
widest ``topk_logprobs`` round) and writes them with the corpus's columns (all but
``topk_logprobs``) to one Arrow IPC file per chunk, with a manifest
(:mod:`fastuq.io.packfile`), atomically. Memory: one chunk at a time.

:class:`PackedBatch` is the seam on the reading side: a :class:`Batch` whose packed inputs
come from the pack's memory-mapped arrays (cast to the run's dtype) instead of being built
from Arrow lists. It uses a stored array only when every column it was built from is among
the columns the run read (so that it is the array the same run on the source would build),
and builds anything else the usual way from the chunk's columns: scores are bit-identical
to the source's. A chunk that loses bad rows under ``on_error="skip"`` is a
:class:`PackedBatch` of the rows left (see its ``positions``): the same scores and skip
records as the source's.
"""

from __future__ import annotations

import hashlib
import json
import os
import time
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path

import numpy as np
import pyarrow as pa

from fastuq.engine.batch import Batch
from fastuq.io.packfile import (
    MANIFEST,
    PACK_PREFIX,
    PACK_SCHEMA_VERSION,
    PackedArrays,
    file_sha256,
    open_pack,
    source_record,
)

__all__ = ["Pack", "PackedBatch", "check_pack", "pack_corpus", "pack_source_files"]

#: Corpus columns stored only as the inputs derived from them.
DERIVED_ONLY = ("topk_logprobs",)
#: Per-round inputs packed ([T, N] and the round mask).
ROUND_INPUTS = ("agreement", "token_entropy")
#: Node inputs packed ([T, N, A], node mask, round mask).
NODE_INPUTS = ("seq_logprob", "n_tokens", "node_entropy", "belief", "answer_logprob")
#: The checks every chunk passed before it was packed.
CHECKS = ("schema", "values", "unique_ids", "inputs_built")


def pack_source_files(source: str | os.PathLike | Sequence) -> list[Path]:
    """The files of a corpus source given by path: a file, a folder's corpus files (in the
    order the readers read them), or a list of either."""
    from fastuq.io.readers import folder_files

    if isinstance(source, (list, tuple)):
        return [f for s in source for f in pack_source_files(s)]
    p = Path(source)
    if not p.exists():
        raise FileNotFoundError(f"{p}: no such file")
    return folder_files(p) if p.is_dir() else [p]


def check_pack(pack: str | os.PathLike, *, source: str | os.PathLike | Sequence | None = None,
               verify: bool = False) -> dict:
    """The manifest of ``pack``, checked against its files and, when ``source`` is given,
    against the source's files (sizes and SHA-256). Raises
    :class:`~fastuq.errors.PackError` with the reason when it does not match."""
    files = None if source is None else pack_source_files(source)
    return open_pack(pack, source_files=files, verify=verify)


class _HashingSink:
    """A binary file that hashes (SHA-256) and counts what is written to it (for
    ``pyarrow.PythonFile``: Arrow hands it its buffers, which go to the file and the hash
    without a copy)."""

    def __init__(self, f) -> None:
        self.f = f
        self.sha256 = hashlib.sha256()
        self.size = 0
        self.closed = False

    def write(self, data) -> int:
        view = memoryview(data).cast("B")
        self.sha256.update(view)
        self.size += view.nbytes
        return self.f.write(view)

    def flush(self) -> None:
        self.f.flush()

    def tell(self) -> int:
        return self.size

    def writable(self) -> bool:
        return True

    def close(self) -> None:  # the caller closes the file
        self.closed = True


class Pack(os.PathLike):
    """A pack (``fastuq pack``) opened and checked, to pass wherever a corpus path goes
    (``fastuq.score(Pack("corpus.fqpack", source="corpus.parquet"), "sauce")``, the
    readers, ``fastuq.ray.score_dataset``, ...): it is the pack's path (``os.fspath``).

    Args:
      path: the pack folder.
      source: the corpus it was made from (a file, a folder or a list of them): each of its
        files must have the size and SHA-256 the manifest recorded, else the pack is
        refused (:class:`~fastuq.errors.PackError`, naming the file and whether its size or
        its content changed). Without it, a source file still at its recorded path with
        another size or modification time gives a :class:`~fastuq.errors.PackWarning`.
      verify: also check every chunk file's SHA-256 against the manifest.

    Attributes:
      path: the folder; manifest: the manifest (``dict``); rows: its trajectories.

    Raises:
      PackError: the manifest does not match the pack's files, another schema version
        wrote it, or the source changed.
    """

    def __init__(self, path: str | os.PathLike, *,
                 source: str | os.PathLike | Sequence | None = None,
                 verify: bool = False) -> None:
        self.path = Path(path)
        self.manifest = check_pack(self.path, source=source, verify=verify)

    @property
    def rows(self) -> int:
        """The pack's trajectories."""
        return int(self.manifest["rows"])

    def __fspath__(self) -> str:
        return str(self.path)

    def __str__(self) -> str:
        return str(self.path)

    def __repr__(self) -> str:
        return f"Pack({str(self.path)!r}, rows={self.rows:,})"


def _by_trajectory(arr: np.ndarray) -> pa.FixedSizeListArray:
    """A trajectory-major ``[N, ...]`` array to ``[N]`` fixed-size lists of its ``...``
    values (no copy of a C-contiguous float or int array)."""
    flat = np.ascontiguousarray(arr).reshape(arr.shape[0], -1)
    return pa.FixedSizeListArray.from_arrays(pa.array(flat.reshape(-1)), flat.shape[1])


def _present(table: pa.Table) -> list[str]:
    n = table.num_rows
    return [c for c in table.column_names if table.column(c).null_count < n]


def _node_arrays(batch: Batch, name: str, layouts: list, **kw) -> tuple[np.ndarray, ...]:
    """The node column ``name`` (or, with ``leaf_values``, ``answers``) packed
    trajectory-major, ``([N, T, A], node_mask [N, T, A], round_mask [N, T])``: the arrays
    of :meth:`Batch.nodes` (:meth:`Batch.answer_classes`) with their first two axes
    swapped, placed directly where the pack stores them (the same slots, the same
    values: packing only moves values)."""
    from fastuq.io.pack import node_layout, pack_nodes

    col = batch.column("answers") if name == "answers" else batch.node_column(name)
    try:
        layout = node_layout(col, n_agents=batch.n_slots, order="trajectory", known=layouts)
        out = pack_nodes(col, layout=layout, **kw)
    except ValueError as exc:
        raise ValueError(f"{batch.source or 'corpus'}: {name}: {exc}") from None
    if not any(k is layout for k in layouts):
        layouts.append(layout)
    return out


def _chunk_arrays(batch: Batch, present: set[str]) -> tuple[dict, dict, dict, list]:
    """``({column: [N, ...] trajectory-major array}, {column: its time-major shape [T, N,
    ...]}, {input: columns it was built from}, [per-round inputs that pass the scoring
    checks])`` of a chunk."""
    arrays: dict[str, np.ndarray] = {}
    shapes: dict[str, list[int]] = {}
    deps: dict[str, list[str]] = {}

    def put(key: str, by_traj: np.ndarray) -> None:
        arrays[key] = by_traj
        shapes[key] = [by_traj.shape[1], by_traj.shape[0], *by_traj.shape[2:]]

    for name in ROUND_INPUTS:
        built_from = _built_from("rounds", name, present.__contains__)
        if built_from is None:
            continue
        values, mask = batch.rounds(name)
        key = f"{PACK_PREFIX}rounds__{name}"
        put(key, values.T)
        put(key + "__mask", mask.T)
        deps[key] = built_from
    checked = _checked_rounds(batch, arrays)
    layouts: list = []
    for name in NODE_INPUTS:
        built_from = _built_from("nodes", name, present.__contains__)
        if built_from is None:
            continue
        values, node_mask, round_mask = _node_arrays(batch, name, layouts, dtype=np.float64)
        key = f"{PACK_PREFIX}nodes__{name}"
        put(key, values)
        put(key + "__node_mask", node_mask)
        put(key + "__round_mask", round_mask)
        deps[key] = built_from
    if "answers" in present:
        _, classes = batch.vote_classes()
        values, _, round_mask = _node_arrays(batch, "answers", layouts, dtype=np.int32,
                                             fill=-1, leaf_values=classes.astype(np.int32))
        key = f"{PACK_PREFIX}classes__answers"
        put(key, values)  # -1 off the valid nodes, as Batch.answer_classes
        put(key + "__round_mask", round_mask)
        deps[key] = ["answers"]
    for name in DERIVED_ONLY:  # per record: its widest round (-1: null), for cut chunks
        if name in present:
            key = f"{PACK_PREFIX}widths__{name}"
            put(key, _record_widths(batch.column(name))[:, None])
            deps[key] = [name]
    return arrays, shapes, deps, checked


def _built_from(kind: str, name: str, present: Callable[[str], bool]) -> list[str] | None:
    """The corpus columns a chunk's packed input ``name`` (``kind``: ``"rounds"`` or
    ``"nodes"``) is built from, as :class:`~fastuq.engine.batch.Batch` builds it given
    which columns are ``present`` (have a value in some record of the chunk): the column
    itself; else agreement from ``answers`` (and ``n_agents``), token or node entropy from
    ``topk_logprobs``; ``None`` when it cannot be built."""
    if present(name):
        return [name]
    if kind == "rounds" and name == "agreement" and present("answers"):
        return ["answers", "n_agents"]
    if name in ("token_entropy", "node_entropy") and present("topk_logprobs"):
        return ["topk_logprobs"]
    return None


def _record_widths(col: pa.Array) -> np.ndarray:
    """``[N]`` int32: the most slots of a round of each record of a ``[round][agent]``
    column (0 without a round; -1 where the record's list is null)."""
    import pyarrow.compute as pc

    from fastuq.io.arrow_lists import list_lengths, parents

    traj_len, valid = list_lengths(col)
    round_len, _ = list_lengths(pc.list_flatten(col))
    widths = np.zeros(len(col), np.int32)
    np.maximum.at(widths, parents(traj_len), round_len.astype(np.int32))
    widths[~valid] = -1
    return widths


def _checked_rounds(batch: Batch, arrays: Mapping[str, np.ndarray]) -> list[str]:
    """The stored per-round inputs that pass the checks a scoring run makes on them
    (:func:`~fastuq.engine.inputs.validate_rounds`: every trajectory has a round, agreement
    finite in [0, 1]; token entropy with the rounds of agreement, finite and >= 0), so that
    a run that reads them from the pack need not check them again. A chunk that fails
    records nothing and is checked when read (which raises the scoring run's error)."""
    from fastuq.engine.inputs import validate_rounds
    from fastuq.errors import RecordError

    key = f"{PACK_PREFIX}rounds__agreement"
    if key not in arrays:
        return []
    a, mask = batch.rounds("agreement")
    try:
        validate_rounds(a, None, mask, batch.labels)
    except RecordError:
        return []
    if f"{PACK_PREFIX}rounds__token_entropy" not in arrays:
        return ["agreement"]
    h, mask_h = batch.rounds("token_entropy")
    if not np.array_equal(mask, mask_h):
        return ["agreement"]
    try:
        validate_rounds(a, h, mask, batch.labels, agreement=False)
    except RecordError:
        return ["agreement"]
    return ["agreement", "token_entropy"]


def _topk_slots(table: pa.Table) -> int:
    """The widest ``topk_logprobs`` round of a chunk, rounded up to a power of two."""
    import pyarrow.compute as pc

    if "topk_logprobs" not in table.column_names:
        return 1
    rounds = pc.list_flatten(table.column("topk_logprobs").combine_chunks())
    a = int(pc.max(pc.list_value_length(rounds)).as_py() or 1) if len(rounds) else 1
    return 1 << max(0, a - 1).bit_length()


def pack_corpus(
    source: str | os.PathLike | Sequence,
    output: str | os.PathLike,
    *,
    chunk_rows: int = 1 << 18,
    math: bool = False,
    processes: int | None = None,
) -> dict:
    """Pack the corpus ``source`` into the folder ``output`` (see the module docstring).

    Args:
      source: a corpus file, a folder of corpus files or a list of them.
      output: the pack folder to write (replaced whole, atomically).
      chunk_rows: rows per chunk (and per file of the pack).
      math: build the answer-derived inputs with math-verify equivalence (as ``--math``);
        a run with the other setting builds them again from the answers.
      processes: math-verify's worker processes.

    Returns:
      The manifest (also written as ``output/manifest.json``).

    Raises:
      ValueError (a RecordError): a record that fails a check, naming the source, row,
        trajectory and field; nothing is written then.
    """
    from importlib import metadata

    from fastuq.engine.checks import SeenIds, values_checked
    from fastuq.errors import RecordError
    from fastuq.io.arrow_lists import combined
    from fastuq.io.readers import iter_chunks
    from fastuq.io.writers import atomic_write_folder

    if chunk_rows < 1:
        raise ValueError(f"chunk_rows must be >= 1, got {chunk_rows}")
    try:
        version = metadata.version("fastuq")
    except metadata.PackageNotFoundError:  # a bare source tree
        version = "unknown"
    files = pack_source_files(source)
    start = time.perf_counter()

    def checked_chunks():
        """The reader stage: read, decode, conform, validate and check every value."""
        for chunk in iter_chunks(source, chunk_rows=chunk_rows):
            yield values_checked(chunk)

    def write_chunk(path: Path, table: pa.Table) -> tuple[int, str]:
        """The writer stage: one uncompressed IPC file, and its size and SHA-256, hashed as
        its bytes are written (no second read; hashing releases the GIL)."""
        import pyarrow.ipc as ipc

        with open(path, "wb") as f:
            sink = _HashingSink(f)
            with ipc.new_file(pa.PythonFile(sink, mode="w"), table.schema) as w:
                w.write_table(table, max_chunksize=max(table.num_rows, 1))
        return sink.size, sink.sha256.hexdigest()

    def write(staging: Path) -> dict:
        from concurrent.futures import Future, ThreadPoolExecutor

        import pyarrow.compute as pc

        chunks, protocols, rounds, slots = [], set(), set(), set()
        derived_only: set[str] = set()
        seen = SeenIds()
        # Three stages overlap (two cores): the reader reads and checks chunk k + 1 and the
        # writer writes and hashes chunk k - 1 while chunk k's inputs are built here; the
        # source files are hashed beside them. At most one chunk waits at each stage.
        pool = ThreadPoolExecutor(3, thread_name_prefix="fastuq-pack")
        reader = checked_chunks()
        source_hashes = pool.submit(lambda: [file_sha256(f) for f in files])
        pending: Future = pool.submit(next, reader, None)
        written: Future | None = None
        try:
            k = 0
            while (chunk := pending.result()) is not None:
                pending = pool.submit(next, reader, None)
                table = chunk.table
                ids = combined(table.column("trajectory_id"))
                repeat, first = seen.repeats(ids)
                if repeat.any():
                    i = int(np.argmax(repeat))
                    raise RecordError(
                        f"{chunk.source}: row {chunk.source_row0 + i}: field trajectory_id: "
                        f"duplicate id {ids[i].as_py()!r} (first at "
                        f"{seen.where(int(first[i]))})", row=i)
                seen.add(ids, chunk.row0, chunk.source, chunk.source_row0)
                present = _present(table)
                batch = Batch(table, source=chunk.source, row0=chunk.source_row0,
                              dtype=np.float64, math=math, processes=processes)
                arrays, shapes, deps, checked = _chunk_arrays(batch, set(present))
                kept = [c for c in table.column_names if c not in DERIVED_ONLY]
                derived_only |= {c for c in DERIVED_ONLY if c in table.column_names}
                out = table.select(kept).combine_chunks()
                for col, arr in arrays.items():
                    out = out.append_column(col, _by_trajectory(arr))
                name = f"chunk-{k:05d}.arrow"
                if "protocol" in table.column_names:
                    protocols |= {p for p in pc.unique(table.column("protocol").combine_chunks()
                                                       .cast(pa.string())).to_pylist()
                                  if p is not None}
                t_max = max((shape[0] for key, shape in shapes.items()
                             if "__widths__" not in key), default=0)
                rounds.add(t_max)
                slots.add(batch.n_slots)
                entry = {
                    "file": name, "rows": table.num_rows, "bytes": None, "sha256": None,
                    "row0": chunk.row0, "source": chunk.source,
                    "source_row0": chunk.source_row0, "present": present,
                    "n_slots": batch.n_slots, "topk_slots": _topk_slots(table),
                    "shapes": shapes, "deps": deps, "checked_rounds": checked,
                }
                del batch, arrays, table, chunk
                if written is not None:
                    chunks[-1]["bytes"], chunks[-1]["sha256"] = written.result()
                chunks.append(entry)
                written = pool.submit(write_chunk, staging / name, out)
                del out
                k += 1
            if written is not None:
                chunks[-1]["bytes"], chunks[-1]["sha256"] = written.result()
            hashes = source_hashes.result()
        finally:
            for f in (pending, written):
                if f is not None:
                    f.cancel()
                    try:
                        f.result()
                    except BaseException:  # noqa: BLE001 - the first error is raised
                        pass
            reader.close()
            pool.shutdown(wait=True, cancel_futures=True)
            seen.close()
        source_bytes = sum(f.stat().st_size for f in files)
        pack_bytes = sum(c["bytes"] for c in chunks)
        manifest = {
            "format": "fastuq-pack", "schema_version": PACK_SCHEMA_VERSION,
            "fastuq_version": version, "rows": sum(c["rows"] for c in chunks),
            "chunk_rows": chunk_rows, "math": bool(math), "checks": list(CHECKS),
            "sources": [source_record(f, h) for f, h in zip(files, hashes, strict=True)],
            "source_bytes": source_bytes, "pack_bytes": pack_bytes,
            "protocols": sorted(protocols),
            "buckets": {"rounds": sorted(rounds), "agent_slots": sorted(slots)},
            "derived_only": sorted(derived_only),
            "seconds": round(time.perf_counter() - start, 3),
            "chunks": chunks,
        }
        (staging / MANIFEST).write_text(json.dumps(manifest, indent=1) + "\n",
                                        encoding="utf-8")
        return manifest

    result: dict = {}
    atomic_write_folder(output, lambda staging: result.update(write(staging)))
    return result


class PackedBatch(Batch):
    """A :class:`Batch` of a pack's chunk: the packed inputs come from the pack (see the
    module docstring); everything else as a :class:`Batch` builds it. Always packed on the
    host (the arrays are there already).

    Args:
      table: the chunk's corpus columns (of the rows ``positions``, when given).
      packed: the chunk's packed arrays, all its rows.
      positions: for a chunk that lost rows (``on_error="skip"``), the chunk rows left
        (indices into ``packed``'s rows, ascending). The stored arrays of those rows are
        used, cut to the rounds and agent slots the rows left need (their padding: the
        arrays a batch of those rows builds); the inputs that depend on the whole chunk
        (the vote classes of the answers, numbered per chunk and merged across its rounds,
        and the agreement derived from them) are built again from the answers.
    """

    def __init__(self, table: pa.Table, packed: PackedArrays, *,
                 positions: np.ndarray | None = None, **kwargs) -> None:
        kwargs["pack"] = "host"
        super().__init__(table, **kwargs)
        self.cut = positions is not None
        if self.cut:
            if len(positions) != table.num_rows:
                raise ValueError(f"{self.source or 'pack'}: {len(positions)} chunk rows "
                                 f"given for a table of {table.num_rows}")
            packed = packed.take(positions)
        self.packed = packed
        self._from_pack: set[str] = set()  # the per-round inputs read from the pack

    def _present(self, name: str) -> bool:
        if name in self.table.column_names:
            return super()._present(name)
        if not (name in self.packed.asked_derived and name in self.packed.present):
            return False
        widths = self._widths(name)
        return widths is None or bool((widths >= 0).any())

    def _widths(self, name: str) -> np.ndarray | None:
        """``[N]`` the widest round of each record of the derived-only column ``name``
        (-1: null) in a cut chunk, when the pack stored them (``None``: a full chunk, or a
        pack made before they were stored: the chunk's values stand for its rows)."""
        if not (self.cut and self.packed.has("widths", name)):
            return None
        key = f"widths:{name}"
        if key not in self._cache:
            self._cache[key] = self.packed.array("widths", name)[0]
        return self._cache[key]

    def _visible(self, name: str) -> bool:
        return name in self.table.column_names or name in self.packed.asked_derived

    def _stored(self, key: str, kind: str = "", name: str = "") -> bool:
        """Whether the stored array ``key`` is the one this run would build: each column it
        was built from was read (and no column that would change it was left out); in a
        cut chunk, also built from the columns the rows left build it from."""
        if key not in self.packed.shapes:
            return False
        deps = self.packed.deps.get(key, ())
        if not all(self._visible(c) or c not in self.packed.present for c in deps):
            return False
        return not self.cut or _built_from(kind, name, self._present) == list(deps)

    @property
    def n_slots(self) -> int:
        if "n_slots" not in self._cache and self._present("topk_logprobs") \
                and not self._present("n_agents"):
            base = Batch.n_slots.fget(self._without_topk())  # type: ignore[attr-defined]
            widths = self._widths("topk_logprobs")
            if widths is None:
                topk = self.packed.topk_slots
            else:  # the rows left's, rounded as _topk_slots rounds the chunk's
                topk = 1 << max(0, int(widths.max()) - 1).bit_length()
            self._cache["n_slots"] = max(base, topk)
        return super().n_slots

    def _without_topk(self) -> Batch:
        """A plain batch of this chunk's columns (for its agent slots)."""
        return Batch(self.table, source=self.source, row0=self.row0, rows=self.rows)

    def _rounds_needed(self, kind: str, name: str, mask: str) -> int | None:
        """In a cut chunk, the rounds its rows left have in the stored ``mask`` of
        ``name`` (``None`` in a full chunk: all of them)."""
        if not self.cut:
            return None
        m = self.packed.array(kind, name, mask)
        return int(m.sum(axis=0).max()) if m.size else 0

    def rounds(self, name: str) -> tuple[np.ndarray, np.ndarray]:
        key = f"{PACK_PREFIX}rounds__{name}"
        if name not in self._cache and self._stored(key, "rounds", name) and (
                self._present(name) or name != "agreement"
                or (self.math == self.packed.math and not self.cut)):
            t = self._rounds_needed("rounds", name, "mask")
            self._cache[name] = (self.packed.array("rounds", name, dtype=self.dtype, t_max=t),
                                 self.packed.array("rounds", name, "mask", t_max=t))
            self._from_pack.add(name)
            if self._passed(name):  # the scoring checks passed on these arrays when packed
                self._cache.setdefault("checked", set()).add(name)  # type: ignore[union-attr]
        return super().rounds(name)

    def _passed(self, name: str) -> bool:
        """Whether the pack recorded that the stored ``name`` (as read now) passes the
        checks of :mod:`fastuq.engine.inputs`: agreement in [0, 1] stays there in any float
        dtype; token entropy only in float64 (a finite float64 may overflow a float32), and
        only beside the stored agreement (its rounds were compared with those). What
        passed for a chunk passes for any of its rows."""
        if name not in self.packed.checked:
            return False
        if name == "agreement":
            return True
        return (name == "token_entropy" and self.dtype == np.float64
                and "agreement" in self._from_pack)

    def nodes(self, name: str) -> tuple[np.ndarray, ...]:
        key = f"{PACK_PREFIX}nodes__{name}"
        cache = f"nodes:{name}"
        if cache not in self._cache and self._stored(key, "nodes", name):
            stored, a = self.packed.shapes[key][2], self.n_slots
            t = self._rounds_needed("nodes", name, "round_mask")
            # a cut chunk's rows may need fewer slots: the ones past them hold no node
            fits = a == stored or (self.cut and a < stored and not self.packed.array(
                "nodes", name, "node_mask", t_max=t)[..., a:].any())
            if fits:
                self._cache[cache] = tuple(
                    self.packed.array("nodes", name, part, t_max=t,
                                      n_slots=None if part == "round_mask" else a,
                                      dtype=self.dtype if part == "values" else None)
                    for part in ("values", "node_mask", "round_mask"))
        return super().nodes(name)

    def answer_classes(self) -> tuple[np.ndarray, np.ndarray]:
        key = f"{PACK_PREFIX}classes__answers"
        if "answer_classes" not in self._cache and not self.cut and self._stored(key) \
                and self.math == self.packed.math and self.packed.shapes[key][2] == self.n_slots:
            self._cache["answer_classes"] = (self.packed.array("classes", "answers"),
                                             self.packed.array("classes", "answers",
                                                               "round_mask"))
        return super().answer_classes()
