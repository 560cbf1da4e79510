"""BCCS: belief-calibrated consensus states per round (papers/bccs.md, as settled in DESIGN.md).

Three implementations of the same numbers, side by side:

* :func:`bccs_scan` -- the jitted JAX kernel, a ``lax.scan`` over the rounds of padded,
  time-major node arrays ``[T, N, A]`` (rounds x trajectories x agent slots), vectorized
  over ``N`` and ``A``; :func:`bccs` is its registry signature and :func:`belief_agreement`
  its per-round support-belief share ``p_b [T, N]`` (the signal :func:`sauce_belief` filters
  with SAUCE instead of agreement).
* :func:`bccs_scan_numpy` -- its NumPy twin, the plainest loop over rounds (and over slot
  pairs for the vote counts).
* :func:`consensus_round` / :func:`bccs_trajectory` / :func:`bccs_reference` -- one round and
  one trajectory in plain Python.

For every trajectory ``n`` and executed round ``t`` (``round_mask[t, n]``), over the agents
that *answered* (``answer_class[t, n, a] >= 0``; the classes are the vote classes agreement
counts, so equivalent answers share one)::

    support  = the modal class of the round's answers; between classes with equally many
               votes, the class holding the lowest slot (DESIGN's final-answer rule:
               "ties to the lowest slot")
    p_s      = |support| / n_agents          (silent and unparseable agents stay in the
                                              denominator, as for agreement)
    p_b      = B_support / B_total           (B: sum of the beliefs of the answering agents,
                                              of the support group's members)
    dissent  = B_other / B_total             (= 1 - p_b, computed without cancellation)
    state    = FULL (2)     if p_s > theta_s and p_b > theta_full
               PARTIAL (1)  elif p_b > theta_partial
               NONE (0)     otherwise
    leader   = the support member with the highest belief (ties: the lowest slot)

A round in which nobody answered has ``|support| = 0``, ``p_s = 0``, ``p_b = 0``,
``dissent = 1``, state NONE and leader ``-1``; a round whose answering agents all have belief
0 (``B_total = 0``) has ``p_b = 0`` and ``dissent = 1`` too (its leader is the support's
lowest slot). The comparisons are strict, in the kernel's float dtype: ``p_s`` and ``p_b`` are
correctly rounded quotients, so a fraction equal to its threshold (2 of 3 agents against
``theta_s = 2/3``; beliefs 1 and 1/4 against ``theta_full = 0.8``) is not above it, in
float32 as in float64.

Per trajectory (summaries ``[N]``, in the float dtype):

    score       = 1 - p_s p_b of the last executed round: the team's consensus, support
                  share times belief share, taken from certainty; higher = less likely
                  correct. The team counts: one answering agent of three, however sure,
                  has p_b = 1 but p_s = 1/3, so scores 2/3, not 0 (a lone answer is not
                  certainty); a unanimous team scores 1 - p_b = 0.
    final_dissent = dissent of the last executed round (1 - p_b): the belief share alone
    first_full  = index of the first executed round in state FULL, -1 if none
    leader      = the last executed round's leader slot, -1 if nobody answered there
    final_p_s, final_p_b, final_state, n_rounds

Exactness: sums over agent slots are :func:`~kernels.baselines.slot_sum`'s halving tree
(the order depends on the slot index only), vote counts are integers, and the argmax ties go
to the lowest slot, so neither the batch size, the slot padding nor the device split changes
a bit. Every sum adds non-negative beliefs and ``dissent`` is its own sum, so float32 loses
nothing to cancellation there; ``score`` is one rounded product and one subtraction (exact
where ``p_s p_b >= 1/2``), a few ulps of 1 in float32. Inputs are taken as they are (no
validation: the engine's packed inputs are checked); values in masked slots may be anything,
NaN included.

Per round (``PER_ROUND``, ``[T, N]``): ``1 - p_s p_b`` of each executed round, the score of
the trajectory cut there, from the same scan (:func:`bccs_rounds`).

Why one module over 600 lines: the consensus rule of a round (support group, leader slot,
shares, state) is one rule, used by the kernel, its NumPy twin, their per-round forms,
``sauce_belief`` (SAUCE over the belief share) and the plain-Python references; splitting
them would put the rule's exactness conventions (slot-sum order, ties to the lowest slot) in
two places.
"""

