"""Reading ChatEval's pairwise-comparison results (thunlp/ChatEval: referee agents with
personas debate which of two responses is better).

Learned from the repository's code (none of it copied): ``llm_eval.py`` (the record it
appends to ``pair_comparison_results.json``, and ``--reverse_input``, which swaps the two
responses, saved in ``args.txt`` beside the results), ``eval_helper/get_evaluation.py``
(``evaluation``: the last message of each agent, ``{"role": agent name, "evaluation":
text}``), the task configs under ``agentverse/tasks/llm_eval/`` (each referee ends with
``The score of Assistant 1: x`` / ``The score of Assistant 2: y``; the direct-comparison
tasks answer ``Assistant 1`` / ``Assistant 2``), and
``agentverse/tasks/llm_eval/data/faireval/raw_data/data_preprocess.py`` (the FairEval gold,
``human_results``: the name of the better response, or ``"tie"``).

File format: one JSON list, one object per question: ``question``; ``response``: ``{name:
text}`` for the two compared responses, in the order the run names them (Assistant 1 is the
first, unless the run was reversed); ``evaluation``: the agents' final statements. The
results hold no gold: it is read from the record's ``human_results`` (or ``gold``) when a
file carries one, else from ``references``, the run's input file (``test.json``: records with
``question`` and ``human_results``), matched by question text.

Canonical record: protocol ``"debate"`` (source ``"chateval"``), one round (the results keep
only each agent's
final statement), ``n_agents`` = the number of evaluations, slot ``k`` = the ``k``-th. Each
agent's answer is its verdict as a label: the name of the response it scores higher (or
names, in a direct comparison), ``"tie"`` for equal scores, null when the statement gives
neither two scores nor one assistant. The final answer is the team's verdict as ChatEval
aggregates it: the response with the higher summed score over the agents whose two scores
parse (``"tie"`` when equal; ``final_rule="given"``); in a direct comparison, the majority
verdict (ties to the first agent). ``reference`` is the gold label. A run made with
``--reverse_input`` (``args.txt`` says ``reverse_input=True``) showed the second response as
Assistant 1, and the labels follow that (flag ``reversed_input``). ``trajectory_id`` is
``<file>:<index>``, the file named by its path below the folder the import's files share
(``gpt_35_0301/pair_comparison_results:4``); the extra column ``agents`` holds the referees'
names.
"""

from __future__ import annotations

import re
from pathlib import Path

from fastuq.importers.common import (
    ParsedRecord,
    load_json_list,
    parse_each,
    question_record,
    record_error,
    short_label,
)

__all__ = ["parse_chateval_file", "read_references", "verdict"]

_SCORE = re.compile(r"score\s+of\s+Assistant\s*([12])\s*:?\s*\**\s*(-?\d+(?:\.\d+)?)",
                    re.IGNORECASE)
_NAMED = re.compile(r"\bAssistant\s*([12])\b", re.IGNORECASE)
_TIE = re.compile(r"\btie\b", re.IGNORECASE)


def _scores(text: str) -> tuple[float, float] | None:
    """(score of Assistant 1, score of Assistant 2), the last stated of each, or None."""
    found: dict[str, float] = {}
    for m in _SCORE.finditer(text):
        found[m.group(1)] = float(m.group(2))
    if "1" in found and "2" in found:
        return found["1"], found["2"]
    return None


def verdict(text: str | None) -> str | None:
    """``"1"``, ``"2"`` or ``"tie"``: which assistant a referee's statement prefers (its two
    scores compared; else, in its last non-empty line, one assistant named alone or the word
    "tie"); ``None`` when it says neither."""
    if not text:
        return None
    scores = _scores(text)
    if scores is not None:
        a, b = scores
        return "1" if a > b else "2" if b > a else "tie"
    lines = [ln for ln in text.splitlines() if ln.strip()]
    last = lines[-1] if lines else ""
    named = {m.group(1) for m in _NAMED.finditer(last)}
    if len(named) == 1 and not _TIE.search(last):
        return named.pop()
    if not named and _TIE.search(last):
        return "tie"
    return None


def read_references(path: str | Path) -> dict[str, str]:
    """``{question text (stripped): human_results}`` of a ChatEval input file (a JSON list of
    records with ``question`` and ``human_results``); ValueError naming the file and record
    otherwise."""
    path = Path(path)
    out: dict[str, str] = {}
    for i, rec in enumerate(load_json_list(path, "ChatEval input records")):
        if not isinstance(rec, dict) or not isinstance(rec.get("question"), str) or \
                not isinstance(rec.get("human_results"), str):
            raise record_error(path, i, "", "expected an object with string 'question' and "
                                            "'human_results'")
        out[rec["question"].strip()] = rec["human_results"]
    return out


def _reversed(path: Path) -> bool:
    args = path.parent / "args.txt"
    return args.is_file() and "reverse_input=True" in args.read_text(encoding="utf-8",
                                                                      errors="replace")


def _parse_record(path: Path, name: str, index: int, rec: object, reverse: bool,
                  references: dict[str, str] | None) -> ParsedRecord:
    rec, question, fail = question_record(path, index, rec)
    response = rec.get("response")
    if not isinstance(response, dict) or len(response) != 2:
        raise fail("field 'response' must be an object holding the two compared responses")
    evaluation = rec.get("evaluation")
    if not isinstance(evaluation, list) or not evaluation:
        raise fail("field 'evaluation' must be a non-empty list of {role, evaluation}")
    roles, texts = [], []
    for k, ev in enumerate(evaluation):
        if not isinstance(ev, dict) or not isinstance(ev.get("evaluation"), str):
            raise fail(f"evaluation[{k}] must be an object with a string 'evaluation'")
        roles.append(str(ev.get("role", f"agent {k}")))
        texts.append(ev["evaluation"])
    names = list(response)
    shown = names[::-1] if reverse else names  # Assistant 1, Assistant 2
    to_name = {"1": shown[0], "2": shown[1], "tie": "tie", None: None}
    votes = [verdict(t) for t in texts]
    answers = [to_name[v] for v in votes]
    gold = rec.get("human_results", rec.get("gold"))
    if gold is None and references is not None:
        gold = references.get(question.strip())
    if gold is not None:
        if not isinstance(gold, str) or (gold not in names and gold.lower() != "tie"):
            raise fail(f"gold {gold!r} is neither a response name ({', '.join(names)}) nor "
                       "'tie'")
        gold = short_label(gold)
    scored = [_scores(t) for t in texts]
    scored = [s for s in scored if s is not None]
    if scored:
        a, b = sum(s[0] for s in scored), sum(s[1] for s in scored)
        final: str | None = shown[0] if a > b else shown[1] if b > a else "tie"
        rule = "given"
    else:
        final, rule = None, "last_round"
    return ParsedRecord(
        trajectory_id=f"{name}:{index}",
        question=question.strip(),
        protocol="debate",
        n_agents=len(texts),
        reference=gold,
        texts=[texts],
        answers=[answers],
        flags=["reversed_input"] if reverse else [],
        final_rule=rule,
        final=final,
        extra={"agents": roles},
    )


def parse_chateval_file(path: Path, name: str | None = None,
                        references: dict[str, str] | None = None) -> list[ParsedRecord]:
    """Records of one ChatEval results file, in file order (see the module docstring);
    ``name``: the file's part of the trajectory ids (default: its stem); ``references``:
    :func:`read_references` of the run's input file."""
    data = load_json_list(path, "ChatEval records")
    reverse = _reversed(path)
    name = path.stem if name is None else name
    return parse_each(path, enumerate(data),
                      lambda i, rec: _parse_record(path, name, i, rec, reverse, references))
