"""UAAD: uncertainty-aware adaptive debate -- step risk, risk routing and the consensus stop
rule (papers/uaad.md, as settled in DESIGN.md), replayed over saved debates.

The whole formula lives here; the engine only packs the raw signals
(:mod:`fastuq.signals.risk` checks and pads the step columns). Three implementations of the
same numbers, side by side:

* :func:`uaad` -- the jitted JAX kernel over padded, time-major arrays (rounds first, then
  trajectories), vectorized over trajectories, rounds and steps (the stop is the first round
  whose test holds: one ``argmax`` over all rounds, no loop);
* :func:`uaad_numpy` -- its NumPy twin, the plainest loop over rounds;
* :func:`uaad_reference` -- one trajectory in plain Python.

Inputs, per trajectory ``n`` and executed round ``t`` (``round_mask[t, n]``)::

    step_h, step_q, step_d [T, N, S]  the step signals h, q, d in [0, 1] of every reasoning
                                      step of every agent of the round (the corpus's
                                      ``[round][agent][step]`` columns, the agents' steps
                                      side by side on the slot axis S)
    step_mask [T, N, S]               the slots that hold a step
    agreement [T, N]                  the dominant share C_t (the modal answer's votes over
                                      the team size)
    n_agents [N]                      the initial team size: the M answers of round 0 are
                                      UAAD's M sampled chains
    round_entropy [T, N]              keywords, given (both) only for a corpus without step
    round_classes [T, N, A]           columns: the round's mean token entropy (nats) and
                                      its agents' answer classes (-1: no answer); then
                                      every round is one derived step

Step risk and round risk::

    u          = w_h h + w_q q + w_d d                       per step
    round_risk = max over the round's steps of u             (steps given)
    derived:     h = min(round_entropy / entropy_max, 1), q = 1 - agreement,
                 d = the share of pairs of the round's answering agents (round_classes >= 0)
                     whose classes differ (0 with fewer than two answers)

Per trajectory::

    risk       = round_risk[0]          the router sees the initial reasoning only
    max_risk   = max_t round_risk[t]    over executed rounds (what a full debate shows)
    tier       = 0 (low)    if risk < risk_low
                 1 (medium) elif risk < risk_high
                 2 (high)   otherwise
    cap        = min(floor(rounds_<tier>), last executed round)
    stop       = the first round t in 1..cap with C_t >= tau_c and |C_t - C_{t-1}| <= epsilon
                 (stable consensus), else cap (the round cap)
    calls      = M + N_<tier> * stop + 1        (Q = M + N R + 1: M initial answers, N agents
                                                  for R = stop debate rounds, one synthesis)

The change ``|C_t - C_{t-1}|`` is compared with ``epsilon`` plus :data:`MOVED_SLACK_ULPS`
ulps of slack (a change equal to epsilon in exact arithmetic stops). Rounds are indexed from
0 (round 0: the initial answers), so ``stop`` is also the number of debate rounds executed.
Everything is computed in the float dtype of ``agreement`` (the weights, ``tau_c``,
``epsilon`` and the tier bounds are rounded to it; agreements are fractions k / A, rounded
once). The three implementations evaluate ``u`` in the same order, but a compiler may fuse
a multiply-add, so risks agree to within a few ulps, not bit for bit; tier, stop and calls
then agree wherever the risk is not within those ulps of ``risk_low`` or ``risk_high``.
Outputs are ``[N]`` in the float dtype (tier, stop and calls hold small integers exactly).
Inputs are taken as they are (no validation: the engine's packed inputs are checked); values
in masked rounds and slots may be anything, NaN included.
"""

from __future__ import annotations

import math

import jax
import jax.numpy as jnp
import numpy as np

__all__ = ["DEFAULT_ENTROPY_MAX", "MOVED_SLACK_ULPS", "OUTPUTS", "TIERS", "pair_disagreement",
           "uaad", "uaad_numpy", "uaad_reference", "uaad_tier"]