from __future__ import annotations

import math
from functools import partial
from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax

from .baselines import default_unroll, slot_sum, tree_sum
from .sauce import sauce, sauce_numpy, sauce_reference, sauce_rounds, sauce_rounds_numpy

__all__ = [
    "FULL",
    "NONE",
    "PARTIAL",
    "SUMMARY_FIELDS",
    "TRACE_FIELDS",
    "PER_ROUND",
    "DEFAULTS",
    "BccsParams",
    "bccs",
    "bccs_numpy",
    "bccs_rounds",
    "bccs_rounds_numpy",
    "bccs_reference",
    "bccs_scan",
    "bccs_scan_numpy",
    "bccs_trajectory",
    "belief_agreement",
    "belief_agreement_numpy",
    "consensus_round",
    "sauce_belief",
    "sauce_belief_numpy",
    "sauce_belief_rounds",
    "sauce_belief_rounds_numpy",
    "sauce_belief_reference",
]

#: Consensus states (``state`` outputs).
NONE, PARTIAL, FULL = 0, 1, 2
#: Per-trajectory outputs ``[N]`` (float dtype; -1 where a round index or slot is undefined).
SUMMARY_FIELDS = ("score", "first_full", "leader", "final_p_s", "final_p_b", "final_dissent",
                  "final_state", "n_rounds")
#: Per-round outputs ``[T, N]``: ``p_s``, ``p_b``, ``dissent`` (float, NaN in masked rounds),
#: ``state`` (int8, -1 in masked rounds), ``support`` (int32 votes of the support group) and
#: ``round_leader`` (int32 slot), both -1 in masked rounds.
TRACE_FIELDS = ("p_s", "p_b", "dissent", "state", "support", "round_leader")
#: The per-round score ``[T, N]``: at an executed round ``t``, ``1 - p_s p_b`` of that round
#: (the ``score`` of the trajectory cut after round ``t``; at the last executed round,
#: ``score`` itself, bit for bit), NaN in masked rounds. Computed in the same scan.
PER_ROUND = "per_round"


class BccsParams(NamedTuple):
    """Consensus thresholds in [0, 1]; each a scalar or an array broadcasting to ``[N]``.

    theta_s:       FULL needs the support share ``p_s > theta_s`` (Byzantine 2/3) ...
    theta_full:    ... and the belief share ``p_b > theta_full``.
    theta_partial: PARTIAL (not FULL) needs ``p_b > theta_partial``.
    """

    theta_s: jax.Array | np.ndarray | float = 2.0 / 3.0
    theta_full: jax.Array | np.ndarray | float = 0.8
    theta_partial: jax.Array | np.ndarray | float = 0.5


#: The settled thresholds (DESIGN.md): 2/3, 0.8, 0.5.
DEFAULTS = BccsParams()


class BccsCarry(NamedTuple):
    """State after round ``t``, each ``[N]`` in the float dtype: the last executed round's
    ``dissent``, ``p_s``, ``p_b``, ``state`` and ``leader`` (NaN / -1 before any), the first
    FULL round (-1 before any) and the number of executed rounds."""

    dissent: jax.Array
    p_s: jax.Array
    p_b: jax.Array
    state: jax.Array
    leader: jax.Array
    first_full: jax.Array
    n_rounds: jax.Array


def _check_fields(fields: tuple[str, ...]) -> None:
    unknown = set(fields) - set(SUMMARY_FIELDS) - set(TRACE_FIELDS) - {PER_ROUND}
    if unknown:
        raise ValueError(f"unknown BCCS output fields {sorted(unknown)}")


