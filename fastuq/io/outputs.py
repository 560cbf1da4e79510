"""Checking outputs before any work (writing them is :mod:`fastuq.io.writers`, which
re-exports these names).

:func:`check_outputs` refuses, before any work, an output that resolves to an input (also
through symlinks, relative paths and input folders whose files would be read), two outputs
that are one file, a name whose extension contradicts what is written, and a destination
that cannot be written (an existing folder, a path under a regular file, an unwritable folder
or a read-only file system: probed by creating and removing a file there).
:func:`cli_check_outputs` is the same for a command: an error line and exit status 2.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Callable, Iterable, Sequence
from pathlib import Path

from fastuq.io.temporaries import discard_temporary, temporary_file

__all__ = ["SUFFIXES", "OutputError", "check_outputs", "cli_check_outputs"]


#: What each kind of output may be called (lower-case suffixes; the first is suggested).
SUFFIXES: dict[str, tuple[str, ...]] = {
    "parquet": (".parquet", ".pq"),
    "json": (".json",),
    "jsonl": (".jsonl", ".ndjson", ".json"),
    "png": (".png",),
}


_FORMAT_NAMES = {"parquet": "Parquet", "json": "JSON", "jsonl": "JSON Lines", "png": "PNG"}


class OutputError(ValueError):
    """An output that must not or cannot be written: ``cannot write PATH: reason``."""

    def __init__(self, path: str | os.PathLike, reason: str) -> None:
        super().__init__(f"cannot write {path}: {reason}")
        self.path = str(path)
        self.reason = reason


def _real(path: str | os.PathLike) -> Path:
    return Path(os.path.realpath(os.path.abspath(os.fspath(path))))


def _inside(path: Path, folder: Path) -> bool:
    return path != folder and path.is_relative_to(folder)


def _corpus_file(path: Path) -> bool:
    """Whether the corpus readers pick ``path`` up when reading a folder above it (the
    readers' own rule: :func:`fastuq.io.readers.is_corpus_file`)."""
    from fastuq.io.readers import is_corpus_file

    return is_corpus_file(path)


def _same(a: Path, b: Path) -> bool:
    """``a`` and ``b`` (resolved) are one file or folder: the same path, or the same inode
    (a hard link) when both exist."""
    if a == b:
        return True
    try:
        return os.path.samefile(a, b)
    except OSError:  # one of them does not exist (yet)
        return False


def _existing_ancestor(path: Path) -> Path:
    p = path.parent
    while not p.exists() and p != p.parent:
        p = p.parent
    return p


def _probe_folder(folder: Path, shown: str | os.PathLike) -> None:
    """Create and remove a file in ``folder`` (the same call the writers make), so that an
    unwritable folder or a read-only file system is found before any work, as root too."""
    try:
        tmp = temporary_file(folder / "fastuq-probe")
    except OSError as exc:
        raise OutputError(shown, f"cannot create a file in {folder}: "
                                 f"{exc.strerror or exc}") from None
    discard_temporary(tmp)


def _check_destination(path: Path, shown: str | os.PathLike, kind: str) -> None:
    if kind == "dir":
        if path.exists() and not path.is_dir():
            raise OutputError(shown, "a file is in the way (a folder is written here)")
        if path.is_dir():
            _probe_folder(path, shown)
            return
    elif path.is_dir():
        raise OutputError(shown, "is a folder (give a file name)")
    base = _existing_ancestor(path)
    if not base.is_dir():
        raise OutputError(shown, f"{base} is not a folder")
    _probe_folder(base, shown)


def check_outputs(
    inputs: Iterable[str | os.PathLike | None],
    outputs: Sequence[tuple[str, str | os.PathLike | None, str | None]],
    *,
    reads: Callable[[Path], bool] | None = None,
) -> None:
    """Refuse outputs that would destroy an input or cannot be written, before any work.

    An output is the input when both resolve to one path (symlinks and relative paths
    followed) or are one file (:func:`os.path.samefile`: hard links).

    Args:
      inputs: paths read (files or folders; ``None`` entries are ignored).
      outputs: ``(flag, path, kind)`` per output (``path`` ``None``: not requested); kind
        ``"parquet"``, ``"json"``, ``"jsonl"``, ``"png"`` (the name must end accordingly),
        ``"dir"`` (a folder, created if missing) or ``None`` (any name).
      reads: for an input folder, whether a file in it would be read (default: the corpus
        readers' formats, hidden files excepted).

    Raises:
      OutputError: ``cannot write PATH: reason`` (a ValueError).
    """
    reads = reads or _corpus_file
    ins = []
    for p in inputs:
        if p is None:
            continue
        real = _real(p)
        ins.append((p, real, real.is_dir()))
    seen: dict[Path, str] = {}
    for flag, path, kind in outputs:
        if path is None:
            continue
        if os.fspath(path) == "":
            raise OutputError("''", f"{flag} needs a file name")
        real = _real(path)
        for given, src, is_dir in ins:
            if _same(real, src):
                raise OutputError(path, f"it is the input {given} ({flag} would replace it)")
            if is_dir and _inside(real, src) and kind != "dir" and reads(real):
                raise OutputError(path, f"it is inside the input folder {given}, whose files "
                                        "are read: write it elsewhere")
        for other, other_flag in seen.items():
            if _same(real, other):
                raise OutputError(path, f"{flag} and {other_flag} name the same file")
        seen[real] = flag
        if kind != "dir" and real.is_dir():
            raise OutputError(path, "is a folder (give a file name)")
        if kind in SUFFIXES and not Path(path).name.lower().endswith(SUFFIXES[kind]):
            raise OutputError(
                path, f"{flag} writes {_FORMAT_NAMES[kind]}, but the name says otherwise; "
                      f"name it {Path(path).stem}{SUFFIXES[kind][0]}"
            )
        _check_destination(real, path, kind or "")


def cli_check_outputs(
    prog: str,
    inputs: Iterable[str | os.PathLike | None],
    outputs: Sequence[tuple[str, str | os.PathLike | None, str | None]],
    *,
    reads: Callable[[Path], bool] | None = None,
) -> int | None:
    """:func:`check_outputs` for a command: prints ``PROG: error: cannot write PATH: reason``
    and returns 2 when an output is refused, else ``None``."""
    try:
        check_outputs(inputs, outputs, reads=reads)
    except OutputError as exc:
        print(f"{prog}: error: {exc}", file=sys.stderr)
        return 2
    return None
