"""Reading FORD's debate records (Waste-Wood/FORD, "Examining Inter-Consistency of Large
Language Models Collaboration", EMNLP 2023 Findings).

Learned from the repository's code that writes and reads them (none of it copied):
``output/debate_*/process_round0.py`` (builds the round-0 records and splits them into
``round0/{task}_agreed.jsonl`` and ``{task}_candidate.jsonl``), ``debate_llama_vicuna.py``
(one debate turn: appends to ``R``, ``M`` and ``P``, then files the record as agreed when its
last two predictions match), ``output/debate_*/process_final.py`` (the accuracy: the majority
of a record's predictions) and ``output/debate_table_*/process_round0.py`` (the three-agent
round-table variant).

File format: JSON Lines, one debate per line, an object with

* ``Q``: the question; ``O``: the choices as one string (``"(A) ... (B) ..."``);
* ``A``: the gold answer, ``"(B)"`` style, or ``"yes"`` / ``"no"`` for StrategyQA;
* ``R``: the transcript. ``R[0]`` is the system instruction, ``R[1]`` the question. In the
  two-agent debates every later entry is one turn, ``{"role", "content"}`` (the roles only
  alternate ``assistant`` / ``user`` for the API's sake); in the round-table variant
  ``R[2 + k]`` is agent ``k``'s list of messages, its ``j``-th message being its ``j``-th
  turn;
* ``P``: the parsed answer of each turn, aligned with ``R`` (two placeholders ``"None"`` for
  ``R[0]`` and ``R[1]``): a choice letter, ``"yes"`` / ``"no"``, or ``"None"`` / ``null``
  when FORD could not parse the turn;
* ``M``: the model of each turn, aligned with ``P`` (``"system"`` twice, then the speakers).
  A name is metadata, not an identity: in FORD's ``debate_chatgpt_chatgpt0301`` output some
  records name the speakers ``chatgpt``, ``davinci`` in round 0 and ``chatgpt``,
  ``chatgpt0301`` in the later turns (``round4_chatgpt0301/anli_agreed.jsonl``): the
  second debater is renamed mid-debate.

A debate starts with one turn per agent (round 0), then the agents take turns in the same
order until the last two turns agree or the turn budget runs out; a file of
``round{i}_{model}/`` holds the records that reached agreement at turn ``i`` (``*_agreed``)
or are still open (``*_candidate``). Every record carries its whole history, so import the
files where debates end (``round0/*_agreed.jsonl``, each round's ``*_agreed.jsonl`` and the
last round's ``*_candidate.jsonl``; or a collected file such as ``final/*.jsonl``): a
record imported from an intermediate ``*_candidate.jsonl`` file appears again, with more
turns, in a later file.

Canonical record: ``n_agents`` = the agents of round 0 (2, or the round table's size);
round ``t`` is turns ``t*n .. t*n + n - 1``, turn ``j`` sitting in slot ``j % n``: the slot
order (the order of the turns) decides who an agent is, whatever ``M`` calls it. The last
round is partial when the debate stopped mid-round: its missing nodes are null.
``answers`` are ``P`` (:func:`~fastuq.importers.common.short_label`: ``"None"`` is null,
letters upper-case, ``yes`` / ``no`` lower-case); ``texts`` the turns' contents.
``reference`` is the letter of ``A`` (or its yes / no). ``question`` is ``Q`` and the
choices; ``trajectory_id`` is ``<file>:<line index>``, the file named by its path below the
folder the import's files share (``round0/copa_agreed:3``). The extra column ``agents``
holds slot ``k``'s name in round 0 (``M``); a record in which a later turn of slot ``k``
carries another name gets the flag ``agent_renamed`` (the names are kept as metadata only).

Final answer: FORD's own rule (``process_final.py``; ``final_rule="all_rounds"``), the most
frequent parsed answer over **every turn of the debate** (all rounds, both or all agents);
turns whose answer did not parse cast no vote; of answers tied on the count, the one stated
first (in turn order) wins; ``None`` (so ``correct`` false) when no turn parses. FORD writes
this as ``max(candidates, key=candidates.count)`` over ``P`` without its ``"None"``
entries; the importer differs only in spelling: it compares the labels of
:func:`~fastuq.importers.common.short_label` (``"No"`` and ``"no"`` are one answer, where
FORD's string comparison makes them two) and a JSON ``null`` in ``P`` casts no vote (FORD's
filter keeps it as a candidate that never matches the gold). It is **not** the answer the
debate agreed on: a debate stops once two consecutive turns agree, and the earlier turns
still vote, so turns ``A, B, A, C, C`` agree on ``C`` but FORD's rule gives ``A`` (two votes
each, ``A`` stated first). Replay gives this ``final_answer`` at the last round
(:mod:`fastuq.decisions.replay`), so its full-debate accuracy is FORD's.
"""

from __future__ import annotations

import re
from functools import partial
from pathlib import Path

from fastuq.importers.common import ParsedRecord, parse_jsonl_each, record_error, short_label

__all__ = ["parse_ford_file", "parse_ford_gold"]

_GOLD_LETTER = re.compile(r"^\s*\(([A-J])\)")
_PLACEHOLDERS = 2  # R[0] (system) and R[1] (the question) carry no answer