#: Teams up to this many slots run :func:`_round_unrolled`, larger ones
#: :func:`_round_vectorized` (the same numbers, bit for bit). Measured on 2 loaded CPU cores
#: (float32, one device, score + first_full + leader; compile / run), unrolled against
#: vectorized: 1e6 trajectories, T = 3: A = 4 0.5 s / 24 ms against 0.7 s / 79 ms, A = 8
#: 0.8 s / 43 ms against 1.0 s / 262 ms; 2e5 trajectories: T = 3, A = 16 2.2 s / 72 ms
#: against 1.0 s / 160 ms (unrolled compile time grows as A^2 T: past 8 slots it is not
#: worth it); T = 12, A = 8 3.1 s / 185 ms against 2.8 s / 289 ms. A rolled scan
#: (``unroll=1``) ran 4-8x slower than a full unroll at T = 3 and T = 12 alike, so rounds
#: unroll up to :func:`~kernels.baselines.default_unroll`'s 12.
UNROLL_SLOTS = 8


def _round_unrolled(cls, b, team, params: BccsParams):
    """:func:`_round` for small teams: the slot loops unrolled into ``[N]`` vector code, so
    XLA fuses a round into one pass over the batch."""
    a_max = cls.shape[-1]
    neg = jnp.asarray(-0.0, b.dtype)
    c = [cls[:, i] for i in range(a_max)]
    bel = [b[:, i] for i in range(a_max)]
    answered = [x >= 0 for x in c]
    # The modal class. Slot i counts the votes of its class from slot i on: the first
    # member of a class counts the whole class, later members fewer, so the largest count is
    # the modal class's size and the first slot reaching it (strictly greater: ties stay
    # with the lower slot) opens the modal class whose lowest slot comes first. A (A - 1) / 2
    # compares; equal ids imply both voted (-1 != a class).
    size = top = None
    for i in range(a_max):
        count = jnp.ones_like(c[i], dtype=jnp.int32)
        for j in range(i + 1, a_max):
            count = count + (c[j] == c[i]).astype(jnp.int32)
        count = jnp.where(answered[i], count, 0)
        if size is None:
            size, top = count, c[i]
        else:
            better = count > size
            size, top = jnp.where(better, count, size), jnp.where(better, c[i], top)
    support = [answered[i] & (c[i] == top) for i in range(a_max)]
    total = tree_sum([jnp.where(answered[i], bel[i], neg) for i in range(a_max)])
    s_b = tree_sum([jnp.where(support[i], bel[i], neg) for i in range(a_max)])
    other = tree_sum([jnp.where(answered[i] & ~support[i], bel[i], neg)
                       for i in range(a_max)])
    leader = jnp.full(size.shape, -1, jnp.int32)
    best = jnp.full(size.shape, -jnp.inf, b.dtype)
    for i in range(a_max):  # strictly greater: ties stay with the lower slot
        better = support[i] & (bel[i] > best)
        leader, best = jnp.where(better, i, leader), jnp.where(better, bel[i], best)
    return _shares(size, total, s_b, other, team, params) + (size, leader)


def _round_vectorized(cls, b, team, params: BccsParams):
    """:func:`_round` for large teams: ``[N, A]`` array code (an ``[N, A, A]`` compare that
    XLA fuses into the vote count)."""
    answered = cls >= 0
    same = (cls[:, :, None] == cls[:, None, :]) & answered[:, None, :]
    count = jnp.sum(same, axis=2, dtype=jnp.int32)  # 0 for a slot that did not answer
    top = jnp.argmax(count, axis=1)  # the first maximum: ties to the lowest slot
    size = jnp.max(count, axis=1)
    support = answered & (cls == jnp.take_along_axis(cls, top[:, None], axis=1))
    total = slot_sum(b, answered)
    s_b = slot_sum(b, support)
    other = slot_sum(b, answered & ~support)
    leader = jnp.argmax(jnp.where(support, b, -jnp.inf), axis=1).astype(jnp.int32)
    leader = jnp.where(size > 0, leader, -1)
    return _shares(size, total, s_b, other, team, params) + (size, leader)


def _shares(size, total, s_b, other, team, params: BccsParams):
    """``(p_s, p_b, dissent, state int8)`` from the support's votes and the belief sums."""
    has = total > 0
    safe = jnp.where(has, total, jnp.ones_like(total))
    p_b = jnp.where(has, s_b / safe, 0)
    dissent = jnp.where(has, jnp.where(other > 0, other / safe, 0), 1)  # +0.0, never -0.0
    p_s = size.astype(total.dtype) / team
    full = (p_s > params.theta_s) & (p_b > params.theta_full)
    state = jnp.where(full, FULL, jnp.where(p_b > params.theta_partial, PARTIAL, NONE))
    return p_s, p_b, dissent, state.astype(jnp.int8)


