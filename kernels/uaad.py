"""UAAD: uncertainty-aware adaptive debate, risk routing and the consensus stop rule
(papers/uaad.md, as settled in DESIGN.md), replayed over saved debates.

Three implementations of the same numbers, side by side:

* :func:`uaad` -- the jitted JAX kernel over padded, time-major arrays ``[T, N]``
  (rounds x trajectories), vectorized over ``N`` and the rounds (the stop is the first round
  whose test holds: one ``argmax`` over all rounds, no loop);
* :func:`uaad_numpy` -- its NumPy twin, the same array code;
* :func:`uaad_reference` -- one trajectory in plain Python.

Inputs, per trajectory ``n`` and executed round ``t`` (``round_mask[t, n]``):

    round_risk[t, n]  max over the round's reasoning steps of the step risk
                      u = w_h h + w_q q + w_d d (built by the engine from the ``step_h``,
                      ``step_q``, ``step_d`` columns, or derived per round; the weights are
                      applied there, before the max)
    agreement[t, n]   the dominant share C_t (the modal answer's votes over the team size)
    n_agents[n]       the initial team size: the M answers of round 0 are UAAD's M sampled
                      chains

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
The comparisons are in the kernel's float dtype (agreements are fractions k / A, rounded
once; ``tau_c`` and ``epsilon`` are rounded to the same dtype).
Outputs are ``[N]`` in the float dtype (tier, stop and calls hold small integers exactly).
Inputs are taken as they are (no validation: the engine's packed inputs are checked); values
in masked rounds may be anything, NaN included.
"""

from __future__ import annotations

import math

import jax
import jax.numpy as jnp
import numpy as np

__all__ = ["MOVED_SLACK_ULPS", "OUTPUTS", "TIERS", "uaad", "uaad_numpy", "uaad_reference",
           "uaad_tier"]

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

_DEFAULTS = dict(tau_c=0.8, epsilon=0.05, risk_low=0.35, risk_high=0.62, agents_low=1.0,
                 rounds_low=1.0, agents_medium=3.0, rounds_medium=1.0, agents_high=6.0,
                 rounds_high=3.0)


def uaad_tier(risk, risk_low, risk_high, xp=np):
    """Tier index (0 low, 1 medium, 2 high) of a risk; ``xp``: ``np`` or ``jnp``."""
    return xp.where(risk < risk_low, 0, xp.where(risk < risk_high, 1, 2))


def _pick(tier, low, medium, high, xp):
    return xp.where(tier == 0, low, xp.where(tier == 1, medium, high))


def _uaad(xp, round_risk, agreement, round_mask, n_agents, tau_c, epsilon, risk_low, risk_high,
          agents_low, rounds_low, agents_medium, rounds_medium, agents_high, rounds_high):
    dt = round_risk.dtype
    n_t = round_risk.shape[0]
    tau_c, epsilon, risk_low, risk_high = (xp.asarray(v, dt) for v in
                                           (tau_c, epsilon, risk_low, risk_high))
    slack = xp.asarray(MOVED_SLACK_ULPS * np.finfo(dt).eps, dt)
    risk = round_risk[0]
    max_risk = xp.max(xp.where(round_mask, round_risk, xp.asarray(-np.inf, dt)), axis=0)
    tier = uaad_tier(risk, risk_low, risk_high, xp)
    last = xp.sum(round_mask, axis=0) - 1
    budget = _pick(tier, xp.asarray(rounds_low, dt), xp.asarray(rounds_medium, dt),
                   xp.asarray(rounds_high, dt), xp)
    cap = xp.minimum(xp.floor(budget), last.astype(dt))
    stop = cap
    if n_t > 1:  # every round at once (no loop over rounds: T may be large)
        c, prev = agreement[1:], agreement[:-1]
        t_idx = xp.arange(1, n_t, dtype=dt)[:, None]
        hit = (round_mask[1:] & (c >= tau_c) & (xp.abs(c - prev) <= epsilon + slack)
               & (t_idx <= cap[None, :]))
        first = (xp.argmax(hit, axis=0) + 1).astype(dt)  # the first hit (argmax: lowest t)
        stop = xp.where(xp.any(hit, axis=0), first, cap)
    agents = _pick(tier, xp.asarray(agents_low, dt), xp.asarray(agents_medium, dt),
                   xp.asarray(agents_high, dt), xp)
    calls = n_agents.astype(dt) + agents * stop + xp.asarray(1, dt)
    return {"uaad": risk, "uaad_max_risk": max_risk, "uaad_tier": tier.astype(dt),
            "uaad_stop": stop, "uaad_calls": calls}


