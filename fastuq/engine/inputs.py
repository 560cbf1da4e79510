"""The packed inputs an estimator can read: for each, the corpus columns behind it, how it is
built from a :class:`~fastuq.engine.batch.Batch` (and checked), and how a chunk of it is
padded for the kernel.

An estimator declares the names of what it reads (``Estimator.inputs``); the engine packs
only those. With ``Batch(pack="device")`` the per-round inputs (``agreement``,
``round_mask``, ``token_entropy``) are packed and checked on the kernels' device
(:mod:`fastuq.engine.device_pack`) and returned as
:class:`~fastuq.engine.device_pack.DeviceArray` s; a chunk whose checks fail there is built
here on the host, which raises the error. Every builder raises
:class:`~fastuq.errors.RecordError` naming the trajectory, round, agent and field of
the first bad value, so a kernel never sees one.

==================  ==============  =====================================================
input               shape           built from
==================  ==============  =====================================================
``agreement``       ``[T, N]``      ``agreement`` (else the votes of ``answers``), checked
                                    finite and in [0, 1]; every trajectory has a round
``round_mask``      ``[T, N]`` bool the executed rounds of ``agreement``
``token_entropy``   ``[T, N]``      ``token_entropy`` (else ``topk_logprobs``, else the
                                    observation noise), checked finite and >= 0, with the
                                    rounds of ``agreement``
``team_size``       ``[N]``         ``n_agents`` where it is the denominator of every
                                    agreement (vote counts; optional)
``seq_logprob``     ``[T, N, A]``   ``seq_logprob``, checked finite and <= 0
``n_tokens``        ``[T, N, A]``   ``n_tokens``, checked >= 1 where seq_logprob is valid
``node_entropy``    ``[T, N, A]``   ``node_entropy`` (else ``topk_logprobs``), checked
                                    finite and >= 0
``node_confidence`` ``[T, N, A]``   by the ``confidence`` parameter: ``seq_logprob``
                                    (msp), ``seq_logprob / n_tokens`` (mean_logprob) or
                                    ``-node_entropy`` (neg_entropy)
``node_mask``       ``[T, N, A]``   the valid nodes of the estimator's node values (its
                                    ``node_confidence``, ``seq_logprob`` or
                                    ``node_entropy``)
``edges``           ``[T, N, A]``   the ``predecessors`` graph as bit rows (optional: the
                                    protocol default without it)
``answer_class``    ``[T, N, A]``   the vote class of every node's ``answers`` entry, int32,
                    int             the classes agreement counts (``Batch.vote_classes``);
                                    -1 where the agent cast no vote and in padding; rounds
                                    checked against ``round_mask``
``belief``          ``[T, N, A]``   ``belief``, checked finite and in [0, 1] wherever given,
                                    and given wherever the agent voted (``answer_class``
                                    >= 0); rounds checked against ``round_mask``; without
                                    it, ``exp(answer_logprob)``: the probability of the
                                    answer's tokens (BCCS's b = P(x | q, e)), checked
                                    finite and <= 0
``n_agents``        ``[N]``         the initial team size: ``n_agents``, else the widest
                                    round of ``answers`` (always present, >= 1)
``step_h``,         ``[T, N, S]``   UAAD's step signals: ``step_h``, ``step_q``,
``step_q``,                         ``step_d`` (each ``[round][agent][step]``, checked in
``step_d``                          [0, 1]; a round's agents' steps side by side on ``S``,
                                    :func:`fastuq.signals.risk.pack_steps`); without the
                                    step columns one empty slot (the risk is derived)
``step_mask``       ``[T, N, S]``   the slots of the step arrays holding a step
                    bool
``round_entropy``   ``[T, N]``      UAAD's derived risk: ``token_entropy`` where the corpus
                                    has no step columns (optional: absent with them)
``round_classes``   ``[T, N, A]``   UAAD's derived risk: ``answer_class`` where the corpus
                    int             has no step columns (optional: absent with them)
``similarity``      ``[T, N, A]``   the round's similarity graph, by the ``similarity``
                    int or ``[T,    parameter: ``answer``: ``answer_class`` in the
                    N, A, A]``      narrowest int type that holds it (with ``n_agents``,
                                    the team); ``lexical``: pairwise token-set Jaccard of
                                    ``texts``; ``rouge_l``: their ROUGE-L F-measure
                                    (:mod:`fastuq.engine.similarity`)
``text_similarity`` ``[T, N, A, A]`` the lexical form of ``similarity`` (``texts``)
==================  ==============  =====================================================

``belief`` comes from the ``belief`` column, or else from ``answer_logprob`` (the summed
log-probability of the tokens of each node's stated answer).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass

import numpy as np

from fastuq.engine.batch import Batch
from fastuq.engine.device_pack import ROUND_FILL, checked_rounds
from fastuq.errors import RecordError

__all__ = [
    "CONFIDENCES",
    "INPUTS",
    "PackedInput",
    "columns_for",
    "node_confidence",
    "validate_rounds",
    "vote_team_sizes",
]


#: The kinds of node confidence :func:`node_confidence` builds (the ``confidence`` parameter
#: of the estimators that read ``node_confidence``; :mod:`fastuq.engine.registry` declares it).
CONFIDENCES = ("msp", "mean_logprob", "neg_entropy")


@dataclass(frozen=True)
class Context:
    """What a builder sees: the batch, the estimator's packing parameters and its inputs."""

    batch: Batch
    packing: Mapping[str, object]
    inputs: tuple[str, ...]


