"""``fastuq import``: turn raw public debate logs into a canonical corpus (Parquet)."""

from __future__ import annotations

import argparse
import sys
import time
from collections import Counter
from contextlib import closing
from pathlib import Path

from fastuq.cli import fraction
from fastuq.cli import options as cs

#: The formats ``fastuq import`` takes (``fastuq.importers.FORMATS``, named here so that
#: ``fastuq --help`` imports no importer).
FORMATS = ("dylan", "du", "ford", "agora", "chateval", "mad", "generic", "mallm", "otel",
           "openai")
_INPUT_SUFFIXES = (".json", ".jsonl", ".parquet")


def add_parser(sub) -> None:
    """Register ``import`` on the subparsers ``sub``."""
    p = cs.subcommand(
        sub, "import",
        help="import raw debate logs (DyLAN, Du et al., FORD, LLM-Agora, ChatEval, MAD, "
             "OpenAI-shape responses with log-probabilities, or any layout through a "
             "mapping) into a canonical corpus file",
        description=(
            "Read raw multi-agent debate logs of FORMAT from SRC files or folders, parse every "
            "response's answer, and write one canonical record per trajectory to OUT (Parquet, "
            "written atomically), then print a summary. FORMAT: dylan (DyLAN's MATH logs), du "
            "(Du et al.'s {question: [agent_contexts, gold]} logs), ford (FORD's JSONL debate "
            "records), agora (LLM-Agora's *_result*.json), chateval (ChatEval's "
            "pair_comparison_results.json), mad (MAD's per-debate JSON files), mallm (MALLM's "
            "output JSON), otel (OpenTelemetry GenAI / OpenInference spans as OTLP JSON, "
            "agreement-only), openai (JSONL of chat-completions, legacy completions or Gemini "
            "responses with their log-probabilities, one per line, placed by --map fields), "
            "generic (any JSONL or Parquet layout, mapped by --config map.toml). Without FORMAT "
            "each file's "
            "format is told from the file and printed (generic, when --config is given); "
            "files of several formats import together, each with its own importer."
        ),
    )
    p.usage = "%(prog)s [FORMAT] SRC [SRC ...] -o OUT [options]"
    p.add_argument("src", nargs="+", metavar="SRC",
                   help="log files or folders, after the format when it is named: "
                        f"{' | '.join(FORMATS)} (detected when left out)")
    p.add_argument("-o", "--output", required=True, metavar="OUT", help="output Parquet file")
    p.add_argument("--math", action="store_true",
                   help="also count answers equivalent by math-verify (pip install "
                        "'fastuq[math]'); slower: some 15-40 ms of CPU per distinct pair, "
                        "each checked once, over --processes workers")
    cs.add_progress(p, ", per input file")
    cs.add_skip(p, default="OUT.skipped.jsonl beside -o OUT")
    p.add_argument("--max-skip-fraction", type=fraction, metavar="F",
                   help="with --on-error skip: fail (exit 1, no output written) when more "
                        "than this fraction of the records is skipped")
    p.add_argument("--processes", type=int, default=1, metavar="N",
                   help="worker processes, one input file at a time each, and with --math "
                        "the math-verify checks (default 1)")
    p.add_argument("--no-recover", dest="recover", action="store_false", default=None,
                   help="dylan: keep only the stored histories, do not fill dropped agents' "
                        "responses from the quotes in other agents' prompts")
    p.add_argument("--config", metavar="MAP.toml",
                   help="generic: the TOML mapping of the layout to the canonical columns "
                        "(keys: fastuq.importers.generic)")
    p.add_argument("--map", action="append", metavar="KEY=FIELD",
                   help="openai: the field (a dot-separated key path) a mapping key reads "
                        "(trajectory_id, round, agent, gold, protocol, question, "
                        "question_id, predecessors, response; repeatable), or a TOML file "
                        "with an [openai] table of them")
    p.add_argument("--topk", action="store_true", default=None,
                   help="openai: also keep token_logprobs and topk_logprobs (large)")
    p.add_argument("--references", metavar="FILE",
                   help="chateval: the run's input file (question and human_results per "
                        "record), for the gold of results that carry none")
    _intermixed(p)


