"""Reading MALLM's output files (Multi-Agent-LLMs/mallm: multi-agent discussions under
discourse policies -- memory, relay, report, debate -- and decision protocols).

Learned from the repository's code that writes them (none of it copied):
``mallm/scheduler.py`` (``Scheduler.run_discussion``: the record appended per example and
the whole list dumped with ``json.dumps`` to the output file), ``mallm/utils/types.py``
(the ``Memory``, ``Agreement`` and ``VotingResultList`` dataclasses the record's lists hold,
via ``dataclasses.asdict``), ``mallm/discourse_policy/policy.py`` (``DiscoursePolicy.discuss``:
``turn`` counts from 1, each agent of ``coordinator.agents`` speaks once per turn in order,
``message_id`` counts every message from 0, the loop may stop mid-turn once a decision is
reached, ``votesEachTurn`` maps each turn to a voting result or null),
``mallm/agents/agent.py`` (``improve`` / ``draft`` / ``feedback``: the message's
``solution``, null for feedback; ``memory_ids``: the ids of the messages in the agent's
memory when it spoke, its own included) and ``mallm/evaluation/metrics/qa.py`` (a choice
reference's first character is its letter).

File format: one JSON list, one object per example:

* ``exampleId``; ``input``: the example's input strings; ``references``: gold strings (a
  choice letter, or a label or number; the first is the reference);
* ``personas``: ``[{agentId, persona, personaDescription, ...}]``, the team in speaking
  order; ``paradigm``: the discourse policy;
* ``globalMemory``: every message of the discussion, ``{message_id, turn, agent_id,
  persona, contribution, message, agreement, solution, memory_ids, additional_args}``
  (older releases spell ``message`` / ``solution`` as ``text`` / ``extracted_draft``, and
  the oldest ``messageId``, ``agentId``, ``memoryIds``, ``text``, ``extractedDraft``: each
  spelling is read);
* ``finalAnswer`` (older: ``answer``): the decision protocol's answer, null when no
  decision was reached; ``decisionSuccess``; ``votesEachTurn``; ``agreements`` (the last
  agreement of each agent); ``turns``; ``clockSeconds``; ``agentMemory``.

Canonical record: protocol ``"debate"`` (source ``"mallm"``); slot ``k`` = the ``k``-th
agent of ``personas`` (when ``personas`` lacks agent ids: the order in which agents first
speak; an agent that speaks but is not listed gets the next slot and the flag
``agent_not_in_personas``), ``n_agents`` = the team size; round ``t`` = the ``t``-th turn
(turns must be consecutive integers). Node ``(t, k)`` is agent ``k``'s message of that turn
(null when it did not speak, as in a turn the decision cut short); an agent with several
messages in one turn (the debate policy's inner rounds) gives its last, and the record is
flagged ``several_messages_per_turn``. ``texts`` are the messages, ``answers`` the ``solution``
fields read as short labels guided by the gold (:func:`~fastuq.importers.common.label_answer`;
a feedback message states no solution: null, it casts no vote). The final answer is
``finalAnswer`` read the same way (``final_rule="given"``); when it is null or absent, or
``decisionSuccess`` is false, the record is flagged ``undecided`` and, without a
``finalAnswer``, the last round's majority is the final answer.

``predecessors`` (the UMAS graph, ``[round][slot]``): the agents of turn ``t-1`` whose
messages are among the node's ``memory_ids`` (its own message left out: UMAS reads peers).
Round 0 nodes have none (``[]``). Messages the node read from its own turn (the memory
policy shows earlier speakers of the turn) or from turns before ``t-1`` cannot be edges of a
round-to-round graph: they are left out and the record is flagged ``same_turn_reads`` or
``earlier_turn_reads``. A ``memory_ids`` entry naming no message of the record raises.
MALLM's own ``agreement`` booleans (the agent agreed with the current draft) are kept in
the extra column ``agreed`` (``[round][slot]``); fastuq's ``agreement`` stays the modal
share of the answers. ``trajectory_id`` is ``<file>:<exampleId>`` (``<file>:<index>``
without one), the file named by its path below the folder the import's files share; the
extra columns ``agents`` (the personas by slot) and ``paradigm`` hold the rest. The logs
carry no log-probabilities: agreement-only estimators, UMAS only with confidences joined
from elsewhere.
"""

from __future__ import annotations

from functools import partial
from pathlib import Path

import pyarrow as pa

from fastuq.answers.normalize import answer_kind
from fastuq.importers.common import (
    ParsedRecord,
    label_answer,
    load_json_list,
    parse_each,
    record_error,
    short_label,
)
from fastuq.importers.du import parse_gold
from fastuq.io.schema import CANONICAL

