"""What every importer shares: loading one JSON file, and turning parsed records into the
canonical Arrow table (answers, agreement, final answer, correctness).

Per record, from its ``texts[round][slot]`` (``None`` where the agent did not speak):

* ``answers[t][k]`` = :func:`extract_answer` of the text (``None``: no text or nothing found),
  with ``kind`` = :func:`answer_kind` of the record's reference: when the gold is a choice
  letter only letters are read, when it is a number a sentence around one number gives that
  number (rules: ``fastuq.answers.extract``).
* Answers are grouped per round by :func:`answer_classes` (with ``math=`` as asked).
* ``agreement[t]`` = size of the largest class / ``n_agents``; unparseable answers cast no
  vote but stay in the denominator. A round where no answer parses gets agreement ``0.0``
  (the same formula with no votes: the team stated no answer at all, which an estimator
  should see as the least agreement, not as a gap) and the record gets the flag
  ``unparseable_round`` so it can be filtered; :func:`fastuq.majority_margin` and
  :func:`fastuq.signals.agreement_from_answers` give the same 0.
* ``final_answer`` = the answer of the largest class among the agents that speak in the last
  round and survive to it (``ParsedRecord.final_slots``: for DyLAN the agents whose
  histories the file keeps, i.e. the ranker's survivors, never a pruned agent whose answer
  was recovered from a quote; for Du et al. every agent that speaks in the last round).
  Ties go to the class whose first member sits in the lowest slot (the team's order), and
  the string is that member's answer as extracted. ``None`` when none of those answers
  parses.
* ``correct`` = ``final_answer`` equivalent to ``reference`` (:func:`check_answers`, same
  ``math=``); ``False`` when either is ``None``.
"""

from __future__ import annotations

import hashlib
import json
import os
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import pyarrow as pa

from fastuq.answers.check import answer_classes, check_answers
from fastuq.answers.extract import extract_answer
from fastuq.answers.normalize import answer_kind
from fastuq.io.schema import CANONICAL

__all__ = [
    "ParsedRecord",
    "derive_columns",
    "expand_paths",
    "load_json_object",
    "question_id",
    "table_from_columns",
]

_BASE_FIELDS = [
    CANONICAL.field(name)
    for name in ("trajectory_id", "question_id", "protocol", "n_agents", "reference",
                 "final_answer", "correct", "agreement", "answers", "texts", "flags")
] + [pa.field("question", pa.string())]


@dataclass
class ParsedRecord:
    """One trajectory as an importer reads it, before answers are parsed."""

    trajectory_id: str
    question: str
    protocol: str
    n_agents: int
    reference: str | None
    texts: list[list[str | None]]  # [round][slot]
    flags: list[str] = field(default_factory=list)
    extra: dict[str, object] = field(default_factory=dict)
    #: slots whose last-round answers decide the final answer (None: every slot that speaks
    #: in the last round)
    final_slots: list[int] | None = None


def question_id(text: str) -> str:
    """Stable id of a question: 16 hex digits of the BLAKE2b hash of its text (stripped)."""
    return hashlib.blake2b(text.strip().encode("utf-8"), digest_size=8).hexdigest()


def expand_paths(paths: str | os.PathLike | Iterable[str | os.PathLike],
                 suffixes: Sequence[str] = (".json",)) -> list[Path]:
    """Files named in ``paths``; a folder stands for its files ending in ``suffixes``
    (recursively, sorted by path). Raises FileNotFoundError for a path that does not exist
    and ValueError when nothing is left."""
    if isinstance(paths, str | os.PathLike):
        paths = [paths]
    out: list[Path] = []
    for p in map(Path, paths):
        if p.is_dir():
            out.extend(sorted(f for f in p.rglob("*") if f.is_file() and f.name.endswith(
                tuple(suffixes)) and not f.name.startswith(".")))
        elif p.is_file():
            out.append(p)
        else:
            raise FileNotFoundError(f"{p}: no such file or folder")
    if not out:
        raise ValueError(f"no input files found (looked for {', '.join(suffixes)})")
    return out


def load_json_object(path: Path) -> dict:
    """The top-level JSON object of ``path``; ValueError naming the file otherwise."""
    try:
        with open(path, encoding="utf-8") as fh:
            data = json.load(fh)
    except json.JSONDecodeError as exc:
        raise ValueError(f"{path}: malformed JSON: {exc}") from exc
    except UnicodeDecodeError as exc:
        raise ValueError(f"{path}: not UTF-8 text: {exc}") from exc
    if not isinstance(data, dict):
        raise ValueError(
            f"{path}: expected one JSON object mapping questions to records, "
            f"got {type(data).__name__}"
        )
    return data


