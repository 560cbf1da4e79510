"""Reading DyLAN's MATH logs (SALT-NLP/DyLAN, ``exp/MATH/CoT/*.json``).

File format: one JSON object; key = the prompt (few-shot examples, then ``Problem: ...``),
value = ``[agent_contexts, gold_answer, level, subject]``; ``agent_contexts`` holds one chat
history per agent kept in the file, each ``[system, user, assistant, user, assistant, ...]``,
its ``k``-th ``assistant`` message being that agent's response in round ``k``.

What the generating code does, and what the files show (all 4,800 records checked):

* A team of 4 agents; agents answer one after another. In round 0 (and in round 1), as soon
  as the answers so far hold a consensus (more than ``floor(2/3 * asked)`` equivalent
  answers, checked from the third agent on) the run stops, and the file keeps the histories
  of the agents asked so far: *3 histories x 1 round* (agent 3 never spoke), *4 x 1*,
  *3 x 2* and *4 x 2*. In a 3 x 2 record agent 3 spoke in round 0 but its history was
  dropped.
* Without consensus after round 1, a ranker keeps the 2 best agents (in the ranker's order,
  usually ascending) and the file keeps only those 2 histories: *2 x 2* (the survivors
  already agree) or *2 x 3* (they answer round 2). Rounds 0 and 1 had all 4 agents speaking.
* Every round-1 prompt quotes, verbatim and in agent order, the latest response of each of
  the other 3 agents (``One agent solution: ```...``` ``): an agent before it in the team
  has already answered round 1, an agent after it is quoted from round 0.

Slots. Slot ``k`` is the team's agent ``k`` in every round. For 3 and 4 histories the file's
order is the team's order (the code stores the first agents asked), and the quotes confirm
it. For 2 survivors the importer finds which of the 4 agents each one was by matching the
quotes in both round-1 prompts against both histories. In the 4,800 records the quotes fit
the file order in all 2,049 multi-round records with 3 or 4 histories, and exactly one
assignment in 1,299 of the 1,301 survivor pairs (one pair is ambiguous, in one the ranker
kept the same agent twice; see the flags below).

Recovery. With the slots known, the quotes in the round-1 prompts give the texts of agents
whose history the file dropped (agent 3's round-0 answer in every 3 x 2 record; for 2
survivors, most round-0 and round-1 answers of the 2 pruned agents). They are verbatim
copies (they match the kept histories exactly wherever both exist), so they fill the nodes
and the record gets the flag ``from_prompts``. Pass ``recover=False`` to keep only the
histories.

Flags (``flags`` column): ``from_prompts`` (some texts come from quotes),
``responses_missing`` (an agent that spoke in a round has neither a history nor a quote
there: its node stays null and counts as an unparseable answer), ``slots_ambiguous`` (several
slot assignments fit because agents wrote identical texts; the first, in ascending order, is
used), ``slots_by_order`` (the slots could not be determined: the histories fill the first
slots in file order and nothing is recovered), ``duplicate_history`` (the ranker kept the same
agent twice: the file holds one history twice, kept once), ``unparseable_round`` (see
:mod:`fastuq.importers.common`).

Active agents (the canonical ``active`` column, ``[round][slot]``). DyLAN's ranker runs once
the agents disagree after round 1: it ranks their round-1 answers and keeps 2 agents, whose
round-1 answers then decide whether the run stops (*2 x 2*) or who answers round 2 (*2 x 3*).
So in a pruned record (2 histories, or 1 when the ranker kept one agent twice) round 0 has
all 4 agents active and every later round only the survivors (the slots of the kept
histories), the pruned agents inactive even where their round-1 answers were recovered from
quotes. Every other record has all 4 agents active in every round (an agent that was never
asked, such as agent 3 of a *3 x 1* record, is still in the team; it just casts no vote).

Final answer: :func:`fastuq.signals.final_answer_slot` on the last round, the majority of the
active agents that speak there (ties to the lowest slot; see
:mod:`fastuq.importers.common`): for a pruned record the survivors' answers, never a vote
that includes a pruned agent's recovered answer. This is the answer DyLAN's code stops on
(its consensus check and the stored histories are the survivors'), and the answer replay
gives at the last round from the same ``active`` column.

Columns: the canonical ones (``protocol`` "dylan", ``n_agents`` 4), plus ``question`` (the
problem text), ``subject`` and ``level``. ``trajectory_id`` is ``<file stem>:<index>``, the
index being the record's position in the file's object; ``question_id`` hashes the problem
text.
"""

from __future__ import annotations

import itertools
import re
from functools import partial
from pathlib import Path

from fastuq.importers.common import (
    ParsedRecord,
    chat_history,
    load_json_object,
    parse_each,
    record_error,
)

__all__ = ["TEAM_SIZE", "parse_dylan_file"]

#: DyLAN's initial team size in the MATH experiments.
TEAM_SIZE = 4

_PROMPT_HEAD = "These are the solutions to the problem from other agents: "
_QUOTE = re.compile(
    r"One agent solution: ```(.*?)```(?=\n\nOne agent solution: ```|\n\nUsing the reasoning)",
    re.S,
)
_PROBLEM = "Problem: "