@dataclass(frozen=True)
class PackedInput:
    """One packed input.

    axis, fill: its batch axis and the value that pads a chunk up to its bucket size.
    columns: ``columns(packing)`` -> the corpus columns it is read from.
    fallbacks: ``fallbacks(packing)`` -> the columns it is derived from when the first of
      ``columns`` is absent.
    available: ``available(batch, packing)`` -> whether the batch can build it.
    build: ``build(context)`` -> the checked array (``None``: an optional input absent).
    needs: what to name when it cannot be built (a string, or ``needs(packing)``).
    """

    name: str
    axis: int
    fill: object
    columns: Callable[[Mapping[str, object]], tuple[str, ...]]
    fallbacks: Callable[[Mapping[str, object]], tuple[str, ...]]
    available: Callable[[Batch, Mapping[str, object]], bool]
    build: Callable[[Context], np.ndarray | None]
    needs: str | Callable[[Mapping[str, object]], str]

    def needs_text(self, packing: Mapping[str, object]) -> str:
        """The corpus columns to name when the input cannot be built."""
        return self.needs(packing) if callable(self.needs) else self.needs


# ------------------------------------------------------------------------------ checks


def _name(ids: Sequence[str] | None, n: int) -> str:
    return f"trajectory {ids[n]!r}" if ids is not None else f"trajectory {n}"


def validate_rounds(
    a: np.ndarray, h: np.ndarray | None, mask: np.ndarray, ids: Sequence[str] | None,
    *, agreement: bool = True,
) -> None:
    """Check per-round signals ``[T, N]`` at executed rounds: every trajectory has a round,
    agreement is finite and in [0, 1], token entropy (unless ``h`` is None) finite and >= 0.
    ``agreement=False``: the first two were checked already (only ``h`` is looked at).

    Raises:
      RecordError: naming the first bad (trajectory, round, field), in trajectory order.
    """
    if agreement:
        empty = ~mask.any(axis=0)
        if empty.any():
            n = int(np.argmax(empty))
            raise RecordError(f"{_name(ids, n)}: no executed round (field agreement)", row=n)
    with np.errstate(invalid="ignore"):  # one test per signal (NaN fails every comparison)
        fine = not agreement or not (mask & ~((a >= 0) & (a <= 1))).any()
        if fine and h is not None:
            fine = not (mask & ~((h >= 0) & (h < np.inf))).any()
    if fine:
        return
    with np.errstate(invalid="ignore"):  # find the first bad value, for the message
        checks = (
            ("agreement", ~np.isfinite(a), "is missing or not finite"),
            ("agreement", (a < 0) | (a > 1), "is outside [0, 1]"),
        )
        if h is not None:
            checks += (
                ("token_entropy", ~np.isfinite(h), "is missing or not finite"),
                ("token_entropy", h < 0, "is negative"),
            )
    first = None
    for field_name, bad, what in checks:
        bad = bad & mask
        if bad.any():
            t, n = np.unravel_index(int(np.argmax(bad.T)), bad.T.shape)[::-1]
            key = (n, t)
            if first is None or key < first[0]:
                value = (a if field_name == "agreement" else h)[t, n]
                first = (key, field_name, what, value)
    if first is not None:
        (n, t), field_name, what, value = first
        raise RecordError(
            f"{_name(ids, int(n))}, round {int(t)}: {field_name} = {value} {what}", row=int(n)
        )


