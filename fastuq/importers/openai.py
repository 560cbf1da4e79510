"""OpenAI-shape logs with log-probabilities: ``fastuq import openai LOGS... -o corpus.parquet``.

Each JSONL line is one model response, placed in a debate by a few fields of the line.

Response shapes (learned from the public client code that defines them, no code copied):

* **chat completions** (openai/openai-python, ``src/openai/types/chat/chat_completion.py``
  and ``chat_completion_token_logprob.py``): ``choices[0].message.content`` is the text,
  ``choices[0].logprobs.content`` a list of ``{token, logprob, bytes, top_logprobs: [{token,
  logprob, bytes}]}``; the API writes ``-9999.0`` for a token outside its top 20.
* **legacy completions** (``src/openai/types/completion_choice.py``): ``choices[0].text``,
  ``choices[0].logprobs`` with ``tokens``, ``token_logprobs``, ``top_logprobs`` (a list of
  ``{token: logprob}`` objects, or null) and ``text_offset``.
* **Gemini** ``generateContent`` (googleapis/python-genai, ``google/genai/types.py``:
  ``LogprobsResult`` with ``chosen_candidates`` and ``top_candidates[].candidates``, each
  candidate ``token`` / ``log_probability``; the REST JSON spells them ``logprobsResult``,
  ``chosenCandidates``, ``topCandidates``, ``logProbability``): ``candidates[0].content.parts
  [].text`` joined is the text.

The response is the line itself when it holds ``choices`` or ``candidates``, else the object
at the ``response`` field. A response must hold exactly one choice (candidate).

Fields (a mapping, defaults in :data:`DEFAULT_FIELDS`; ``--map KEY=FIELD`` or a TOML file
with an ``[openai]`` table of the same keys; values are dot-separated key paths):
``trajectory_id``, ``round`` (an integer) and ``agent`` (a string or an integer) are
required on every line; ``gold``, ``protocol`` (default ``debate``), ``question``,
``question_id`` and ``predecessors`` (the agents, by their ``agent`` values, of round t-1
that this response read; null: the protocol's default graph) are read where present, and a
trajectory's ``gold``, ``protocol``, ``question`` and ``question_id`` must agree on all its
lines. Rounds are the distinct ``round`` values in ascending order, slots the distinct
``agent`` values in ascending order (numbers numerically); ``n_agents`` is the number of
distinct agents of the trajectory. All lines of one trajectory must lie in one file.

Columns, beyond those of every importer (``fastuq.importers.common``; answers are extracted
from the texts as there, ``source`` is ``openai``):

* ``seq_logprob`` ``[round][agent]``: the sum of the chosen tokens' log-probabilities;
  ``n_tokens``: how many tokens.
* ``node_entropy`` ``[round][agent]``: the mean over the response's tokens of the entropy
  (nats) of the returned top-k alternatives, **renormalised** to sum to one. This is biased
  low against the entropy over the full vocabulary: the mass outside the top k is dropped, so
  a flat tail counts for nothing (for k = 1 the entropy is 0). Null where a response has a
  token without alternatives (``top_logprobs`` not requested).
* ``token_entropy`` ``[round]`` (SAUCE's observation): the mean of the round's speaking
  agents' ``node_entropy``; null for the whole trajectory (flag ``no_topk``) when a response
  of it has none, rather than a mean over a subset of the agents.
* ``answer_logprob`` ``[round][agent]``: the sum of the log-probabilities of the tokens that
  overlap the last occurrence of the parsed answer in the text (BCCS's belief is its exp).
  Null where it cannot be located: no answer parsed, the answer's spelling is not in the
  text (``1,000`` read as ``1000``), or the tokens' UTF-8 bytes (the ``bytes`` field where
  given, else the token string's) do not add up to the text.
* ``predecessors`` (where a line gives them), ``agents`` (the agent values by slot), and,
  with ``topk=True`` (``--topk``), ``token_logprobs`` and ``topk_logprobs``.

A response without log-probabilities (``logprobs`` missing or null, a null ``content``, a
null or non-finite or positive log-probability, no tokens) is an error naming the file, the
line, the trajectory, the round, the agent and the field, never a silent zero; with
``on_error="skip"`` the whole trajectory is left out and listed. A line whose trajectory
cannot be told (not JSON, no ``trajectory_id``) leaves its whole file out.

The log-probability math (sums, entropies, locating the answer's tokens) runs on flat NumPy
arrays over every response of a file; Python touches each token only while the JSON is read.
"""

