"""Baseline uncertainty scores: node-level (final answer, whole graph) and round-level.

Every score is an uncertainty (higher = less likely correct). Each has a jitted JAX kernel
and a NumPy twin (``*_numpy``) with the same arguments, shapes and outputs; the per-estimator
functions are thin views of two scans over rounds that compute any subset in one pass:

* :func:`node_baselines` over node arrays ``[T, N, A]`` and ``node_mask [T, N, A]``. The
  *last executed round* of a trajectory is the largest ``t`` with at least one valid node;
  its valid nodes are the *final answer nodes*::

    msp_final          = -mean over final nodes of seq_logprob
    perplexity_final   =  mean over final nodes of exp(-seq_logprob / n_tokens)
    mean_token_entropy =  mean over all valid nodes of node_entropy
                          (node_entropy = the node's mean token entropy, nats)

* :func:`round_baselines` over round arrays ``[T, N]`` and ``round_mask [T, N]``::

    last_agreement     = -M_t at the last executed round
    mean_agreement     = -mean over executed rounds of M_t
    weighted_agreement = -(sum_t M_t / R_t) / (sum_t 1 / R_t),  R_t = max(H_t, 1e-8)
                         (static precision-weighted agreement; H_t = round token entropy)

A trajectory without a valid node (round) gets NaN. Inputs are taken as they are (no
validation; ``n_tokens >= 1`` at valid nodes is the caller's promise). Values in masked slots
may be anything, NaN included, and never change a score.
"""

from __future__ import annotations

from functools import partial
from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax

__all__ = [
    "ENTROPY_FLOOR",
    "NODE_FIELDS",
    "ROUND_FIELDS",
    "NodeCarry",
    "RoundCarry",
    "last_agreement",
    "last_agreement_numpy",
    "mean_agreement",
    "mean_agreement_numpy",
    "mean_token_entropy",
    "mean_token_entropy_numpy",
    "msp_final",
    "msp_final_numpy",
    "node_baselines",
    "node_baselines_numpy",
    "perplexity_final",
    "perplexity_final_numpy",
    "round_baselines",
    "round_baselines_numpy",
    "weighted_agreement",
    "weighted_agreement_numpy",
]

#: Floor on the round token entropy R_t in ``weighted_agreement`` (as in SAUCE).
ENTROPY_FLOOR = 1e-8

#: Per-trajectory outputs ``[N]`` of :func:`node_baselines`, and the inputs each needs.
NODE_FIELDS = {
    "msp_final": ("seq_logprob",),
    "perplexity_final": ("seq_logprob", "n_tokens"),
    "mean_token_entropy": ("node_entropy",),
    "n_final": (),  # valid nodes in the last executed round
    "n_nodes": (),  # valid nodes in all rounds
}
#: Per-trajectory outputs ``[N]`` of :func:`round_baselines`, and the inputs each needs.
ROUND_FIELDS = {
    "last_agreement": (),
    "mean_agreement": (),
    "weighted_agreement": ("token_entropy",),
    "n_rounds": (),
}


def _check_fields(fields, table, given: dict, what: str) -> None:
    unknown = set(fields) - set(table)
    if unknown:
        raise ValueError(f"unknown {what} output fields {sorted(unknown)}")
    for name in fields:
        missing = [arg for arg in table[name] if given[arg] is None]
        if missing:
            raise ValueError(f"{name} needs {', '.join(missing)}")


# ----------------------------------------------------------------------------------------
# Node level


class NodeCarry(NamedTuple):
    """State after round ``t``, each ``[N]`` in the float dtype.

    last_lp:  sum of seq_logprob over the valid nodes of the last executed round so far.
    last_ppl: sum of exp(-seq_logprob / n_tokens) over the same nodes.
    last_n:   number of those nodes (0 before any executed round).
    sum_ent:  sum of node_entropy over all valid nodes so far.
    n_nodes:  number of valid nodes so far.
    """

    last_lp: jax.Array
    last_ppl: jax.Array
    last_n: jax.Array
    sum_ent: jax.Array
    n_nodes: jax.Array


def _node_step(carry: NodeCarry, inputs):
    """One round: ``inputs`` = (node_mask ``[N, A]``, seq_logprob, n_tokens, node_entropy),
    each ``[N, A]`` or ``None`` when no requested output needs it."""
    mask, lp, ntok, ent = inputs
    dtype = carry.n_nodes.dtype
    n_t = jnp.sum(mask.astype(dtype), axis=1)
    executed = n_t > 0
    last_lp, last_ppl, sum_ent = carry.last_lp, carry.last_ppl, carry.sum_ent
    if lp is not None:
        s_lp = jnp.sum(jnp.where(mask, lp, 0.0), axis=1)
        last_lp = jnp.where(executed, s_lp, last_lp)
        if ntok is not None:
            ppl = jnp.exp(-lp / ntok.astype(dtype))
            last_ppl = jnp.where(executed, jnp.sum(jnp.where(mask, ppl, 0.0), axis=1), last_ppl)
    if ent is not None:
        sum_ent = sum_ent + jnp.sum(jnp.where(mask, ent, 0.0), axis=1)
    carry = NodeCarry(
        last_lp, last_ppl, jnp.where(executed, n_t, carry.last_n), sum_ent, carry.n_nodes + n_t
    )
    return carry, None


