"""Reading multi-agent traces: OpenTelemetry GenAI spans (and OpenInference's equivalent
attributes) exported as OTLP JSON.

Learned from the public specifications and the files their code writes (none of it copied):
open-telemetry/opentelemetry-proto ``examples/trace.json`` and the OTLP JSON encoding
(``resourceSpans[].scopeSpans[].spans[]``; ``traceId`` / ``spanId`` / ``parentSpanId`` in
hex; attributes as ``{key, value}`` with an ``AnyValue`` -- ``stringValue``,
``intValue`` (a JSON string or number), ``doubleValue``, ``boolValue``, ``arrayValue``,
``kvlistValue``, ``bytesValue``; ``links`` to other spans); the OpenTelemetry
collector's file exporter writes one such object per line. open-telemetry/
semantic-conventions ``docs/gen-ai/gen-ai-agent-spans.md``, ``gen-ai-spans.md`` and
``gen-ai-output-messages.json``; Arize-ai/openinference ``spec/semantic_conventions.md``.

**Versions read.** The GenAI conventions are still marked *Development*; this importer
reads the shapes of semantic-conventions :data:`GENAI_SEMCONV_VERSION` (the first with
``gen_ai.input.messages`` / ``gen_ai.output.messages`` on spans, in the JSON schema
``[{role, parts: [{type, content, ...}], finish_reason}]``, given as a JSON string or as
an ``arrayValue``), and OpenInference's flattened ``llm.output_messages.<i>.message.*``
attributes. Other shapes are refused with a message naming the file, the span and the
attribute: a span carrying the conventions' older content attributes (``gen_ai.prompt*``,
``gen_ai.completion*``) or events (``gen_ai.choice``, ``gen_ai.content.completion``: up to
v1.36.0; instrumentations emit the newer shape with
``OTEL_SEMCONV_STABILITY_OPT_IN=gen_ai_latest_experimental``), output messages that are not
that list, an ``AnyValue`` of no known kind, OTLP's pre-1.0 ``instrumentationLibrarySpans``.

**Canonical record.** A *trajectory* is a ``gen_ai.conversation.id`` (OpenInference:
``session.id``), found on the span or its nearest ancestor; spans without one belong to
their trace's root span. Its *agents* are its agent spans (``gen_ai.operation.name`` =
``invoke_agent``, or ``openinference.span.kind`` = ``AGENT``), one node each, identified
by ``gen_ai.agent.id``, else ``gen_ai.agent.name`` (OpenInference: ``agent.name``); slot
``k`` is the ``k``-th agent to start, and round ``t`` is each agent's ``t``-th span by start
time (agents with fewer spans leave null nodes, flag ``ragged_rounds``). A node's text is
its span's output messages (the text parts of ``gen_ai.output.messages``; OpenInference:
``llm.output_messages``, else ``output.value``), else those of the last model span
(``chat``, ``text_completion``, ``generate_content``; OpenInference ``LLM``) below it and not
below a nested agent span; a node with neither is null and flags ``no_output``. Answers are
extracted from the texts (:func:`~fastuq.importers.common.label_answer`); the final answer
is the last round's majority. The question is the user text of the first agent span's input
messages (``gen_ai.input.messages``; OpenInference ``llm.input_messages``, else
``input.value``), else empty, with the trajectory id as the question id.

``predecessors`` (the UMAS graph): a node read the agent span that is its nearest agent
ancestor (the agent that invoked it) and the agent spans its span links point to; of
those, the agents' nodes of round ``t-1`` are its predecessors (its own agent left out). A
node that read no agent span keeps null: the protocol's default graph. Reads of the same
round, an earlier round or a later one cannot be round-to-round edges: left out, flagged
``same_round_reads``, ``earlier_round_reads``, ``later_round_reads``.

Protocol ``"debate"``, source ``"otel"``; ``trajectory_id`` is ``<file>:<conversation id>``
or ``<file>:<trace id>/<root span id>``; extra columns ``agents`` (names by slot) and
``predecessors``. **Agreement-only**: the conventions carry no log-probabilities (nor any
gold: ``reference`` is null and ``correct`` false until a gold is joined), so only the
estimators that read answers and texts apply. Spans of a file outside any agent span's
trajectory (a trace without agent spans) are left out; a file with no agent span at all
raises.
"""

from __future__ import annotations

import base64
import json
import re
from collections.abc import Iterator
from pathlib import Path

