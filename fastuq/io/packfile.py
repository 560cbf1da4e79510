"""A packed corpus (``fastuq pack``): the layout, the manifest and the memory-mapped reading.

A pack is a folder (``corpus.fqpack``) holding ``manifest.json`` and one uncompressed Arrow
IPC file per chunk (``chunk-00000.arrow``, ...). Each chunk file has one row per trajectory:
the corpus's own columns as validated (except ``topk_logprobs``, whose derived inputs are
stored instead), and the kernels' packed inputs as fixed-size list columns named
``__fq__<kind>__<name>``: a per-round array ``[T, N]`` is stored as ``[N]`` lists of ``T``
values, a per-node array ``[T, N, A]`` as ``[N]`` lists of ``T * A`` (and, for
``topk_logprobs``, each record's widest round, ``[1, N]``: what a chunk that lost rows needs
of the column). The manifest records
the schema version, the fastuq version, the source files (size and SHA-256), the checks
that passed, the protocols, the buckets (rounds ``T`` and agent slots ``A`` of each chunk)
and, per chunk, its file's size and SHA-256, its rows and the shapes of its packed arrays.

Reading (:func:`open_pack`, :func:`pack_chunks`) maps each file (``pyarrow.memory_map``):
nothing is decoded or validated again; a packed array becomes a NumPy view of the mapped
buffer, made time-major (one copy) when the kernels ask for it. A pack whose files do not
match its manifest (missing, another size, another hash with ``verify=True``), whose source
files changed (when the source is given), or that another schema version wrote, is refused
with a :class:`PackError` (a ValueError) that says why.
"""

from __future__ import annotations

import hashlib
import json
import os
import warnings
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path

import numpy as np
import pyarrow as pa

from fastuq.errors import PackError, PackWarning

__all__ = ["MANIFEST", "PACK_PREFIX", "PACK_SCHEMA_VERSION", "PackedArrays", "PackedChunk",
           "check_sources", "file_sha256", "is_pack", "open_pack", "pack_chunks",
           "read_chunk_table", "read_pack_chunk", "source_drift", "source_record"]

#: Version of the pack layout; a pack written with another one is refused.
PACK_SCHEMA_VERSION = 1
#: Name of the manifest file inside a pack folder.
MANIFEST = "manifest.json"
#: Prefix of the packed-array columns of a chunk file.
PACK_PREFIX = "__fq__"
_FORMAT = "fastuq-pack"


def file_sha256(path: str | os.PathLike, block: int = 1 << 22) -> str:
    """SHA-256 (hex) of a file's bytes, read in ``block``-byte pieces."""
    h = hashlib.sha256()
    with open(path, "rb") as f:
        while piece := f.read(block):
            h.update(piece)
    return h.hexdigest()


def is_pack(path: str | os.PathLike) -> bool:
    """Whether ``path`` is a pack folder (a folder holding a fastuq pack manifest)."""
    p = Path(path)
    m = p / MANIFEST
    if not (p.is_dir() and m.is_file()):
        return False
    try:
        with open(m, encoding="utf-8") as f:
            return json.load(f).get("format") == _FORMAT
    except (OSError, ValueError, AttributeError):
        return False