def _round(cls, b, team, params: BccsParams):
    """One round of every trajectory (JAX): ``cls [N, A]`` int, ``b [N, A]`` float,
    ``team [N]`` float. Returns ``(p_s, p_b, dissent, state int8, support int32,
    leader int32)``, each ``[N]``."""
    if cls.shape[-1] <= UNROLL_SLOTS:
        return _round_unrolled(cls, b, team, params)
    return _round_vectorized(cls, b, team, params)


def _step(params: BccsParams, team, with_trace: bool, carry: BccsCarry, inputs,
          per_round: bool = False):
    cls, b, valid, t = inputs
    p_s, p_b, dissent, state, size, leader = _round(cls, b, team, params)
    dtype = carry.dissent.dtype

    def keep(new, old):
        return jnp.where(valid, new.astype(dtype), old)

    first = jnp.where(valid & (state == FULL) & (carry.first_full < 0), t.astype(dtype),
                      carry.first_full)
    carry = BccsCarry(keep(dissent, carry.dissent), keep(p_s, carry.p_s),
                      keep(p_b, carry.p_b), keep(state, carry.state),
                      keep(leader, carry.leader), first,
                      carry.n_rounds + valid.astype(dtype))
    trace = (p_s, p_b, dissent, state, size, leader) if with_trace else None
    if not per_round:
        return carry, trace
    # the score of rounds 0..t: _summaries' 1 - p_s p_b on this round's carry
    return carry, (trace, jnp.where(valid, 1 - carry.p_s * carry.p_b, jnp.nan))


def _summaries(carry: BccsCarry) -> dict:
    return {
        "score": 1 - carry.p_s * carry.p_b,  # NaN without an executed round
        "first_full": carry.first_full,
        "leader": carry.leader,
        "final_p_s": carry.p_s,
        "final_p_b": carry.p_b,
        "final_dissent": carry.dissent,
        "final_state": carry.state,
        "n_rounds": carry.n_rounds,
    }


@partial(jax.jit, static_argnames=("fields", "unroll"))
def bccs_scan(
    answer_class: jax.Array,
    belief: jax.Array,
    n_agents: jax.Array,
    round_mask: jax.Array,
    params: BccsParams = DEFAULTS,
    *,
    fields: tuple[str, ...] = ("score",),
    unroll: int | bool | None = None,
) -> dict[str, jax.Array]:
    """BCCS over a padded batch, jitted, in one pass over the rounds.

    Args:
      answer_class: ``[T, N, A]`` int, the vote class of every node's answer (equal ids:
        equivalent answers; only equality within a round matters), ``-1`` where the agent
        cast no vote.
      belief: ``[T, N, A]`` float in [0, 1], the probability each agent gives its answer
        (read only where ``answer_class >= 0``).
      n_agents: ``[N]`` initial team size (the denominator of ``p_s``), > 0.
      round_mask: ``[T, N]`` bool, true where the round executed.
      params: :class:`BccsParams`.
      fields: outputs (static): names from ``SUMMARY_FIELDS`` (``[N]``),
        ``TRACE_FIELDS`` and ``PER_ROUND`` (``[T, N]``); only what is asked for is written.
      unroll: ``lax.scan`` unroll factor (static; a compile-time choice, the numbers are the
        same); ``None``: :func:`~kernels.baselines.default_unroll`.

    Returns:
      dict name -> array; summaries in the float dtype of ``belief`` (``score`` NaN for a
      trajectory without an executed round).
    """
    _check_fields(fields)
    dtype = belief.dtype
    t_max = belief.shape[0]
    params = BccsParams(*(jnp.asarray(p, dtype) for p in params))
    team = jnp.asarray(n_agents).astype(dtype)
    mask = round_mask.astype(bool)
    zero = jnp.zeros_like(mask[0], dtype)  # carries the input's sharding (shard_map)
    nan, neg = zero + jnp.nan, zero - 1
    init = BccsCarry(nan, nan, nan, neg, neg, neg, zero)
    with_trace = any(name in TRACE_FIELDS for name in fields)
    per_round = PER_ROUND in fields
    carry, outs = lax.scan(
        lambda c, x: _step(params, team, with_trace, c, x, per_round),
        init,
        (answer_class, belief, mask, jnp.arange(t_max, dtype=jnp.int32)),
        unroll=default_unroll(t_max) if unroll is None else unroll,
    )
    result = _summaries(carry)
    if per_round:
        outs, result[PER_ROUND] = outs
    if with_trace:
        p_s, p_b, dissent, state, size, leader = outs
        result.update(
            p_s=jnp.where(mask, p_s, jnp.nan), p_b=jnp.where(mask, p_b, jnp.nan),
            dissent=jnp.where(mask, dissent, jnp.nan),
            state=jnp.where(mask, state, jnp.int8(-1)),
            support=jnp.where(mask, size, -1), round_leader=jnp.where(mask, leader, -1),
        )
    return {name: result[name] for name in fields}