from __future__ import annotations

import math
import os
from collections.abc import Mapping
from functools import partial
from pathlib import Path

import numpy as np

from fastuq.answers.extract import extract_answer
from fastuq.answers.normalize import answer_kind
from fastuq.importers.common import (
    ParsedRecord,
    get_path,
    jsonl_lines,
    load_toml,
    parse_each,
    record_error,
    short_label,
)
from fastuq.importers.du import parse_gold

__all__ = ["DEFAULT_FIELDS", "load_fields", "parse_openai_file"]

#: The mapping's keys and the fields they read by default.
DEFAULT_FIELDS: dict[str, str] = {
    "trajectory_id": "trajectory_id", "round": "round", "agent": "agent", "gold": "gold",
    "protocol": "protocol", "question": "question", "question_id": "question_id",
    "predecessors": "predecessors", "response": "response",
}
_REQUIRED = ("trajectory_id", "round", "agent")
_SHARED = ("gold", "protocol", "question", "question_id")
_MISSING = object()


def load_fields(source: str | os.PathLike | Mapping[str, str] | None = None) -> dict[str, str]:
    """The field mapping: :data:`DEFAULT_FIELDS` updated with ``source`` (a ``dict`` of
    keys to key paths, or a TOML file whose ``[openai]`` table holds them). ValueError for
    an unknown key, a value that is not a non-empty string, or a TOML file with another
    table; FileNotFoundError for a missing file."""
    if source is None:
        return dict(DEFAULT_FIELDS)
    where = "fields"
    if not isinstance(source, Mapping):
        where = os.fspath(source)
        data = load_toml(source)
        extra = sorted(set(data) - {"openai"})
        if extra:
            raise ValueError(f"{where}: unknown table [{extra[0]}] (an openai mapping has one "
                             "table, [openai])")
        source = data.get("openai", {})
        if not isinstance(source, Mapping):
            raise ValueError(f"{where}: [openai] must be a table of keys")
    out = dict(DEFAULT_FIELDS)
    for key, value in source.items():
        if key not in DEFAULT_FIELDS:
            raise ValueError(f"{where}: unknown key {key!r} (known: "
                             f"{', '.join(DEFAULT_FIELDS)})")
        if not isinstance(value, str) or not value:
            raise ValueError(f"{where}: {key} must be a non-empty string, got {value!r}")
        out[key] = value
    return out


def _floats(values: list, what: str, fail) -> np.ndarray:
    """``values`` as float64, checked finite and <= 0 (``fail`` names the first bad one)."""
    try:
        arr = np.array(values, np.float64)  # None -> NaN, caught below
    except (TypeError, ValueError):
        bad = next((i for i, v in enumerate(values)
                    if isinstance(v, bool) or not isinstance(v, int | float | type(None))), 0)
        raise fail(f"{what}[{bad}] is not a number: {values[bad]!r}") from None
    if arr.ndim != 1:
        raise fail(f"{what} must be a list of numbers")
    bad = ~(np.isfinite(arr) & (arr <= 0))
    if bad.any():
        i = int(np.argmax(bad))
        raise fail(f"{what}[{i}] is {values[i]!r}, not a finite log-probability <= 0")
    return arr


def _only(items: object, what: str, fail) -> dict:
    if not isinstance(items, list) or len(items) != 1 or not isinstance(items[0], dict):
        n = len(items) if isinstance(items, list) else 0
        raise fail(f"{what} must hold exactly one object (one response per line), got {n}")
    return items[0]


def _utf8_lengths(tokens: list, fail, what: str) -> np.ndarray:
    if not all(isinstance(t, str) for t in tokens):
        raise fail(f"{what}: every token must be a string")
    return np.fromiter((len(t.encode("utf-8", "surrogatepass")) for t in tokens), np.int64,
                       len(tokens))