__all__ = ["MALLM_EXTRA", "is_mallm_record", "parse_mallm_file"]

#: The extra columns of a MALLM import beyond ``question``.
MALLM_EXTRA: tuple[pa.Field, ...] = (
    pa.field("agents", pa.list_(pa.string())),
    CANONICAL.field("predecessors"),
    pa.field("agreed", pa.list_(pa.list_(pa.bool_()))),
    pa.field("paradigm", pa.string()),
)

# each field of a memory entry and its spellings across MALLM releases, newest first
_SPELLINGS = {
    "message_id": ("message_id", "messageId"),
    "turn": ("turn",),
    "agent_id": ("agent_id", "agentId"),
    "message": ("message", "text"),
    "solution": ("solution", "extracted_draft", "extractedDraft"),
    "memory_ids": ("memory_ids", "memoryIds"),
    "agreement": ("agreement",),
    "persona": ("persona",),
}


def is_mallm_record(obj: object) -> bool:
    """Whether ``obj`` looks like one example of a MALLM output file (has ``globalMemory``)."""
    return isinstance(obj, dict) and "globalMemory" in obj


def _field(entry: dict, name: str) -> object:
    for key in _SPELLINGS[name]:
        if key in entry:
            return entry[key]
    return _ABSENT


_ABSENT = object()


def _is_int(x: object) -> bool:
    return isinstance(x, int) and not isinstance(x, bool)


def _messages(memory: object, fail) -> list[dict]:
    """The memory entries, checked and in one spelling."""
    if not isinstance(memory, list) or not memory:
        raise fail("field 'globalMemory' must be a non-empty list of messages")
    out = []
    for i, entry in enumerate(memory):
        if not isinstance(entry, dict):
            raise fail(f"globalMemory[{i}] must be an object, got {type(entry).__name__}")
        m = {name: _field(entry, name) for name in _SPELLINGS}
        turn = m["turn"]
        where = f"globalMemory[{i}]" + (f" (turn {turn})" if _is_int(turn) else "")
        for name in ("message_id", "turn"):
            if not _is_int(m[name]):
                raise fail(f"{where}: field {_SPELLINGS[name][0]!r} must be an integer")
        if not isinstance(m["agent_id"], str):
            raise fail(f"{where}: field 'agent_id' must be a string")
        for name in ("message", "solution"):
            value = m[name]
            if value is _ABSENT:
                m[name] = None
            elif value is not None and not isinstance(value, str):
                raise fail(f"{where}: field {_SPELLINGS[name][0]!r} must be a string or "
                           f"null, got {type(value).__name__}")
        ids = m["memory_ids"]
        if ids is _ABSENT or ids is None:
            ids = []
        if not isinstance(ids, list) or not all(map(_is_int, ids)):
            raise fail(f"{where}: field 'memory_ids' must be a list of message ids")
        m["memory_ids"] = ids
        agreed = m["agreement"]
        m["agreement"] = agreed if isinstance(agreed, bool) else None
        m["persona"] = m["persona"] if isinstance(m["persona"], str) else None
        m["where"] = where
        out.append(m)
    return out


def _team(rec: dict, messages: list[dict], fail, flags: list[str]
          ) -> tuple[list[str], list[str | None]]:
    """``(agent ids, persona names)`` by slot: ``personas``' agents, then any agent that
    speaks but is not listed there (flag ``agent_not_in_personas``)."""
    personas = rec.get("personas")
    ids: list[str] = []
    names: list[str | None] = []
    if isinstance(personas, list) and personas and all(
            isinstance(p, dict) and isinstance(p.get("agentId"), str) for p in personas):
        for p in personas:
            if p["agentId"] in ids:
                raise fail(f"personas lists agent {p['agentId']!r} twice")
            ids.append(p["agentId"])
            names.append(p.get("persona") if isinstance(p.get("persona"), str) else None)
        for m in messages:
            if m["agent_id"] not in ids:
                ids.append(m["agent_id"])
                names.append(m["persona"])
                if "agent_not_in_personas" not in flags:
                    flags.append("agent_not_in_personas")
        return ids, names
    for m in messages:
        if m["agent_id"] not in ids:
            ids.append(m["agent_id"])
            names.append(m["persona"])
    return ids, names


def _reference(rec: dict, fail) -> str | None:
    refs = rec.get("references")
    if refs is None or refs == []:
        return None
    if not isinstance(refs, list) or not all(isinstance(r, str | int | float)
                                             and not isinstance(r, bool) for r in refs):
        raise fail("field 'references' must be a list of strings")
    return short_label(parse_gold(refs[0]))