def bccs_scan_numpy(
    answer_class: np.ndarray,
    belief: np.ndarray,
    n_agents: np.ndarray,
    round_mask: np.ndarray,
    params: BccsParams = DEFAULTS,
    *,
    fields: tuple[str, ...] = ("score",),
) -> dict[str, np.ndarray]:
    """NumPy twin of :func:`bccs_scan`: the same arguments, shapes and outputs."""
    _check_fields(fields)
    cls = np.asarray(answer_class)
    b = np.asarray(belief)
    dtype = b.dtype
    round_mask = np.asarray(round_mask, bool)
    t_max, n, a_max = cls.shape
    team = np.broadcast_to(np.asarray(n_agents, dtype), (n,))
    theta_s, theta_full, theta_partial = (np.asarray(p, dtype) for p in params)
    rows = np.arange(n)
    dissent_f = np.full(n, np.nan, dtype)
    p_s_f = np.full(n, np.nan, dtype)
    p_b_f = np.full(n, np.nan, dtype)
    state_f = np.full(n, -1, dtype)
    leader_f = np.full(n, -1, dtype)
    first_full = np.full(n, -1, dtype)
    n_rounds = np.zeros(n, dtype)
    trace = {
        "p_s": np.full((t_max, n), np.nan, dtype), "p_b": np.full((t_max, n), np.nan, dtype),
        "dissent": np.full((t_max, n), np.nan, dtype),
        "state": np.full((t_max, n), -1, np.int8),
        "support": np.full((t_max, n), -1, np.int32),
        "round_leader": np.full((t_max, n), -1, np.int32),
        PER_ROUND: np.full((t_max, n), np.nan, dtype),
    }
    with np.errstate(invalid="ignore", divide="ignore"):
        for t in range(t_max):
            valid = round_mask[t]
            c, bt = cls[t], b[t]
            answered = c >= 0
            count = np.zeros((n, a_max), np.int32)
            for i in range(a_max):
                for j in range(a_max):
                    count[:, i] += answered[:, j] & (c[:, j] == c[:, i])
            top = np.argmax(count, axis=1)  # ties to the lowest slot
            size = count[rows, top]
            support = answered & (c == c[rows, top][:, None])
            total = slot_sum(bt, answered, np)
            has = total > 0
            p_b = np.where(has, slot_sum(bt, support, np) / total, 0).astype(dtype)
            other = slot_sum(bt, answered & ~support, np)
            dissent = np.where(has, np.where(other > 0, other / total, 0), 1).astype(dtype)
            p_s = (size.astype(dtype) / team).astype(dtype)
            full = (p_s > theta_s) & (p_b > theta_full)
            state = np.where(full, FULL, np.where(p_b > theta_partial, PARTIAL, NONE))
            leader = np.argmax(np.where(support, bt, -np.inf), axis=1)
            leader = np.where(size > 0, leader, -1)
            first_full = np.where(valid & (state == FULL) & (first_full < 0), t, first_full)
            dissent_f = np.where(valid, dissent, dissent_f)
            p_s_f = np.where(valid, p_s, p_s_f)
            p_b_f = np.where(valid, p_b, p_b_f)
            state_f = np.where(valid, state, state_f)
            leader_f = np.where(valid, leader, leader_f)
            n_rounds = n_rounds + valid
            trace[PER_ROUND][t] = np.where(valid, 1 - p_s_f * p_b_f, np.nan)
            for name, value in (("p_s", p_s), ("p_b", p_b), ("dissent", dissent),
                                ("state", state), ("support", size),
                                ("round_leader", leader)):
                trace[name][t] = np.where(valid, value, trace[name][t])
    result = _summaries(BccsCarry(dissent_f, p_s_f, p_b_f, state_f, leader_f, first_full,
                                  n_rounds))
    result = {k: np.asarray(v, dtype) for k, v in result.items()}
    result.update(trace)
    return {name: result[name] for name in fields}


