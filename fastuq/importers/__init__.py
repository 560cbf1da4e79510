"""Importers for raw public multi-agent debate logs, producing canonical corpus tables.

* :func:`import_dylan`: DyLAN's MATH logs (SALT-NLP/DyLAN ``exp/MATH/CoT``); protocol
  ``"dylan"``, a team of 4, early stopping and pruning reconstructed into fixed agent slots
  (details, flags and the recovery of dropped responses: ``fastuq.importers.dylan``).
* :func:`import_du`: Du et al.'s multi-agent debate logs (``{question: [agent_contexts,
  gold]}``); protocol ``"debate"``.

Both return one row per trajectory with the canonical columns ``trajectory_id``,
``question_id``, ``protocol``, ``n_agents``, ``reference``, ``final_answer``, ``correct``,
``agreement``, ``answers``, ``texts`` and ``flags`` (no ``token_entropy``: the logs carry no
log-probabilities), plus ``question`` (the problem text) and, for DyLAN, ``subject`` and
``level``. How answers, agreement, the final answer and correctness are derived (and why a
round without any parseable answer gets agreement 0 and the flag ``unparseable_round``):
``fastuq.importers.common``. Write a table with ``fastuq import`` or
``pyarrow.parquet.write_table``.

Malformed files raise ``ValueError`` naming the file and, for a bad record, its index and
an excerpt of its key (the question).
"""

from __future__ import annotations

import os
from collections.abc import Iterable
from pathlib import Path

import pyarrow as pa

from fastuq.answers.check import _require_math_verify, process_pool
from fastuq.importers.common import derive_columns, expand_paths, question_id, table_from_columns
from fastuq.importers.du import parse_du_file, parse_gold
from fastuq.importers.dylan import TEAM_SIZE, parse_dylan_file

__all__ = ["FORMATS", "TEAM_SIZE", "import_du", "import_dylan", "import_logs", "parse_gold",
           "question_id"]

PathsLike = str | os.PathLike | Iterable[str | os.PathLike]

_DYLAN_EXTRA = (pa.field("subject", pa.string()), pa.field("level", pa.int32()))
_EXTRA = {"dylan": _DYLAN_EXTRA, "du": ()}


def _file_columns(fmt: str, path: Path, math: bool, recover: bool) -> dict[str, list]:
    """Parse one file and derive its columns (the unit of work of a worker process)."""
    records = parse_dylan_file(path, recover=recover) if fmt == "dylan" else parse_du_file(path)
    return derive_columns(records, math=math, extra_names=[f.name for f in _EXTRA[fmt]])


def _import(fmt: str, paths: PathsLike, math: bool, processes: int | None,
            recover: bool = True) -> pa.Table:
    if processes is not None and (isinstance(processes, bool) or processes < 1):
        raise ValueError(f"processes must be a positive integer or None, got {processes!r}")
    if math:
        _require_math_verify()
    files = expand_paths(paths)
    n = len(files)
    if processes and processes > 1 and n > 1:
        with process_pool(min(processes, n)) as pool:
            parts = list(pool.map(_file_columns, [fmt] * n, files, [math] * n, [recover] * n))
    else:
        parts = [_file_columns(fmt, f, math, recover) for f in files]
    columns = {name: [v for part in parts for v in part[name]] for name in parts[0]}
    return table_from_columns(columns, _EXTRA[fmt])


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
    return _import("dylan", paths, math, processes, recover)


def import_du(paths: PathsLike, *, math: bool = False,
              processes: int | None = None) -> pa.Table:
    """Canonical table of Du et al.'s multi-agent debate logs (arguments as
    :func:`import_dylan`)."""
    return _import("du", paths, math, processes)


#: Importers by format name, as ``fastuq import FORMAT`` takes them.
FORMATS = {"dylan": import_dylan, "du": import_du}


def import_logs(fmt: str, paths: PathsLike, *, math: bool = False,
                processes: int | None = None) -> pa.Table:
    """Dispatch to the importer of ``fmt`` (a key of :data:`FORMATS`)."""
    try:
        importer = FORMATS[fmt]
    except KeyError:
        raise ValueError(f"unknown log format {fmt!r}; expected one of {sorted(FORMATS)}") from None
    return importer(paths, math=math, processes=processes)
