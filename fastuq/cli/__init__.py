"""The ``fastuq`` command line. ``fastuq --help`` does not import JAX.

Each subcommand lives in its own module ``fastuq.cli.<name>`` exposing
``add_parser(subparsers) -> None`` and ``run(args) -> int``; modules must not import JAX at
import time.
"""

from __future__ import annotations

import argparse
import importlib
import sys
from importlib import resources
from pathlib import Path

__all__ = ["COMMANDS", "main", "positive_int", "sample_corpus_path"]

#: Subcommands, in the order ``--help`` lists them, and their modules.
COMMANDS: dict[str, str] = {
    "score": "fastuq.cli.score",
    "import": "fastuq.cli.import_logs",
    "eval": "fastuq.cli.eval",
    "select": "fastuq.cli.select",
    "sweep": "fastuq.cli.sweep",
    "fit": "fastuq.cli.fit",
    "gate": "fastuq.cli.gate",
    "replay": "fastuq.cli.replay",
    "report": "fastuq.cli.report",
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


def build_parser() -> argparse.ArgumentParser:
    """The full argument parser, every subcommand included."""
    parser = argparse.ArgumentParser(
        prog="fastuq",
        description="Score the uncertainty of multi-agent LLM reasoning over rollout corpora.",
    )
    sub = parser.add_subparsers(dest="command", required=True)
    for module in COMMANDS.values():
        importlib.import_module(module).add_parser(sub)
    return parser


def main(argv: list[str] | None = None) -> int:
    """Entry point of the ``fastuq`` command; returns the exit status."""
    args = build_parser().parse_args(argv)
    from fastuq.io.writers import remove_temporaries_on_sigterm

    remove_temporaries_on_sigterm()  # a killed run leaves no temporary file behind
    run = importlib.import_module(COMMANDS[args.command]).run
    device = getattr(args, "device", "auto")
    if device == "auto":  # no JAX import here (fastuq --help and import stay light)
        return run(args)
    from fastuq.engine.runtime import check_device, device_scope

    try:
        check_device(device)
    except ValueError as exc:
        print(f"fastuq {args.command}: error: {exc}", file=sys.stderr)
        return 2
    with device_scope(device):
        return run(args)


if __name__ == "__main__":
    sys.exit(main())