# ----------------------------------------------------------------------------------------
# The estimators: kernel, twin and per-trajectory reference with the registry's signature
# ``(values..., mask, *, parameters)`` (fastuq.engine.registry).

#: Registry output column -> ``bccs_scan`` field.
OUTPUTS = {"bccs": "score", "bccs_first_full": "first_full", "bccs_leader": "leader"}


@jax.jit
def bccs(
    answer_class: jax.Array,
    belief: jax.Array,
    n_agents: jax.Array,
    round_mask: jax.Array,
    *,
    theta_s: jax.Array | float,
    theta_full: jax.Array | float,
    theta_partial: jax.Array | float,
) -> dict[str, jax.Array]:
    """``{bccs, bccs_first_full, bccs_leader}``, each ``[N]``: ``1 - p_s p_b`` of the last
    round (the uncertainty; the belief share alone is ``bccs_scan``'s ``final_p_b``), the
    first FULL round and the last round's leader slot (-1: none). :func:`bccs_scan` with
    the registry's signature."""
    out = bccs_scan(answer_class, belief, n_agents, round_mask,
                    BccsParams(theta_s, theta_full, theta_partial),
                    fields=tuple(OUTPUTS.values()))
    return {col: out[field] for col, field in OUTPUTS.items()}


def bccs_numpy(
    answer_class: np.ndarray,
    belief: np.ndarray,
    n_agents: np.ndarray,
    round_mask: np.ndarray,
    *,
    theta_s: np.ndarray | float,
    theta_full: np.ndarray | float,
    theta_partial: np.ndarray | float,
) -> dict[str, np.ndarray]:
    """NumPy twin of :func:`bccs`."""
    out = bccs_scan_numpy(answer_class, belief, n_agents, round_mask,
                          BccsParams(theta_s, theta_full, theta_partial),
                          fields=tuple(OUTPUTS.values()))
    return {col: out[field] for col, field in OUTPUTS.items()}


@jax.jit
def bccs_rounds(
    answer_class: jax.Array,
    belief: jax.Array,
    n_agents: jax.Array,
    round_mask: jax.Array,
    *,
    theta_s: jax.Array | float,
    theta_full: jax.Array | float,
    theta_partial: jax.Array | float,
) -> tuple[dict[str, jax.Array], jax.Array]:
    """:func:`bccs` and the per-round score ``[T, N]`` (``1 - p_s p_b`` of each executed
    round, the score of the trajectory cut there; NaN in masked rounds) from the same
    scan."""
    out = bccs_scan(answer_class, belief, n_agents, round_mask,
                    BccsParams(theta_s, theta_full, theta_partial),
                    fields=(*OUTPUTS.values(), PER_ROUND))
    return {col: out[field] for col, field in OUTPUTS.items()}, out[PER_ROUND]


def bccs_rounds_numpy(
    answer_class: np.ndarray,
    belief: np.ndarray,
    n_agents: np.ndarray,
    round_mask: np.ndarray,
    *,
    theta_s: np.ndarray | float,
    theta_full: np.ndarray | float,
    theta_partial: np.ndarray | float,
) -> tuple[dict[str, np.ndarray], np.ndarray]:
    """NumPy twin of :func:`bccs_rounds`."""
    out = bccs_scan_numpy(answer_class, belief, n_agents, round_mask,
                          BccsParams(theta_s, theta_full, theta_partial),
                          fields=(*OUTPUTS.values(), PER_ROUND))
    return {col: out[field] for col, field in OUTPUTS.items()}, out[PER_ROUND]


