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

Exactness rules, so that equal true values give equal floats:

* Sums over agent slots run in one fixed order, a halving tree over the slot axis padded
  with ``-0.0`` (the additive identity) to a power of two. The order depends on the slot
  index alone, never on the batch size, the padding of the slot axis or the device split,
  so chunking and sharding never change a bit.
* Agreement is a fraction of the team, ``M_t = c_t / n``. Given ``team_size`` ``n`` (> 0) per
  trajectory, the round statistics are computed from the integer vote counts
  ``c_t = rint(M_t n)``: ``mean_agreement = -(sum_t c_t) / (n T)`` is one correctly rounded
  division of two integers, so trajectories whose true means are equal get identical floats
  (``[2/5, 1, 1]``, ``[3/5, 4/5, 1]`` and ``[4/5, 4/5, 4/5]`` all give -0.8 exactly). The
  weights of ``weighted_agreement`` are taken relative to the first executed round
  (``w_t = R_first / R_t``, the same ratio of sums), so equal entropies give weights of
  exactly 1 and the statistic then equals ``mean_agreement`` bit for bit. ``team_size`` 0
  (or ``None``) uses ``M_t`` as given.

Why one module over 600 lines: the six baselines are views of two scans (node and round),
and each scan's kernel, NumPy twin and plain-Python references share the exactness rules
above (slot-sum order, integer vote counts); splitting them would put one rule in two
places. The file is cut into marked sections (node scan, round scan, references).
"""

from __future__ import annotations

import math
from functools import partial
from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax

from .constants import ENTROPY_FLOOR

__all__ = [
    "ENTROPY_FLOOR",
    "NODE_FIELDS",
    "ROUND_FIELDS",
    "ROUND_PER_ROUND",
    "NodeCarry",
    "RoundCarry",
    "last_agreement",
    "last_agreement_numpy",
    "last_agreement_rounds",
    "last_agreement_rounds_numpy",
    "mean_agreement",
    "mean_agreement_numpy",
    "mean_agreement_rounds",
    "mean_agreement_rounds_numpy",
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
    "slot_sum",
    "tree_sum",
    "weighted_agreement",
    "weighted_agreement_numpy",
    "weighted_agreement_rounds",
    "weighted_agreement_rounds_numpy",
]



def default_unroll(t_max: int) -> int | bool:
    """``lax.scan`` unrolling for ``t_max`` rounds: full up to 12 rounds, else a rolled loop.

    Measured on 2 CPU cores (float32; round = the three round baselines over 2^20
    trajectories, node = the three node baselines over 2^17 trajectories x 8 agents),
    compile + first call / run (median of 7):

    ====  ==================  ==================  ==================  ==================
    T     round, full         round, rolled       node, full          node, rolled
    ====  ==================  ==================  ==================  ==================
    8     0.3 s / 44 ms       0.5 s / 63 ms       1.6 s / 30 ms       0.4 s / 52 ms
    12    0.3 s / 45 ms       0.5 s / 84 ms       1.3 s / 74 ms       0.4 s / 69 ms
    16    0.6 s / 203 ms      0.4 s / 112 ms      1.3 s / 89 ms       0.6 s / 117 ms
    24    0.8 s / 484 ms      0.5 s / 138 ms      2.4 s / 159 ms      0.5 s / 143 ms
    32    1.5 s / 783 ms      0.6 s / 189 ms      3.3 s / 504 ms      0.6 s / 214 ms
    64    19 s / 1.9 s        0.9 s / 78 ms *     20 s / 710 ms *     0.8 s / 300 ms *
    ====  ==================  ==================  ==================  ==================

    (* an earlier run on a loaded machine, 2^18 trajectories). Past a dozen rounds full
    unrolling costs compile time and run time alike; a partial unroll (4) was slower than
    either; a rolled loop compiles in about a second for any T (T = 1000 with A = 64
    included).
    """
    return True if t_max <= 12 else 1

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


#: Per-round outputs ``[T, N]`` of :func:`round_baselines`: ``NAME_per_round`` is, at an
#: executed round ``t``, the baseline ``NAME`` of rounds ``0..t`` (the trajectory cut after
#: round ``t``; at the last executed round, ``NAME`` itself, bit for bit), NaN in masked
#: rounds. Computed in the same scan as the summaries.
ROUND_PER_ROUND = {f"{name}_per_round": name
                   for name in ("last_agreement", "mean_agreement", "weighted_agreement")}


def _check_fields(fields, table, given: dict, what: str) -> None:
    if table is ROUND_FIELDS:  # a per-round field needs what its baseline needs
        fields = [ROUND_PER_ROUND.get(f, f) for f in fields]
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


def slot_sum(x, mask, xp=jnp):
    """Sum of ``x [..., A]`` over the valid slots of ``mask [..., A]``, in a fixed order.

    Masked slots hold ``-0.0`` (the IEEE additive identity: ``x + -0.0 == x`` bit for bit,
    for ``+0.0`` too), the slot axis is padded with it to a power of two, then halves are
    added elementwise (slot ``i`` with slot ``i + A/2``) until one slot is left. The
    association depends on the slot index only, so a team padded to 4 or to 8 slots, and
    any batch size or device split, sums in the same order. ``xp``: ``jnp`` or ``np``.
    """
    x = xp.where(mask, x, xp.asarray(-0.0, x.dtype))
    width = x.shape[-1]
    full = 1 << max(width - 1, 0).bit_length()
    if full != width:
        pad = [(0, 0)] * (x.ndim - 1) + [(0, full - width)]
        x = xp.pad(x, pad, constant_values=-0.0)
    while x.shape[-1] > 1:
        half = x.shape[-1] // 2
        x = x[..., :half] + x[..., half:]
    return x[..., 0]


def tree_sum(terms: list):
    """:func:`slot_sum`'s halving tree over a list of ``[N]`` terms (one
    per slot; a missing slot past the end adds nothing, as ``-0.0`` does there): the same
    association, so the same bits."""
    terms = list(terms)
    terms += [None] * ((1 << max(len(terms) - 1, 0).bit_length()) - len(terms))
    while len(terms) > 1:
        half = len(terms) // 2
        terms = [x if y is None else y if x is None else x + y
                 for x, y in zip(terms[:half], terms[half:], strict=True)]
    return terms[0]


def _node_step(carry: NodeCarry, inputs):
    """One round: ``inputs`` = (node_mask ``[N, A]``, seq_logprob, n_tokens, node_entropy),
    each ``[N, A]`` or ``None`` when no requested output needs it."""
    mask, lp, ntok, ent = inputs
    dtype = carry.n_nodes.dtype
    n_t = jnp.sum(mask.astype(jnp.int32), axis=1).astype(dtype)  # integers: any order is exact
    executed = n_t > 0
    last_lp, last_ppl, sum_ent = carry.last_lp, carry.last_ppl, carry.sum_ent
    if lp is not None:
        last_lp = jnp.where(executed, slot_sum(lp, mask), last_lp)
        if ntok is not None:
            ppl = jnp.exp(-lp / ntok.astype(dtype))
            last_ppl = jnp.where(executed, slot_sum(ppl, mask), last_ppl)
    if ent is not None:
        sum_ent = sum_ent + slot_sum(ent, mask)
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


@partial(jax.jit, static_argnames=("fields", "unroll"))
def node_baselines(
    seq_logprob: jax.Array | None,
    n_tokens: jax.Array | None,
    node_entropy: jax.Array | None,
    node_mask: jax.Array,
    *,
    fields: tuple[str, ...] = ("msp_final",),
    unroll: int | bool | None = None,
) -> dict[str, jax.Array]:
    """Node-level baselines over a padded batch, jitted, in one pass over the rounds.

    Args:
      seq_logprob: ``[T, N, A]`` float, sum of token log-probs per node.
      n_tokens: ``[T, N, A]`` int or float, tokens per node (>= 1 at valid nodes).
      node_entropy: ``[T, N, A]`` float, mean token entropy (nats) per node.
      node_mask: ``[T, N, A]`` bool, true where the agent spoke.
      fields: outputs (static), names from ``NODE_FIELDS``; an input no requested output
        needs may be ``None``.
      unroll: ``lax.scan`` unroll factor (static; a compile-time choice, the numbers are the
        same); ``None``: :func:`default_unroll`.

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
        unroll=default_unroll(node_mask.shape[0]) if unroll is None else unroll,
    )
    result = _node_summaries(carry)
    return {name: result[name] for name in fields}