def record_error(path: Path, index: int, key: str, what: str, *,
                 key_end: bool = False) -> ValueError:
    """``ValueError("PATH: record INDEX ('KEY'): WHAT")`` for a bad record of a log file; a
    key longer than 60 characters is cut to its first 57 and ``...`` (``key_end``: ``...``
    and its last 57, for keys that end with what tells them apart)."""
    if len(key) > 60:
        key = "..." + key[-57:] if key_end else key[:57] + "..."
    return ValueError(f"{path}: record {index} ({key!r}): {what}")


def chat_history(history: object, a: int, fail: Callable[[str], Exception]
                 ) -> tuple[list[str], list[str]]:
    """``(assistant texts, user prompts)`` of agent ``a``'s chat history
    (``agent_contexts[a]``: messages with a ``role``, ``system``, ``user`` or ``assistant``,
    and a string ``content``), in order; ``fail(what)`` is raised when it is not one or holds
    no assistant message."""
    if not isinstance(history, list) or not history:
        raise fail(f"agent_contexts[{a}] must be a non-empty list of messages")
    responses: list[str] = []
    prompts: list[str] = []
    for m, msg in enumerate(history):
        if not isinstance(msg, dict) or not isinstance(msg.get("content"), str):
            raise fail(f"agent_contexts[{a}][{m}] must be an object with a string 'content'")
        role = msg.get("role")
        if role == "assistant":
            responses.append(msg["content"])
        elif role == "user":
            prompts.append(msg["content"])
        elif role != "system":
            raise fail(f"agent_contexts[{a}][{m}] has unknown role {role!r}")
    if not responses:
        raise fail(f"agent_contexts[{a}] holds no assistant message")
    return responses, prompts


def _round_votes(answers: Sequence[str | None], math: bool) -> tuple[int, int]:
    """(largest class size, slot of the winning class's first member, or -1)."""
    ids = answer_classes(answers, math=math)
    if (ids < 0).all():
        return 0, -1
    counts = np.bincount(ids[ids >= 0])
    # class ids are numbered by first appearance, i.e. by lowest slot: argmax keeps the first
    best = int(np.argmax(counts))
    return int(counts[best]), int(np.flatnonzero(ids == best)[0])


def derive_columns(records: Sequence[ParsedRecord], *, math: bool = False,
                   processes: int | None = None,
                   extra_names: Sequence[str] = ()) -> dict[str, list]:
    """Canonical columns of ``records`` as Python lists (see the module docstring for the
    derived ones); ``processes`` goes to :func:`check_answers`."""
    answers_all: list[list[list[str | None]]] = []
    agreement_all: list[list[float]] = []
    finals: list[str | None] = []
    flags_all: list[list[str]] = []
    for rec in records:
        kind = answer_kind(rec.reference)
        answers = [[extract_answer(t, kind) if t is not None else None for t in row]
                   for row in rec.texts]
        flags = list(rec.flags)
        agreement = []
        for row in answers:
            count, slot = _round_votes(row, math)
            agreement.append(count / rec.n_agents)
            if slot < 0 and "unparseable_round" not in flags:
                flags.append("unparseable_round")
        final = None
        if answers:
            last = answers[-1]
            slots = range(len(last)) if rec.final_slots is None else sorted(rec.final_slots)
            voters = [last[k] for k in slots if k < len(last)]
            _, winner = _round_votes(voters, math)
            if winner >= 0:
                final = voters[winner]
        answers_all.append(answers)
        agreement_all.append(agreement)
        finals.append(final)
        flags_all.append(flags)
    refs = [r.reference for r in records]
    correct = check_answers(finals, refs, math=math, processes=processes)
    columns: dict[str, list] = {
        "trajectory_id": [r.trajectory_id for r in records],
        "question_id": [question_id(r.question) for r in records],
        "protocol": [r.protocol for r in records],
        "n_agents": [r.n_agents for r in records],
        "reference": refs,
        "final_answer": finals,
        "correct": correct.tolist(),
        "agreement": agreement_all,
        "answers": answers_all,
        "texts": [r.texts for r in records],
        "flags": flags_all,
        "question": [r.question for r in records],
    }
    for name in extra_names:
        columns[name] = [r.extra.get(name) for r in records]
    return columns


def table_from_columns(columns: dict[str, list], extra_fields: Sequence[pa.Field] = ()
                       ) -> pa.Table:
    """The canonical Arrow table (schema: the base fields, then ``extra_fields``)."""
    schema = pa.schema(_BASE_FIELDS + list(extra_fields))
    arrays = [pa.array(columns[f.name], type=f.type) for f in schema]
    return pa.Table.from_arrays(arrays, schema=schema)
