"""Per-round signals from one round's responses: agreement and token entropy (scalar API).

These are the seed package's helpers, exact and per record. The corpus-scale builders that
compute the same numbers over whole Arrow columns live with the readers.
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Sequence

__all__ = ["compute_token_entropy", "majority_margin"]


def majority_margin(parsed_answers: Sequence[str | None], n_agents: int | None = None) -> float:
    """Agreement of one round: the modal count of parsed answers over the initial team size.

    Args:
      parsed_answers: one parsed answer per agent that spoke; ``None`` or ``""`` marks an
        unparseable response, which casts no vote but stays in the denominator.
      n_agents: the initial team size (defaults to ``len(parsed_answers)``). Pass it after
        DyLAN pruning: two unanimous survivors of three agents give 2/3.

    Returns:
      float in [0, 1]: 0.0 for a round in which no answer parses (no agent holds a parsed
      answer), as the importers and ``fastuq.signals.agreement_from_answers`` give it.

    Raises:
      ValueError: ``n_agents`` is not a positive integer or is smaller than the number of
        responses, or an answer is neither a string nor ``None``.
    """
    if n_agents is None:
        n_agents = len(parsed_answers)
    if isinstance(n_agents, bool) or not isinstance(n_agents, int) or n_agents <= 0:
        raise ValueError(f"n_agents must be a positive integer, got {n_agents!r}")
    if len(parsed_answers) > n_agents:
        raise ValueError(
            f"n_agents ({n_agents}) cannot be smaller than the number of responses "
            f"({len(parsed_answers)})"
        )
    votes: Counter[str] = Counter()
    for k, answer in enumerate(parsed_answers):
        if answer is None or answer == "":
            continue
        if not isinstance(answer, str):
            raise ValueError(f"parsed_answers[{k}] must be a string or None, got {answer!r}")
        votes[answer] += 1
    if not votes:
        return 0.0
    return max(votes.values()) / n_agents


def compute_token_entropy(topk_logprobs: Sequence[Sequence[float]]) -> float:
    """Mean token entropy (nats) of one response from its returned top-k log-probabilities.

    Args:
      topk_logprobs: ``[n_tokens][k]`` log-probabilities (<= 0; ``-inf`` is probability 0).
        Each token's alternatives are renormalised (a softmax over the k values) before the
        entropy ``-sum p log p`` is taken; the result is the mean over tokens.

    Raises:
      ValueError: no tokens, a token without alternatives or without a finite value, a value
        that is NaN or positive, or a non-numeric value. Missing measurements are never read
        as zero entropy.
    """
    if topk_logprobs is None or len(topk_logprobs) == 0:
        raise ValueError("topk_logprobs must contain at least one measured token")
    total = 0.0
    for t, token in enumerate(topk_logprobs):
        if token is None or len(token) == 0:
            raise ValueError(f"token {t} has no log-probabilities")
        try:
            values = [float(v) for v in token]
        except (TypeError, ValueError) as exc:
            raise ValueError(f"token {t} holds a non-numeric log-probability") from exc
        if any(math.isnan(v) or v > 0.0 for v in values):
            raise ValueError(f"token {t}: log-probabilities must be <= 0 and not NaN")
        top = max(values)
        if not math.isfinite(top):
            raise ValueError(f"token {t} has no finite log-probability")
        weights = [math.exp(v - top) for v in values]
        norm = sum(weights)
        entropy = 0.0
        for w in weights:
            p = w / norm
            if p > 0.0:
                entropy -= p * math.log(p)
        total += entropy
    return total / len(topk_logprobs)