#: Tier names by index (``uaad_tier`` output).
TIERS = ("low", "medium", "high")
#: Output columns of the registry entry, in the order the kernel returns them.
OUTPUTS = ("uaad", "uaad_max_risk", "uaad_tier", "uaad_stop", "uaad_calls")

#: ``|C_t - C_{t-1}| <= epsilon`` is tested with this many units of the dtype's machine epsilon
#: (ulps of 1) of slack: agreements are rounded fractions, so a change equal to epsilon in
#: exact arithmetic can exceed it by an ulp or two (0.8 - 0.75 is 0.05000000000000004 in
#: float64). Shares and epsilons are in [0, 1], so no true difference lies in the slack
#: unless it equals epsilon to within 1e-15 (float64) or 1e-6 (float32).
MOVED_SLACK_ULPS = 8

#: Default ``entropy_max``: ln 5, the largest entropy of a renormalised top-5 distribution
#: (top-5 is what most APIs return).
DEFAULT_ENTROPY_MAX = math.log(5.0)

_DEFAULTS = dict(w_h=0.45, w_q=0.35, w_d=0.20, entropy_max=DEFAULT_ENTROPY_MAX, tau_c=0.8,
                 epsilon=0.05, risk_low=0.35, risk_high=0.62, agents_low=1.0, rounds_low=1.0,
                 agents_medium=3.0, rounds_medium=1.0, agents_high=6.0, rounds_high=3.0)


def uaad_tier(risk, risk_low, risk_high, xp=np):
    """Tier index (0 low, 1 medium, 2 high) of a risk; ``xp``: ``np`` or ``jnp``."""
    return xp.where(risk < risk_low, 0, xp.where(risk < risk_high, 1, 2))


def _pick(tier, low, medium, high, xp):
    return xp.where(tier == 0, low, xp.where(tier == 1, medium, high))


def _trail(x, xp):
    """A scalar or ``[N]`` parameter shaped to broadcast against ``[..., N, S]``."""
    return xp.reshape(x, xp.shape(x) + (1,))


def _cast(params: dict, dt, xp) -> dict:
    return {k: xp.asarray(v, dt) for k, v in params.items()}


def _round_risk_jax(step_h, step_q, step_d, step_mask, agreement, round_entropy,
                    round_classes, p):
    """``[T, N]`` round risk (JAX), whole arrays at once."""
    if round_entropy is None:  # the steps given
        u = (_trail(p["w_h"], jnp) * step_h + _trail(p["w_q"], jnp) * step_q
             + _trail(p["w_d"], jnp) * step_d)
        return jnp.max(jnp.where(step_mask, u, -jnp.inf), axis=-1)
    h = jnp.minimum(round_entropy / p["entropy_max"], 1)
    q = 1 - agreement
    d = _pair_disagreement(round_classes, jnp).astype(agreement.dtype)
    return p["w_h"] * h + p["w_q"] * q + p["w_d"] * d


def _pair_disagreement(cls, xp):
    """``d [..]``: the share of pairs of answering slots (class >= 0) whose classes differ,
    over the last axis; 0 with fewer than two answers (array code, for the kernel: one pass
    per slot, so nothing larger than ``cls`` is allocated)."""
    votes = cls >= 0
    m = xp.sum(votes, axis=-1)
    same = xp.zeros(m.shape, m.dtype)  # ordered pairs of slots voting alike, self included
    for b in range(cls.shape[-1]):
        same = same + xp.sum(votes & votes[..., b:b + 1] & (cls == cls[..., b:b + 1]),
                             axis=-1)
    pairs = m * (m - 1) // 2
    same_pairs = (same - m) // 2  # without each slot with itself
    return xp.where(m >= 2, (pairs - same_pairs) / xp.maximum(pairs, 1), 0.0)


def pair_disagreement(answer_class) -> np.ndarray:
    """``d [T, N]`` float64 from ``answer_class [T, N, A]`` (-1: no vote): the share of pairs
    of a round's answering agents whose vote classes differ, 0 with fewer than two votes
    (UAAD's derived cross-agent divergence)."""
    return np.asarray(_pair_disagreement(np.asarray(answer_class), np), np.float64)


