"""SAUCE's inputs packed once for sweeps and fits (:class:`SauceData`,
:func:`load_sauce_data`): agreement, token entropy, the round mask, the labels and the
protocol of every trajectory as time-major ``[T, N]`` arrays, from a corpus (streamed in
chunks, with ``on_error="skip"`` accounting) or from arrays. Used by
:mod:`fastuq.evaluation.sweeps` and :mod:`fastuq.evaluation.fit`; importing it does not
import JAX.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from fastuq.engine.registry import SAUCE_PARAMS

__all__ = ["PARAMS", "SauceData", "load_sauce_data"]


#: SAUCE parameters a grid may hold, in canonical order.
PARAMS = tuple(p.name for p in SAUCE_PARAMS)
ArrayLike = Any
@dataclass
class SauceData:
    """A labelled corpus packed for SAUCE.

    agreement, token_entropy: ``[T, N]`` float (padded slots hold 0).
    round_mask: ``[T, N]`` bool, true where the round executed.
    labels: ``[N]`` bool, correct = True.
    protocol_codes: ``[N]`` int32 index into ``protocols``.
    protocols: protocol names (``"debate"``, ``"dylan"``, ...).
    """

    agreement: np.ndarray
    token_entropy: np.ndarray
    round_mask: np.ndarray
    labels: np.ndarray
    protocol_codes: np.ndarray
    protocols: tuple[str, ...]

    @property
    def n(self) -> int:
        return int(self.labels.shape[0])

    def subset(self, rows: np.ndarray) -> SauceData:
        """The trajectories ``rows`` (indices or a boolean mask ``[N]``)."""
        codes = self.protocol_codes[rows]
        return SauceData(
            np.ascontiguousarray(self.agreement[:, rows]),
            np.ascontiguousarray(self.token_entropy[:, rows]),
            np.ascontiguousarray(self.round_mask[:, rows]),
            self.labels[rows],
            codes,
            self.protocols,
        )

    def presets(
        self,
        overrides: Mapping[str, object] | None = None,
        base: Mapping[str, Mapping[str, float]] | None = None,
    ) -> dict[str, np.ndarray]:
        """Preset parameters per trajectory: name -> scalar (one protocol) or ``[N]``.

        ``overrides`` (name -> value) replaces a parameter for every protocol; ``base``
        (protocol -> {name: value}, e.g. :func:`fastuq.fit.load_params`) replaces the preset
        values of the protocols it names. A protocol without a preset needs every parameter
        given (ValueError otherwise).
        """
        from fastuq.engine.registry import get_estimator

        est = get_estimator("sauce")
        overrides = {k: v for k, v in (overrides or {}).items() if v is not None}
        base = base or {}
        table = np.empty((len(self.protocols), len(PARAMS)))
        for k, proto in enumerate(self.protocols):
            values = est.resolve(proto, {**base.get(proto, {}), **overrides})
            table[k] = [float(values[p]) for p in PARAMS]  # type: ignore[arg-type]
        dtype = self.agreement.dtype
        if len(self.protocols) == 1:
            return {p: np.asarray(table[0, i], dtype) for i, p in enumerate(PARAMS)}
        return {
            p: np.take(table[:, i].astype(dtype), self.protocol_codes) for i, p in enumerate(PARAMS)
        }


def _encode_protocols(values: Any, n: int) -> tuple[np.ndarray, tuple[str, ...]]:
    if isinstance(values, str):
        return np.zeros(n, np.int32), (values,)
    protos = np.asarray(values).astype(str)
    if protos.shape != (n,):
        raise ValueError(f"protocol must be a string or one per trajectory ({n}), got "
                         f"shape {protos.shape}")
    names, codes = np.unique(protos, return_inverse=True)
    return codes.astype(np.int32), tuple(str(s) for s in names)


def _from_table(table, protocol: str | None, dtype: np.dtype, source: str, row0: int,
                observation_noise: float | None = None, rows: np.ndarray | None = None):
    """Pack one Arrow table of canonical columns: ``(a, h, mask, labels|None, codes, names)``.
    ``observation_noise``: constant token entropy R_t for a table without token_entropy."""
    import pyarrow as pa
    import pyarrow.compute as pc

    from fastuq.engine.batch import Batch
    from fastuq.engine.inputs import INPUTS, Context

    if "trajectory_id" not in table.column_names:
        ids = pa.array(np.arange(row0, row0 + table.num_rows).astype(str))
        table = table.append_column("trajectory_id", ids)
    batch = Batch(table, source=source, row0=row0, rows=rows, dtype=dtype,
                  observation_noise=observation_noise)
    for name in ("agreement", "token_entropy"):
        if not batch.has(name):
            raise ValueError(f"{source or 'corpus'}: no {name} column (SAUCE needs agreement "
                             "and token_entropy)" + ("; pass observation_noise=R (--observation-"
                                                     "noise R) to run SAUCE on agreement alone"
                                                     if name == "token_entropy" else ""))
    ctx = Context(batch, {}, ("agreement", "token_entropy", "round_mask"))
    a = INPUTS["agreement"].build(ctx)  # the checks fastuq.score makes
    h = INPUTS["token_entropy"].build(ctx)
    mask = INPUTS["round_mask"].build(ctx)
    labels = None
    if "correct" in table.column_names:
        col = batch.column("correct")
        if col.null_count:
            k = int(np.argmax(col.is_null().to_numpy(zero_copy_only=False)))
            raise ValueError(f"trajectory {batch.labels[k]}: no label (field correct)")
        labels = col.to_numpy(zero_copy_only=False).astype(bool)
    if protocol is not None:
        codes, names = np.zeros(batch.n, np.int32), (protocol,)
    else:
        if "protocol" not in table.column_names:
            raise ValueError(f"{source or 'corpus'}: no protocol column; pass protocol=")
        col = batch.column("protocol")
        if col.null_count:
            k = int(np.argmax(col.is_null().to_numpy(zero_copy_only=False)))
            raise ValueError(f"trajectory {batch.labels[k]}: no protocol (field protocol)")
        enc = pc.dictionary_encode(col.cast(pa.string()))
        names = tuple(str(s) for s in enc.dictionary.to_pylist())
        codes = enc.indices.to_numpy(zero_copy_only=False).astype(np.int32)
    return a, h, mask, labels, codes, names


def _merge(parts: list) -> tuple[np.ndarray, ...]:
    """Concatenate packed chunks along N, padding rounds to the longest chunk."""
    t_max = max(p[0].shape[0] for p in parts)
    n = sum(p[0].shape[1] for p in parts)
    dtype = parts[0][0].dtype
    a = np.zeros((t_max, n), dtype)
    h = np.zeros((t_max, n), dtype)
    mask = np.zeros((t_max, n), bool)
    names: list[str] = []
    codes = np.empty(n, np.int32)
    start = 0
    for pa_, ph, pm, _, pcodes, pnames in parts:
        t, m = pa_.shape
        sl = slice(start, start + m)
        a[:t, sl] = np.where(pm, pa_, 0)
        h[:t, sl] = np.where(pm, ph, 0)
        mask[:t, sl] = pm
        remap = np.empty(len(pnames), np.int32)
        for k, name in enumerate(pnames):
            if name not in names:
                names.append(name)
            remap[k] = names.index(name)
        codes[sl] = remap[pcodes] if m else pcodes
        start += m
    labels = None
    if all(p[3] is not None for p in parts):
        labels = np.concatenate([p[3] for p in parts]) if parts else np.zeros(0, bool)
    return a, h, mask, labels, codes, tuple(names)


def load_sauce_data(
    data: ArrayLike,
    *,
    protocol: str | Sequence[str] | None = None,
    labels: ArrayLike | None = None,
    dtype: str | np.dtype = "float32",
    chunk_rows: int = 1 << 18,
    observation_noise: float | None = None,
    on_error: str = "raise",
    skipped: list | None = None,
    progress: Callable[[int, int | None], None] | None = None,
    check: str = "corpus",
) -> SauceData:
    """Read and validate a labelled corpus for sweeps and fits.

    Args:
      data: a corpus file (Parquet, JSONL, JSONL.gz; read through
        :func:`fastuq.io.readers.iter_chunks`), a pyarrow Table or Polars DataFrame of
        canonical columns, arrays ``(agreement [T, N], token_entropy [T, N],
        round_mask [T, N], labels [N])`` (``labels`` may instead be passed as ``labels=``),
        or a :class:`SauceData` this function returned (taken as is, cast to ``dtype``,
        with ``protocol`` / ``labels`` overrides applied).
      protocol: preset for every trajectory (default: the ``protocol`` column; ``"debate"``
        for arrays); for arrays also one name per trajectory.
      labels: ``[N]`` correctness labels (overrides the ``correct`` column).
      dtype: ``"float32"`` or ``"float64"``.
      observation_noise: constant R_t (token entropy) for corpora without token entropy
        (SAUCE on agreement alone), as ``fastuq score --observation-noise``.
      on_error, skipped: files and tables only. ``"raise"`` (default): the first bad record
        is a ValueError. ``"skip"``: records that :func:`fastuq.score` would skip (it does
        the validation: :func:`fastuq.engine.scoring.iter_scores`), and records without a label,
        are left out and appended to ``skipped`` (a caller-owned list of
        :class:`fastuq.engine.scoring.Skipped`).
      progress: called as ``progress(rows_done, rows_total_or_None)`` after each chunk read.
      check: files and tables: which columns every record is checked against, as in
        :func:`fastuq.engine.scoring.iter_scores` (``"corpus"``, default: every column but the
        per-token ones and texts; ``"used"``: the SAUCE inputs and labels only).

    Raises:
      ValueError: invalid measurements (naming trajectory, round and field), missing labels
        or protocols, shape mismatches.
    """
    dtype = np.dtype(dtype)
    if dtype not in (np.float32, np.float64):
        raise ValueError(f"dtype must be float32 or float64, got {dtype}")
    from fastuq.engine.checks import check_reading_options
    from fastuq.engine.methods import CHECKED_NODE_COLUMNS

    check_reading_options(on_error, skipped, observation_noise, check)
    if isinstance(data, SauceData):
        return _from_sauce_data(data, protocol, labels, dtype)
    if on_error == "skip" and (isinstance(data, (str, os.PathLike)) or _is_table(data)):
        if protocol is not None and not isinstance(protocol, str):
            raise ValueError("with a corpus, protocol must be one name (or None)")
        parts = _skipping_parts(data, protocol, dtype, chunk_rows, observation_noise,
                                labels is None, skipped, progress, check)
        if not parts:
            raise ValueError(f"{data if isinstance(data, (str, os.PathLike)) else 'corpus'}: "
                             f"no record left to use ({len(skipped)} skipped)")
        a, h, mask, y, codes, names = _merge(parts)
    elif isinstance(data, (str, os.PathLike)):
        from fastuq.io.readers import count_rows, iter_chunks

        if protocol is not None and not isinstance(protocol, str):
            raise ValueError("with a corpus file, protocol must be one name (or None)")
        total = count_rows(data) if progress is not None else None
        parts = []
        checked = list(CHECKED_NODE_COLUMNS) + ["n_agents"] if check == "corpus" else []
        for chunk in iter_chunks(data, columns=[], chunk_rows=chunk_rows, optional_columns=[
                "agreement", "token_entropy", "protocol", "correct", *checked]):
            parts.append(_from_table(chunk.table, protocol, dtype, chunk.source,
                                     chunk.source_row0, observation_noise))
            if progress is not None:
                progress(chunk.source_row0 + chunk.table.num_rows
                         if total is None else sum(p[0].shape[1] for p in parts), total)
        if not parts:
            raise ValueError(f"{data}: the corpus is empty")
        a, h, mask, y, codes, names = _merge(parts)
    elif _is_table(data):
        table = data.to_arrow() if hasattr(data, "to_arrow") else data
        if protocol is not None and not isinstance(protocol, str):
            raise ValueError("with a table, protocol must be one name (or None)")
        a, h, mask, y, codes, names = _merge([_from_table(table, protocol, dtype, "", 0,
                                                          observation_noise)])
    else:
        a, h, mask, y, codes, names = _from_arrays(data, protocol, dtype)
    if labels is not None:
        y = _as_labels(labels, a.shape[1])
    if y is None:
        raise ValueError("the corpus has no complete correct column; pass labels=")
    if y.shape[0] != a.shape[1]:
        raise ValueError(f"labels has {y.shape[0]} entries for {a.shape[1]} trajectories")
    if a.shape[1] == 0:
        raise ValueError("no trajectories")
    return SauceData(a, h, mask, y, codes, names)


def _skipping_parts(data, protocol, dtype, chunk_rows, observation_noise, need_labels,
                    skipped, progress, check="corpus") -> list:
    """Packed chunks of ``data`` with bad records left out (appended to ``skipped``).

    The records are validated by :func:`fastuq.engine.scoring.iter_scores` with ``on_error="skip"``
    (the checks ``fastuq score --on-error skip`` makes, SAUCE's included); with
    ``need_labels``, records whose ``correct`` is null are skipped too."""
    import pyarrow as pa

    from fastuq.engine.checks import Skipped
    from fastuq.engine.pipeline import iter_scores
    from fastuq.io.readers import count_rows

    if _is_table(data) and hasattr(data, "to_arrow"):
        data = data.to_arrow()
    total = count_rows(data) if progress is not None else None
    parts = []
    done = 0
    for batch, _ in iter_scores(data, methods=("sauce",), protocol=protocol, dtype=dtype,
                                backend="numpy", chunk_rows=chunk_rows,
                                observation_noise=observation_noise, on_error="skip",
                                skipped=skipped, check=check):
        table = batch.table
        # Source row of every kept record (the batch's names carry them).
        rows = getattr(batch.labels, "_rows", None)
        if rows is None:
            rows = np.arange(batch.row0, batch.row0 + batch.n)
        if need_labels:
            if "correct" not in table.column_names:
                raise ValueError(f"{batch.source or 'corpus'}: no correct column (labels); "
                                 "sweeps and fits need them")
            null = table.column("correct").is_null().to_numpy(zero_copy_only=False)
            if null.any():
                for k in np.flatnonzero(null):
                    tid = batch.ids[int(k)].as_py()
                    skipped.append(Skipped(batch.source, int(rows[k]),
                                           None if tid is None else str(tid),
                                           f"{batch.source}: row {int(rows[k])}: trajectory "
                                           f"{tid!r}: no label (field correct)"))
                table = table.filter(pa.array(~null))
                rows = rows[~null]
        if table.num_rows:
            parts.append(_from_table(table, protocol, dtype, batch.source, batch.row0,
                                     observation_noise, rows))
        done += batch.n
        if progress is not None:
            progress(done + len(skipped), total)
    return parts


def _from_sauce_data(data: SauceData, protocol, labels, dtype: np.dtype) -> SauceData:
    """``data`` (already validated by :func:`load_sauce_data`) in ``dtype``, with
    ``protocol`` and ``labels`` overrides applied; arrays are shared when nothing changes."""
    n = data.n
    codes, names = data.protocol_codes, data.protocols
    if protocol is not None:
        codes, names = _encode_protocols(protocol, n)
    y = data.labels if labels is None else _as_labels(labels, n)
    return SauceData(
        data.agreement.astype(dtype, copy=False),
        data.token_entropy.astype(dtype, copy=False),
        data.round_mask,
        y,
        codes,
        names,
    )


def _is_table(data: Any) -> bool:
    module = type(data).__module__ or ""
    if module.startswith("pyarrow"):
        return hasattr(data, "column_names")
    return module.startswith("polars") and hasattr(data, "to_arrow")


def _as_labels(labels: ArrayLike, n: int) -> np.ndarray:
    from fastuq.metrics.inputs import as_labels

    y = as_labels(labels)
    if y.shape[0] != n:
        raise ValueError(f"labels has {y.shape[0]} entries for {n} trajectories")
    return y


def _from_arrays(data: Any, protocol, dtype: np.dtype):
    from fastuq.engine.inputs import validate_rounds

    if not isinstance(data, (tuple, list)) or len(data) not in (3, 4):
        raise ValueError(
            "data must be a corpus path, a table, or a tuple (agreement [T, N], "
            "token_entropy [T, N], round_mask [T, N][, labels [N]])"
        )
    a = np.asarray(data[0], dtype)
    h = np.asarray(data[1], dtype)
    mask = np.asarray(data[2])
    if a.ndim != 2 or h.shape != a.shape or mask.shape != a.shape:
        raise ValueError(f"agreement, token_entropy and round_mask must be [T, N] of one shape; "
                         f"got {a.shape}, {h.shape}, {mask.shape}")
    if mask.dtype != bool:
        raise ValueError(f"round_mask must be bool, got {mask.dtype}")
    validate_rounds(a, h, mask, None)
    a = np.where(mask, a, 0).astype(dtype)
    h = np.where(mask, h, 0).astype(dtype)
    y = _as_labels(data[3], a.shape[1]) if len(data) == 4 else None
    codes, names = _encode_protocols("debate" if protocol is None else protocol, a.shape[1])
    return a, h, mask, y, codes, names