def parse_ford_gold(gold: str) -> str | None:
    """The reference of a FORD gold field: the letter of a leading ``(X)``, else the field
    as a short label (``yes`` / ``no``)."""
    m = _GOLD_LETTER.match(gold)
    return m.group(1) if m else short_label(gold)


def _turn_texts(rec: dict, n_turns: int, fail) -> tuple[list[str | None], int]:
    """The turns' texts in turn order and the number of agents, from ``R``."""
    R = rec["R"]
    body = R[_PLACEHOLDERS:]
    if all(isinstance(x, dict) for x in body):  # two agents, one entry per turn
        if len(R) != n_turns + _PLACEHOLDERS:
            raise fail(f"R has {len(R)} entries but P has {n_turns + _PLACEHOLDERS}: they must "
                       "align turn by turn")
        texts = []
        for j, msg in enumerate(body):
            content = msg.get("content")
            if content is not None and not isinstance(content, str):
                raise fail(f"R[{j + _PLACEHOLDERS}]['content'] must be a string")
            texts.append(content)
        return texts, 2
    if all(isinstance(x, list) for x in body) and body:  # round table: one list per agent
        n = len(body)
        expected = [len(range(k, n_turns, n)) for k in range(n)]
        if [len(h) for h in body] != expected:
            raise fail(f"R holds {[len(h) for h in body]} messages per agent, but {n_turns} "
                       f"turns in turn order need {expected}")
        texts: list[str | None] = [None] * n_turns
        for k, history in enumerate(body):
            for i, msg in enumerate(history):
                content = msg.get("content") if isinstance(msg, dict) else None
                if not isinstance(content, str):
                    raise fail(f"R[{k + _PLACEHOLDERS}][{i}] must be an object with a string "
                               "'content'")
                texts[k + i * n] = content
        return texts, n
    raise fail("R[2:] must be all messages (two-agent debate) or all per-agent message lists "
               "(round table)")


def _parse_record(path: Path, name: str, index: int, line: int, rec: dict) -> ParsedRecord:
    key = rec.get("Q") if isinstance(rec.get("Q"), str) else ""
    fail = partial(record_error, path, index, key, line=line)
    for key, kind in (("Q", str), ("A", str), ("R", list), ("P", list)):
        if key not in rec:
            raise fail(f"missing field {key!r}")
        if not isinstance(rec[key], kind):
            raise fail(f"field {key!r} must be a {kind.__name__}, got "
                       f"{type(rec[key]).__name__}")
    P = rec["P"]
    n_turns = len(P) - _PLACEHOLDERS
    if n_turns < 1:
        raise fail("P holds no turn (only its two placeholders)")
    if len(rec["R"]) < _PLACEHOLDERS:
        raise fail("R must start with the system instruction and the question")
    for j, p in enumerate(P):
        if p is not None and not isinstance(p, str):
            raise fail(f"P[{j}] must be a string or null, got {type(p).__name__}")
    texts_flat, n = _turn_texts(rec, n_turns, fail)
    if n_turns < n:
        raise fail(f"{n_turns} turns for {n} agents: round 0 is incomplete")
    names: list[str] | None = None
    flags: list[str] = []
    M = rec.get("M")
    if M is not None:
        if not isinstance(M, list) or len(M) != len(P) or \
                not all(isinstance(m, str) for m in M):
            raise fail("M must be a list of model names aligned with P")
        names = M[_PLACEHOLDERS:_PLACEHOLDERS + n]
        # the slot order decides who speaks; a later name for a slot is metadata (a flag)
        if any(m != names[j % n] for j, m in enumerate(M[_PLACEHOLDERS:])):
            flags.append("agent_renamed")
    n_rounds = -(-n_turns // n)
    texts: list[list[str | None]] = [[None] * n for _ in range(n_rounds)]
    answers: list[list[str | None]] = [[None] * n for _ in range(n_rounds)]
    for j in range(n_turns):
        texts[j // n][j % n] = texts_flat[j]
        answers[j // n][j % n] = short_label(P[j + _PLACEHOLDERS])
    options = rec.get("O")
    question = rec["Q"].strip()
    if isinstance(options, str) and options.strip():
        question = f"{question}\n{options.strip()}"
    return ParsedRecord(
        trajectory_id=f"{name}:{index}",
        question=question,
        protocol="debate",
        n_agents=n,
        reference=parse_ford_gold(rec["A"]),
        texts=texts,
        flags=flags,
        answers=answers,
        final_rule="all_rounds",
        extra={"agents": names},
    )


def parse_ford_file(path: Path, name: str | None = None) -> list[ParsedRecord]:
    """Records of one FORD JSONL file, in file order (see the module docstring); ``name``:
    the file's part of the trajectory ids (default: its stem).

    A bad record (a line that is not a JSON object, a missing or ill-typed ``Q``, ``A``,
    ``R``, ``P`` or ``M``, lengths that do not align) raises a ValueError naming the file,
    the record, its line and the field; inside
    :func:`~fastuq.importers.common.skipping` (``on_error="skip"``) it is left out and
    listed, and the file's other records are read (a skipped line keeps its index: the
    records after it keep their trajectory ids)."""
    name = path.stem if name is None else name
    return parse_jsonl_each(path, lambda i, line, rec: _parse_record(path, name, i, line, rec))
