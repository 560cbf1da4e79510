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


# ------------------------------------------------------------------------------------------
# Decisions: BCCS, UAAD, the consistency gate and budget-policy replay (DESIGN.md, "Estimator
# semantics (settled)"; papers/bccs.md, papers/uaad.md, papers/consistency_gate.md). Plain
# per-trajectory Python over the corpus's own row dicts (canonical column names); nothing
# here imports fastuq's kernels, engine, gate or replay. Answers are compared as plain
# strings: vote classes are the distinct answer strings, so a test corpus must not hold two
# different spellings of one answer ("1" and "1.0").

FULL_CONSENSUS, PARTIAL_CONSENSUS, NO_CONSENSUS = "full", "partial", "none"


def _team(row: dict) -> int:
    """The initial team size: ``n_agents``, else the widest round of ``answers``."""
    n = row.get("n_agents")
    return int(n) if n is not None else max(len(r) for r in row["answers"])


def modal_answer(answers, voters=None) -> tuple[str | None, list[int]]:
    """The modal answer of one round and its supporters' slots: among the slots in
    ``voters`` (default: all) whose answer is not null, the answer with the most votes; of
    answers with equally many, the one given by the lowest slot (DESIGN: "ties to the
    lowest slot"). ``(None, [])`` when nobody votes."""
    slots = [a for a in range(len(answers)) if answers[a] is not None
             and (voters is None or a in voters)]
    if not slots:
        return None, []
    count = {answers[a]: sum(1 for b in slots if answers[b] == answers[a]) for a in slots}
    best = max(count.values())
    winner = next(answers[a] for a in slots if count[answers[a]] == best)
    return winner, [a for a in slots if answers[a] == winner]


def agreement_exact(answers, team: int) -> F:
    """DESIGN "Agreement": the modal answer's votes over the initial team size (null answers
    do not vote but stay in the denominator; no vote at all: 0), as an exact fraction."""
    return F(len(modal_answer(answers)[1]), team)


def bccs_round(answers, beliefs, team: int, *, theta_s=F(2, 3), theta_full=F(4, 5),
               theta_partial=F(1, 2)) -> dict:
    """BCCS's consensus state of one round (DESIGN "BCCS consensus state", papers/bccs.md's
    BCCJ): support group = the modal answer's agents; ``p_s`` = support size / team size,
    ``p_b`` = the support's belief / the belief of every answering agent. Full iff
    ``p_s > theta_s`` and ``p_b > theta_full``; partial iff not full and
    ``p_b > theta_partial``; none otherwise. Exact rationals (beliefs taken exactly as the
    floats they are; thresholds as given, ``Fraction`` or float). Nobody answering, or a
    total belief of 0: ``p_b = 0`` (the package's convention; DESIGN is silent)."""
    _, support = modal_answer(answers)
    voters = [a for a in range(len(answers)) if answers[a] is not None]
    total = sum((F(float(beliefs[a])) for a in voters), F(0))
    p_b = sum((F(float(beliefs[a])) for a in support), F(0)) / total if total > 0 else F(0)
    p_s = F(len(support), team)
    th_s, th_f, th_p = (F(x) if isinstance(x, F) else F(float(x))
                        for x in (theta_s, theta_full, theta_partial))
    if p_s > th_s and p_b > th_f:
        state = FULL_CONSENSUS
    elif p_b > th_p:
        state = PARTIAL_CONSENSUS
    else:
        state = NO_CONSENSUS
    return {"p_s": p_s, "p_b": p_b, "state": state, "support": support}


def row_beliefs(row: dict) -> list[list[float | None]]:
    """``[round][agent]`` beliefs of a corpus row: ``belief``, else ``exp(answer_logprob)``
    (DESIGN: "Beliefs come from belief, else exp(answer_logprob)")."""
    from math import exp

    if row.get("belief") is not None:
        return row["belief"]
    return [[None if x is None else exp(x) for x in r] for r in row["answer_logprob"]]