def _same_rounds(batch: Batch, mask: np.ndarray, other: np.ndarray, field: str) -> None:
    if mask.shape != other.shape or not np.array_equal(mask, other):
        la, lb = mask.sum(axis=0), other.sum(axis=0)
        n = int(np.argmax(la != lb)) if (la != lb).any() else 0
        raise RecordError(
            f"trajectory {batch.labels[n]}: agreement has {int(la[n])} rounds but {field} has "
            f"{int(lb[n])} (field {field})", row=n
        )


def _first_bad(batch: Batch, bad: np.ndarray, field: str, what: str, values: np.ndarray):
    """Raise naming the first bad node ``[T, N, A]`` in trajectory order."""
    n, t, a = np.unravel_index(int(np.argmax(bad.transpose(1, 0, 2))),
                               (bad.shape[1], bad.shape[0], bad.shape[2]))
    raise RecordError(
        f"trajectory {batch.labels[int(n)]}, round {int(t)}, agent {int(a)}: {field} = "
        f"{values[t, n, a]} {what}", row=int(n)
    )


def _check_empty(batch: Batch, mask: np.ndarray, field: str) -> None:
    key = ("empty", field, id(mask))  # the masks are the batch's own cached arrays
    if key in _checked(batch):
        return
    empty = ~mask.reshape(mask.shape[0], mask.shape[1], -1).any(axis=(0, 2))
    if empty.any():
        n = int(np.argmax(empty))
        raise RecordError(f"trajectory {batch.labels[n]}: no valid node (field {field})", row=n)
    _checked(batch).add(key)


def node_confidence(batch: Batch, kind: str = "msp") -> tuple[np.ndarray, np.ndarray]:
    """Node confidence ``c <= 0`` ``[T, N, A]`` and ``node_mask [T, N, A]``.

    ``msp``: sum of token log-probabilities (``seq_logprob``); ``mean_logprob``:
    ``seq_logprob / n_tokens``; ``neg_entropy``: minus the node's mean token entropy (nats).
    Raises ValueError naming trajectory, round, agent and field for a NaN, positive
    log-probability, negative entropy or token count below 1 at a valid node.
    """
    if kind not in CONFIDENCES:
        raise ValueError(f"confidence must be one of {CONFIDENCES}, got {kind!r}")
    done = _checked(batch)
    if kind == "neg_entropy":
        h, mask, _ = batch.nodes("node_entropy")
        if "node_entropy" not in done:
            with np.errstate(invalid="ignore"):
                bad = mask & ~(np.isfinite(h) & (h >= 0))
            if bad.any():
                _first_bad(batch, bad, "node_entropy", "is missing, negative or not finite", h)
            done.add("node_entropy")
        return -h, mask
    lp, mask, _ = batch.nodes("seq_logprob")
    if "seq_logprob" not in done:
        with np.errstate(invalid="ignore"):
            bad = mask & ~(np.isfinite(lp) & (lp <= 0))
        if bad.any():
            _first_bad(batch, bad, "seq_logprob", "is not a finite log-probability <= 0", lp)
        done.add("seq_logprob")
    if kind == "msp":
        return lp, mask
    ntok = _check_n_tokens(batch, mask)
    with np.errstate(invalid="ignore", divide="ignore"):
        return np.where(mask, lp / np.where(mask, ntok, 1), 0), mask


