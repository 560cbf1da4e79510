"""Scoring a corpus chunk by chunk: the streaming pipeline under
:func:`fastuq.engine.scoring.score` and :func:`fastuq.engine.files.score_file`.

:func:`iter_scores` reads a source in chunks and yields ``(batch, scores)`` in order. With
``on_error="raise"`` three stages overlap, each on its own thread (:func:`_prefetch`): the
reader (reading, decoding, and the value checks of :mod:`fastuq.engine.checks`), the
preparation of each chunk (the id check, the :class:`~fastuq.engine.batch.Batch`, the
methods resolved on the first chunk by :mod:`fastuq.engine.methods`, each estimator's
packed inputs) and the kernels. With ``on_error="skip"`` each chunk is checked once, its
bad rows dropped at once (:func:`skip_bad_rows`), and the rest scored
(:func:`score_checked_chunk`). :func:`score_table`, :func:`skip_bad_rows` and
:func:`score_checked_chunk` are the per-chunk seams :mod:`fastuq.ray` shares.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence

import numpy as np
import pyarrow as pa

from fastuq.engine.batch import Batch
from fastuq.engine.checks import (
    SeenIds,
    Skipped,
    check_reading_options,
    structural_problems,
    values_checked,
    with_value_problems,
)
from fastuq.engine.methods import corpus_columns, method_list, resolve_once
from fastuq.engine.registry import check_params, get_estimator
from fastuq.engine.runner import call_kernel, place_plans, prepare_estimator
from fastuq.errors import RecordError
from fastuq.io.arrow_lists import combined

__all__ = ["check_per_round", "iter_scores", "make_batch", "per_round_list",
           "score_checked_chunk", "score_table", "skip_bad_rows"]


def per_round_list(values: np.ndarray, round_mask: np.ndarray) -> pa.ListArray:
    """A ``[T, N]`` per-round array as a ``list<double>`` array of ``N`` lists, each the
    trajectory's values at its executed rounds (``round_mask`` true) in round order (masked
    rounds dropped). Vectorized: one boolean gather and the offsets from a cumulative sum."""
    values = np.asarray(values, np.float64)
    mask = np.asarray(round_mask, bool)
    if values.shape != mask.shape or values.ndim != 2:
        raise ValueError(f"per-round values {values.shape} and round mask {mask.shape} must "
                         "be the same [T, N]")
    flat = values.T[mask.T]  # trajectory by trajectory, rounds in order
    offsets = np.zeros(mask.shape[1] + 1, np.int64)
    np.cumsum(mask.sum(axis=0), out=offsets[1:])
    kind = pa.int32() if offsets[-1] < 2**31 else pa.int64()
    make = pa.ListArray if kind == pa.int32() else pa.LargeListArray
    out = make.from_arrays(pa.array(offsets, kind), pa.array(flat, pa.float64()))
    return out.cast(pa.list_(pa.float64())) if make is not pa.ListArray else out


def check_per_round(methods) -> None:
    """Refuse ``per_round`` for named methods of which one has no per-round score (a
    ValueError naming it and the estimators that have one); ``"all"`` passes (those with a
    per-round score write it)."""
    from fastuq.engine.registry import ESTIMATORS

    names = method_list(methods)
    if names == ["all"]:
        return
    lacking = [m for m in names if get_estimator(m).per_round is None]
    if lacking:
        have = [n for n, e in ESTIMATORS.items() if e.per_round is not None]
        raise ValueError(
            f"per-round scores: {', '.join(lacking)} {'has' if len(lacking) == 1 else 'have'}"
            f" no per-round score (its value is not defined after each round); estimators "
            f"with one: {', '.join(have)}")


def _scores_of(est, inputs, out: Mapping, per_round: bool) -> dict:
    """A kernel's outputs as score columns: float64 ``[N]``, and with ``per_round`` the
    per-round score as a list column (:func:`per_round_list`, over the estimator's round
    mask)."""
    scores = {}
    for column, values in out.items():
        if per_round and column == est.per_round_column:
            scores[column] = per_round_list(values, est.executed_rounds(inputs))
        else:
            scores[column] = np.asarray(values, np.float64)
    return scores


def _prefetch(iterator: Iterator, depth: int = 1, name: str = "fastuq-reader") -> Iterator:
    """Items of ``iterator``, produced by a background thread up to ``depth`` items ahead.

    Reading and decoding (Arrow, Parquet, JSON: C++ that releases the GIL) of the next chunk
    then overlaps with packing and scoring of the current one, on the other core. Memory grows
    by ``depth`` chunks. An exception in the producer is raised here, in order. When the
    consumer stops, the thread stops after its current item and closes ``iterator`` (so a
    prefetch inside it stops too). The thread runs in a copy of the caller's context
    (:func:`fastuq.engine.runtime.in_context`): it sees the caller's ``device_scope``.
    """
    import queue
    import threading

    from fastuq.engine.runtime import in_context

    items: queue.Queue = queue.Queue(maxsize=depth)
    done = object()
    stop = threading.Event()

    def offer(entry) -> bool:
        """Put ``entry`` unless the consumer has stopped; timed, so that a wake-up lost to a
        signal handler's exception in the consumer's thread (SIGTERM) cannot block it."""
        while not stop.is_set():
            try:
                items.put(entry, timeout=0.1)
                return True
            except queue.Full:
                continue
        return False

    def produce() -> None:
        try:
            for item in iterator:
                if not offer(("item", item)):
                    return
            offer(("end", done))
        except BaseException as exc:  # handed to the consumer
            offer(("error", exc))

    def run() -> None:
        try:
            produce()
        finally:
            close = getattr(iterator, "close", None)
            if close is not None:  # a generator: its own cleanup (an inner prefetch) now
                try:
                    close()
                except BaseException:  # noqa: BLE001 - the consumer has gone
                    pass

    thread = threading.Thread(target=in_context(run), name=name, daemon=True)
    thread.start()
    try:
        while True:
            kind, value = items.get()
            if kind == "item":
                yield value
            elif kind == "error":
                raise value
            else:
                return
    finally:
        stop.set()
        while thread.is_alive():  # unblock a producer waiting on a full queue
            try:
                items.get_nowait()
            except queue.Empty:
                pass
            thread.join(timeout=0.05)


def score_table(
    table: pa.Table, chunk, rows: np.ndarray, resolved: tuple[str, ...] | None, *,
    methods, protocol, params, dtype, backend, observation_noise, math: bool = False,
    processes: int | None = None, info: dict | None = None, pack: str = "host",
    per_round: bool = False,
) -> tuple[Batch, tuple[str, ...], dict[str, np.ndarray]]:
    """Score one checked chunk: its :class:`Batch`, the methods to run (resolved on the first
    chunk, then passed back in as ``resolved``) and ``{column: float64 scores}`` of every
    estimator (with ``per_round``, also each per-round column of an estimator that has one,
    a ``list<double>`` array). The seam that the Ray runner (:mod:`fastuq.ray`) shares with
    :func:`~fastuq.engine.scoring.score`. Every estimator's inputs are prepared (and
    checked) before any kernel runs; a pack's chunk (all its rows or those left after
    skipping) then goes to the devices in one transfer, as in the pipeline's
    ``on_error="raise"`` path."""
    batch = make_batch(table, chunk, rows, dtype=dtype, observation_noise=observation_noise,
                       math=math, processes=processes, pack=pack)
    resolved = resolve_once(resolved, methods, batch, params, observation_noise, info,
                            protocol)
    plans = []
    for m in resolved:
        est = get_estimator(m)
        own = {k: v for k, v in params.items() if k in est.param_names}
        plans.append((est, prepare_estimator(est, batch, params=own, protocol=protocol)))
    if backend == "jax" and getattr(chunk, "packed", None) is not None:
        plans = place_plans(plans, batch.n, batch.dtype)  # a pack's chunk: one transfer
    return batch, resolved, _run_plans(batch, plans, backend, per_round)


def make_batch(table, chunk, rows, *, dtype, observation_noise, math, processes,
               pack: str = "host") -> Batch:
    """The :class:`Batch` of rows ``rows`` (source rows) of a chunk read from
    ``chunk.source``: for a chunk of a pack, a :class:`~fastuq.engine.packed.PackedBatch`,
    whose packed inputs come from the pack (of the rows left, when bad rows were dropped
    from it under ``on_error="skip"``)."""
    packed = getattr(chunk, "packed", None)
    if packed is not None:
        from fastuq.engine.packed import PackedBatch

        positions = None
        if table.num_rows != packed.table.num_rows:  # rows dropped: the chunk rows left
            positions = np.asarray(rows, np.int64) - chunk.source_row0
        return PackedBatch(table, packed, positions=positions, source=chunk.source,
                           row0=chunk.source_row0, rows=rows, dtype=np.dtype(dtype),
                           observation_noise=observation_noise, math=math,
                           processes=processes)
    return Batch(table, source=chunk.source, row0=chunk.source_row0, rows=rows,
                 dtype=np.dtype(dtype), observation_noise=observation_noise, math=math,
                 processes=processes, pack=pack)


def _drop(table: pa.Table, rows: np.ndarray, bad: np.ndarray) -> tuple[pa.Table, np.ndarray]:
    if not bad.any():
        return table, rows
    return table.filter(pa.array(~bad)), rows[~bad]


def skip_bad_rows(
    chunk, table: pa.Table, problems, resolved, skipped: list, *,
    methods, protocol, params, dtype, observation_noise, math, processes, info,
    pack: str = "host",
) -> tuple[pa.Table, np.ndarray, tuple[str, ...]]:
    """Every bad row of the chunk at once (vectorized checks, on top of the structural ones
    in ``problems``), appended to ``skipped``; returns the chunk without them, the source
    rows of what is left, and the methods."""
    from fastuq.engine.skip import input_problems

    source = chunk.source
    rows = problems.rows
    if table.num_rows:
        batch = make_batch(table, chunk, rows, dtype=dtype,
                           observation_noise=observation_noise, math=math,
                           processes=processes)
        resolved = resolve_once(resolved, methods, batch, params, observation_noise, info,
                                  protocol)
        inputs = set()
        for m in resolved:
            est = get_estimator(m)
            inputs |= set(est.inputs)
            if "node_confidence" in est.inputs:  # checked as the column it is read from
                kind = est.packing(params).get("confidence")
                inputs |= {"node_entropy"} if kind == "neg_entropy" else {"seq_logprob"}
        preset = next((get_estimator(m) for m in resolved if get_estimator(m).presets), None)
        input_problems(
            table, problems, inputs=inputs, protocol=protocol,
            params={} if preset is None else {p.name: params.get(p.name)
                                              for p in preset.kernel_params},
            presets=None if preset is None else preset.presets,
            confidence=params.get("confidence"), estimator=preset,
        )
    if problems.bad:
        idx = sorted(problems.bad)
        tids = table.column("trajectory_id").combine_chunks().take(
            pa.array(idx, pa.int64())).to_pylist()
        for i, tid in zip(idx, tids, strict=True):
            skipped.append(Skipped(source, int(rows[i]), None if tid is None else str(tid),
                                   problems.bad[i]))
        table, rows = _drop(table, rows, problems.mask(table.num_rows))
    return table, rows, resolved


def score_checked_chunk(
    chunk, table: pa.Table, problems, resolved: tuple[str, ...] | None, skipped: list, *,
    backend: str, per_round: bool = False, **kw,
) -> tuple[tuple[Batch, dict[str, np.ndarray]] | None, tuple[str, ...] | None]:
    """Score one checked chunk under ``on_error="skip"``: its bad rows (``problems``, and
    those the vectorized input checks find) are appended to ``skipped``, then the rest is
    scored; a record that a kernel still refuses is skipped too and the chunk scored again
    without it. Returns ``((batch, scores) or None when every row was skipped, methods)``.
    ``kw``: the scoring options of :func:`score_table`."""
    table, rows, resolved = skip_bad_rows(chunk, table, problems, resolved, skipped, **kw)
    while table.num_rows:
        try:
            batch, resolved, scores = score_table(table, chunk, rows, resolved,
                                                  backend=backend, per_round=per_round, **kw)
        except RecordError as exc:  # a problem the vectorized checks did not foresee
            if exc.row is None:
                raise
            tid = table.column("trajectory_id")[exc.row].as_py()
            skipped.append(Skipped(chunk.source, int(rows[exc.row]),
                                   None if tid is None else str(tid), str(exc)))
            keep = np.ones(table.num_rows, bool)
            keep[exc.row] = False
            table, rows = _drop(table, rows, ~keep)
            continue
        return (batch, scores), resolved
    return None, resolved


def iter_scores(
    source,
    *,
    methods: str | Sequence[str] = ("sauce",),
    protocol: str | None = None,
    params: Mapping[str, object] | None = None,
    dtype: str | np.dtype | None = None,
    backend: str = "jax",
    chunk_rows: int = 1 << 18,
    observation_noise: float | None = None,
    on_error: str = "raise",
    skipped: list[Skipped] | None = None,
    math: bool = False,
    processes: int | None = None,
    info: dict | None = None,
    check: str = "corpus",
    extra_columns: Sequence[str] = (),
    batch_columns: Sequence[str] | None = None,
    pack: str = "auto",
    per_round: bool = False,
) -> Iterator[tuple[Batch, dict[str, np.ndarray]]]:
    """Score ``source`` chunk by chunk: yields ``(batch, {method: scores [n]})`` in order.

    Args:
      source: anything :func:`fastuq.io.readers.iter_chunks` reads (a file, a folder, a list
        of files, a pyarrow Table, a Polars frame, a Hugging Face dataset).
      methods: estimator names, or ``"all"``: every estimator whose inputs the corpus has.
      params: estimator parameters by name (``lam``, ``q``, ``confidence``, ...); each
        estimator takes the ones it declares. A name no estimator takes is a TypeError; a
        parameter none of the methods takes is a ValueError (both name the estimators that
        do take it).
      on_error: ``"raise"`` (default): the first bad record stops the run with a ValueError
        naming the source, row, trajectory and field. ``"skip"``: bad records are left out
        and appended to ``skipped`` (a caller-owned list) with their reason; every other
        record is scored. Each chunk is checked once, vectorized, and every bad row of it
        dropped at once, so skipping costs time linear in the input. Lines that are not
        valid JSON still stop the run.
      math, processes: when agreement is built from parsed answers, also count answers that
        math-verify proves equivalent as one vote (checked once per distinct pair that meets
        in a round, over ``processes`` workers).
      info: a caller-owned dict; with ``methods="all"``, ``info["left_out"]`` is set to the
        estimators left out and why (``{name: "needs seq_logprob"}``).
      check: ``"corpus"`` (default): every record is checked against every column the
        corpus has except the per-token columns (``token_logprobs``, ``topk_logprobs``) and
        ``texts``, which are read (and checked) only when a method uses them; so a node
        column whose round or slot count disagrees with the others is an error whichever
        methods run. ``"used"``: only the columns the methods read (faster on corpora with
        node columns that the methods do not use; measured in bench/README.md).
      extra_columns: further columns to read into each batch when the corpus has them (for
        callers that need more than the methods read, such as ``reference`` for replay).
      batch_columns: the columns each yielded batch keeps (besides ``trajectory_id``; its
        packed inputs stay cached); default all that were read. Fewer bound the memory of
        the chunks waiting between the pipeline's stages (a top-k column is hundreds of MB
        per chunk). With ``on_error="skip"`` every column is kept.
      dtype: the kernels' float dtype; ``None`` or ``"auto"`` (default): float32 when the
        kernels run on a GPU, float64 otherwise; a dtype given always wins.
      pack: where the per-round inputs are packed and checked: ``"auto"`` (default: on the
        device when the kernels run on a GPU with the JAX backend, else on the host),
        ``"host"`` or ``"device"`` (see :class:`~fastuq.engine.batch.Batch`). Scores are
        bit-identical either way.
      per_round: also yield, for every method whose score is defined after each round
        (:attr:`~fastuq.engine.estimator.Estimator.per_round`: SAUCE, ``sauce_belief``, the
        agreement baselines, BCCS, UMAS), the column ``<score>_per_round``: a ``list<double>``
        array, per trajectory the score of the trajectory cut after each executed round
        (masked rounds dropped), the last element its score bit for bit. Computed in the
        scan that computes the score (one kernel call per chunk). A named method without a
        per-round score is a ValueError; with ``"all"`` only those that have one write it.
    """
    from fastuq.engine.device_pack import default_dtype, resolve_pack
    from fastuq.io.readers import iter_chunks

    check_reading_options(on_error, skipped, observation_noise, check)
    dtype = default_dtype(dtype)
    pack = "device" if resolve_pack(pack, backend) else "host"
    names = method_list(methods)
    params = {k: v for k, v in (params or {}).items() if v is not None}
    check_params(params, None if names == ["all"] else names)
    if per_round:
        check_per_round(methods)
    columns = corpus_columns(methods, params, source, check)
    if columns is not None and extra_columns:
        columns = sorted(set(columns) | set(extra_columns))
    skip = on_error == "skip"
    if columns is None:
        reader = iter_chunks(source, chunk_rows=chunk_rows, validate=not skip,
                             conform=not skip)
    else:
        reader = iter_chunks(source, columns=[], optional_columns=columns,
                             chunk_rows=chunk_rows, validate=not skip, conform=not skip)
    kept = None  # the columns scoring needs; the others were read to be checked only
    if columns is not None and check == "corpus":
        kept = corpus_columns(methods, params, source, "used")
        kept = set(kept) | set(extra_columns) | {"trajectory_id"}
        if kept >= set(columns):
            kept = None
    seen = SeenIds()
    kw = dict(methods=methods, protocol=protocol, params=params, dtype=dtype,
              observation_noise=observation_noise, math=math, processes=processes, info=info,
              pack=pack)
    values = check == "corpus"  # every value of the checked columns, whichever methods run
    if skip:
        stream = _prefetch(with_value_problems(structural_problems(chunk, seen), values)
                           for chunk in reader)
    else:
        if values:  # a pack's chunks were checked when it was packed
            reader = (chunk if chunk.packed is not None else values_checked(chunk)
                      for chunk in reader)
        if kept is not None:
            reader = (_keep_columns(chunk, kept) for chunk in reader)
        stream = _prefetch(_prepared(_prefetch(reader), seen, backend=backend,
                                     batch_columns=batch_columns, **kw),
                           name="fastuq-prepare")
    resolved: tuple[str, ...] | None = None
    try:
        for item in stream:
            if not skip:
                batch, plans = item
                yield batch, _run_plans(batch, plans, backend, per_round)
                continue
            chunk, table, problems = item
            done, resolved = score_checked_chunk(chunk, table, problems, resolved, skipped,
                                                 backend=backend, per_round=per_round, **kw)
            if done is not None:
                yield done
    finally:
        stream.close()  # stops the pipeline's threads before the id index goes
        seen.close()


def _keep_columns(chunk, kept: set[str]):
    """``chunk`` without the columns that were read only to be checked (run on the reader
    thread, after the checks, so that they do not wait in the queues)."""
    table = chunk.table
    if all(c in kept for c in table.column_names):
        return chunk
    return chunk._replace(table=table.select([c for c in table.column_names if c in kept]))


def _prepared(chunks: Iterator, seen: SeenIds, *, methods, protocol, params, dtype,
              backend, observation_noise, math, processes, info,
              batch_columns: Sequence[str] | None = None, pack: str = "host") -> Iterator:
    """``(batch, plans)`` per chunk, in order: the id check against earlier chunks, the
    batch, the methods (resolved on the first chunk) and, for each, its packed and checked
    inputs and parameters (:func:`~fastuq.engine.runner.prepare_estimator`). Everything a
    chunk needs before its kernels, so that it runs on a thread of its own while the
    kernels score the chunk before (whole-array NumPy and Arrow work, which releases the
    GIL). The first problem raises, as the kernels' order would: ids, then each method's
    inputs in method order."""
    from fastuq.engine.runner import place_plans, prepare_estimator

    resolved: tuple[str, ...] | None = None
    for chunk in chunks:
        table = chunk.table
        rows = np.arange(chunk.source_row0, chunk.source_row0 + table.num_rows)
        if chunk.packed is None:  # a pack's ids were checked unique when it was packed
            ids = combined(table.column("trajectory_id"))
            repeat, first = seen.repeats(ids)
            if repeat.any():
                k = int(np.argmax(repeat))
                raise RecordError(
                    f"{chunk.source}: row {int(rows[k])}: field trajectory_id: duplicate "
                    f"id {ids[k].as_py()!r} (first at {seen.where(int(first[k]))})", row=k)
            seen.add(ids, chunk.row0, chunk.source, chunk.source_row0)
        batch = make_batch(table, chunk, rows, dtype=dtype,
                           observation_noise=observation_noise, math=math,
                           processes=processes, pack=pack)
        resolved = resolve_once(resolved, methods, batch, params, observation_noise, info,
                                  protocol)
        plans = []
        for m in resolved:
            est = get_estimator(m)
            own = {k: v for k, v in params.items() if k in est.param_names}
            plans.append((est, prepare_estimator(est, batch, params=own, protocol=protocol)))
        if backend == "jax" and getattr(chunk, "packed", None) is not None:
            plans = place_plans(plans, batch.n, batch.dtype)  # a pack's chunk: one transfer
        if batch_columns is not None:
            keep = {"trajectory_id", *batch_columns}
            batch.table = table.select([c for c in table.column_names if c in keep])
        yield batch, plans


def _run_plans(batch: Batch, plans: list, backend: str,
               per_round: bool = False) -> dict[str, np.ndarray]:
    """The kernels of prepared estimators: ``{output column: [N] float64}`` (and with
    ``per_round`` each per-round column, from the same kernel call)."""
    scores = {}
    for est, (inputs, optional, values) in plans:
        rounds = per_round and est.per_round is not None
        out = call_kernel(est, inputs, optional, values, n=batch.n, dtype=batch.dtype,
                          backend=backend, per_round=rounds)
        scores.update(_scores_of(est, inputs, out, rounds))
    return scores
