"""Black-box answer-set estimators of a debate round: answer entropy, number of answer sets
and the confidence-consistency combination CoCoA, each per round over the agents and
aggregated over rounds.

They follow the single-model libraries' definitions, with a debate round's agents as the
samples and the vote classes of agreement as the semantic equivalence:

* ``answer_entropy``: the *discrete semantic entropy* of Farquhar et al. 2024, "Detecting
  hallucinations in large language models using semantic entropy" (Nature 630), section
  "Discrete semantic entropy": the entropy of the empirical distribution of the answers'
  semantic classes (lm-polygraph's ``SemanticEntropy`` with class probabilities by frequency,
  ``-mean_j log p(class of sample j)``).
* ``num_answer_sets``: the number of semantic sets of Lin, Trivedi and Sun 2023,
  "Generating with Confidence: Uncertainty Quantification for Black-box Large Language
  Models" (arXiv:2305.19187), section 4.1 ("NumSet"; lm-polygraph's ``NumSemSets``).
* ``cocoa``: CoCoA of Vashurin et al. 2025, "Uncertainty Quantification for LLMs through
  Minimum Bayes Risk: Bridging Confidence and Consistency" (arXiv:2502.04964): a sample's
  confidence-based uncertainty times its mean dissimilarity to the other samples
  (lm-polygraph's ``CocoaMSP`` / ``CocoaPPL`` / ``CocoaMTE`` with the node confidence of
  UMAS's ``confidence`` choice: MSP ``-seq_logprob``, PPL ``-seq_logprob / n_tokens``, MTE
  the node's mean token entropy), averaged over the round's agents.

Definitions, for trajectory ``n`` and round ``t`` (``answer_class [T, N, A]``: the vote class
of every node's answer, equal ids for equivalent answers, ``-1`` where the agent gave no
parseable answer or did not speak; ``n_agents [N]``: the team)::

    v        = agents that answered (answer_class >= 0)
    n        = max(n_agents, v)                      the team
    c_k      = votes of answer class k
    classes  = each answer class, and each of the n - v team members without an answer as a
               class of its own (as agreement handles them: they vote for no answer but stay
               in the denominator, so silence and unparseable answers never look like
               consensus: a round where nobody answered has the most sets and the most
               entropy, n and ln n)
    entropy  = -sum over classes of (c / n) ln(c / n)          (nats)
             = sum_{m=1..A} (S_m / n) ln(n / m) + ((n - v) / n) ln n
               with S_m the answering agents whose class has m votes
    sets     = number of classes = sum_{m=1..A} S_m / m + (n - v)

    cocoa    = mean over the round's valid nodes i (node_mask: a node confidence c_i <= 0)
               of u_i * d_i, with u_i = -c_i (the confidence-based uncertainty) and
               d_i = (n - 1 - s_i) / (n - 1): the share of the other n - 1 team members
               whose answer differs from i's (s_i: other agents with i's class; 0 where i
               gave no answer, so d_i = 1; d_i = 1 for a team of one)

Aggregation over rounds (each a registry entry of its own, one output column each):

    answer_entropy, num_answer_sets         the last executed round (round_mask)
    answer_entropy_mean, num_answer_sets_mean   the mean over executed rounds
    cocoa                                   the last round with a valid node (the final
                                            nodes, as ``msp_final``)
    cocoa_mean                              the mean over rounds with a valid node

A trajectory without such a round gets NaN. All are uncertainties: higher, less likely
correct. SAUCE-style filtering of these per-round signals is not offered (``sauce_belief``
shows how an observation other than agreement is filtered).

Exactness: vote counts and ``S_m`` are integers; the entropy sums its terms
``S_m ln(n / m) / n``, indexed by ``m = 1..A``, with :func:`~kernels.baselines.tree_sum`'s
fixed halving tree (padding the slot axis adds +-0.0 terms past the largest class, which
change no bit), so it depends only on the multiset of class sizes and ``n``: a permutation
of the agents, the slot padding, the batch size and the device split change no bit, and
rounds with the same vote pattern give equal floats (ties stay ties). ``sets`` is an
integer, exact in any float dtype. CoCoA sums its nodes' ``u_i / (1 / d_i)`` with
:func:`~kernels.baselines.slot_sum`'s fixed halving tree. Every entropy term is
non-negative (no cancellation): float32 stays within a few ulps per term of the exact value.

The bits do not depend on the slot width A a chunk pads its teams to, on either side of
:data:`UNROLL_SLOTS` (unrolled and array code build the same per-slot terms), because of
two rules of how the sums are written (tests/test_kernels_answer_sets.py checks widths 4, 8
and 16 and batches of 3 and 512; tests/test_invariance.py the chunkings of a corpus):

* no sum adds a product: XLA on CPU fuses a multiplication and the addition it feeds into
  one multiply-add (one rounding less) in some vector shapes and not in others, so a sum of
  products moved by an ulp between widths (CoCoA's ``u_i d_i`` before: 13 of 1,500 rows of
  the invariance corpus, 2.2e-16). Each term ends in a division, which cannot be fused;
* nothing is divided by a broadcast array: XLA rewrites ``x / broadcast(y)`` as
  ``x * broadcast(1 / y)`` (another rounding, and a product again), which the ``[N, A]``
  array code met and the unrolled ``[N]`` code did not (the entropy moved by an ulp between
  8 and 16 slots before). The entropy's terms are ``[N]`` columns in both.

Three implementations of the same numbers: the jitted JAX kernels (a ``lax.scan`` over the
rounds, vectorized over trajectories and slots), their NumPy twins (``*_numpy``, the plainest
loop over rounds and slot pairs) and one-trajectory plain-Python references
(``*_reference``). Inputs are taken as they are (the engine's packed inputs are checked);
values in masked rounds and slots may be anything, NaN included.
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

__all__ = [
    "COCOA_FIELDS", "SET_FIELDS", "UNROLL_SLOTS", "answer_entropy", "answer_entropy_mean",
    "answer_entropy_mean_numpy", "answer_entropy_mean_reference", "answer_entropy_numpy",
    "answer_entropy_reference", "answer_sets_scan", "answer_sets_scan_numpy", "cocoa",
    "cocoa_mean", "cocoa_mean_numpy", "cocoa_mean_reference", "cocoa_numpy", "cocoa_reference",
    "cocoa_scan", "cocoa_scan_numpy", "num_answer_sets", "num_answer_sets_mean",
    "num_answer_sets_mean_numpy", "num_answer_sets_mean_reference", "num_answer_sets_numpy",
    "num_answer_sets_reference", "round_answer_sets"
]

#: Outputs of :func:`answer_sets_scan`: per trajectory ``[N]`` (the registry's columns) and
#: per round ``[T, N]`` (``round_entropy``, ``round_sets``: NaN in rounds not executed).
SET_FIELDS = ("answer_entropy", "answer_entropy_mean", "num_answer_sets",
              "num_answer_sets_mean", "n_rounds", "round_entropy", "round_sets")
#: Outputs of :func:`cocoa_scan`: ``[N]`` and per round ``round_cocoa [T, N]`` (NaN in a
#: round without a valid node).
COCOA_FIELDS = ("cocoa", "cocoa_mean", "n_rounds", "round_cocoa")


def _check_fields(fields: tuple[str, ...], known: tuple[str, ...], what: str) -> None:
    unknown = sorted(set(fields) - set(known))
    if unknown:
        raise ValueError(f"unknown {what} output fields {unknown}; known: {', '.join(known)}")


# ----------------------------------------------------------------------------------------
# One round, vectorized (JAX and NumPy alike: ``xp``)


def _class_votes(cls, xp):
    """``[N, A]`` int32: the votes of each slot's class in its round (0 where the slot did
    not answer); ``cls [N, A]`` int, ``-1``: no answer."""
    answered = cls >= 0
    same = (cls[:, :, None] == cls[:, None, :]) & answered[:, None, :]
    return xp.where(answered, xp.sum(same, axis=2, dtype=xp.int32), 0)


def _size_histogram(votes, xp):
    """``[N, A]`` int32: column ``m - 1`` counts the answering slots whose class has ``m``
    votes (``S_m``, ``m = 1..A``)."""
    sizes = xp.arange(1, votes.shape[1] + 1, dtype=xp.int32)
    return xp.sum(votes[:, :, None] == sizes[None, None, :], axis=1, dtype=xp.int32)


def _entropy_sum(hist: list, n, silent, xp):
    """``sum_m (S_m / n) ln(n / m)`` of one round, ``[N]``: ``hist`` the ``[N]`` columns
    ``S_1 .. S_A`` (int), ``n`` the team and ``silent`` its members without an answer (each a
    class of one, counted into ``S_1``), both ``[N]`` float.

    Every term is ``S_m ln(n / m) / n`` on ``[N]`` vectors, summed by
    :func:`~kernels.baselines.tree_sum`'s fixed tree (zero terms past the largest class add
    +-0.0: the slot padding changes no bit). Both JAX paths (unrolled and array code) and
    every slot width build these same terms, so XLA compiles the same arithmetic for them:
    no sum adds a product (XLA on CPU may fuse a product into the addition it feeds, one
    rounding less, depending on the vector shape) and nothing is divided by a broadcast
    array (which XLA turns into a product with the reciprocal)."""
    dtype = n.dtype
    terms = [((h.astype(dtype) + silent) if m == 1 else h.astype(dtype))
             * xp.log(n / dtype.type(m)) / n for m, h in enumerate(hist, 1)]
    return tree_sum(terms)


def _entropy_and_sets(hist, team, xp):
    """``(entropy, sets)`` of one round, each ``[N]`` in ``team``'s float dtype, from the
    class-size histogram ``hist [N, A]`` (:func:`_size_histogram`)."""
    dtype = team.dtype
    sizes = xp.arange(1, hist.shape[1] + 1, dtype=xp.int32)
    voters = xp.sum(hist, axis=1, dtype=xp.int32).astype(dtype)  # integers: exact
    n = xp.maximum(team, voters)
    silent = n - voters  # team members without an answer, each a class of its own
    entropy = _entropy_sum([hist[:, m] for m in range(hist.shape[1])], n, silent, xp)
    sets = xp.sum(hist // sizes[None, :], axis=1, dtype=xp.int32)  # S_m is a multiple of m
    return entropy, sets.astype(dtype) + silent


def round_answer_sets(answer_class, n_agents, xp=jnp):
    """``(entropy, sets)`` of one round of every trajectory, each ``[N]`` in the float
    dtype of ``n_agents``: ``answer_class [N, A]`` int (``-1``: no answer), ``n_agents [N]``
    float (the team). ``xp``: ``jnp`` or ``np``. The module docstring has the definitions."""
    return _entropy_and_sets(_size_histogram(_class_votes(answer_class, xp), xp), n_agents, xp)


#: Teams up to this many slots run the slot loops unrolled into ``[N]`` vector code (one
#: fused pass per round), larger ones ``[N, A, A]`` array code for the votes; the same
#: formulas, terms and sum order, so the same bits (module docstring). Measured (2 loaded
#: CPU cores, 1e6 trajectories, float32, entropy + sets, T = 3):
#: A = 4 slots 77 ms unrolled against 656 ms array code, A = 8 211 ms against 1.19 s; at
#: A = 16 unrolled code compiled in 19 s against 5 s for array code and ran no faster
#: (1.7 s against 1.9 s), as for BCCS (``kernels.bccs.UNROLL_SLOTS``).
UNROLL_SLOTS = 8


def _votes_unrolled(cls) -> list:
    """Per slot ``[N]`` int32: the votes of its class (0 where it did not answer), from
    ``A (A - 1) / 2`` pair compares."""
    a_max = cls.shape[1]
    c = [cls[:, i] for i in range(a_max)]
    answered = [x >= 0 for x in c]
    votes = [x.astype(jnp.int32) for x in answered]
    for i in range(a_max):
        for j in range(i + 1, a_max):
            same = ((c[i] == c[j]) & answered[i]).astype(jnp.int32)
            votes[i] = votes[i] + same
            votes[j] = votes[j] + same
    return [jnp.where(answered[i], votes[i], 0) for i in range(a_max)]


def _round_sets_jax(cls, team):
    """``(entropy, sets)`` ``[N]`` of one round of ``cls [N, A]`` (JAX; unrolled for small
    teams, :func:`_entropy_and_sets` otherwise)."""
    a_max = cls.shape[1]
    if a_max > UNROLL_SLOTS:
        return round_answer_sets(cls, team, jnp)
    dtype = team.dtype
    votes = _votes_unrolled(cls)
    hist = [sum((v == m).astype(jnp.int32) for v in votes) for m in range(1, a_max + 1)]
    voters = sum(hist).astype(dtype)
    n = jnp.maximum(team, voters)
    silent = n - voters
    sets = sum(hist[m - 1] // m for m in range(1, a_max + 1))
    return _entropy_sum(hist, n, silent, jnp), sets.astype(dtype) + silent


def _round_cocoa_jax(cls, conf, valid, team):
    """``(value, n_valid)`` ``[N]`` of one round: CoCoA's mean of ``u_i d_i`` over the valid
    nodes (module docstring) and their number (float)."""
    dtype = team.dtype
    if cls.shape[1] > UNROLL_SLOTS:
        votes = _class_votes(cls, jnp)
    else:
        votes = jnp.stack(_votes_unrolled(cls), axis=1)
    voters = jnp.sum(votes > 0, axis=1, dtype=jnp.int32).astype(dtype)
    others = jnp.maximum(team, voters) - 1
    alone = others <= 0
    safe = jnp.where(alone, jnp.ones_like(others), others)
    agree = jnp.maximum(votes - 1, 0).astype(dtype)
    # u_i d_i as u_i / (1 / d_i): a quotient, which XLA cannot fuse into the sum's additions
    # (a product it may, depending on the slot width and batch shape: module docstring);
    # 1 / d_i = others / (others - agree) is inf where every other member agrees (d_i = 0)
    ratio = jnp.where(alone[:, None], dtype.type(1), safe[:, None] / (others[:, None] - agree))
    n_valid = jnp.sum(valid, axis=1, dtype=jnp.int32).astype(dtype)
    total = slot_sum(-conf / ratio, valid)
    return total / jnp.where(n_valid > 0, n_valid, 1), n_valid


# ----------------------------------------------------------------------------------------
# JAX kernels


class SetCarry(NamedTuple):
    """State after round ``t``, each ``[N]`` in the float dtype: the last executed round's
    entropy and sets (NaN before any), their sums over executed rounds (in round order) and
    the number of executed rounds."""

    last_entropy: jax.Array
    sum_entropy: jax.Array
    last_sets: jax.Array
    sum_sets: jax.Array
    n_rounds: jax.Array


def _set_step(team, carry: SetCarry, inputs):
    cls, valid = inputs
    entropy, sets = _round_sets_jax(cls, team)
    carry = SetCarry(
        jnp.where(valid, entropy, carry.last_entropy),
        carry.sum_entropy + jnp.where(valid, entropy, 0),
        jnp.where(valid, sets, carry.last_sets),
        carry.sum_sets + jnp.where(valid, sets, 0),
        carry.n_rounds + valid.astype(team.dtype),
    )
    return carry, (entropy, sets)


def _set_summaries(carry) -> dict:
    return {
        "answer_entropy": carry.last_entropy,
        "answer_entropy_mean": carry.sum_entropy / carry.n_rounds,  # NaN without a round
        "num_answer_sets": carry.last_sets,
        "num_answer_sets_mean": carry.sum_sets / carry.n_rounds,
        "n_rounds": carry.n_rounds,
    }


@partial(jax.jit, static_argnames=("fields", "unroll"))
def answer_sets_scan(
    answer_class: jax.Array,
    n_agents: jax.Array,
    round_mask: jax.Array,
    *,
    fields: tuple[str, ...] = ("answer_entropy",),
    unroll: int | bool | None = None,
) -> dict[str, jax.Array]:
    """Answer entropy and number of answer sets over a padded batch, in one pass over the
    rounds.

    Args:
      answer_class: ``[T, N, A]`` int, the vote class of every node's answer (``-1``: no
        answer; only equality within a round matters).
      n_agents: ``[N]`` float, the initial team size (>= 1); its dtype is the outputs'.
      round_mask: ``[T, N]`` bool, true where the round executed.
      fields: outputs (static), names from :data:`SET_FIELDS`.
      unroll: ``lax.scan`` unroll factor (static; the numbers are the same);
        ``None``: :func:`~kernels.baselines.default_unroll`.

    Returns:
      dict name -> ``[N]`` (or ``[T, N]`` for the per-round fields) in ``n_agents``' dtype.
    """
    _check_fields(fields, SET_FIELDS, "answer-set")
    team = jnp.asarray(n_agents)
    if not jnp.issubdtype(team.dtype, jnp.floating):
        team = team.astype(jnp.result_type(float))
    mask = round_mask.astype(bool)
    dtype = team.dtype
    zero = jnp.zeros_like(mask[0], dtype)  # carries the input's sharding (shard_map)
    init = SetCarry(zero + jnp.nan, zero, zero + jnp.nan, zero, zero)
    t_max = answer_class.shape[0]
    carry, (entropy, sets) = lax.scan(
        partial(_set_step, team), init, (answer_class, mask),
        unroll=default_unroll(t_max) if unroll is None else unroll)
    result = _set_summaries(carry)
    if "round_entropy" in fields or "round_sets" in fields:
        result["round_entropy"] = jnp.where(mask, entropy, jnp.nan)
        result["round_sets"] = jnp.where(mask, sets, jnp.nan)
    return {name: result[name] for name in fields}


class CocoaCarry(NamedTuple):
    """State after round ``t``, each ``[N]`` in the float dtype: the last value (NaN before
    any round with a valid node), the sum of the values in round order and their count."""

    last: jax.Array
    total: jax.Array
    n_rounds: jax.Array


def _cocoa_step(team, carry: CocoaCarry, inputs):
    conf, cls, valid = inputs
    value, n_valid = _round_cocoa_jax(cls, conf.astype(team.dtype), valid, team)
    has = n_valid > 0
    carry = CocoaCarry(jnp.where(has, value, carry.last),
                       carry.total + jnp.where(has, value, 0),
                       carry.n_rounds + has.astype(team.dtype))
    return carry, jnp.where(has, value, jnp.nan)


@partial(jax.jit, static_argnames=("fields", "unroll"))
def cocoa_scan(
    node_confidence: jax.Array,
    answer_class: jax.Array,
    n_agents: jax.Array,
    node_mask: jax.Array,
    *,
    fields: tuple[str, ...] = ("cocoa",),
    unroll: int | bool | None = None,
) -> dict[str, jax.Array]:
    """CoCoA over a padded batch, in one pass over the rounds.

    Args:
      node_confidence: ``[T, N, A]`` float, the node confidence ``c <= 0`` (``u = -c``).
      answer_class: ``[T, N, A]`` int, the vote classes (``-1``: no answer).
      n_agents: ``[N]`` float, the team size (>= 1).
      node_mask: ``[T, N, A]`` bool, the nodes with a confidence.
      fields: outputs (static), names from :data:`COCOA_FIELDS`.
      unroll: as :func:`answer_sets_scan`'s.

    Returns:
      dict name -> ``[N]`` (``round_cocoa``: ``[T, N]``) in ``node_confidence``'s dtype.
    """
    _check_fields(fields, COCOA_FIELDS, "CoCoA")
    dtype = node_confidence.dtype
    team = jnp.asarray(n_agents).astype(dtype)
    mask = node_mask.astype(bool)
    zero = jnp.zeros_like(mask[0, :, 0], dtype)
    t_max = node_confidence.shape[0]
    carry, per_round = lax.scan(
        partial(_cocoa_step, team), CocoaCarry(zero + jnp.nan, zero, zero),
        (node_confidence, answer_class, mask),
        unroll=default_unroll(t_max) if unroll is None else unroll)
    result = {"cocoa": carry.last, "cocoa_mean": carry.total / carry.n_rounds,
              "n_rounds": carry.n_rounds, "round_cocoa": per_round}
    return {name: result[name] for name in fields}


# ----------------------------------------------------------------------------------------
# NumPy twins: the plainest loop over rounds (and over slot pairs for the votes)


def _votes_numpy(cls: np.ndarray) -> np.ndarray:
    """:func:`_class_votes` as loops over slot pairs."""
    n, a_max = cls.shape
    votes = np.zeros((n, a_max), np.int32)
    for i in range(a_max):
        for j in range(a_max):
            votes[:, i] += (cls[:, j] >= 0) & (cls[:, j] == cls[:, i])
    return np.where(cls >= 0, votes, 0)


def answer_sets_scan_numpy(
    answer_class: np.ndarray,
    n_agents: np.ndarray,
    round_mask: np.ndarray,
    *,
    fields: tuple[str, ...] = ("answer_entropy",),
) -> dict[str, np.ndarray]:
    """NumPy twin of :func:`answer_sets_scan`: the same arguments, shapes and outputs."""
    _check_fields(fields, SET_FIELDS, "answer-set")
    cls = np.asarray(answer_class)
    team = np.asarray(n_agents)
    if not np.issubdtype(team.dtype, np.floating):
        team = team.astype(np.float64)
    dtype = team.dtype
    round_mask = np.asarray(round_mask, bool)
    t_max, n, _ = cls.shape
    last_h = np.full(n, np.nan, dtype)
    last_k = np.full(n, np.nan, dtype)
    sum_h = np.zeros(n, dtype)
    sum_k = np.zeros(n, dtype)
    n_rounds = np.zeros(n, dtype)
    trace_h = np.full((t_max, n), np.nan, dtype)
    trace_k = np.full((t_max, n), np.nan, dtype)
    with np.errstate(invalid="ignore", divide="ignore"):
        for t in range(t_max):
            valid = round_mask[t]
            hist = _size_histogram(_votes_numpy(cls[t]), np)
            h, k = _entropy_and_sets(hist, team, np)
            last_h = np.where(valid, h, last_h)
            last_k = np.where(valid, k, last_k)
            sum_h = (sum_h + np.where(valid, h, 0)).astype(dtype)
            sum_k = (sum_k + np.where(valid, k, 0)).astype(dtype)
            n_rounds = (n_rounds + valid).astype(dtype)
            trace_h[t] = np.where(valid, h, np.nan)
            trace_k[t] = np.where(valid, k, np.nan)
        result = _set_summaries(SetCarry(last_h, sum_h, last_k, sum_k, n_rounds))
    result = {k: np.asarray(v, dtype) for k, v in result.items()}
    result.update(round_entropy=trace_h, round_sets=trace_k)
    return {name: result[name] for name in fields}


def cocoa_scan_numpy(
    node_confidence: np.ndarray,
    answer_class: np.ndarray,
    n_agents: np.ndarray,
    node_mask: np.ndarray,
    *,
    fields: tuple[str, ...] = ("cocoa",),
) -> dict[str, np.ndarray]:
    """NumPy twin of :func:`cocoa_scan`: the same arguments, shapes and outputs."""
    _check_fields(fields, COCOA_FIELDS, "CoCoA")
    conf = np.asarray(node_confidence)
    dtype = conf.dtype
    cls = np.asarray(answer_class)
    mask = np.asarray(node_mask, bool)
    team = np.broadcast_to(np.asarray(n_agents, dtype), (conf.shape[1],))
    t_max, n, _ = conf.shape
    last = np.full(n, np.nan, dtype)
    total = np.zeros(n, dtype)
    n_rounds = np.zeros(n, dtype)
    trace = np.full((t_max, n), np.nan, dtype)
    with np.errstate(invalid="ignore", divide="ignore"):
        for t in range(t_max):
            votes = _votes_numpy(cls[t])
            voters = (votes > 0).sum(axis=1).astype(dtype)
            team_t = np.maximum(team, voters)
            others = team_t - 1
            agree = np.maximum(votes - 1, 0).astype(dtype)
            ratio = np.where(others[:, None] > 0, np.where(others > 0, others, 1)[:, None]
                             / (others[:, None] - agree), 1).astype(dtype)  # 1 / d
            terms = (-conf[t] / ratio).astype(dtype)
            n_valid = mask[t].sum(axis=1).astype(dtype)
            has = n_valid > 0
            value = (slot_sum(terms, mask[t], np) / np.where(has, n_valid, 1)).astype(dtype)
            last = np.where(has, value, last)
            total = (total + np.where(has, value, 0)).astype(dtype)
            n_rounds = (n_rounds + has).astype(dtype)
            trace[t] = np.where(has, value, np.nan)
        mean = (total / n_rounds).astype(dtype)
    result = {"cocoa": last, "cocoa_mean": mean, "n_rounds": n_rounds, "round_cocoa": trace}
    return {name: result[name] for name in fields}


# ----------------------------------------------------------------------------------------
# The registry's kernels and twins: ``(inputs..., masks)`` -> ``[N]``


def _set_kernels(name: str):
    def kernel(answer_class, n_agents, round_mask):
        return answer_sets_scan(answer_class, n_agents, round_mask, fields=(name,))[name]

    def twin(answer_class, n_agents, round_mask):
        return answer_sets_scan_numpy(answer_class, n_agents, round_mask,
                                      fields=(name,))[name]

    kernel.__name__, twin.__name__ = name, f"{name}_numpy"
    kernel.__doc__ = (f"``[N]`` {name} of ``answer_class [T, N, A]``, ``n_agents [N]`` and "
                      "``round_mask [T, N]`` (module docstring); float dtype of n_agents.")
    twin.__doc__ = f"NumPy twin of :func:`{name}`."
    return jax.jit(kernel), twin


def _cocoa_kernels(name: str):
    def kernel(node_confidence, answer_class, n_agents, node_mask):
        return cocoa_scan(node_confidence, answer_class, n_agents, node_mask,
                          fields=(name,))[name]

    def twin(node_confidence, answer_class, n_agents, node_mask):
        return cocoa_scan_numpy(node_confidence, answer_class, n_agents, node_mask,
                                fields=(name,))[name]

    kernel.__name__, twin.__name__ = name, f"{name}_numpy"
    kernel.__doc__ = (f"``[N]`` {name} of ``node_confidence [T, N, A]``, ``answer_class``, "
                      "``n_agents [N]`` and ``node_mask [T, N, A]`` (module docstring).")
    twin.__doc__ = f"NumPy twin of :func:`{name}`."
    return jax.jit(kernel), twin


answer_entropy, answer_entropy_numpy = _set_kernels("answer_entropy")
answer_entropy_mean, answer_entropy_mean_numpy = _set_kernels("answer_entropy_mean")
num_answer_sets, num_answer_sets_numpy = _set_kernels("num_answer_sets")
num_answer_sets_mean, num_answer_sets_mean_numpy = _set_kernels("num_answer_sets_mean")
cocoa, cocoa_numpy = _cocoa_kernels("cocoa")
cocoa_mean, cocoa_mean_numpy = _cocoa_kernels("cocoa_mean")


# ----------------------------------------------------------------------------------------
# Per-trajectory references (one trajectory, the batch axis removed; plain Python)


def _round_classes(classes, team: float) -> tuple[list[int], float]:
    """The class sizes of one round's answers and the team ``n = max(team, answers)``."""
    votes: dict[int, int] = {}
    for c in classes:
        if int(c) >= 0:
            votes[int(c)] = votes.get(int(c), 0) + 1
    sizes = list(votes.values())
    return sizes, max(float(team), float(sum(sizes)))


