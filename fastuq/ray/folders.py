"""Writing the Ray runner's results as Parquet dataset folders, atomically:
:func:`score_to_folder` (``fastuq score --engine ray SRC -o OUT_DIR``) and its
:class:`FolderReport`. Each folder is checked before any work (not an input, not inside
one, nothing but Parquet files in it) and written through
:func:`fastuq.io.writers.atomic_write_folder` (a temporary sibling folder that replaces it
when complete).
"""

from __future__ import annotations

import os
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pyarrow as pa

from fastuq.ray.corpus import corpus_files, pack_path
from fastuq.ray.driver import RayScores, score_dataset
from fastuq.ray.shared import SKIPPED_SCHEMA, data_context, import_ray, raising_originals

if TYPE_CHECKING:
    import ray.data


def _check_folder(path: Path, flag: str, inputs: Sequence[str], roots: Sequence[Path]) -> None:
    """Refuse, before any work, an output folder that is or holds an input, lies inside an
    input folder, or exists with anything but Parquet files in it (a previous output, which
    is replaced)."""
    from fastuq.io.writers import OutputError, check_outputs

    real = Path(os.path.realpath(path))
    for root in roots:
        r = Path(os.path.realpath(root))
        if real == r or real.is_relative_to(r) or r.is_relative_to(real):
            raise OutputError(path, f"{flag} would be, hold or lie in the input {root}")
    for f in inputs:
        if Path(os.path.realpath(f)).is_relative_to(real):
            raise OutputError(path, f"{flag} holds the input {f}; write it elsewhere")
    if real.exists():
        if not real.is_dir():
            raise OutputError(path, "a file is in the way (a folder is written here)")
        other = [p.name for p in real.iterdir()
                 if not (p.is_file() and p.name.endswith(".parquet"))]
        if other:
            raise OutputError(path, f"it exists and holds more than Parquet files "
                                    f"({', '.join(sorted(other)[:3])}): not replaced")
    check_outputs(inputs, [(flag, path, "dir")])


def _write_folder(ds: ray.data.Dataset, path: Path, schema: pa.Schema, n: int) -> None:
    """Write ``ds`` as a Parquet dataset folder at ``path``, atomically
    (:func:`~fastuq.io.writers.atomic_write_folder`: into a temporary sibling folder, which
    replaces ``path`` when complete and is removed on any error). An empty dataset is one
    empty file with the schema."""
    import pyarrow.parquet as pq

    from fastuq.io.writers import atomic_write_folder

    def write(tmp: Path) -> None:
        if n:
            ds.write_parquet(str(tmp))
        else:
            pq.write_table(schema.empty_table(), tmp / "part-00000.parquet")

    atomic_write_folder(path, write)


@dataclass
class FolderReport:
    """What :func:`score_to_folder` did."""

    input: str
    output: str
    n_rows: int
    n_skipped: int
    seconds: float
    methods: tuple[str, ...]
    left_out: dict[str, str]
    skipped_path: str | None
    first_reasons: list[str]
    result: RayScores = field(repr=False)


def score_to_folder(
    source,
    output: str | os.PathLike,
    *,
    skipped_path: str | os.PathLike | None = None,
    max_skip_fraction: float | None = None,
    on_error: str = "raise",
    progress: bool | None = None,
    **kwargs: Any,
) -> FolderReport:
    """:func:`score_dataset` of the corpus files ``source`` written as Parquet dataset
    folders: ``output`` gets ``trajectory_id`` + one float64 column per estimator output
    (as ``score_file``'s file), and with ``on_error="skip"`` the skipped records go to
    ``skipped_path`` (default: ``OUTPUT.skipped``, beside it). Each folder is written to a
    temporary sibling and renamed into place when complete: a failed run leaves neither.
    A run that skips every record, or more than ``max_skip_fraction`` of them, raises
    :class:`~fastuq.errors.TooManySkipped` after writing the skipped folder, and
    writes no scores. The workers write the files, so on a cluster both folders must be on
    a file system every node mounts at the same path. ``progress``: Ray Data's progress bars
    on or off (default: Ray's setting). ``kwargs``: those of :func:`score_dataset`.

    Raises:
      OutputError: (a ValueError, before any work) an output folder is, holds or lies in an
        input, or exists holding anything but Parquet files.
    """
    from fastuq.engine.checks import check_skip_options
    from fastuq.errors import TooManySkipped

    start = time.perf_counter()
    check_skip_options(on_error, skipped_path, max_skip_fraction)
    output = Path(output)
    side = None
    if on_error == "skip":
        side = Path(skipped_path) if skipped_path else output.with_name(
            output.name + ".skipped")
    pack = pack_path(source)
    if pack is not None:  # the pack itself is scored: its folder and files are the input
        files = [str(f) for f in sorted(pack.iterdir()) if f.is_file()]
    else:
        files = corpus_files(source)
    given = source if isinstance(source, (list, tuple)) else [source]
    roots = [Path(s) for s in given if Path(s).is_dir()]
    _check_folder(output, "output", files, roots)
    if side is not None:
        if os.path.realpath(side) == os.path.realpath(output):
            raise ValueError(f"the skipped folder and the output are one folder: {output}")
        _check_folder(side, "skipped_path", files, roots)
    import_ray()
    with data_context(progress), raising_originals():
        res = score_dataset(files if pack is None else source, on_error=on_error, **kwargs)
        n_in = res.n_rows + res.n_skipped
        too_many = None
        if side is not None and res.n_skipped:
            if not res.n_rows:
                too_many = f"every record ({n_in:,}) was skipped"
            elif max_skip_fraction is not None and res.n_skipped > max_skip_fraction * n_in:
                too_many = (f"{res.n_skipped:,} of {n_in:,} records "
                            f"({res.n_skipped / n_in:.2%}) were skipped, more than "
                            f"max_skip_fraction = {max_skip_fraction}")
        first = []
        if side is not None:
            _write_folder(res.skipped, side, SKIPPED_SCHEMA, res.n_skipped)
            first = [r["reason"] for r in res.skipped.take(5)] if res.n_skipped else []
        if too_many is not None:
            raise TooManySkipped(f"{too_many}; no scores written; the skipped records and "
                                 f"their reasons are in {side}")
        columns = ["trajectory_id", *res.outputs]
        schema = pa.schema([("trajectory_id", pa.string())]
                           + [(m, pa.float64()) for m in res.outputs])
        _write_folder(res.scores.select_columns(columns), output, schema, res.n_rows)
    return FolderReport(input=str(source), output=str(output), n_rows=res.n_rows,
                        n_skipped=res.n_skipped, seconds=time.perf_counter() - start,
                        methods=res.methods,
                        left_out=res.left_out, skipped_path=None if side is None else str(side),
                        first_reasons=first, result=res)