def bccs_trajectory_exact(row: dict, **thresholds) -> dict:
    """BCCS of one corpus row: ``rounds`` (one :func:`bccs_round` per executed round),
    ``first_full`` (the first round in full consensus, -1 if none) and ``score`` =
    ``1 - p_s p_b`` of the last executed round (DESIGN's settled score: a lone answering
    agent is not certainty), with ``dissent`` = ``1 - p_b`` there."""
    team = _team(row)
    beliefs = row_beliefs(row)
    rounds = [bccs_round(a, b, team, **thresholds)
              for a, b in zip(row["answers"], beliefs, strict=True)]
    full = [t for t, r in enumerate(rounds) if r["state"] == FULL_CONSENSUS]
    last = rounds[-1]
    return {"rounds": rounds, "first_full": full[0] if full else -1,
            "score": 1 - last["p_s"] * last["p_b"], "dissent": 1 - last["p_b"]}


UAAD_DEFAULTS = {"w_h": 0.45, "w_q": 0.35, "w_d": 0.20, "entropy_max": None, "tau_c": 0.8,
                 "epsilon": 0.05, "risk_low": 0.35, "risk_high": 0.62, "agents_low": 1,
                 "rounds_low": 1, "agents_medium": 3, "rounds_medium": 1, "agents_high": 6,
                 "rounds_high": 3}


def pair_disagreement_exact(answers) -> F:
    """``d``: the share of unordered pairs of the round's answering agents whose answers
    differ (0 with fewer than two answers), exactly."""
    given = [x for x in answers if x is not None]
    pairs = [(i, j) for i in range(len(given)) for j in range(i + 1, len(given))]
    if not pairs:
        return F(0)
    return F(sum(1 for i, j in pairs if given[i] != given[j]), len(pairs))


def uaad_round_risks(row: dict, *, w_h=0.45, w_q=0.35, w_d=0.20, entropy_max=None
                     ) -> list[float]:
    """UAAD's risk of each executed round: the largest step risk
    ``u = w_h h + w_q q + w_d d`` over the round's agents and steps (papers/uaad.md). With
    the ``step_h/step_q/step_d`` columns, their values; without them one step per round,
    derived (DESIGN "UAAD"): ``q = 1 - agreement`` (the corpus's ``agreement`` column, else
    :func:`agreement_exact`), ``h = min(token_entropy / entropy_max, 1)`` (default
    ``entropy_max`` = ln 5) and ``d`` = :func:`pair_disagreement_exact`. Float arithmetic,
    summed in the order h, q, d."""
    from math import log

    if row.get("step_h") is not None:
        risks = []
        for rh, rq, rd in zip(row["step_h"], row["step_q"], row["step_d"], strict=True):
            steps = [w_h * h + w_q * q + w_d * d
                     for ah, aq, ad in zip(rh, rq, rd, strict=True) if ah is not None
                     for h, q, d in zip(ah, aq, ad, strict=True)]
            risks.append(max(steps))
        return risks
    e_max = log(5.0) if entropy_max is None else entropy_max
    team = _team(row)
    risks = []
    for t, answers in enumerate(row["answers"]):
        agree = (float(row["agreement"][t]) if row.get("agreement") is not None
                 else float(agreement_exact(answers, team)))
        h = min(float(row["token_entropy"][t]) / e_max, 1.0)
        risks.append(w_h * h + w_q * (1.0 - agree) + w_d * float(pair_disagreement_exact(answers)))
    return risks


def uaad_consensus_stop(agreement, cap: int, tau_c, epsilon) -> int:
    """UAAD's consensus stop over exact agreements ``C_0..`` (``Fraction`` s): the first round
    ``t`` in ``1..cap`` with ``C_t >= tau_c`` and ``|C_t - C_{t-1}| <= epsilon``, else
    ``cap``. ``tau_c``/``epsilon`` are read as the decimals they print as (0.05 is 1/20), so
    a change equal to epsilon stops, as DESIGN's "moved <= .05" says."""
    tau, eps = F(str(tau_c)), F(str(epsilon))
    for t in range(1, cap + 1):
        if agreement[t] >= tau and abs(agreement[t] - agreement[t - 1]) <= eps:
            return t
    return cap