def _intermixed(p: argparse.ArgumentParser) -> None:
    """Let ``p`` take its positionals on both sides of options (``fastuq import generic
    --config map.toml logs.jsonl``): argparse otherwise gives a ``nargs="+"`` positional
    only the words before the first option. The subcommand's parse becomes
    :meth:`argparse.ArgumentParser.parse_known_intermixed_args`, which itself calls
    ``parse_known_args``: that inner call gets the plain one."""
    inner = False

    def parse_known_args(args=None, namespace=None):
        nonlocal inner
        if inner:
            return argparse.ArgumentParser.parse_known_args(p, args, namespace)
        inner = True
        try:
            return argparse.ArgumentParser.parse_known_intermixed_args(p, args, namespace)
        finally:
            inner = False

    p.parse_known_args = parse_known_args


#: Options that belong to one format: (attribute, flag, format).
_FORMAT_OPTIONS = (("recover", "--no-recover", "dylan"), ("config", "--config", "generic"),
                   ("references", "--references", "chateval"), ("map", "--map", "openai"),
                   ("topk", "--topk", "openai"))


def parse_map(items: list[str]) -> dict[str, str] | str:
    """``--map`` values as a mapping ``{key: field}`` (``KEY=FIELD`` each), or the path of
    the one TOML file given instead; ValueError for anything else."""
    if len(items) == 1 and "=" not in items[0]:
        return items[0]
    out: dict[str, str] = {}
    for item in items:
        key, sep, value = item.partition("=")
        if not sep or not key or not value:
            raise ValueError(f"--map {item!r}: expected KEY=FIELD (or one TOML file)")
        if key in out:
            raise ValueError(f"--map gives {key!r} twice")
        out[key] = value
    return out


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
    if "source" in table.column_names:
        sources = Counter(table.column("source").to_pylist())
        lines.append("sources: " + ", ".join(f"{k} {v:,}" for k, v in
                                             sorted(sources.items(), key=lambda kv: str(kv[0]))))
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


def _split_format(src: list[str]) -> tuple[str | None, list[str]]:
    """(format or None, sources): the first token is the format when it names one and is not
    an existing path."""
    if src and src[0] in FORMATS and not Path(src[0]).exists():
        return src[0], src[1:]
    return None, src


def _argument_problem(fmt: str | None, src: list[str]) -> str | None:
    """A format name given twice (``fastuq import mad mad``, where a folder ``mad`` exists), a
    format name among the sources (``fastuq import mad ford x``), or a source given twice:
    an error about the argument, before anything is imported (rather than the duplicate
    trajectory ids that importing one folder twice gives)."""
    if fmt is not None and fmt in src:
        return f"the format name {fmt!r} is given twice: name the format once"
    seen: dict[Path, str] = {}
    for s in src:
        key = Path(s).resolve()
        if key in seen:
            if s in FORMATS and seen[key] == s:  # fastuq import mad mad, a folder mad here
                return (f"the format name {s!r} is given twice, and {s!r} is a folder here, "
                        f"which a leading name means: name the folder once, its files' "
                        f"formats are detected (fastuq import ./{s} -o OUT)")
            same = "" if seen[key] == s else f" (as {seen[key]!r})"
            return f"{s!r} is given twice{same}: name each log file or folder once"
        seen[key] = s
    for s in src:
        if s in FORMATS and not Path(s).exists():
            what = f"after the format {fmt}" if fmt else "among the logs"
            return (f"{s!r} {what} is a format name, not a file or folder: name one format, "
                    f"first (fastuq import FORMAT SRC...), or none to detect each file's")
    return None


def _skip_lines(skipped) -> str:
    """The skip list as JSON Lines: ``source`` (the file), ``row`` (the record's index in it,
    null for a whole file), ``trajectory_id`` (null: not known for a record that did not
    parse) and ``reason``."""
    import json

    return "".join(json.dumps({"source": k.source, "row": k.record, "trajectory_id": None,
                               "reason": k.reason}) + "\n" for k in skipped)


