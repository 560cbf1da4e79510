"""Vectorised NumPy simulation of multi-agent rollouts (private half of `fastuq.synth`).

Everything here works on dense arrays of one chunk of ``N`` trajectories:

- answers are integer *codes* per node, ``[N, T, A]`` int8: 0 is the reference answer,
  ``1..D`` the question's distractors (strings are only made when building Arrow);
- ``speak [N, T, A]`` says which agent answered in which round, ``parsed [N, T, A]`` whether
  its answer parses (an agent that spoke but did not parse holds a null answer);
- ``rounds [N]`` is the number of executed rounds, ``slots [N]`` the initial team size.

No loop here runs over trajectories: loops run over rounds, agents or answer codes only.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from fastuq.io.arrow_lists import parents

# --- model constants (logit scale unless said otherwise) ---------------------------------------
_P_EASY = 2.4  # logit of an average agent being right on the easiest question
_P_SLOPE = 4.0  # logit lost from the easiest (difficulty 0) to the hardest (difficulty 1)
_SKILL_SD = 0.6  # per (trajectory, agent) skill offset
_RUN_SD = 0.5  # per trajectory offset (sampling luck / model temperature)
_REFLECT = 0.15  # logit gained per round when an agent re-derives its answer
_ADOPT_BASE = 0.10  # P(adopt the previous round's majority) = base + gain * majority share
_ADOPT_GAIN = 0.35
_KEEP = 0.30  # P(keep its own previous answer); the rest re-derive afresh
_ENT_RIGHT = np.log(0.28)  # log mean token entropy (nats) of a right response
_ENT_WRONG = 0.20  # added to the log entropy of a wrong response
_ENT_DIFF = 0.45  # added per unit difficulty
_ENT_RUN_SD = 0.35  # per trajectory offset of the log entropy
_ENT_NODE_SD = 0.35  # per response noise of the log entropy
_NLL_SD = 0.20  # per response log-ratio of mean NLL per token to mean entropy
_LEN_WRONG = 0.08  # relative extra length of wrong responses
_LEN_SHAPE = 4.0  # Gamma shape of the response-length multiplier
_DIS_SHAPE = 1.5  # Gamma shape of distractor popularity (smaller: one wrong answer dominates)


def sigmoid(x: np.ndarray) -> np.ndarray:
    return 1.0 / (1.0 + np.exp(-x))


@dataclass
class Questions:
    """Per-trajectory view of the question each trajectory answers (length ``N``)."""

    qidx: np.ndarray  # int64 question number
    difficulty: np.ndarray  # float64 in [0, 1]
    values: np.ndarray  # int64 [N, D+1]: integer value of code 0 (reference) .. D
    wcum: np.ndarray  # float64 [N, D]: cumulative distractor popularity (last = 1)


@dataclass
class Rollouts:
    """Dense simulation result for one chunk of ``N`` trajectories."""

    codes: np.ndarray  # int8 [N, T, A]
    speak: np.ndarray  # bool [N, T, A]
    parsed: np.ndarray  # bool [N, T, A]
    rounds: np.ndarray  # int32 [N]
    slots: np.ndarray  # int32 [N]
    logit: np.ndarray  # float64 [N, A]: per agent logit of being right (round 0)
    difficulty: np.ndarray  # float64 [N]


def questions(rng: np.random.Generator, first_q: int, n_q: int, per_id: int,
              n_distractors: int) -> Questions:
    """Draw ``n_q`` questions numbered from ``first_q``, each repeated ``per_id`` times."""
    d = rng.beta(1.3, 1.3, n_q)
    ref = rng.integers(0, 1000, n_q)
    # distinct, non-zero offsets: strictly increasing magnitudes with random signs
    mags = np.cumsum(rng.integers(1, 25, (n_q, n_distractors)), axis=1)
    signs = np.where(rng.random((n_q, n_distractors)) < 0.5, -1, 1)
    values = np.concatenate([ref[:, None], ref[:, None] + signs * mags], axis=1)
    # distractor popularity: one plausible wrong answer tends to dominate, more so when hard
    w = rng.gamma(_DIS_SHAPE, 1.0, (n_q, n_distractors))
    w = np.sort(w, axis=1)[:, ::-1]
    wcum = np.cumsum(w, axis=1)
    wcum /= wcum[:, -1:]
    wcum[:, -1] = 1.0
    rep = np.repeat
    return Questions(
        qidx=rep(np.arange(first_q, first_q + n_q, dtype=np.int64), per_id),
        difficulty=rep(d, per_id),
        values=rep(values, per_id, axis=0),
        wcum=rep(wcum, per_id, axis=0),
    )


def _draw(rng: np.random.Generator, logit: np.ndarray, wcum: np.ndarray) -> np.ndarray:
    """Independent answers ``[N, A]``: right with P = sigmoid(logit), else a distractor."""
    n, a = logit.shape
    right = rng.random((n, a)) < sigmoid(logit)
    u = rng.random((n, a))
    dis = 1 + (u[:, :, None] > wcum[:, None, :-1]).sum(axis=2)
    return np.where(right, 0, dis).astype(np.int8)


def mode(codes: np.ndarray, valid: np.ndarray, n_codes: int) -> tuple[np.ndarray, np.ndarray]:
    """Modal code and its count over axis 1 of ``[N, A]``, counting only ``valid`` entries.

    Ties go to the answer of the first agent (in slot order) holding a modal answer, as
    ``collections.Counter(answers).most_common(1)`` does. Rows with no valid entry give
    code 0 and count 0.
    """
    n = codes.shape[0]
    counts = np.zeros((n, n_codes), dtype=np.int32)
    for c in range(n_codes):
        counts[:, c] = ((codes == c) & valid).sum(axis=1)
    top = counts.max(axis=1)
    mine = np.take_along_axis(counts, codes.astype(np.intp), axis=1)
    first = np.argmax(valid & (mine == top[:, None]), axis=1)
    return codes[np.arange(n), first], top


def _force_one_parsed(parsed: np.ndarray, sure: np.ndarray) -> None:
    """Make sure each row has a parsed answer among its ``sure`` speakers (in place)."""
    none = ~(parsed & sure).any(axis=1)
    if none.any():
        first = np.argmax(sure, axis=1)
        rows = np.nonzero(none)[0]
        parsed[rows, first[rows]] = True


def _next_answers(rng: np.random.Generator, prev: np.ndarray, prev_valid: np.ndarray,
                  prev_speak: np.ndarray, logit: np.ndarray, wcum: np.ndarray,
                  n_codes: int) -> np.ndarray:
    """Answers of round t from round t-1: adopt the majority, keep one's own, or re-derive."""
    maj, top = mode(prev, prev_valid, n_codes)
    share = top / np.maximum(prev_speak.sum(axis=1), 1)
    u = rng.random(prev.shape)
    adopt = u < (_ADOPT_BASE + _ADOPT_GAIN * share)[:, None]
    keep = ~adopt & (u < (_ADOPT_BASE + _ADOPT_GAIN * share + _KEEP)[:, None])
    fresh = _draw(rng, logit, wcum)
    return np.where(adopt, maj[:, None], np.where(keep, prev, fresh)).astype(np.int8)


