"""Which estimators a scoring run uses, and which corpus columns it reads for them.

The ``methods`` argument checked (:func:`method_list`); the columns read for the methods
and the parameters, with the node columns every record is checked against
(:func:`corpus_columns`, :data:`CHECKED_NODE_COLUMNS`); what ``"all"`` means on a corpus
(:func:`available_methods`, :func:`left_out_methods`, :func:`no_preset_methods`); and the
resolution on the first chunk, with the checks of options that would otherwise be ignored
(:func:`resolve_once`). Used by the streaming pipeline (:mod:`fastuq.engine.pipeline`), the
file job (:mod:`fastuq.engine.files`), the CLI and :mod:`fastuq.ray`.
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence

import pyarrow as pa
import pyarrow.compute as pc

from fastuq.engine.batch import Batch
from fastuq.engine.inputs import INPUTS, columns_for
from fastuq.engine.registry import ESTIMATORS, check_params, get_estimator

__all__ = ["CHECKED_NODE_COLUMNS", "available_methods", "corpus_columns", "left_out_methods",
           "method_list", "no_preset_methods", "resolve_once"]


def _missing(est, batch: Batch, params: Mapping[str, object] | None = None) -> list[str]:
    """The packed inputs of ``est`` that ``batch`` cannot build (optional ones never miss)."""
    packing = est.packing(params or {})
    return [i for i in est.inputs if not INPUTS[i].available(batch, packing)]


def available_methods(batch: Batch) -> tuple[str, ...]:
    """Registered estimators whose inputs ``batch`` has, in registry order."""
    return tuple(name for name, est in ESTIMATORS.items() if not _missing(est, batch))


#: Columns read whenever the corpus has them: labels and groups, and (so that validation does
#: not depend on the methods) the per-round signals and the team size, which every record's
#: round structure is checked against.
_ALWAYS = ("question_id", "protocol", "correct", "agreement", "token_entropy", "n_agents")
#: Node columns read whenever the corpus has them (``check="corpus"``, the default), so that a
#: column whose round or slot count disagrees with the others is an error under every method,
#: not only under the methods that read it. The per-token columns (``token_logprobs``,
#: ``topk_logprobs``) and ``texts`` are read only when a method uses them: they are often
#: 10-100x larger than everything else together, and reading them for a check alone would
#: break the memory bound of a chunk.
CHECKED_NODE_COLUMNS = ("answers", "seq_logprob", "n_tokens", "belief", "answer_logprob",
                        "predecessors", "active")


def method_list(methods: str | Sequence[str]) -> list[str]:
    """Estimator names, checked: none empty, none twice, each registered (or ``["all"]``)."""
    items = ([m.strip() for m in methods.split(",")] if isinstance(methods, str)
             else [str(m).strip() for m in methods])
    if not items or any(not m for m in items):
        raise ValueError(f"no estimator named in methods {methods!r} (an empty name); give "
                         f"names, comma-separated, or 'all'")
    twice = sorted({m for m in items if items.count(m) > 1})
    if twice:
        raise ValueError(f"estimator {twice[0]!r} is named twice in methods {methods!r}")
    if "all" in items and len(items) > 1:
        raise ValueError(f"'all' cannot be combined with other names in methods {methods!r}")
    for m in items:
        if m != "all":
            get_estimator(m)
    return items


def _available_columns(source, candidates: Sequence[str] | None = None) -> set[str] | None:
    """Column names the source has (``None``: unknown), to choose between a column and the
    columns it can be derived from. Files are probed by reading their first record (of the
    ``candidates`` only, when given: the answer is then about those); frames and readers
    are asked for their schema, so a one-shot reader is never consumed."""
    if isinstance(source, (str, os.PathLike, list, tuple)):
        from fastuq.io.readers import iter_chunks

        kw = {} if candidates is None else {"columns": [], "optional_columns": candidates}
        try:
            first = next(iter_chunks(source, chunk_rows=1, validate=False, **kw), None)
        except (ValueError, OSError):
            return None
        if first is None:
            return None
        return {c for c in first.table.column_names if first.table.column(c).null_count == 0}
    if hasattr(source, "collect_schema"):
        names = set(source.collect_schema().names())  # polars DataFrame / LazyFrame
    elif isinstance(getattr(source, "schema", None), pa.Schema):
        names = set(source.schema.names)  # pyarrow Table / RecordBatch / RecordBatchReader
    elif hasattr(source, "column_names"):
        names = set(source.column_names)  # Hugging Face Dataset
    else:
        return None
    if "signals" in names:  # the SAUCE release: the readers lift agreement/token_entropy
        names |= {"agreement", "token_entropy"}
    return names


def corpus_columns(
    methods: str | Sequence[str], params: Mapping[str, object], source=None,
    check: str = "corpus",
) -> list[str] | None:
    """Columns to read for ``methods`` with ``params`` (for ``"all"``: what any registered
    estimator reads); with ``check="corpus"`` also the node columns every record is checked
    against. Columns no method reads (the per-token ``token_logprobs``, ``texts``, ...) are
    not read, under ``"all"`` either: they can be most of a corpus's bytes."""
    methods = method_list(methods)
    if "all" in methods:
        methods = list(ESTIMATORS)
    cols = set(_ALWAYS)
    if check == "corpus":
        cols.update(CHECKED_NODE_COLUMNS)
    wanted = [(get_estimator(m), get_estimator(m).packing(params)) for m in methods]
    have: set[str] | None = set()
    derived = [INPUTS[i].columns(packing)[0] for est, packing in wanted
               for i in (*est.inputs, *est.optional_inputs)
               if INPUTS[i].fallbacks(packing) and INPUTS[i].columns(packing)]
    if source is not None and derived:
        # derive an input only where its column is absent (only those columns are probed)
        have = _available_columns(source, sorted(set(derived)))
    for est, packing in wanted:
        cols |= columns_for((*est.inputs, *est.optional_inputs), packing, have)
    return sorted(cols)


