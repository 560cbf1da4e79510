"""UMAS: dynamic node confidence propagated along the interaction graph of a multi-agent run.

Three implementations of the same numbers:

* :func:`umas_scan` -- the jitted JAX kernel, a ``lax.scan`` over rounds of padded,
  time-major arrays ``[T, N, A]`` (rounds x trajectories x agent slots of the initial team).
* :func:`umas_scan_numpy` -- its NumPy twin, the plainest loop over rounds (vectorised over
  trajectories and agents within a round).
* :func:`umas_trajectory` -- one trajectory in plain Python floats, on the nested
  ``[round][agent]`` lists of the corpus columns (the reference for tests and benchmarks).

The math (``papers/umas.md``, settled in DESIGN.md). Node ``(t, i)`` of a trajectory has a
confidence ``c[t, i] <= 0`` (MSP = sum of token log-probs; or mean log-prob, or minus the mean
token entropy: the caller chooses). Its predecessors are
``P = {j : edge_mask[t, i, j] and node_mask[t-1, j]}`` (row ``i`` = receiver, column ``j`` =
the node of round ``t-1`` it read). With ``c_dyn`` the dynamic confidence::

    round 0, or agent i absent at t-1, or P empty:   w_i = 1, c_dyn[t, i] = c[t, i]
    otherwise, with d_i = min(c_dyn[t-1, i], CONF_CEILING)     (CONF_CEILING = -1e-12)
        w_ji        = (c_dyn[t-1, j] - d_i) / d_i
        w_i         = 1 - mean_{j in P} sigmoid(w_ji)
        c_dyn[t, i] = (1 - w_i) * c_dyn[t-1, i] + w_i * c[t, i]

    umas     = -mean of c_dyn over the valid nodes of the trajectory
    umas_fix = -mean of c     over the valid nodes of the trajectory

``d_i`` is the previous dynamic confidence of the receiver clipped to at most -1e-12, used in
both places it appears in ``w_ji`` (numerator and denominator) so that a node of confidence
exactly 0 does not divide by zero; the update itself uses the unclipped ``c_dyn[t-1, i]``.
The two readings differ only when ``|c_dyn[t-1, i]| < 1e-12``. A peer more confident than the
receiver (``c_dyn[j] > c_dyn[i]``) gives ``w_ji < 0``, ``sigmoid < 1/2``, hence a larger
``w_i`` (the node follows its new output); unreliable peers pull ``w_i`` towards 0 (the node
keeps its history).

Computed without cancellation: ``w_i = mean sigmoid(-w_ji)`` (the same number; see
:func:`_follow`), and ``1 - w_i >= 0.27`` since ``w_ji >= -1``; ``c_dyn`` is a sum of two
terms of one sign. Float32 then stays within ``4 (T + 1) eps32 max|c|`` of float64 (tests).

Default graphs (``edge_mask=None``): for debate (``DEBATE``) every node at round ``t`` reads
every *other* agent active at ``t-1``; for DyLAN (``DYLAN``) it reads the survivors of the
previous layer, which in packed form is the same rule (an agent that was pruned is not
active). ``self_edges=True`` adds the edge ``(t-1, i) -> (t, i)`` when agent ``i`` was active
(its ``w_ii = 0``, so it adds ``sigmoid(0) = 1/2`` to the mean); the paper's predecessor set
is the *peers* an agent read, so the default, as in DESIGN.md, has no self-edges.

Explicit graphs come as a boolean ``edge_mask [T, N, A, A]`` or packed as bit rows (see
:func:`pack_edges`): ``[T, N, A]`` of an unsigned integer type for up to 32 agent slots (bit
``j`` of ``edge_bits[t, n, i]`` set when node ``(t, i)`` read node ``(t-1, j)``), or, for any
number of slots, ``[T, N, A, W]`` uint32 words with ``W = ceil(A / 32)`` (bit ``j % 32`` of
word ``j // 32``). Round 0 rows are ignored. An explicit graph is the whole truth: a node
whose row is empty has no predecessors (``w = 1``). What a *null* entry of the corpus's
``predecessors`` column means (the protocol default) is resolved before the kernel, when the
column is packed (``fastuq.engine.batch``), and in :func:`umas_trajectory`.

Inputs are taken as they are (no validation): the public entry points in ``fastuq`` validate.
Values in padded slots (node_mask false) may be anything, NaN included, and never change a
score.

Why one module over 600 lines: one estimator is one place (DESIGN.md). The kernel, its NumPy
twin and the per-trajectory reference share the graph encoding (bit rows, default graphs),
the constants and the update rule written above, and are meant to be read side by side; the
file is cut into marked sections (graphs, kernel, twin, reference, registry views).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from functools import partial
from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax

__all__ = [
    "CONF_CEILING",
    "DEBATE",
    "DYLAN",
    "PROTOCOL_KINDS",
    "SUMMARY_FIELDS",
    "TRACE_FIELDS",
    "PER_ROUND",
    "WORD_BITS",
    "UmasCarry",
    "default_edges",
    "edge_words",
    "largest_array",
    "pack_edges",
    "unpack_edges",
    "umas_memory",
    "umas_scan",
    "umas_scan_numpy",
    "umas_rounds",
    "umas_rounds_numpy",
    "umas_trajectory",
]

#: The receiver's previous dynamic confidence is clipped to at most this in ``w_ji``.
CONF_CEILING = -1e-12

#: Protocol kinds for :func:`default_edges` (ints, so that nothing inside jit sees a string).
DEBATE = 0
DYLAN = 1
PROTOCOL_KINDS = {"debate": DEBATE, "dylan": DYLAN}

#: Names of the per-trajectory outputs ``[N]``.
SUMMARY_FIELDS = ("umas", "umas_fix", "n_nodes")
#: Names of the per-node trace outputs ``[T, N, A]`` (NaN where the node is masked).
TRACE_FIELDS = ("c_dyn", "w")
#: The per-round score ``[T, N]``: at a round with a valid node, ``umas`` of rounds ``0..t``
#: (the trajectory cut after round ``t``; at the last such round, ``umas`` itself, bit for
#: bit), NaN at rounds without one. Computed in the same scan (from the carried sums).
PER_ROUND = "per_round"

#: Up to this many agent slots the JAX kernel unrolls the ``[A, A]`` edge reduction into
#: ``A * (A - 1)`` elementwise terms over ``[N]`` vectors (one fused pass over the batch);
#: beyond it, it broadcasts ``[N, A, A]`` and reduces.
MAX_UNROLLED_AGENTS = 16


class UmasCarry(NamedTuple):
    """The filter state carried from round ``t-1`` to round ``t`` (all of batch size ``N``).

    c_dyn:   ``A`` arrays ``[N]`` (or one ``[N, A]``): dynamic confidence at ``t-1``; any value
             (NaN included) where ``active`` is false, where it is never read.
    active:  ``A`` bool arrays ``[N]`` (or one ``[N, A]``): ``node_mask[t-1]``; all false
             before round 0, so that every round-0 node starts afresh.
    sum_dyn: ``[N]`` running sum of ``c_dyn`` over valid nodes.
    sum_c:   ``[N]`` running sum of ``c`` over valid nodes.
    count:   ``[N]`` number of valid nodes so far (in the float dtype).
    """

    c_dyn: tuple | jax.Array
    active: tuple | jax.Array
    sum_dyn: jax.Array
    sum_c: jax.Array
    count: jax.Array


# ----------------------------------------------------------------------------------------
# Graphs


def _xp(x):
    return np if isinstance(x, np.ndarray | np.generic) else jnp


#: Agents per packed word of :func:`pack_edges` beyond 32 slots.
WORD_BITS = 32


def _bits_dtype(n_agents: int):
    for dtype in (np.uint8, np.uint16, np.uint32):
        if n_agents <= 8 * np.dtype(dtype).itemsize:
            return dtype
    return np.uint32  # several words


def edge_words(n_agents: int) -> int:
    """Number of uint32 words in a packed edge row of ``n_agents`` slots (``ceil(A / 32)``)."""
    return max(1, -(-int(n_agents) // WORD_BITS))


def default_edges(
    node_mask, protocol_kind: int = DEBATE, *, self_edges: bool = False, packed: bool = False
):
    """The protocol's default interaction graph as an explicit edge mask.

    Debate and DyLAN share one rule in packed form: node ``(t, i)`` reads every *other* agent
    active at ``t-1`` (DyLAN's survivors are exactly the agents still active). With
    ``self_edges`` it also reads its own node of ``t-1``. Round 0 has no edges, nor has a
    receiver that did not speak. Works on NumPy arrays (returns NumPy) and JAX arrays
    (returns JAX, usable inside jit: ``protocol_kind``, ``self_edges``, ``packed`` are Python
    values).

    Args:
      node_mask: ``[T, N, A]`` bool, true where the agent spoke.
      protocol_kind: ``DEBATE`` or ``DYLAN`` (see ``PROTOCOL_KINDS``).
      self_edges: include ``(t-1, i) -> (t, i)`` edges.
      packed: return bit rows ``[T, N, A]`` (see :func:`pack_edges`) instead of the mask.

    Returns:
      ``edge_mask [T, N, A, A]`` bool (``[t, n, i, j]``: receiver ``i`` read ``j``), or
      its packed bit rows.
    """
    if protocol_kind not in (DEBATE, DYLAN):
        raise ValueError(f"unknown protocol kind {protocol_kind!r}; use DEBATE or DYLAN")
    xp = _xp(node_mask)
    node_mask = xp.asarray(node_mask, dtype=bool)
    t_max, _, a = node_mask.shape
    prev = xp.concatenate([xp.zeros_like(node_mask[:1]), node_mask[:-1]], axis=0)
    allowed = xp.ones((a, a), bool) if self_edges else ~xp.eye(a, dtype=bool)
    edges = node_mask[..., :, None] & prev[..., None, :] & allowed
    return pack_edges(edges) if packed else edges


def pack_edges(edge_mask):
    """Pack ``edge_mask [..., A, A]`` bool into bit rows (NumPy or JAX, usable inside jit).

    Up to 32 agent slots: rows ``[..., A]`` of the smallest unsigned type holding ``A`` bits
    (uint8 up to 8, uint16 up to 16, uint32 up to 32), bit ``j`` of row ``i`` =
    ``edge_mask[..., i, j]``. More slots: words ``[..., A, W]`` uint32 with
    ``W = ceil(A / 32)``, bit ``j % 32`` of word ``j // 32``. :func:`umas_scan` and its twin
    take either form (and ``[..., A, W]`` words for any ``A``).
    """
    xp = _xp(edge_mask)
    edge_mask = xp.asarray(edge_mask)
    a = edge_mask.shape[-1]
    if a <= WORD_BITS:
        dtype = _bits_dtype(a)
        shifts = xp.arange(a, dtype=dtype)
        return xp.sum(edge_mask.astype(dtype) << shifts, axis=-1, dtype=dtype)
    words = edge_words(a)
    pad = [(0, 0)] * (edge_mask.ndim - 1) + [(0, words * WORD_BITS - a)]
    bits = xp.pad(edge_mask.astype(np.uint32), pad)
    bits = bits.reshape(edge_mask.shape[:-1] + (words, WORD_BITS))
    shifts = xp.arange(WORD_BITS, dtype=np.uint32)
    return xp.sum(bits << shifts, axis=-1, dtype=np.uint32)


def unpack_edges(edge_bits, n_agents: int):
    """Inverse of :func:`pack_edges`: bit rows ``[..., A]`` (``A <= 32``) or words
    ``[..., A, W]`` (``A > 32``) -> bool ``[..., A, A]``."""
    xp = _xp(edge_bits)
    if n_agents <= WORD_BITS:
        shifts = xp.arange(n_agents, dtype=edge_bits.dtype)
        return ((edge_bits[..., None] >> shifts) & 1).astype(bool)
    return _unpack_words(edge_bits, n_agents)


def _unpack_words(words, n_agents: int):
    """Words ``[..., W]`` uint32 -> bool ``[..., n_agents]`` (bit ``j % 32`` of word
    ``j // 32``)."""
    xp = _xp(words)
    shifts = xp.arange(WORD_BITS, dtype=np.uint32)
    bits = (words[..., None] >> shifts) & 1  # [..., W, 32]: elementwise, no gather
    bits = bits.reshape(words.shape[:-1] + (words.shape[-1] * WORD_BITS,))
    return bits[..., :n_agents].astype(bool)


def _as_words(edge_bits, n_agents: int):
    """Packed rows in either form -> words ``[..., A, W]`` uint32 (NumPy or JAX)."""
    if edge_bits.ndim == 3:  # [T, N, A]: one word per row, at most 32 slots
        if n_agents > WORD_BITS:
            raise ValueError(
                f"bit rows [T, N, A] hold at most {WORD_BITS} agents; pass uint32 words "
                f"[T, N, A, {edge_words(n_agents)}] (pack_edges) for {n_agents}"
            )
        return edge_bits.astype(np.uint32)[..., None]
    if edge_bits.shape[-1] < edge_words(n_agents):
        raise ValueError(
            f"edge words [..., {edge_bits.shape[-1]}] are too few for {n_agents} agents"
        )
    return edge_bits.astype(np.uint32)


def _edge_form(edge_mask, n_agents: int):
    """``(kind, edges)``: ``("words", [T, N, A, W] uint32)`` for packed rows or
    ``("mask", [T, N, A, A] bool)``; ``(None, None)`` for the default graph."""
    if edge_mask is None:
        return None, None
    if edge_mask.dtype == bool:
        if edge_mask.ndim != 4:
            raise ValueError(f"a bool edge_mask is [T, N, A, A], got shape {edge_mask.shape}")
        return "mask", edge_mask
    if not np.issubdtype(edge_mask.dtype, np.unsignedinteger):
        raise ValueError(f"edge_mask must be bool or unsigned bit rows, got {edge_mask.dtype}")
    return "words", _as_words(edge_mask, n_agents)


# ----------------------------------------------------------------------------------------
# JAX kernel


def _follow(cd_prev_j, d):
    """``sigmoid(-w_ji) = 1 - sigmoid(w_ji)`` with ``w_ji = (cd_prev_j - d) / d``.

    The kernels sum these, so ``w_i = mean sigmoid(-w_ji)`` is computed without the
    cancellation of ``1 - mean sigmoid(w_ji)`` when every peer is far less confident than
    the receiver (``w_ji >> 1``). In float32 that cancellation rounded ``w = 1.2e-10`` to 0
    for a receiver with ``c_dyn ~ -5e-12``, and because UMAS weighs *ratios* of confidences,
    the lost relative precision of that tiny ``c_dyn`` became a 60% error in a later round's
    weights (a score off by 2,457 x ``(T + 1) eps32 max|c|``); float64 had the same defect
    below ``w ~ 1e-16``. ``1 - w_i`` itself cannot cancel: ``w_ji >= -1`` (``c_j / d >= 0``),
    so ``w_i <= sigmoid(1) = 0.73``.
    """
    return jax.nn.sigmoid((d - cd_prev_j) / d)


def _node_update(cd_prev_i, active_i, c_i, acc, k):
    """Close one receiver: ``acc`` = sum of ``sigmoid(-w_ji)`` over its ``k`` predecessors,
    so ``w = acc / k``. Returns ``(c_dyn, w)`` with ``w = 1, c_dyn = c`` for a node that
    starts afresh."""
    fresh = jnp.logical_not(active_i) | (k == 0)
    w = acc / k
    # (1 - w) c_prev + w c, written so (XLA fuses this form 2x faster when unrolled); both
    # keep full relative precision, since 1 - w >= 0.27 and c, c_prev share a sign.
    c_dyn = jnp.where(fresh, c_i, cd_prev_i + w * (c_i - cd_prev_i))
    return c_dyn, jnp.where(fresh, 1.0, w)


def _step_slots(self_edges: bool, carry: UmasCarry, inputs):
    """One round, agent slots unrolled: ``carry.c_dyn``/``active`` are tuples of ``[N]``.

    ``inputs`` = (conf ``[N, A]``, node_mask ``[N, A]``, edge words ``[N, A, W]`` uint32 or
    ``None`` for the default graph). The predecessor terms are summed in slot order
    ``j = 0..A-1`` on both paths (an absent edge adds an exact 0), so the default graph and
    its explicit edges give the same numbers up to where XLA's CPU backend contracts
    ``a * b + c`` into a fused multiply-add, which depends on how each program is fused
    (at most a few ulp; usually bit for bit).
    """
    conf, mask, words = inputs
    dtype = conf.dtype
    a = conf.shape[1]
    cd_prev, active = carry.c_dyn, carry.active
    if words is None and not self_edges:
        n_active = sum(act.astype(dtype) for act in active)
    new_cd, new_w = [], []
    for i in range(a):
        c_i = conf[:, i]
        d = jnp.minimum(cd_prev[i], CONF_CEILING)
        acc = jnp.zeros_like(c_i)
        k = jnp.zeros_like(c_i)
        for j in range(a):
            if words is None:
                if j == i and not self_edges:
                    continue
                pred = active[j]
            else:
                bit = (words[:, i, j // WORD_BITS] >> (j % WORD_BITS)) & 1
                pred = (bit == 1) & active[j]
            acc = acc + jnp.where(pred, _follow(cd_prev[j], d), 0.0)
            if words is not None or self_edges:
                k = k + pred.astype(dtype)
        if words is None and not self_edges:
            k = n_active - active[i].astype(dtype)
        c_dyn, w = _node_update(cd_prev[i], active[i], c_i, acc, k)
        new_cd.append(c_dyn)
        new_w.append(w)
    valid = [mask[:, i] for i in range(a)]
    carry = UmasCarry(
        c_dyn=tuple(new_cd),
        active=tuple(valid),
        sum_dyn=carry.sum_dyn + sum(jnp.where(valid[i], new_cd[i], 0.0) for i in range(a)),
        sum_c=carry.sum_c + sum(jnp.where(valid[i], conf[:, i], 0.0) for i in range(a)),
        count=carry.count + sum(v.astype(dtype) for v in valid),
    )
    return carry, (new_cd, new_w)


def _step_dense(self_edges: bool, carry: UmasCarry, inputs):
    """One round on whole ``[N, A]`` arrays, the edge reduction broadcast to ``[N, A, A]``
    (for many agents). ``inputs`` = (conf, node_mask, edges: ``None``, a bool mask
    ``[N, A, A]`` or words ``[N, A, W]`` uint32, unpacked here one round at a time)."""
    conf, mask, edges = inputs
    dtype = conf.dtype
    a = conf.shape[1]
    cd_prev, active = carry.c_dyn, carry.active
    if edges is None:
        allowed = jnp.ones((a, a), bool) if self_edges else ~jnp.eye(a, dtype=bool)
        pred = allowed & active[:, None, :]
    else:
        if edges.dtype != bool:
            edges = _unpack_words(edges, a)
        pred = edges & active[:, None, :]
    d = jnp.minimum(cd_prev, CONF_CEILING)[:, :, None]
    acc = jnp.sum(jnp.where(pred, _follow(cd_prev[:, None, :], d), 0.0), axis=2)
    k = jnp.sum(pred.astype(dtype), axis=2)
    c_dyn, w = _node_update(cd_prev, active, conf, acc, k)
    carry = UmasCarry(
        c_dyn=c_dyn,
        active=mask,
        sum_dyn=carry.sum_dyn + jnp.sum(jnp.where(mask, c_dyn, 0.0), axis=1),
        sum_c=carry.sum_c + jnp.sum(jnp.where(mask, conf, 0.0), axis=1),
        count=carry.count + jnp.sum(mask.astype(dtype), axis=1),
    )
    return carry, (c_dyn, w)


def _drop_outputs(step, *args):
    carry, _ = step(*args)
    return carry, None


def _with_round_score(step, trace: bool, *args):
    """``step`` with the score of the rounds so far added to its outputs: ``_summaries``'
    ``-sum_dyn / count`` on the new carry (the same operations as the score)."""
    carry, outs = step(*args)
    return carry, (outs if trace else None, -carry.sum_dyn / carry.count)


#: Full unrolling limits (see :func:`_default_unroll`): rounds, and ``T * A**2`` terms for
#: the default graph and for explicit graphs.
FULL_UNROLL_ROUNDS = 12
FULL_UNROLL_TERMS = 320
FULL_UNROLL_TERMS_EXPLICIT = 192


def _default_unroll(t_max: int, n_agents: int, explicit: bool = False) -> bool | int:
    """Unroll all rounds of small runs, none of the others (``lax.scan`` ``unroll``).

    Fully unrolled, the rounds fuse into one pass over the batch, 3-5x faster than a rolled
    loop at N = 1e6. But XLA then fuses each round's ``A * (A - 1)`` terms into the next
    round's, so the fused expression grows exponentially with ``T``: compile and run times
    explode past a few hundred terms. Partial unrolling (2, 3, 4, 5, 8) was always slower
    than either (3-10x slower than rolled at N = 65,536, for the same reason inside the loop
    body), so it is all or one. Measured on 2 CPU cores (jaxlib 0.10, float32, one device,
    ``umas_scan(...).lower().compile()`` then the best of 5 runs; compile s / run ms;
    N = 65,536 unless marked)::

        T     A  graph      full: compile  run             rolled: compile  run
        3     4  default          0.18     12.2 (N=1e6)          0.50     80.8 (N=1e6)
        5     8  default          1.40      157 (N=1e6)          1.58      392 (N=1e6)
        5     8  default          1.02      6.7                  1.29     13.9
        3     8  explicit         1.25      130 (N=1e6)          1.16      291 (N=1e6)
        5     8  explicit         2.80     95.2                  1.32     21.8
        12    4  default          0.62      5.4                  0.38      9.6
        20    4  default          1.26    111.6                  0.62     17.3
        25    3  default          0.84     14.5                  0.38     15.6
        25    4  default          10.4   17,500 (N=1024)         0.41     21.0
        50    2  default          1.27     21.9                  0.42     19.6
        80    2  default          > 90 s (did not finish)        0.47     15.7
        1000  2  default          > 60 s (did not finish)        0.28      7.8 (N=1024)

    Rolled, compile time does not grow with ``T`` but with one round's unrolled agent terms
    (N = 1024, T = 1000 unless marked): 1.0 s at A = 8 (T = 200), 3.4 s at A = 16 with an
    explicit graph (the widest slot-unrolled case), 0.7 s (default) / 0.8 s (explicit) at
    A = 64 on the dense path beyond ``MAX_UNROLLED_AGENTS``.
    """
    terms = t_max * max(1, n_agents * n_agents)
    limit = FULL_UNROLL_TERMS_EXPLICIT if explicit else FULL_UNROLL_TERMS
    return True if t_max <= FULL_UNROLL_ROUNDS and terms <= limit else 1


def _summaries(carry: UmasCarry) -> dict:
    return {
        "umas": -carry.sum_dyn / carry.count,
        "umas_fix": -carry.sum_c / carry.count,
        "n_nodes": carry.count,
    }


def _select(result: dict, fields: tuple[str, ...]) -> dict:
    unknown = set(fields) - set(SUMMARY_FIELDS) - set(TRACE_FIELDS) - {PER_ROUND}
    if unknown:
        raise ValueError(f"unknown UMAS output fields {sorted(unknown)}")
    return {name: result[name] for name in fields}


@partial(jax.jit, static_argnames=("fields", "self_edges", "unroll", "block"))
def umas_scan(
    conf: jax.Array,
    node_mask: jax.Array,
    edge_mask: jax.Array | None = None,
    *,
    fields: tuple[str, ...] = ("umas",),
    self_edges: bool = False,
    unroll: int | bool | None = None,
    block: int | None = None,
) -> dict[str, jax.Array]:
    """UMAS over a padded batch, jitted.

    Args:
      conf: ``[T, N, A]`` float32/float64 node confidence ``c <= 0``.
      node_mask: ``[T, N, A]`` bool, true where the agent spoke in that round.
      edge_mask: ``None`` for the protocol default graph (every other agent active at
        ``t-1``; the fast path, no ``[A, A]`` array is read), a bool ``[T, N, A, A]`` mask
        (``[t, n, i, j]``: node ``(t, i)`` read node ``(t-1, j)``), or its packed bit rows:
        ``[T, N, A]`` unsigned (``A <= 32``) or ``[T, N, A, W]`` uint32 words for any ``A``
        (:func:`pack_edges`). Predecessors absent at ``t-1`` are ignored; an empty row
        means no predecessors (``w = 1``).
      fields: which outputs to compute (static): names from ``SUMMARY_FIELDS`` (``[N]``),
        ``TRACE_FIELDS`` (``[T, N, A]``, NaN where the node is masked; ``w`` is 1 for
        nodes that start afresh) and ``PER_ROUND`` (``[T, N]``). Only what is asked for is
        written.
      self_edges: with ``edge_mask=None``, also read the agent's own node of ``t-1``.
      unroll: ``lax.scan`` unroll factor; ``None`` chooses from measured compile and run
        times (:func:`_default_unroll`: all rounds of short, narrow runs, else rolled). A
        compile-time choice only: the numbers are the same up to fused multiply-adds.
      block: with a rolled scan, run it over blocks of this many trajectories in a
        ``fori_loop`` (the last block may be shorter), so that the ``2 A + 3`` carries stay
        in cache between rounds; ``None`` picks ``BLOCK`` for a rolled scan over more than
        ``BLOCK`` trajectories (measured 0.6-0.9x the time of one rolled pass), ``0`` one
        pass. Ignored when the rounds are fully unrolled (one fused loop over the batch
        already; blocks were 9x slower there). The same numbers, bit for bit (tested).

    Returns:
      dict name -> array in the dtype of ``conf``. ``n_nodes`` counts valid nodes; ``umas``
      and ``umas_fix`` are NaN for a trajectory without valid nodes.
    """
    t_max, n, a = conf.shape
    node_mask = node_mask.astype(bool)
    kind, edge_mask = _edge_form(edge_mask, a)
    if a <= MAX_UNROLLED_AGENTS and kind == "mask":
        edge_mask = pack_edges(edge_mask)[..., None].astype(jnp.uint32)  # A <= 16: one word
    if unroll is None:
        unroll = _default_unroll(t_max, a, kind is not None)
    if block is None:
        block = BLOCK if unroll is not True else 0
    scan = partial(_umas_pass, fields=fields, self_edges=self_edges, unroll=unroll)
    if unroll is True or not block or block >= n:
        return scan(conf, node_mask, edge_mask)
    return _over_blocks(scan, (conf, node_mask, edge_mask), n, block)


#: Trajectories per block of a rolled UMAS scan (``umas_scan(block=None)``). Measured on 2 CPU
#: cores (float32, default graph, one device, N = 2^20, load about 4, median ms one pass /
#: blocks of 16,384 / 65,536 / 262,144): T = 13, A = 4: 273 / 199 / 198 / 236; T = 20,
#: A = 4: 210 / 228 / 186 / 215; T = 6, A = 8: 275 / 164 / 174 / 221.
BLOCK = 1 << 16


def _over_blocks(scan, inputs, n: int, block: int) -> dict:
    """``scan(*inputs)`` over column blocks of ``block`` trajectories (batch axis 1 of every
    input; ``None`` inputs pass through): a ``fori_loop`` over the whole blocks writing into
    the outputs in place, then the remainder as one shorter block."""

    def cut(x, start, size):
        return None if x is None else lax.dynamic_slice_in_dim(x, start, size, axis=1)

    def axis(v):
        return 0 if v.ndim == 1 else 1

    n_blocks, tail = divmod(n, block)
    shapes = jax.eval_shape(lambda *x: scan(*(cut(y, 0, block) for y in x)), *inputs)
    outs = {k: jnp.zeros(v.shape[:axis(v)] + (n,) + v.shape[axis(v) + 1:], v.dtype)
            for k, v in shapes.items()}

    def body(i, outs):
        start = i * block
        res = scan(*(cut(x, start, block) for x in inputs))
        return {k: lax.dynamic_update_slice_in_dim(outs[k], res[k], start, axis=axis(res[k]))
                for k in outs}

    outs = lax.fori_loop(0, n_blocks, body, outs)
    if tail:
        start = n_blocks * block
        res = scan(*(None if x is None else x[:, start:] for x in inputs))
        outs = {k: lax.dynamic_update_slice_in_dim(outs[k], res[k], start, axis=axis(res[k]))
                for k in outs}
    return outs


def _umas_pass(conf, node_mask, edge_mask, *, fields, self_edges, unroll) -> dict:
    """One ``lax.scan`` over the rounds of the whole (or one block of the) batch; inputs as
    :func:`umas_scan` prepared them (bool node mask, packed words for up to 16 slots)."""
    dtype = conf.dtype
    t_max, n, a = conf.shape
    slots = a <= MAX_UNROLLED_AGENTS
    zero = jnp.zeros((n,), dtype)
    if slots:
        init = UmasCarry(
            tuple(zero for _ in range(a)), tuple(jnp.zeros((n,), bool) for _ in range(a)),
            zero, zero, zero,
        )
        step = _step_slots
    else:
        init = UmasCarry(jnp.zeros((n, a), dtype), jnp.zeros((n, a), bool), zero, zero, zero)
        step = _step_dense
    with_trace = any(name in TRACE_FIELDS for name in fields)
    per_round = PER_ROUND in fields
    body = partial(step, self_edges) if with_trace else partial(_drop_outputs, step, self_edges)
    if per_round:
        body = partial(_with_round_score, step, with_trace, self_edges)
    carry, outs = lax.scan(
        body,
        init,
        (conf, node_mask, edge_mask),
        unroll=unroll,
    )
    result = _summaries(carry)
    if per_round:
        outs, rounds = outs
        result[PER_ROUND] = jnp.where(node_mask.any(axis=2), rounds.astype(dtype),
                                      jnp.asarray(jnp.nan, dtype))
    if with_trace:
        nan = jnp.asarray(jnp.nan, dtype)
        for name, value in zip(TRACE_FIELDS, outs, strict=True):
            if slots:
                value = jnp.stack(value, axis=-1)
            result[name] = jnp.where(node_mask, value.astype(dtype), nan)
    return _select(result, fields)


def largest_array(t_max: int, n: int, n_agents: int, dtype, *, backend: str = "jax",
                  ) -> tuple[int, str]:
    """``(bytes, what)``: the largest array :func:`umas_scan` (``backend="jax"``) or
    :func:`umas_scan_numpy` (``"numpy"``) holds for a batch ``[T, N, A]`` of ``dtype``
    (``N`` as the kernel sees it: padded, per device). Up to
    :data:`MAX_UNROLLED_AGENTS` slots the JAX kernel holds ``[N]`` vectors per slot, so the
    inputs ``[T, N, A]`` are the largest; beyond, every round broadcasts the (receiver,
    sender) pairs of a block of trajectories, ``[min(N, BLOCK), A, A]`` values (the NumPy
    twin: ``[N, A, A]``), which grows with ``A**2``."""
    item = np.dtype(dtype).itemsize
    inputs = t_max * n * n_agents * item
    if backend == "numpy":
        pairs = n * n_agents * n_agents * item
        return max((inputs, f"[T, N, A] = [{t_max}, {n}, {n_agents}] inputs"),
                   (pairs, f"[N, A, A] = [{n}, {n_agents}, {n_agents}] per-round pairs"))
    if n_agents <= MAX_UNROLLED_AGENTS:
        return inputs, f"[T, N, A] = [{t_max}, {n}, {n_agents}] inputs"
    rows = min(n, BLOCK) if _default_unroll(t_max, n_agents) is not True else n
    pairs = rows * n_agents * n_agents * item
    return max((inputs, f"[T, N, A] = [{t_max}, {n}, {n_agents}] inputs"),
               (pairs, f"[N, A, A] = [{rows}, {n_agents}, {n_agents}] per-round pairs"))


def umas_memory(shapes, dtype, backend: str = "jax") -> tuple[int, str]:
    """The registry's memory estimate of :func:`umas` (``shapes``: its inputs' shapes as
    the kernel gets them, ``[T, N, A]`` first): :func:`largest_array`."""
    t_max, n, a = shapes[0]
    return largest_array(t_max, n, a, dtype, backend=backend)


# ----------------------------------------------------------------------------------------
# NumPy twin


def umas_scan_numpy(
    conf: np.ndarray,
    node_mask: np.ndarray,
    edge_mask: np.ndarray | None = None,
    *,
    fields: tuple[str, ...] = ("umas",),
    self_edges: bool = False,
) -> dict[str, np.ndarray]:
    """NumPy twin of :func:`umas_scan`: the same arguments, shapes and outputs."""
    conf = np.asarray(conf)
    dtype = conf.dtype
    node_mask = np.asarray(node_mask, bool)
    t_max, n, a = conf.shape
    kind, edge_mask = _edge_form(None if edge_mask is None else np.asarray(edge_mask), a)
    allowed = np.ones((a, a), bool) if self_edges else ~np.eye(a, dtype=bool)
    one = dtype.type(1)
    c_dyn = np.zeros((n, a), dtype)
    active = np.zeros((n, a), bool)
    sum_dyn = np.zeros(n, dtype)
    sum_c = np.zeros(n, dtype)
    count = np.zeros(n, dtype)
    with_trace = any(name in TRACE_FIELDS for name in fields)
    trace = {name: np.full((t_max, n, a), np.nan, dtype) for name in TRACE_FIELDS if with_trace}
    rounds = np.full((t_max, n), np.nan, dtype)
    with np.errstate(invalid="ignore", divide="ignore", over="ignore"):
        for t in range(t_max):
            c, valid = conf[t], node_mask[t]
            if kind is None:
                edges = allowed
            else:
                edges = edge_mask[t] if kind == "mask" else _unpack_words(edge_mask[t], a)
            pred = edges & active[:, None, :]  # [N, i, j]
            d = np.minimum(c_dyn, dtype.type(CONF_CEILING))[:, :, None]
            w_ji = (c_dyn[:, None, :] - d) / d
            follow = one / (one + np.exp(w_ji))  # sigmoid(-w_ji): see _follow
            acc = np.where(pred, follow, 0).sum(axis=2, dtype=dtype)
            k = pred.sum(axis=2).astype(dtype)
            fresh = ~active | (k == 0)
            w = np.where(fresh, one, acc / k)
            c_new = np.where(fresh, c, c_dyn + w * (c - c_dyn))
            sum_dyn = sum_dyn + np.where(valid, c_new, 0).sum(axis=1, dtype=dtype)
            sum_c = sum_c + np.where(valid, c, 0).sum(axis=1, dtype=dtype)
            count = count + valid.sum(axis=1).astype(dtype)
            rounds[t] = np.where(valid.any(axis=1), -sum_dyn / count, np.nan)
            if with_trace:
                trace["c_dyn"][t] = np.where(valid, c_new, np.nan)
                trace["w"][t] = np.where(valid, w, np.nan)
            c_dyn, active = c_new, valid
        result = _summaries(UmasCarry(c_dyn, active, sum_dyn, sum_c, count))
    result.update(trace)
    result[PER_ROUND] = rounds
    return {k: np.asarray(v, dtype) for k, v in _select(result, fields).items()}


# ----------------------------------------------------------------------------------------
# One trajectory in plain Python


def _py_sigmoid(x: float) -> float:
    if x >= 0:
        return 1.0 / (1.0 + math.exp(-x))
    e = math.exp(x)
    return e / (1.0 + e)


def _node_preds(predecessors, t: int, i: int):
    """The explicit predecessor list of node ``(t, i)``, or ``None`` (null or missing at any
    level: the whole column, the round, or the node)."""
    if predecessors is None or t >= len(predecessors) or predecessors[t] is None:
        return None
    row = predecessors[t]
    return row[i] if i < len(row) else None


def umas_trajectory(
    conf: Sequence[Sequence[float | None]],
    predecessors: Sequence[Sequence[Sequence[int] | None] | None] | None = None,
    *,
    self_edges: bool = False,
    n_agents: int | None = None,
    trajectory_id: str | None = None,
) -> dict[str, float | list]:
    """UMAS of one trajectory from the nested corpus columns, in plain Python floats.

    Args:
      conf: ``[round][agent]`` node confidence; ``None`` where the agent did not speak.
        Rounds may have different lengths (missing slots are absent agents).
      predecessors: ``[round][agent]`` the agent slots of round ``t-1`` that node ``(t, i)``
        read (the ``predecessors`` column). A list is the node's whole predecessor set
        (duplicates count once; an empty list: no predecessors, ``w = 1``); ``None`` -- the
        whole argument, a round or one node, or a slot past the end of a round -- takes the
        protocol default: every other agent active at ``t-1`` (plus itself with
        ``self_edges``). Given, it must have as many rounds as ``conf``.
      n_agents: the team size indices are checked against (default: the longest round of
        ``conf``).
      trajectory_id: named in error messages.

    Returns:
      ``{"umas", "umas_fix", "n_nodes", "c_dyn"}``; ``c_dyn`` nested like ``conf`` (None for
      absent agents). ``umas``/``umas_fix`` are NaN when no node is valid.

    Raises:
      ValueError: a predecessor index outside ``[0, n_agents)`` (naming trajectory, round,
        agent and index), or ``predecessors`` with a different number of rounds.
    """
    team = max((len(row) for row in conf), default=0) if n_agents is None else int(n_agents)
    who = f"trajectory {trajectory_id!r}: " if trajectory_id is not None else ""
    if predecessors is not None:
        if len(predecessors) != len(conf):
            raise ValueError(
                f"{who}predecessors has {len(predecessors)} rounds but the node confidence "
                f"has {len(conf)} (field predecessors)"
            )
        for t, row in enumerate(predecessors):
            for i, preds in enumerate(row or ()):
                for j in preds or ():
                    if not 0 <= j < team:
                        raise ValueError(
                            f"{who}round {t}, agent {i}: predecessor {j} is not an agent of "
                            f"the team of {team} (field predecessors)"
                        )
    c_dyn: list[list[float | None]] = []
    prev: Sequence[float | None] = []
    total_dyn = total_c = 0.0
    n_nodes = 0
    for t, row in enumerate(conf):
        out: list[float | None] = []
        for i, c in enumerate(row):
            if c is None:
                out.append(None)
                continue
            c = float(c)
            prev_i = prev[i] if i < len(prev) else None
            preds = _node_preds(predecessors, t, i)
            if preds is None:
                preds = [j for j in range(len(prev)) if j != i or self_edges]
            preds = sorted({j for j in preds if j < len(prev) and prev[j] is not None})
            if prev_i is None or not preds:
                new = c
            else:
                d = min(prev_i, CONF_CEILING)
                # w = 1 - mean sigmoid(w_ji), as mean sigmoid(-w_ji): no cancellation
                w = sum(_py_sigmoid((d - prev[j]) / d) for j in preds) / len(preds)
                new = prev_i + w * (c - prev_i)  # = (1 - w) c_prev + w c
            out.append(new)
            total_dyn += new
            total_c += c
            n_nodes += 1
        c_dyn.append(out)
        prev = out
    nan = float("nan")
    return {
        "umas": -total_dyn / n_nodes if n_nodes else nan,
        "umas_fix": -total_c / n_nodes if n_nodes else nan,
        "n_nodes": n_nodes,
        "c_dyn": c_dyn,
    }


# ----------------------------------------------------------------------------------------
# The estimators with the registry's signature ``(values..., mask, *, options)``


@jax.jit
def umas(node_confidence: jax.Array, node_mask: jax.Array,
         edges: jax.Array | None = None) -> jax.Array:
    """``[N]`` UMAS of ``[T, N, A]`` node confidence over the graph ``edges`` (packed bit
    rows, or ``None``: the protocol default). :func:`umas_scan` with ``fields=("umas",)``."""
    return umas_scan(node_confidence, node_mask, edges, fields=("umas",))["umas"]


def umas_numpy(node_confidence: np.ndarray, node_mask: np.ndarray,
               edges: np.ndarray | None = None) -> np.ndarray:
    """NumPy twin of :func:`umas`."""
    return umas_scan_numpy(node_confidence, node_mask, edges, fields=("umas",))["umas"]


@jax.jit
def umas_rounds(node_confidence: jax.Array, node_mask: jax.Array,
                edges: jax.Array | None = None) -> tuple[jax.Array, jax.Array]:
    """:func:`umas` and its per-round score ``[T, N]`` (``umas`` of the trajectory cut after
    each round with a valid node, NaN at the others) from the same scan."""
    out = umas_scan(node_confidence, node_mask, edges, fields=("umas", PER_ROUND))
    return out["umas"], out[PER_ROUND]


def umas_rounds_numpy(node_confidence: np.ndarray, node_mask: np.ndarray,
                      edges: np.ndarray | None = None) -> tuple[np.ndarray, np.ndarray]:
    """NumPy twin of :func:`umas_rounds`."""
    out = umas_scan_numpy(node_confidence, node_mask, edges, fields=("umas", PER_ROUND))
    return out["umas"], out[PER_ROUND]


@jax.jit
def umas_fix(node_confidence: jax.Array, node_mask: jax.Array) -> jax.Array:
    """``[N]`` UMAS_FIX: minus the mean static node confidence over valid nodes."""
    return umas_scan(node_confidence, node_mask, None, fields=("umas_fix",))["umas_fix"]


def umas_fix_numpy(node_confidence: np.ndarray, node_mask: np.ndarray) -> np.ndarray:
    """NumPy twin of :func:`umas_fix`."""
    return umas_scan_numpy(node_confidence, node_mask, None, fields=("umas_fix",))["umas_fix"]


def _reference_graph(edges, node_mask):
    """Packed bit rows of one trajectory (``[T, A]`` or ``[T, A, W]``) as nested
    predecessor lists."""
    if edges is None:
        return None
    out = []
    for t in range(len(node_mask)):
        row = []
        for i in range(len(node_mask[t])):
            e = edges[t][i]
            words = [int(w) for w in e] if np.ndim(e) else [int(e)]
            row.append([j for j in range(len(node_mask[t]))
                        if (words[j // WORD_BITS] >> (j % WORD_BITS)) & 1])
        out.append(row)
    return out


def _reference_conf(node_confidence, node_mask):
    return [[float(node_confidence[t][a]) if node_mask[t][a] else None
             for a in range(len(node_mask[t]))] for t in range(len(node_mask))]


def umas_reference(node_confidence, node_mask, edges=None) -> float:
    """:func:`umas` of one trajectory (``[T, A]`` inputs, ``edges`` its packed rows) through
    :func:`umas_trajectory`."""
    return umas_trajectory(_reference_conf(node_confidence, node_mask),
                           _reference_graph(edges, node_mask),
                           n_agents=len(node_mask[0]) if len(node_mask) else 0)["umas"]


def umas_fix_reference(node_confidence, node_mask) -> float:
    """:func:`umas_fix` of one trajectory (``[T, A]`` inputs)."""
    return umas_trajectory(_reference_conf(node_confidence, node_mask))["umas_fix"]
