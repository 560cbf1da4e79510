"""A documented mapping from any JSONL or Parquet layout with rounds and agents to the
canonical columns: ``fastuq import generic --config map.toml``.

The mapping is a TOML file (read with the standard library's ``tomllib``) of three tables.
Every value is a string; a *key path* is dot-separated (``"meta.gold"``; a key of digits
also indexes a list, ``"."`` is the object itself; a key that holds dots is tried whole
first). Unknown tables or keys, a wrong type, a key of the other layout or a missing
required key raise ``ValueError`` naming the key.

``[input]``

* ``layout`` (required): ``"nested"``, one record (JSONL line or Parquet row) per
  trajectory, its nodes in a container; or ``"long"``, one record per node (one agent's
  response in one round), the trajectory's other fields repeated on its rows.
* ``format``: ``"jsonl"`` or ``"parquet"`` (default: from each file's name, ``.jsonl`` /
  ``.parquet``; a folder stands for its files of those suffixes).
* ``protocol``: the ``protocol`` column, the interaction structure that selects presets
  (default ``"debate"``; ``"self_consistency"`` with ``trajectory.samples``).
* ``source``: the ``source`` column, the log format or data set (metadata only; default
  ``"generic"``).

``[trajectory]`` (key paths in the record; in the long layout, in each row)

* ``question_id`` (required): the question's id, a string or an integer (the
  ``question_id`` column, as written).
* ``question``: the question text (default: the question id).
* ``reference``: the gold answer (a GSM8K ``#### N`` solution, a ``\\boxed{}``, ``(B)``, a
  number or any string; read as Du et al.'s gold is, then as a short label).
* ``final_answer``: the final answer as the log states it (a moderator's decision, a
  vote). Default: the majority of the last round's answers, ties to the lowest slot.
* ``trajectory_id``: the trajectory's id. Default: ``<file>:<record index>`` (nested) or
  ``<file>:<question id>`` (long: then the question id groups the rows, so give a trajectory
  id when a question has several trajectories), the file named by its path below the
  folder the import's files share, without its suffix. Ids must be unique in an import.
* ``rounds`` (nested only, required): the node container. ``order = "round_agent"`` (the
  default): a list of rounds, each a list of nodes (slot = position) or an object ``{agent
  name: node}`` (slot = the name's first appearance in the record); ``order =
  "agent_round"``: a list of agents, each a list of nodes over rounds (slot = position), or
  ``{agent name: [nodes]}`` (slot = key order). A shorter round or agent leaves null nodes
  (agents that did not speak); a null node is one too.
* ``order`` (nested only): ``"round_agent"`` or ``"agent_round"``, as above.
* ``samples`` (nested only, instead of ``rounds``): a self-consistency log's flat list of the
  question's ``k`` sampled responses (nodes), which become round 0, one slot per sample
  (``n_agents`` = ``k``); the protocol defaults to ``"self_consistency"``.

``[gold]`` (optional: the gold answers in a second file, joined by key; instead of
``trajectory.reference``)

* ``file`` (required): a JSONL file, a JSON list or a Parquet file of records, one per
  question; a relative path is read from the mapping file's folder (from the working folder
  for a mapping given as a ``dict``).
* ``key`` (required): the key path of the question id in those records, matched to
  ``trajectory.question_id`` (a string or an integer, compared as strings).
* ``answer`` (required): the key path of the gold answer in those records (read as
  ``trajectory.reference`` is).

A key that appears twice in the gold file, or a trajectory whose question id it lacks, is an
error naming the file and the record.

``[node]`` (key paths in a node; in the long layout, in the row)

* ``text``: the response text (``"."``: the node is the text itself).
* ``answer``: the parsed answer as the log states it (a string or a number; read as a
  short label: ``(B)`` is ``B``, ``Yes`` is ``yes``, ``"None"`` is null). Without it answers
  are extracted from ``text``, guided by the gold (``fastuq.importers.common``). At least one
  of ``text`` and ``answer`` is required.
* ``round`` (long only, required): the round, an integer; rounds are the distinct values in
  ascending order.
* ``agent`` (long only, required): the agent, a string or an integer; slots are the
  distinct values in ascending order (numbers numerically).

A configured key must be present in every record or node it applies to (its value may be
null, read as "none"): a misspelt path fails on the first record, naming it, rather than
importing nulls. In the long layout the trajectory's fields must agree on all its rows, and
an (agent, round) pair may appear once. Columns: the canonical ones, plus ``question`` and
``agents`` (the agents' names, where the layout names them).

With ``on_error="skip"`` (``--on-error skip``) a bad trajectory is left out and listed
alone: in the nested layout a bad record, a JSONL line that is not a JSON object included
(the other lines keep their indexes); in the long layout a trajectory one of whose rows is
bad. A long-layout row that cannot be given to a trajectory (a line that is not a JSON
object, a missing or ill-typed question id or trajectory id) leaves the whole file out,
since any of its trajectories could be the one missing a node.

Example (``map.toml``) for lines such as ``{"id": 7, "q": "...", "gold": "B", "turns":
[[{"say": "...", "pick": "B"}, ...], ...]}``::

    [input]
    layout = "nested"
    protocol = "debate"

    [trajectory]
    question_id = "id"
    question = "q"
    reference = "gold"
    rounds = "turns"

    [node]
    text = "say"
    answer = "pick"

A self-consistency log, ``{"qid": 7, "samples": ["...", "...", "..."]}`` per line, with its
gold in ``gold.jsonl`` (``{"id": 7, "answer": "42"}`` per line)::

    [input]
    layout = "nested"

    [trajectory]
    question_id = "qid"
    samples = "samples"

    [node]
    text = "."

    [gold]
    file = "gold.jsonl"
    key = "id"
    answer = "answer"
"""

