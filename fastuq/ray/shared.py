"""What every step of the Ray runner shares.

* The names of the columns the corpus readers (:mod:`fastuq.ray.corpus`) add to each row:
  where it came from (its file, row and reader chunk), why conforming refused it, and its
  chunk's own columns. The duplicate check (:mod:`fastuq.ray.repeats`) and the scorer
  (:mod:`fastuq.ray.scorer`) read them; they are dropped before scoring. For a pack, the
  work items are its chunk files instead (:data:`PACK_CHUNK`).
* :data:`SKIPPED_SCHEMA`, the skipped dataset's columns, and :data:`DATASET_SOURCE`, the
  name of the records of a ``ray.data.Dataset`` that fastuq did not read.
* :func:`import_ray` (Ray Data, or an ImportError that says how to install it),
  :class:`Carried` and :func:`raising_originals` (a worker's exception passed to the driver
  unchanged), and :func:`data_context` (the Ray Data settings every run uses).
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from types import ModuleType

import pyarrow as pa

# Columns the readers add to each row, dropped before scoring: where it came from.
FILE = "__fastuq_file"  # int32: index of its file in the corpus's file list
ROW = "__fastuq_row"  # int64: its row in that file
CHUNK = "__fastuq_chunk"  # int64: the first row (in that file) of its reader chunk
PROBLEM = "__fastuq_problem"  # string: why conforming refused it (null: it conformed)
COLUMNS = "__fastuq_columns"  # dictionary<string>: JSON list of the chunk's own columns
PROVENANCE = (FILE, ROW, CHUNK, PROBLEM, COLUMNS)
# The one column of a pack's work items (one row per chunk file): the chunk's index.
PACK_CHUNK = "__fastuq_pack_chunk"
#: The columns of the skipped dataset (as ``score_file``'s skip list).
SKIPPED_SCHEMA = pa.schema([("source", pa.string()), ("row", pa.int64()),
                            ("trajectory_id", pa.string()), ("reason", pa.string())])
#: How records of a ``ray.data.Dataset`` without fastuq's reader columns are named.
DATASET_SOURCE = "ray dataset"


def import_ray() -> ModuleType:
    """The ``ray`` module with Ray Data, or an ImportError that says how to install it."""
    try:
        import ray
        import ray.data  # noqa: F401
    except ImportError as exc:
        raise ImportError("fastuq.ray needs Ray Data: pip install 'fastuq[ray]'") from exc
    return ray


class Carried(Exception):
    """An exception raised on a worker, carried whole to the driver (Ray Data wraps a
    worker's exception and may change its message; this keeps the original)."""

    def __init__(self, original: BaseException | str) -> None:
        super().__init__(str(original))
        self.original = original


def _original(exc: BaseException) -> BaseException | None:
    """The exception a worker raised, when ``exc`` (from Ray) carries one."""
    stack, seen = [exc], set()
    while stack:
        e = stack.pop()
        if e is None or id(e) in seen:
            continue
        seen.add(id(e))
        if isinstance(e, Carried) and isinstance(e.original, BaseException):
            return e.original
        stack.extend([getattr(e, "cause", None), e.__cause__, e.__context__])
    return None


@contextlib.contextmanager
def raising_originals() -> Iterator[None]:
    """Re-raise a worker's own exception (ValueError naming the record, ...) in place of
    Ray's wrapper."""
    try:
        yield
    except Exception as exc:
        original = _original(exc)
        if original is None:
            raise
        raise original from None


@contextlib.contextmanager
def data_context(progress: bool | None = None) -> Iterator[None]:
    """Ray Data settings for the datasets made inside: input order kept, a worker's
    exception passed on as it is (not wrapped), and (``progress`` not None) Ray Data's
    progress bars on or off."""
    from ray.data import DataContext

    ctx = DataContext.get_current()
    saved = (ctx.execution_options.preserve_order, ctx.raise_original_map_exception,
             ctx.enable_progress_bars)
    ctx.execution_options.preserve_order = True
    ctx.raise_original_map_exception = True
    if progress is not None:
        ctx.enable_progress_bars = progress
    try:
        yield
    finally:
        (ctx.execution_options.preserve_order, ctx.raise_original_map_exception,
         ctx.enable_progress_bars) = saved