def _read_chat(choice: dict, fail) -> tuple:
    message = choice.get("message")
    text = message.get("content") if isinstance(message, dict) else None
    if not isinstance(text, str):
        raise fail("choices[0].message.content is missing or not a string")
    lp = choice.get("logprobs")
    content = lp.get("content") if isinstance(lp, dict) else None
    if not isinstance(content, list):
        raise fail("choices[0].logprobs.content is missing or null: the response carries no "
                   "log-probabilities (request logprobs=true)")
    if not all(isinstance(t, dict) for t in content):
        raise fail("choices[0].logprobs.content must be a list of token objects")
    where = "choices[0].logprobs.content"
    chosen = _floats([t.get("logprob") for t in content], f"{where}[].logprob", fail)
    top = [t.get("top_logprobs") or [] for t in content]
    if not all(isinstance(x, list) and all(isinstance(a, dict) for a in x) for x in top):
        raise fail(f"{where}[].top_logprobs must be lists of objects")
    k = np.fromiter((len(x) for x in top), np.int64, len(top))
    topv = _floats([a.get("logprob") for x in top for a in x], f"{where}[].top_logprobs", fail)
    byts = [t.get("bytes") for t in content]
    if all(isinstance(b, list) for b in byts):
        nbytes = np.fromiter((len(b) for b in byts), np.int64, len(byts))
    else:
        nbytes = _utf8_lengths([t.get("token") for t in content], fail, f"{where}[].token")
    return text, chosen, k, topv, nbytes


def _read_legacy(choice: dict, fail) -> tuple:
    text = choice.get("text")
    if not isinstance(text, str):
        raise fail("choices[0].text is missing or not a string")
    lp = choice.get("logprobs")
    if not isinstance(lp, dict) or not isinstance(lp.get("token_logprobs"), list):
        raise fail("choices[0].logprobs.token_logprobs is missing or null: the response "
                   "carries no log-probabilities (request logprobs=N)")
    where = "choices[0].logprobs"
    chosen = _floats(lp["token_logprobs"], f"{where}.token_logprobs", fail)
    tokens = lp.get("tokens")
    if not isinstance(tokens, list) or len(tokens) != chosen.size:
        raise fail(f"{where}.tokens must be a list as long as token_logprobs")
    top = lp.get("top_logprobs") or [None] * chosen.size
    if not isinstance(top, list) or len(top) != chosen.size or \
            not all(isinstance(x, dict | type(None)) for x in top):
        raise fail(f"{where}.top_logprobs must be a list of {{token: logprob}} objects, one "
                   "per token")
    k = np.fromiter((len(x or ()) for x in top), np.int64, len(top))
    topv = _floats([v for x in top for v in (x or {}).values()], f"{where}.top_logprobs", fail)
    return text, chosen, k, topv, _utf8_lengths(tokens, fail, f"{where}.tokens")


def _read_gemini(cand: dict, fail) -> tuple:
    content = cand.get("content")
    parts = content.get("parts") if isinstance(content, dict) else None
    if not isinstance(parts, list) or not all(isinstance(p, dict) and isinstance(
            p.get("text"), str) for p in parts):
        raise fail("candidates[0].content.parts must be a list of text parts")
    text = "".join(p["text"] for p in parts)
    res = cand.get("logprobsResult", cand.get("logprobs_result"))
    chosen_c = None
    if isinstance(res, dict):
        chosen_c = res.get("chosenCandidates", res.get("chosen_candidates"))
    where = "candidates[0].logprobsResult"
    if not isinstance(chosen_c, list) or not all(isinstance(c, dict) for c in chosen_c):
        raise fail(f"{where}.chosenCandidates is missing or null: the response carries no "
                   "log-probabilities (request responseLogprobs)")

    def lp(c: dict) -> object:
        return c.get("logProbability", c.get("log_probability"))

    chosen = _floats([lp(c) for c in chosen_c], f"{where}.chosenCandidates[]", fail)
    top = res.get("topCandidates", res.get("top_candidates")) or [None] * chosen.size
    if not isinstance(top, list) or len(top) != chosen.size:
        raise fail(f"{where}.topCandidates must have one entry per chosen token")
    lists = [(x or {}).get("candidates") or [] if isinstance(x, dict | type(None)) else None
             for x in top]
    if not all(isinstance(x, list) and all(isinstance(c, dict) for c in x) for x in lists):
        raise fail(f"{where}.topCandidates[].candidates must be lists of objects")
    k = np.fromiter((len(x) for x in lists), np.int64, len(lists))
    topv = _floats([lp(c) for x in lists for c in x], f"{where}.topCandidates", fail)
    nbytes = _utf8_lengths([c.get("token") for c in chosen_c], fail,
                           f"{where}.chosenCandidates[].token")
    return text, chosen, k, topv, nbytes


