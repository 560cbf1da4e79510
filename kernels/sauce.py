"""SAUCE: a scalar lambda-Kalman filter over per-round agreement and token entropy.

Three implementations of the same numbers, side by side:

* :func:`sauce_scan` -- the jitted JAX kernel, a ``lax.scan`` over rounds of padded,
  time-major arrays ``[T, N]`` (rounds x trajectories); :func:`sauce` is its score with the
  registry's signature.
* :func:`sauce_scan_numpy` -- its NumPy twin, the plainest loop over rounds
  (:func:`sauce_numpy`).
* :func:`lambda_kalman_trajectory` / :func:`sauce_reference` -- one trajectory in plain
  Python floats (the reference, and the math of ``fastuq.lambda_kalman_forward``).

For every trajectory ``n`` and executed round ``t`` (``round_mask[t, n]`` true)::

    R_t     = max(token_entropy[t, n], ENTROPY_FLOOR)
    mu_pred = lam * mu
    P       = lam**2 * sigma2 + q                      (predicted variance)
    S_t     = P + R_t + GAIN_EPS                       (innovation variance, gain denominator)
    K_t     = P / S_t                                  (gain)
    nu_t    = agreement[t, n] - mu_pred                (innovation)
    mu      = mu_pred + K_t * nu_t
    sigma2  = max(P * (R_t + GAIN_EPS) / S_t, VARIANCE_FLOOR)   (= (1 - K_t) * P)

starting from ``(mu, sigma2) = (mu_0, sigma2_0)``. A masked round leaves the filter
untouched and does not enter any mean. The uncertainty score is
``-mean_t mu_t`` over executed rounds (higher = less likely correct).

The posterior variance is computed as ``P * (R_t + GAIN_EPS) / S_t``, which equals the
textbook ``(1 - K_t) * P`` but cannot cancel: when ``P >> R_t`` (q = 0, zero entropy)
``1 - K_t`` loses every digit in float32 (the score came out -1.0 where float64 gives
-0.653). Every factor here is positive, so float32 keeps its relative precision.

Inputs are taken as they are (no validation, no flooring of the agreement): the public
entry points in ``fastuq`` validate. Values in masked slots may be anything, NaN included.
"""

from __future__ import annotations

from functools import partial
from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax

from ._compile import kernel_jit
from .constants import ENTROPY_FLOOR, GAIN_EPS, VARIANCE_FLOOR

#: Names of the per-trajectory outputs, in order, of both implementations.
SUMMARY_FIELDS = ("score", "final_mu", "final_sigma2", "avg_mu", "avg_sigma2", "n_rounds")
#: Names of the per-round trace outputs ``[T, N]`` (NaN in masked rounds).
TRACE_FIELDS = ("mu", "sigma2", "K_t", "S_t", "nu_t")
#: The per-round score ``[T, N]``: at an executed round ``t``, ``-mean mu`` over the executed
#: rounds ``0..t`` (the ``score`` of the trajectory cut after round ``t``; at the last
#: executed round, ``score`` itself), NaN in masked rounds. Computed in the same scan.
PER_ROUND = "per_round"


class SauceParams(NamedTuple):
    """Filter parameters; each a scalar or an array that broadcasts against ``[N]``.

    lam:      forgetting factor in [0, 1]; ``mu_pred = lam * mu``, ``P = lam**2 sigma2 + q``.
    q:        process noise >= 0, added to the predicted variance each round.
    sigma2_0: prior variance > 0 before round 0.
    mu_0:     prior mean before round 0.
    """

    lam: jax.Array | np.ndarray | float
    q: jax.Array | np.ndarray | float
    sigma2_0: jax.Array | np.ndarray | float
    mu_0: jax.Array | np.ndarray | float