@jax.jit
def uaad(round_risk, agreement, round_mask, n_agents, *, tau_c=0.8, epsilon=0.05,
         risk_low=0.35, risk_high=0.62, agents_low=1.0, rounds_low=1.0, agents_medium=3.0,
         rounds_medium=1.0, agents_high=6.0, rounds_high=3.0) -> dict[str, jax.Array]:
    """UAAD routing and stopping (see the module docstring), JAX.

    Args:
      round_risk, agreement: ``[T, N]`` float; round_mask: ``[T, N]`` bool (every trajectory
        has round 0); n_agents: ``[N]`` float team size.
      tau_c, epsilon: the consensus rule (dominant share, change since the previous round).
      risk_low, risk_high: tier boundaries on the round-0 risk.
      agents_*, rounds_*: each tier's budget (agents N, debate rounds R).
      Each parameter a scalar or ``[N]``.

    Returns:
      ``{output: [N]}`` for :data:`OUTPUTS`.
    """
    return _uaad(jnp, round_risk, agreement, round_mask, n_agents, tau_c, epsilon, risk_low,
                 risk_high, agents_low, rounds_low, agents_medium, rounds_medium, agents_high,
                 rounds_high)


def uaad_numpy(round_risk, agreement, round_mask, n_agents, *, tau_c=0.8, epsilon=0.05,
               risk_low=0.35, risk_high=0.62, agents_low=1.0, rounds_low=1.0,
               agents_medium=3.0, rounds_medium=1.0, agents_high=6.0,
               rounds_high=3.0) -> dict[str, np.ndarray]:
    """NumPy twin of :func:`uaad` (same arguments, same numbers)."""
    round_risk = np.asarray(round_risk)
    return _uaad(np, round_risk, np.asarray(agreement, round_risk.dtype),
                 np.asarray(round_mask, bool), np.asarray(n_agents), tau_c, epsilon, risk_low,
                 risk_high, agents_low, rounds_low, agents_medium, rounds_medium, agents_high,
                 rounds_high)


def uaad_reference(round_risk, agreement, round_mask, n_agents, **params) -> dict[str, float]:
    """One trajectory (``round_risk``, ``agreement``, ``round_mask`` of length ``T``) in plain
    Python floats: the module docstring's definition, written out apart from the kernel."""
    unknown = set(params) - set(_DEFAULTS)
    if unknown:
        raise TypeError(f"unknown UAAD parameters {sorted(unknown)}")
    dt = np.asarray(round_risk).dtype
    # thresholds rounded to the inputs' dtype, as the kernel compares them
    p = {k: float(dt.type(v)) for k, v in {**_DEFAULTS, **params}.items()}
    rounds = [t for t in range(len(round_mask)) if round_mask[t]]
    risk = float(round_risk[0])
    max_risk = max(float(round_risk[t]) for t in rounds)
    if risk < p["risk_low"]:
        tier = "low"
    elif risk < p["risk_high"]:
        tier = "medium"
    else:
        tier = "high"
    cap = min(math.floor(p[f"rounds_{tier}"]), rounds[-1])
    stop = cap
    for t in rounds[1:]:
        if t > cap:
            break
        c, prev = float(agreement[t]), float(agreement[t - 1])
        slack = MOVED_SLACK_ULPS * np.finfo(dt).eps
        if c >= p["tau_c"] and abs(c - prev) <= p["epsilon"] + slack:
            stop = t
            break
    return {"uaad": risk, "uaad_max_risk": max_risk, "uaad_tier": float(TIERS.index(tier)),
            "uaad_stop": float(stop),
            "uaad_calls": float(n_agents) + p[f"agents_{tier}"] * stop + 1.0}
