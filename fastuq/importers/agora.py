"""Reading LLM-Agora's result files (gauss5930/LLM-Agora: multi-agent debate of open models,
each round's opinions summarised for the next).

Learned from the repository's code that writes them (none of it copied):
``GSM8K/gsm_inference.py``, ``MMLU/mmlu_inference.py`` and ``Math/math_inference.py``
(the record they append and dump to ``{task}_result.json`` / ``{task}_result_cot.json``),
and ``MMLU/mmlu_evaluation.py`` (how the answers are scored: the most frequent last-round
answer against ``answer``).

File format: one JSON list, one object per question:

* ``question_id``: its position in the run; ``question``: the prompt text;
* ``agent_response``: ``{model name: [round-0 response, round-1 response, ...]}``, one entry
  per agent (so two agents of one model share a key: the file keeps only one of them);
* ``summarization``: the summaries shown to the agents between rounds (not an agent: kept
  out of the canonical nodes);
* ``answer``: the gold, a GSM8K solution ending ``#### N``, an MMLU letter, or the
  arithmetic result (a number or a string).

Canonical record: protocol ``"debate"`` (source ``"agora"``), ``n_agents`` = the number of
models, slot ``k`` =
the ``k``-th key of ``agent_response``, round ``t`` = each model's ``t``-th response (a model
with fewer responses leaves null nodes and flags ``ragged_rounds``; a null response is a null
node). Answers are extracted from the texts as for Du et al.'s logs, guided by the gold
(``reference`` is read by :func:`fastuq.importers.du.parse_gold`: the number after ``####``,
a letter, a number); the final answer is the majority of the last round, ties to the first
model (as ``most_frequent`` keeps the first of equally frequent answers). ``trajectory_id``
is ``<file>:<index in the list>``, the file named by its path below the folder the import's
files share; the extra column ``agents`` holds the model names.
"""

from __future__ import annotations

from functools import partial
from pathlib import Path

from fastuq.importers.common import ParsedRecord, load_json_list, parse_each, record_error
from fastuq.importers.du import parse_gold

__all__ = ["parse_agora_file"]


def _parse_record(path: Path, name: str, index: int, rec: object) -> ParsedRecord:
    if not isinstance(rec, dict):
        raise record_error(path, index, "", f"expected an object, got {type(rec).__name__}")
    question = rec.get("question")
    fail = partial(record_error, path, index, question if isinstance(question, str) else "")
    if not isinstance(question, str):
        raise fail("missing or non-string field 'question'")
    responses = rec.get("agent_response")
    if not isinstance(responses, dict) or not responses:
        raise fail("field 'agent_response' must be a non-empty object {model: [responses]}")
    if "answer" not in rec:
        raise fail("missing field 'answer'")
    gold = rec["answer"]
    if isinstance(gold, bool) or not isinstance(gold, str | int | float):
        raise fail(f"field 'answer' must be a string or a number, got {type(gold).__name__}")
    per_agent = []
    for model, texts in responses.items():
        if not isinstance(texts, list) or not texts:
            raise fail(f"agent_response[{model!r}] must be a non-empty list of responses")
        for t, text in enumerate(texts):
            if text is not None and not isinstance(text, str):
                raise fail(f"agent_response[{model!r}][{t}] must be a string or null")
        per_agent.append(texts)
    n_rounds = max(len(r) for r in per_agent)
    texts = [[r[t] if t < len(r) else None for r in per_agent] for t in range(n_rounds)]
    flags = ["ragged_rounds"] if any(len(r) < n_rounds for r in per_agent) else []
    return ParsedRecord(
        trajectory_id=f"{name}:{index}",
        question=question.strip(),
        protocol="debate",
        n_agents=len(per_agent),
        reference=parse_gold(gold),
        texts=texts,
        flags=flags,
        extra={"agents": list(responses)},
    )


def parse_agora_file(path: Path, name: str | None = None) -> list[ParsedRecord]:
    """Records of one LLM-Agora result file, in file order (see the module docstring);
    ``name``: the file's part of the trajectory ids (default: its stem)."""
    data = load_json_list(path, "LLM-Agora records")
    name = path.stem if name is None else name
    return parse_each(path, enumerate(data), lambda i, rec: _parse_record(path, name, i, rec))