def _check_n_tokens(batch: Batch, mask: np.ndarray) -> np.ndarray:
    """``n_tokens [T, N, A]``, checked >= 1 wherever ``mask`` (the valid seq_logprob nodes)."""
    ntok, tok_mask, _ = batch.nodes("n_tokens")
    done = _checked(batch)
    if "n_tokens" not in done:
        bad = mask & ~(tok_mask & (ntok >= 1))
        if bad.any():
            _first_bad(batch, bad, "n_tokens", "is missing or below 1", ntok)
        done.add("n_tokens")
    return ntok


def vote_team_sizes(batch: Batch, agreement: np.ndarray,
                    round_mask: np.ndarray) -> np.ndarray | None:
    """``[N]`` the team whose votes each agreement counts (``n_agents``), else 0.

    Unlike :meth:`Batch.team_sizes` (the UMAS graph's team, with a fallback to the widest
    round), only ``n_agents`` itself is a denominator of agreement, and only where it fits.

    The canonical agreement is a vote count over ``n_agents`` (DESIGN.md); where every
    executed round's ``M_t n`` lies within float rounding of an integer, the round
    statistics are computed from those integers so that equal true values give equal
    floats. A corpus without ``n_agents`` (or a trajectory whose agreement is not such a
    fraction) keeps ``M_t`` as given. ``None`` when no trajectory qualifies.
    """
    if not batch.has("n_agents"):
        return None
    n = batch.column("n_agents").to_numpy(zero_copy_only=False)
    n = np.nan_to_num(np.asarray(n, np.float64), nan=0.0)
    tol = 1e-9 if agreement.dtype == np.float64 else 1e-5
    with np.errstate(invalid="ignore"):
        scaled = np.asarray(agreement, np.float64) * n
        off = np.abs(scaled - np.rint(scaled))
    bad = (round_mask & ~(off <= tol * np.maximum(n, 1))).any(axis=0)
    team = np.where((n > 0) & ~bad, n, 0.0)
    return team if team.any() else None


# ------------------------------------------------------------------------------ builders


def _checked(batch: Batch) -> set:
    """What has been checked in ``batch`` already (each check runs once per chunk, however
    many estimators read the input)."""
    return batch._cache.setdefault("checked", set())


def _on_device(ctx: Context, name: str):
    """``(values, round_mask)`` of ``name`` packed and checked on the device
    (:func:`fastuq.engine.device_pack.checked_rounds`), or ``None``: build it on the host."""
    if not ctx.batch.device_pack:
        return None
    return checked_rounds(ctx.batch, name)


def _agreement(ctx: Context) -> np.ndarray:
    device = _on_device(ctx, "agreement")
    if device is not None:
        return device[0]
    a, mask = ctx.batch.rounds("agreement")
    if "agreement" not in _checked(ctx.batch):
        validate_rounds(a, None, mask, ctx.batch.labels)
        _checked(ctx.batch).add("agreement")
    return a


def _token_entropy(ctx: Context) -> np.ndarray:
    device = _on_device(ctx, "token_entropy")
    if device is not None:
        return device[0]
    a, mask = ctx.batch.rounds("agreement")
    h, mask_h = ctx.batch.rounds("token_entropy")
    done = _checked(ctx.batch)
    if "token_entropy" not in done:
        _same_rounds(ctx.batch, mask, mask_h, "token_entropy")
        validate_rounds(a, h, mask, ctx.batch.labels, agreement="agreement" not in done)
        done.update(("agreement", "token_entropy"))
    return h


def _round_mask(ctx: Context) -> np.ndarray:
    device = _on_device(ctx, "agreement")
    return ctx.batch.rounds("agreement")[1] if device is None else device[1]


def _team_size(ctx: Context) -> np.ndarray | None:
    a, mask = ctx.batch.rounds("agreement")
    team = vote_team_sizes(ctx.batch, a, mask)
    return None if team is None else team.astype(ctx.batch.dtype)


def _node_source(ctx_packing: Mapping[str, object], inputs: tuple[str, ...]) -> str:
    """The node column whose valid nodes are the estimator's ``node_mask``."""
    if "node_confidence" in inputs:
        return "node_entropy" if ctx_packing.get("confidence") == "neg_entropy" else \
            "seq_logprob"
    return "node_entropy" if "node_entropy" in inputs and "seq_logprob" not in inputs else \
        "seq_logprob"


