"""Packing a corpus once (``fastuq pack``) and scoring from the pack.

:func:`pack_corpus` reads a corpus chunk by chunk, runs every check a scoring run makes
(the schema, every value of every column, ids unique across the corpus), builds each
chunk's packed inputs with the same :class:`~fastuq.engine.batch.Batch` code a scoring run
uses (float64; per-round ``[T, N]`` arrays and their round masks, per-node ``[T, N, A]``
arrays and their masks, the vote classes of the answers, the agreement derived from the
answers, the token and node entropies derived from ``topk_logprobs``) and writes them with
the corpus's columns (all but ``topk_logprobs``) to one Arrow IPC file per chunk, with a
manifest (:mod:`fastuq.io.packfile`), atomically. Memory: one chunk at a time.

:class:`PackedBatch` is the seam on the reading side: a :class:`Batch` whose packed inputs
come from the pack's memory-mapped arrays (cast to the run's dtype) instead of being built
from Arrow lists. It uses a stored array only when every column it was built from is among
the columns the run read (so that it is the array the same run on the source would build),
and builds anything else the usual way from the chunk's columns: scores are bit-identical
to the source's.
"""

from __future__ import annotations

import json
import os
import time
from collections.abc import Sequence
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
    """``[T, N, ...]`` to ``[N]`` fixed-size lists of ``T * ...`` values (trajectory-major)."""
    n = arr.shape[1]
    flat = np.ascontiguousarray(np.moveaxis(arr, 0, 1)).reshape(n, -1)
    return pa.FixedSizeListArray.from_arrays(pa.array(flat.reshape(-1)), flat.shape[1])


def _present(table: pa.Table) -> list[str]:
    n = table.num_rows
    return [c for c in table.column_names if table.column(c).null_count < n]


