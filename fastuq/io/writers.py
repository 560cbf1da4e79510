"""Writing outputs safely (reading is :mod:`fastuq.io.readers`).

* :func:`check_outputs` (:mod:`fastuq.io.outputs`, re-exported here) refuses, before any
  work, an output that resolves to an input or cannot be written.
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

import json
import os
import shutil
import signal
import threading
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa

from fastuq.io.outputs import SUFFIXES, OutputError, check_outputs, cli_check_outputs
from fastuq.io.temporaries import (
    create_temporary,
    discard_temporary,
    forget_temporary,
    publish_temporary,
    remove_temporaries_on_sigterm,
    temporary_file,
)

__all__ = [
    "AtomicParquetWriter",
    "OutputError",
    "atomic_write_files",
    "atomic_write_folder",
    "atomic_write_json",
    "atomic_write_parquet",
    "atomic_write_text",
    "atomic_write_with",
    "json_default",
    "SUFFIXES",
    "check_outputs",
    "cli_check_outputs",
    "remove_temporaries_on_sigterm",
]

def json_default(value: Any) -> Any:
    """``json.dumps``'s ``default`` for NumPy values: scalars as Python numbers, arrays as
    (nested) lists; TypeError naming the type for anything else."""
    if isinstance(value, np.generic):
        return value.item()
    if isinstance(value, np.ndarray):
        return value.tolist()
    raise TypeError(f"not JSON serialisable: {type(value).__name__}")


def atomic_write_json(path: str | os.PathLike, doc: Any, *, indent: int | None = 1) -> None:
    """Write ``doc`` as JSON (NumPy values through :func:`json_default`, a final newline) to
    ``path`` atomically, as :func:`atomic_write_text` does."""
    atomic_write_text(path, json.dumps(doc, indent=indent, default=json_default) + "\n")


def atomic_write_text(path: str | os.PathLike, text: str) -> None:
    """Write ``text`` (UTF-8) to ``path`` through a temporary file in the same folder."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = temporary_file(path)
    try:
        tmp.write_text(text, encoding="utf-8")
    except BaseException:
        discard_temporary(tmp)
        raise
    publish_temporary(tmp, path)


def _temporary_folder(path: Path) -> Path:
    """Create the folder ``.NAME.XXXXXXXX.tmp`` beside ``path``, registered before it exists
    (SIGTERM removes it with its files)."""
    return create_temporary(path, Path.mkdir)


def _discard_folder(tmp: Path) -> None:
    try:
        shutil.rmtree(tmp, ignore_errors=True)
    finally:
        forget_temporary(str(tmp))


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
                forget_temporary(str(staging))
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
            forget_temporary(str(staging))
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
    tmp = temporary_file(path)
    try:
        write(tmp)
    except BaseException:
        discard_temporary(tmp)
        raise
    publish_temporary(tmp, path)
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
        self._tmp = temporary_file(self.path)
        try:
            self._writer = pq.ParquetWriter(self._tmp, schema, compression=compression,
                                            **options)
        except BaseException:
            discard_temporary(self._tmp)
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
            discard_temporary(self._tmp)
            raise
        publish_temporary(self._tmp, self.path)

    def abort(self) -> None:
        """Drop everything written; nothing appears at ``path``."""
        try:
            self._writer.close()
        except Exception:  # noqa: BLE001 - the file is dropped anyway
            pass
        finally:
            discard_temporary(self._tmp)

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