def _seq_logprob(ctx: Context) -> np.ndarray:
    lp, mask = node_confidence(ctx.batch, "msp")  # checks
    _check_empty(ctx.batch, mask, "seq_logprob")
    return lp


def _n_tokens(ctx: Context) -> np.ndarray:
    _, mask = node_confidence(ctx.batch, "msp")  # checks seq_logprob
    return _check_n_tokens(ctx.batch, mask)  # then n_tokens where seq_logprob is valid


def _node_entropy(ctx: Context) -> np.ndarray:
    neg_h, mask = node_confidence(ctx.batch, "neg_entropy")  # checks
    _check_empty(ctx.batch, mask, "node_entropy")
    return -neg_h


def _node_confidence(ctx: Context) -> np.ndarray:
    conf, mask = node_confidence(ctx.batch, str(ctx.packing.get("confidence") or "msp"))
    _check_empty(ctx.batch, mask, "seq_logprob")
    return conf


def _node_mask(ctx: Context) -> np.ndarray:
    return ctx.batch.nodes(_node_source(ctx.packing, ctx.inputs))[1]


def _edges(ctx: Context) -> np.ndarray | None:
    return ctx.batch.edges(_node_source(ctx.packing, ctx.inputs))


def _answer_class(ctx: Context) -> np.ndarray:
    mask = ctx.batch.rounds("agreement")[1]
    classes, ans_mask = ctx.batch.answer_classes()
    _same_rounds(ctx.batch, mask, ans_mask, "answers")
    return classes


def _belief(ctx: Context) -> np.ndarray:
    """``belief [T, N, A]`` (NaN where null), checked: finite and in [0, 1] where given,
    given where the agent voted, with the rounds of ``round_mask``."""
    mask = ctx.batch.rounds("agreement")[1]
    field = "belief" if ctx.batch._present("belief") else "answer_logprob"
    b, given, b_rounds = ctx.batch.nodes(field)
    _same_rounds(ctx.batch, mask, b_rounds, field)
    with np.errstate(invalid="ignore"):
        if field == "belief":
            bad = given & ~(np.isfinite(b) & (b >= 0) & (b <= 1))
        else:
            bad = given & ~(np.isfinite(b) & (b <= 0))
    if bad.any():
        what = ("is not a finite probability in [0, 1]" if field == "belief" else
                "is not a finite log-probability <= 0")
        _first_bad(ctx.batch, bad, field, what, b)
    if field == "answer_logprob":  # the belief is the answer's probability (BCCS)
        b = np.exp(np.where(given, b, 0.0)).astype(b.dtype)
    missing = (_answer_class(ctx) >= 0) & ~given
    if missing.any():
        n, t, a = np.unravel_index(int(np.argmax(missing.transpose(1, 0, 2))),
                                   (b.shape[1], b.shape[0], b.shape[2]))
        raise RecordError(
            f"trajectory {ctx.batch.labels[int(n)]}, round {int(t)}, agent {int(a)}: {field} "
            f"is missing (null) where the agent answered (field {field})", row=int(n))
    return b


def _steps(ctx: Context) -> tuple[np.ndarray, ...] | None:
    """UAAD's packed step arrays ``(step_h, step_q, step_d, step_mask)`` ``[T, N, S]`` from
    the ``step_h``, ``step_q``, ``step_d`` columns (checked; rounds checked against
    ``round_mask``), once per batch; ``None`` where the corpus has no step columns."""
    cache = ctx.batch._cache
    if "uaad_steps" not in cache:
        from fastuq.signals.risk import STEP_COLUMNS, pack_steps

        if not _steps_present(ctx.batch):
            cache["uaad_steps"] = None
        else:
            mask = ctx.batch.rounds("agreement")[1]
            cols = {name: ctx.batch.column(name) for name in STEP_COLUMNS}
            *arrays, step_rounds = pack_steps(cols, dtype=ctx.batch.dtype,
                                              ids=ctx.batch.labels)
            _same_rounds(ctx.batch, mask, step_rounds, "step_h")
            cache["uaad_steps"] = tuple(arrays)
    return cache["uaad_steps"]