@dataclass
class PackedArrays:
    """The packed inputs of one chunk, read lazily from its mapped table.

    ``present``: the corpus columns the chunk had (with a value in at least one record);
    ``asked_derived``: the columns stored only as derived inputs that the reader asked for;
    ``n_slots``: the agent slots ``A`` of its packed node arrays (the widest
    ``topk_logprobs`` round, rounded up to a power of two, is ``topk_slots``); ``math``:
    whether the answer-derived inputs were built with math-verify; ``shapes``:
    ``{column: [T, N, ...]}`` of each packed array; ``deps``: ``{array: corpus columns it
    was built from}``; ``checked``: the stored per-round inputs that passed the scoring
    runs' checks when they were packed (``checked_rounds`` of the manifest; none for a pack
    written before it was recorded).
    """

    table: pa.Table
    present: frozenset[str]
    n_slots: int
    math: bool
    shapes: Mapping[str, Sequence[int]]
    deps: Mapping[str, Sequence[str]] = field(default_factory=dict)
    topk_slots: int = 1
    asked_derived: frozenset[str] = frozenset()
    checked: frozenset[str] = frozenset()

    def has(self, kind: str, name: str) -> bool:
        """Whether the chunk holds the packed array ``kind`` (``rounds``, ``nodes``, ...)
        of ``name``."""
        return f"{PACK_PREFIX}{kind}__{name}" in self.shapes

    def array(self, kind: str, name: str, part: str = "values",
              dtype: np.dtype | None = None, *, t_max: int | None = None,
              n_slots: int | None = None) -> np.ndarray:
        """A packed array, time-major and C-contiguous (cast to ``dtype`` when given).
        ``t_max`` / ``n_slots``: only its first rounds / agent slots (axes 0 and 2)."""
        col = f"{PACK_PREFIX}{kind}__{name}" + ("" if part == "values" else f"__{part}")
        shape = tuple(self.shapes[col])
        flat = self.table.column(col).combine_chunks()
        values = flat.values if len(flat) else pa.array([], flat.type.value_type)
        n = shape[1]
        data = values.to_numpy(zero_copy_only=values.type != pa.bool_())
        by_traj = data.reshape((n, shape[0]) + shape[2:])
        if t_max is not None:
            by_traj = by_traj[:, :t_max]
        if n_slots is not None:
            by_traj = by_traj[:, :, :n_slots]
        axes = (1, 0) + tuple(range(2, len(shape)))
        return np.ascontiguousarray(by_traj.transpose(axes),
                                    dtype=by_traj.dtype if dtype is None else dtype)

    def take(self, positions: np.ndarray) -> PackedArrays:
        """The packed arrays of the chunk's rows ``positions`` (indices into its rows, in
        the order given): the same arrays, of fewer trajectories (their rounds and agent
        slots as the whole chunk's; see :meth:`array` to cut them)."""
        idx = np.asarray(positions, np.int64)
        if idx.ndim != 1 or (len(idx) and (idx.min() < 0 or idx.max() >= self.table.num_rows)):
            raise ValueError(f"rows {idx.tolist()[:8]} ... are not rows of a chunk of "
                             f"{self.table.num_rows}")
        shapes = {k: [s[0], len(idx), *s[2:]] for k, s in self.shapes.items()}
        return replace(self, table=self.table.take(pa.array(idx)), shapes=shapes)


@dataclass
class PackedChunk:
    """One chunk of a pack as :func:`pack_chunks` reads it."""

    row0: int
    table: pa.Table
    source: str
    source_row0: int
    arrays: PackedArrays = field(repr=False)


def _refuse(pack: Path, why: str) -> PackError:
    return PackError(f"{pack}: pack refused: {why}; re-pack it: fastuq pack SOURCE -o {pack}")