def left_out_methods(batch: Batch) -> dict[str, str]:
    """Registered estimators whose inputs ``batch`` lacks: name -> why (``needs X``)."""
    out = {}
    for name, est in ESTIMATORS.items():
        missing = _missing(est, batch)
        if missing:
            cols = dict.fromkeys(INPUTS[i].needs_text(est.packing({})) for i in missing)
            out[name] = f"needs {', '.join(cols)}"
    return out


def _resolve_methods(methods: str | Sequence[str], batch: Batch,
                     params: Mapping[str, object] | None = None) -> tuple[str, ...]:
    methods = method_list(methods)
    if methods == ["all"]:
        found = available_methods(batch)
        if not found:
            raise ValueError(f"{batch.source or 'corpus'}: no estimator has all its inputs")
        return found
    for m in methods:
        est = get_estimator(m)
        # the inputs as the given packing parameters build them (umas with
        # confidence=neg_entropy reads node entropy, not seq_logprob)
        missing = _missing(est, batch, params)
        if missing:
            missing = list(dict.fromkeys(INPUTS[i].needs_text(est.packing(params or {}))
                                         for i in missing))
            raise ValueError(
                f"{batch.source or 'corpus'}: {m} needs {', '.join(missing)}, which the corpus "
                "lacks" + ("; pass --observation-noise R to run SAUCE on agreement alone"
                           if any(x.startswith("token_entropy") for x in missing) else "")
            )
    return tuple(methods)


def no_preset_methods(names: Sequence[str], batch: Batch, params: Mapping[str, object],
                      protocol: str | None = None) -> dict[str, str]:
    """Estimators among ``names`` that cannot run on ``batch`` for want of parameters: a
    protocol of the batch (or ``protocol``, the override) has no preset and ``params`` do
    not give every parameter. ``{name: why}`` (the protocols, and every parameter lacking)."""
    out = {}
    for name in names:
        est = get_estimator(name)
        if not est.kernel_params or not est.presets:
            continue
        if protocol is not None:
            protos: list[str | None] = [protocol]
        elif batch.has("protocol"):
            col = batch.column("protocol").cast(pa.string())
            protos = pc.unique(col).to_pylist()
        else:
            protos = [None]
        lacking: dict[str | None, list[str]] = {}
        for proto in protos:
            own = {p.name: (v.get(str(proto)) if isinstance(v := params.get(p.name), Mapping)
                            else v) for p in est.kernel_params}
            missing = est.lacking(proto, own)
            if missing:
                lacking[proto] = missing
        if lacking:
            missing = list(dict.fromkeys(m for ms in lacking.values() for m in ms))
            named = ", ".join("no protocol" if p is None else repr(p) for p in lacking)
            known = sorted(est.presets)
            out[name] = (f"protocol {named} has no preset: needs {', '.join(missing)}, or "
                         f"--protocol {'|'.join(known)}")
    return out


def resolve_once(resolved, methods, batch: Batch, params, observation_noise,
                 info: dict | None, protocol: str | None = None) -> tuple[str, ...]:
    """The methods to run (resolved on the first chunk), with the checks of options that
    would otherwise be ignored: parameters no method takes, and an observation noise on a
    corpus that has token entropy (or for methods that do not read it). ``methods="all"``
    leaves out, with its reason in ``info["left_out"]``, every estimator whose inputs the
    corpus lacks and every one that has no parameter values for a protocol of the first
    chunk (no preset, nothing given)."""
    if resolved is None:
        resolved = _resolve_methods(methods, batch, params)
        if method_list(methods) == ["all"]:
            check_params(params, resolved)
            no_preset = no_preset_methods(resolved, batch, params, protocol)
            resolved = tuple(m for m in resolved if m not in no_preset)
            if not resolved:
                raise ValueError(f"{batch.source or 'corpus'}: no estimator can run: " + "; ".join(
                    f"{k} ({v})" for k, v in no_preset.items()))
            if info is not None:
                info["left_out"] = {**left_out_methods(batch), **no_preset}
        if observation_noise is not None:
            readers = [m for m in resolved
                       if {"token_entropy", "round_entropy"}
                       & {*get_estimator(m).inputs, *get_estimator(m).optional_inputs}]
            if not readers:
                raise ValueError(
                    f"observation noise would be ignored: it stands in for token entropy, "
                    f"which none of the methods ({', '.join(resolved)}) reads")
    if observation_noise is not None and (batch._present("token_entropy")
                                          or batch._present("topk_logprobs")):
        have = "token_entropy" if batch._present("token_entropy") else "topk_logprobs"
        raise ValueError(
            f"{batch.source or 'corpus'}: the corpus has {have}, so the observation noise "
            f"(--observation-noise) would be ignored: drop it")
    return resolved