from __future__ import annotations

import os
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from functools import partial
from pathlib import Path

from fastuq.importers.common import (
    ParsedRecord,
    get_path,
    jsonl_lines,
    load_json_list,
    load_toml,
    parse_each,
    record_error,
    short_label,
)
from fastuq.importers.du import parse_gold

__all__ = ["GenericMapping", "load_mapping", "parse_generic_file", "read_gold"]

_KEYS: dict[str, tuple[str, ...]] = {
    "input": ("layout", "format", "protocol", "source"),
    "trajectory": ("question_id", "question", "reference", "final_answer", "trajectory_id",
                   "rounds", "order", "samples"),
    "node": ("text", "answer", "round", "agent"),
    "gold": ("file", "key", "answer"),
}
_NESTED_ONLY = {"trajectory.rounds", "trajectory.order", "trajectory.samples"}
_LONG_ONLY = {"node.round", "node.agent"}
_CHOICES = {"input.layout": ("nested", "long"), "input.format": ("jsonl", "parquet"),
            "trajectory.order": ("round_agent", "agent_round")}
_SUFFIXES = {".jsonl": "jsonl", ".parquet": "parquet"}


@dataclass(frozen=True)
class GenericMapping:
    """A validated generic mapping (see the module docstring for every field)."""

    layout: str
    question_id: str
    format: str | None = None
    protocol: str = "debate"
    source: str = "generic"
    question: str | None = None
    reference: str | None = None
    final_answer: str | None = None
    trajectory_id: str | None = None
    rounds: str | None = None
    order: str = "round_agent"
    text: str | None = None
    answer: str | None = None
    round: str | None = None
    agent: str | None = None
    samples: str | None = None
    #: ``[gold]``: the gold file's answers by question id (``None``: no gold file)
    gold: Mapping[str, str | None] | None = None

    @property
    def suffixes(self) -> tuple[str, ...]:
        """File suffixes a folder is expanded to."""
        if self.format is None:
            return tuple(_SUFFIXES)
        return tuple(s for s, f in _SUFFIXES.items() if f == self.format)