def _team(rng: np.random.Generator, q: Questions, n_agents: int) -> np.ndarray:
    n = q.difficulty.shape[0]
    base = _P_EASY - _P_SLOPE * q.difficulty + _RUN_SD * rng.standard_normal(n)
    return base[:, None] + _SKILL_SD * rng.standard_normal((n, n_agents))


def debate(rng: np.random.Generator, q: Questions, n_agents: int, n_rounds: int,
           p_unparsed: float) -> Rollouts:
    """Simultaneous-talk debate: every agent answers in every round."""
    n = q.difficulty.shape[0]
    n_codes = q.values.shape[1]
    logit = _team(rng, q, n_agents)
    codes = np.empty((n, n_rounds, n_agents), dtype=np.int8)
    parsed = rng.random((n, n_rounds, n_agents)) >= p_unparsed
    speak = np.ones((n, n_rounds, n_agents), dtype=bool)
    codes[:, 0] = _draw(rng, logit, q.wcum)
    _force_one_parsed(parsed[:, 0], speak[:, 0])
    for t in range(1, n_rounds):
        codes[:, t] = _next_answers(rng, codes[:, t - 1], parsed[:, t - 1], speak[:, t - 1],
                                    logit + _REFLECT * t, q.wcum, n_codes)
        _force_one_parsed(parsed[:, t], speak[:, t])
    return Rollouts(codes, speak, parsed, np.full(n, n_rounds, np.int32),
                    np.full(n, n_agents, np.int32), logit, q.difficulty)


