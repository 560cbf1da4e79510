"""The SAUCE project's released rollout records -> canonical columns (vectorized, lossless).

A released record (one JSONL line, or one row of the Hugging Face dataset) holds
``schema_version, id, record_uid, question_uid, protocol, dataset, answer, num_agents,
round_outputs: [{round_index, agents: [{agent_id?, response, parsed_answer, quality, ...}]}],
agent_final_answers, consensus_answer, signals: {agreement, token_entropy}, quality_flags,
observation_noise, metadata, ...``. The mapping:

============================  =============================================================
canonical                     from
============================  =============================================================
trajectory_id                 record_uid (else id)
question_id                   question_uid
reference                     answer
n_agents                      num_agents
final_answer                  consensus_answer
agreement, token_entropy      signals.agreement, signals.token_entropy
answers, texts                round_outputs[t].agents[*].parsed_answer / .response, slotted
flags                         quality_flags (+ ``slots_by_position`` where slots were guessed)
============================  =============================================================

Every other field stays as an extra column (``round_outputs`` itself, raw; ``signals`` keeps
any sub-fields other than the two signals). A canonical column already present wins over the
mapping (its source field then stays as an extra column).

Slots: an agent's slot is its ``agent_id`` (or ``agent_index`` / ``agent_idx``): integer ids
(or strings ending in digits) of a record whose smallest id is 0 are 0-based slots, of a
record whose ids run from 1 up to ``num_agents`` 1-based slots (the first agent always speaks
in round 0); other ids are ranked within the record. Decided per record, never per chunk.
A record with an agent lacking an id is filled by position within each round; when such a
record also has a round with fewer responses than the team, which agent survived is a guess,
and ``slots_by_position`` is added to its flags.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from fastuq.io.arrow_lists import combined as _combined
from fastuq.io.arrow_lists import list_array as _list_array
from fastuq.io.arrow_lists import list_lengths as _lengths
from fastuq.io.arrow_lists import parents as _parents
from fastuq.io.arrow_lists import ramp as _ramp
from fastuq.io.arrow_lists import starts as _starts

__all__ = [
    "POSITION_FLAG",
    "is_sauce",
    "sauce_source_columns",
    "sauce_to_canonical",
]

POSITION_FLAG = "slots_by_position"
"""Flag of records whose agent slots were filled by position where agents were missing."""

_MARKERS = ("round_outputs", "signals")
_RENAMES: dict[str, tuple[str, ...]] = {
    "trajectory_id": ("record_uid", "id"),
    "question_id": ("question_uid",),
    "reference": ("answer",),
    "n_agents": ("num_agents",),
    "final_answer": ("consensus_answer",),
}
_SIGNALS = ("agreement", "token_entropy")
_ID_FIELDS = ("agent_id", "agent_index", "agent_idx")
_ANSWER_FIELDS = ("parsed_answer", "answer")
_TEXT_FIELDS = ("response", "content", "text")


def is_sauce(names: Sequence[str]) -> bool:
    """Whether columns ``names`` look like SAUCE released records (``round_outputs`` or
    ``signals``), or lack ``trajectory_id`` but carry ``record_uid``."""
    have = set(names)
    return any(m in have for m in _MARKERS) or (
        "trajectory_id" not in have and "record_uid" in have
    )


def sauce_source_columns(wanted: Sequence[str], names: Sequence[str]) -> list[str]:
    """Source columns (among ``names``) needed to build canonical columns ``wanted``."""
    have = set(names)
    out: list[str] = []

    def add(c: str) -> None:
        if c in have and c not in out:
            out.append(c)

    for w in wanted:
        if w in have:
            add(w)
        elif w in _RENAMES:
            for alt in _RENAMES[w]:
                if alt in have:
                    add(alt)
                    break
        elif w in _SIGNALS:
            add("signals")
        elif w in ("answers", "texts"):
            add("round_outputs")
            add("num_agents")
        elif w == "flags":
            add("quality_flags")
            add("round_outputs")
            add("num_agents")
    return out


def _field(struct_type: pa.DataType, names: Sequence[str]) -> str | None:
    if not pa.types.is_struct(struct_type):
        return None
    have = {struct_type.field(i).name for i in range(struct_type.num_fields)}
    return next((n for n in names if n in have), None)


def _is_json_text(t: pa.DataType) -> bool:
    """JSON held as text: the ``arrow.json`` extension type (as Hugging Face ``datasets``
    stores objects of varying keys), or plain strings where an object or list is expected."""
    return (getattr(t, "extension_name", None) == "arrow.json" or pa.types.is_string(t)
            or pa.types.is_large_string(t))


def _decode_json(arr: pa.Array) -> pa.Array:
    """Parse an array of JSON texts (one value each; null stays null) into Arrow values, with
    one vectorized ``pyarrow.json`` pass over the texts wrapped as ``{"v": <text>}`` lines."""
    import pyarrow.json as pj

    if isinstance(arr, pa.ExtensionArray):
        arr = arr.storage
    if len(arr) == 0:
        return pa.nulls(0)
    text = pc.replace_substring_regex(arr.cast(pa.string()).fill_null("null"), r"[\r\n]", " ")
    lines = pc.binary_join_element_wise('{"v":', text, "}\n", "")
    start = lines.offset
    offsets = np.frombuffer(lines.buffers()[1], np.int32)[start:start + len(lines) + 1]
    data = lines.buffers()[2].slice(int(offsets[0]), int(offsets[-1] - offsets[0]))
    table = pj.read_json(pa.BufferReader(data), read_options=pj.ReadOptions(
        use_threads=False, block_size=max(1 << 20, data.size + 1)))
    if table.num_rows != len(arr) or "v" not in table.column_names:
        raise ValueError("JSON text does not hold one value per element")
    return _combined(table.column("v"))


def _maybe_decode(arr: pa.Array) -> pa.Array:
    if not _is_json_text(arr.type):
        return arr
    try:
        return _decode_json(arr)
    except (pa.ArrowInvalid, pa.ArrowNotImplementedError, pa.ArrowTypeError, ValueError):
        return arr


def _where(table: pa.Table, i: int, source: str | None, row0: int) -> str:
    head = f"{source}: " if source else ""
    tid = None
    for c in ("trajectory_id", "record_uid", "id"):
        if c in table.column_names:
            tid = table.column(c)[i].as_py()
            break
    return f"{head}row {row0 + i}" + (f" (trajectory_id {tid!r})" if tid is not None else "")


def _slot_keys(ids: pa.Array) -> tuple[np.ndarray, bool] | None:
    """Integer keys of agent ids (ints, or strings ending in digits): (keys, numeric)."""
    if pa.types.is_integer(ids.type):
        return ids.fill_null(-1).to_numpy(zero_copy_only=False).astype(np.int64), True
    if pa.types.is_string(ids.type) or pa.types.is_large_string(ids.type):
        digits = pc.struct_field(pc.extract_regex(ids, r"(?P<n>\d+)$"), "n")
        if digits.null_count == ids.null_count:
            return pc.cast(digits, pa.int64()).fill_null(-1).to_numpy(zero_copy_only=False), True
        codes = pc.rank(ids.fill_null(""), sort_keys="ascending", tiebreaker="dense")
        return codes.to_numpy(zero_copy_only=False).astype(np.int64) - 1, False
    return None


def _dense_rank_within(rec: np.ndarray, key: np.ndarray) -> np.ndarray:
    """Dense rank (0-based) of ``key`` among the distinct keys of its record."""
    order = np.lexsort((key, rec))
    r, k = rec[order], key[order]
    new = np.ones(r.size, bool)
    new[1:] = (r[1:] != r[:-1]) | (k[1:] != k[:-1])
    distinct = np.cumsum(new) - 1  # running count of distinct (record, key) pairs
    first = np.ones(r.size, bool)
    first[1:] = r[1:] != r[:-1]
    base = np.maximum.accumulate(np.where(first, distinct, 0))  # count at the record's start
    out = np.empty(r.size, np.int64)
    out[order] = distinct - base
    return out


def _agents_to_nodes(table: pa.Table, source: str | None, row0: int
                     ) -> tuple[dict[str, pa.Array], np.ndarray] | None:
    """``answers`` / ``texts`` node columns from ``round_outputs``, and the per-record flag of
    slots guessed by position."""
    ro = _maybe_decode(_combined(table.column("round_outputs")))
    if not pa.types.is_list(ro.type) and not pa.types.is_large_list(ro.type):
        return None
    n = len(ro)
    n_rounds, rec_valid = _lengths(ro)
    rounds = _maybe_decode(pc.list_flatten(ro))
    if _field(rounds.type, ("agents",)) is None:
        return None
    agents_l = _maybe_decode(pc.struct_field(rounds, "agents"))
    if not (pa.types.is_list(agents_l.type) or pa.types.is_large_list(agents_l.type)):
        return None
    n_resp, _ = _lengths(agents_l)
    agents = _maybe_decode(pc.list_flatten(agents_l))
    rec_of_round = _parents(n_rounds)
    round_of_agent = _parents(n_resp)
    rec_of_agent = rec_of_round[round_of_agent]
    pos = _ramp(n_resp, parent=round_of_agent)

    idx_name = _field(rounds.type, ("round_index",))
    if idx_name is not None and n_resp.size > 1:
        ridx = pc.struct_field(rounds, idx_name)
        if pa.types.is_integer(ridx.type):
            ri = ridx.fill_null(-1).to_numpy(zero_copy_only=False).astype(np.int64)
            same = rec_of_round[1:] == rec_of_round[:-1]
            bad = same & (ri[1:] <= ri[:-1]) & (ri[1:] >= 0) & (ri[:-1] >= 0)
            if bad.any():
                i = int(rec_of_round[int(np.argmax(bad)) + 1])
                raise ValueError(f"{_where(table, i, source, row0)}: field round_outputs: "
                                 f"round_index values are not increasing")

    team = np.zeros(n, np.int64)
    team_known = np.zeros(n, bool)
    if "num_agents" in table.column_names:
        na = _combined(table.column("num_agents"))
        if pa.types.is_integer(na.type) or pa.types.is_floating(na.type):
            team_known = na.is_valid().to_numpy(zero_copy_only=False)
            team = na.fill_null(0).to_numpy(zero_copy_only=False).astype(np.int64)

    # slots from agent ids where every agent of the record has one
    by_position = np.ones(n, bool)
    slot = pos.copy()
    id_name = _field(agents.type, _ID_FIELDS)
    if id_name is not None and agents.type.num_fields and len(agents):
        ids = pc.struct_field(agents, id_name)
        keyed = _slot_keys(ids)
        if keyed is not None:
            key, numeric = keyed
            missing = np.bincount(rec_of_agent, weights=ids.is_null().to_numpy(
                zero_copy_only=False), minlength=n) > 0
            by_position = missing
            use = ~missing[rec_of_agent]
            rank = _dense_rank_within(rec_of_agent, key)
            if numeric:
                # per record (so that results never depend on the chunking): ids from 0 are
                # 0-based slots, ids from 1 up to the team size 1-based (the first agent
                # always speaks in round 0), anything else is ranked
                big = np.iinfo(np.int64).max
                t_rec = np.where(team_known, team, big)
                kmin = np.full(n, big)
                kmax = np.full(n, -1)
                np.minimum.at(kmin, rec_of_agent, key)
                np.maximum.at(kmax, rec_of_agent, key)
                zero = (kmin == 0) & (kmax < t_rec)
                one = (kmin == 1) & (kmax <= t_rec)
                base = np.where(zero, 0, 1)[rec_of_agent]
                slot_id = np.where((zero | one)[rec_of_agent], key - base, rank)
            else:
                slot_id = rank
            slot = np.where(use, slot_id, pos)
    else:
        by_position = np.ones(n, bool)

    # slots per round: the team size, or the widest slot number of the record when unknown
    need = np.zeros(n, np.int64)
    if slot.size:
        np.maximum.at(need, rec_of_agent, slot + 1)
    width = np.where(team_known, np.maximum(team, need), need)
    round_width = width[rec_of_round]
    cell = _starts(round_width)[round_of_agent] + slot
    total = int(round_width.sum())
    if cell.size:
        counts = np.bincount(cell, minlength=total)
        if (counts > 1).any():
            c = int(np.argmax(counts > 1))
            a = int(np.argmax(cell == c))
            r = int(round_of_agent[a])
            i = int(rec_of_round[r])
            t = r - int(_starts(n_rounds)[i])
            raise ValueError(f"{_where(table, i, source, row0)}: field round_outputs: round {t}"
                             f" has two responses for agent slot {int(slot[a])}")
    src = np.full(total, -1, np.int64)
    src[cell] = np.arange(cell.size)
    take = pa.array(src, mask=src < 0)

    short_round = n_resp < np.where(team_known, team, need)[rec_of_round]
    has_short = np.bincount(rec_of_round, weights=short_round, minlength=n) > 0
    guessed = by_position & has_short & (n_rounds > 0)

    out: dict[str, pa.Array] = {}
    for canon, names in (("answers", _ANSWER_FIELDS), ("texts", _TEXT_FIELDS)):
        f = _field(agents.type, names)
        if f is None:
            continue
        vals = pc.struct_field(agents, f)
        if not pa.types.is_string(vals.type):
            try:
                vals = vals.cast(pa.string())
            except (pa.ArrowInvalid, pa.ArrowNotImplementedError, pa.ArrowTypeError):
                continue  # not text-like: stays in the raw round_outputs only
        out[canon] = _list_array(n_rounds, _list_array(round_width, vals.take(take)), rec_valid)
    return out, guessed


def _append_flag(flags: pa.Array | None, add: np.ndarray, flag: str) -> pa.Array:
    """``flags`` (list<string> or None) with ``flag`` appended where ``add``."""
    n = add.size
    if flags is None:
        flags = pa.nulls(n, pa.list_(pa.string()))
    if not add.any():
        return flags
    old_len, old_valid = _lengths(flags)
    values = pc.list_flatten(flags).cast(pa.string())
    new_len = old_len + add
    rec = _parents(new_len)
    pos = _ramp(new_len, parent=rec)
    idx = np.where(pos < old_len[rec], _starts(old_len)[rec] + pos, len(values))
    pool = pa.concat_arrays([values, pa.array([flag], pa.string())])
    return _list_array(new_len, pool.take(pa.array(idx)), old_valid | add)


def sauce_to_canonical(table: pa.Table, *, source: str | None = None, row0: int = 0
                       ) -> pa.Table:
    """Map SAUCE released records to canonical columns (see the module docstring).

    Args:
      table: one chunk of records (Arrow types as read from JSON, Parquet or Hugging Face).
      source, row0: for messages.

    Returns:
      The canonical columns it can build (in canonical order), then every remaining source
      column unchanged, in source order.

    Raises:
      ValueError: two responses for one agent slot in a round, or ``round_index`` values not
        increasing within a record; naming source, row and trajectory.
    """
    names = table.column_names
    cols: dict[str, pa.Array | pa.ChunkedArray] = {}
    used: set[str] = set()
    for canon, alts in _RENAMES.items():
        if canon in names:
            continue
        for alt in alts:
            if alt in names:
                cols[canon] = table.column(alt)
                used.add(alt)
                break
    signals_rest = None
    if "signals" in names:
        sig = _combined(table.column("signals"))
        if pa.types.is_struct(sig.type):
            fields = [sig.type.field(i).name for i in range(sig.type.num_fields)]
            for s in _SIGNALS:
                if s in fields and s not in names:
                    cols[s] = pc.struct_field(sig, s)
            rest = [f for f in fields if f not in _SIGNALS or f in names]
            used.add("signals")
            if rest:
                mask = sig.is_null() if sig.null_count else None
                signals_rest = pa.StructArray.from_arrays(
                    [pc.struct_field(sig, f) for f in rest], names=rest, mask=mask)
    guessed = None
    if "round_outputs" in names:
        built = _agents_to_nodes(table, source, row0)
        if built is not None:
            nodes, guessed = built
            for canon, arr in nodes.items():
                if canon not in names:
                    cols[canon] = arr
    if "flags" not in names:
        flags = None
        if "quality_flags" in names:
            qf = _combined(table.column("quality_flags"))
            if pa.types.is_null(qf.type):
                flags = pa.nulls(len(qf), pa.list_(pa.string()))
                used.add("quality_flags")
            elif pa.types.is_list(qf.type) or pa.types.is_large_list(qf.type):
                try:
                    flags = qf.cast(pa.list_(pa.string()))
                    used.add("quality_flags")
                except (pa.ArrowInvalid, pa.ArrowNotImplementedError, pa.ArrowTypeError):
                    flags = None
        if guessed is not None and guessed.any():
            flags = _append_flag(flags, guessed, POSITION_FLAG)
        if flags is not None:
            cols["flags"] = flags

    from fastuq.io.schema import CANONICAL

    out_names: list[str] = []
    out_cols: list = []
    for f in CANONICAL:
        if f.name in names:
            out_names.append(f.name)
            out_cols.append(table.column(f.name))
        elif f.name in cols:
            out_names.append(f.name)
            out_cols.append(cols[f.name])
    for c in names:
        if c in out_names or c in used:
            continue
        out_names.append(c)
        out_cols.append(table.column(c))
    if signals_rest is not None:
        out_names.append("signals")
        out_cols.append(signals_rest)
    return pa.table(out_cols, names=out_names)