def load_mapping(source: str | os.PathLike | Mapping) -> GenericMapping:
    """The mapping of a TOML file (or of an already parsed ``dict``), validated: ValueError
    naming the file and the key for an unknown table or key, a non-string value, a value
    outside its choices, a key of the other layout or a missing required key;
    FileNotFoundError for a missing file."""
    if isinstance(source, Mapping):
        where, data = "mapping", dict(source)
        folder = Path.cwd()
    else:
        folder = Path(source).parent
        where = os.fspath(source)
        data = load_toml(source)

    def bad(what: str) -> ValueError:
        return ValueError(f"{where}: {what}")

    values: dict[str, str] = {}
    for table, body in data.items():
        if table not in _KEYS:
            raise bad(f"unknown table [{table}] (known: {', '.join(f'[{t}]' for t in _KEYS)})")
        if not isinstance(body, Mapping):
            raise bad(f"[{table}] must be a table of keys")
        for key, value in body.items():
            name = f"{table}.{key}"
            if key not in _KEYS[table]:
                raise bad(f"unknown key {name!r} (known in [{table}]: "
                          f"{', '.join(_KEYS[table])})")
            if not isinstance(value, str) or not value:
                raise bad(f"{name} must be a non-empty string, got {value!r}")
            if name in _CHOICES and value not in _CHOICES[name]:
                raise bad(f"{name} must be one of {', '.join(map(repr, _CHOICES[name]))}, "
                          f"got {value!r}")
            values[name] = value
    layout = values.get("input.layout")
    if layout is None:
        raise bad("missing key 'input.layout' ('nested' or 'long')")
    required = ["trajectory.question_id"]
    if layout == "nested":
        if "trajectory.samples" in values and "trajectory.rounds" in values:
            raise bad("give trajectory.rounds (a debate's rounds) or trajectory.samples (a "
                      "self-consistency log's samples), not both")
        if "trajectory.samples" not in values:
            required.append("trajectory.rounds")
    else:
        required += ["node.round", "node.agent"]
    if any(k.startswith("gold.") for k in values):
        required += ["gold.file", "gold.key", "gold.answer"]
        if "trajectory.reference" in values:
            raise bad("give trajectory.reference or a [gold] file, not both")
    for name in required:
        if name not in values:
            raise bad(f"missing key {name!r} (required with layout = {layout!r})")
    other = _LONG_ONLY if layout == "nested" else _NESTED_ONLY
    for name in sorted(other & set(values)):
        raise bad(f"key {name!r} is only for layout = "
                  f"{'long' if layout == 'nested' else 'nested'!r}")
    if "node.text" not in values and "node.answer" not in values:
        raise bad("[node] needs 'text' or 'answer' (or both)")
    gold = None
    if "gold.file" in values:
        gold = read_gold(folder / values.pop("gold.file"), values.pop("gold.key"),
                         values.pop("gold.answer"))
    if "input.protocol" not in values and "trajectory.samples" in values:
        values["input.protocol"] = "self_consistency"
    return GenericMapping(**{name.split(".", 1)[1]: v for name, v in values.items()},
                          gold=gold)


def read_gold(path: str | os.PathLike, key: str, answer: str) -> dict[str, str | None]:
    """``{question id: gold}`` of a gold file (JSONL, a JSON list or Parquet; ``key`` and
    ``answer`` are key paths in its records; the gold is read as ``trajectory.reference``
    is). ValueError naming the file and the record for a record without either key, a key
    that is not a string or an integer, or a key that repeats; FileNotFoundError for a
    missing file."""
    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"{path}: no such gold file ([gold] file)")
    name = path.name.lower()
    if name.endswith(".json"):
        records: list = list(enumerate(load_json_list(path, "gold records")))
    else:
        records = list(_rows(path, GenericMapping(layout="nested", question_id=key)))
    out: dict[str, str | None] = {}
    first: dict[str, int] = {}
    for index, rec in records:
        fail = partial(record_error, path, index, "")
        try:
            raw_key = get_path(rec, key)
        except KeyError:
            raise fail(f"missing field {key!r} (gold.key)") from None
        qid = _scalar_id(raw_key, "gold.key", fail)
        try:
            value = get_path(rec, answer)
        except KeyError:
            raise fail(f"missing field {answer!r} (gold.answer)") from None
        if qid in first:
            raise record_error(path, index, qid, f"question id repeats record {first[qid]}'s "
                               "(gold.key)")
        first[qid] = index
        if value is not None and (isinstance(value, bool)
                                  or not isinstance(value, str | int | float)):
            raise fail(f"gold.answer {answer!r} must be a string or a number, got "
                       f"{type(value).__name__}")
        out[qid] = None if value is None else short_label(parse_gold(value))
    return out


