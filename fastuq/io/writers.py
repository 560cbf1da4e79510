"""Writing outputs safely (reading is :mod:`fastuq.io.readers`).

* :func:`check_outputs` refuses, before any work, an output that resolves to an input (also
  through symlinks, relative paths and input folders whose files would be read), two outputs
  that are one file, a name whose extension contradicts what is written, and a destination
  that cannot be written (an existing folder, a path under a regular file, an unwritable folder
  or a read-only file system: probed by creating and removing a file there).
* :class:`AtomicParquetWriter` / :func:`atomic_write_parquet` / :func:`atomic_write_text`
  write through a temporary file in the destination folder, renamed into place only when
  everything was written. Temporary files are removed on every exception and, once
  :func:`remove_temporaries_on_sigterm` is installed (the ``fastuq`` command does), on
  SIGTERM.
* :func:`atomic_write_files` writes a set of files (``fastuq eval --plots``) into a temporary
  folder beside the destination and moves them in together, SIGTERM held off while they
  move: a failed or killed run leaves none of the new set.
* :func:`atomic_write_folder` writes a whole folder (a Parquet dataset folder, ``fastuq score
  --engine ray``) into a temporary folder beside the destination that then replaces it whole:
  a failed or killed run leaves the previous folder as it was.
"""

from __future__ import annotations

import os
import shutil
import signal
import sys
import threading
from collections.abc import Callable, Iterable, Sequence
from pathlib import Path

import pyarrow as pa

__all__ = [
    "AtomicParquetWriter",
    "OutputError",
    "atomic_write_files",
    "atomic_write_folder",
    "atomic_write_parquet",
    "atomic_write_text",
    "atomic_write_with",
    "check_outputs",
    "cli_check_outputs",
    "remove_temporaries_on_sigterm",
]

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
        tmp = _temporary(folder / "fastuq-probe")
    except OSError as exc:
        raise OutputError(shown, f"cannot create a file in {folder}: "
                                 f"{exc.strerror or exc}") from None
    _discard(tmp)


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


# --- temporary files -------------------------------------------------------------------------

_TEMPORARIES: set[str] = set()
_LOCK = threading.Lock()


def _register(path: str) -> None:
    with _LOCK:
        _TEMPORARIES.add(path)


def _forget(path: str) -> None:
    with _LOCK:
        _TEMPORARIES.discard(path)


def _remove_all() -> None:
    with _LOCK:
        paths = list(_TEMPORARIES)
        _TEMPORARIES.clear()
    for p in paths:
        try:
            if os.path.isdir(p) and not os.path.islink(p):
                shutil.rmtree(p, ignore_errors=True)
            else:
                os.unlink(p)
        except OSError:
            pass


def remove_temporaries_on_sigterm() -> None:
    """On SIGTERM, remove every temporary file the writers hold and exit with status 143.

    Installed by the ``fastuq`` command (main thread only; a no-op elsewhere). The handler
    also raises ``SystemExit``, so ``finally`` blocks and context managers still run.
    """
    if threading.current_thread() is not threading.main_thread():
        return

    def handler(signum, frame) -> None:
        _remove_all()
        raise SystemExit(128 + signum)

    signal.signal(signal.SIGTERM, handler)


def _create_temporary(path: Path, create: Callable[[Path], None]) -> Path:
    """``create`` the free name ``.NAME.XXXXXXXX.tmp`` beside ``path`` (raising
    ``FileExistsError`` when taken), registered before it exists, so that a SIGTERM at any
    moment finds it."""
    import secrets

    for _ in range(100):
        tmp = path.parent / f".{path.name}.{secrets.token_hex(4)}.tmp"
        _register(str(tmp))
        try:
            create(tmp)
        except FileExistsError:
            _forget(str(tmp))
            continue
        except BaseException:
            _forget(str(tmp))
            raise
        return tmp
    raise FileExistsError(f"{path.parent}: no free temporary name for {path.name}")


def _new_file(tmp: Path) -> None:
    os.close(os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o666))  # umask applies


def _temporary(path: Path) -> Path:
    """Create the file ``.NAME.XXXXXXXX.tmp`` beside ``path`` (:func:`_create_temporary`)."""
    return _create_temporary(path, _new_file)


def _discard(tmp: Path) -> None:
    try:
        tmp.unlink(missing_ok=True)
    finally:
        _forget(str(tmp))


def _publish(tmp: Path, path: Path) -> None:
    try:
        os.replace(tmp, path)
    except BaseException:
        _discard(tmp)
        raise
    _forget(str(tmp))


