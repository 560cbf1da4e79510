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
* :func:`import_mallm`: MALLM's output files (Multi-Agent-LLMs/mallm), rounds from turns,
  answers from solutions, the UMAS graph from ``memory_ids``; protocol ``"debate"``, source
  ``"mallm"`` (``fastuq.importers.mallm``).
* :func:`import_otel`: OpenTelemetry GenAI (and OpenInference) spans exported as OTLP JSON,
  agent spans as agents; agreement-only; protocol ``"debate"``, source ``"otel"``
  (``fastuq.importers.otel``).
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
from collections.abc import Callable, Mapping
from pathlib import Path

import pyarrow as pa

from fastuq.importers.chateval import read_references
from fastuq.importers.common import SkippedRecord, question_id
from fastuq.importers.detect import DETECTABLE, detect_each, detect_format
from fastuq.importers.du import parse_gold
from fastuq.importers.dylan import TEAM_SIZE
from fastuq.importers.generic import GenericMapping, load_mapping
from fastuq.importers.openai import load_fields
from fastuq.importers.run import PathsLike, file_names, import_files, import_groups, log_files

__all__ = ["DETECTABLE", "FORMATS", "OPTIONS", "TEAM_SIZE", "detect_each", "detect_format",
           "import_agora",
           "import_chateval", "import_du", "import_dylan", "import_ford", "import_generic",
           "import_logs", "import_mad", "import_mallm", "import_openai", "import_otel",
           "load_mapping", "log_files", "parse_gold", "question_id"]


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
    return import_files("dylan", paths, math, processes, recover=recover)


def import_du(paths: PathsLike, *, math: bool = False,
              processes: int | None = None) -> pa.Table:
    """Canonical table of Du et al.'s multi-agent debate logs (arguments as
    :func:`import_dylan`)."""
    return import_files("du", paths, math, processes)


def import_ford(paths: PathsLike, *, math: bool = False,
                processes: int | None = None) -> pa.Table:
    """Canonical table of FORD debate records (``fastuq.importers.ford``): ``paths`` are
    JSONL files or folders (their ``*.jsonl`` files); the other arguments as
    :func:`import_dylan`."""
    return import_files("ford", paths, math, processes)


def import_agora(paths: PathsLike, *, math: bool = False,
                 processes: int | None = None) -> pa.Table:
    """Canonical table of LLM-Agora result files (``fastuq.importers.agora``): a folder
    stands for its ``*_result*.json`` files; the other arguments as :func:`import_dylan`."""
    return import_files("agora", paths, math, processes)


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
    return import_files("chateval", paths, math, processes, references=refs)


def import_mad(paths: PathsLike, *, math: bool = False,
               processes: int | None = None) -> pa.Table:
    """Canonical table of MAD debate files (``fastuq.importers.mad``): one debate per
    ``{id}.json`` (a folder's ``*-config.json`` prompt files are skipped); the other
    arguments as :func:`import_dylan`."""
    return import_files("mad", paths, math, processes)


def import_mallm(paths: PathsLike, *, math: bool = False,
                 processes: int | None = None) -> pa.Table:
    """Canonical table of MALLM output files (``fastuq.importers.mallm``): one JSON list of
    examples per file (a folder stands for its ``*.json`` files), with the extra columns
    ``agents``, ``predecessors`` (the UMAS graph from ``memory_ids``), ``agreed`` and
    ``paradigm``; the other arguments as :func:`import_dylan`."""
    return import_files("mallm", paths, math, processes)


def import_otel(paths: PathsLike, *, math: bool = False,
                processes: int | None = None) -> pa.Table:
    """Canonical table of OpenTelemetry traces exported as OTLP JSON
    (``fastuq.importers.otel``: GenAI semantic conventions v1.37.0 and OpenInference): a
    folder stands for its ``*.json`` and ``*.jsonl`` files; one trajectory per
    ``gen_ai.conversation.id`` (or root span), one node per agent span, with the extra
    columns ``agents`` and ``predecessors`` (span parents and links). Agreement-only: traces
    carry no log-probabilities. The other arguments as :func:`import_dylan`."""
    return import_files("otel", paths, math, processes)


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
    return import_files("generic", paths, math, processes, mapping=mapping)


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
    return import_files("openai", paths, math, processes, fields=load_fields(fields), topk=topk)


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
    return import_groups(groups, file_names(every), math, processes, progress,
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
           "generic": import_generic, "mallm": import_mallm, "otel": import_otel,
           "openai": import_openai}

#: The options each format takes beyond ``math`` and ``processes``.
OPTIONS = {"dylan": ("recover",), "du": (), "ford": (), "agora": (),
           "chateval": ("references",), "mad": (), "generic": ("config",), "mallm": (),
           "otel": (), "openai": ("fields", "topk")}


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
    return import_files(fmt, paths, math, processes, progress, on_error=on_error, skipped=skipped,
                   **options)