def uaad_exact(row: dict, **params) -> dict:
    """UAAD of one corpus row (papers/uaad.md, DESIGN "UAAD"): ``uaad`` = the round-0 risk
    (what a router sees), ``uaad_max_risk`` = the largest round risk, ``uaad_tier`` (0 low
    if risk < risk_low, 1 medium if < risk_high, else 2 high), ``uaad_stop`` = the consensus
    stop within the tier's round cap (``min(rounds_tier, last executed round)``),
    ``uaad_calls`` = ``Q = M + N R + 1`` with ``M`` the team size, ``N`` the tier's agents
    and ``R`` the stop round. Unknown parameters raise ``TypeError``."""
    unknown = set(params) - set(UAAD_DEFAULTS)
    if unknown:
        raise TypeError(f"unknown UAAD parameters {sorted(unknown)}")
    p = {**UAAD_DEFAULTS, **params}
    risks = uaad_round_risks(row, w_h=p["w_h"], w_q=p["w_q"], w_d=p["w_d"],
                             entropy_max=p["entropy_max"])
    risk = risks[0]
    tier = 0 if risk < p["risk_low"] else 1 if risk < p["risk_high"] else 2
    name = ("low", "medium", "high")[tier]
    team = _team(row)
    agreement = ([F(float(x)) for x in row["agreement"]] if row.get("agreement") is not None
                 else [agreement_exact(a, team) for a in row["answers"]])
    cap = min(int(p[f"rounds_{name}"]), len(row["answers"]) - 1)
    stop = uaad_consensus_stop(agreement, cap, p["tau_c"], p["epsilon"])
    return {"uaad": risk, "uaad_max_risk": max(risks), "uaad_tier": tier, "uaad_stop": stop,
            "uaad_calls": team + p[f"agents_{name}"] * stop + 1}


# ------------------------------------------------------------------------- consistency gate


def _normalised(text: str) -> str:
    return " ".join(text.lower().split())


def consistency_exact(candidate: str | None, samples) -> float:
    """The consistency gate's score of one candidate against its samples (DESIGN
    "Consistency gate", papers/consistency_gate.md), per sample:

    * equal normalised texts (lowercased, runs of whitespace one space, stripped): 1.0;
    * else, where both texts state a final answer: 1.0 if the answers are equivalent, 0.0
      if not;
    * else (either states none): the Jaccard index of the texts' sets of Unicode word
      tokens (``re``'s ``\\w+`` on the lowercased text); 0 when both sets are empty.

    The score is the mean over the samples that are non-empty after normalisation, clamped
    to [0, 1]; 0.0 without such a sample (the package's fail-closed choice; DESIGN is
    silent there). The answer extraction and equivalence are taken from ``fastuq.answers``
    as a black box (``extract_answer``, ``answers_equivalent``): this reference is about the
    scoring rule, not the reading of an answer.
    """
    import re

    from fastuq.answers import answers_equivalent, extract_answer

    cand = candidate or ""
    c_ans = extract_answer(cand)
    c_tok = set(re.findall(r"\w+", cand.lower()))
    values = []
    for s in samples or []:
        if s is None or not _normalised(s):
            continue
        if _normalised(s) == _normalised(cand):
            values.append(F(1))
            continue
        s_ans = extract_answer(s)
        if c_ans is not None and s_ans is not None:
            values.append(F(int(answers_equivalent(c_ans, s_ans))))
            continue
        s_tok = set(re.findall(r"\w+", s.lower()))
        union = c_tok | s_tok
        values.append(F(len(c_tok & s_tok), len(union)) if union else F(0))
    if not values:
        return 0.0
    return float(min(max(sum(values) / len(values), F(0)), F(1)))


# ---------------------------------------------------------------------- gate threshold


def binomial_upper_exact(k: int, n: int, delta: float) -> float:
    """One-sided Clopper-Pearson ``1 - delta`` upper bound on a binomial rate with ``k``
    failures in ``n`` trials: the ``p`` with ``P(X <= k | n, p) = delta`` (1 when
    ``k == n``), found by bisection on the exact binomial sum (terms in log space, summed
    with ``math.fsum``). The sum falls as ``p`` rises, so 200 halvings pin ``p`` to the
    float's resolution."""
    from math import exp, fsum, lgamma, log

    if k >= n:
        return 1.0

    def cdf(p: float) -> float:
        if p <= 0.0:
            return 1.0
        if p >= 1.0:
            return 0.0
        lc = lgamma(n + 1)
        return fsum(exp(lc - lgamma(i + 1) - lgamma(n - i + 1) + i * log(p)
                        + (n - i) * log(1 - p)) for i in range(k + 1))

    lo, hi = 0.0, 1.0
    for _ in range(200):
        mid = (lo + hi) / 2
        if cdf(mid) > delta:
            lo = mid
        else:
            hi = mid
    return (lo + hi) / 2