def _step_input(k: int) -> Callable[[Context], np.ndarray]:
    """Builder of step array ``k`` (0 h, 1 q, 2 d, 3 mask); without step columns one empty
    slot per round (the kernel derives the risk from ``round_entropy`` and
    ``round_classes``)."""
    def build(ctx: Context) -> np.ndarray:
        steps = _steps(ctx)
        if steps is not None:
            return steps[k]
        shape = ctx.batch.rounds("agreement")[1].shape + (1,)
        return np.zeros(shape, bool) if k == 3 else np.zeros(shape, ctx.batch.dtype)
    return build


def _round_entropy(ctx: Context) -> np.ndarray | None:
    """``token_entropy`` for UAAD's derived risk; ``None`` where the step columns are given."""
    return None if _steps(ctx) is not None else _token_entropy(ctx)


def _round_classes(ctx: Context) -> np.ndarray | None:
    """``answer_class`` for UAAD's derived risk; ``None`` where the step columns are given."""
    return None if _steps(ctx) is not None else _answer_class(ctx)


def _steps_present(batch: Batch) -> bool:
    from fastuq.signals.risk import STEP_COLUMNS

    present = [batch.has(name) for name in STEP_COLUMNS]
    if any(present) and not all(present):
        missing = [n for n, p in zip(STEP_COLUMNS, present, strict=True) if not p]
        raise ValueError(f"{batch.source or 'corpus'}: step signals need all of "
                         f"{', '.join(STEP_COLUMNS)}; missing {', '.join(missing)}")
    return all(present)


def _risk_available(batch: Batch, packing: Mapping[str, object]) -> bool:
    return _steps_present(batch) or (batch.has("answers") and batch.has("token_entropy"))


def _n_agents(ctx: Context) -> np.ndarray:
    return np.maximum(ctx.batch.team_sizes("answers"), 1).astype(ctx.batch.dtype)


def _similarity(ctx: Context) -> np.ndarray:
    from fastuq.engine.similarity import answer_labels, text_similarity

    kind = ctx.packing.get("similarity")
    if kind in ("lexical", "rouge_l"):
        return text_similarity(ctx.batch, "jaccard" if kind == "lexical" else kind)
    return answer_labels(ctx.batch)


def _similarity_source(packing: Mapping[str, object]) -> str:
    return "texts" if packing.get("similarity") in ("lexical", "rouge_l") else "answers"


def _cols(*names: str) -> Callable[[Mapping[str, object]], tuple[str, ...]]:
    return lambda packing: names


def _confidence_columns(packing: Mapping[str, object]) -> tuple[str, ...]:
    kind = packing.get("confidence") or "msp"
    if kind == "neg_entropy":
        return ("node_entropy", "n_agents")
    if kind == "mean_logprob":
        return ("seq_logprob", "n_tokens", "n_agents")
    return ("seq_logprob", "n_agents")


def _confidence_fallbacks(packing: Mapping[str, object]) -> tuple[str, ...]:
    return ("topk_logprobs", "n_agents") if packing.get("confidence") == "neg_entropy" else ()


def _confidence_needs(packing: Mapping[str, object]) -> str:
    kind = packing.get("confidence") or "msp"
    return {"neg_entropy": "topk_logprobs (or node_entropy)",
            "mean_logprob": "seq_logprob, n_tokens"}.get(str(kind), "seq_logprob")


def _has(column: str) -> Callable[[Batch, Mapping[str, object]], bool]:
    return lambda batch, packing: batch.has(column)


def _confidence_available(batch: Batch, packing: Mapping[str, object]) -> bool:
    kind = packing.get("confidence") or "msp"
    if kind == "neg_entropy":
        return batch.has("node_entropy")
    return batch.has("seq_logprob") and (kind == "msp" or batch.has("n_tokens"))