def _step(params: SauceParams, carry, inputs):
    """One round for all trajectories: ``carry`` = (mu, sigma2, sum_mu, sum_sigma2, count)."""
    mu, sigma2, sum_mu, sum_s2, count = carry
    m_t, h_t, valid = inputs
    r_t = jnp.maximum(h_t, ENTROPY_FLOOR)
    mu_pred = params.lam * mu
    p_minus = params.lam * params.lam * sigma2 + params.q
    r_eff = r_t + GAIN_EPS
    s_t = p_minus + r_eff
    k_t = p_minus / s_t
    nu_t = m_t - mu_pred
    mu_new = mu_pred + k_t * nu_t
    # = (1 - K) P without cancellation. Written with its own division: measured 2x faster
    # at T = 3 than k_t * r_eff (which shares k_t with the mean update) on CPU.
    s2_new = jnp.maximum(p_minus * r_eff / s_t, VARIANCE_FLOOR)
    mu = jnp.where(valid, mu_new, mu)
    sigma2 = jnp.where(valid, s2_new, sigma2)
    zero = jnp.zeros_like(mu_new)
    carry = (
        mu,
        sigma2,
        sum_mu + jnp.where(valid, mu_new, zero),
        sum_s2 + jnp.where(valid, s2_new, zero),
        count + valid.astype(count.dtype),
    )
    # the score of rounds 0..t: _summaries' -(sum_mu / count) on this round's carry (the
    # same operations, so at the last executed round the same bits as the score)
    return carry, (mu_new, s2_new, k_t, s_t, nu_t, -(carry[2] / carry[4]))


def _step_summary(params: SauceParams, carry, inputs):
    """:func:`_step` without per-round outputs (so no ``[T, N]`` trace is written)."""
    return _step(params, carry, inputs)[0], None


def _summaries(carry):
    mu, sigma2, sum_mu, sum_s2, count = carry
    avg_mu = sum_mu / count
    # Without executed rounds avg_mu is 0/0, a NaN whose sign bit depends on how the
    # compiler folds the negation (x86 gives -NaN for 0/0); the score's NaN is pinned to +NaN,
    # the bits the kernel always produced at XLA's default vector width, so that the
    # compile options cannot change them.
    score = jnp.where(count > 0, -avg_mu, jnp.nan) if isinstance(count, jax.Array) else \
        np.where(count > 0, -avg_mu, np.nan).astype(avg_mu.dtype)
    return {
        "score": score,
        "final_mu": mu,
        "final_sigma2": sigma2,
        "avg_mu": avg_mu,
        "avg_sigma2": sum_s2 / count,
        "n_rounds": count,
    }


def _default_unroll(t_max: int, with_trace: bool = False) -> int | bool:
    # Fully unrolled, the rounds fuse into one loop over the batch (one XLA fusion at any T up
    # to 40 at least; measured 4x faster than a rolled loop at T = 3 on CPU), which keeps
    # every carry in registers. A rolled loop writes and reads its five [N] carries each
    # round. Score only, with the 512-bit vector option (XLA_COMPILER_OPTIONS), float32,
    # N = 2^20, one device, 2 loaded cores (load 2.0-2.4), median ms rolled / full:
    # T = 17: 28.0 / 7.2; T = 20: 26.8 / 12.6; T = 24: 34.2 / 17.2 and 39.5 / 16.0;
    # T = 28: 77 / 59; T = 32: 46.8 / 46.6 and 125 / 44; T = 40: 52 / 57 (256-bit);
    # T = 48: 60 / 70; T = 100: 138 / 810. Full unrolling compiles in 0.2 s up to T = 40.
    # (Before the variance update changed, the rolled loop won past 16 rounds.)
    # With per-round traces the limit stays at 16 rounds: there the two arrangements differ
    # in the last bit of some nu_t (a multiply-add contracted in one and not the other), and
    # the traces keep the bits they had; the summaries are the same bits either way (tested).
    return True if t_max <= (16 if with_trace else 32) else 1


def _select(result: dict, fields: tuple[str, ...]) -> dict:
    unknown = set(fields) - set(SUMMARY_FIELDS) - set(TRACE_FIELDS) - {PER_ROUND}
    if unknown:
        raise ValueError(f"unknown SAUCE output fields {sorted(unknown)}")
    return {name: result[name] for name in fields}


def _with_trace(fields: tuple[str, ...]) -> bool:
    """Whether the scan writes per-round outputs (a trace field or the per-round score)."""
    return any(name in TRACE_FIELDS or name == PER_ROUND for name in fields)


#: A cache-sized block of trajectories, for callers that ask for blocking (``block=BLOCK``).
BLOCK = 1 << 14