def _rows(path: Path, mapping: GenericMapping) -> Iterator[tuple[int, dict | ValueError]]:
    """``(index, row)`` of each row of the file; a JSONL line that is not a JSON object gives
    its ``ValueError`` in place of the row (:func:`~fastuq.importers.common.jsonl_lines`)."""
    fmt = mapping.format or _SUFFIXES.get(path.suffix.lower())
    if fmt is None:
        raise ValueError(f"{path}: cannot tell JSONL from Parquet by the name: set "
                         "input.format in the mapping")
    if fmt == "jsonl":
        for index, _, rec in jsonl_lines(path):
            yield index, rec
        return
    import pyarrow.parquet as pq

    try:
        table = pq.read_table(path)
    except Exception as exc:  # noqa: BLE001 - pyarrow raises several kinds
        raise ValueError(f"{path}: not a readable Parquet file: {exc}") from exc
    yield from enumerate(table.to_pylist())


def _field(rec: dict, path: str | None, name: str, fail) -> object:
    """The value of the configured ``[trajectory]``/``[node]`` key ``name`` (None when not
    configured); ``fail`` when the record lacks it."""
    if path is None:
        return None
    try:
        return get_path(rec, path)
    except KeyError:
        raise fail(f"missing field {path!r} ({name} = {path!r})") from None


def _scalar_id(value: object, name: str, fail) -> str:
    if isinstance(value, bool) or not isinstance(value, str | int) or value == "":
        raise fail(f"{name} must be a non-empty string or an integer, got {value!r}")
    return str(value)


def _node_values(node: object, m: GenericMapping, where: str, fail
                 ) -> tuple[str | None, str | None]:
    """(text, answer) of one node (None for a null node)."""
    if node is None:
        return None, None
    text = answer = None
    if m.text is not None:
        try:
            text = get_path(node, m.text)
        except KeyError:
            raise fail(f"{where} has no {m.text!r} (node.text)") from None
        if text is not None and not isinstance(text, str):
            raise fail(f"{where}: node.text {m.text!r} must be a string or null, got "
                       f"{type(text).__name__}")
    if m.answer is not None:
        try:
            raw = get_path(node, m.answer)
        except KeyError:
            raise fail(f"{where} has no {m.answer!r} (node.answer)") from None
        if raw is not None and not isinstance(raw, str | int | float):
            raise fail(f"{where}: node.answer {m.answer!r} must be a string, a number or "
                       f"null, got {type(raw).__name__}")
        answer = short_label(raw)
    return text, answer


def _gold(value: object, m: GenericMapping, fail) -> str | None:
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, str | int | float):
        raise fail(f"reference {m.reference!r} must be a string or a number, got "
                   f"{type(value).__name__}")
    return short_label(parse_gold(value))