def _route(xp, risk_all, agreement, round_mask, n_agents, p):
    """Tiers, stop and calls from the round risk ``[T, N]`` (shared array code)."""
    dt = agreement.dtype
    n_t = agreement.shape[0]
    slack = xp.asarray(MOVED_SLACK_ULPS * np.finfo(dt).eps, dt)
    risk = risk_all[0]
    max_risk = xp.max(xp.where(round_mask, risk_all, xp.asarray(-np.inf, dt)), axis=0)
    tier = uaad_tier(risk, p["risk_low"], p["risk_high"], xp)
    last = xp.sum(round_mask, axis=0) - 1
    budget = _pick(tier, p["rounds_low"], p["rounds_medium"], p["rounds_high"], xp)
    cap = xp.minimum(xp.floor(budget), last.astype(dt))
    stop = cap
    if n_t > 1:  # every round at once (no loop over rounds: T may be large)
        c, prev = agreement[1:], agreement[:-1]
        t_idx = xp.arange(1, n_t, dtype=dt)[:, None]
        hit = (round_mask[1:] & (c >= p["tau_c"]) & (xp.abs(c - prev) <= p["epsilon"] + slack)
               & (t_idx <= cap[None, :]))
        first = (xp.argmax(hit, axis=0) + 1).astype(dt)  # the first hit (argmax: lowest t)
        stop = xp.where(xp.any(hit, axis=0), first, cap)
    agents = _pick(tier, p["agents_low"], p["agents_medium"], p["agents_high"], xp)
    calls = n_agents.astype(dt) + agents * stop + xp.asarray(1, dt)
    return {"uaad": risk, "uaad_max_risk": max_risk, "uaad_tier": tier.astype(dt),
            "uaad_stop": stop, "uaad_calls": calls}


@jax.jit
def uaad(step_h, step_q, step_d, step_mask, agreement, round_mask, n_agents, *,
         round_entropy=None, round_classes=None, w_h=0.45, w_q=0.35, w_d=0.20,
         entropy_max=DEFAULT_ENTROPY_MAX, tau_c=0.8, epsilon=0.05, risk_low=0.35,
         risk_high=0.62, agents_low=1.0, rounds_low=1.0, agents_medium=3.0, rounds_medium=1.0,
         agents_high=6.0, rounds_high=3.0) -> dict[str, jax.Array]:
    """UAAD step risk, routing and stopping (see the module docstring), JAX.

    Args:
      step_h, step_q, step_d: ``[T, N, S]`` float step signals; step_mask: ``[T, N, S]``
        bool (the slots holding a step; every executed round has one when the steps are
        used).
      agreement: ``[T, N]`` float dominant share; round_mask: ``[T, N]`` bool (every
        trajectory has round 0); n_agents: ``[N]`` team size.
      round_entropy, round_classes: ``[T, N]`` float and ``[T, N, A]`` int, given (both)
        where the corpus has no step columns: each round's risk is then derived from them
        and ``agreement``, and the step arrays are not read.
      w_h, w_q, w_d: step-risk weights; entropy_max: the entropy that maps to h = 1.
      tau_c, epsilon: the consensus rule (dominant share, change since the previous round).
      risk_low, risk_high: tier boundaries on the round-0 risk.
      agents_*, rounds_*: each tier's budget (agents N, debate rounds R).
      Each parameter a scalar or ``[N]``.

    Returns:
      ``{output: [N]}`` for :data:`OUTPUTS`.
    """
    if (round_entropy is None) != (round_classes is None):
        raise ValueError("uaad: round_entropy and round_classes are given together (the "
                         "derived risk), or neither (the step risk)")
    dt = agreement.dtype
    p = _cast(dict(w_h=w_h, w_q=w_q, w_d=w_d, entropy_max=entropy_max, tau_c=tau_c,
                   epsilon=epsilon, risk_low=risk_low, risk_high=risk_high,
                   agents_low=agents_low, rounds_low=rounds_low, agents_medium=agents_medium,
                   rounds_medium=rounds_medium, agents_high=agents_high,
                   rounds_high=rounds_high), dt, jnp)
    if round_entropy is None:
        step_h, step_q, step_d = (x.astype(dt) for x in (step_h, step_q, step_d))
    else:
        round_entropy = round_entropy.astype(dt)
    risk = _round_risk_jax(step_h, step_q, step_d, step_mask.astype(bool), agreement,
                           round_entropy, round_classes, p)
    return _route(jnp, risk, agreement, round_mask.astype(bool), n_agents, p)