def _round_entropy_sets(classes, team: float) -> tuple[float, float]:
    sizes, n = _round_classes(classes, team)
    silent = n - sum(sizes)
    terms = [c / n * math.log(n / c) for c in sizes] + [silent / n * math.log(n)]
    return math.fsum(terms), len(sizes) + silent


def _set_reference(name: str):
    index = 0 if name.startswith("answer_entropy") else 1
    mean = name.endswith("_mean")

    def reference(answer_class, n_agents, round_mask) -> float:
        values = [_round_entropy_sets(answer_class[t], float(n_agents))[index]
                  for t in range(len(round_mask)) if round_mask[t]]
        if not values:
            return math.nan
        return math.fsum(values) / len(values) if mean else values[-1]

    reference.__name__ = f"{name}_reference"
    reference.__doc__ = f":func:`{name}` of one trajectory in plain Python."
    return reference


def _round_cocoa_reference(conf, classes, valid, team: float) -> float | None:
    nodes = [a for a in range(len(valid)) if valid[a]]
    if not nodes:
        return None
    n = _round_classes(classes, team)[1]
    values = []
    for i in nodes:
        ci = int(classes[i])
        same = sum(1 for j in range(len(classes))
                   if j != i and ci >= 0 and int(classes[j]) == ci)
        dissimilarity = (n - 1 - same) / (n - 1) if n > 1 else 1.0
        values.append(-float(conf[i]) * dissimilarity)
    return math.fsum(values) / len(values)


def _cocoa_reference(name: str):
    mean = name.endswith("_mean")

    def reference(node_confidence, answer_class, n_agents, node_mask) -> float:
        values = [_round_cocoa_reference(node_confidence[t], answer_class[t], node_mask[t],
                                         float(n_agents)) for t in range(len(node_mask))]
        values = [v for v in values if v is not None]
        if not values:
            return math.nan
        return math.fsum(values) / len(values) if mean else values[-1]

    reference.__name__ = f"{name}_reference"
    reference.__doc__ = f":func:`{name}` of one trajectory in plain Python."
    return reference


answer_entropy_reference = _set_reference("answer_entropy")
answer_entropy_mean_reference = _set_reference("answer_entropy_mean")
num_answer_sets_reference = _set_reference("num_answer_sets")
num_answer_sets_mean_reference = _set_reference("num_answer_sets_mean")
cocoa_reference = _cocoa_reference("cocoa")
cocoa_mean_reference = _cocoa_reference("cocoa_mean")