import pyarrow as pa

from fastuq.importers.common import (
    ParsedRecord,
    jsonl_lines,
    label_answer,
    load_json,
    parse_each,
)
from fastuq.io.schema import CANONICAL

__all__ = ["GENAI_SEMCONV_VERSION", "OTEL_EXTRA", "is_otlp_traces", "parse_otel_file"]

#: The OpenTelemetry semantic-conventions release whose GenAI span shapes are read.
GENAI_SEMCONV_VERSION = "1.37.0"

#: The extra columns of an OpenTelemetry import beyond ``question``.
OTEL_EXTRA: tuple[pa.Field, ...] = (pa.field("agents", pa.list_(pa.string())),
                                    CANONICAL.field("predecessors"))

_MODEL_OPS = frozenset({"chat", "text_completion", "generate_content"})
_OLD_EVENTS = frozenset({"gen_ai.choice", "gen_ai.content.completion",
                         "gen_ai.content.prompt"})
_OLD_ATTR = re.compile(r"^gen_ai\.(prompt|completion)(\.|$)")
_OI_OUT = re.compile(r"^llm\.output_messages\.(\d+)\.message\.(role|content|contents\.(\d+)"
                     r"\.message_content\.(type|text))$")
_OI_IN = re.compile(r"^llm\.input_messages\.(\d+)\.message\.(role|content)$")


def is_otlp_traces(obj: object) -> bool:
    """Whether ``obj`` is an OTLP JSON trace export (an object with ``resourceSpans``)."""
    return isinstance(obj, dict) and "resourceSpans" in obj


class _Span:
    __slots__ = ("attrs", "end", "events", "id", "links", "name", "parent", "start", "trace",
                 "where")

    def __init__(self, **kw) -> None:
        for k, v in kw.items():
            setattr(self, k, v)


def _any_value(v: object, where: str) -> object:
    """The Python value of an OTLP JSON ``AnyValue``."""
    if not isinstance(v, dict):
        raise ValueError(f"{where}: value must be an AnyValue object, got {type(v).__name__}")
    if not v:
        return None
    if len(v) != 1:
        raise ValueError(f"{where}: AnyValue must hold one kind, got {sorted(v)}")
    kind, x = next(iter(v.items()))
    if kind == "stringValue" and isinstance(x, str):
        return x
    if kind == "boolValue" and isinstance(x, bool):
        return x
    if kind == "intValue" and (isinstance(x, str) and re.fullmatch(r"-?\d+", x)
                               or isinstance(x, int) and not isinstance(x, bool)):
        return int(x)
    if kind == "doubleValue" and isinstance(x, int | float | str) and not isinstance(x, bool):
        return float(x)
    if kind == "bytesValue" and isinstance(x, str):
        return base64.b64decode(x)
    if kind == "arrayValue" and isinstance(x, dict):
        return [_any_value(e, f"{where}[{i}]") for i, e in enumerate(x.get("values") or [])]
    if kind == "kvlistValue" and isinstance(x, dict):
        return _attributes(x.get("values") or [], where)
    raise ValueError(f"{where}: unknown AnyValue kind {kind!r} (or a {type(x).__name__} "
                     "value it cannot hold)")


def _attributes(kvs: object, where: str) -> dict:
    if not isinstance(kvs, list):
        raise ValueError(f"{where}: attributes must be a list of {{key, value}}")
    out = {}
    for kv in kvs:
        if not isinstance(kv, dict) or not isinstance(kv.get("key"), str):
            raise ValueError(f"{where}: an attribute must be an object with a string 'key'")
        out[kv["key"]] = _any_value(kv.get("value", {}), f"{where}, attribute {kv['key']!r}")
    return out


def _exports(path: Path) -> Iterator[tuple[str, dict]]:
    """``(where, export object)`` of a ``.json`` file (one object) or ``.jsonl`` file (one per
    line, as the collector's file exporter writes)."""
    if path.name.lower().endswith(".jsonl"):
        for index, line, obj in jsonl_lines(path):
            if isinstance(obj, ValueError):
                raise obj
            yield f"{path}: record {index} (line {line})", obj
        return
    obj = load_json(path)
    if not isinstance(obj, dict):
        raise ValueError(f"{path}: expected an OTLP JSON object with 'resourceSpans', got "
                         f"{type(obj).__name__}")
    yield str(path), obj


