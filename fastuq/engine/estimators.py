"""How each registered estimator runs on a :class:`~fastuq.engine.batch.Batch`: which packed arrays
it reads and which kernel it calls. One function per estimator, named by the registry."""

from __future__ import annotations

from collections.abc import Mapping

import numpy as np

from fastuq.engine.batch import Batch
from fastuq.engine.errors import RecordError
from fastuq.engine.runtime import run_bucketed
from fastuq.engine.sauce import sauce_batch, validate_rounds

__all__ = ["CONFIDENCES", "node_confidence", "run_sauce", "run_umas", "run_umas_fix"]


def _same_rounds(batch: Batch, mask: np.ndarray, other: np.ndarray, field: str) -> None:
    if mask.shape != other.shape or not np.array_equal(mask, other):
        la, lb = mask.sum(axis=0), other.sum(axis=0)
        n = int(np.argmax(la != lb)) if (la != lb).any() else 0
        raise RecordError(
            f"trajectory {batch.labels[n]}: agreement has {int(la[n])} rounds but {field} has "
            f"{int(lb[n])} (field {field})", row=n
        )


def run_sauce(
    batch: Batch, *, params: Mapping[str, object], protocol: str | None, backend: str
) -> np.ndarray:
    """SAUCE uncertainty ``[N]`` from the batch's agreement and token entropy."""
    a, mask = batch.rounds("agreement")
    h, mask_h = batch.rounds("token_entropy")
    _same_rounds(batch, mask, mask_h, "token_entropy")
    out = sauce_batch(
        a, h, mask, protocol=batch.protocol(protocol), backend=backend,
        trajectory_ids=batch.labels, **params,
    )
    return out["score"]


# --------------------------------------------------------------------------- node inputs

CONFIDENCES = ("msp", "mean_logprob", "neg_entropy")


def _first_bad(batch: Batch, bad: np.ndarray, field: str, what: str, values: np.ndarray):
    """Raise naming the first bad node ``[T, N, A]`` in trajectory order."""
    n, t, a = np.unravel_index(int(np.argmax(bad.transpose(1, 0, 2))),
                               (bad.shape[1], bad.shape[0], bad.shape[2]))
    raise RecordError(
        f"trajectory {batch.labels[int(n)]}, round {int(t)}, agent {int(a)}: {field} = "
        f"{values[t, n, a]} {what}", row=int(n)
    )


def node_confidence(batch: Batch, kind: str = "msp") -> tuple[np.ndarray, np.ndarray]:
    """Node confidence ``c <= 0`` ``[T, N, A]`` and ``node_mask [T, N, A]``.

    ``msp``: sum of token log-probabilities (``seq_logprob``); ``mean_logprob``:
    ``seq_logprob / n_tokens``; ``neg_entropy``: minus the node's mean token entropy (nats).
    Raises ValueError naming trajectory, round, agent and field for a NaN, positive
    log-probability, negative entropy or token count below 1 at a valid node.
    """
    if kind not in CONFIDENCES:
        raise ValueError(f"confidence must be one of {CONFIDENCES}, got {kind!r}")
    if kind == "neg_entropy":
        h, mask, _ = batch.nodes("node_entropy")
        with np.errstate(invalid="ignore"):
            bad = mask & ~(np.isfinite(h) & (h >= 0))
        if bad.any():
            _first_bad(batch, bad, "node_entropy", "is missing, negative or not finite", h)
        return -h, mask
    lp, mask, _ = batch.nodes("seq_logprob")
    with np.errstate(invalid="ignore"):
        bad = mask & ~(np.isfinite(lp) & (lp <= 0))
    if bad.any():
        _first_bad(batch, bad, "seq_logprob", "is not a finite log-probability <= 0", lp)
    if kind == "msp":
        return lp, mask
    ntok, tok_mask, _ = batch.nodes("n_tokens")
    bad = mask & ~(tok_mask & (ntok >= 1))
    if bad.any():
        _first_bad(batch, bad, "n_tokens", "is missing or below 1", ntok)
    with np.errstate(invalid="ignore", divide="ignore"):
        return np.where(mask, lp / np.where(mask, ntok, 1), 0), mask


def _check_empty(batch: Batch, mask: np.ndarray, field: str) -> None:
    empty = ~mask.reshape(mask.shape[0], mask.shape[1], -1).any(axis=(0, 2))
    if empty.any():
        n = int(np.argmax(empty))
        raise RecordError(f"trajectory {batch.labels[n]}: no valid node (field {field})", row=n)


def _run(batch: Batch, est_name: str, backend: str, fields: tuple[str, ...], batched):
    from fastuq.engine.registry import get_estimator

    kernel = get_estimator(est_name).kernel(backend)
    if backend == "numpy":
        return kernel(*[x for x, _, _ in batched], fields=fields)
    return run_bucketed(kernel, batched, batch.n, batch.dtype, fields=fields)


