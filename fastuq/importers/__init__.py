"""Importers for raw public multi-agent debate logs, producing canonical corpus tables.

* :func:`import_dylan`: DyLAN's MATH logs (SALT-NLP/DyLAN ``exp/MATH/CoT``); protocol
  ``"dylan"``, a team of 4, early stopping and pruning reconstructed into fixed agent slots
  (details, flags and the recovery of dropped responses: ``fastuq.importers.dylan``).
* :func:`import_du`: Du et al.'s multi-agent debate logs (``{question: [agent_contexts,
  gold]}``); protocol ``"debate"``, source ``"du"``.
* :func:`import_ford`: FORD's two-agent (and round-table) debates, JSONL records with
  per-turn parsed answers ``P`` (Waste-Wood/FORD); protocol ``"debate"``, source ``"ford"``
  (``fastuq.importers.ford``).
* :func:`import_agora`: LLM-Agora's ``*_result*.json`` files (gauss5930/LLM-Agora);
  protocol ``"debate"``, source ``"agora"`` (``fastuq.importers.agora``).
* :func:`import_chateval`: ChatEval's ``pair_comparison_results.json`` (thunlp/ChatEval),
  referees' verdicts as labels; protocol ``"debate"``, source ``"chateval"``
  (``fastuq.importers.chateval``).
* :func:`import_mad`: MAD debate files (Skytliang/Multi-Agents-Debate), answers as letters
  or short labels; protocol ``"debate"``, source ``"mad"`` (``fastuq.importers.mad``).
* :func:`import_openai`: JSONL of OpenAI-shape responses (chat completions, legacy
  completions, Gemini ``generateContent``) with their log-probabilities, one response per
  line placed by mapped fields; protocol ``"debate"`` unless a line says, source
  ``"openai"`` (``fastuq.importers.openai``).
* :func:`import_generic`: any JSONL or Parquet layout with rounds and agents, through a
  TOML mapping (``fastuq.importers.generic`` documents every key).

:func:`detect_format` tells a log's format from its first file (``fastuq.importers.detect``);
:func:`import_logs` dispatches by format name.

All return one row per trajectory with the canonical columns ``trajectory_id``,
``question_id``, ``protocol`` (the interaction structure, which picks presets), ``source``
(the log format: metadata only), ``n_agents``, ``reference``, ``final_answer``, ``correct``,
``agreement``, ``answers``, ``texts`` and ``flags`` (no ``token_entropy``: the logs carry no
log-probabilities), plus ``question`` (the problem text), for DyLAN ``subject`` and
``level``, and for the other new formats ``agents`` (the agents' names by slot). How
answers, agreement, the final answer and correctness are derived (and why a round without
any parseable answer gets agreement 0 and the flag ``unparseable_round``):
``fastuq.importers.common``. Write a table with ``fastuq import`` or
``pyarrow.parquet.write_table``.

Malformed files raise ``ValueError`` naming the file and, for a bad record, its index, an
excerpt of its key (the question) and the field.
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
from fastuq.importers.chateval import parse_chateval_file, read_references
from fastuq.importers.common import (
    AGENTS_FIELD,
    ParsedRecord,
    SkippedRecord,
    derive_columns,
    expand_paths,
    question_id,
    skipping,
    table_from_columns,
)
from fastuq.importers.detect import DETECTABLE, detect_each, detect_format
from fastuq.importers.du import parse_du_file, parse_gold
from fastuq.importers.dylan import TEAM_SIZE, parse_dylan_file
from fastuq.importers.ford import parse_ford_file
from fastuq.importers.generic import GenericMapping, load_mapping, parse_generic_file
from fastuq.importers.mad import is_mad_config, parse_mad_file
from fastuq.importers.openai import load_fields, parse_openai_file
from fastuq.io.schema import CANONICAL

__all__ = ["DETECTABLE", "FORMATS", "OPTIONS", "TEAM_SIZE", "detect_each", "detect_format",
           "import_agora",
           "import_chateval", "import_du", "import_dylan", "import_ford", "import_generic",
           "import_logs", "import_mad", "import_openai", "load_mapping", "log_files", "parse_gold",
           "question_id"]

PathsLike = str | os.PathLike | Iterable[str | os.PathLike]

_DYLAN_EXTRA = (pa.field("subject", pa.string()), pa.field("level", pa.int32()))
_EXTRA = {"dylan": _DYLAN_EXTRA, "du": (), "ford": (AGENTS_FIELD,), "agora": (AGENTS_FIELD,),
          "chateval": (AGENTS_FIELD,), "mad": (AGENTS_FIELD,), "generic": (AGENTS_FIELD,),
          "openai": (AGENTS_FIELD, *(CANONICAL.field(n) for n in (
              "seq_logprob", "n_tokens", "token_entropy", "answer_logprob", "predecessors",
              "token_logprobs", "topk_logprobs")),
                     pa.field("node_entropy", pa.list_(pa.list_(pa.float64()))))}
#: Columns of a format that only some imports fill (``openai``'s with ``topk``, or
#: ``predecessors``): dropped from the table when null in every row.
_OPTIONAL = ("predecessors", "token_logprobs", "topk_logprobs")


#: Formats whose parsers take the file's name for the trajectory ids.
_NAMED = ("ford", "agora", "chateval", "mad", "generic", "openai")


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
            "mad": parse_mad_file}[fmt]


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
    columns = derive_columns(records, math=math, extra_names=[f.name for f in _EXTRA[fmt]])
    return columns, skipped


def _file_pairs(fmt: str, path: Path, options: Mapping, name: str, skip: bool = False
                ) -> tuple[list[SkippedRecord], set, set]:
    """The dry run of one file (a worker's unit of work in :func:`_derive_math_pool`):
    what it skipped, and the math-verify pairs its vote classes and checks ask for."""
    records, skipped = _file_records(fmt, path, options, name, skip)
    if records is None:
        return skipped, set(), set()
    with recording_pairs() as wanted:
        derive_columns(records, math=True, extra_names=[f.name for f in _EXTRA[fmt]])
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
        columns = derive_columns(records, math=True, extra_names=[f.name for f in _EXTRA[fmt]])
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
    extra = {fmt: [f.name for f in _EXTRA[fmt]] for fmt in set(fmts)}

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
    if fmt == "openai":
        return expand_paths(paths, (".jsonl",))
    return expand_paths(paths)


def log_files(fmt: str, paths: PathsLike, *,
              config: str | os.PathLike | Mapping | GenericMapping | None = None) -> list[Path]:
    """The files the importer of ``fmt`` reads for ``paths``: named files as they are, and
    of each folder (recursively, sorted, hidden files never) ``*.json`` (dylan, du,
    chateval), ``*.jsonl`` (ford), ``*_result*.json`` (agora), ``*.json`` but MAD's
    ``*-config.json`` (mad), ``*.jsonl`` (openai), or the mapping's ``*.jsonl`` /
    ``*.parquet`` (generic, which needs ``config``)."""
    if fmt not in FORMATS:
        raise ValueError(f"unknown log format {fmt!r}; expected one of {sorted(FORMATS)}")
    options = {}
    if fmt == "generic":
        if config is None:
            raise ValueError("format 'generic' needs a mapping (config)")
        options["mapping"] = config if isinstance(config, GenericMapping) \
            else load_mapping(config)
    return _files(fmt, paths, options)


def _import(fmt: str, paths: PathsLike, math: bool, processes: int | None,
            progress: Callable[[int, int], None] | None = None, *,
            on_error: str = "raise", skipped: list[SkippedRecord] | None = None,
            **options) -> pa.Table:
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
    return _import_groups(groups, file_names(files), math, processes, progress,
                          on_error=on_error, skipped=skipped, options={fmt: options})


def _import_groups(groups: Mapping[str, list[Path]], names: list[str], math: bool,
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
            kept = [derive_columns([], extra_names=[f.name for f in _EXTRA[fmt]])]
        columns = {name: [v for part in kept for v in part[name]] for name in kept[0]}
        tables.append(table_from_columns(columns, _EXTRA[fmt]))
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


def import_dylan(paths: PathsLike, *, math: bool = False, processes: int | None = None,
                 recover: bool = True) -> pa.Table:
    """Canonical table of DyLAN MATH logs.

    Args:
      paths: a file, a folder (its ``*.json`` files, recursively, sorted) or several of
        either.
      math: also accept answers that math-verify proves equivalent, both when grouping a
        round's answers into votes and when checking the final answer against the gold
        (needs ``pip install 'fastuq[math]'``; some 40 ms per distinct pair).
      processes: worker processes, one file at a time each (``None`` or 1: this process;
        see :func:`fastuq.answers.check.process_pool` for how they start).
      recover: fill the nodes of agents whose history the file dropped from the verbatim
        quotes in the other agents' prompts (flag ``from_prompts``).

    Raises:
      ValueError: malformed JSON or a record of the wrong structure (the message names the
        file and the record).
      FileNotFoundError: a path does not exist.
      ImportError: ``math=True`` without math-verify.
    """
    return _import("dylan", paths, math, processes, recover=recover)


def import_du(paths: PathsLike, *, math: bool = False,
              processes: int | None = None) -> pa.Table:
    """Canonical table of Du et al.'s multi-agent debate logs (arguments as
    :func:`import_dylan`)."""
    return _import("du", paths, math, processes)


def import_ford(paths: PathsLike, *, math: bool = False,
                processes: int | None = None) -> pa.Table:
    """Canonical table of FORD debate records (``fastuq.importers.ford``): ``paths`` are
    JSONL files or folders (their ``*.jsonl`` files); the other arguments as
    :func:`import_dylan`."""
    return _import("ford", paths, math, processes)


def import_agora(paths: PathsLike, *, math: bool = False,
                 processes: int | None = None) -> pa.Table:
    """Canonical table of LLM-Agora result files (``fastuq.importers.agora``): a folder
    stands for its ``*_result*.json`` files; the other arguments as :func:`import_dylan`."""
    return _import("agora", paths, math, processes)


def import_chateval(paths: PathsLike, *, math: bool = False, processes: int | None = None,
                    references: str | os.PathLike | Mapping[str, str] | None = None
                    ) -> pa.Table:
    """Canonical table of ChatEval pairwise-comparison results
    (``fastuq.importers.chateval``).

    Args:
      paths: ``pair_comparison_results.json`` files, or folders (their ``*.json`` files).
      references: the run's input file (FairEval's ``test.json``: ``question`` and
        ``human_results`` per record), for the gold of results that carry none; or its
        :func:`~fastuq.importers.chateval.read_references` ``{question: gold}``.
      math, processes: as :func:`import_dylan`.
    """
    if references is None or isinstance(references, Mapping):
        refs = None if references is None else dict(references)
    else:
        refs = read_references(references)
    return _import("chateval", paths, math, processes, references=refs)


def import_mad(paths: PathsLike, *, math: bool = False,
               processes: int | None = None) -> pa.Table:
    """Canonical table of MAD debate files (``fastuq.importers.mad``): one debate per
    ``{id}.json`` (a folder's ``*-config.json`` prompt files are skipped); the other
    arguments as :func:`import_dylan`."""
    return _import("mad", paths, math, processes)


def import_generic(paths: PathsLike, *, config: str | os.PathLike | Mapping | GenericMapping,
                   math: bool = False, processes: int | None = None) -> pa.Table:
    """Canonical table of JSONL or Parquet files under a generic mapping
    (``fastuq.importers.generic`` documents every key).

    Args:
      paths: files, or folders (their ``*.jsonl`` / ``*.parquet`` files, as the mapping's
        ``input.format`` allows).
      config: the mapping: a TOML file, its parsed ``dict``, or a
        :class:`~fastuq.importers.generic.GenericMapping`.
      math, processes: as :func:`import_dylan`.
    """
    mapping = config if isinstance(config, GenericMapping) else load_mapping(config)
    return _import("generic", paths, math, processes, mapping=mapping)


def import_openai(paths: PathsLike, *, fields: str | os.PathLike | Mapping[str, str] |
                  None = None, topk: bool = False, math: bool = False,
                  processes: int | None = None) -> pa.Table:
    """Canonical table of JSONL logs of OpenAI-shape responses with log-probabilities
    (``fastuq.importers.openai`` documents the shapes, the fields and the columns).

    Args:
      paths: JSONL files, or folders (their ``*.jsonl`` files).
      fields: the fields that place a response in a debate: a ``dict`` of mapping keys to
        key paths, or a TOML file with an ``[openai]`` table (defaults:
        :data:`fastuq.importers.openai.DEFAULT_FIELDS`).
      topk: also keep ``token_logprobs`` and ``topk_logprobs``.
      math, processes: as :func:`import_dylan`.
    """
    return _import("openai", paths, math, processes, fields=load_fields(fields), topk=topk)


def _import_mixed(groups: Mapping[str, list[Path]], math: bool, processes: int | None,
                  progress: Callable[[int, int], None] | None, *, on_error: str,
                  skipped: list[SkippedRecord] | None, **options) -> pa.Table:
    """Files of several formats, each format's with its own importer (``options``: each
    format's own, given once; one no detected format takes raises ``TypeError``)."""
    takes = {o for fmt in groups for o in OPTIONS[fmt]}
    unknown = sorted(set(options) - takes)
    if unknown:
        raise TypeError(f"none of the formats found ({', '.join(groups)}) takes option "
                        f"{unknown[0]!r}")
    per = {fmt: _format_options(fmt, {k: v for k, v in options.items()
                                      if k in OPTIONS[fmt]}) for fmt in groups}
    every = [f for files in groups.values() for f in files]
    return _import_groups(groups, file_names(every), math, processes, progress,
                          on_error=on_error, skipped=skipped, options=per)


def _format_options(fmt: str, options: dict) -> dict:
    """A format's own options with their defaults filled in: DyLAN's ``recover`` (True) and
    ChatEval's ``references`` read into a dict (from a file or folder when not a mapping);
    other formats' options as given."""
    if fmt == "dylan":
        return {"recover": options.get("recover", True)}
    if fmt == "chateval":
        refs = options.get("references")
        if refs is not None and not isinstance(refs, Mapping):
            refs = read_references(refs)
        return {"references": None if refs is None else dict(refs)}
    if fmt == "openai":
        return {"fields": load_fields(options.get("fields")),
                "topk": bool(options.get("topk", False))}
    return options


#: Importers by format name, as ``fastuq import FORMAT`` takes them.
FORMATS = {"dylan": import_dylan, "du": import_du, "ford": import_ford,
           "agora": import_agora, "chateval": import_chateval, "mad": import_mad,
           "generic": import_generic, "openai": import_openai}

#: The options each format takes beyond ``math`` and ``processes``.
OPTIONS = {"dylan": ("recover",), "du": (), "ford": (), "agora": (),
           "chateval": ("references",), "mad": (), "generic": ("config",),
           "openai": ("fields", "topk")}


def import_logs(fmt: str, paths: PathsLike, *, math: bool = False,
                processes: int | None = None,
                progress: Callable[[int, int], None] | None = None,
                on_error: str = "raise", skipped: list[SkippedRecord] | None = None,
                **options) -> pa.Table:
    """Dispatch to the importer of ``fmt`` (a key of :data:`FORMATS`; ``"auto"``: the
    format :func:`detect_format` tells); ``options`` are that importer's own keywords
    (:data:`OPTIONS`), and any other raises ``TypeError`` naming it. ``progress(done,
    total)`` is called after each file.

    ``on_error="skip"``: a bad record is left out instead of stopping the import (a file
    that cannot be read at all, malformed JSON for one, is left out whole, but a JSONL line
    that is not JSON is one bad record; a trajectory id that repeats an earlier one is left
    out too), and each is appended, with the message
    that names it, to ``skipped`` (:class:`~fastuq.importers.common.SkippedRecord`:
    ``source`` file, ``record`` index or ``None`` for a whole file, ``reason``)."""
    if fmt == "auto":
        groups, _ = detect_each(paths)
        if len(groups) > 1:
            return _import_mixed(groups, math, processes, progress, on_error=on_error,
                                 skipped=skipped, **options)
        fmt = next(iter(groups))
    if fmt not in FORMATS:
        raise ValueError(f"unknown log format {fmt!r}; expected one of {sorted(FORMATS)}")
    unknown = sorted(set(options) - set(OPTIONS[fmt]))
    if unknown:
        raise TypeError(f"format {fmt!r} takes no option {unknown[0]!r} (its options: "
                        f"{', '.join(OPTIONS[fmt]) or 'none'})")
    options = _format_options(fmt, options)
    if fmt == "generic":
        if "config" not in options:
            raise TypeError("format 'generic' needs config= (the mapping)")
        config = options["config"]
        options = {"mapping": config if isinstance(config, GenericMapping)
                   else load_mapping(config)}
    return _import(fmt, paths, math, processes, progress, on_error=on_error, skipped=skipped,
                   **options)
