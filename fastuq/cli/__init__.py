"""The ``fastuq`` command line. ``fastuq --help`` does not import JAX.

Each subcommand lives in its own module ``fastuq.cli.<name>`` exposing
``add_parser(subparsers) -> None`` and ``run(args) -> int``; modules must not import JAX at
import time.

Exit status, one rule for every subcommand (:func:`exit_status`): 0 success; 2 a usage or
input error (bad arguments, an unreadable or invalid input, a record that fails validation,
an output refused before the run, a missing optional dependency); 1 a run that failed (an
I/O failure while writing, too many records skipped, ``eval --expect`` values that differ,
an internal error). :func:`main` applies it to whatever a subcommand raises.
"""

from __future__ import annotations

import argparse
import contextlib
import importlib
import sys
import traceback
import warnings
from collections.abc import Iterator
from importlib import metadata, resources
from pathlib import Path

__all__ = ["COMMANDS", "EXIT_FAILED", "EXIT_USAGE", "exit_status", "main", "positive_int",
           "sample_corpus_path", "version"]

#: Exit status of a usage or input error (argparse's own usage errors exit 2 too).
EXIT_USAGE = 2
#: Exit status of a run that failed (writing failed, too many records skipped, an
#: ``eval --expect`` mismatch, an internal error).
EXIT_FAILED = 1

#: Subcommands, in the order ``--help`` lists them, and their modules.
COMMANDS: dict[str, str] = {
    "score": "fastuq.cli.score",
    "import": "fastuq.cli.import_logs",
    "eval": "fastuq.cli.eval",
    "select": "fastuq.cli.select",
    "sweep": "fastuq.cli.sweep",
    "fit": "fastuq.cli.fit",
    "gate": "fastuq.cli.gate",
    "calibrate": "fastuq.cli.calibrate",
    "replay": "fastuq.cli.replay",
    "report": "fastuq.cli.report",
    "bench": "fastuq.cli.bench",
    "pack": "fastuq.cli.pack",
}


def sample_corpus_path() -> Path:
    """Path of the bundled sample corpus (2,000 simulated debate and DyLAN trajectories)."""
    return Path(str(resources.files("fastuq") / "data" / "sample.parquet"))


def positive_int(text: str) -> int:
    """argparse type: an integer >= 1 (``--cpu-devices 0`` would silently mean one device,
    ``--chunk-rows 0`` nothing per chunk)."""
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected an integer >= 1, got {text!r}") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be at least 1, got {value}")
    return value


def fraction(text: str) -> float:
    """argparse type: a number in [0, 1]."""
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a number in [0, 1], got {text!r}") from None
    if not 0 <= value <= 1:
        raise argparse.ArgumentTypeError(f"must be in [0, 1], got {value}")
    return value


def version() -> str:
    """The installed fastuq's version (``importlib.metadata``; ``fastuq.__version__`` when
    the package metadata is missing, as in a bare source tree)."""
    try:
        return metadata.version("fastuq")
    except metadata.PackageNotFoundError:
        import fastuq

        return fastuq.__version__


def exit_status(exc: BaseException) -> int:
    """The exit status of a command that stopped with ``exc``, by the one rule of every
    subcommand: :data:`EXIT_USAGE` (2) for usage and input errors, :data:`EXIT_FAILED` (1)
    for a run that failed.

    Usage and input errors: ``ValueError`` (a bad option value, an invalid record or file,
    an output refused by :func:`fastuq.io.writers.check_outputs`), ``TypeError`` (an unknown
    parameter), ``ImportError`` (an optional extra such as matplotlib or Ray not installed)
    and the ``OSError`` s of a path that cannot be used (``FileNotFoundError``,
    ``IsADirectoryError``, ``NotADirectoryError``, ``PermissionError``). A run that failed:
    :class:`fastuq.errors.TooManySkipped` (the skip list is written, the scores are
    not), any other ``OSError`` (a write that failed: disk full, I/O error) and every other
    exception (an internal error)."""
    from fastuq.errors import TooManySkipped

    if isinstance(exc, TooManySkipped):
        return EXIT_FAILED
    if isinstance(exc, (ValueError, TypeError, ImportError, FileNotFoundError,
                        IsADirectoryError, NotADirectoryError, PermissionError)):
        return EXIT_USAGE
    return EXIT_FAILED


def _expected(exc: BaseException) -> bool:
    """Whether ``exc`` is an error fastuq reports in one line (else an internal error, whose
    traceback is printed)."""
    from fastuq.errors import TooManySkipped

    return exit_status(exc) == EXIT_USAGE or isinstance(exc, (TooManySkipped, OSError))


def build_parser() -> argparse.ArgumentParser:
    """The full argument parser, every subcommand included."""
    parser = argparse.ArgumentParser(
        prog="fastuq",
        description="Score the uncertainty of multi-agent LLM reasoning over rollout corpora.",
        epilog="Exit status: 0 success, 2 a usage or input error, 1 a run that failed.",
    )
    parser.add_argument("--version", action="version", version=f"fastuq {version()}")
    sub = parser.add_subparsers(dest="command", required=True)
    for module in COMMANDS.values():
        importlib.import_module(module).add_parser(sub)
    return parser


@contextlib.contextmanager
def _pack_warnings(prog: str) -> Iterator[None]:
    """A :class:`~fastuq.errors.PackWarning` (a pack whose source changed since, read
    without ``--source``) printed once, as ``PROG: warning: ...`` on stderr."""
    from fastuq.errors import PackWarning

    with warnings.catch_warnings():
        warnings.simplefilter("once", PackWarning)
        shown, said = warnings.showwarning, set()

        def show(message, category, filename, lineno, file=None, line=None):
            if issubclass(category, PackWarning):
                if str(message) not in said:  # once, whichever thread read the pack
                    said.add(str(message))
                    print(f"{prog}: warning: {message}", file=sys.stderr)
                return
            shown(message, category, filename, lineno, file, line)

        warnings.showwarning = show
        yield


def main(argv: list[str] | None = None) -> int:
    """Entry point of the ``fastuq`` command; returns the exit status (0 success, 2 a usage
    or input error, 1 a run that failed: :func:`exit_status`). An error a subcommand raises
    is printed as one line ``fastuq CMD: error: ...`` (an internal error also with its
    traceback); argparse's usage errors exit 2 by ``SystemExit``."""
    args = build_parser().parse_args(argv)
    from fastuq.io.writers import remove_temporaries_on_sigterm

    remove_temporaries_on_sigterm()  # a killed run leaves no temporary file behind
    prog = f"fastuq {args.command}"
    run = importlib.import_module(COMMANDS[args.command]).run
    device = getattr(args, "device", "auto")
    try:
        with _pack_warnings(prog):
            if device == "auto":  # no JAX import here (fastuq --help and import stay light)
                return run(args)
            from fastuq.engine.runtime import check_device, device_scope

            check_device(device)
            with device_scope(device):
                return run(args)
    except Exception as exc:  # noqa: BLE001 - every error gets the one exit-status rule
        if not _expected(exc):
            traceback.print_exc()
            print(f"{prog}: error: internal error ({type(exc).__name__}: {exc}); the "
                  "traceback is above", file=sys.stderr)
        else:
            print(f"{prog}: error: {exc}", file=sys.stderr)
        return exit_status(exc)


if __name__ == "__main__":
    sys.exit(main())