def _problem_text(prompt: str) -> str:
    start = prompt.rfind(_PROBLEM)
    text = prompt[start + len(_PROBLEM):] if start >= 0 else prompt
    text = text.rstrip()
    if text.endswith("Answer:"):
        text = text[: -len("Answer:")]
    return text.strip()


def _quotes(prompts: list[str]) -> list[str] | None:
    """The other agents' quoted responses in a round-1 prompt, or None if not all found."""
    if len(prompts) < 2 or not prompts[1].startswith(_PROMPT_HEAD):
        return None
    found = _QUOTE.findall(prompts[1])
    return found if len(found) == TEAM_SIZE - 1 else None


def _assign(resp: list[list[str]], quotes: list[list[str]]
            ) -> list[tuple[tuple[int, ...], dict[tuple[int, int], str]]]:
    """Consistent slot assignments with their recovered round-0/1 texts (see module doc)."""
    out = []
    n = len(resp)
    for perm in itertools.permutations(range(TEAM_SIZE), n):
        ok = True
        recovered: dict[tuple[int, int], str] = {}
        for h in range(n):
            for pos, text in enumerate(quotes[h]):
                j = pos if pos < perm[h] else pos + 1
                t = 1 if j < perm[h] else 0
                if j in perm:  # a kept history: the quote must be its text
                    g = perm.index(j)
                    if t >= len(resp[g]) or resp[g][t] != text:
                        ok = False
                        break
                elif recovered.setdefault((t, j), text) != text:
                    ok = False
                    break
            if not ok:
                break
        if ok:
            out.append((perm, recovered))
    return out


def _parse_record(path: Path, index: int, key: str, value, recover: bool) -> ParsedRecord:
    # a DyLAN key is the whole prompt: messages show its end, where the problem is
    fail = partial(record_error, path, index, key, key_end=True)
    if not isinstance(value, list) or len(value) != 4:
        raise fail("value must be [agent_contexts, gold_answer, level, subject]")
    contexts, gold, level, subject = value
    if not isinstance(contexts, list) or not contexts:
        raise fail("agent_contexts must be a non-empty list of histories")
    if len(contexts) > TEAM_SIZE:
        raise fail(f"{len(contexts)} histories for a team of {TEAM_SIZE} agents")
    if gold is not None and not isinstance(gold, str | int | float):
        raise fail(f"gold_answer must be a string, got {type(gold).__name__}")
    if level is not None and not isinstance(level, int):
        m = re.search(r"\d+", str(level))
        level = int(m.group()) if m else None
    flags: list[str] = []
    parsed = [chat_history(h, a, fail) for a, h in enumerate(contexts)]
    n_rounds = max(len(r) for r, _ in parsed)
    if n_rounds >= 2:
        kept: list = []
        for raw in contexts:
            if any(raw == other for other in kept):
                flags.append("duplicate_history")
            else:
                kept.append(raw)
        if len(kept) < len(contexts):
            parsed = [chat_history(h, a, fail) for a, h in enumerate(kept)]
    resp = [r for r, _ in parsed]
    n_hist = len(resp)
    slots: tuple[int, ...] = tuple(range(n_hist))
    recovered: dict[tuple[int, int], str] = {}
    if n_rounds >= 2:
        quotes = [_quotes(p) for _, p in parsed]
        options = _assign(resp, quotes) if all(q is not None for q in quotes) else []
        if n_hist >= 3:  # the file keeps the first agents asked, in order
            options = [o for o in options if o[0] == slots]
        if n_hist < 2 or not options:
            flags.append("slots_by_order")
        else:
            if len(options) > 1:
                flags.append("slots_ambiguous")
            slots, recovered = options[0]
    texts: list[list[str | None]] = [[None] * TEAM_SIZE for _ in range(n_rounds)]
    for h, slot in enumerate(slots):
        for t, text in enumerate(resp[h]):
            texts[t][slot] = text
    if recover and recovered:
        for (t, j), text in recovered.items():
            if texts[t][j] is None:
                texts[t][j] = text
        flags.append("from_prompts")
    pruned = n_rounds >= 2 and n_hist <= 2  # the ranker ran after round 1
    active = [[True] * TEAM_SIZE if t == 0 or not pruned
              else [k in slots for k in range(TEAM_SIZE)] for t in range(n_rounds)]
    if "slots_by_order" not in flags and n_rounds >= 2:
        for t in range(n_rounds):
            full = t < 2 and (pruned or t < n_rounds - 1)
            speakers = range(TEAM_SIZE) if full else slots
            if any(texts[t][j] is None for j in speakers):
                flags.append("responses_missing")
                break
    return ParsedRecord(
        trajectory_id=f"{path.stem}:{index}",
        question=_problem_text(key),
        protocol="dylan",
        n_agents=TEAM_SIZE,
        reference=None if gold is None else str(gold).strip(),
        texts=texts,
        flags=flags,
        extra={"subject": subject if isinstance(subject, str) else None, "level": level},
        active=active,
    )


def parse_dylan_file(path: Path, *, recover: bool = True) -> list[ParsedRecord]:
    """Records of one DyLAN MATH log, in file order (see the module docstring)."""
    data = load_json_object(path)
    return parse_each(path, enumerate(data.items()),
                      lambda i, kv: _parse_record(path, i, kv[0], kv[1], recover))