def _spans(path: Path) -> list[_Span]:
    spans = []
    for where, obj in _exports(path):
        if "resourceSpans" not in obj:
            raise ValueError(f"{where}: not an OTLP trace export (no 'resourceSpans')")
        if not isinstance(obj["resourceSpans"] or [], list):
            raise ValueError(f"{where}: 'resourceSpans' must be a list")
        for r, rs in enumerate(obj["resourceSpans"] or []):
            at = f"{where}: resourceSpans[{r}]"
            if not isinstance(rs, dict):
                raise ValueError(f"{at} must be an object")
            if "instrumentationLibrarySpans" in rs:
                raise ValueError(f"{at}: 'instrumentationLibrarySpans' is OTLP before 1.0; "
                                 "this importer reads 'scopeSpans' (OTLP 1.x JSON)")
            scopes = rs.get("scopeSpans") or []
            if not isinstance(scopes, list):
                raise ValueError(f"{at}: 'scopeSpans' must be a list")
            for s, ss in enumerate(scopes):
                if not isinstance(ss, dict) or not isinstance(ss.get("spans") or [], list):
                    raise ValueError(f"{at}.scopeSpans[{s}] must be an object with a list "
                                     "'spans'")
                for k, sp in enumerate(ss.get("spans") or []):
                    spans.append(_span(sp, f"{at}.scopeSpans[{s}].spans[{k}]"))
    return spans


def _hex(x: object, where: str, field: str, *, empty: bool = False) -> str | None:
    if (x is None or x == "") and empty:
        return None
    if not isinstance(x, str) or not re.fullmatch(r"[0-9a-fA-F]+", x):
        raise ValueError(f"{where}: field {field!r} must be a hex string, got {x!r}")
    return x.lower()


def _span(sp: object, at: str) -> _Span:
    if not isinstance(sp, dict):
        raise ValueError(f"{at} must be an object")
    sid = _hex(sp.get("spanId"), at, "spanId")
    where = f"{at} (span {sid}, {sp.get('name')!r})"
    attrs = _attributes(sp.get("attributes") or [], where)
    old = [k for k in attrs if _OLD_ATTR.match(k)]
    events = [e.get("name") for e in sp.get("events") or [] if isinstance(e, dict)]
    if old or _OLD_EVENTS & set(events):
        what = f"attribute {old[0]!r}" if old else \
            f"event {sorted(_OLD_EVENTS & set(events))[0]!r}"
        raise ValueError(f"{where}: {what} is the GenAI conventions' content shape before "
                         f"v{GENAI_SEMCONV_VERSION} (v1.36.0 and older, or OpenLLMetry's); "
                         f"this importer reads v{GENAI_SEMCONV_VERSION}'s "
                         "gen_ai.input.messages / gen_ai.output.messages (emit them with "
                         "OTEL_SEMCONV_STABILITY_OPT_IN=gen_ai_latest_experimental)")
    links = []
    for i, ln in enumerate(sp.get("links") or []):
        if not isinstance(ln, dict):
            raise ValueError(f"{where}: links[{i}] must be an object")
        links.append(_hex(ln.get("spanId"), f"{where}: links[{i}]", "spanId"))
    start = sp.get("startTimeUnixNano", 0)
    end = sp.get("endTimeUnixNano", start)
    try:
        start, end = int(start), int(end)
    except (TypeError, ValueError):
        raise ValueError(f"{where}: startTimeUnixNano / endTimeUnixNano must be integers"
                         ) from None
    return _Span(id=sid, trace=_hex(sp.get("traceId"), where, "traceId"),
                 parent=_hex(sp.get("parentSpanId"), where, "parentSpanId", empty=True),
                 name=sp.get("name"), attrs=attrs, links=links, start=start, end=end,
                 events=events, where=where)


def _is_agent(s: _Span) -> bool:
    return s.attrs.get("gen_ai.operation.name") == "invoke_agent" or \
        s.attrs.get("openinference.span.kind") == "AGENT"


def _is_model(s: _Span) -> bool:
    return s.attrs.get("gen_ai.operation.name") in _MODEL_OPS or \
        s.attrs.get("openinference.span.kind") == "LLM"


def _agent_key(s: _Span) -> str:
    for key in ("gen_ai.agent.id", "gen_ai.agent.name", "agent.name"):
        value = s.attrs.get(key)
        if isinstance(value, str) and value:
            return value
    raise ValueError(f"{s.where}: an agent span needs 'gen_ai.agent.id' or "
                     "'gen_ai.agent.name' (OpenInference: 'agent.name')")