def _read_response(resp: dict, fail) -> tuple:
    """``(text, chosen log-probs [n], top-k sizes [n], top-k values [sum k], token UTF-8
    byte lengths [n])`` of one response."""
    if "candidates" in resp and "choices" not in resp:
        out = _read_gemini(_only(resp["candidates"], "candidates", fail), fail)
    else:
        choice = _only(resp.get("choices"), "choices", fail)
        out = _read_chat(choice, fail) if "message" in choice else _read_legacy(choice, fail)
    if out[1].size == 0:
        raise fail("the response's log-probabilities list no token")
    return out


def _scalar(value: object, what: str, fail, kinds: tuple = (str, int)) -> object:
    if value is None or isinstance(value, bool) or not isinstance(value, kinds):
        raise fail(f"{what} must be a {' or '.join(k.__name__ for k in kinds)}, got {value!r}")
    return value


def _sort_key(value: object) -> tuple:
    return (0, value, "") if isinstance(value, int) else (1, 0, str(value))


def _line_fields(obj: dict, fields: Mapping[str, str], fail) -> dict:
    out = {}
    for key in (*_REQUIRED, *_SHARED, "predecessors"):
        value = get_path(obj, fields[key], _MISSING)
        if value is _MISSING:
            if key in _REQUIRED:
                raise fail(f"missing field {fields[key]!r} ({key})")
            value = None
        out[key] = value
    return out


class _Node:
    __slots__ = ("chosen", "k", "nbytes", "preds", "slot", "t", "text", "topv", "where")


def _trajectory(path: Path, fields: Mapping[str, str], tid: str,
                rows: list[tuple[int, int, dict]]) -> ParsedRecord:
    head_index, head_line, head = rows[0]
    bare = partial(record_error, path, head_index, tid, line=head_line)
    heads = _line_fields(head, fields, bare)
    nodes: list[_Node] = []
    seen: dict[tuple, int] = {}
    for index, line_no, obj in rows:
        fail = partial(record_error, path, index, tid, line=line_no)
        f = _line_fields(obj, fields, fail)
        for key in _SHARED:
            if f[key] != heads[key]:
                raise fail(f"{fields[key]!r} ({key}) differs from line {head_line}'s, of the "
                           "same trajectory")
        rnd = _scalar(f["round"], f"round {fields['round']!r}", fail, (int,))
        agent = _scalar(f["agent"], f"agent {fields['agent']!r}", fail)
        at = partial(record_error, path, index, tid, line=line_no)

        def node_fail(what: str, rnd=rnd, agent=agent, at=at) -> ValueError:
            return at(f"round {rnd}, agent {agent!r}: {what}")

        if (rnd, agent) in seen:
            raise node_fail(f"a second response (the first is on line {seen[(rnd, agent)]})")
        seen[(rnd, agent)] = line_no
        if "choices" in obj or "candidates" in obj:
            resp = obj
        else:
            resp = get_path(obj, fields["response"], None)
            if not isinstance(resp, dict):
                raise node_fail(f"no response: the line holds neither 'choices' nor "
                                f"'candidates', nor an object at {fields['response']!r}")
        node = _Node()
        node.text, node.chosen, node.k, node.topv, node.nbytes = _read_response(resp,
                                                                                node_fail)
        node.t, node.slot, node.where = rnd, agent, node_fail
        preds = f["predecessors"]
        if preds is not None and (not isinstance(preds, list) or any(
                isinstance(p, bool) or not isinstance(p, str | int) for p in preds)):
            raise node_fail(f"predecessors {fields['predecessors']!r} must be a list of "
                            "agents (strings or integers) or null")
        node.preds = preds
        nodes.append(node)
    rounds = sorted({n.t for n in nodes})
    agents = sorted({n.slot for n in nodes}, key=_sort_key)
    r_of = {r: i for i, r in enumerate(rounds)}
    s_of = {a: i for i, a in enumerate(agents)}
    has_preds = any(n.preds is not None for n in nodes)
    for n in nodes:
        if n.preds is not None:
            unknown = [p for p in n.preds if p not in s_of]
            if unknown:
                raise n.where(f"predecessors names agent {unknown[0]!r}, not an agent of the "
                              f"trajectory ({', '.join(map(repr, agents))})")
            n.preds = [s_of[p] for p in n.preds]
        n.t, n.slot = r_of[n.t], s_of[n.slot]
    texts: list[list[str | None]] = [[None] * len(agents) for _ in rounds]
    for n in nodes:
        texts[n.t][n.slot] = n.text
    gold = heads["gold"]
    if gold is not None and (isinstance(gold, bool) or not isinstance(gold, str | int | float)):
        raise bare(f"gold {fields['gold']!r} must be a string, a number or null")
    reference = None if gold is None else short_label(parse_gold(gold))
    kind = answer_kind(reference)
    answers = [[None if t is None else extract_answer(t, kind) for t in row] for row in texts]
    protocol = heads["protocol"] if heads["protocol"] is not None else "debate"
    protocol = _scalar(protocol, "protocol", bare, (str,))
    question = heads["question"]
    if question is not None and not isinstance(question, str):
        raise bare(f"question {fields['question']!r} must be a string or null")
    qid = heads["question_id"]
    qid = None if qid is None else str(_scalar(qid, "question_id", bare))
    return ParsedRecord(
        trajectory_id=tid, question=question if question is not None else (qid or tid),
        protocol=protocol, n_agents=len(agents), reference=reference, texts=texts,
        answers=answers, qid=qid, source="openai",
        extra={"agents": [str(a) for a in agents], "_nodes": nodes,
               "_preds": has_preds},
    )


