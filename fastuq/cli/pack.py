"""``fastuq pack``: pack a corpus once (validated, inputs derived, Arrow IPC) for repeated
runs; or check a pack against its files and its source."""

from __future__ import annotations

import argparse

from fastuq.cli import options as cs
from fastuq.cli import positive_int


def add_parser(sub) -> None:
    """Register ``pack`` on the subparsers ``sub``."""
    p = cs.subcommand(
        sub, "pack",
        help="pack a corpus once for repeated score/eval/select runs (memory-mapped reads)",
        description=(
            "Check CORPUS as a scoring run does, build its packed inputs once (padded "
            "per-round and per-node arrays, masks, vote classes, agreement from answers, "
            "entropies from top-k log-probabilities) and write them with its columns as one "
            "uncompressed Arrow IPC file per chunk and a manifest, atomically. Every command "
            "that reads a corpus then takes the pack in its place, with bit-identical "
            "results. With --verify PACK: check a pack against its manifest (and, with "
            "--source, against the corpus it was packed from) and exit 2 with the reason "
            "when it does not match."
        ),
    )
    p.add_argument("input", nargs="?", help="corpus file, folder of corpus files")
    p.add_argument("-o", "--output", help="the pack folder to write (e.g. corpus.fqpack)")
    p.add_argument("--chunk-rows", type=positive_int, default=1 << 18,
                   help="trajectories per chunk file (default 262144)")
    p.add_argument("--math", action="store_true",
                   help="build the answer classes with math-verify equivalence (as --math)")
    p.add_argument("--verify", metavar="PACK", help="check PACK instead of packing")
    p.add_argument("--source", metavar="CORPUS",
                   help="with --verify: the corpus PACK was made from; refuse if it changed")
    p.add_argument("--hashes", action="store_true",
                   help="with --verify: also compare every chunk file's SHA-256")


def run(args: argparse.Namespace) -> int:
    """Run ``fastuq pack``; returns the exit status."""
    import sys

    from fastuq.cli import EXIT_USAGE
    from fastuq.engine.packed import check_pack, pack_corpus

    prog = "fastuq pack"
    if args.verify:
        if args.input or args.output:
            print(f"{prog}: --verify takes no INPUT or --output", file=sys.stderr)
            return EXIT_USAGE
        try:
            m = check_pack(args.verify, source=args.source, verify=args.hashes)
        except (ValueError, OSError) as exc:
            print(f"{prog}: {exc}", file=sys.stderr)
            return EXIT_USAGE
        print(f"{args.verify}: pack of {m['rows']:,} trajectories in {len(m['chunks'])} "
              f"chunks matches its files" + (" and its source" if args.source else ""))
        return 0
    if args.source or args.hashes:
        print(f"{prog}: --source and --hashes go with --verify", file=sys.stderr)
        return EXIT_USAGE
    if not args.input or not args.output:
        print(f"{prog}: give INPUT and -o PACK (or --verify PACK)", file=sys.stderr)
        return EXIT_USAGE
    m = pack_corpus(args.input, args.output, chunk_rows=args.chunk_rows, math=args.math)
    ratio = m["pack_bytes"] / max(m["source_bytes"], 1)
    print(f"{args.output}: {m['rows']:,} trajectories in {len(m['chunks'])} chunks, "
          f"{m['pack_bytes'] / 2**20:,.1f} MiB on disk ({ratio:.2f}x the source's "
          f"{m['source_bytes'] / 2**20:,.1f} MiB), {m['seconds']:.2f} s")
    return 0