def open_pack(path: str | os.PathLike, *,
              source_files: Sequence[str | os.PathLike] | None = None,
              verify: bool = False) -> dict:
    """The manifest of the pack at ``path``, checked against its files.

    Args:
      path: the pack folder.
      source_files: the files of the corpus it was packed from, when given: each one's
        size and SHA-256 must be those the manifest recorded (else the pack is stale).
      verify: also check each chunk file's SHA-256 (reads every byte; without it, sizes
        and row counts are checked).

    Without ``source_files``, a cheap check (one ``stat`` per source file,
    :func:`source_drift`): a source file still at the path it was packed from whose size or
    modification time changed gives a :class:`~fastuq.errors.PackWarning`.

    Raises:
      PackError: another schema version, a chunk file missing or of another size, rows or
        hash; a source that changed.
    """
    pack = Path(path)
    try:
        with open(pack / MANIFEST, encoding="utf-8") as f:
            manifest = json.load(f)
    except (OSError, ValueError) as exc:
        raise PackError(f"{pack}: not a fastuq pack (no readable {MANIFEST}: {exc})") from None
    if not isinstance(manifest, dict) or manifest.get("format") != _FORMAT:
        raise PackError(f"{pack}: not a fastuq pack ({MANIFEST} has no format {_FORMAT!r})")
    version = manifest.get("schema_version")
    if version != PACK_SCHEMA_VERSION:
        raise _refuse(pack, f"it has pack schema version {version!r}, this fastuq reads "
                      f"version {PACK_SCHEMA_VERSION}")
    for c in manifest["chunks"]:
        f = pack / c["file"]
        if not f.is_file():
            raise _refuse(pack, f"chunk file {c['file']} is missing")
        size = f.stat().st_size
        if size != c["bytes"]:
            raise _refuse(pack, f"chunk file {c['file']} has {size} bytes, the manifest "
                          f"says {c['bytes']}")
        if verify and file_sha256(f) != c["sha256"]:
            raise _refuse(pack, f"chunk file {c['file']} does not have the manifest's "
                          "SHA-256")
    if source_files is not None:
        check_sources(pack, manifest, source_files)
    else:
        for why in source_drift(manifest):
            warnings.warn(PackWarning(f"{pack}: {why}; the pack holds the corpus as it was "
                                      "when packed (give the source, --source CORPUS, to "
                                      "refuse a changed one; or re-pack it: fastuq pack "
                                      f"SOURCE -o {pack})"), stacklevel=3)
    return manifest


def source_record(path: str | os.PathLike, sha256: str | None = None) -> dict:
    """What a manifest records of a source file: the path as given, its absolute path, its
    size, modification time (ns) and SHA-256 (``sha256`` when the caller hashed it already,
    else read here)."""
    p = Path(path)
    st = p.stat()
    return {"path": str(p), "resolved": str(p.resolve()), "bytes": st.st_size,
            "mtime_ns": st.st_mtime_ns, "sha256": sha256 or file_sha256(p)}


#: ``{(absolute source path, recorded SHA-256): (size, mtime_ns)}`` of the source files
#: :func:`check_sources` found unchanged in this process (by content): :func:`source_drift`
#: does not warn of a file that still has that size and time.
_VERIFIED: dict[tuple[str, str], tuple[int, int]] = {}


def check_sources(pack: str | os.PathLike, manifest: Mapping,
                  source_files: Sequence[str | os.PathLike]) -> None:
    """Check the files of the corpus a pack was made from against its manifest: as many
    files, each of the size and SHA-256 recorded (reads every byte of them).

    Raises:
      PackError: naming the file that changed and how (its size, or its SHA-256), and how
        to re-pack.
    """
    pack = Path(pack)
    files = [Path(f) for f in source_files]
    recorded = manifest["sources"]
    if len(files) != len(recorded):
        raise _refuse(pack, f"the source has {len(files)} files, the pack was made from "
                      f"{len(recorded)}")
    for f, rec in zip(files, recorded, strict=True):
        st = f.stat()
        if st.st_size != rec["bytes"]:
            raise _refuse(pack, f"source file {f} changed since it was packed (now "
                          f"{st.st_size} bytes, packed from {rec['bytes']} bytes)")
        if file_sha256(f) != rec["sha256"]:
            raise _refuse(pack, f"source file {f} changed since it was packed (same size, "
                          "another SHA-256)")
        _VERIFIED[(str(f.resolve()), rec["sha256"])] = (st.st_size, st.st_mtime_ns)