def _grid(rec: ParsedRecord, nodes: list[_Node], values: list) -> list[list]:
    out: list[list] = [[None] * rec.n_agents for _ in rec.texts]
    for n, v in zip(nodes, values, strict=True):
        out[n.t][n.slot] = v
    return out


def _token_entropy(k: np.ndarray, topv: np.ndarray) -> np.ndarray:
    """Entropy (nats) of each token's renormalised top-k (``k[i] >= 1`` values of ``topv``
    per token, in order)."""
    if k.size == 0:
        return np.zeros(0)
    starts = np.concatenate([[0], np.cumsum(k)[:-1]])
    peak = np.maximum.reduceat(topv, starts)
    e = np.exp(topv - np.repeat(peak, k))
    p = e / np.repeat(np.add.reduceat(e, starts), k)
    with np.errstate(divide="ignore", invalid="ignore"):
        plogp = np.where(p > 0, p * np.log(p), 0.0)
    return -np.add.reduceat(plogp, starts)


def _derive(records: list[ParsedRecord], topk: bool) -> None:
    """Fill every record's log-probability columns (in ``extra``) from its nodes, with the
    math on flat arrays over all the records' nodes."""
    nodes = [n for r in records for n in r.extra["_nodes"]]
    if not nodes:
        return
    ntok = np.fromiter((n.chosen.size for n in nodes), np.int64, len(nodes))
    owner = np.repeat(np.arange(len(nodes)), ntok)
    chosen = np.concatenate([n.chosen for n in nodes])
    k = np.concatenate([n.k for n in nodes])
    topv = np.concatenate([n.topv for n in nodes])
    nbytes = np.concatenate([n.nbytes for n in nodes])
    seq = np.bincount(owner, weights=chosen, minlength=len(nodes))
    # entropy: nodes whose every token has alternatives
    full = np.bincount(owner, weights=(k > 0), minlength=len(nodes)) == ntok
    tok_full = full[owner]
    h_tok = _token_entropy(k[tok_full], topv[np.repeat(tok_full, k)])
    h_node = np.bincount(owner[tok_full], weights=h_tok, minlength=len(nodes)) / ntok
    # the answer's tokens: those overlapping the last occurrence of the answer's bytes
    span = np.full((len(nodes), 2), -1, np.int64)
    i = 0
    for rec in records:
        for n in rec.extra["_nodes"]:
            answer = rec.answers[n.t][n.slot]
            data = n.text.encode("utf-8", "surrogatepass")
            if answer and int(n.nbytes.sum()) == len(data):
                pos = data.rfind(answer.encode("utf-8", "surrogatepass"))
                if pos >= 0:
                    span[i] = pos, pos + len(answer.encode("utf-8", "surrogatepass"))
            i += 1
    end = np.cumsum(nbytes)
    first = np.concatenate([[0], np.cumsum(ntok)[:-1]])
    end -= np.repeat(end[first] - nbytes[first], ntok)  # byte offsets within each response
    start = end - nbytes
    s, e = span[owner, 0], span[owner, 1]
    inside = (s >= 0) & (start < e) & (end > s)
    ans = np.bincount(owner[inside], weights=chosen[inside], minlength=len(nodes))
    found = np.bincount(owner[inside], minlength=len(nodes)) > 0
    seq_l, ntok_l, h_l, ans_l = seq.tolist(), ntok.tolist(), h_node.tolist(), ans.tolist()
    full_l, found_l = full.tolist(), found.tolist()
    offs = np.concatenate([[0], np.cumsum(k)]).tolist()
    tok_first = np.concatenate([[0], np.cumsum(ntok)]).tolist()
    at = 0
    for rec in records:
        own = rec.extra.pop("_nodes")
        idx = range(at, at + len(own))
        at += len(own)
        rec.extra["seq_logprob"] = _grid(rec, own, [seq_l[j] for j in idx])
        rec.extra["n_tokens"] = _grid(rec, own, [ntok_l[j] for j in idx])
        node_h = _grid(rec, own, [h_l[j] if full_l[j] else None for j in idx])
        rec.extra["node_entropy"] = node_h
        if all(full_l[j] for j in idx):
            rec.extra["token_entropy"] = [
                math.fsum(h for h in row if h is not None) / sum(h is not None for h in row)
                for row in node_h]
        else:
            rec.flags.append("no_topk")
        rec.extra["answer_logprob"] = _grid(rec, own, [ans_l[j] if found_l[j] else None
                                                       for j in idx])
        if rec.extra.pop("_preds"):
            rec.extra["predecessors"] = _grid(rec, own, [n.preds for n in own])
        if topk:
            rec.extra["token_logprobs"] = _grid(rec, own, [n.chosen.tolist() for n in own])
            rec.extra["topk_logprobs"] = _grid(rec, own, [
                [topv[offs[t]:offs[t + 1]].tolist() for t in range(tok_first[j],
                                                                    tok_first[j + 1])]
                for j in idx])