def _genai_text(s: _Span, key: str, roles: tuple[str, ...]) -> str | None:
    """The text parts of the messages of ``roles`` in the GenAI messages attribute ``key``."""
    value = s.attrs.get(key)
    if value is None:
        return None
    where = f"{s.where}, attribute {key!r}"
    if isinstance(value, str):
        try:
            value = json.loads(value)
        except json.JSONDecodeError as exc:
            raise ValueError(f"{where}: not JSON: {exc}") from None
    shape = (f"must be the v{GENAI_SEMCONV_VERSION} list of messages "
             "[{role, parts: [{type, ...}]}]")
    if not isinstance(value, list):
        raise ValueError(f"{where}: {shape}, got {type(value).__name__}")
    texts = []
    for i, msg in enumerate(value):
        if not isinstance(msg, dict) or not isinstance(msg.get("role"), str) or \
                not isinstance(msg.get("parts"), list):
            raise ValueError(f"{where}: message {i} {shape}")
        for j, part in enumerate(msg["parts"]):
            if not isinstance(part, dict) or not isinstance(part.get("type"), str):
                raise ValueError(f"{where}: message {i} part {j} {shape}")
            if part["type"] == "text" and msg["role"] in roles:
                if not isinstance(part.get("content"), str):
                    raise ValueError(f"{where}: message {i} part {j}: a text part needs a "
                                     "string 'content'")
                texts.append(part["content"])
    return "\n".join(texts) if texts else None


def _oi_output(s: _Span) -> str | None:
    """OpenInference's output messages (assistant text), else ``output.value``."""
    found: dict[tuple[int, int], str] = {}
    kinds: dict[tuple[int, int], str] = {}
    roles: dict[int, str] = {}
    for key, value in s.attrs.items():
        m = _OI_OUT.match(key)
        if m is None:
            continue
        i = int(m.group(1))
        if m.group(2) == "role":
            roles[i] = value
        elif m.group(2) == "content":
            found[(i, -1)] = value
        elif m.group(4) == "type":
            kinds[(i, int(m.group(3)))] = value
        else:
            found[(i, int(m.group(3)))] = value
    texts = [v for (i, j), v in sorted(found.items()) if isinstance(v, str)
             and roles.get(i, "assistant") == "assistant" and kinds.get((i, j), "text") == "text"]
    if texts:
        return "\n".join(texts)
    value = s.attrs.get("output.value")
    return value if isinstance(value, str) else None


def _output(s: _Span) -> str | None:
    text = _genai_text(s, "gen_ai.output.messages", ("assistant",))
    return text if text is not None else _oi_output(s)


def _question(s: _Span) -> str | None:
    text = _genai_text(s, "gen_ai.input.messages", ("user",))
    if text is not None:
        return text
    msgs: dict[int, dict] = {}
    for key, value in s.attrs.items():
        m = _OI_IN.match(key)
        if m is not None:
            msgs.setdefault(int(m.group(1)), {})[m.group(2)] = value
    users = [m["content"] for _, m in sorted(msgs.items())
             if m.get("role") == "user" and isinstance(m.get("content"), str)]
    if users:
        return "\n".join(users)
    value = s.attrs.get("input.value")
    return value if isinstance(value, str) else None


def _trajectories(spans: list[_Span]) -> dict[str, list[_Span]]:
    """Every span under its trajectory key (conversation id, or ``trace/root span``), in
    file order of the keys' first spans."""
    by_id = {(s.trace, s.id): s for s in spans}
    memo: dict[tuple[str, str], str] = {}

    def key(s: _Span) -> str:
        chain = []
        cur: _Span | None = s
        out = None
        while cur is not None:
            k = (cur.trace, cur.id)
            if k in memo:
                out = memo[k]
                break
            chain.append(k)
            conv = cur.attrs.get("gen_ai.conversation.id", cur.attrs.get("session.id"))
            if isinstance(conv, str) and conv:
                out = conv
                break
            parent = by_id.get((cur.trace, cur.parent)) if cur.parent else None
            if parent is None or (parent.trace, parent.id) in chain:
                out = f"{cur.trace}/{cur.id}"
                break
            cur = parent
        for k in chain:
            memo[k] = out
        return out

    groups: dict[str, list[_Span]] = {}
    for s in spans:
        groups.setdefault(key(s), []).append(s)
    return groups