def source_drift(manifest: Mapping) -> list[str]:
    """What a cheap look (one ``stat`` each, no hashing) says of the files a pack was made
    from: for each one still at its recorded absolute path, a line when its size differs
    from the recorded one (it changed) or, the size the same, its modification time (it
    may have). A file no longer there says nothing (a pack stands alone: its source may be
    moved or deleted); so does one that :func:`check_sources` found unchanged, by content,
    in this process at its present size and time; and a pack that recorded no absolute
    path or time (made before they were recorded) is checked by size only where its path
    is absolute."""
    out = []
    for rec in manifest.get("sources", ()):
        where = rec.get("resolved") or rec["path"]
        if not os.path.isabs(where):
            continue
        try:
            st = os.stat(where)
        except OSError:
            continue
        if _VERIFIED.get((where, rec["sha256"])) == (st.st_size, st.st_mtime_ns):
            continue
        if st.st_size != rec["bytes"]:
            out.append(f"source file {where} changed since it was packed (now "
                       f"{st.st_size} bytes, packed from {rec['bytes']} bytes)")
        elif "mtime_ns" in rec and st.st_mtime_ns != rec["mtime_ns"]:
            out.append(f"source file {where} was modified since it was packed (same size; "
                       "its content may differ)")
    return out


def read_chunk_table(pack: Path, entry: Mapping) -> pa.Table:
    """The memory-mapped table of one chunk file (checked: rows as the manifest says)."""
    import pyarrow.ipc as ipc

    with pa.memory_map(str(pack / entry["file"]), "r") as source:
        table = ipc.open_file(source).read_all()
    if table.num_rows != entry["rows"]:
        raise _refuse(pack, f"chunk file {entry['file']} has {table.num_rows} rows, the "
                      f"manifest says {entry['rows']}")
    return table


def pack_chunks(path: str | os.PathLike, *, columns: Sequence[str] | None = None,
                optional_columns: Sequence[str] = (), manifest: dict | None = None
                ) -> Iterator[PackedChunk]:
    """The chunks of the pack at ``path`` in order, memory-mapped, with their packed
    arrays. ``columns`` / ``optional_columns``: as :func:`fastuq.io.readers.iter_chunks`
    (the corpus columns of each chunk's table; a required one the pack lacks is an error).
    A column stored only as its derived inputs (``topk_logprobs``) counts as present when
    asked for."""
    pack = Path(path)
    manifest = open_pack(pack) if manifest is None else manifest
    for index in range(len(manifest["chunks"])):
        yield read_pack_chunk(pack, manifest, index, columns=columns,
                              optional_columns=optional_columns)


def read_pack_chunk(path: str | os.PathLike, manifest: Mapping, index: int, *,
                    columns: Sequence[str] | None = None,
                    optional_columns: Sequence[str] = ()) -> PackedChunk:
    """Chunk ``index`` of the pack at ``path`` (whose manifest, from :func:`open_pack`, is
    ``manifest``), memory-mapped, with its packed arrays: one chunk file read alone (what
    a worker of :mod:`fastuq.ray` scores). ``columns`` / ``optional_columns``: as
    :func:`pack_chunks`."""
    pack = Path(path)
    entry = manifest["chunks"][index]
    table = read_chunk_table(pack, entry)
    corpus = [c for c in table.column_names if not c.startswith(PACK_PREFIX)]
    packed_cols = [c for c in table.column_names if c.startswith(PACK_PREFIX)]
    present = set(entry["present"])
    derived = set(manifest.get("derived_only", ()))
    if columns is None:
        wanted = corpus
        asked_derived = derived
    else:
        known = set(corpus) | derived
        for c in columns:
            if c != "trajectory_id" and c not in known:
                raise ValueError(f"{pack}: no column {c!r} (columns: {', '.join(corpus)})")
        asked = ["trajectory_id", *columns, *optional_columns]
        wanted = [c for c in dict.fromkeys(asked) if c in corpus]
        asked_derived = derived & set(asked)
    arrays = PackedArrays(table.select(packed_cols), frozenset(present),
                          int(entry["n_slots"]), bool(manifest.get("math", False)),
                          entry["shapes"], entry["deps"], int(entry["topk_slots"]),
                          frozenset(asked_derived),
                          frozenset(entry.get("checked_rounds", ())))
    return PackedChunk(entry["row0"], table.select(wanted), entry["source"],
                       entry["source_row0"], arrays)