def gate_passed(scores, correct, threshold: float, higher_passes: bool) -> tuple[int, int]:
    """``(n passed, failures among them)`` at ``threshold``: an item passes iff
    ``score <= threshold`` (uncertainties) or ``score >= threshold`` (``higher_passes``)."""
    passed = [c for s, c in zip(scores, correct, strict=True)
              if (s >= threshold if higher_passes else s <= threshold)]
    return len(passed), sum(1 for c in passed if not c)


def strictest_first(scores, higher_passes: bool) -> list[float]:
    """The candidate thresholds of fastuq.gate today: the distinct scores, strictest (fewest
    passed) first."""
    return sorted(set(float(s) for s in scores), reverse=higher_passes)


def gate_fixed_sequence(scores, correct, candidates, alpha: float, delta: float, *,
                        higher_passes: bool = False) -> dict:
    """Fixed-sequence testing from the strictest level (DESIGN "Consistency gate"):
    ``candidates`` in the order tested (strictest first), fixed before the labels are seen.
    Candidates passing fewer than ``n_min`` items, where even no failure gives a bound above
    ``alpha`` (``n_min`` = the least ``n`` with ``(1 - alpha)^n <= delta``), are left out of
    the sequence (a label-free choice). Each remaining level is tested at ``delta``: the null
    "failure rate among passed items > alpha" is rejected when the Clopper-Pearson upper
    bound is <= ``alpha``; testing stops at the first level not rejected, and the threshold
    is the last rejected level. Returns ``threshold`` (None: no valid threshold, the gate
    passes nothing), ``n_passed``, ``failures``, ``upper_bound`` (None without a threshold)
    and ``table``: one ``(threshold, n, failures, bound, rejected)`` per tested level."""
    table, chosen = [], None
    for thr in candidates:
        n, k = gate_passed(scores, correct, thr, higher_passes)
        if n == 0 or (1 - alpha) ** n > delta:
            continue
        bound = binomial_upper_exact(k, n, delta)
        ok = bound <= alpha
        table.append((thr, n, k, bound, ok))
        if not ok:
            break
        chosen = (thr, n, k, bound)
    if chosen is None:
        return {"threshold": None, "n_passed": 0, "failures": 0, "upper_bound": None,
                "table": table}
    thr, n, k, bound = chosen
    return {"threshold": thr, "n_passed": n, "failures": k, "upper_bound": bound,
            "table": table}


def gate_bonferroni(scores, correct, candidates, alpha: float, delta: float, *,
                    higher_passes: bool = False) -> dict:
    """Bonferroni over the candidate list (DESIGN "Consistency gate"): every one of the ``m``
    candidates is tested at ``delta / m``; of the rejected (safe) ones, the threshold is the
    one passing the most items (ties: the earliest in the list). Same return shape as
    :func:`gate_fixed_sequence` (``table`` over every candidate)."""
    m = len(candidates)
    table, chosen = [], None
    for thr in candidates:
        n, k = gate_passed(scores, correct, thr, higher_passes)
        bound = binomial_upper_exact(k, n, delta / m) if n else 1.0
        ok = n > 0 and bound <= alpha
        table.append((thr, n, k, bound, ok))
        if ok and (chosen is None or n > chosen[1]):
            chosen = (thr, n, k, bound)
    if chosen is None:
        return {"threshold": None, "n_passed": 0, "failures": 0, "upper_bound": None,
                "table": table}
    thr, n, k, bound = chosen
    return {"threshold": thr, "n_passed": n, "failures": k, "upper_bound": bound,
            "table": table}