def atomic_write_text(path: str | os.PathLike, text: str) -> None:
    """Write ``text`` (UTF-8) to ``path`` through a temporary file in the same folder."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = _temporary(path)
    try:
        tmp.write_text(text, encoding="utf-8")
    except BaseException:
        _discard(tmp)
        raise
    _publish(tmp, path)


def _temporary_folder(path: Path) -> Path:
    """Create the folder ``.NAME.XXXXXXXX.tmp`` beside ``path``, registered before it exists
    (SIGTERM removes it with its files)."""
    return _create_temporary(path, Path.mkdir)


def _discard_folder(tmp: Path) -> None:
    try:
        shutil.rmtree(tmp, ignore_errors=True)
    finally:
        _forget(str(tmp))


class _SigtermHeld:
    """Hold SIGTERM off inside the block (main thread only: elsewhere a no-op); one that
    arrives meanwhile is delivered, to the handler that was installed, when the block ends."""

    def __enter__(self) -> _SigtermHeld:
        self.held = threading.current_thread() is threading.main_thread()
        self.pending = False
        if self.held:
            def hold(signum, frame) -> None:
                self.pending = True

            self.old = signal.getsignal(signal.SIGTERM)
            signal.signal(signal.SIGTERM, hold)
        return self

    def __exit__(self, *exc_info: object) -> None:
        if not self.held:
            return
        # a handler installed outside Python reads as None: the default is what is left
        signal.signal(signal.SIGTERM, signal.SIG_DFL if self.old is None else self.old)
        if self.pending:
            signal.raise_signal(signal.SIGTERM)


def atomic_write_files(folder: str | os.PathLike,
                       write: Callable[[Path], Sequence[str | os.PathLike]]) -> list[Path]:
    """Write a set of files into ``folder`` all together or not at all.

    ``write(staging)`` writes the files into ``staging``, a temporary folder beside
    ``folder`` (same file system), and returns their paths (directly in ``staging``). They
    are then moved into ``folder``: by renaming ``staging`` itself when ``folder`` does not
    exist, else file by file with SIGTERM held off until the last one is in. Files already
    in ``folder`` under other names are left alone. On any exception (a full disk while
    writing, say) or SIGTERM (with :func:`remove_temporaries_on_sigterm`) before the move,
    ``staging`` is removed and nothing of the new set is in ``folder``.

    Returns the paths of the files in ``folder``.
    """
    folder = Path(folder)
    folder.parent.mkdir(parents=True, exist_ok=True)
    staging = _temporary_folder(folder)
    try:
        names = [Path(p).name for p in write(staging)]
        for name, p in zip(names, (staging / n for n in names), strict=True):
            if not p.is_file():
                raise FileNotFoundError(f"{name}: not written to the temporary folder")
        with _SigtermHeld():
            if not folder.exists():
                os.rename(staging, folder)
                _forget(str(staging))
            else:
                for name in names:
                    os.replace(staging / name, folder / name)
                _discard_folder(staging)
    except BaseException:
        _discard_folder(staging)
        raise
    return [folder / name for name in names]


def _replace_folder(tmp: Path, path: Path) -> None:
    """Move the finished folder ``tmp`` to ``path`` (a previous folder there is moved aside
    first, then removed; moved back if the rename fails)."""
    import secrets

    old = None
    if path.exists():
        old = path.parent / f".{path.name}.{secrets.token_hex(4)}.old"
        os.rename(path, old)
    try:
        os.rename(tmp, path)
    except BaseException:
        if old is not None:
            os.rename(old, path)
        raise
    if old is not None:
        shutil.rmtree(old, ignore_errors=True)


def atomic_write_folder(folder: str | os.PathLike, write: Callable[[Path], object]) -> Path:
    """Write the folder ``folder`` whole or not at all.

    ``write(staging)`` fills ``staging``, a temporary folder beside ``folder`` (same file
    system), which then replaces ``folder`` whole: a previous folder there is moved aside,
    ``staging`` renamed into place and the previous folder removed, SIGTERM held off while
    they move. Unlike :func:`atomic_write_files`, nothing of the previous folder is kept (a
    Parquet dataset folder, whose part files must all be of one run). On any exception, or
    SIGTERM (with :func:`remove_temporaries_on_sigterm`) before the move, ``staging`` is
    removed and ``folder`` is left as it was.

    Returns ``folder``.
    """
    folder = Path(folder)
    folder.parent.mkdir(parents=True, exist_ok=True)
    staging = _temporary_folder(folder)
    try:
        write(staging)
        with _SigtermHeld():
            _replace_folder(staging, folder)
            _forget(str(staging))
    except BaseException:
        _discard_folder(staging)
        raise
    return folder


def atomic_write_with(path: str | os.PathLike, write: Callable[[Path], object]) -> Path:
    """``write(tmp)`` writes the file (a figure's ``savefig``, say) to a registered temporary
    file beside ``path``, which then replaces ``path``; nothing appears at ``path`` on an
    exception or SIGTERM. Returns ``path``."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = _temporary(path)
    try:
        write(tmp)
    except BaseException:
        _discard(tmp)
        raise
    _publish(tmp, path)
    return path


def atomic_write_parquet(table: pa.Table, path: str | os.PathLike) -> None:
    """Write ``table`` to ``path`` through a temporary file in the same folder, then rename."""
    with AtomicParquetWriter(path, table.schema) as writer:
        writer.write(table)


class AtomicParquetWriter:
    """Incremental Parquet writer that only appears at ``path`` when closed without error;
    its temporary file is removed on any exception (and on SIGTERM, see
    :func:`remove_temporaries_on_sigterm`).

    ``options`` go to ``pyarrow.parquet.ParquetWriter`` (e.g. ``use_dictionary=False``,
    ``write_statistics=[columns]``)."""

    def __init__(
        self, path: str | os.PathLike, schema: pa.Schema, *, compression: str = "snappy",
        **options,
    ) -> None:
        import pyarrow.parquet as pq

        self.path = Path(path)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self._tmp = _temporary(self.path)
        try:
            self._writer = pq.ParquetWriter(self._tmp, schema, compression=compression,
                                            **options)
        except BaseException:
            _discard(self._tmp)
            raise

    def write(self, table: pa.Table | pa.RecordBatch) -> None:
        if isinstance(table, pa.RecordBatch):
            table = pa.Table.from_batches([table])
        self._writer.write_table(table)

    def close(self) -> None:
        """Finish the file and move it into place."""
        try:
            self._writer.close()
        except BaseException:
            _discard(self._tmp)
            raise
        _publish(self._tmp, self.path)

    def abort(self) -> None:
        """Drop everything written; nothing appears at ``path``."""
        try:
            self._writer.close()
        except Exception:  # noqa: BLE001 - the file is dropped anyway
            pass
        finally:
            _discard(self._tmp)

    def __enter__(self) -> AtomicParquetWriter:
        return self

    def __exit__(self, exc_type, exc, tb) -> None:
        if exc_type is None:
            self.close()
        else:
            self.abort()


class BackgroundWriter:
    """Writes tables to a writer (an :class:`AtomicParquetWriter`) on a thread of its own,
    so that encoding and compressing one chunk's output overlaps computing the next (Arrow's
    Parquet writer releases the GIL). At most ``depth`` tables wait in its queue, so memory
    stays bounded by a few output chunks.

    An error on the thread is raised by the next :meth:`write` or by :meth:`close`; then, as
    after any error, the caller calls :meth:`abort`, which drops the file (nothing appears at
    the destination)."""

    def __init__(self, writer, depth: int = 2) -> None:
        import queue

        self.writer = writer
        self._queue: queue.Queue = queue.Queue(maxsize=depth)
        self._error: BaseException | None = None
        self._closing = False
        self._done = threading.Event()
        self._thread = threading.Thread(target=self._run, name="fastuq-writer", daemon=True)
        self._thread.start()

    def _run(self) -> None:
        import queue

        try:
            while True:
                # Timed: SIGTERM's SystemExit raised inside the caller's Queue.put, between
                # notify releasing this thread's waiter lock and removing it from the list,
                # leaves a stale (re-acquired) waiter there, and the next notify wakes
                # nobody; polling recovers such a lost wake-up within 0.1 s.
                try:
                    table = self._queue.get(timeout=0.1)
                except queue.Empty:
                    if self._closing:
                        return
                    continue
                if table is None:
                    return
                if self._error is not None:
                    continue  # drain: the caller will abort
                try:
                    self.writer.write(table)
                except BaseException as exc:  # noqa: BLE001 - handed to the caller
                    self._error = exc
        finally:
            self._done.set()

    def _raise(self) -> None:
        if self._error is not None:
            error, self._error = self._error, _Failed()
            raise error

    def write(self, table) -> None:
        self._raise()
        self._queue.put(table)

    def _finish(self) -> None:
        """Let the thread write what is queued and stop. No blocking put and no
        ``Thread.join``: an exception raised by a signal handler inside either (SIGTERM's
        ``SystemExit``) could leave a later wait hanging for ever; the thread stops when it
        finds the queue empty after ``_closing`` is set (the ``None`` only saves it that
        wait)."""
        import queue

        self._closing = True
        try:
            self._queue.put_nowait(None)
        except queue.Full:
            pass
        while not self._done.wait(0.1):
            pass

    def close(self) -> None:
        """Wait for every table to be written, then close the writer (publish the file)."""
        self._finish()
        self._raise()
        self.writer.close()

    def abort(self) -> None:
        """Stop (after the tables already queued) and drop the file."""
        self._error = self._error or _Failed()
        self._finish()
        self.writer.abort()


class _Failed(Exception):
    """Marks a background writer that already failed (its error was raised once)."""
