"""Reading LLM-Agora's result files (gauss5930/LLM-Agora: multi-agent debate of open models,
each round's opinions summarised for the next).

Learned from the repository's code that writes them (none of it copied):
``GSM8K/gsm_inference.py``, ``MMLU/mmlu_inference.py`` and ``Math/math_inference.py``
(the record they append and dump to ``{task}_result.json`` / ``{task}_result_cot.json``),
and ``MMLU/mmlu_evaluation.py`` (how the answers are scored: the most frequent last-round
answer against ``answer``).

File format: one JSON list, one object per question:

* ``question_id``: its position in the run; ``question``: the prompt text;
* ``agent_response``: ``{model name: [entries]}``, one list per agent (so two agents of one
  model share a key: the file keeps only one of them). What the entries are depends on the
  task's writer. ``GSM8K/gsm_inference.py`` and ``Math/math_inference.py`` store the agent's
  responses at the context positions 1, 3 and -1: three responses (rounds 1, 2 and the
  last). ``MMLU/mmlu_inference.py`` stores positions 1, 2 and 3 of a context that alternates
  response and next prompt, i.e. [round-1 response, round-2 PROMPT, round-2 response], for
  any number of rounds; the prompt is the model's template around the list of summaries
  ("Here is a summary of responses from other agents: ...") and ends with the template's
  assistant tag (``ASSISTANT:``, ``### Response:``, ...); upstream's own
  ``MMLU/mmlu_performance.json`` (commit fec4297) scores the three positions 0.48, 0.0 and
  0.54, the prompt 0.0;
* ``summarization``: the summaries shown to the agents between rounds (not an agent: kept
  out of the canonical nodes);
* ``answer``: the gold, a GSM8K solution ending ``#### N``, an MMLU letter, or the
  arithmetic result (a number or a string).

Canonical record: protocol ``"debate"`` (source ``"agora"``), ``n_agents`` = the number of
models, slot ``k`` = the ``k``-th key of ``agent_response``. An entry is a prompt when it
contains ``Here is a summary of responses from other agents`` and ends (after whitespace)
with one of LLM-Agora's template assistant tags (:data:`PROMPT_TAGS`). A record whose every
list has three entries and whose middle entries are all prompts is in the MMLU writer's
shape: its rounds are entries 0 and 2, the prompts are dropped. A record with no prompt
entry is in the GSM8K/Math shape: round ``t`` = each model's ``t``-th entry (a model with
fewer entries leaves null nodes and flags ``ragged_rounds``; a null entry is a null node).
Any other place of a prompt (some agents' middle entries only, a prompt in a list of another
length or at another position) raises a ``ValueError`` naming the record, the model and the
entry. The endpoints generate without a stop sequence, so a response often runs on into
turns the model writes for the conversation's other speakers ("16 miles\nUSER: [\"Here is a
summary ..." in GSM8K/gsm_result.json, "219\n\nUSER: I'm sorry ...\n\nASSISTANT: ..." in
Math/math_result.json): a response ends before the first line that opens another speaker's
turn of LLM-Agora's templates (:data:`TURN_TAGS`, at the start of a line after optional
spaces), the rest is dropped from the node's text and the record is flagged
``continued_turn`` (a response that opens with such a tag is empty, so states no answer).
Answers are extracted from the texts as for Du et al.'s logs, guided by the gold
(``reference`` is read by :func:`fastuq.importers.du.parse_gold`: the number after ``####``,
a letter, a number); the final answer is the majority of the last round, ties to the first
model (as ``most_frequent`` keeps the first of equally frequent answers). ``trajectory_id``
is ``<file>:<index in the list>``, the file named by its path below the folder the import's
files share; the extra column ``agents`` holds the model names.
"""

from __future__ import annotations

import re
from pathlib import Path

from fastuq.importers.common import (
    ParsedRecord,
    load_json_list,
    parse_each,
    question_record,
    rounds_from_agents,
)
from fastuq.importers.du import parse_gold

__all__ = ["PROMPT_TAGS", "TURN_TAGS", "own_turn", "parse_agora_file"]

#: The assistant tags that end LLM-Agora's prompt templates (``src/prompt_template.json``:
#: llama, wizard and vicuna, alpaca and orca, llama-chat, koala, falcon, baize, phi).
PROMPT_TAGS: tuple[str, ...] = ("ASSISTANT:", "### Response:", "[/INST]", "GPT:",
                                ">>ANSWER<<", "[|AI|]", "Assistant:")
_SUMMARY_HEAD = "Here is a summary of responses from other agents"
#: The tags that open a turn of a speaker other than the assistant in LLM-Agora's prompt
#: templates (``src/prompt_template.json``: the user and system tags of llama, wizard,
#: vicuna, koala, phi, orca, alpaca, baize, falcon and llama-chat).
TURN_TAGS: tuple[str, ...] = ("USER:", "User:", "SYSTEM:", "### User:", "### System:",
                              "### Instruction:", "### Input:", "[|Human|]", ">>QUESTION<<",
                              "[INST]")
_TURN = re.compile(r"^[ \t]*(?:" + "|".join(re.escape(t) for t in TURN_TAGS) + ")",
                   re.MULTILINE)


def own_turn(text: str | None) -> tuple[str | None, bool]:
    """``(the response up to the first line that opens another speaker's turn, whether it was
    cut)``: ``text`` ends before the first line that starts (after spaces or tabs) with one
    of :data:`TURN_TAGS`; trailing white space before it is dropped. ``None`` stays ``None``.

    >>> own_turn("16 miles\\nUSER: [\\"Here is a summary ... 52")
    ('16 miles', True)
    >>> own_turn("Micah ran 28 miles, so Ahito ran 16.")
    ('Micah ran 28 miles, so Ahito ran 16.', False)
    """
    if text is None:
        return None, False
    m = _TURN.search(text)
    if m is None:
        return text, False
    return text[: m.start()].rstrip(), True


def _is_prompt(text: object) -> bool:
    """Whether an ``agent_response`` entry is a next-round prompt, not a response."""
    return (isinstance(text, str) and _SUMMARY_HEAD in text
            and text.rstrip().endswith(PROMPT_TAGS))


def _parse_record(path: Path, name: str, index: int, rec: object) -> ParsedRecord:
    rec, question, fail = question_record(path, index, rec)
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
    models = list(responses)
    prompts = [(m, t) for m, r in zip(models, per_agent, strict=True)
               for t, text in enumerate(r) if _is_prompt(text)]
    if prompts:
        mmlu_shape = all(len(r) == 3 for r in per_agent) and \
            prompts == [(m, 1) for m in models]
        if not mmlu_shape:
            odd = [f"agent_response[{m!r}][{t}] is a prompt" for m, t in prompts if t != 1]
            odd += [f"agent_response[{m!r}] has {len(r)} entries" if len(r) != 3 else
                    f"agent_response[{m!r}][1] is not a prompt"
                    for m, r in zip(models, per_agent, strict=True)
                    if len(r) != 3 or (m, 1) not in prompts]
            raise fail(f"{odd[0]}: a record may hold next-round prompts (summary + "
                       "assistant tag) only as the middle of every model's three entries, "
                       "as MMLU/mmlu_inference.py writes them")
        per_agent = [[r[0], r[2]] for r in per_agent]
    cut = [[own_turn(text) for text in r] for r in per_agent]
    per_agent = [[text for text, _ in r] for r in cut]
    texts, flags = rounds_from_agents(per_agent)
    if any(was_cut for r in cut for _, was_cut in r):
        flags.append("continued_turn")
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