def dylan(rng: np.random.Generator, q: Questions, n_agents: int, n_rounds: int,
          p_unparsed: float) -> Rollouts:
    """DyLAN (SALT-NLP/DyLAN, MATH CoT): sequential answers with early stopping and pruning.

    Rounds 0 and 1: agents answer one after another; once ``m > floor(2A/3)`` agents have
    answered, the round and the run stop as soon as the parsed answers of those ``m`` hold
    more than ``floor(2m/3)`` equal answers. Before round 2 a ranker keeps the 2 best agents
    of round 1; they alone answer in rounds >= 2 (no early stop there).
    """
    n = q.difficulty.shape[0]
    a_n = n_agents
    n_codes = q.values.shape[1]
    logit = _team(rng, q, a_n)
    codes = np.zeros((n, n_rounds, a_n), dtype=np.int8)
    parsed = rng.random((n, n_rounds, a_n)) >= p_unparsed
    speak = np.zeros((n, n_rounds, a_n), dtype=bool)
    rounds = np.zeros(n, dtype=np.int32)
    alive = np.ones(n, dtype=bool)
    m0 = min((2 * a_n) // 3 + 1, a_n)  # agents always asked before the first check
    survivors = np.ones((n, a_n), dtype=bool)
    for t in range(n_rounds):
        if t == 0:
            codes[:, 0] = _draw(rng, logit, q.wcum)
        else:
            codes[:, t] = _next_answers(rng, codes[:, t - 1], parsed[:, t - 1] & speak[:, t - 1],
                                        speak[:, t - 1], logit + _REFLECT * t, q.wcum, n_codes)
        rounds[alive] = t + 1
        if t < 2:
            sure = np.zeros((n, a_n), dtype=bool)
            sure[:, :m0] = True
            _force_one_parsed(parsed[:, t], sure)
            asked = np.full(n, a_n, dtype=np.int32)
            stopped = np.zeros(n, dtype=bool)
            for m in range(m0, a_n + 1):
                valid = parsed[:, t, :m]
                _, top = mode(codes[:, t, :m], valid, n_codes)
                hit = ~stopped & (top > (2 * m) // 3)
                asked[hit] = m
                stopped |= hit
            speak[:, t] = alive[:, None] & (np.arange(a_n)[None, :] < asked[:, None])
            alive &= ~stopped
        else:
            if t == 2 and a_n > 2:
                survivors = _rank(rng, codes[:, 1], parsed[:, 1], n_codes)
            _force_one_parsed(parsed[:, t], survivors)
            speak[:, t] = alive[:, None] & survivors
        if not alive.any():
            break
    return Rollouts(codes, speak, parsed, rounds, np.full(n, a_n, np.int32), logit,
                    q.difficulty)


def _rank(rng: np.random.Generator, codes: np.ndarray, parsed: np.ndarray,
          n_codes: int) -> np.ndarray:
    """The ranker's pick of the 2 best agents ``[N, A]`` (bool) from their round-1 answers.

    It prefers parsed answers, answers that agree with the round's majority and, weakly,
    right answers; Gumbel noise makes it imperfect.
    """
    maj, _ = mode(codes, parsed, n_codes)
    score = (1.5 * parsed + 0.8 * (parsed & (codes == maj[:, None])) + 0.6 * (codes == 0)
             + rng.gumbel(0.0, 0.7, codes.shape))
    top2 = np.argsort(-score, axis=1, kind="stable")[:, :2]
    keep = np.zeros(codes.shape, dtype=bool)
    np.put_along_axis(keep, top2, True, axis=1)
    return keep


def node_signals(rng: np.random.Generator, right: np.ndarray, difficulty: np.ndarray,
                 n_tokens_mean: float) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Per node mean token entropy (nats), NLL per token and length, each ``[N, T, A]``.

    ``right`` is whether the node's (internal) answer is the reference. Entropy and NLL are
    lower when right, higher on hard questions, with per-trajectory and per-response noise.
    """
    shape = right.shape
    n = shape[0]
    wrong = ~right
    log_h = (_ENT_RIGHT + _ENT_WRONG * wrong + _ENT_DIFF * (difficulty - 0.5)[:, None, None]
             + _ENT_RUN_SD * rng.standard_normal(n)[:, None, None]
             + _ENT_NODE_SD * rng.standard_normal(shape))
    h = np.exp(log_h)
    nll = h * np.exp(_NLL_SD * rng.standard_normal(shape) - 0.5 * _NLL_SD**2)
    lam = max(n_tokens_mean - 1.0, 0.0) * (1.0 + _LEN_WRONG * (wrong - 0.3))
    lam = lam * rng.gamma(_LEN_SHAPE, 1.0 / _LEN_SHAPE, shape)
    n_tok = 1 + rng.poisson(lam)
    return h, nll, n_tok.astype(np.int32)


def tokens(rng: np.random.Generator, node_h: np.ndarray, n_tok: np.ndarray,
           k: int) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """Top-k token log-probs for a flat list of responses.

    ``node_h [M]`` is each response's target mean entropy (nats), ``n_tok [M]`` its length.
    Returns ``topk [sum n_tok, k]`` float32 (each row <= 0, descending),
    ``chosen [sum n_tok]`` float32 (the sampled token's log-prob, one of its row),
    ``node_entropy [M]`` float64 (mean over the response's tokens of the entropy of the
    renormalised top-k distribution, computed from the float32 values) and
    ``node_logprob [M]`` float64 (sum of ``chosen`` over the response's tokens).
    """
    m = node_h.shape[0]
    total = int(n_tok.sum())
    owner = parents(n_tok)  # the response of each token
    # each token: sharp (confident) or flat; sharper on average when the response is confident
    sharp = 1.6 / np.maximum(node_h[owner], 1e-3) * np.exp(0.8 * rng.standard_normal(total))
    gaps = rng.exponential(1.0, (total, k))
    gaps[:, 0] = 0.0
    z = -sharp[:, None] * np.cumsum(gaps, axis=1)  # descending logits, max 0
    logq = z - np.log(np.exp(z).sum(axis=1, keepdims=True))
    tail = np.minimum(0.05 * rng.exponential(1.0, total) * (1.0 - np.exp(logq[:, 0])), 0.5)
    topk = np.minimum(logq + np.log1p(-tail)[:, None], 0.0).astype(np.float32)
    # chosen token sampled from the renormalised top-k distribution
    x = topk.astype(np.float64)
    x -= x[:, :1]
    lse = np.log(np.exp(x).sum(axis=1, keepdims=True))
    logp = x - lse
    p = np.exp(logp)
    ent = -(p * logp).sum(axis=1)
    u = rng.random(total)
    j = np.minimum((u[:, None] > np.cumsum(p, axis=1)).sum(axis=1), k - 1)
    chosen = topk[np.arange(total), j]
    denom = np.maximum(n_tok, 1)
    node_entropy = np.bincount(owner, weights=ent, minlength=m) / denom
    node_logprob = np.bincount(owner, weights=chosen.astype(np.float64), minlength=m)
    return topk, chosen, node_entropy, node_logprob