def _node_summaries(carry: NodeCarry) -> dict:
    return {
        "msp_final": -carry.last_lp / carry.last_n,
        "perplexity_final": carry.last_ppl / carry.last_n,
        "mean_token_entropy": carry.sum_ent / carry.n_nodes,
        "n_final": carry.last_n,
        "n_nodes": carry.n_nodes,
    }


def _float_dtype(*arrays):
    for x in arrays:
        if x is not None and jnp.issubdtype(x.dtype, jnp.floating):
            return x.dtype
    return jnp.zeros(()).dtype  # the default float type (float64 only under enable_x64)


@partial(jax.jit, static_argnames=("fields",))
def node_baselines(
    node_mask: jax.Array,
    seq_logprob: jax.Array | None = None,
    n_tokens: jax.Array | None = None,
    node_entropy: jax.Array | None = None,
    *,
    fields: tuple[str, ...] = ("msp_final",),
) -> dict[str, jax.Array]:
    """Node-level baselines over a padded batch, jitted, in one pass over the rounds.

    Args:
      node_mask: ``[T, N, A]`` bool, true where the agent spoke.
      seq_logprob: ``[T, N, A]`` float, sum of token log-probs per node.
      n_tokens: ``[T, N, A]`` int or float, tokens per node (>= 1 at valid nodes).
      node_entropy: ``[T, N, A]`` float, mean token entropy (nats) per node.
      fields: outputs (static), names from ``NODE_FIELDS``; an input no requested output
        needs may be ``None``.

    Returns:
      dict name -> ``[N]`` array in the float dtype of the inputs (NaN when undefined).
    """
    given = {"seq_logprob": seq_logprob, "n_tokens": n_tokens, "node_entropy": node_entropy}
    _check_fields(fields, NODE_FIELDS, given, "node baseline")
    needed = {arg for name in fields for arg in NODE_FIELDS[name]}
    lp = seq_logprob if "seq_logprob" in needed else None
    ntok = n_tokens if "n_tokens" in needed else None
    ent = node_entropy if "node_entropy" in needed else None
    dtype = _float_dtype(lp, ent)
    _, n, _ = node_mask.shape
    zero = jnp.zeros((n,), dtype)
    carry, _ = lax.scan(
        _node_step,
        NodeCarry(zero, zero, zero, zero, zero),
        (node_mask.astype(bool), lp, ntok, ent),
        unroll=True if node_mask.shape[0] <= 64 else 8,
    )
    result = _node_summaries(carry)
    return {name: result[name] for name in fields}


def node_baselines_numpy(
    node_mask: np.ndarray,
    seq_logprob: np.ndarray | None = None,
    n_tokens: np.ndarray | None = None,
    node_entropy: np.ndarray | None = None,
    *,
    fields: tuple[str, ...] = ("msp_final",),
) -> dict[str, np.ndarray]:
    """NumPy twin of :func:`node_baselines`: the same arguments, shapes and outputs."""
    given = {"seq_logprob": seq_logprob, "n_tokens": n_tokens, "node_entropy": node_entropy}
    _check_fields(fields, NODE_FIELDS, given, "node baseline")
    node_mask = np.asarray(node_mask, bool)
    floats = [np.asarray(x) for x in (seq_logprob, node_entropy) if x is not None]
    dtype = floats[0].dtype if floats else np.dtype(np.float64)
    t_max, n, _ = node_mask.shape
    last_lp = np.zeros(n, dtype)
    last_ppl = np.zeros(n, dtype)
    last_n = np.zeros(n, dtype)
    sum_ent = np.zeros(n, dtype)
    n_nodes = np.zeros(n, dtype)
    with np.errstate(invalid="ignore", divide="ignore", over="ignore"):
        for t in range(t_max):
            mask = node_mask[t]
            n_t = mask.sum(axis=1).astype(dtype)
            executed = n_t > 0
            if seq_logprob is not None:
                lp = np.asarray(seq_logprob[t], dtype)
                last_lp = np.where(executed, np.where(mask, lp, 0).sum(axis=1), last_lp)
                if n_tokens is not None:
                    ppl = np.exp(-lp / np.asarray(n_tokens[t], dtype))
                    last_ppl = np.where(executed, np.where(mask, ppl, 0).sum(axis=1), last_ppl)
            if node_entropy is not None:
                ent = np.asarray(node_entropy[t], dtype)
                sum_ent = sum_ent + np.where(mask, ent, 0).sum(axis=1)
            last_n = np.where(executed, n_t, last_n)
            n_nodes = n_nodes + n_t
        result = _node_summaries(NodeCarry(last_lp, last_ppl, last_n, sum_ent, n_nodes))
    return {name: np.asarray(result[name], dtype) for name in fields}


