"""Temporary files and folders of fastuq's writers, and their removal on SIGTERM.

A temporary ``.NAME.XXXXXXXX.tmp`` is created beside its destination, registered before it
exists (:func:`create_temporary`), and forgotten once renamed into place
(:func:`publish_temporary`) or removed (:func:`discard_temporary`). Once
:func:`remove_temporaries_on_sigterm` is installed (the ``fastuq`` command does), SIGTERM
removes every registered temporary and exits with status 143. Used by
:mod:`fastuq.io.writers` (the atomic writers) and :mod:`fastuq.io.outputs` (its
writability probe).
"""

from __future__ import annotations

import os
import shutil
import signal
import threading
from collections.abc import Callable
from pathlib import Path

__all__ = [
    "TEMPORARIES",
    "create_temporary",
    "discard_temporary",
    "forget_temporary",
    "publish_temporary",
    "register_temporary",
    "remove_all_temporaries",
    "remove_temporaries_on_sigterm",
    "temporary_file",
]

TEMPORARIES: set[str] = set()
_LOCK = threading.Lock()


def register_temporary(path: str) -> None:
    """Remember ``path`` as a temporary to remove on SIGTERM."""
    with _LOCK:
        TEMPORARIES.add(path)


def forget_temporary(path: str) -> None:
    """Stop remembering ``path`` (it was published or removed)."""
    with _LOCK:
        TEMPORARIES.discard(path)


def remove_all_temporaries() -> None:
    """Remove every remembered temporary file or folder (the SIGTERM handler's work)."""
    with _LOCK:
        paths = list(TEMPORARIES)
        TEMPORARIES.clear()
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
        remove_all_temporaries()
        raise SystemExit(128 + signum)

    signal.signal(signal.SIGTERM, handler)


def create_temporary(path: Path, create: Callable[[Path], None]) -> Path:
    """``create`` the free name ``.NAME.XXXXXXXX.tmp`` beside ``path`` (raising
    ``FileExistsError`` when taken), registered before it exists, so that a SIGTERM at any
    moment finds it."""
    import secrets

    for _ in range(100):
        tmp = path.parent / f".{path.name}.{secrets.token_hex(4)}.tmp"
        register_temporary(str(tmp))
        try:
            create(tmp)
        except FileExistsError:
            forget_temporary(str(tmp))
            continue
        except BaseException:
            forget_temporary(str(tmp))
            raise
        return tmp
    raise FileExistsError(f"{path.parent}: no free temporary name for {path.name}")


def _new_file(tmp: Path) -> None:
    os.close(os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o666))  # umask applies


def temporary_file(path: Path) -> Path:
    """Create the file ``.NAME.XXXXXXXX.tmp`` beside ``path`` (:func:`create_temporary`)."""
    return create_temporary(path, _new_file)


def discard_temporary(tmp: Path) -> None:
    """Remove the temporary file ``tmp`` and forget it."""
    try:
        tmp.unlink(missing_ok=True)
    finally:
        forget_temporary(str(tmp))


def publish_temporary(tmp: Path, path: Path) -> None:
    """Rename the temporary file ``tmp`` to ``path`` (removing it if that fails)."""
    try:
        os.replace(tmp, path)
    except BaseException:
        discard_temporary(tmp)
        raise
    forget_temporary(str(tmp))
