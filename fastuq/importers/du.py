"""Reading Du et al.'s multi-agent debate logs (composable-models/llm_multiagent_debate).

File format: one JSON object ``{question: [agent_contexts, gold]}``; ``agent_contexts`` has one
chat history per agent (``user`` / ``assistant`` messages alternating, an optional leading
``system``), its ``k``-th ``assistant`` message being the agent's response in round ``k``.
Every agent speaks in every round (protocol ``"debate"``, ``n_agents`` = number of
histories, slot ``k`` = the ``k``-th history). This is the format of the mmlu and gsm logs
(``gen_mmlu.py``, ``gen_gsm.py``); the biography logs (``{person: agent_contexts}``, no gold,
bullet-point biographies rather than answers) are refused with a ValueError that says so.
The final answer is the majority among the agents that speak in the last round (ties to the
lowest slot, as the repository's ``most_frequent`` keeps the first of equally frequent
answers). A history with fewer responses than the others
leaves null nodes in the rounds it lacks and flags the record ``ragged_rounds``.

The gold answer (``reference`` column) is read as: for GSM8K solutions, the text after the
last ``####`` (commas removed); a ``\\boxed{}`` solution gives its last box; a choice letter
(``B`` or ``(B)``) gives the letter; a JSON number gives its decimal spelling; any other
string is kept as it is (stripped). A letter gold makes every response read as a choice
letter, a numeric gold reduces a boxed sentence around one number to the number
(``fastuq.answers.extract``, ``kind``).
"""

from __future__ import annotations

import re
from functools import partial
from pathlib import Path

from fastuq.answers.extract import last_boxed
from fastuq.importers.common import (
    ParsedRecord,
    chat_history,
    load_json_object,
    parse_each,
    record_error,
    rounds_from_agents,
)

__all__ = ["parse_du_file", "parse_gold"]

_CHOICE = re.compile(r"^\(?([A-J])\)?$")


def parse_gold(gold: str | int | float) -> str:
    """The reference answer of a Du-format gold field (see the module docstring)."""
    if isinstance(gold, bool):
        raise TypeError("gold must be a string or a number, got bool")
    if isinstance(gold, int | float):
        return repr(gold) if isinstance(gold, float) else str(gold)
    text = gold.strip()
    if "####" in text:
        return text.rsplit("####", 1)[1].strip().replace(",", "")
    boxed = last_boxed(text)
    if boxed is not None:
        return boxed
    m = _CHOICE.match(text)
    return m.group(1) if m else text


def _is_history(x) -> bool:
    return isinstance(x, list) and bool(x) and all(isinstance(m, dict) and "role" in m for m in x)


def _parse_record(path: Path, index: int, key: str, value) -> ParsedRecord:
    fail = partial(record_error, path, index, key)
    if isinstance(value, list) and value and all(_is_history(h) for h in value):
        raise fail("value is a list of agent histories without a gold answer, as in Du et "
                   "al.'s biography logs ({person: agent_contexts}); those state no answer "
                   "to parse and compare: fastuq import du takes [agent_contexts, gold] "
                   "records (the mmlu, gsm and math logs)")
    if not isinstance(value, list) or len(value) != 2:
        raise fail("value must be [agent_contexts, gold]")
    contexts, gold = value
    if not isinstance(contexts, list) or not contexts:
        raise fail("agent_contexts must be a non-empty list of histories")
    if isinstance(gold, bool) or not isinstance(gold, str | int | float):
        raise fail(f"gold must be a string or a number, got {type(gold).__name__}")
    per_agent = [chat_history(history, a, fail)[0] for a, history in enumerate(contexts)]
    texts, flags = rounds_from_agents(per_agent)
    return ParsedRecord(
        trajectory_id=f"{path.stem}:{index}",
        question=key.strip(),
        protocol="debate",
        n_agents=len(per_agent),
        reference=parse_gold(gold),
        texts=texts,
        flags=flags,
    )


def parse_du_file(path: Path) -> list[ParsedRecord]:
    """Records of one Du-format debate log, in file order (see the module docstring)."""
    data = load_json_object(path)
    return parse_each(path, enumerate(data.items()),
                      lambda i, kv: _parse_record(path, i, kv[0], kv[1]))