def node_baselines_numpy(
    seq_logprob: np.ndarray | None,
    n_tokens: np.ndarray | None,
    node_entropy: np.ndarray | None,
    node_mask: np.ndarray,
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
                last_lp = np.where(executed, slot_sum(lp, mask, np), last_lp)
                if n_tokens is not None:
                    ppl = np.exp(-lp / np.asarray(n_tokens[t], dtype))
                    last_ppl = np.where(executed, slot_sum(ppl, mask, np), last_ppl)
            if node_entropy is not None:
                ent = np.asarray(node_entropy[t], dtype)
                sum_ent = sum_ent + slot_sum(ent, mask, np)
            last_n = np.where(executed, n_t, last_n)
            n_nodes = n_nodes + n_t
        result = _node_summaries(NodeCarry(last_lp, last_ppl, last_n, sum_ent, n_nodes))
    return {name: np.asarray(result[name], dtype) for name in fields}


@jax.jit
def msp_final(seq_logprob: jax.Array, node_mask: jax.Array) -> jax.Array:
    """``[N]`` -mean of seq_logprob ``[T, N, A]`` over the last executed round's valid nodes."""
    return node_baselines(seq_logprob, None, None, node_mask, fields=("msp_final",))["msp_final"]


def msp_final_numpy(seq_logprob: np.ndarray, node_mask: np.ndarray) -> np.ndarray:
    """NumPy twin of :func:`msp_final`."""
    out = node_baselines_numpy(seq_logprob, None, None, node_mask, fields=("msp_final",))
    return out["msp_final"]


@jax.jit
def perplexity_final(
    seq_logprob: jax.Array, n_tokens: jax.Array, node_mask: jax.Array
) -> jax.Array:
    """``[N]`` mean of exp(-seq_logprob / n_tokens) (all ``[T, N, A]``) over the last executed
    round's valid nodes."""
    out = node_baselines(seq_logprob, n_tokens, None, node_mask, fields=("perplexity_final",))
    return out["perplexity_final"]


def perplexity_final_numpy(
    seq_logprob: np.ndarray, n_tokens: np.ndarray, node_mask: np.ndarray
) -> np.ndarray:
    """NumPy twin of :func:`perplexity_final`."""
    out = node_baselines_numpy(
        seq_logprob, n_tokens, None, node_mask, fields=("perplexity_final",))
    return out["perplexity_final"]


@jax.jit
def mean_token_entropy(node_entropy: jax.Array, node_mask: jax.Array) -> jax.Array:
    """``[N]`` mean of the per-node mean token entropy ``[T, N, A]`` over all valid nodes."""
    out = node_baselines(None, None, node_entropy, node_mask, fields=("mean_token_entropy",))
    return out["mean_token_entropy"]


def mean_token_entropy_numpy(node_entropy: np.ndarray, node_mask: np.ndarray) -> np.ndarray:
    """NumPy twin of :func:`mean_token_entropy`."""
    out = node_baselines_numpy(
        None, None, node_entropy, node_mask, fields=("mean_token_entropy",)
    )
    return out["mean_token_entropy"]


# ----------------------------------------------------------------------------------------
# Round level


class RoundCarry(NamedTuple):
    """State after round ``t``, each ``[N]`` in the float dtype. ``x_t`` is the vote count
    ``c_t = rint(M_t n)`` where a team size ``n > 0`` is given, else ``M_t`` itself.

    last_x:   ``x_t`` at the last executed round so far (NaN before any).
    sum_x:    sum of ``x_t`` over executed rounds (an exact integer for counts).
    n_rounds: number of executed rounds.
    sum_wx:   sum of ``x_t * w_t`` over executed rounds, ``w_t = r_ref / R_t`` (``r_ref``:
              R_t of the first executed round, the unit of the weights).
    sum_w:    sum of ``w_t`` over executed rounds.
    ref:      ``r_ref``, R_t of the first executed round so far (0 before any).
    """

    last_x: jax.Array
    sum_x: jax.Array
    n_rounds: jax.Array
    sum_wx: jax.Array
    sum_w: jax.Array
    ref: jax.Array


def _counts(m_t, team, xp):
    """``x_t``: vote counts ``rint(M_t n)`` where ``team > 0``, else ``M_t``."""
    if team is None:
        return m_t
    return xp.where(team > 0, xp.rint(m_t * team), m_t)


def _first_round_noise(noise, round_mask, xp=np):
    """``[N]`` the value of ``noise [T, N]`` at each trajectory's first executed round (the
    last round's value where none executed): a select per round from the last to the first
    (unrolled; the rolled kernel carries it forward in its one scan instead)."""
    ref = noise[-1]
    for t in range(noise.shape[0] - 2, -1, -1):
        ref = xp.where(round_mask[t], noise[t], ref)
    return ref


def _round_step(carry: RoundCarry, inputs, carry_ref: bool, per_round: tuple[str, ...] = ()):
    """One round: ``inputs`` = (agreement ``[N]``, round_mask ``[N]``, weight ``[N]`` or
    ``None``, team size ``[N]`` or ``None``). With ``carry_ref`` the third input is the
    round token entropy and the weight ``w_t = r_ref / R_t`` is formed here, ``r_ref``
    carried from the first executed round (the same division, so the same bits)."""
    m_t, valid, w_t, team = inputs
    x_t = _counts(m_t, team, jnp)
    sum_wx, sum_w, ref = carry.sum_wx, carry.sum_w, carry.ref
    if w_t is not None:
        if carry_ref:
            noise = jnp.maximum(w_t.astype(m_t.dtype), ENTROPY_FLOOR)
            ref = jnp.where(valid & (carry.n_rounds == 0), noise, ref)
            w_t = ref / noise
        sum_wx = sum_wx + jnp.where(valid, x_t * w_t, 0.0)
        sum_w = sum_w + jnp.where(valid, w_t, 0.0)
    carry = RoundCarry(
        jnp.where(valid, x_t, carry.last_x),
        carry.sum_x + jnp.where(valid, x_t, 0.0),
        carry.n_rounds + valid.astype(m_t.dtype),
        sum_wx,
        sum_w,
        ref,
    )
    if not per_round:
        return carry, None
    # the baselines of rounds 0..t: _round_summaries on this round's carry, NaN where the
    # round is masked (at the last executed round: the summaries' own bits)
    now = _round_summaries(carry, team, jnp)
    return carry, tuple(jnp.where(valid, now[name], jnp.nan) for name in per_round)


def _round_summaries(carry: RoundCarry, team, xp) -> dict:
    scale = 1.0 if team is None else xp.where(team > 0, team, 1.0)
    return {
        "last_agreement": -carry.last_x / scale,
        "mean_agreement": -carry.sum_x / (scale * carry.n_rounds),
        "weighted_agreement": -carry.sum_wx / (scale * carry.sum_w),
        "n_rounds": carry.n_rounds,
    }


@partial(jax.jit, static_argnames=("fields", "unroll"))
def round_baselines(
    agreement: jax.Array,
    token_entropy: jax.Array | None,
    round_mask: jax.Array,
    *,
    team_size: jax.Array | None = None,
    fields: tuple[str, ...] = ("last_agreement",),
    unroll: int | bool | None = None,
) -> dict[str, jax.Array]:
    """Round-level baselines over a padded batch, jitted, in one pass over the rounds.

    Args:
      agreement: ``[T, N]`` float, majority margin M_t per round.
      token_entropy: ``[T, N]`` float, round token entropy H_t (only for
        ``weighted_agreement``; else may be ``None``).
      round_mask: ``[T, N]`` bool, true where the round executed.
      team_size: ``[N]`` number of agents the agreement is a fraction of; where > 0 the
        statistics are computed from the vote counts ``rint(M_t n)`` so that equal true
        values give equal floats (see the module docstring). ``None``/0: ``M_t`` as given.
      fields: outputs (static), names from ``ROUND_FIELDS`` (``[N]``) and
        ``ROUND_PER_ROUND`` (``[T, N]``, NaN in masked rounds).
      unroll: ``lax.scan`` unroll factor (static; a compile-time choice, the numbers are the
        same); ``None``: :func:`default_unroll`.

    Returns:
      dict name -> ``[N]`` (``[T, N]`` for per-round fields) array in the dtype of
      ``agreement`` (NaN when no round executed).
    """
    _check_fields(fields, ROUND_FIELDS, {"token_entropy": token_entropy}, "round baseline")
    per_round = tuple(ROUND_PER_ROUND[f] for f in fields if f in ROUND_PER_ROUND)
    if "weighted_agreement" not in fields and "weighted_agreement" not in per_round:
        token_entropy = None
    dtype = agreement.dtype
    t_max, n = agreement.shape
    team = None if team_size is None else jnp.asarray(team_size).astype(dtype)
    zero = jnp.zeros((n,), dtype)
    unroll = default_unroll(t_max) if unroll is None else unroll
    mask = round_mask.astype(bool)
    # Unrolled, XLA fuses a [T, N] weight array computed up front with the rounds into one
    # loop; rolled (T > 12), that array and its own pass cost 2x, so the loop carries the
    # first round's R_t instead (measured: bench/README.md, "round baselines").
    carry_ref = token_entropy is not None and not (unroll is True or unroll >= t_max)
    weights = token_entropy
    if token_entropy is not None and not carry_ref:
        noise = jnp.maximum(token_entropy.astype(dtype), ENTROPY_FLOOR)
        weights = _first_round_noise(noise, mask, jnp)[None, :] / noise
    carry, outs = lax.scan(
        lambda c, x: _round_step(c, (*x, team), carry_ref, per_round),
        RoundCarry(zero + jnp.nan, zero, zero, zero, zero, zero),
        (agreement, mask, weights),
        unroll=unroll,
    )
    result = _round_summaries(carry, team, jnp)
    result.update({f"{name}_per_round": value
                   for name, value in zip(per_round, outs or (), strict=True)})
    return {name: result[name] for name in fields}


def round_baselines_numpy(
    agreement: np.ndarray,
    token_entropy: np.ndarray | None,
    round_mask: np.ndarray,
    *,
    team_size: np.ndarray | None = None,
    fields: tuple[str, ...] = ("last_agreement",),
) -> dict[str, np.ndarray]:
    """NumPy twin of :func:`round_baselines`: the same arguments, shapes and outputs."""
    _check_fields(fields, ROUND_FIELDS, {"token_entropy": token_entropy}, "round baseline")
    agreement = np.asarray(agreement)
    dtype = agreement.dtype
    round_mask = np.asarray(round_mask, bool)
    team = None if team_size is None else np.asarray(team_size).astype(dtype)
    t_max, n = agreement.shape
    last_x = np.full(n, np.nan, dtype)
    sum_x = np.zeros(n, dtype)
    n_rounds = np.zeros(n, dtype)
    per_round = tuple(ROUND_PER_ROUND[f] for f in fields if f in ROUND_PER_ROUND)
    rounds = {name: np.full((t_max, n), np.nan, dtype) for name in per_round}
    weights = None
    if token_entropy is not None and ("weighted_agreement" in fields
                                      or "weighted_agreement" in per_round):
        noise = np.maximum(np.asarray(token_entropy, dtype), dtype.type(ENTROPY_FLOOR))
        weights = _first_round_noise(noise, round_mask)[None, :] / noise
    sum_wx = np.zeros(n, dtype)
    sum_w = np.zeros(n, dtype)
    with np.errstate(invalid="ignore", divide="ignore", over="ignore"):
        for t in range(t_max):
            valid = round_mask[t]
            x_t = _counts(agreement[t], team, np)
            if weights is not None:
                w_t = weights[t]
                sum_wx = sum_wx + np.where(valid, x_t * w_t, 0)
                sum_w = sum_w + np.where(valid, w_t, 0)
            last_x = np.where(valid, x_t, last_x)
            sum_x = sum_x + np.where(valid, x_t, 0)
            n_rounds = n_rounds + valid
            if per_round:
                now = _round_summaries(
                    RoundCarry(last_x, sum_x, n_rounds, sum_wx, sum_w, None), team, np)
                for name in per_round:
                    rounds[name][t] = np.where(valid, now[name], np.nan)
        result = _round_summaries(
            RoundCarry(last_x, sum_x, n_rounds, sum_wx, sum_w, None), team, np
        )
    result.update({f"{name}_per_round": value for name, value in rounds.items()})
    return {name: np.asarray(result[name], dtype) for name in fields}


def _round_field(name: str):
    """The registry's kernel and twin of the round baseline ``name``: ``(agreement,
    [token_entropy,] round_mask, *, team_size=None) -> [N]``."""

    def kernel(agreement, *rest, team_size=None):
        h, mask = (None, rest[0]) if len(rest) == 1 else rest
        return round_baselines(agreement, h, mask, team_size=team_size, fields=(name,))[name]

    def twin(agreement, *rest, team_size=None):
        h, mask = (None, rest[0]) if len(rest) == 1 else rest
        return round_baselines_numpy(agreement, h, mask, team_size=team_size,
                                     fields=(name,))[name]

    kernel.__name__, twin.__name__ = name, f"{name}_numpy"
    kernel.__doc__ = f"``[N]`` {name} of ``[T, N]`` round inputs (see the module docstring)."
    twin.__doc__ = f"NumPy twin of :func:`{name}`."
    return jax.jit(kernel), twin


def _round_field_rounds(name: str):
    """The registry's per-round kernel and twin of the round baseline ``name``: the same
    arguments, returning ``([N] score, [T, N] per-round score)`` from one scan."""
    fields = (name, f"{name}_per_round")

    def kernel(agreement, *rest, team_size=None):
        h, mask = (None, rest[0]) if len(rest) == 1 else rest
        out = round_baselines(agreement, h, mask, team_size=team_size, fields=fields)
        return out[fields[0]], out[fields[1]]

    def twin(agreement, *rest, team_size=None):
        h, mask = (None, rest[0]) if len(rest) == 1 else rest
        out = round_baselines_numpy(agreement, h, mask, team_size=team_size, fields=fields)
        return out[fields[0]], out[fields[1]]

    kernel.__name__, twin.__name__ = f"{name}_rounds", f"{name}_rounds_numpy"
    kernel.__doc__ = (f"``({name} [N], per-round {name} [T, N])`` of ``[T, N]`` round inputs "
                      "from one scan: row ``t`` is the baseline of rounds ``0..t`` (NaN where "
                      "round ``t`` is masked).")
    twin.__doc__ = f"NumPy twin of :func:`{name}_rounds`."
    return jax.jit(kernel), twin


last_agreement, last_agreement_numpy = _round_field("last_agreement")
mean_agreement, mean_agreement_numpy = _round_field("mean_agreement")
weighted_agreement, weighted_agreement_numpy = _round_field("weighted_agreement")
last_agreement_rounds, last_agreement_rounds_numpy = _round_field_rounds("last_agreement")
mean_agreement_rounds, mean_agreement_rounds_numpy = _round_field_rounds("mean_agreement")
weighted_agreement_rounds, weighted_agreement_rounds_numpy = _round_field_rounds(
    "weighted_agreement")



# ----------------------------------------------------------------------------------------
# Per-trajectory references (one trajectory, the batch axis removed; plain Python floats)


def _final_nodes(node_mask) -> list[tuple[int, int]]:
    """The valid nodes ``(t, a)`` of the last round with any valid node."""
    rounds = [t for t in range(len(node_mask)) if any(bool(v) for v in node_mask[t])]
    if not rounds:
        return []
    t = rounds[-1]
    return [(t, a) for a in range(len(node_mask[t])) if node_mask[t][a]]


def msp_final_reference(seq_logprob, node_mask) -> float:
    """:func:`msp_final` of one trajectory (``[T, A]`` inputs)."""
    nodes = _final_nodes(node_mask)
    if not nodes:
        return math.nan
    return -sum(float(seq_logprob[t][a]) for t, a in nodes) / len(nodes)


def perplexity_final_reference(seq_logprob, n_tokens, node_mask) -> float:
    """:func:`perplexity_final` of one trajectory (``[T, A]`` inputs)."""
    nodes = _final_nodes(node_mask)
    if not nodes:
        return math.nan
    return sum(math.exp(-float(seq_logprob[t][a]) / float(n_tokens[t][a]))
               for t, a in nodes) / len(nodes)


def mean_token_entropy_reference(node_entropy, node_mask) -> float:
    """:func:`mean_token_entropy` of one trajectory (``[T, A]`` inputs)."""
    values = [float(node_entropy[t][a]) for t in range(len(node_mask))
              for a in range(len(node_mask[t])) if node_mask[t][a]]
    return sum(values) / len(values) if values else math.nan


def _votes(agreement, round_mask, team_size) -> tuple[list[float], float]:
    """Executed rounds' values (vote counts where a team size is given) and the scale."""
    rounds = [t for t in range(len(round_mask)) if round_mask[t]]
    team = float(team_size) if team_size is not None and float(team_size) > 0 else 0.0
    if team:
        return [float(round(float(agreement[t]) * team)) for t in rounds], team
    return [float(agreement[t]) for t in rounds], 1.0


def last_agreement_reference(agreement, round_mask, *, team_size=None) -> float:
    """:func:`last_agreement` of one trajectory (``[T]`` inputs)."""
    x, scale = _votes(agreement, round_mask, team_size)
    return -x[-1] / scale if x else math.nan


def mean_agreement_reference(agreement, round_mask, *, team_size=None) -> float:
    """:func:`mean_agreement` of one trajectory (``[T]`` inputs)."""
    x, scale = _votes(agreement, round_mask, team_size)
    return -sum(x) / (scale * len(x)) if x else math.nan


def weighted_agreement_reference(agreement, token_entropy, round_mask, *,
                                 team_size=None) -> float:
    """:func:`weighted_agreement` of one trajectory (``[T]`` inputs): weights ``1 / R_t``
    taken relative to the first executed round."""
    x, scale = _votes(agreement, round_mask, team_size)
    noise = [max(float(token_entropy[t]), ENTROPY_FLOOR)
             for t in range(len(round_mask)) if round_mask[t]]
    if not x:
        return math.nan
    w = [noise[0] / r for r in noise]
    return -sum(a * b for a, b in zip(x, w, strict=True)) / (scale * sum(w))
