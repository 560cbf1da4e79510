"""Plain-Python references for kernel tests, written apart from ``fastuq.kernels``.

They follow the formulas of DESIGN.md / papers/ directly, one trajectory at a time, in exact
rational arithmetic where rounding would otherwise matter, and are slow on purpose.
"""

from __future__ import annotations

from fractions import Fraction as F
from math import isnan


def sauce_exact(agreement, entropy, lam, q, sigma2_0, mu_0) -> dict[str, float]:
    """SAUCE of one trajectory (DESIGN.md, papers/sauce.md) in exact rationals.

    ``agreement``/``entropy``: the executed rounds' values (floats, taken exactly).
    Returns score, final_mu, final_sigma2, avg_mu, avg_sigma2 rounded to float once.
    """
    lam, q, s2, mu = (F(float(x)) for x in (lam, q, sigma2_0, mu_0))
    eps, floor = F(1e-8), F(1e-15)
    mus, s2s = [], []
    for m, h in zip(agreement, entropy, strict=True):
        r = max(F(float(h)), eps)
        mp = lam * mu
        p = lam * lam * s2 + q
        k = p / (p + r + eps)
        mu = mp + k * (F(float(m)) - mp)
        s2 = max((1 - k) * p, floor)
        mus.append(mu)
        s2s.append(s2)
    avg = sum(mus) / len(mus)
    return {
        "score": float(-avg), "final_mu": float(mu), "final_sigma2": float(s2),
        "avg_mu": float(avg), "avg_sigma2": float(sum(s2s) / len(s2s)),
    }


def round_baselines_exact(agreement, entropy, team: int | None = None) -> dict[str, float]:
    """last / mean / weighted agreement of one trajectory's executed rounds, exactly.

    With ``team`` the agreement values are read as the fractions ``round(M n) / n`` they
    stand for (DESIGN.md: a vote count over the team), else as the floats given.
    """
    if team:
        values = [F(round(m * team), team) for m in agreement]
    else:
        values = [F(m) for m in agreement]
    out = {"last_agreement": float(-values[-1]),
           "mean_agreement": float(-sum(values) / len(values))}
    if entropy is not None:
        w = [1 / max(F(h), F(1e-8)) for h in entropy]
        out["weighted_agreement"] = float(-sum(v * x for v, x in zip(values, w, strict=True))
                                          / sum(w))
    return out


def node_baselines_exact(lp, ntok, ent, mask) -> dict[str, float]:
    """msp_final / perplexity_final / mean_token_entropy of one trajectory.

    ``lp``, ``ntok``, ``ent``, ``mask``: ``[T][A]`` nested lists (``mask`` bools). The final
    nodes are the valid nodes of the last round that has one. Sums are exact (Fractions);
    the perplexity terms use ``math.exp`` (rounded once each).
    """
    from math import exp

    rounds = [t for t in range(len(mask)) if any(mask[t])]
    if not rounds:
        nan = float("nan")
        return {"msp_final": nan, "perplexity_final": nan, "mean_token_entropy": nan}
    last = rounds[-1]
    final = [a for a in range(len(mask[last])) if mask[last][a]]
    out = {"msp_final": float(-sum(F(lp[last][a]) for a in final) / len(final))}
    if ntok is not None:
        terms = [F(exp(-lp[last][a] / ntok[last][a])) for a in final]
        out["perplexity_final"] = float(sum(terms) / len(terms))
    if ent is not None:
        nodes = [F(ent[t][a]) for t in range(len(mask)) for a in range(len(mask[t]))
                 if mask[t][a] and not isnan(ent[t][a])]
        out["mean_token_entropy"] = float(sum(nodes) / len(nodes))
    return out