@jax.jit
def msp_final(seq_logprob: jax.Array, node_mask: jax.Array) -> jax.Array:
    """``[N]`` -mean of seq_logprob ``[T, N, A]`` over the last executed round's valid nodes."""
    return node_baselines(node_mask, seq_logprob, fields=("msp_final",))["msp_final"]


def msp_final_numpy(seq_logprob: np.ndarray, node_mask: np.ndarray) -> np.ndarray:
    """NumPy twin of :func:`msp_final`."""
    return node_baselines_numpy(node_mask, seq_logprob, fields=("msp_final",))["msp_final"]


@jax.jit
def perplexity_final(
    seq_logprob: jax.Array, n_tokens: jax.Array, node_mask: jax.Array
) -> jax.Array:
    """``[N]`` mean of exp(-seq_logprob / n_tokens) (all ``[T, N, A]``) over the last executed
    round's valid nodes."""
    out = node_baselines(node_mask, seq_logprob, n_tokens, fields=("perplexity_final",))
    return out["perplexity_final"]


def perplexity_final_numpy(
    seq_logprob: np.ndarray, n_tokens: np.ndarray, node_mask: np.ndarray
) -> np.ndarray:
    """NumPy twin of :func:`perplexity_final`."""
    out = node_baselines_numpy(node_mask, seq_logprob, n_tokens, fields=("perplexity_final",))
    return out["perplexity_final"]


@jax.jit
def mean_token_entropy(node_entropy: jax.Array, node_mask: jax.Array) -> jax.Array:
    """``[N]`` mean of the per-node mean token entropy ``[T, N, A]`` over all valid nodes."""
    out = node_baselines(node_mask, node_entropy=node_entropy, fields=("mean_token_entropy",))
    return out["mean_token_entropy"]


def mean_token_entropy_numpy(node_entropy: np.ndarray, node_mask: np.ndarray) -> np.ndarray:
    """NumPy twin of :func:`mean_token_entropy`."""
    out = node_baselines_numpy(
        node_mask, node_entropy=node_entropy, fields=("mean_token_entropy",)
    )
    return out["mean_token_entropy"]


# ----------------------------------------------------------------------------------------
# Round level


class RoundCarry(NamedTuple):
    """State after round ``t``, each ``[N]`` in the float dtype.

    last_m:   agreement at the last executed round so far (NaN before any).
    sum_m:    sum of agreement over executed rounds.
    n_rounds: number of executed rounds.
    sum_wm:   sum of M_t / R_t over executed rounds.
    sum_w:    sum of 1 / R_t over executed rounds.
    """

    last_m: jax.Array
    sum_m: jax.Array
    n_rounds: jax.Array
    sum_wm: jax.Array
    sum_w: jax.Array


def _round_step(carry: RoundCarry, inputs):
    """One round: ``inputs`` = (agreement ``[N]``, round_mask ``[N]``, token_entropy ``[N]``
    or ``None``)."""
    m_t, valid, h_t = inputs
    sum_wm, sum_w = carry.sum_wm, carry.sum_w
    if h_t is not None:
        w_t = 1.0 / jnp.maximum(h_t.astype(m_t.dtype), ENTROPY_FLOOR)
        sum_wm = sum_wm + jnp.where(valid, m_t * w_t, 0.0)
        sum_w = sum_w + jnp.where(valid, w_t, 0.0)
    carry = RoundCarry(
        jnp.where(valid, m_t, carry.last_m),
        carry.sum_m + jnp.where(valid, m_t, 0.0),
        carry.n_rounds + valid.astype(m_t.dtype),
        sum_wm,
        sum_w,
    )
    return carry, None


def _round_summaries(carry: RoundCarry) -> dict:
    return {
        "last_agreement": -carry.last_m,
        "mean_agreement": -carry.sum_m / carry.n_rounds,
        "weighted_agreement": -carry.sum_wm / carry.sum_w,
        "n_rounds": carry.n_rounds,
    }