def _record(path: Path, m: GenericMapping, tid: str, qid: str, head: dict, fail,
            grid: list[list[tuple[str | None, str | None]]], names: list[str] | None
            ) -> ParsedRecord:
    question = _field(head, m.question, "trajectory.question", fail)
    if question is not None and not isinstance(question, str):
        raise fail(f"question {m.question!r} must be a string, got {type(question).__name__}")
    if m.gold is not None:
        if qid not in m.gold:
            raise fail(f"question id {qid!r} is not in the [gold] file")
        reference = m.gold[qid]
    else:
        reference = _gold(_field(head, m.reference, "trajectory.reference", fail), m, fail)
    texts = [[t for t, _ in row] for row in grid]
    given = m.answer is not None
    final = None
    if m.final_answer is not None:
        raw = _field(head, m.final_answer, "trajectory.final_answer", fail)
        if raw is not None and not isinstance(raw, str | int | float):
            raise fail(f"final_answer {m.final_answer!r} must be a string, a number or null")
        final = short_label(raw)
    return ParsedRecord(
        trajectory_id=tid,
        question=question.strip() if question else qid,
        protocol=m.protocol,
        n_agents=max(len(row) for row in grid),
        reference=reference,
        texts=texts,
        answers=[[a for _, a in row] for row in grid] if given else None,
        final_rule="given" if m.final_answer is not None else "last_round",
        final=final,
        qid=qid,
        source=m.source,
        extra={"agents": names},
    )


def _nested_grid(container: object, m: GenericMapping, fail
                 ) -> tuple[list[list[object]], list[str] | None]:
    """Nodes ``[round][slot]`` (None: no node) and the agents' names if the layout names
    them."""
    where = f"rounds {m.rounds!r}"
    if m.order == "round_agent":
        if not isinstance(container, list) or not container:
            raise fail(f"{where} must be a non-empty list of rounds")
        if all(isinstance(r, dict) for r in container):
            names: list[str] = []
            for r in container:  # JSON and Parquet object keys are strings
                names.extend(k for k in r if k not in names)
            grid = [[r.get(n) for n in names] for r in container]
            return grid, names
        if not all(isinstance(r, list) for r in container):
            raise fail(f"{where}: every round must be a list of nodes or an object "
                       "{agent: node}")
        width = max(len(r) for r in container)
        if width == 0:
            raise fail(f"{where} holds no node")
        return [r + [None] * (width - len(r)) for r in container], None
    if isinstance(container, dict) and container:
        names = [str(k) for k in container]
        agents = list(container.values())
    elif isinstance(container, list) and container:
        names, agents = None, container
    else:
        raise fail(f"{where} must be a non-empty list of agents or an object "
                   "{agent: [nodes]}")
    for k, a in enumerate(agents):
        if not isinstance(a, list):
            raise fail(f"{where}: agent {names[k] if names else k} must be a list of nodes "
                       "over rounds")
    depth = max(len(a) for a in agents)
    if depth == 0:
        raise fail(f"{where} holds no node")
    return [[a[t] if t < len(a) else None for a in agents] for t in range(depth)], names


def _parse_nested(path: Path, m: GenericMapping, name: str) -> list[ParsedRecord]:
    def one(index: int, rec: dict | ValueError) -> ParsedRecord:
        if isinstance(rec, ValueError):  # a malformed line: this trajectory alone
            raise rec
        return _nested_record(path, m, name, index, rec)

    return parse_each(path, _rows(path, m), one)


def _nested_record(path: Path, m: GenericMapping, name: str, index: int, rec: dict
                   ) -> ParsedRecord:
    try:
        qid_raw = get_path(rec, m.question_id)
    except KeyError:
        raise record_error(path, index, "", f"missing field {m.question_id!r} "
                           f"(trajectory.question_id)") from None
    qid = _scalar_id(qid_raw, "question_id", partial(record_error, path, index, ""))
    fail = partial(record_error, path, index, qid)
    tid = f"{name}:{index}"
    if m.trajectory_id is not None:
        tid = _scalar_id(_field(rec, m.trajectory_id, "trajectory.trajectory_id", fail),
                         "trajectory_id", fail)
    if m.samples is not None:
        samples = _field(rec, m.samples, "trajectory.samples", fail)
        if not isinstance(samples, list) or not samples:
            raise fail(f"samples {m.samples!r} must be a non-empty list of responses")
        nodes, names = [samples], None  # round 0, one slot per sample
    else:
        container = _field(rec, m.rounds, "trajectory.rounds", fail)
        nodes, names = _nested_grid(container, m, fail)
    grid = [[_node_values(node, m, f"round {t} agent {k}", fail)
             for k, node in enumerate(row)] for t, row in enumerate(nodes)]
    return _record(path, m, tid, qid, rec, fail, grid, names)