def pass_fraction_grid(scores, levels: int, higher_passes: bool) -> list[float]:
    """The gate's default candidates (DESIGN "Consistency gate"): for i = 1..levels, the
    score of the ceil(i n / levels)-th item in pass order (lowest uncertainty first, highest
    confidence with ``higher_passes``); a threshold passes its whole tie group. Repeated
    thresholds are kept once, strictest first."""
    ordered = sorted((float(s) for s in scores), reverse=higher_passes)
    n, out = len(ordered), []
    for i in range(1, levels + 1):
        thr = ordered[-(-i * n // levels) - 1]
        if thr not in out:
            out.append(thr)
    return out


def gate_multi_start(scores, correct, candidates, alpha: float, delta: float, starts: int, *,
                     higher_passes: bool = False) -> dict:
    """Multi-start fixed sequence (DESIGN "Consistency gate"): the candidates a rejection is
    possible for at ``delta / starts`` (``(1 - alpha)^n <= delta / starts``), in order, get
    ``min(starts, len)`` starting points ``j * (len // that)``; from each, levels are tested at
    ``delta / starts`` toward looser ones until the first not rejected. A level is valid when
    any start rejected it; the threshold is the loosest valid one. Returns ``threshold``,
    ``n_passed``, ``failures``, ``upper_bound`` (at ``delta / starts``) and ``valid``: the
    valid thresholds, strictest first."""
    level = delta / starts
    seq = []
    for thr in candidates:
        n, k = gate_passed(scores, correct, thr, higher_passes)
        if n and (1 - alpha) ** n <= level:
            seq.append((thr, n, k, binomial_upper_exact(k, n, level)))
    valid = set()
    count = min(starts, len(seq))
    for j in range(count):
        for i in range(j * (len(seq) // count), len(seq)):
            if seq[i][3] > alpha:
                break
            valid.add(i)
    if not valid:
        return {"threshold": None, "n_passed": 0, "failures": 0, "upper_bound": None,
                "valid": []}
    thr, n, k, bound = seq[max(valid)]
    return {"threshold": thr, "n_passed": n, "failures": k, "upper_bound": bound,
            "valid": [seq[i][0] for i in sorted(valid)]}


# -------------------------------------------------------------------------------- replay


def round_answer(row: dict, t: int) -> str | None:
    """The team's answer after round ``t`` (DESIGN "Final answer"): the majority among the
    active agents that speak in round ``t`` (``active`` column; absent: every agent), ties to
    the lowest slot; at the last executed round the corpus's ``final_answer`` where the row
    has that field (None there: no answer)."""
    if t == len(row["answers"]) - 1 and "final_answer" in row:
        return row["final_answer"]
    answers = row["answers"][t]
    active = row.get("active")
    voters = None
    if active is not None and active[t] is not None:
        voters = {a for a in range(len(answers)) if active[t][a]}
    return modal_answer(answers, voters)[0]


def replay_trajectory(row: dict, stop: int, calls: str = "team") -> dict:
    """One trajectory stopped after round ``stop``: ``correct`` (the answer at the stop
    equals the reference, as strings), ``calls`` (``team``: ``A (stop + 1)`` with ``A`` the
    team size; ``nodes``: the answers given, non-null, in rounds ``0..stop``) and ``flip``
    (correct at some round before the stop, wrong at it)."""
    ref = row["reference"]
    right = [round_answer(row, t) == ref for t in range(stop + 1)]
    if calls == "team":
        n_calls = _team(row) * (stop + 1)
    else:
        n_calls = sum(1 for t in range(stop + 1) for x in row["answers"][t] if x is not None)
    return {"correct": right[stop], "calls": n_calls,
            "flip": (not right[stop]) and any(right[:stop])}


def replay_stop(row: dict, policy: str, **kw) -> int:
    """The stop round of one trajectory under a policy (DESIGN "UAAD", fastuq's replay
    policies): ``fixed`` (``rounds=r``: after round ``min(r - 1, last)``), ``uaad``
    (``tau_c``, ``epsilon``: :func:`uaad_consensus_stop` up to the last round), ``bccs``
    (the first round of full consensus, else the last; thresholds in ``kw``), ``trace``
    (``scores``: the estimator's score after each round, ``threshold``: the first round whose
    score is <= the threshold, else the last)."""
    last = len(row["answers"]) - 1
    if policy == "fixed":
        return min(kw["rounds"] - 1, last)
    if policy == "uaad":
        team = _team(row)
        agreement = [agreement_exact(a, team) for a in row["answers"]]
        return uaad_consensus_stop(agreement, last, kw["tau_c"], kw["epsilon"])
    if policy == "bccs":
        ff = bccs_trajectory_exact(row, **kw)["first_full"]
        return last if ff < 0 else ff
    if policy == "trace":
        hits = [t for t, s in enumerate(kw["scores"]) if s <= kw["threshold"]]
        return hits[0] if hits else last
    raise ValueError(f"unknown policy {policy!r}")


def replay_totals(rows, policy: str, calls: str = "team", **kw) -> dict:
    """Totals over a corpus under one policy point: ``n``, ``accuracy`` (share correct at
    the stop), ``calls_total``, ``calls_mean``, ``flips`` (count) and ``stop_mean``. For
    ``trace``, ``kw["scores"]`` is a list of per-round score lists, one per row."""
    outs, stops = [], []
    for i, row in enumerate(rows):
        own = dict(kw)
        if policy == "trace":
            own["scores"] = kw["scores"][i]
        stop = replay_stop(row, policy, **own)
        stops.append(stop)
        outs.append(replay_trajectory(row, stop, calls))
    n = len(rows)
    total = sum(o["calls"] for o in outs)
    return {"n": n, "accuracy": sum(o["correct"] for o in outs) / n, "calls_total": total,
            "calls_mean": total / n, "flips": sum(o["flip"] for o in outs),
            "stop_mean": sum(stops) / n}


# --------------------------------------------------------------------------------------
# The black-box similarity family (DESIGN.md "Black-box family"), as lm-polygraph defines it
# (estimators/common.py, eig_val_laplacian.py, deg_mat.py, eccentricity.py), one round of
# agents at a time, from their texts or answers (not from fastuq's packed inputs).


def word_set(text: str | None) -> set[str]:
    """The token set of a text: ``re``'s ``\\w+`` words of the lowercased text (the consistency
    gate's tokens); none for a missing text."""
    import re

    return set(re.findall(r"\w+", text.lower())) if text is not None else set()


def jaccard_matrix(texts) -> list[list[float]]:
    """lm-polygraph's ``_compute_Jaccard_score``: 1 on the diagonal, ``|A n B| / |A u B|``
    off it, 0 where the union is empty (here on word sets rather than ``str.split``)."""
    sets = [word_set(x) for x in texts]
    m = len(sets)
    w = [[1.0 if a == b else 0.0 for b in range(m)] for a in range(m)]
    for a in range(m):
        for b in range(a + 1, m):
            union = len(sets[a] | sets[b])
            w[a][b] = w[b][a] = len(sets[a] & sets[b]) / union if union else 0.0
    return w


def lcs_length(a: list, b: list) -> int:
    """The longest common subsequence of two sequences, by the textbook dynamic programme."""
    prev = [0] * (len(b) + 1)
    for x in a:
        cur = [0]
        for j, y in enumerate(b):
            cur.append(prev[j] + 1 if x == y else max(prev[j + 1], cur[j]))
        prev = cur
    return prev[-1]


def rouge_l_matrix(texts) -> list[list[float]]:
    """rouge-score's ``rougeL`` F-measure (``_score_lcs``: precision = LCS / len(prediction),
    recall = LCS / len(target), F = 2 P R / (P + R); 0 when either has no token) of every pair
    of texts, on ``re``'s ``\\w+`` words of the lowercased texts in order (repeats kept); 1
    on the diagonal."""
    import re

    toks = [re.findall(r"\w+", x.lower()) if x is not None else [] for x in texts]
    m = len(toks)
    w = [[1.0 if a == b else 0.0 for b in range(m)] for a in range(m)]
    for a in range(m):
        for b in range(a + 1, m):
            if not toks[a] or not toks[b]:
                continue
            lcs = lcs_length(toks[a], toks[b])
            p, r = lcs / len(toks[b]), lcs / len(toks[a])
            w[a][b] = w[b][a] = 2 * p * r / (p + r) if p + r else 0.0
    return w


def answer_matrix(answers) -> list[list[float]]:
    """Answer-class equality: 1 where two agents give the same (non-null) answer string, and
    on the diagonal; an agent without an answer is similar to itself only."""
    m = len(answers)
    return [[1.0 if a == b or (answers[a] is not None and answers[a] == answers[b]) else 0.0
             for b in range(m)] for a in range(m)]


def spectral_polygraph(w) -> dict[str, float]:
    """The three spectral scores of one similarity matrix, line by line as lm-polygraph
    computes them (``np.linalg.eig`` of the Laplacian for the eigenvalues, ``scipy``-style
    ``eigh`` and per-eigenvector norms for eccentricity with ``thres=0.9``), and
    lexical similarity as minus the mean over pairs."""
    import numpy as np

    w = np.asarray(w, float)
    m = w.shape[0]
    d = np.diag(w.sum(axis=1))
    d_inv_sqrt = np.linalg.inv(np.sqrt(d))
    lap = np.eye(m) - d_inv_sqrt @ w @ d_inv_sqrt
    eig = sum(max(0.0, 1.0 - float(np.real(x))) for x in np.linalg.eig(lap)[0])
    deg = float(np.trace(m - d) / m ** 2)
    values, vectors = np.linalg.eigh(lap)
    kept = vectors[:, values < 0.9].T
    c_ecc = [-np.linalg.norm(x - x.mean(0), 2) for x in kept]
    ecc = float(np.linalg.norm(c_ecc, 2))
    pairs = [w[a, b] for a in range(m) for b in range(a + 1, m)]
    lex = -sum(pairs) / len(pairs) if pairs else float("nan")
    return {"eigval_laplacian": eig, "degree_matrix": deg, "eccentricity": ecc,
            "lexical_similarity": lex}


def spectral_trajectory(rounds, team: int, kind: str) -> dict[str, float]:
    """Every spectral score of one trajectory: ``rounds`` its ``[round][agent]`` texts
    (``kind="lexical"``) or answers (``"answer"``), each round padded with ``None`` to the
    ``team`` agents; ``<name>`` the last round's, ``<name>_mean`` the mean over rounds."""
    out = {}
    per_round = []
    for agents in rounds:
        agents = list(agents) + [None] * (team - len(agents))
        w = jaccard_matrix(agents) if kind == "lexical" else answer_matrix(agents)
        per_round.append(spectral_polygraph(w))
    for name in per_round[0]:
        values = [r[name] for r in per_round]
        out[name] = values[-1]
        out[f"{name}_mean"] = sum(values) / len(values)
    return out


# ------------------------------------------------- answer entropy, answer sets, CoCoA


def _answer_groups(answers, team: int) -> tuple[list[int], int]:
    """The sizes of one round's groups of equal answers (``None``: no answer, a group of
    its own) and the team ``n``: every answering agent belongs to the group of its answer,
    every other team member (``n - answering``) to a group of one."""
    given = [a for a in answers if a is not None]
    sizes = [given.count(a) for a in dict.fromkeys(given)]
    n = max(team, len(given))
    return sizes + [1] * (n - len(given)), n


def answer_sets_exact(rounds, team: int) -> dict[str, float]:
    """answer_entropy / num_answer_sets of one trajectory's executed ``rounds`` (each a
    list of answers, ``None`` where an agent gave none), last round and mean over rounds.

    Entropy from its definition -sum_g p_g ln p_g over the groups, ``p_g = |g| / n`` exact
    (Fractions), each term rounded once and summed exactly (``math.fsum``)."""
    from math import fsum, log

    entropies, sets = [], []
    for answers in rounds:
        sizes, n = _answer_groups(answers, team)
        shares = [F(s, n) for s in sizes]
        assert sum(shares) == 1
        entropies.append(fsum(-float(p) * log(float(p)) for p in shares))
        sets.append(len(sizes))
    return {"answer_entropy": entropies[-1],
            "answer_entropy_mean": fsum(entropies) / len(entropies),
            "num_answer_sets": float(sets[-1]),
            "num_answer_sets_mean": float(F(sum(sets), len(sets)))}


def cocoa_exact(rounds, team: int) -> dict[str, float]:
    """CoCoA of one trajectory: ``rounds`` a list of rounds, each a list of ``(answer,
    confidence)`` per agent (answer ``None``: none; confidence ``None``: the node has none
    and is not scored). Per scored node i: ``-c_i`` times the share of the other ``n - 1``
    team members whose answer is not i's (1 for a team of one), mean over the round's scored
    nodes, exactly (Fractions, the confidences taken as the floats they are); ``cocoa`` the
    last round with a scored node, ``cocoa_mean`` the mean over such rounds."""
    values = []
    for nodes in rounds:
        answers = [a for a, _ in nodes]
        n = max(team, sum(a is not None for a in answers))
        scored = []
        for i, (a, c) in enumerate(nodes):
            if c is None:
                continue
            same = 0 if a is None else sum(1 for j, b in enumerate(answers) if j != i and b == a)
            differ = F(n - 1 - same, n - 1) if n > 1 else F(1)
            scored.append(-F(c) * differ)
        if scored:
            values.append(sum(scored) / len(scored))
    if not values:
        nan = float("nan")
        return {"cocoa": nan, "cocoa_mean": nan}
    return {"cocoa": float(values[-1]), "cocoa_mean": float(sum(values) / len(values))}