@jax.jit
def belief_agreement(answer_class: jax.Array, belief: jax.Array,
                     round_mask: jax.Array) -> jax.Array:
    """``p_b [T, N]``: the support group's share of the answering agents' belief per round
    (NaN in masked rounds; 0 where nobody answered), a belief-weighted agreement that SAUCE
    can filter instead of agreement (:func:`sauce_belief`)."""
    ones = jnp.ones(round_mask.shape[1], belief.dtype)
    return bccs_scan(answer_class, belief, ones, round_mask, fields=("p_b",))["p_b"]


def belief_agreement_numpy(answer_class: np.ndarray, belief: np.ndarray,
                           round_mask: np.ndarray) -> np.ndarray:
    """NumPy twin of :func:`belief_agreement`."""
    ones = np.ones(np.shape(round_mask)[1], np.asarray(belief).dtype)
    return bccs_scan_numpy(answer_class, belief, ones, round_mask, fields=("p_b",))["p_b"]


@jax.jit
def sauce_belief(
    answer_class: jax.Array,
    belief: jax.Array,
    token_entropy: jax.Array,
    round_mask: jax.Array,
    *,
    lam: jax.Array | float,
    q: jax.Array | float,
    sigma2_0: jax.Array | float,
    mu_0: jax.Array | float,
) -> jax.Array:
    """``[N]`` SAUCE (``-mean_t mu_t``) with the belief share ``p_b`` of
    :func:`belief_agreement` as the observation ``M_t`` instead of agreement."""
    p_b = belief_agreement(answer_class, belief, round_mask)
    return sauce(p_b, token_entropy, round_mask, lam=lam, q=q, sigma2_0=sigma2_0, mu_0=mu_0)


def sauce_belief_numpy(
    answer_class: np.ndarray,
    belief: np.ndarray,
    token_entropy: np.ndarray,
    round_mask: np.ndarray,
    *,
    lam: np.ndarray | float,
    q: np.ndarray | float,
    sigma2_0: np.ndarray | float,
    mu_0: np.ndarray | float,
) -> np.ndarray:
    """NumPy twin of :func:`sauce_belief`."""
    p_b = belief_agreement_numpy(answer_class, belief, round_mask)
    return sauce_numpy(p_b, token_entropy, round_mask, lam=lam, q=q, sigma2_0=sigma2_0,
                       mu_0=mu_0)


@jax.jit
def sauce_belief_rounds(
    answer_class: jax.Array,
    belief: jax.Array,
    token_entropy: jax.Array,
    round_mask: jax.Array,
    *,
    lam: jax.Array | float,
    q: jax.Array | float,
    sigma2_0: jax.Array | float,
    mu_0: jax.Array | float,
) -> tuple[jax.Array, jax.Array]:
    """:func:`sauce_belief` and its per-round score ``[T, N]`` from the same filter scan
    (:func:`~kernels.sauce.sauce_rounds` on the belief share)."""
    p_b = belief_agreement(answer_class, belief, round_mask)
    return sauce_rounds(p_b, token_entropy, round_mask, lam=lam, q=q, sigma2_0=sigma2_0,
                        mu_0=mu_0)


def sauce_belief_rounds_numpy(
    answer_class: np.ndarray,
    belief: np.ndarray,
    token_entropy: np.ndarray,
    round_mask: np.ndarray,
    *,
    lam: np.ndarray | float,
    q: np.ndarray | float,
    sigma2_0: np.ndarray | float,
    mu_0: np.ndarray | float,
) -> tuple[np.ndarray, np.ndarray]:
    """NumPy twin of :func:`sauce_belief_rounds`."""
    p_b = belief_agreement_numpy(answer_class, belief, round_mask)
    return sauce_rounds_numpy(p_b, token_entropy, round_mask, lam=lam, q=q,
                              sigma2_0=sigma2_0, mu_0=mu_0)


