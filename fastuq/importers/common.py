"""What every importer shares: loading one JSON file, and turning parsed records into the
canonical Arrow table (answers, agreement, final answer, correctness).

Per record, from its ``texts[round][slot]`` (``None`` where the agent did not speak):

* ``answers[t][k]`` = :func:`extract_answer` of the text (``None``: no text or nothing found),
  with ``kind`` = :func:`answer_kind` of the record's reference: when the gold is a choice
  letter only letters are read, when it is a number a sentence around one number gives that
  number (rules: ``fastuq.answers.extract``). A log that stores its own parsed answers (FORD's
  ``P``, a ChatEval verdict, a mapped answer column) gives them in ``ParsedRecord.answers``
  instead (the importers spell them with :func:`short_label`), and they are used as they
  are.
* Answers are grouped per round by :func:`answer_classes` (with ``math=`` as asked).
* ``agreement[t]`` = size of the largest class / ``n_agents``; unparseable answers cast no
  vote but stay in the denominator. A round where no answer parses gets agreement ``0.0``
  (the same formula with no votes: the team stated no answer at all, which an estimator
  should see as the least agreement, not as a gap) and the record gets the flag
  ``unparseable_round`` so it can be filtered; :func:`fastuq.majority_margin` and
  :func:`fastuq.signals.agreement_from_answers` give the same 0.
* ``final_answer``, by the record's ``final_rule``:

  * ``"last_round"`` (the default): DESIGN.md's rule, :func:`fastuq.signals.final_answer_slot`
    (the function replay applies to every round): the answer of the largest class among the
    agents of the last round that are **active** (``ParsedRecord.active``, the ``active``
    column: for DyLAN the ranker's survivors, never a pruned agent whose answer was recovered
    from a quote; without it every agent) and **speak** (hold a parsed answer). Ties go to
    the class whose first member sits in the lowest slot (the team's order), and the string
    is that member's answer as extracted. ``None`` when none of those answers parses.
  * ``"all_rounds"``: the same function over every node of every round as one row, in
    round-major order (for a turn-based log such as FORD's, the order of the turns): ties go
    to the class whose first member spoke first.
  * ``"given"``: ``ParsedRecord.final``, the answer the log itself states (a moderator's or
    judge's decision, an aggregate of scores, a mapped column), ``None`` included.
* ``correct`` = ``final_answer`` equivalent to ``reference`` (:func:`check_answers`, same
  ``math=``); ``False`` when either is ``None``.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
from collections.abc import Callable, Iterable, Iterator, Sequence
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path
from typing import Literal

import numpy as np
import pyarrow as pa

from fastuq.answers.check import answer_classes, check_answers
from fastuq.answers.extract import AnswerKind, extract_answer
from fastuq.answers.normalize import answer_kind
from fastuq.io.schema import CANONICAL
from fastuq.signals.final import final_answer_slot

__all__ = [
    "AGENTS_FIELD",
    "ParsedRecord",
    "derive_columns",
    "expand_paths",
    "get_path",
    "iter_jsonl",
    "jsonl_lines",
    "label_answer",
    "load_json",
    "load_json_list",
    "load_json_object",
    "load_toml",
    "parse_each",
    "parse_jsonl_each",
    "question_id",
    "question_record",
    "rounds_from_agents",
    "short_label",
    "skipping",
    "table_from_columns",
]

#: The extra column of the importers that know their agents' names: slot ``k``'s name.
AGENTS_FIELD = pa.field("agents", pa.list_(pa.string()))

FinalRule = Literal["last_round", "all_rounds", "given"]

_BASE_FIELDS = [
    CANONICAL.field(name)
    for name in ("trajectory_id", "question_id", "protocol", "source", "n_agents", "reference",
                 "final_answer", "correct", "agreement", "answers", "texts", "flags")
] + [pa.field("question", pa.string())]


@dataclass
class ParsedRecord:
    """One trajectory as an importer reads it, before answers are parsed."""

    trajectory_id: str
    question: str
    #: the interaction structure (``debate``, ``dylan``, ``self_consistency``, ...): selects
    #: presets
    protocol: str
    n_agents: int
    reference: str | None
    texts: list[list[str | None]]  # [round][slot]
    flags: list[str] = field(default_factory=list)
    extra: dict[str, object] = field(default_factory=dict)
    #: ``[round][slot]`` whether the agent is still in the team (the canonical ``active``
    #: column; None: every agent); the same shape as ``texts``
    active: list[list[bool]] | None = None
    #: parsed answers ``[round][slot]`` as the log states them (None: extract from ``texts``);
    #: the same shape as ``texts``
    answers: list[list[str | None]] | None = None
    #: how the final answer is decided (see the module docstring)
    final_rule: FinalRule = "last_round"
    #: the final answer when ``final_rule`` is ``"given"``
    final: str | None = None
    #: the log's own question id (None: :func:`question_id` of ``question``)
    qid: str | None = None
    #: the log format or data set it came from (``ford``, ``agora``, ...): metadata only
    source: str | None = None

    def __post_init__(self) -> None:
        if self.final_rule not in ("last_round", "all_rounds", "given"):
            raise ValueError(f"final_rule must be 'last_round', 'all_rounds' or 'given', "
                             f"got {self.final_rule!r}")
        if self.answers is not None and [len(r) for r in self.answers] != \
                [len(r) for r in self.texts]:
            raise ValueError(f"{self.trajectory_id}: answers and texts differ in shape")
        if self.active is not None and [len(r) for r in self.active] != \
                [len(r) for r in self.texts]:
            raise ValueError(f"{self.trajectory_id}: active and texts differ in shape")


def question_id(text: str) -> str:
    """Stable id of a question: 16 hex digits of the BLAKE2b hash of its text (stripped)."""
    return hashlib.blake2b(text.strip().encode("utf-8"), digest_size=8).hexdigest()


def expand_paths(paths: str | os.PathLike | Iterable[str | os.PathLike],
                 suffixes: Sequence[str] = (".json",),
                 keep: Callable[[Path], bool] | None = None) -> list[Path]:
    """Files named in ``paths``; a folder stands for its files ending in ``suffixes`` that
    ``keep`` accepts (default: all; recursively, sorted by path; hidden files never). A file
    named explicitly is always taken. Raises FileNotFoundError for a path that does not
    exist and ValueError when nothing is left."""
    paths = [paths] if isinstance(paths, str | os.PathLike) else list(paths)
    out: list[Path] = []
    for p in map(Path, paths):
        if p.is_dir():
            out.extend(sorted(f for f in p.rglob("*") if f.is_file() and f.name.endswith(
                tuple(suffixes)) and not f.name.startswith(".") and (keep is None or keep(f))))
        elif p.is_file():
            out.append(p)
        else:
            raise FileNotFoundError(f"{p}: no such file or folder")
    if not out:
        where = ", ".join(map(str, paths))
        raise ValueError(f"no input files found in {where} (looked for {', '.join(suffixes)})")
    return out


def load_json(path: Path) -> object:
    """The JSON value of ``path``; ValueError naming the file when it is not JSON."""
    try:
        with open(path, encoding="utf-8") as fh:
            return json.load(fh)
    except json.JSONDecodeError as exc:
        raise ValueError(f"{path}: malformed JSON: {exc}") from exc
    except UnicodeDecodeError as exc:
        raise ValueError(f"{path}: not UTF-8 text: {exc}") from exc


def load_json_list(path: Path, what: str) -> list:
    """The top-level JSON list of ``path`` (``what``: what its items are, for the message);
    ValueError naming the file otherwise."""
    data = load_json(path)
    if not isinstance(data, list):
        raise ValueError(f"{path}: expected a JSON list of {what}, got {type(data).__name__}")
    return data


def iter_jsonl(path: Path) -> Iterator[tuple[int, int, dict]]:
    """``(record index, line number, object)`` for each non-blank line of a JSONL file, in
    order (record indexes count from 0, line numbers from 1); ValueError naming the file and
    the line for a line that is not a JSON object."""
    for index, line_no, obj in jsonl_lines(path):
        if isinstance(obj, ValueError):
            raise obj
        yield index, line_no, obj


def jsonl_lines(path: Path) -> Iterator[tuple[int, int, dict | ValueError]]:
    """As :func:`iter_jsonl`, but a line that is not a JSON object gives, in place of the
    object, the ``ValueError`` naming the file, the record and the line, and still counts as
    a record (the next line's index is one more): a caller can skip that record alone. A
    file that is not UTF-8 text still raises (the whole file is unreadable)."""
    index = 0
    try:
        with open(path, encoding="utf-8") as fh:
            for line_no, line in enumerate(fh, 1):
                if not line.strip():
                    continue
                where = f"{path}: record {index} (line {line_no})"
                try:
                    obj = json.loads(line)
                except json.JSONDecodeError as exc:
                    obj = ValueError(f"{where}: malformed JSON: {exc}")
                else:
                    if not isinstance(obj, dict):
                        obj = ValueError(f"{where}: expected a JSON object, got "
                                         f"{type(obj).__name__}")
                yield index, line_no, obj
                index += 1
    except UnicodeDecodeError as exc:
        raise ValueError(f"{path}: not UTF-8 text: {exc}") from exc


_MISSING = object()


def get_path(obj: object, path: str, default: object = _MISSING) -> object:
    """The value at the dot-separated key ``path`` in nested objects (a key of digits also
    indexes a list; ``"."`` is ``obj`` itself; a key holding dots is tried whole first).
    ``default`` when a step is missing (KeyError naming the step when no default)."""
    if path == ".":
        return obj
    if isinstance(obj, dict) and path in obj:
        return obj[path]
    cur = obj
    for step in path.split("."):
        if isinstance(cur, dict) and step in cur:
            cur = cur[step]
        elif isinstance(cur, list) and step.isdigit() and int(step) < len(cur):
            cur = cur[int(step)]
        elif default is _MISSING:
            raise KeyError(step)
        else:
            return default
    return cur


_LETTER_LABEL = re.compile(r"^\(?([A-Ja-j])\)?[.:]?$")
_WORD_LABELS = frozenset({"yes", "no", "true", "false", "tie"})
_NO_LABEL = frozenset({"", "none", "null", "n/a", "nan"})


def short_label(value: object) -> str | None:
    """A log's short answer label in one spelling, so that labels compare equal: white
    space, markdown ``*``, enclosing quotes and a final ``.`` are dropped; a choice letter
    (``b``, ``(B)``, ``B)``, ``B.``) gives the capital letter; ``yes``, ``no``, ``true``,
    ``false`` and ``tie`` (any case) give the lower-case word; ``None``, ``"None"``,
    ``"null"``, ``"n/a"`` and an empty string give ``None`` (FORD writes ``"None"`` for an
    answer it could not parse); anything else (a number, an expression, a name) is kept as
    it is, stripped. A number gives its decimal spelling."""
    if value is None or isinstance(value, bool):
        return None if value is None else str(value).lower()
    if isinstance(value, int | float):
        return repr(value) if isinstance(value, float) else str(value)
    s = str(value).strip().strip("*").strip()
    if len(s) >= 2 and s[0] == s[-1] and s[0] in "\"'`":
        s = s[1:-1].strip()
    if s.lower() in _NO_LABEL:
        return None
    m = _LETTER_LABEL.match(s)
    if m:
        return m.group(1).upper()
    word = s.rstrip(".").lower()
    if word in _WORD_LABELS:
        return word
    return s


_LABEL_FAMILIES = (frozenset({"yes", "no"}), frozenset({"true", "false"}))
_FAMILY_WORD = {fam: re.compile(r"\b(" + "|".join(sorted(fam)) + r")\b", re.IGNORECASE)
                for fam in _LABEL_FAMILIES}


def label_answer(text: str | None, kind: AnswerKind, reference: str | None = None
                 ) -> str | None:
    """The answer a response or a moderator's decision states, as a short label.

    :func:`extract_answer` with the gold's ``kind``, then :func:`short_label`. When the
    gold is ``yes`` / ``no`` (or ``true`` / ``false``) and that is not one of the pair, the
    first of the pair's words in the text ("Yes, 91 is prime" is ``yes``, "No: 91 = 7 x 13"
    is ``no``). When the gold is neither a letter nor a number and nothing is found in a text
    of at most three words ("Paris", "Affirmative side"), the text itself."""
    if text is None:
        return None
    found = short_label(extract_answer(text, kind))
    family = next((f for f in _LABEL_FAMILIES if reference in f), None)
    if family is not None and found not in family:
        m = _FAMILY_WORD[family].search(text)
        return m.group(1).lower() if m else None
    if found is None and kind is None and len(text.split()) <= 3:
        found = short_label(text)
    return found


def load_json_object(path: Path) -> dict:
    """The top-level JSON object of ``path``; ValueError naming the file otherwise."""
    data = load_json(path)
    if not isinstance(data, dict):
        raise ValueError(
            f"{path}: expected one JSON object mapping questions to records, "
            f"got {type(data).__name__}"
        )
    return data


@dataclass(frozen=True)
class SkippedRecord:
    """A record (or a whole file, ``record`` None) that ``on_error="skip"`` left out."""

    source: str
    record: int | None
    reason: str


_SKIPPING: ContextVar[list[SkippedRecord] | None] = ContextVar("fastuq_import_skipping",
                                                               default=None)


@contextmanager
def skipping(into: list[SkippedRecord]) -> Iterator[list[SkippedRecord]]:
    """Within the block, :func:`parse_each` leaves out a record whose parse raises
    ``ValueError`` and appends it, with the message, to ``into``."""
    token = _SKIPPING.set(into)
    try:
        yield into
    finally:
        _SKIPPING.reset(token)


def parse_each(path: Path, items: Iterable[tuple[int, object]],
               parse_one: Callable[[int, object], ParsedRecord]) -> list[ParsedRecord]:
    """``[parse_one(index, item) for index, item in items]``; inside :func:`skipping`, a
    record whose parse raises ``ValueError`` (a bad record, named by the message) is left
    out and listed instead of ending the file."""
    into = _SKIPPING.get()
    if into is None:
        return [parse_one(index, item) for index, item in items]
    out = []
    for index, item in items:
        try:
            out.append(parse_one(index, item))
        except ValueError as exc:
            into.append(SkippedRecord(str(path), index, str(exc)))
    return out


def parse_jsonl_each(path: Path, parse_one: Callable[[int, int, dict], ParsedRecord]
                     ) -> list[ParsedRecord]:
    """:func:`parse_each` over the lines of a JSONL file: ``parse_one(index, line number,
    object)`` for each record (:func:`jsonl_lines`). A line that is not a JSON object is a
    bad record like any other: it raises its ``ValueError`` (file, record, line), or inside
    :func:`skipping` is left out and listed while the other lines are read."""

    def one(index: int, item: tuple[int, dict | ValueError]) -> ParsedRecord:
        line_no, obj = item
        if isinstance(obj, ValueError):
            raise obj
        return parse_one(index, line_no, obj)

    return parse_each(path, ((i, (n, obj)) for i, n, obj in jsonl_lines(path)), one)


def record_error(path: Path, index: int, key: str, what: str, *,
                 key_end: bool = False, line: int | None = None) -> ValueError:
    """``ValueError("PATH: record INDEX ('KEY'): WHAT")`` for a bad record of a log file
    (``PATH: record INDEX: WHAT`` when the key is empty: not known yet); a key longer than 60
    characters is cut to its first 57 and ``...`` (``key_end``: ``...`` and its last 57, for
    keys that end with what tells them apart). ``line``: the record's line in a JSONL file,
    named before the key (``PATH: record INDEX (line LINE, 'KEY'): WHAT``)."""
    at = "" if line is None else f"line {line}"
    if not key:
        return ValueError(f"{path}: record {index}{f' ({at})' if at else ''}: {what}")
    if len(key) > 60:
        key = "..." + key[-57:] if key_end else key[:57] + "..."
    return ValueError(f"{path}: record {index} ({f'{at}, ' if at else ''}{key!r}): {what}")


def load_toml(path: str | os.PathLike) -> dict:
    """The TOML file at ``path`` as a ``dict``: ValueError ``PATH: malformed TOML: ...`` for
    a file that does not parse, FileNotFoundError for a missing one."""
    import tomllib

    try:
        with open(path, "rb") as fh:
            return tomllib.load(fh)
    except tomllib.TOMLDecodeError as exc:
        raise ValueError(f"{os.fspath(path)}: malformed TOML: {exc}") from exc


def rounds_from_agents(per_agent: Sequence[Sequence[str | None]]
                       ) -> tuple[list[list[str | None]], list[str]]:
    """Per-agent response lists (``per_agent[a][t]``) turned into per-round rows
    ``texts[t][a]`` (null where an agent has fewer rounds than the longest), with the flags
    ``["ragged_rounds"]`` when the agents' lists differ in length (``[]`` otherwise)."""
    n_rounds = max(len(r) for r in per_agent)
    texts = [[r[t] if t < len(r) else None for r in per_agent] for t in range(n_rounds)]
    flags = ["ragged_rounds"] if any(len(r) < n_rounds for r in per_agent) else []
    return texts, flags