def _parse_record(path: Path, name: str, index: int, rec: object) -> ParsedRecord:
    if not isinstance(rec, dict):
        raise record_error(path, index, "", f"expected an object, got {type(rec).__name__}")
    example = rec.get("exampleId")
    key = str(example) if isinstance(example, str | int) and not isinstance(example, bool) \
        else ""
    fail = partial(record_error, path, index, key)
    messages = _messages(rec.get("globalMemory"), fail)
    flags: list[str] = []
    agents, personas = _team(rec, messages, fail, flags)
    slot = {a: k for k, a in enumerate(agents)}
    turns = sorted({m["turn"] for m in messages})
    if turns != list(range(turns[0], turns[0] + len(turns))):
        raise fail(f"field 'turn' of globalMemory skips turns (found {turns}): turns must be "
                   "consecutive")
    first = turns[0]
    by_id: dict[int, dict] = {}
    for m in messages:
        if m["message_id"] in by_id:
            raise fail(f"{m['where']}: field 'message_id' {m['message_id']} repeats")
        by_id[m["message_id"]] = m
    n, n_rounds = len(agents), len(turns)
    node: list[list[dict | None]] = [[None] * n for _ in range(n_rounds)]
    for m in sorted(messages, key=lambda m: m["message_id"]):
        t, k = m["turn"] - first, slot[m["agent_id"]]
        if node[t][k] is not None and "several_messages_per_turn" not in flags:
            flags.append("several_messages_per_turn")
        node[t][k] = m  # the agent's last message of the turn
    reference = _reference(rec, fail)
    kind = answer_kind(reference)
    predecessors: list[list[list[int] | None]] = [[None] * n for _ in range(n_rounds)]
    for t in range(n_rounds):
        for k, m in enumerate(node[t]):
            if m is None:
                continue
            preds: set[int] = set()
            for mid in m["memory_ids"]:
                read = by_id.get(mid)
                if read is None:
                    raise fail(f"{m['where']}: field 'memory_ids' names message {mid}, which "
                               "globalMemory does not hold")
                j = slot[read["agent_id"]]
                lag = m["turn"] - read["turn"]
                if j == k:
                    continue
                if lag == 1:
                    preds.add(j)
                elif lag == 0:
                    if "same_turn_reads" not in flags:
                        flags.append("same_turn_reads")
                elif lag > 1 and "earlier_turn_reads" not in flags:
                    flags.append("earlier_turn_reads")
            predecessors[t][k] = sorted(preds)
    texts = [[None if m is None else m["message"] for m in row] for row in node]
    answers = [[None if m is None else label_answer(m["solution"], kind, reference)
                for m in row] for row in node]
    agreed = [[None if m is None else m["agreement"] for m in row] for row in node]
    final = rec["finalAnswer"] if "finalAnswer" in rec else rec.get("answer")
    if final is not None and not isinstance(final, str):
        raise fail(f"field 'finalAnswer' must be a string or null, got {type(final).__name__}")
    if final is None or rec.get("decisionSuccess") is False:
        flags.append("undecided")
    inputs = rec.get("input")
    if isinstance(inputs, str):
        inputs = [inputs]
    if not isinstance(inputs, list) or not all(isinstance(x, str) for x in inputs):
        raise fail("field 'input' must be a list of strings")
    paradigm = rec.get("paradigm")
    return ParsedRecord(
        trajectory_id=f"{name}:{key if key else index}",
        question="\n".join(inputs).strip(),
        protocol="debate",
        n_agents=n,
        reference=reference,
        texts=texts,
        answers=answers,
        flags=flags,
        final_rule="last_round" if final is None else "given",
        final=None if final is None else label_answer(final, kind, reference),
        extra={"agents": personas, "predecessors": predecessors, "agreed": agreed,
               "paradigm": paradigm if isinstance(paradigm, str) else None},
    )


def parse_mallm_file(path: Path, name: str | None = None) -> list[ParsedRecord]:
    """Records of one MALLM output file, in file order (see the module docstring);
    ``name``: the file's part of the trajectory ids (default: its stem).

    A bad record (a message without an integer ``message_id`` or ``turn``, ``memory_ids``
    naming a message the record lacks, turns that skip, a repeated ``message_id``) raises a
    ValueError naming the file, the record and its ``exampleId``, the message (its index in
    ``globalMemory`` and its turn) and the field."""
    data = load_json_list(path, "MALLM examples")
    name = path.stem if name is None else name
    return parse_each(path, enumerate(data), lambda i, rec: _parse_record(path, name, i, rec))