def _chunk_arrays(batch: Batch, present: set[str]) -> tuple[dict, dict]:
    """``({column: [T, N, ...] array}, {input: columns it was built from})`` of a chunk."""
    arrays: dict[str, np.ndarray] = {}
    deps: dict[str, list[str]] = {}
    for name in ROUND_INPUTS:
        if name in present:
            built_from = [name]
        elif name == "agreement" and "answers" in present:
            built_from = ["answers", "n_agents"]
        elif name == "token_entropy" and "topk_logprobs" in present:
            built_from = ["topk_logprobs"]
        else:
            continue
        values, mask = batch.rounds(name)
        key = f"{PACK_PREFIX}rounds__{name}"
        arrays[key], arrays[key + "__mask"] = values, mask
        deps[key] = built_from
    for name in NODE_INPUTS:
        if name in present:
            built_from = [name]
        elif name == "node_entropy" and "topk_logprobs" in present:
            built_from = ["topk_logprobs"]
        else:
            continue
        values, node_mask, round_mask = batch.nodes(name)
        key = f"{PACK_PREFIX}nodes__{name}"
        arrays[key], arrays[key + "__node_mask"] = values, node_mask
        arrays[key + "__round_mask"] = round_mask
        deps[key] = built_from
    if "answers" in present:
        classes, round_mask = batch.answer_classes()
        key = f"{PACK_PREFIX}classes__answers"
        arrays[key], arrays[key + "__round_mask"] = classes, round_mask
        deps[key] = ["answers"]
    return arrays, deps


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

    def write(staging: Path) -> dict:
        import pyarrow.compute as pc
        import pyarrow.ipc as ipc

        chunks, protocols, rounds, slots = [], set(), set(), set()
        derived_only: set[str] = set()
        seen = SeenIds()
        try:
            for k, chunk in enumerate(iter_chunks(source, chunk_rows=chunk_rows)):
                chunk = values_checked(chunk)
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
                arrays, deps = _chunk_arrays(batch, set(present))
                kept = [c for c in table.column_names if c not in DERIVED_ONLY]
                derived_only |= {c for c in DERIVED_ONLY if c in table.column_names}
                out = table.select(kept).combine_chunks()
                for col, arr in arrays.items():
                    out = out.append_column(col, _by_trajectory(arr))
                name = f"chunk-{k:05d}.arrow"
                with ipc.new_file(str(staging / name), out.schema) as w:
                    w.write_table(out, max_chunksize=max(out.num_rows, 1))
                if "protocol" in table.column_names:
                    protocols |= {p for p in pc.unique(table.column("protocol").combine_chunks()
                                                       .cast(pa.string())).to_pylist()
                                  if p is not None}
                t_max = max((a.shape[0] for a in arrays.values()), default=0)
                rounds.add(t_max)
                slots.add(batch.n_slots)
                chunks.append({
                    "file": name, "rows": table.num_rows,
                    "bytes": (staging / name).stat().st_size,
                    "sha256": file_sha256(staging / name),
                    "row0": chunk.row0, "source": chunk.source,
                    "source_row0": chunk.source_row0, "present": present,
                    "n_slots": batch.n_slots, "topk_slots": _topk_slots(table),
                    "shapes": {c: list(a.shape) for c, a in arrays.items()}, "deps": deps,
                })
        finally:
            seen.close()
        source_bytes = sum(f.stat().st_size for f in files)
        pack_bytes = sum(c["bytes"] for c in chunks)
        manifest = {
            "format": "fastuq-pack", "schema_version": PACK_SCHEMA_VERSION,
            "fastuq_version": version, "rows": sum(c["rows"] for c in chunks),
            "chunk_rows": chunk_rows, "math": bool(math), "checks": list(CHECKS),
            "sources": [source_record(f) for f in files],
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
    host (the arrays are there already)."""

    def __init__(self, table: pa.Table, packed: PackedArrays, **kwargs) -> None:
        kwargs["pack"] = "host"
        super().__init__(table, **kwargs)
        self.packed = packed

    def _present(self, name: str) -> bool:
        if name in self.table.column_names:
            return super()._present(name)
        return name in self.packed.asked_derived and name in self.packed.present

    def _visible(self, name: str) -> bool:
        return name in self.table.column_names or name in self.packed.asked_derived

    def _stored(self, key: str) -> bool:
        """Whether the stored array ``key`` is the one this run would build: each column it
        was built from was read (and no column that would change it was left out)."""
        if key not in self.packed.shapes:
            return False
        return all(self._visible(c) or c not in self.packed.present
                   for c in self.packed.deps.get(key, ()))

    @property
    def n_slots(self) -> int:
        if "n_slots" not in self._cache and self._present("topk_logprobs") \
                and not self._present("n_agents"):
            base = Batch.n_slots.fget(self._without_topk())  # type: ignore[attr-defined]
            self._cache["n_slots"] = max(base, self.packed.topk_slots)
        return super().n_slots

    def _without_topk(self) -> Batch:
        """A plain batch of this chunk's columns (for its agent slots)."""
        return Batch(self.table, source=self.source, row0=self.row0, rows=self.rows)

    def rounds(self, name: str) -> tuple[np.ndarray, np.ndarray]:
        key = f"{PACK_PREFIX}rounds__{name}"
        if name not in self._cache and self._stored(key) and (
                self._present(name) or name != "agreement" or self.math == self.packed.math):
            self._cache[name] = (self.packed.array("rounds", name, dtype=self.dtype),
                                 self.packed.array("rounds", name, "mask"))
        return super().rounds(name)

    def nodes(self, name: str) -> tuple[np.ndarray, ...]:
        key = f"{PACK_PREFIX}nodes__{name}"
        cache = f"nodes:{name}"
        if cache not in self._cache and self._stored(key) \
                and self.packed.shapes[key][2] == self.n_slots:
            self._cache[cache] = (self.packed.array("nodes", name, dtype=self.dtype),
                                  self.packed.array("nodes", name, "node_mask"),
                                  self.packed.array("nodes", name, "round_mask"))
        return super().nodes(name)

    def answer_classes(self) -> tuple[np.ndarray, np.ndarray]:
        key = f"{PACK_PREFIX}classes__answers"
        if "answer_classes" not in self._cache and self._stored(key) \
                and self.math == self.packed.math and self.packed.shapes[key][2] == self.n_slots:
            self._cache["answer_classes"] = (self.packed.array("classes", "answers"),
                                             self.packed.array("classes", "answers",
                                                               "round_mask"))
        return super().answer_classes()