@partial(jax.jit, static_argnames=("fields",))
def round_baselines(
    agreement: jax.Array,
    round_mask: jax.Array,
    token_entropy: jax.Array | None = None,
    *,
    fields: tuple[str, ...] = ("last_agreement",),
) -> dict[str, jax.Array]:
    """Round-level baselines over a padded batch, jitted, in one pass over the rounds.

    Args:
      agreement: ``[T, N]`` float, majority margin M_t per round.
      round_mask: ``[T, N]`` bool, true where the round executed.
      token_entropy: ``[T, N]`` float, round token entropy H_t (only for
        ``weighted_agreement``).
      fields: outputs (static), names from ``ROUND_FIELDS``.

    Returns:
      dict name -> ``[N]`` array in the dtype of ``agreement`` (NaN when no round executed).
    """
    _check_fields(fields, ROUND_FIELDS, {"token_entropy": token_entropy}, "round baseline")
    if "weighted_agreement" not in fields:
        token_entropy = None
    dtype = agreement.dtype
    t_max, n = agreement.shape
    zero = jnp.zeros((n,), dtype)
    carry, _ = lax.scan(
        _round_step,
        RoundCarry(zero + jnp.nan, zero, zero, zero, zero),
        (agreement, round_mask.astype(bool), token_entropy),
        unroll=True if t_max <= 64 else 8,
    )
    result = _round_summaries(carry)
    return {name: result[name] for name in fields}


def round_baselines_numpy(
    agreement: np.ndarray,
    round_mask: np.ndarray,
    token_entropy: np.ndarray | None = None,
    *,
    fields: tuple[str, ...] = ("last_agreement",),
) -> dict[str, np.ndarray]:
    """NumPy twin of :func:`round_baselines`: the same arguments, shapes and outputs."""
    _check_fields(fields, ROUND_FIELDS, {"token_entropy": token_entropy}, "round baseline")
    agreement = np.asarray(agreement)
    dtype = agreement.dtype
    round_mask = np.asarray(round_mask, bool)
    t_max, n = agreement.shape
    last_m = np.full(n, np.nan, dtype)
    sum_m = np.zeros(n, dtype)
    n_rounds = np.zeros(n, dtype)
    sum_wm = np.zeros(n, dtype)
    sum_w = np.zeros(n, dtype)
    with np.errstate(invalid="ignore", divide="ignore", over="ignore"):
        for t in range(t_max):
            m_t, valid = agreement[t], round_mask[t]
            last_m = np.where(valid, m_t, last_m)
            sum_m = sum_m + np.where(valid, m_t, 0)
            n_rounds = n_rounds + valid
            if token_entropy is not None:
                h_t = np.asarray(token_entropy[t], dtype)
                w_t = 1 / np.maximum(h_t, dtype.type(ENTROPY_FLOOR))
                sum_wm = sum_wm + np.where(valid, m_t * w_t, 0)
                sum_w = sum_w + np.where(valid, w_t, 0)
        result = _round_summaries(RoundCarry(last_m, sum_m, n_rounds, sum_wm, sum_w))
    return {name: np.asarray(result[name], dtype) for name in fields}


@jax.jit
def last_agreement(agreement: jax.Array, round_mask: jax.Array) -> jax.Array:
    """``[N]`` -agreement ``[T, N]`` at the last executed round."""
    return round_baselines(agreement, round_mask, fields=("last_agreement",))["last_agreement"]


def last_agreement_numpy(agreement: np.ndarray, round_mask: np.ndarray) -> np.ndarray:
    """NumPy twin of :func:`last_agreement`."""
    out = round_baselines_numpy(agreement, round_mask, fields=("last_agreement",))
    return out["last_agreement"]


@jax.jit
def mean_agreement(agreement: jax.Array, round_mask: jax.Array) -> jax.Array:
    """``[N]`` -mean of agreement ``[T, N]`` over executed rounds."""
    return round_baselines(agreement, round_mask, fields=("mean_agreement",))["mean_agreement"]


def mean_agreement_numpy(agreement: np.ndarray, round_mask: np.ndarray) -> np.ndarray:
    """NumPy twin of :func:`mean_agreement`."""
    out = round_baselines_numpy(agreement, round_mask, fields=("mean_agreement",))
    return out["mean_agreement"]


@jax.jit
def weighted_agreement(
    agreement: jax.Array, token_entropy: jax.Array, round_mask: jax.Array
) -> jax.Array:
    """``[N]`` -(sum_t M_t / R_t) / (sum_t 1 / R_t) over executed rounds, R_t = max(H_t, 1e-8)
    (all inputs ``[T, N]``)."""
    out = round_baselines(agreement, round_mask, token_entropy, fields=("weighted_agreement",))
    return out["weighted_agreement"]


def weighted_agreement_numpy(
    agreement: np.ndarray, token_entropy: np.ndarray, round_mask: np.ndarray
) -> np.ndarray:
    """NumPy twin of :func:`weighted_agreement`."""
    out = round_baselines_numpy(
        agreement, round_mask, token_entropy, fields=("weighted_agreement",)
    )
    return out["weighted_agreement"]