def uaad_numpy(step_h, step_q, step_d, step_mask, agreement, round_mask, n_agents, *,
               round_entropy=None, round_classes=None, w_h=0.45, w_q=0.35, w_d=0.20,
               entropy_max=DEFAULT_ENTROPY_MAX, tau_c=0.8, epsilon=0.05, risk_low=0.35,
               risk_high=0.62, agents_low=1.0, rounds_low=1.0, agents_medium=3.0,
               rounds_medium=1.0, agents_high=6.0, rounds_high=3.0) -> dict[str, np.ndarray]:
    """NumPy twin of :func:`uaad` (same arguments, same numbers): the plainest loop over
    rounds, then over step slots (or answer slot pairs), vectorized over trajectories."""
    if (round_entropy is None) != (round_classes is None):
        raise ValueError("uaad: round_entropy and round_classes are given together (the "
                         "derived risk), or neither (the step risk)")
    agreement = np.asarray(agreement)
    dt = agreement.dtype
    round_mask = np.asarray(round_mask, bool)
    n_t, n = agreement.shape
    p = _cast(dict(w_h=w_h, w_q=w_q, w_d=w_d, entropy_max=entropy_max, tau_c=tau_c,
                   epsilon=epsilon, risk_low=risk_low, risk_high=risk_high,
                   agents_low=agents_low, rounds_low=rounds_low, agents_medium=agents_medium,
                   rounds_medium=rounds_medium, agents_high=agents_high,
                   rounds_high=rounds_high), dt, np)
    p = {k: np.broadcast_to(v, (n,)) for k, v in p.items()}
    risk = np.full((n_t, n), -np.inf, dt)
    for t in range(n_t):
        if round_entropy is None:
            h, q, d = (np.asarray(x, dt)[t] for x in (step_h, step_q, step_d))
            have = np.asarray(step_mask, bool)[t]
            for s in range(h.shape[1]):
                u = (p["w_h"] * h[:, s] + p["w_q"] * q[:, s] + p["w_d"] * d[:, s]).astype(dt)
                risk[t] = np.where(have[:, s] & (u > risk[t]), u, risk[t])
        else:
            h = np.minimum(np.asarray(round_entropy, dt)[t] / p["entropy_max"], 1).astype(dt)
            cls = np.asarray(round_classes)[t]
            m = (cls >= 0).sum(axis=1)
            differ = np.zeros(n, np.int64)
            for i in range(cls.shape[1]):
                for j in range(i + 1, cls.shape[1]):
                    differ += (cls[:, i] >= 0) & (cls[:, j] >= 0) & (cls[:, i] != cls[:, j])
            pairs = m * (m - 1) // 2
            with np.errstate(invalid="ignore", divide="ignore"):
                d = np.where(m >= 2, differ / np.maximum(pairs, 1), 0.0).astype(dt)
            q = (1 - agreement[t]).astype(dt)
            risk[t] = (p["w_h"] * h + p["w_q"] * q + p["w_d"] * d).astype(dt)
    # routing: a loop over rounds for the stop
    first = risk[0]
    max_risk = np.full(n, -np.inf, dt)
    last = np.full(n, -1, np.int64)
    for t in range(n_t):
        max_risk = np.where(round_mask[t] & (risk[t] > max_risk), risk[t], max_risk)
        last = np.where(round_mask[t], t, last)
    tier = uaad_tier(first, p["risk_low"], p["risk_high"])
    budget = _pick(tier, p["rounds_low"], p["rounds_medium"], p["rounds_high"], np)
    cap = np.minimum(np.floor(budget), last.astype(dt))
    stop = cap.copy()
    found = np.zeros(n, bool)
    slack = dt.type(MOVED_SLACK_ULPS * np.finfo(dt).eps)
    for t in range(1, n_t):
        c, prev = agreement[t], agreement[t - 1]
        with np.errstate(invalid="ignore"):
            hit = (~found & round_mask[t] & (t <= cap) & (c >= p["tau_c"])
                   & (np.abs(c - prev) <= p["epsilon"] + slack))
        stop = np.where(hit, dt.type(t), stop)
        found |= hit
    agents = _pick(tier, p["agents_low"], p["agents_medium"], p["agents_high"], np)
    calls = (np.asarray(n_agents).astype(dt) + agents * stop + dt.type(1)).astype(dt)
    return {"uaad": first, "uaad_max_risk": max_risk, "uaad_tier": tier.astype(dt),
            "uaad_stop": stop.astype(dt), "uaad_calls": calls}