def _sort_key(value: object) -> tuple:
    return (0, value, "") if isinstance(value, int) else (1, 0, str(value))


def _parse_long(path: Path, m: GenericMapping, name: str) -> list[ParsedRecord]:
    groups: dict[str, list[tuple[int, dict]]] = {}
    qids: dict[str, str] = {}
    for index, rec in _rows(path, m):
        if isinstance(rec, ValueError):  # whose node it is cannot be told: the whole file
            raise rec
        bare = partial(record_error, path, index, "")
        qid = _scalar_id(_field(rec, m.question_id, "trajectory.question_id", bare),
                         "question_id", bare)
        key = qid
        if m.trajectory_id is not None:
            key = _scalar_id(_field(rec, m.trajectory_id, "trajectory.trajectory_id", bare),
                             "trajectory_id", bare)
        groups.setdefault(key, []).append((index, rec))
        qids.setdefault(key, qid)
    shared = [(p, f"trajectory.{n}") for p, n in (
        (m.question_id, "question_id"), (m.question, "question"),
        (m.reference, "reference"), (m.final_answer, "final_answer")) if p is not None]
    def one(_: int, item: tuple[str, list[tuple[int, dict]]]) -> ParsedRecord:
        key, rows = item
        qid = qids[key]
        head_index, head = rows[0]
        nodes: dict[tuple[int, object], tuple[int, dict]] = {}
        for index, rec in rows:
            fail = partial(record_error, path, index, qid)
            for p, what in shared:
                if _field(rec, p, what, fail) != _field(head, p, what, fail):
                    raise fail(f"{p!r} ({what}) differs from record {head_index}'s, of the "
                               "same trajectory")
            rnd = _field(rec, m.round, "node.round", fail)
            if isinstance(rnd, bool) or not isinstance(rnd, int):
                raise fail(f"round {m.round!r} must be an integer, got {rnd!r}")
            agent = _field(rec, m.agent, "node.agent", fail)
            if isinstance(agent, bool) or not isinstance(agent, str | int):
                raise fail(f"agent {m.agent!r} must be a string or an integer, got {agent!r}")
            if (rnd, agent) in nodes:
                raise fail(f"a second node for agent {agent!r} in round {rnd} (the first is "
                           f"record {nodes[(rnd, agent)][0]})")
            nodes[(rnd, agent)] = (index, rec)
        rounds = sorted({r for r, _ in nodes})
        agents = sorted({a for _, a in nodes}, key=_sort_key)
        grid = []
        for rnd in rounds:
            row = []
            for agent in agents:
                hit = nodes.get((rnd, agent))
                if hit is None:
                    row.append((None, None))
                else:
                    index, rec = hit
                    row.append(_node_values(rec, m, "the row",
                                            partial(record_error, path, index, qid)))
            grid.append(row)
        tid = key if m.trajectory_id is not None else f"{name}:{qid}"
        return _record(path, m, tid, qid, head,
                       partial(record_error, path, head_index, qid), grid,
                       [str(a) for a in agents])

    return parse_each(path, [(rows[0][0], (key, rows)) for key, rows in groups.items()], one)


def parse_generic_file(path: Path, mapping: GenericMapping, name: str | None = None
                       ) -> list[ParsedRecord]:
    """Trajectories of one JSONL or Parquet file under ``mapping`` (see the module
    docstring), in the order they first appear; ``name``: the file's part of the default
    trajectory ids (default: its stem)."""
    name = path.stem if name is None else name
    if mapping.layout == "nested":
        return _parse_nested(path, mapping, name)
    return _parse_long(path, mapping, name)
