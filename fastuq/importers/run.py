"""The run of an import shared by every format: each format's parser and extra columns,
one file's records (skipping bad ones when asked), the columns derived from them (with
math-verify's checks in worker processes for ``--math``), the files a format reads from
paths, repeated-id checks, and the table. :mod:`fastuq.importers` (its ``import_*``
functions and :func:`~fastuq.importers.import_logs`) calls :func:`import_files` and
:func:`import_groups`.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterable, Mapping
from contextlib import nullcontext
from functools import partial
from pathlib import Path

import pyarrow as pa

from fastuq.answers.check import (
    check_answers,
    math_verdicts,
    process_pool,
    recording_pairs,
    require_math_verify,
    seeded_verdicts,
)
from fastuq.importers.agora import parse_agora_file
from fastuq.importers.chateval import parse_chateval_file
from fastuq.importers.common import (
    AGENTS_FIELD,
    ParsedRecord,
    SkippedRecord,
    derive_columns,
    expand_paths,
    skipping,
    table_from_columns,
)
from fastuq.importers.du import parse_du_file
from fastuq.importers.dylan import parse_dylan_file
from fastuq.importers.ford import parse_ford_file
from fastuq.importers.generic import GenericMapping, load_mapping, parse_generic_file
from fastuq.importers.mad import is_mad_config, parse_mad_file
from fastuq.importers.mallm import MALLM_EXTRA, parse_mallm_file
from fastuq.importers.openai import parse_openai_file
from fastuq.importers.otel import OTEL_EXTRA, parse_otel_file
from fastuq.io.schema import CANONICAL

__all__ = ["EXTRA_FIELDS", "PathsLike", "file_names", "import_files", "import_groups", "log_files"]

PathsLike = str | os.PathLike | Iterable[str | os.PathLike]

_DYLAN_EXTRA = (pa.field("subject", pa.string()), pa.field("level", pa.int32()))
#: Each format's columns beyond the canonical ones (also: the formats an import runs).
EXTRA_FIELDS = {"dylan": _DYLAN_EXTRA, "du": (), "ford": (AGENTS_FIELD,),
                "agora": (AGENTS_FIELD,),
          "chateval": (AGENTS_FIELD,), "mad": (AGENTS_FIELD,), "generic": (AGENTS_FIELD,),
          "openai": (AGENTS_FIELD, *(CANONICAL.field(n) for n in (
              "seq_logprob", "n_tokens", "token_entropy", "answer_logprob", "predecessors",
              "token_logprobs", "topk_logprobs")),
                     pa.field("node_entropy", pa.list_(pa.list_(pa.float64())))),
          "mallm": MALLM_EXTRA, "otel": OTEL_EXTRA}
#: Columns of a format that only some imports fill (``openai``'s with ``topk``, or
#: ``predecessors``): dropped from the table when null in every row.
_OPTIONAL = ("predecessors", "token_logprobs", "topk_logprobs")


#: Formats whose parsers take the file's name for the trajectory ids.
_NAMED = ("ford", "agora", "chateval", "mad", "generic", "openai", "mallm", "otel")


def _parser(fmt: str, options: Mapping) -> Callable[..., list[ParsedRecord]]:
    if fmt == "dylan":
        return partial(parse_dylan_file, recover=options["recover"])
    if fmt == "chateval":
        return partial(parse_chateval_file, references=options.get("references"))
    if fmt == "generic":
        return partial(parse_generic_file, mapping=options["mapping"])
    if fmt == "openai":
        return partial(parse_openai_file, fields=options.get("fields"),
                       topk=options.get("topk", False))
    return {"du": parse_du_file, "ford": parse_ford_file, "agora": parse_agora_file,
            "mad": parse_mad_file, "mallm": parse_mallm_file, "otel": parse_otel_file}[fmt]


def _file_records(fmt: str, path: Path, options: Mapping, name: str, skip: bool = False
                  ) -> tuple[list[ParsedRecord] | None, list[SkippedRecord]]:
    """Parse one file, and what ``skip`` left out: its bad records, or the whole file
    (records ``None``) when the file itself cannot be read."""
    parse = _parser(fmt, options)
    skipped: list[SkippedRecord] = []
    try:
        with skipping(skipped) if skip else nullcontext():
            records = parse(path, name=name) if fmt in _NAMED else parse(path)
    except ValueError as exc:
        if not skip:
            raise
        return None, [SkippedRecord(str(path), None, str(exc))]
    for rec in records:  # the format, unless the parser knows better (a mapping's source)
        if rec.source is None:
            rec.source = fmt
    return records, skipped


def _file_columns(fmt: str, path: Path, math: bool, options: Mapping, name: str,
                  skip: bool = False) -> tuple[dict[str, list] | None, list[SkippedRecord]]:
    """Parse one file and derive its columns (the unit of work of a worker process)."""
    records, skipped = _file_records(fmt, path, options, name, skip)
    if records is None:
        return None, skipped
    columns = derive_columns(records, math=math, extra_names=[f.name for f in EXTRA_FIELDS[fmt]])
    return columns, skipped


def _file_pairs(fmt: str, path: Path, options: Mapping, name: str, skip: bool = False
                ) -> tuple[list[SkippedRecord], set, set]:
    """The dry run of one file (a worker's unit of work in :func:`_derive_math_pool`):
    what it skipped, and the math-verify pairs its vote classes and checks ask for."""
    records, skipped = _file_records(fmt, path, options, name, skip)
    if records is None:
        return skipped, set(), set()
    with recording_pairs() as wanted:
        derive_columns(records, math=True, extra_names=[f.name for f in EXTRA_FIELDS[fmt]])
    return skipped, wanted.classes, wanted.checks


def _file_seeded(fmt: str, path: Path, options: Mapping, name: str, skip: bool,
                 verdicts: Mapping[tuple[str, str], bool]
                 ) -> tuple[dict[str, list] | None, list[SkippedRecord], set, set]:
    """One file's columns derived with ``verdicts`` seeded (a worker's unit of work in
    :func:`_derive_math_pool`), and the pairs it asked for beyond them (answered "not
    equivalent" meanwhile)."""
    records, skipped = _file_records(fmt, path, options, name, skip)
    if records is None:
        return None, skipped, set(), set()
    with seeded_verdicts(verdicts), recording_pairs() as more:
        columns = derive_columns(records, math=True,
                                 extra_names=[f.name for f in EXTRA_FIELDS[fmt]])
    return columns, skipped, more.classes, more.checks


def _check_final_answers(columns: list[dict[str, list] | None],
                         checks: set[tuple[str, str]],
                         verdicts: dict[tuple[str, str], bool], processes: int | None) -> None:
    """The second round of a ``--math`` import: the (final answer, gold) pairs the dry run
    did not foresee (``checks``) are checked, added to ``verdicts``, and every file's
    ``correct`` is recomputed with them (in place)."""
    if not checks:
        return
    verdicts.update(math_verdicts(checks, processes))
    with seeded_verdicts(verdicts):
        for cols in columns:
            if cols is not None:
                cols["correct"] = check_answers(cols["final_answer"], cols["reference"],
                                                math=True).tolist()


def _derive_math_pool(fmts: list[str], files: list[Path], opts: list[Mapping],
                      names: list[str], skip: bool, processes: int
                      ) -> list[tuple[dict[str, list] | None, list]]:
    """:func:`_derive_math` with the files' parsing, dry run and derivation done in
    ``processes`` worker processes too (they are serial Python, some 15 s of the DyLAN
    MATH import in one process): every file parsed and dry run in a worker, the pairs of
    all files checked at once (:func:`math_verdicts`), then every file parsed again and
    derived in a worker with all the verdicts seeded. The columns are those of
    :func:`_derive_math` (the same dry run, the same verdicts, the same second round)."""
    n = len(files)
    workers = min(processes, n)
    skips = [skip] * n
    with process_pool(workers) as pool:
        dry = list(pool.map(_file_pairs, fmts, files, opts, names, skips))
    wanted: set[tuple[str, str]] = set()
    for _, classes, checks in dry:
        wanted |= classes | checks
    verdicts = math_verdicts(wanted, processes)
    while True:
        with process_pool(workers) as pool:
            done = list(pool.map(_file_seeded, fmts, files, opts, names, skips,
                                 [verdicts] * n, chunksize=max(1, n // (4 * workers))))
        classes = set().union(*(d[2] for d in done))
        checks = set().union(*(d[3] for d in done))
        if classes:  # not expected (the dry run asks for a superset): check, derive again
            verdicts = {**verdicts, **math_verdicts(classes | checks, processes)}
            continue
        columns = [d[0] for d in done]
        _check_final_answers(columns, checks, dict(verdicts), processes)
        break
    return [(cols, d[1]) for cols, d in zip(columns, done, strict=True)]


def _derive_math(fmts: list[str], parsed: list[tuple[list[ParsedRecord] | None, list]],
                 processes: int | None) -> list[tuple[dict[str, list] | None, list]]:
    """``derive_columns(math=True)`` of every file's records, with the math-verify checks
    done once per distinct pair for the whole import and spread over ``processes`` workers
    (:func:`fastuq.answers.check.math_verdicts`): a dry run collects the pairs the vote
    classes (and the final answers the dry run finds) need, they are checked at once, then
    the columns are derived with those verdicts; checks of final answers the dry run did
    not foresee are made in a second round, and ``correct`` recomputed. The columns are
    those a plain ``derive_columns(math=True)`` gives."""
    extra = {fmt: [f.name for f in EXTRA_FIELDS[fmt]] for fmt in set(fmts)}

    def derive() -> list[dict[str, list] | None]:
        return [None if recs is None else derive_columns(recs, math=True, extra_names=extra[f])
                for f, (recs, _) in zip(fmts, parsed, strict=True)]

    verdicts: dict[tuple[str, str], bool] = {}
    with recording_pairs() as wanted:
        derive()
    verdicts.update(math_verdicts(wanted.classes | wanted.checks, processes))
    while True:
        with seeded_verdicts(verdicts), recording_pairs() as more:
            columns = derive()
        if more.classes:  # not expected (the dry run asks for a superset): check, derive again
            verdicts.update(math_verdicts(more.classes | more.checks, processes))
            continue
        _check_final_answers(columns, more.checks, verdicts, processes)
        break
    return [(cols, skipped) for cols, (_, skipped) in zip(columns, parsed, strict=True)]


def file_names(files: list[Path]) -> list[str]:
    """Each file's name in trajectory ids: its path below the deepest folder all ``files``
    share, without its last suffix, ``/``-separated (``round0/copa_agreed`` for
    ``.../ford/round0/copa_agreed.jsonl`` among the files of ``.../ford``; the stem for a
    single file)."""
    parents = [f.absolute().parent for f in files]
    root = Path(os.path.commonpath(parents)) if parents else Path()
    return [(parent.relative_to(root) / f.stem).as_posix()
            for f, parent in zip(files, parents, strict=True)]


def _files(fmt: str, paths: PathsLike, options: Mapping) -> list[Path]:
    if fmt == "ford":
        return expand_paths(paths, (".jsonl",))
    if fmt == "agora":
        return expand_paths(paths, keep=lambda p: "_result" in p.name)
    if fmt == "mad":
        return expand_paths(paths, keep=lambda p: not is_mad_config(p))
    if fmt == "generic":
        return expand_paths(paths, options["mapping"].suffixes)
    if fmt == "otel":
        return expand_paths(paths, (".json", ".jsonl"))
    if fmt == "openai":
        return expand_paths(paths, (".jsonl",))
    return expand_paths(paths)


def log_files(fmt: str, paths: PathsLike, *,
              config: str | os.PathLike | Mapping | GenericMapping | None = None) -> list[Path]:
    """The files the importer of ``fmt`` reads for ``paths``: named files as they are, and
    of each folder (recursively, sorted, hidden files never) ``*.json`` (dylan, du,
    chateval, mallm), ``*.jsonl`` (ford, openai), ``*.json`` and ``*.jsonl`` (otel),
    ``*_result*.json`` (agora), ``*.json`` but MAD's ``*-config.json`` (mad), or the
    mapping's ``*.jsonl`` / ``*.parquet`` (generic, which needs ``config``)."""
    if fmt not in EXTRA_FIELDS:
        raise ValueError(f"unknown log format {fmt!r}; expected one of {sorted(EXTRA_FIELDS)}")
    options = {}
    if fmt == "generic":
        if config is None:
            raise ValueError("format 'generic' needs a mapping (config)")
        options["mapping"] = config if isinstance(config, GenericMapping) \
            else load_mapping(config)
    return _files(fmt, paths, options)


def import_files(fmt: str, paths: PathsLike, math: bool, processes: int | None,
                 progress: Callable[[int, int], None] | None = None, *,
                 on_error: str = "raise", skipped: list[SkippedRecord] | None = None,
                 **options) -> pa.Table:
    """Import the files ``paths`` name in format ``fmt`` (``options``: its parser's, already
    filled in) as one canonical table, checking ``processes`` and ``on_error`` first."""
    if processes is not None and (isinstance(processes, bool) or processes < 1):
        raise ValueError(f"processes must be a positive integer or None, got {processes!r}")
    if on_error not in ("raise", "skip"):
        raise ValueError(f"on_error must be 'raise' or 'skip', got {on_error!r}")
    if skipped is not None and on_error != "skip":
        raise ValueError("skipped (the list of skipped records) needs on_error='skip'")
    if math:
        require_math_verify()
    files = _files(fmt, paths, options)
    groups = {fmt: files}
    return import_groups(groups, file_names(files), math, processes, progress,
                          on_error=on_error, skipped=skipped, options={fmt: options})


def import_groups(groups: Mapping[str, list[Path]], names: list[str], math: bool,
                   processes: int | None, progress: Callable[[int, int], None] | None, *,
                   on_error: str, skipped: list[SkippedRecord] | None,
                   options: Mapping[str, Mapping]) -> pa.Table:
    """Import the files of each format of ``groups`` (``names``: every file's part of the
    trajectory ids, in the groups' order) into one table: the formats' tables one after the
    other, a column one format lacks null there."""
    skip = on_error == "skip"
    jobs = [(fmt, f) for fmt, files in groups.items() for f in files]
    n = len(jobs)
    parts = []
    fmts, files = [j[0] for j in jobs], [j[1] for j in jobs]
    opts = [options.get(fmt, {}) for fmt in fmts]
    if math:  # parse, then every distinct math-verify check once, over the workers
        if processes and processes > 1 and n > 1:
            parts = _derive_math_pool(fmts, files, opts, names, skip, processes)
        else:
            parsed = [_file_records(fmt, f, opt, name, skip)
                      for fmt, f, opt, name in zip(fmts, files, opts, names, strict=True)]
            parts = _derive_math(fmts, parsed, processes)
        if progress is not None:
            progress(n, n)
    elif processes and processes > 1 and n > 1:
        with process_pool(min(processes, n)) as pool:
            for part in pool.map(_file_columns, fmts, files, [math] * n, opts, names,
                                 [skip] * n):
                parts.append(part)
                if progress is not None:
                    progress(len(parts), n)
    else:
        for fmt, f, opt, name in zip(fmts, files, opts, names, strict=True):
            parts.append(_file_columns(fmt, f, math, opt, name, skip))
            if progress is not None:
                progress(len(parts), n)
    left_out = [k for _, part in parts for k in part]
    tables = []
    for fmt in groups:
        kept = [cols for f, (cols, _) in zip(fmts, parts, strict=True)
                if f == fmt and cols is not None]
        if not kept:
            kept = [derive_columns([], extra_names=[f.name for f in EXTRA_FIELDS[fmt]])]
        columns = {name: [v for part in kept for v in part[name]] for name in kept[0]}
        tables.append(table_from_columns(columns, EXTRA_FIELDS[fmt]))
    table = tables[0] if len(tables) == 1 else pa.concat_tables(tables,
                                                                promote_options="default")
    if len(groups) > 1 or next(iter(groups)) in _NAMED:
        dup = _check_unique(table.column("trajectory_id").to_pylist(), skip)
        if dup:
            keep = [i for i in range(table.num_rows) if i not in dup]
            left_out += [SkippedRecord("(import)", None, why) for why in dup.values()]
            table = table.take(pa.array(keep, pa.int64()))
    for name in _OPTIONAL:
        if name in table.column_names and table.column(name).null_count == table.num_rows:
            table = table.drop_columns([name])
    if skipped is not None:
        skipped.extend(left_out)
    return table


def _check_unique(ids: list[str], skip: bool = False) -> dict[int, str]:
    """Raise on the first trajectory id that repeats (``skip``: return ``{index: why}`` of
    every repeat after its first occurrence instead)."""
    seen: dict[str, int] = {}
    dup: dict[int, str] = {}
    for i, tid in enumerate(ids):
        first = seen.setdefault(tid, i)
        if first != i:
            why = (f"trajectory_id {tid!r} appears twice (trajectories {first} and {i} of the "
                   "import): a file given twice, or, with the generic mapping, trajectory "
                   "ids that repeat in the data")
            if not skip:
                raise ValueError(why)
            dup[i] = why
    return dup