def question_record(path: Path, index: int, rec: object
                    ) -> tuple[dict, str, Callable[[str], ValueError]]:
    """``(rec, question, fail)`` for a record that must be an object with a string
    ``question``: ``fail(what)`` builds :func:`record_error` for this record, keyed by its
    question (keyword arguments pass through). Raises that error when ``rec`` is not an
    object or lacks the question."""
    if not isinstance(rec, dict):
        raise record_error(path, index, "", f"expected an object, got {type(rec).__name__}")
    question = rec.get("question")
    fail = partial(record_error, path, index, question if isinstance(question, str) else "")
    if not isinstance(question, str):
        raise fail("missing or non-string field 'question'")
    return rec, question, fail


def chat_history(history: object, a: int | str, fail: Callable[[str], Exception], *,
                 field: str = "agent_contexts") -> tuple[list[str], list[str]]:
    """``(assistant texts, user prompts)`` of agent ``a``'s chat history
    (``FIELD[a]``, by default ``agent_contexts[a]``: messages with a ``role``, ``system``,
    ``user`` or ``assistant``, and a string ``content``), in order; ``fail(what)`` is raised
    when it is not one or holds no assistant message."""
    where = f"{field}[{a!r}]" if isinstance(a, str) else f"{field}[{a}]"
    if not isinstance(history, list) or not history:
        raise fail(f"{where} must be a non-empty list of messages")
    responses: list[str] = []
    prompts: list[str] = []
    for m, msg in enumerate(history):
        if not isinstance(msg, dict) or not isinstance(msg.get("content"), str):
            raise fail(f"{where}[{m}] must be an object with a string 'content'")
        role = msg.get("role")
        if role == "assistant":
            responses.append(msg["content"])
        elif role == "user":
            prompts.append(msg["content"])
        elif role != "system":
            raise fail(f"{where}[{m}] has unknown role {role!r}")
    if not responses:
        raise fail(f"{where} holds no assistant message")
    return responses, prompts


