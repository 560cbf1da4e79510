"""Reading MAD debate files (Skytliang/Multi-Agents-Debate: an affirmative and a negative
debater argue, a moderator ends the debate when it prefers a side, a judge decides
otherwise).

Learned from the repository's code and files (none of it copied): ``code/debate4tran.py``
(``Debate.save_file``, the object dumped to ``{id}.json``: the run's settings, the topic, the
answers, ``players``: ``{player name: its chat memory}``; and the round structure: each round
the affirmative then the negative side speak, then the moderator answers in JSON),
``code/utils/config4all.json`` (the general question-answering config: ``debate_topic``,
``base_answer``, ``debate_answer``) and the published transcripts
``data/CommonMT/*/MAD_Debate_Process/*.json`` (keys spelled with spaces, ``"debate
translation"``, ``"correct reference"``).

File format: one JSON object per debate, ``{id}.json`` (the ``{id}-config.json`` files beside
them are the run's prompts and are skipped when a folder is imported), with

* ``players``: ``{"Affirmative side": [...], "Negative side": [...], "Moderator": [...],
  "Judge": [...]}``, each a chat memory (``role`` ``system`` / ``user`` / ``assistant``,
  ``content``); the debaters' ``assistant`` messages are their turns, one per round;
* the topic: ``debate_topic`` (``source`` in translation runs);
* the decision: ``debate_answer`` (``debate_translation``, ``"debate translation"``), empty
  when neither the moderator nor the judge decided; ``Supported Side``, ``Reason``;
* the gold, when the run has one: ``answer``, ``gold``, ``reference`` or ``"correct
  reference"`` (the first present and non-empty).

Canonical record: protocol ``"debate"`` (source ``"mad"``), two agents (slot 0 the affirmative
side, slot 1 the
negative side; the moderator and the judge decide but do not answer), round ``t`` = each
debater's ``t``-th turn (a side with fewer turns leaves null nodes and flags
``ragged_rounds``). Answers are read from the turns as short labels
(:func:`~fastuq.importers.common.label_answer`, guided by the gold: a letter gold reads
letters, a yes / no gold reads yes or no); the final answer is the decision, read the same
way (``final_rule="given"``), or, when the debate ended undecided, the debaters' last-round
majority (flag ``undecided``).
Meant for debates whose answer is a letter or a short label; a translation debate imports,
but its sentences compare only as exact strings. ``trajectory_id`` is the file's path below
the folder the import's files share, without ``.json``; the extra column ``agents`` holds
the two side names.
"""

from __future__ import annotations

from functools import partial
from pathlib import Path

from fastuq.answers.normalize import answer_kind
from fastuq.importers.common import (
    ParsedRecord,
    chat_history,
    label_answer,
    load_json,
    record_error,
    rounds_from_agents,
    short_label,
)
from fastuq.importers.du import parse_gold

__all__ = ["DEBATERS", "is_mad_config", "parse_mad_file"]

#: The debaters, in slot order.
DEBATERS = ("Affirmative side", "Negative side")
_TOPIC_KEYS = ("debate_topic", "source")
_DECISION_KEYS = ("debate_answer", "debate_translation", "debate translation")
_GOLD_KEYS = ("answer", "gold", "reference", "correct reference")


def is_mad_config(path: Path) -> bool:
    """Whether ``path`` is a MAD run's prompt file (``{id}-config.json``), not a debate."""
    return path.name.endswith("-config.json")


def _first(obj: dict, keys: tuple[str, ...], fail) -> object:
    for key in keys:
        value = obj.get(key)
        if value is None or (isinstance(value, str) and not value.strip()):
            continue
        if isinstance(value, bool) or not isinstance(value, str | int | float):
            raise fail(f"field {key!r} must be a string or a number, got "
                       f"{type(value).__name__}")
        return value
    return None


def parse_mad_file(path: Path, name: str | None = None) -> list[ParsedRecord]:
    """The debate of one MAD file, as a one-record list (see the module docstring);
    ``name``: its trajectory id (default: the file's stem)."""
    obj = load_json(path)
    if not isinstance(obj, dict):
        raise ValueError(f"{path}: expected one JSON object (a MAD debate), got "
                         f"{type(obj).__name__}")
    topic = _first(obj, _TOPIC_KEYS, partial(record_error, path, 0, ""))
    fail = partial(record_error, path, 0, str(topic) if topic is not None else "")
    if topic is None:
        raise fail("missing field 'debate_topic' (or 'source')")
    players = obj.get("players")
    if not isinstance(players, dict):
        raise fail("missing field 'players' ({player name: chat memory})")
    turns = []
    for side in DEBATERS:
        if side not in players:
            raise fail(f"players has no {side!r} (found: {', '.join(map(repr, players))})")
        turns.append(chat_history(players[side], side, fail, field="players")[0])
    gold = _first(obj, _GOLD_KEYS, fail)
    reference = None if gold is None else short_label(parse_gold(gold))
    kind = answer_kind(reference)
    texts, flags = rounds_from_agents(turns)
    answers = [[label_answer(x, kind, reference) for x in row] for row in texts]
    decision = _first(obj, _DECISION_KEYS, fail)
    if decision is None:
        flags.append("undecided")
    return [ParsedRecord(
        trajectory_id=path.stem if name is None else name,
        question=str(topic).strip(),
        protocol="debate",
        n_agents=len(DEBATERS),
        reference=reference,
        texts=texts,
        answers=answers,
        flags=flags,
        final_rule="last_round" if decision is None else "given",
        final=None if decision is None else label_answer(str(decision), kind, reference),
        extra={"agents": list(DEBATERS)},
    )]