def run_umas(
    batch: Batch, *, params: Mapping[str, object], protocol: str | None, backend: str,
    field: str = "umas",
) -> np.ndarray:
    """UMAS (or UMAS_FIX with ``field="umas_fix"``) ``[N]`` over the interaction graph: the
    ``predecessors`` column where it gives a node's list (an empty list: no predecessors),
    else -- no column, or a null trajectory, round or node -- the protocol default (every
    other agent active in the previous round, for debate and DyLAN alike)."""
    kind = str(params.get("confidence") or "msp")
    conf, mask = node_confidence(batch, kind)
    _check_empty(batch, mask, "seq_logprob")
    node_column = "node_entropy" if kind == "neg_entropy" else "seq_logprob"
    edges = batch.edges(node_column) if field == "umas" else None
    batched = [(conf, 1, 0.0), (mask, 1, False)]
    if edges is not None:
        batched.append((edges, 1, 0))
    return _run(batch, field, backend, (field,), batched)[field]


def run_umas_fix(batch: Batch, *, params, protocol, backend) -> np.ndarray:
    """UMAS_FIX ``[N]``: minus the mean static node confidence over valid nodes."""
    return run_umas(batch, params=params, protocol=protocol, backend=backend, field="umas_fix")


def _node_baseline(batch: Batch, name: str, backend: str) -> np.ndarray:
    if name == "mean_token_entropy":
        neg_h, mask = node_confidence(batch, "neg_entropy")  # validates
        _check_empty(batch, mask, "node_entropy")
        return _run_node(batch, name, backend, mask, node_entropy=-neg_h)
    lp, mask = node_confidence(batch, "msp")
    _check_empty(batch, mask, "seq_logprob")
    if name == "msp_final":
        return _run_node(batch, name, backend, mask, seq_logprob=lp)
    node_confidence(batch, "mean_logprob")  # validates n_tokens
    ntok, _, _ = batch.nodes("n_tokens")
    return _run_node(batch, name, backend, mask, seq_logprob=lp, n_tokens=ntok)


def _run_node(batch: Batch, name: str, backend: str, mask: np.ndarray, **inputs) -> np.ndarray:
    from fastuq.engine.registry import get_estimator

    kernel = get_estimator(name).kernel(backend)  # node_baselines or node_baselines_numpy
    if backend == "numpy":
        return kernel(*[inputs.get(k) for k in _NODE_INPUTS], mask, fields=(name,))[name]
    present = tuple(k for k in _NODE_INPUTS if k in inputs)
    batched = [(mask, 1, False)] + [(inputs[k], 1, 0.0) for k in present]
    return run_bucketed(_node_call, batched, batch.n, batch.dtype, present=present,
                        fields=(name,))[name]


_NODE_INPUTS = ("seq_logprob", "n_tokens", "node_entropy")


def _node_call(mask, *arrays, present: tuple[str, ...], fields: tuple[str, ...]):
    """``node_baselines`` with only the ``present`` inputs passed positionally (a stable
    function, so compiled wrappers are cached)."""
    from fastuq.kernels.baselines import node_baselines

    given = dict(zip(present, arrays, strict=True))
    return node_baselines(*[given.get(k) for k in _NODE_INPUTS], mask, fields=fields)


def run_node_baseline(name: str):
    """The runner of the node-level baseline ``name`` (msp_final, perplexity_final,
    mean_token_entropy)."""

    def run(batch: Batch, *, params, protocol, backend) -> np.ndarray:
        return _node_baseline(batch, name, backend)

    return run


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


def _round_baseline(batch: Batch, name: str, backend: str) -> np.ndarray:
    from fastuq.engine.registry import get_estimator

    a, mask = batch.rounds("agreement")
    h = None
    if name == "weighted_agreement":
        h, mask_h = batch.rounds("token_entropy")
        _same_rounds(batch, mask, mask_h, "token_entropy")
    validate_rounds(a, h, mask, batch.labels)
    team = vote_team_sizes(batch, a, mask)
    if backend == "numpy":
        kernel = get_estimator(name).kernel(backend)
        return kernel(a, h, mask, team_size=team, fields=(name,))[name]
    batched = [(a, 1, 0.0), (mask, 1, False)]
    if h is not None:
        batched.append((h, 1, 0.0))
    if team is not None:
        batched.append((team.astype(batch.dtype), 0, 0.0))
    return run_bucketed(_round_call, batched, batch.n, batch.dtype, has_entropy=h is not None,
                        has_team=team is not None, fields=(name,))[name]


def _round_call(a, mask, *rest, has_entropy: bool, has_team: bool, fields: tuple[str, ...]):
    """``round_baselines`` with the optional inputs passed positionally (a stable function,
    so compiled wrappers are cached)."""
    from fastuq.kernels.baselines import round_baselines

    rest = list(rest)
    h = rest.pop(0) if has_entropy else None
    team = rest.pop(0) if has_team else None
    return round_baselines(a, h, mask, team_size=team, fields=fields)


def run_round_baseline(name: str):
    """The runner of the round-level baseline ``name`` (last_agreement, mean_agreement,
    weighted_agreement)."""

    def run(batch: Batch, *, params, protocol, backend) -> np.ndarray:
        return _round_baseline(batch, name, backend)

    return run


run_msp_final = run_node_baseline("msp_final")
run_perplexity_final = run_node_baseline("perplexity_final")
run_mean_token_entropy = run_node_baseline("mean_token_entropy")
run_last_agreement = run_round_baseline("last_agreement")
run_mean_agreement = run_round_baseline("mean_agreement")
run_weighted_agreement = run_round_baseline("weighted_agreement")