def _record(path: Path, name: str, index: int, key: str, spans: list[_Span]) -> ParsedRecord:
    by_id = {s.id: s for s in spans}
    agents = sorted((s for s in spans if _is_agent(s)), key=lambda s: (s.start, s.id))
    slot: dict[str, int] = {}
    node_of: dict[str, tuple[int, int]] = {}
    per_agent: list[list[_Span]] = []
    for s in agents:
        try:
            a = _agent_key(s)
        except ValueError as exc:
            raise ValueError(f"{exc} (trajectory {name}:{key})") from None
        if a not in slot:
            slot[a] = len(per_agent)
            per_agent.append([])
        node_of[s.id] = (len(per_agent[slot[a]]), slot[a])
        per_agent[slot[a]].append(s)
    n, n_rounds = len(per_agent), max(len(p) for p in per_agent)
    flags = ["ragged_rounds"] if any(len(p) < n_rounds for p in per_agent) else []

    def nearest_agent(s: _Span) -> _Span | None:
        seen = set()
        cur = by_id.get(s.parent) if s.parent else None
        while cur is not None and cur.id not in seen:
            if cur.id in node_of:
                return cur
            seen.add(cur.id)
            cur = by_id.get(cur.parent) if cur.parent else None
        return None

    last_model: dict[str, _Span] = {}
    for s in spans:
        if _is_model(s):
            owner = nearest_agent(s)
            if owner is not None and (owner.id not in last_model
                                      or (s.end, s.id) > (last_model[owner.id].end,
                                                          last_model[owner.id].id)):
                last_model[owner.id] = s
    texts: list[list[str | None]] = [[None] * n for _ in range(n_rounds)]
    preds: list[list[list[int] | None]] = [[None] * n for _ in range(n_rounds)]
    for s in agents:
        t, k = node_of[s.id]
        try:
            text = _output(s)
            if text is None and s.id in last_model:
                text = _output(last_model[s.id])
        except ValueError as exc:
            raise ValueError(f"{exc} (trajectory {name}:{key}, round {t}, agent {k}, field "
                             "texts)") from None
        if text is None and "no_output" not in flags:
            flags.append("no_output")
        texts[t][k] = text
        read = [p for p in [nearest_agent(s)] if p is not None]
        read += [by_id[ln] for ln in s.links if ln in node_of]
        if not read:
            continue
        got: set[int] = set()
        for r in read:
            rt, rk = node_of[r.id]
            if rk == k:
                continue
            lag = t - rt
            flag = None if lag == 1 else "same_round_reads" if lag == 0 else \
                "earlier_round_reads" if lag > 1 else "later_round_reads"
            if flag is None:
                got.add(rk)
            elif flag not in flags:
                flags.append(flag)
        preds[t][k] = sorted(got)
    question = _question(agents[0])
    return ParsedRecord(
        trajectory_id=f"{name}:{key}",
        question=(question or "").strip(),
        protocol="debate",
        n_agents=n,
        reference=None,
        texts=texts,
        answers=[[label_answer(x, None) for x in row] for row in texts],
        flags=flags,
        qid=None if question else f"{name}:{key}",
        extra={"agents": [p[0].attrs.get("gen_ai.agent.name", p[0].attrs.get(
            "agent.name", _agent_key(p[0]))) for p in per_agent], "predecessors": preds},
    )


def parse_otel_file(path: Path, name: str | None = None) -> list[ParsedRecord]:
    """The trajectories of one OTLP JSON trace file (``.json``: one export object;
    ``.jsonl``: one per line), in the order their first spans appear (see the module
    docstring); ``name``: the file's part of the trajectory ids (default: its stem).

    Raises ValueError naming the file, the span (its place in the export, id and name) and
    the attribute for a shape this importer does not read, and naming the file when it holds
    no agent span (``invoke_agent`` / OpenInference ``AGENT``)."""
    name = path.stem if name is None else name
    spans = _spans(path)
    groups = {k: g for k, g in _trajectories(spans).items() if any(map(_is_agent, g))}
    if not groups:
        raise ValueError(f"{path}: no agent span (gen_ai.operation.name 'invoke_agent' or "
                         "openinference.span.kind 'AGENT') among its "
                         f"{len(spans)} spans: nothing to import as agents")
    items = list(enumerate(groups.items()))
    return parse_each(path, items, lambda i, kv: _record(path, name, i, kv[0], kv[1]))
