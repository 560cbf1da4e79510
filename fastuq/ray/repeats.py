"""The Ray runner's distributed check for repeated trajectory ids.

The ids (read alone) are hashed into buckets of about :data:`BUCKET_IDS` ids, grouped by
bucket (a Ray shuffle; one bucket is checked on the driver), and each bucket finds its
repeated ids, ordered by (file, row). :func:`find_repeats` returns them as
:class:`Repeats`: for corpus files, the keys (``file << ROW_BITS | row``) of every later
occurrence with the single-process run's reason; for a foreign dataset, the repeated ids
and their counts. The scorer (:mod:`fastuq.ray.scorer`) marks those records bad.
"""

from __future__ import annotations

import math as _math
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

import numpy as np
import pyarrow as pa

from fastuq.ray.shared import CHUNK, DATASET_SOURCE, FILE, ROW

if TYPE_CHECKING:
    import ray.data

_BUCKET = "__fastuq_bucket"
#: Ids per bucket of the distributed duplicate check.
BUCKET_IDS = 1 << 20
#: Bits of a record's row in its key ``file << ROW_BITS | row``: files of up to 2**40
#: rows, 2**23 files.
ROW_BITS = 40


def _add_bucket(table: pa.Table, n_buckets: int) -> pa.Table:
    import polars as pl

    ids = table.column("trajectory_id").combine_chunks()
    h = pl.Series(ids).hash(seed=0).to_numpy()
    return table.append_column(_BUCKET, pa.array((h % np.uint64(n_buckets)).astype(np.int64)))


def _repeats_in_bucket(table: pa.Table) -> pa.Table:
    """The later occurrences of every id repeated in ``table`` (one bucket), each with its
    first occurrence (by file, then row): ``trajectory_id``, file, row, chunk, and the
    first's file, row and chunk."""
    import polars as pl

    df = pl.from_arrow(table.select(["trajectory_id", FILE, ROW, CHUNK]))
    df = df.filter(pl.col("trajectory_id").is_not_null()).sort([FILE, ROW])
    first = [pl.col(c).first().over("trajectory_id").alias(f"first{c}")
             for c in (FILE, ROW, CHUNK)]
    df = df.with_columns(*first, pl.len().over("trajectory_id").alias("n"))
    df = df.filter((pl.col("n") > 1) & ~((pl.col(FILE) == pl.col(f"first{FILE}"))
                                         & (pl.col(ROW) == pl.col(f"first{ROW}"))))
    out = df.drop("n").to_arrow()
    return out.cast(pa.schema([pa.field(f.name, pa.string() if f.name == "trajectory_id"
                                        else f.type) for f in out.schema]))


def _repeated_ids(table: pa.Table) -> pa.Table:
    """Ids repeated in ``table`` (one bucket) and how often: ``trajectory_id``, ``n``."""
    import polars as pl

    df = pl.from_arrow(table.select(["trajectory_id"])).filter(
        pl.col("trajectory_id").is_not_null())
    out = df.group_by("trajectory_id").len().filter(pl.col("len") > 1).to_arrow()
    return pa.table({"trajectory_id": out.column("trajectory_id").cast(pa.string()),
                     "n": out.column("len").cast(pa.int64())})


def _collect(ds: ray.data.Dataset) -> pa.Table | None:
    tables = [t for t in ds.iter_batches(batch_size=None, batch_format="pyarrow")
              if t.num_rows]
    return pa.concat_tables(tables) if tables else None


@dataclass
class Repeats:
    """What the duplicate check found. For files: ``keys`` (``file << 40 | row``, sorted) of
    every later occurrence and its ``reasons``; for a foreign dataset: the repeated ``ids``
    and their counts."""

    keys: np.ndarray = field(default_factory=lambda: np.zeros(0, np.int64))
    reasons: list[str] = field(default_factory=list)
    ids: pa.Array | None = None
    counts: np.ndarray | None = None
    first_error: str | None = None

    def __len__(self) -> int:
        return len(self.keys) + (0 if self.ids is None else len(self.ids))


def find_repeats(ids_ds: ray.data.Dataset, n_rows: int, files: list[str] | None
                  ) -> Repeats:
    """Run the distributed duplicate check over a dataset of ids (with reader columns when
    ``files``)."""
    n_buckets = max(1, _math.ceil(n_rows / BUCKET_IDS))
    per_bucket = _repeats_in_bucket if files is not None else _repeated_ids
    if n_buckets == 1:  # one bucket: checked on the driver (no shuffle to start)
        ids = _collect(ids_ds)
        found = None if ids is None else per_bucket(ids)
        found = None if found is None or not found.num_rows else found
    else:
        keyed = ids_ds.map_batches(_add_bucket, fn_kwargs={"n_buckets": n_buckets},
                                   batch_format="pyarrow", batch_size=None)
        found = _collect(keyed.groupby(_BUCKET, num_partitions=n_buckets).map_groups(
            per_bucket, batch_format="pyarrow"))
    out = Repeats()
    if found is None:
        return out
    if files is None:
        out.ids = found.column("trajectory_id").combine_chunks()
        out.counts = found.column("n").to_numpy()
        tid = out.ids[0].as_py()
        out.first_error = (f"{DATASET_SOURCE}: field trajectory_id: duplicate id {tid!r} "
                           f"({out.counts[0]} occurrences)")
        return out
    cols = {c: found.column(c).to_numpy() for c in found.column_names if c != "trajectory_id"}
    keys = (cols[FILE].astype(np.int64) << ROW_BITS) | cols[ROW]
    order = np.argsort(keys, kind="stable")
    out.keys = keys[order]
    tids = found.column("trajectory_id").to_pylist()
    for k in order.tolist():
        f, r, c = int(cols[FILE][k]), int(cols[ROW][k]), int(cols[CHUNK][k])
        ff, fr, fc = (int(cols[f"first{x}"][k]) for x in (FILE, ROW, CHUNK))
        if (f, c) == (ff, fc):  # in one chunk: the reader's own check names the row alone
            out.reasons.append(f"duplicate id (first at row {fr})")
        else:
            out.reasons.append(f"duplicate id (first at {files[ff]} row {fr})")
        if out.first_error is None:  # the first in corpus order: the message of a run
            tid = tids[k]
            if (f, c) == (ff, fc):
                out.first_error = (f"{files[f]}: row {r} (trajectory_id {tid!r}): field "
                                   f"trajectory_id: duplicate id (first at row {fr})")
            else:
                out.first_error = (f"{files[f]}: row {r}: field trajectory_id: duplicate id "
                                   f"{tid!r} (first at {files[ff]} row {fr})")
    return out