def run(args: argparse.Namespace) -> int:
    """Run ``fastuq import``; returns the exit status."""
    from fastuq.engine.files import ProgressBar
    from fastuq.io.writers import atomic_write_parquet, cli_check_outputs

    prog = "fastuq import"
    fmt, src = _split_format(list(args.src))
    if not src:
        return cs.fail(prog, f"give the logs to import after {fmt} (files or folders)")
    if args.processes < 1:
        print(f"{prog}: --processes must be at least 1", file=sys.stderr)
        return 2
    problem = _argument_problem(fmt, src)
    if problem is not None:
        return cs.fail(prog, problem)
    if args.on_error != "skip":
        for flag, value in (("--skipped", args.skipped),
                            ("--max-skip-fraction", args.max_skip_fraction)):
            if value is not None:
                return cs.fail(prog, f"{flag} only applies with --on-error skip")
    side = None
    if args.on_error == "skip":
        side = Path(args.skipped) if args.skipped else Path(args.output + ".skipped.jsonl")
    if fmt is None and args.config is not None:
        fmt = "generic"
    for attr, flag, owner in _FORMAT_OPTIONS:
        if fmt is not None and getattr(args, attr) is not None and fmt != owner:
            return cs.fail(prog, f"{flag} is for {owner} logs, not {fmt}")
    if fmt == "generic" and args.config is None:
        return cs.fail(prog, "generic needs --config MAP.toml (the mapping of the layout)")
    map_file = args.map[0] if args.map and len(args.map) == 1 and "=" not in args.map[0] \
        else None
    rc = cli_check_outputs(prog, [*src, args.config, args.references, map_file],
                           [("-o", args.output, "parquet"), ("--skipped", side, "jsonl")],
                           reads=lambda p: p.name.endswith(_INPUT_SUFFIXES)
                           and not p.name.startswith("."))
    if rc is not None:
        return rc
    from fastuq.importers import detect_each, load_mapping, log_files
    from fastuq.importers.chateval import read_references

    found = [fmt]
    if fmt is None:
        try:
            groups, _ = detect_each(src)
        except (ValueError, FileNotFoundError) as exc:
            return cs.fail(prog, exc)
        found = list(groups)
        for attr, flag, owner in _FORMAT_OPTIONS:
            if getattr(args, attr) is not None and owner not in found:
                first = next(iter(groups.values()))[0]
                return cs.fail(prog, f"{flag} is for {owner} logs, and "
                               + (f"{first} reads as {found[0]}" if len(found) == 1 else
                                  f"the logs read as {', '.join(found)}"))
        if len(found) == 1:
            fmt = found[0]
            print(f"detected format: {fmt} (from {groups[fmt][0]})")
        else:
            fmt = "auto"
            print("detected formats: " + ", ".join(
                f"{f} ({len(files):,} file{'s' if len(files) != 1 else ''}, from "
                f"{files[0]})" for f, files in groups.items()))
    options: dict = {}
    try:
        if "dylan" in found:
            options["recover"] = args.recover is not False
        if "generic" in found:
            options["config"] = load_mapping(args.config)
        if "chateval" in found and args.references is not None:
            options["references"] = read_references(args.references)
        if "openai" in found:
            from fastuq.importers.openai import load_fields

            options["fields"] = load_fields(None if args.map is None else parse_map(args.map))
            options["topk"] = bool(args.topk)
    except (ValueError, FileNotFoundError) as exc:
        return cs.fail(prog, exc)
    if fmt != "auto":
        try:
            log_files(fmt, src, config=options.get("config"))
        except (ValueError, FileNotFoundError) as exc:
            return cs.fail(prog, exc)
    if args.math:
        import logging

        logging.getLogger("math_verify").setLevel(logging.ERROR)  # per-pair timeout notices
    from fastuq.importers import import_logs
    from fastuq.io.writers import atomic_write_text

    start = time.perf_counter()
    skipped: list | None = [] if args.on_error == "skip" else None
    try:
        with closing(ProgressBar(args.progress, unit="files")) as bar:
            table = import_logs(fmt, src, math=args.math, processes=args.processes,
                                progress=bar, on_error=args.on_error, skipped=skipped,
                                **options)
        if side is not None:
            atomic_write_text(side, _skip_lines(skipped))
            n_in = table.num_rows + len(skipped)
            too_many = None
            if skipped and not table.num_rows:
                too_many = f"every record ({n_in:,}) was skipped"
            elif skipped and args.max_skip_fraction is not None and \
                    len(skipped) > args.max_skip_fraction * n_in:
                too_many = (f"{len(skipped):,} of {n_in:,} records ({len(skipped) / n_in:.2%}) "
                            f"were skipped, more than --max-skip-fraction "
                            f"{args.max_skip_fraction}")
            if too_many is not None:
                return cs.fail(prog, f"{too_many}; nothing written to {args.output}; the "
                                     f"skipped records and their reasons are listed in {side}",
                               1)
        atomic_write_parquet(table, Path(args.output))
    except (ValueError, FileNotFoundError, ImportError, OSError) as exc:
        return cs.fail(prog, exc)
    print(summarize(table, time.perf_counter() - start))
    if skipped:
        print(f"skipped {len(skipped):,} record(s) (or unreadable files), listed with their "
              f"reasons in {side}")
    print(f"wrote {args.output}")
    return 0
