"""``fastuq import``: turn raw public debate logs into a canonical corpus (Parquet)."""

from __future__ import annotations

import argparse
import sys
import time
from collections import Counter
from contextlib import closing
from pathlib import Path

from fastuq.cli import options as cs

FORMATS = ("dylan", "du")


def add_parser(sub) -> None:
    """Register ``import`` on the subparsers ``sub``."""
    p = cs.subcommand(
        sub, "import",
        help="import raw debate logs (DyLAN, Du et al.) into a canonical corpus file",
        description=(
            "Read raw multi-agent debate logs of FORMAT (dylan: DyLAN's MATH logs; du: Du et "
            "al.'s {question: [agent_contexts, gold]} logs) from SRC files or folders, parse "
            "every response's answer, and write one canonical record per trajectory to OUT "
            "(Parquet, written atomically), then print a summary."
        ),
    )
    p.add_argument("format", choices=FORMATS, metavar="FORMAT", help="dylan | du")
    p.add_argument("src", nargs="+", metavar="SRC",
                   help="log files, or folders (their *.json files, recursively)")
    p.add_argument("-o", "--output", required=True, metavar="OUT", help="output Parquet file")
    p.add_argument("--math", action="store_true",
                   help="also count answers equivalent by math-verify (pip install "
                        "'fastuq[math]'); slower: some 40 ms per distinct pair")
    cs.add_progress(p, ", per input file")
    p.add_argument("--processes", type=int, default=1, metavar="N",
                   help="worker processes, one input file at a time each (default 1)")
    p.add_argument("--no-recover", dest="recover", action="store_false",
                   help="dylan: keep only the stored histories, do not fill dropped agents' "
                        "responses from the quotes in other agents' prompts")


def summarize(table, seconds: float | None = None) -> str:
    """Human-readable summary of an imported corpus table."""
    import numpy as np

    texts = table.column("texts").to_pylist()
    answers = table.column("answers").to_pylist()
    flags = table.column("flags").to_pylist()
    n = table.num_rows
    shapes: Counter[tuple[int, ...]] = Counter(
        tuple(sum(t is not None for t in row) for row in rec) for rec in texts
    )
    n_texts = sum(t is not None for rec in texts for row in rec for t in row)
    n_unparsed = sum(t is not None and a is None
                     for rec_t, rec_a in zip(texts, answers, strict=True)
                     for row_t, row_a in zip(rec_t, rec_a, strict=True)
                     for t, a in zip(row_t, row_a, strict=True))
    flag_counts = Counter(f for fs in flags for f in fs)
    took = f" in {seconds:.2f} s" if seconds is not None else ""
    lines = [f"imported {n:,} trajectories{took}"]
    protos = Counter(table.column("protocol").to_pylist())
    lines.append("protocols: " + ", ".join(f"{k} {v:,}" for k, v in sorted(protos.items())))
    lines.append("shapes (responses per round: trajectories):")
    for shape, count in sorted(shapes.items(), key=lambda kv: (len(kv[0]), kv[0])):
        lines.append(f"  {list(shape)}: {count:,}")
    if n:
        correct = np.asarray(table.column("correct").to_numpy(zero_copy_only=False), bool)
        lines.append(f"accuracy {correct.mean():.4f} ({int(correct.sum()):,} of {n:,})")
    lines.append(f"unparseable answers: {n_unparsed:,} of {n_texts:,} responses; "
                 f"records with a round where nothing parses: "
                 f"{flag_counts.get('unparseable_round', 0):,}")
    if flag_counts:
        lines.append("flags: " + ", ".join(f"{k} {v:,}" for k, v in sorted(flag_counts.items())))
    return "\n".join(lines)


def _import_with_progress(args: argparse.Namespace, bar) -> object:
    """The imported table, file group by file group, reporting files done to ``bar``.

    One importer call per group of files (``processes`` files per worker each), so parallel
    imports stay parallel; the tables are concatenated in file order, as one call would
    give them."""
    import pyarrow as pa

    from fastuq.importers import import_du, import_dylan
    from fastuq.importers.common import expand_paths

    files = expand_paths(args.src)
    group = 1 if args.processes <= 1 else 4 * args.processes
    parts = []
    for k in range(0, len(files), group):
        some = files[k:k + group]
        if args.format == "dylan":
            parts.append(import_dylan(some, math=args.math, processes=args.processes,
                                      recover=args.recover))
        else:
            parts.append(import_du(some, math=args.math, processes=args.processes))
        bar(k + len(some), len(files))
    return pa.concat_tables(parts)


def run(args: argparse.Namespace) -> int:
    """Run ``fastuq import``; returns the exit status."""
    from fastuq.engine.scoring import ProgressBar
    from fastuq.importers.common import expand_paths
    from fastuq.io.writers import atomic_write_parquet, cli_check_outputs

    prog = "fastuq import"
    if args.processes < 1:
        print(f"{prog}: --processes must be at least 1", file=sys.stderr)
        return 2
    rc = cli_check_outputs(prog, args.src, [("-o", args.output, "parquet")],
                           reads=lambda p: p.name.endswith(".json")
                           and not p.name.startswith("."))
    if rc is not None:
        return rc
    try:
        expand_paths(args.src)
    except (ValueError, FileNotFoundError) as exc:
        return cs.fail(prog, exc, 1)
    if args.math:
        import logging

        logging.getLogger("math_verify").setLevel(logging.ERROR)  # per-pair timeout notices
    start = time.perf_counter()
    try:
        with closing(ProgressBar(args.progress, unit="files")) as bar:
            table = _import_with_progress(args, bar)
        atomic_write_parquet(table, Path(args.output))
    except (ValueError, FileNotFoundError, ImportError, OSError) as exc:
        return cs.fail(prog, exc, 1)
    print(summarize(table, time.perf_counter() - start))
    print(f"wrote {args.output}")
    return 0