def parse_openai_file(path: Path, fields: Mapping[str, str] | None = None, topk: bool = False,
                      name: str | None = None) -> list[ParsedRecord]:
    """Trajectories of one JSONL file of OpenAI-shape (or Gemini) responses, in the order
    they first appear (see the module docstring); ``fields``: the mapping
    (:func:`load_fields`); ``topk``: also keep ``token_logprobs`` and ``topk_logprobs``;
    ``name`` is unused (the ids come from the lines)."""
    del name
    fields = load_fields(fields)
    groups: dict[str, list[tuple[int, int, dict]]] = {}
    for index, line_no, obj in jsonl_lines(path):
        if isinstance(obj, ValueError):  # whose response it is cannot be told: the whole file
            raise obj
        bare = partial(record_error, path, index, "", line=line_no)
        raw = get_path(obj, fields["trajectory_id"], _MISSING)
        if raw is _MISSING:
            raise bare(f"missing field {fields['trajectory_id']!r} (trajectory_id)")
        tid = str(_scalar(raw, f"trajectory_id {fields['trajectory_id']!r}", bare))
        groups.setdefault(tid, []).append((index, line_no, obj))
    records = parse_each(path, [(rows[0][0], (tid, rows)) for tid, rows in groups.items()],
                         lambda _, item: _trajectory(path, fields, *item))
    _derive(records, topk)
    return records