INPUTS: Mapping[str, PackedInput] = {
    item.name: item for item in (
        PackedInput("agreement", 1, ROUND_FILL, _cols("agreement", "n_agents"),
                    _cols("answers", "n_agents"), _has("agreement"), _agreement,
                    "agreement (or answers)"),
        PackedInput("round_mask", 1, False, _cols("agreement"), _cols("answers"),
                    _has("agreement"), _round_mask,
                    "agreement"),
        PackedInput("token_entropy", 1, ROUND_FILL, _cols("token_entropy"), _cols("topk_logprobs"),
                    _has("token_entropy"), _token_entropy,
                    "token_entropy (or topk_logprobs, or --observation-noise)"),
        PackedInput("team_size", 0, 0.0, _cols("n_agents"), _cols(),
                    lambda batch, packing: True, _team_size, "n_agents"),
        PackedInput("seq_logprob", 1, 0.0, _cols("seq_logprob", "n_agents", "predecessors"),
                    _cols(), _has("seq_logprob"), _seq_logprob, "seq_logprob"),
        PackedInput("n_tokens", 1, 0.0, _cols("n_tokens", "n_agents"), _cols(),
                    _has("n_tokens"), _n_tokens, "n_tokens"),
        PackedInput("node_entropy", 1, 0.0, _cols("node_entropy", "n_agents"),
                    _cols("topk_logprobs", "n_agents"), _has("node_entropy"), _node_entropy,
                    "topk_logprobs (or node_entropy)"),
        PackedInput("node_confidence", 1, 0.0, _confidence_columns, _confidence_fallbacks,
                    _confidence_available, _node_confidence, _confidence_needs),
        PackedInput("node_mask", 1, False, _cols("n_agents"), _cols(),
                    lambda batch, packing: True, _node_mask, "seq_logprob"),
        PackedInput("edges", 1, 0, _cols("predecessors"), _cols(),
                    lambda batch, packing: True, _edges, "predecessors"),
        PackedInput("answer_class", 1, -1, _cols("answers", "n_agents"), _cols(),
                    _has("answers"), _answer_class, "answers"),
        PackedInput("belief", 1, 0.0, _cols("belief", "answers", "n_agents"),
                    _cols("answer_logprob", "answers", "n_agents"), _has("belief"), _belief,
                    "belief (or answer_logprob)"),
        *(PackedInput(name, 1, False if name == "step_mask" else 0.0,
                      _cols("step_h", "step_q", "step_d", "n_agents"),
                      _cols("agreement", "answers", "token_entropy", "n_agents"),
                      _risk_available, _step_input(k),
                      "step_h, step_q, step_d (or answers and token_entropy, to derive them)")
          for k, name in enumerate(("step_h", "step_q", "step_d", "step_mask"))),
        PackedInput("round_entropy", 1, 0.0, _cols("token_entropy"), _cols("topk_logprobs"),
                    _risk_available, _round_entropy,
                    "token_entropy (or topk_logprobs, or --observation-noise)"),
        PackedInput("round_classes", 1, -1, _cols("answers", "n_agents"), _cols(),
                    _risk_available, _round_classes, "answers"),
        PackedInput("similarity", 1, -1.0,
                    lambda packing: (_similarity_source(packing), "n_agents"),
                    _cols(), lambda batch, packing: batch.has(_similarity_source(packing)),
                    _similarity, _similarity_source),
        PackedInput("text_similarity", 1, -1.0, _cols("texts", "n_agents"),
                    _cols(), _has("texts"),
                    lambda ctx: _similarity(Context(ctx.batch, {"similarity": "lexical"},
                                                    ctx.inputs)), "texts"),
        PackedInput("n_agents", 0, 1.0, _cols("n_agents", "answers"), _cols(),
                    _has("answers"), _n_agents, "answers"),
    )
}
"""Every packed input by name (see the module docstring)."""


def columns_for(inputs: Sequence[str], packing: Mapping[str, object],
                have: set[str] | None) -> set[str]:
    """Corpus columns to read for ``inputs``: each input's own columns, and its fallbacks
    where ``have`` (the columns the corpus has; ``None``: unknown) lacks the first."""
    cols: set[str] = set()
    for name in inputs:
        item = INPUTS[name]
        own = item.columns(packing)
        cols.update(own)
        back = item.fallbacks(packing)
        if back and (have is None or (own and own[0] not in have)):
            cols.update(back)
    return cols