def _scan(agreement, token_entropy, round_mask, params: SauceParams, fields, unroll) -> dict:
    dtype = agreement.dtype
    zero = jnp.zeros_like(agreement[0])  # carries the input's sharding (works in shard_map)
    init = (zero + params.mu_0, zero + params.sigma2_0, zero, zero, zero)
    with_trace = _with_trace(fields)
    carry, outs = lax.scan(
        partial(_step if with_trace else _step_summary, params),
        init,
        (agreement, token_entropy.astype(dtype), round_mask),
        unroll=unroll,
    )
    result = _summaries(carry)
    if with_trace:
        nan = jnp.asarray(jnp.nan, dtype)
        for name, value in zip((*TRACE_FIELDS, PER_ROUND), outs, strict=True):
            if name in fields:
                result[name] = jnp.where(round_mask, value, nan)
    return _select(result, fields)


@kernel_jit(static_argnames=("fields", "unroll", "block"))
def sauce_scan(
    agreement: jax.Array,
    token_entropy: jax.Array,
    round_mask: jax.Array,
    params: SauceParams,
    *,
    fields: tuple[str, ...] = ("score",),
    unroll: int | bool | None = None,
    block: int | None = None,
) -> dict[str, jax.Array]:
    """SAUCE over a padded batch, jitted.

    Args:
      agreement: ``[T, N]`` float, majority margin M_t in [0, 1] per round.
      token_entropy: ``[T, N]`` float, mean token entropy (nats) per round, >= 0.
      round_mask: ``[T, N]`` bool, true where the round executed.
      params: :class:`SauceParams`, each leaf a scalar or broadcastable to ``[N]``.
      fields: which outputs to compute (static): names from ``SUMMARY_FIELDS`` (``[N]``),
        ``TRACE_FIELDS`` and ``PER_ROUND`` (``[T, N]``, NaN where the round is masked; the
        per-round score at the last executed round is ``score``'s bits). Only what is asked
        for is written, which matters at memory bandwidth.
      unroll: ``lax.scan`` unroll factor; ``None`` picks full unrolling for ``T <= 32``
        (``T <= 16`` with trace fields), else a rolled loop (bounded compile time for any
        ``T``).
      block: run the scan over blocks of this many trajectories in a ``fori_loop`` (``N``
        must be a multiple); ``None`` or ``0``: one pass over the whole batch (the default:
        the unrolled rounds already run as one fused loop that keeps every carry in
        registers; on CPU, blocks of 4,096-65,536 were 1.6-3x slower at T = 15 and no faster
        with a rolled scan at T = 40-100, see bench/README.md). ``unroll`` and ``block`` are
        compile-time choices only: the summaries are the same bits (the trace's ``nu_t``
        may differ in its last bit between a rolled and an unrolled scan). Under GSPMD
        sharding, call this per device (``jax.shard_map``) rather than with ``block``: a
        partitioned block loop is an order of magnitude slower.

    A plain jit (``kernels._compile.kernel_jit``): called on its own it compiles with XLA's
    defaults; inside a caller's jit (``vmap``, ``shard_map``) that jit's options apply.
    fastuq's engine compiles its top-level program with ``XLA_COMPILER_OPTIONS`` (512-bit
    vectors on CPU, the same bits, up to 1.7x faster at T = 15); so can a caller
    (``kernels._compile.top_level_jit``).

    Returns:
      dict name -> array in the input float dtype. ``n_rounds`` counts executed rounds;
      ``score`` and the means are NaN for a trajectory without executed rounds.
    """
    dtype = agreement.dtype
    t_max, n = agreement.shape
    params = SauceParams(*(jnp.asarray(p, dtype) for p in params))
    if unroll is None:
        unroll = _default_unroll(t_max, _with_trace(fields))
    if not block or block >= n:
        return _scan(agreement, token_entropy, round_mask, params, fields, unroll)
    if n % block:
        raise ValueError(f"block={block} does not divide the batch size {n}")
    params = SauceParams(*(jnp.broadcast_to(p, (n,)) if p.ndim else p for p in params))
    inputs = (agreement, token_entropy, round_mask)
    shapes = jax.eval_shape(
        lambda *x: _scan(*x, fields=fields, unroll=unroll),
        *(jax.ShapeDtypeStruct(x.shape[:-1] + (block,), x.dtype) for x in inputs),
        SauceParams(*(jax.ShapeDtypeStruct((block,) if p.ndim else (), p.dtype)
                      for p in params)),
    )
    outs = {k: jnp.zeros(v.shape[:-1] + (n,), v.dtype) for k, v in shapes.items()}

    def body(i, outs):
        start = i * block

        def cut(x):
            return lax.dynamic_slice_in_dim(x, start, block, axis=x.ndim - 1)

        res = _scan(*(cut(x) for x in inputs),
                    SauceParams(*(cut(p) if p.ndim else p for p in params)), fields, unroll)
        return {k: lax.dynamic_update_slice_in_dim(outs[k], res[k], start, axis=outs[k].ndim - 1)
                for k in outs}

    return lax.fori_loop(0, n // block, body, outs)


def sauce_scan_numpy(
    agreement: np.ndarray,
    token_entropy: np.ndarray,
    round_mask: np.ndarray,
    params: SauceParams,
    *,
    fields: tuple[str, ...] = ("score",),
) -> dict[str, np.ndarray]:
    """NumPy twin of :func:`sauce_scan`: the same arguments, shapes and outputs."""
    agreement = np.asarray(agreement)
    dtype = agreement.dtype
    token_entropy = np.asarray(token_entropy, dtype)
    round_mask = np.asarray(round_mask, bool)
    t_max, n = agreement.shape
    lam, q, sigma2_0, mu_0 = (np.asarray(p, dtype) for p in params)
    mu = np.zeros(n, dtype) + mu_0
    sigma2 = np.zeros(n, dtype) + sigma2_0
    sum_mu = np.zeros(n, dtype)
    sum_s2 = np.zeros(n, dtype)
    count = np.zeros(n, dtype)
    with_trace = _with_trace(fields)
    trace = {name: np.full((t_max, n), np.nan, dtype)
             for name in (*TRACE_FIELDS, PER_ROUND) if with_trace}
    with np.errstate(invalid="ignore", divide="ignore", over="ignore"):
        for t in range(t_max):
            valid = round_mask[t]
            r_t = np.maximum(token_entropy[t], dtype.type(ENTROPY_FLOOR))
            mu_pred = lam * mu
            p_minus = lam * lam * sigma2 + q
            r_eff = r_t + dtype.type(GAIN_EPS)
            s_t = p_minus + r_eff
            k_t = p_minus / s_t
            nu_t = agreement[t] - mu_pred
            mu_new = mu_pred + k_t * nu_t
            s2_new = np.maximum(p_minus * r_eff / s_t, dtype.type(VARIANCE_FLOOR))
            mu = np.where(valid, mu_new, mu)
            sigma2 = np.where(valid, s2_new, sigma2)
            sum_mu = sum_mu + np.where(valid, mu_new, 0)
            sum_s2 = sum_s2 + np.where(valid, s2_new, 0)
            count = count + valid
            if with_trace:
                outs = (mu_new, s2_new, k_t, s_t, nu_t, -(sum_mu / count))
                for name, value in zip((*TRACE_FIELDS, PER_ROUND), outs, strict=True):
                    trace[name][t] = np.where(valid, value, np.nan)
        result = _summaries((mu, sigma2, sum_mu, sum_s2, count))
    result.update(trace)
    return {k: np.asarray(v, dtype) for k, v in _select(result, fields).items()}


# ----------------------------------------------------------------------------------------
# The estimator: kernel, twin and per-trajectory reference with the registry's signature
# ``(values..., mask, *, parameters)`` (fastuq.engine.registry).


@kernel_jit
def sauce(
    agreement: jax.Array,
    token_entropy: jax.Array,
    round_mask: jax.Array,
    *,
    lam: jax.Array | float,
    q: jax.Array | float,
    sigma2_0: jax.Array | float,
    mu_0: jax.Array | float,
) -> jax.Array:
    """``[N]`` SAUCE uncertainty (``-mean_t mu_t``) of ``[T, N]`` inputs; each parameter a
    scalar or ``[N]``. :func:`sauce_scan` with ``fields=("score",)``."""
    params = SauceParams(lam, q, sigma2_0, mu_0)
    return sauce_scan(agreement, token_entropy, round_mask, params, fields=("score",))["score"]


def sauce_numpy(
    agreement: np.ndarray,
    token_entropy: np.ndarray,
    round_mask: np.ndarray,
    *,
    lam: np.ndarray | float,
    q: np.ndarray | float,
    sigma2_0: np.ndarray | float,
    mu_0: np.ndarray | float,
) -> np.ndarray:
    """NumPy twin of :func:`sauce`."""
    params = SauceParams(lam, q, sigma2_0, mu_0)
    return sauce_scan_numpy(agreement, token_entropy, round_mask, params,
                            fields=("score",))["score"]


@kernel_jit
def sauce_rounds(
    agreement: jax.Array,
    token_entropy: jax.Array,
    round_mask: jax.Array,
    *,
    lam: jax.Array | float,
    q: jax.Array | float,
    sigma2_0: jax.Array | float,
    mu_0: jax.Array | float,
) -> tuple[jax.Array, jax.Array]:
    """:func:`sauce` and its per-round score from the same scan: ``([N] score, [T, N]
    per-round score)``, row ``t`` the score of rounds ``0..t`` (NaN where round ``t`` is
    masked); at each trajectory's last executed round it is the score, bit for bit."""
    params = SauceParams(lam, q, sigma2_0, mu_0)
    out = sauce_scan(agreement, token_entropy, round_mask, params,
                     fields=("score", PER_ROUND))
    return out["score"], out[PER_ROUND]


def sauce_rounds_numpy(
    agreement: np.ndarray,
    token_entropy: np.ndarray,
    round_mask: np.ndarray,
    *,
    lam: np.ndarray | float,
    q: np.ndarray | float,
    sigma2_0: np.ndarray | float,
    mu_0: np.ndarray | float,
) -> tuple[np.ndarray, np.ndarray]:
    """NumPy twin of :func:`sauce_rounds`."""
    params = SauceParams(lam, q, sigma2_0, mu_0)
    out = sauce_scan_numpy(agreement, token_entropy, round_mask, params,
                           fields=("score", PER_ROUND))
    return out["score"], out[PER_ROUND]


def lambda_kalman_trajectory(
    observations, noises, *, lam: float, q: float, sigma2_0: float, mu_0: float
) -> dict:
    """The lambda-Kalman filter over one trajectory in plain Python floats: the reference of
    both implementations above (no validation, no flooring: ``noises`` are the R_t).

    Returns ``rounds`` (per round ``round_index``, ``mu``, ``sigma2``, ``S_t``, ``K_t``,
    ``nu_t``), ``final_mu``, ``final_sigma2``, ``avg_mu``, ``avg_sigma2`` (NaN without
    rounds)."""
    mu, sigma2 = mu_0, sigma2_0
    rounds = []
    for t, (m_t, r_t) in enumerate(zip(observations, noises, strict=True)):
        mu_pred = lam * mu
        p_minus = lam * lam * sigma2 + q
        r_eff = r_t + GAIN_EPS
        s_t = p_minus + r_eff
        k_t = p_minus / s_t
        nu_t = m_t - mu_pred
        mu = mu_pred + k_t * nu_t
        sigma2 = max(p_minus * r_eff / s_t, VARIANCE_FLOOR)  # (1 - K_t) P, no cancellation
        rounds.append(
            {"round_index": t, "mu": mu, "sigma2": sigma2, "S_t": s_t, "K_t": k_t, "nu_t": nu_t}
        )
    n = len(rounds)
    nan = float("nan")
    return {
        "rounds": rounds,
        "final_mu": mu,
        "final_sigma2": sigma2,
        "avg_mu": sum(r["mu"] for r in rounds) / n if n else nan,
        "avg_sigma2": sum(r["sigma2"] for r in rounds) / n if n else nan,
    }


def sauce_reference(
    agreement, token_entropy, round_mask, *, lam: float, q: float, sigma2_0: float,
    mu_0: float,
) -> float:
    """SAUCE of one trajectory (``[T]`` inputs, the batch axis removed) in plain Python
    floats: :func:`lambda_kalman_trajectory` over the executed rounds, R_t floored at
    ``ENTROPY_FLOOR``. NaN without executed rounds."""
    rounds = [t for t in range(len(round_mask)) if round_mask[t]]
    trace = lambda_kalman_trajectory(
        [float(agreement[t]) for t in rounds],
        [max(float(token_entropy[t]), ENTROPY_FLOOR) for t in rounds],
        lam=float(lam), q=float(q), sigma2_0=float(sigma2_0), mu_0=float(mu_0),
    )
    return -trace["avg_mu"]