def _modal_count(ids: np.ndarray) -> int:
    """The size of the largest vote class of one round (0: no vote)."""
    voted = ids[ids >= 0]
    return int(np.bincount(voted).max()) if voted.size else 0


def _winners(classes: Sequence[np.ndarray], active: Sequence[np.ndarray]) -> list[int]:
    """:func:`final_answer_slot` of each record's row of voters: the rows are grouped by
    length, so each group is one whole-array call (and a long row costs its own length
    squared, not the longest row's)."""
    out = [-1] * len(classes)
    lengths = np.fromiter((len(c) for c in classes), np.int64, len(classes))
    for width in np.unique(lengths).tolist():
        if width == 0:
            continue
        idx = np.flatnonzero(lengths == width)
        cls = np.stack([classes[i] for i in idx.tolist()])
        act = np.stack([active[i] for i in idx.tolist()])
        for i, w in zip(idx.tolist(), final_answer_slot(cls, act).tolist(), strict=True):
            out[i] = w
    return out


def derive_columns(records: Sequence[ParsedRecord], *, math: bool = False,
                   processes: int | None = None,
                   extra_names: Sequence[str] = ()) -> dict[str, list]:
    """Canonical columns of ``records`` as Python lists (see the module docstring for the
    derived ones); ``processes`` goes to :func:`check_answers`."""
    answers_all: list[list[list[str | None]]] = []
    agreement_all: list[list[float]] = []
    flags_all: list[list[str]] = []
    # each record's voters (one row: its last round, or every node for "all_rounds"), their
    # vote classes and whether they are active; the winners come from one call below
    voters_all: list[list[str | None]] = []
    classes_all: list[np.ndarray] = []
    active_all: list[np.ndarray] = []
    for rec in records:
        if rec.answers is not None:
            answers = [list(row) for row in rec.answers]
        else:
            kind = answer_kind(rec.reference)
            answers = [[extract_answer(t, kind) if t is not None else None for t in row]
                       for row in rec.texts]
        flags = list(rec.flags)
        agreement = []
        ids_rows = [answer_classes(row, math=math) for row in answers]
        for ids in ids_rows:
            count = _modal_count(ids)
            agreement.append(count / rec.n_agents)
            if count == 0 and "unparseable_round" not in flags:
                flags.append("unparseable_round")
        voters: list[str | None] = []
        classes = np.zeros(0, np.int64)
        if rec.final_rule == "all_rounds" and answers:
            voters = [a for row in answers for a in row]
            classes = answer_classes(voters, math=math)
            active = np.ones(len(voters), bool)
        elif rec.final_rule == "last_round" and answers:
            voters = list(answers[-1])
            classes = ids_rows[-1]
            active = np.ones(len(voters), bool) if rec.active is None else \
                np.asarray([x is not False for x in rec.active[-1]], bool)
        else:
            active = np.zeros(0, bool)
        voters_all.append(voters)
        classes_all.append(np.asarray(classes, np.int64))
        active_all.append(active)
        answers_all.append(answers)
        agreement_all.append(agreement)
        flags_all.append(flags)
    winner = _winners(classes_all, active_all)
    finals = [rec.final if rec.final_rule == "given" else
              (voters[w] if w >= 0 else None)
              for rec, voters, w in zip(records, voters_all, winner, strict=True)]
    refs = [r.reference for r in records]
    correct = check_answers(finals, refs, math=math, processes=processes)
    columns: dict[str, list] = {
        "trajectory_id": [r.trajectory_id for r in records],
        "question_id": [r.qid if r.qid is not None else question_id(r.question)
                        for r in records],
        "protocol": [r.protocol for r in records],
        "source": [r.source for r in records],
        "n_agents": [r.n_agents for r in records],
        "reference": refs,
        "final_answer": finals,
        "correct": correct.tolist(),
        "agreement": agreement_all,
        "answers": answers_all,
        "texts": [r.texts for r in records],
        "flags": flags_all,
        "question": [r.question for r in records],
        "active": [r.active for r in records],
    }
    for name in extra_names:
        columns[name] = [r.extra.get(name) for r in records]
    return columns


def table_from_columns(columns: dict[str, list], extra_fields: Sequence[pa.Field] = ()
                       ) -> pa.Table:
    """The canonical Arrow table (schema: the base fields, ``active`` when a record has it,
    then ``extra_fields``)."""
    active = [CANONICAL.field("active")] if any(
        a is not None for a in columns.get("active", ())) else []
    schema = pa.schema(_BASE_FIELDS + active + list(extra_fields))
    arrays = [pa.array(columns[f.name], type=f.type) for f in schema]
    return pa.Table.from_arrays(arrays, schema=schema)