def uaad_reference(step_h, step_q, step_d, step_mask, agreement, round_mask, n_agents, *,
                   round_entropy=None, round_classes=None, **params) -> dict[str, float]:
    """One trajectory (``step_* [T, S]``, ``agreement [T]``, ``round_mask [T]``, optionally
    ``round_entropy [T]`` and ``round_classes [T, A]``) in plain Python floats: the module
    docstring's definition, written out apart from the kernel. Unknown parameters raise
    TypeError."""
    unknown = set(params) - set(_DEFAULTS)
    if unknown:
        raise TypeError(f"unknown UAAD parameters {sorted(unknown)}")
    dt = np.asarray(agreement).dtype
    # parameters rounded to the inputs' dtype, as the kernel uses them
    p = {k: float(dt.type(v)) for k, v in {**_DEFAULTS, **params}.items()}
    rounds = [t for t in range(len(round_mask)) if round_mask[t]]

    def round_risk(t: int) -> float:
        if round_entropy is None:
            return max(p["w_h"] * float(step_h[t][s]) + p["w_q"] * float(step_q[t][s])
                       + p["w_d"] * float(step_d[t][s])
                       for s in range(len(step_mask[t])) if step_mask[t][s])
        h = min(float(round_entropy[t]) / p["entropy_max"], 1.0)
        q = 1.0 - float(agreement[t])
        votes = [int(c) for c in round_classes[t] if int(c) >= 0]
        pairs = [(i, j) for i in range(len(votes)) for j in range(i + 1, len(votes))]
        d = sum(votes[i] != votes[j] for i, j in pairs) / len(pairs) if pairs else 0.0
        return p["w_h"] * h + p["w_q"] * q + p["w_d"] * d

    risks = {t: round_risk(t) for t in rounds}
    risk = risks[0]
    max_risk = max(risks.values())
    if risk < p["risk_low"]:
        tier = "low"
    elif risk < p["risk_high"]:
        tier = "medium"
    else:
        tier = "high"
    cap = min(math.floor(p[f"rounds_{tier}"]), rounds[-1])
    stop = cap
    slack = MOVED_SLACK_ULPS * float(np.finfo(dt).eps)
    for t in rounds[1:]:
        if t > cap:
            break
        c, prev = float(agreement[t]), float(agreement[t - 1])
        if c >= p["tau_c"] and abs(c - prev) <= p["epsilon"] + slack:
            stop = t
            break
    return {"uaad": risk, "uaad_max_risk": max_risk, "uaad_tier": float(TIERS.index(tier)),
            "uaad_stop": float(stop),
            "uaad_calls": float(n_agents) + p[f"agents_{tier}"] * stop + 1.0}