# ----------------------------------------------------------------------------------------
# Per-trajectory references (one trajectory, the batch axis removed; plain Python)


def consensus_round(classes, beliefs, n_agents, *, theta_s: float = 2.0 / 3.0,
                    theta_full: float = 0.8, theta_partial: float = 0.5) -> dict:
    """One round in plain Python: ``classes [A]`` (int, -1: no vote), ``beliefs [A]``.

    Returns ``p_s``, ``p_b`` (exactly rounded sums, ``math.fsum``), ``dissent`` (here
    ``1 - p_b``, the definition), ``state``, ``support`` (the support group's slots) and
    ``leader`` (-1 when nobody answered)."""
    voters = [a for a in range(len(classes)) if int(classes[a]) >= 0]
    if not voters:
        return {"p_s": 0.0, "p_b": 0.0, "dissent": 1.0, "state": NONE, "support": [],
                "leader": -1}
    votes: dict[int, int] = {}
    for a in voters:
        votes[int(classes[a])] = votes.get(int(classes[a]), 0) + 1
    best = max(votes.values())
    modal = next(int(classes[a]) for a in voters if votes[int(classes[a])] == best)
    support = [a for a in voters if int(classes[a]) == modal]
    total = math.fsum(float(beliefs[a]) for a in voters)
    p_b = math.fsum(float(beliefs[a]) for a in support) / total if total > 0 else 0.0
    p_s = len(support) / float(n_agents)
    if p_s > theta_s and p_b > theta_full:
        state = FULL
    elif p_b > theta_partial:
        state = PARTIAL
    else:
        state = NONE
    leader = max(support, key=lambda a: (float(beliefs[a]), -a))
    return {"p_s": p_s, "p_b": p_b, "dissent": 1.0 - p_b, "state": state,
            "support": support, "leader": leader}


def bccs_trajectory(answer_class, belief, n_agents, round_mask, *, theta_s: float = 2 / 3,
                    theta_full: float = 0.8, theta_partial: float = 0.5) -> dict:
    """One trajectory (``[T, A]`` node inputs, ``[T]`` mask): ``rounds`` (one
    :func:`consensus_round` per executed round, with its ``round_index``), ``score``,
    ``first_full`` and ``leader`` (NaN / -1 / -1 without executed rounds)."""
    rounds = []
    for t in range(len(round_mask)):
        if round_mask[t]:
            r = consensus_round(answer_class[t], belief[t], n_agents, theta_s=theta_s,
                                theta_full=theta_full, theta_partial=theta_partial)
            rounds.append({"round_index": t, **r})
    full = [r["round_index"] for r in rounds if r["state"] == FULL]
    return {
        "rounds": rounds,
        # the team counts: support share times belief share (DESIGN.md, BCCS)
        "score": 1.0 - rounds[-1]["p_s"] * rounds[-1]["p_b"] if rounds else math.nan,
        "first_full": float(full[0]) if full else -1.0,
        "leader": float(rounds[-1]["leader"]) if rounds else -1.0,
    }


def bccs_reference(answer_class, belief, n_agents, round_mask, *, theta_s: float,
                   theta_full: float, theta_partial: float) -> dict[str, float]:
    """:func:`bccs` of one trajectory in plain Python."""
    out = bccs_trajectory(answer_class, belief, float(n_agents), round_mask,
                          theta_s=float(theta_s), theta_full=float(theta_full),
                          theta_partial=float(theta_partial))
    return {col: out[field] for col, field in OUTPUTS.items()}


def sauce_belief_reference(answer_class, belief, token_entropy, round_mask, *, lam: float,
                           q: float, sigma2_0: float, mu_0: float) -> float:
    """:func:`sauce_belief` of one trajectory in plain Python."""
    p_b = [consensus_round(answer_class[t], belief[t], 1.0)["p_b"] if round_mask[t] else 0.0
           for t in range(len(round_mask))]
    return sauce_reference(p_b, token_entropy, round_mask, lam=lam, q=q, sigma2_0=sigma2_0,
                           mu_0=mu_0)
