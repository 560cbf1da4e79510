"""The seeded simulator of multi-agent reasoning rollouts (debate, DyLAN) in fastuq's corpus schema.

>>> from fastuq.synth import corpus, write  # re-exported from here
>>> table = corpus(10_000, protocol="mixed", seed=1)        # pyarrow.Table, canonical columns
>>> write(table, "rollouts.parquet")                         # atomic Parquet write

or from a shell::

    python -m fastuq.synth --n 1000000 --protocol debate --seed 0 -o debate.parquet

The model, per trajectory (one team answering one question):

- each question has a difficulty in [0, 1], an integer reference answer and a few integer
  distractors, one of which tends to dominate, so that teams can converge on a wrong answer;
- each agent is right in round 0 with a probability that falls with difficulty (plus per-run
  and per-agent noise), and otherwise gives a distractor;
- in later rounds each agent adopts the previous round's majority (the more likely the larger
  that majority), keeps its own answer, or re-derives it (slightly better than in round 0), so
  agreement rises over rounds, rightly or wrongly;
- a small fraction of responses does not parse (null answer; the agent still spoke);
- per response, the mean token entropy and the log-probability are lower when the response is
  right and on easy questions, with per-run and per-response noise: a real but imperfect signal.

Protocols: ``debate`` (all agents answer in every round) and ``dylan``, the DyLAN protocol of
SALT-NLP/DyLAN's MATH runs: agents answer one after another and the round, and the run, stop
early once the parsed answers of the ``m > floor(2A/3)`` agents asked so far hold more than
``floor(2m/3)`` equal answers; before the third round a ranker keeps the 2 best agents, who
alone answer from then on. ``mixed`` alternates them record by record (even rows debate).

Determinism: the same arguments always give the same table (generation runs in fixed chunks,
each with its own ``numpy.random.SeedSequence([seed, chunk])``). The package does not import
jax.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from collections.abc import Iterable, Iterator
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from fastuq.io.arrow_lists import offsets, parents
from fastuq.io.schema import CANONICAL
from fastuq.synth import sim

__all__ = ["PROTOCOLS", "corpus", "corpus_chunks", "main", "schema", "write"]

PROTOCOLS: tuple[str, ...] = ("debate", "dylan", "mixed")
"""Values accepted by ``corpus(protocol=...)``."""

_CHUNK = 1 << 16  # trajectories per generation chunk without top-k
_CHUNK_TOPK = 1 << 13  # ... and with top-k (a trajectory then holds ~9 x 8 x k floats)
_DEFAULT_AGENTS = {"debate": 3, "dylan": 4}
_PROTO_CODE = {"debate": 0, "dylan": 1}


def schema(topk: bool = False) -> pa.Schema:
    """The Arrow schema of ``corpus``'s tables (with the two token columns when ``topk``):
    canonical columns (:data:`fastuq.io.schema.CANONICAL`) in a fixed order."""
    names = ["trajectory_id", "question_id", "protocol", "n_agents", "reference",
             "final_answer", "correct", "agreement", "token_entropy", "answers", "seq_logprob",
             "n_tokens"]
    if topk:
        names += ["token_logprobs", "topk_logprobs"]
    names.append("flags")
    return pa.schema([CANONICAL.field(name) for name in names])


def corpus(
    n: int,
    *,
    protocol: str = "debate",
    seed: int = 0,
    n_agents: int | None = None,
    n_rounds: int = 3,
    topk: int = 0,
    n_tokens_mean: float | None = None,
    questions_per_id: int = 1,
    n_distractors: int = 3,
    p_unparsed: float = 0.03,
) -> pa.Table:
    """Simulate ``n`` trajectories as one table in the canonical corpus columns.

    Args:
        n: number of trajectories (rows), >= 0.
        protocol: ``"debate"``, ``"dylan"`` or ``"mixed"`` (rows alternate debate, dylan, ...).
        seed: non-negative seed; equal arguments give equal tables, other seeds other tables.
        n_agents: initial team size ``A`` (slots per round); default 3 for debate and 4 for
            DyLAN (for ``mixed`` the default applies per protocol).
        n_rounds: rounds per debate; the round cap ``T`` of DyLAN (which may stop earlier).
        topk: when > 0, add ``token_logprobs`` ``[round][agent][token]`` and ``topk_logprobs``
            ``[round][agent][token][k]`` (float32, natural log, each token's k values <= 0 and
            descending); entropies and log-probs are then computed from them exactly.
        n_tokens_mean: mean response length in tokens; default 200 without top-k, 8 with.
        questions_per_id: ``K`` consecutive trajectories share one ``question_id``
            (best-of-K corpora).
        n_distractors: wrong answers available per question (1..100).
        p_unparsed: probability that a response's answer does not parse (null answer).

    Returns:
        ``pyarrow.Table`` with ``schema(topk > 0)``, one row per trajectory; per row
        ``agreement`` and ``token_entropy`` have one float64 per executed round (agreement is
        the modal count of parsed answers over ``n_agents``, token entropy in nats is the mean
        over the round's speaking agents of their per-response mean token entropy);
        ``answers``, ``seq_logprob`` (sum of token log-probs, nats, <= 0) and ``n_tokens`` are
        ``[round][agent]`` with ``n_agents`` slots per round, null where the agent did not
        speak (and, for answers, where the answer did not parse); ``final_answer`` is the
        modal parsed answer of the last round (ties: the first agent's, in slot order), and
        ``correct`` is ``final_answer == reference``. The table may hold several chunks.
    """
    chunks = list(corpus_chunks(
        n, protocol=protocol, seed=seed, n_agents=n_agents, n_rounds=n_rounds, topk=topk,
        n_tokens_mean=n_tokens_mean, questions_per_id=questions_per_id,
        n_distractors=n_distractors, p_unparsed=p_unparsed))
    if not chunks:
        return schema(topk > 0).empty_table()
    return pa.concat_tables(chunks)


def corpus_chunks(
    n: int,
    *,
    protocol: str = "debate",
    seed: int = 0,
    n_agents: int | None = None,
    n_rounds: int = 3,
    topk: int = 0,
    n_tokens_mean: float | None = None,
    questions_per_id: int = 1,
    n_distractors: int = 3,
    p_unparsed: float = 0.03,
) -> Iterator[pa.Table]:
    """``corpus``'s table as a stream of consecutive tables, for corpora larger than memory.

    Same arguments and same rows as ``corpus`` (concatenated, the chunks equal it); each chunk
    holds at most 65,536 trajectories (8,192 with ``topk``), rounded up to a multiple of
    ``questions_per_id``.
    """
    _check(n, protocol, seed, n_agents, n_rounds, topk, n_tokens_mean, questions_per_id,
           n_distractors, p_unparsed)
    if n_tokens_mean is None:
        n_tokens_mean = 8.0 if topk else 200.0
    base = _CHUNK_TOPK if topk else _CHUNK
    size = -(-base // questions_per_id) * questions_per_id
    width = max(6, len(str(max(n - 1, 0))))
    qwidth = max(6, len(str(max((n - 1) // questions_per_id, 0))))

    def gen() -> Iterator[pa.Table]:
        for c, start in enumerate(range(0, n, size)):
            stop = min(start + size, n)
            rng = np.random.default_rng(np.random.SeedSequence([int(seed), c]))
            yield _chunk(rng, start, stop, protocol, n_agents, n_rounds, topk,
                         float(n_tokens_mean), questions_per_id, n_distractors, p_unparsed,
                         width, qwidth)

    return gen()


def _check(n: int, protocol: str, seed: int, n_agents: int | None, n_rounds: int, topk: int,
           n_tokens_mean: float | None, questions_per_id: int, n_distractors: int,
           p_unparsed: float) -> None:
    if not isinstance(n, (int, np.integer)) or n < 0:
        raise ValueError(f"synth: n must be a non-negative integer, got {n!r}")
    if protocol not in PROTOCOLS:
        raise ValueError(f"synth: protocol must be one of {PROTOCOLS}, got {protocol!r}")
    if not isinstance(seed, (int, np.integer)) or seed < 0:
        raise ValueError(f"synth: seed must be a non-negative integer, got {seed!r}")
    if n_agents is not None and not 1 <= n_agents <= 64:
        raise ValueError(f"synth: n_agents must be in 1..64, got {n_agents!r}")
    if not 1 <= n_rounds <= 64:
        raise ValueError(f"synth: n_rounds must be in 1..64, got {n_rounds!r}")
    if not 0 <= topk <= 64:
        raise ValueError(f"synth: topk must be in 0..64, got {topk!r}")
    if n_tokens_mean is not None and not n_tokens_mean >= 1:
        raise ValueError(f"synth: n_tokens_mean must be >= 1, got {n_tokens_mean!r}")
    if questions_per_id < 1:
        raise ValueError(f"synth: questions_per_id must be >= 1, got {questions_per_id!r}")
    if not 1 <= n_distractors <= 100:
        raise ValueError(f"synth: n_distractors must be in 1..100, got {n_distractors!r}")
    if not 0 <= p_unparsed < 1:
        raise ValueError(f"synth: p_unparsed must be in [0, 1), got {p_unparsed!r}")


def _chunk(rng: np.random.Generator, start: int, stop: int, protocol: str,
           n_agents: int | None, n_rounds: int, topk: int, n_tokens_mean: float,
           per_id: int, n_distractors: int, p_unparsed: float, width: int,
           qwidth: int) -> pa.Table:
    n = stop - start
    n_q = -(-n // per_id)
    q = sim.questions(rng, start // per_id, n_q, per_id, n_distractors)
    if protocol == "mixed":
        proto = ((np.arange(start, stop) % 2) == 1).astype(np.int8)
    else:
        proto = np.full(n, _PROTO_CODE[protocol], dtype=np.int8)
    q = sim.Questions(q.qidx[:n], q.difficulty[:n], q.values[:n], q.wcum[:n])

    parts = []
    for name, code in _PROTO_CODE.items():
        idx = np.nonzero(proto == code)[0]
        if idx.size == 0:
            continue
        a_n = n_agents if n_agents is not None else _DEFAULT_AGENTS[name]
        sub = sim.Questions(q.qidx[idx], q.difficulty[idx], q.values[idx], q.wcum[idx])
        run = sim.debate if name == "debate" else sim.dylan
        parts.append((idx, run(rng, sub, a_n, n_rounds, p_unparsed)))
    a_max = max(r.codes.shape[2] for _, r in parts)
    if len(parts) == 1 and parts[0][1].codes.shape[2] == a_max:
        r = parts[0][1]
        codes, speak, parsed, rounds, slots = r.codes, r.speak, r.parsed, r.rounds, r.slots
    else:
        codes = np.zeros((n, n_rounds, a_max), dtype=np.int8)
        speak = np.zeros((n, n_rounds, a_max), dtype=bool)
        parsed = np.zeros((n, n_rounds, a_max), dtype=bool)
        rounds = np.zeros(n, dtype=np.int32)
        slots = np.zeros(n, dtype=np.int32)
        for idx, r in parts:
            a_n = r.codes.shape[2]
            codes[idx, :, :a_n] = r.codes
            speak[idx, :, :a_n] = r.speak
            parsed[idx, :, :a_n] = r.parsed
            rounds[idx] = r.rounds
            slots[idx] = r.slots
    voted = speak & parsed
    n_codes = n_distractors + 1

    # per round agreement, per trajectory final answer (dense, then flattened)
    agree = np.zeros((n, n_rounds))
    for t in range(n_rounds):
        _, top = sim.mode(codes[:, t], voted[:, t], n_codes)
        agree[:, t] = top / slots
    last = rounds - 1
    rows = np.arange(n)
    final_code, _ = sim.mode(codes[rows, last], voted[rows, last], n_codes)

    # node signals (dense), then everything flattened in [record][round][slot] order
    h, nll, n_tok = sim.node_signals(rng, codes == 0, q.difficulty, n_tokens_mean)
    t_idx = np.arange(n_rounds)[None, :, None]
    a_idx = np.arange(a_max)[None, None, :]
    inl = (t_idx < rounds[:, None, None]) & (a_idx < slots[:, None, None])
    f_speak = speak[inl]
    f_voted = voted[inl]
    f_h = h[inl]
    f_ntok = n_tok[inl]
    f_lp = -(nll[inl] * f_ntok)
    round_len = np.repeat(slots, rounds)  # slots per executed round
    node_off = offsets(round_len, np.int32)
    round_off = offsets(rounds, np.int32)
    owner_round = parents(round_len)
    f_record = parents(rounds * slots)

    extra = {}
    if topk:
        ntok_eff = np.where(f_speak, f_ntok, 0)
        topv, chosen, node_ent, node_lp = sim.tokens(rng, f_h, ntok_eff, topk)
        f_h, f_lp = node_ent, node_lp
        tok_off = offsets(ntok_eff, np.int32)
        k_off = np.arange(0, topv.size + 1, topk, dtype=np.int32)
        mask = pa.array(~f_speak)
        chosen_lists = pa.ListArray.from_arrays(tok_off, pa.array(chosen), mask=mask)
        topk_tok = pa.ListArray.from_arrays(k_off, pa.array(topv.reshape(-1)))
        topk_lists = pa.ListArray.from_arrays(tok_off, topk_tok, mask=mask)
        extra["token_logprobs"] = _nest(chosen_lists, node_off, round_off)
        extra["topk_logprobs"] = _nest(topk_lists, node_off, round_off)

    ent_sum = np.bincount(owner_round, weights=np.where(f_speak, f_h, 0.0),
                          minlength=round_len.size)
    ent_cnt = np.bincount(owner_round, weights=f_speak, minlength=round_len.size)
    round_ent = ent_sum / ent_cnt

    values = q.values
    ans_val = values[f_record, codes[inl]]
    answers = pc.cast(pa.array(ans_val, mask=~f_voted), pa.string())
    in_round = t_idx[0, :, 0][None, :] < rounds[:, None]

    ids = np.arange(start, stop, dtype=np.int64)
    cols = {
        "trajectory_id": _ids("t", ids, width),
        "question_id": _ids("q", q.qidx, qwidth),
        "protocol": pc.take(pa.array(list(_PROTO_CODE)), pa.array(proto)),
        "n_agents": pa.array(slots, pa.int32()),
        "reference": pc.cast(pa.array(values[:, 0]), pa.string()),
        "final_answer": pc.cast(pa.array(values[rows, final_code]), pa.string()),
        "correct": pa.array(final_code == 0),
        "agreement": pa.ListArray.from_arrays(round_off, pa.array(agree[in_round])),
        "token_entropy": pa.ListArray.from_arrays(round_off, pa.array(round_ent)),
        "answers": _nest(answers, node_off, round_off),
        "seq_logprob": _nest(pa.array(f_lp, mask=~f_speak), node_off, round_off),
        "n_tokens": _nest(pa.array(f_ntok, pa.int32(), mask=~f_speak), node_off, round_off),
        **extra,
        "flags": pa.ListArray.from_arrays(np.zeros(n + 1, np.int32), pa.array([], pa.string())),
    }
    return pa.Table.from_pydict(cols, schema=schema(topk > 0))


def _nest(nodes: pa.Array, node_off: np.ndarray, round_off: np.ndarray) -> pa.ListArray:
    """Flat node values -> list (per round, one per slot) -> list (per record)."""
    per_round = pa.ListArray.from_arrays(node_off, nodes)
    return pa.ListArray.from_arrays(round_off, per_round)


def _ids(prefix: str, nums: np.ndarray, width: int) -> pa.Array:
    s = pc.utf8_lpad(pc.cast(pa.array(nums), pa.string()), width=width, padding="0")
    return pc.utf8_replace_slice(s, start=0, stop=0, replacement=prefix)


def write(table: pa.Table | Iterable[pa.Table], path: str | os.PathLike[str], *,
          compression: str = "zstd") -> Path:
    """Write a table (or a stream of same-schema tables) to Parquet atomically.

    The data goes to a temporary file in the destination folder, which then replaces ``path``
    (``os.replace``), so readers never see a partial file. Returns the path written.
    """
    from fastuq.io.writers import AtomicParquetWriter

    tables = iter([table]) if isinstance(table, pa.Table) else iter(table)
    first = next(tables, None)
    if first is None:
        raise ValueError(f"synth.write: no table to write to {path}")
    with AtomicParquetWriter(path, first.schema, compression=compression) as writer:
        writer.write(first)
        for part in tables:
            writer.write(part)
    return Path(path)


def main(argv: list[str] | None = None) -> int:
    """Command line: ``python -m fastuq.synth --n N --protocol P --seed S -o OUT.parquet``."""
    ap = argparse.ArgumentParser(prog="python -m fastuq.synth",
                                 description="Simulate multi-agent rollouts to Parquet.")
    ap.add_argument("--n", type=int, required=True, help="number of trajectories")
    ap.add_argument("--protocol", choices=PROTOCOLS, default="debate")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--topk", type=int, default=0, help="top-k log-probs per token (0: none)")
    ap.add_argument("--n-agents", type=int, default=None)
    ap.add_argument("--n-rounds", type=int, default=3)
    ap.add_argument("--n-tokens-mean", type=float, default=None)
    ap.add_argument("--questions-per-id", type=int, default=1)
    ap.add_argument("-o", "--out", required=True, help="output Parquet path")
    args = ap.parse_args(argv)
    t0 = time.perf_counter()
    try:
        chunks = corpus_chunks(args.n, protocol=args.protocol, seed=args.seed, topk=args.topk,
                               n_agents=args.n_agents, n_rounds=args.n_rounds,
                               n_tokens_mean=args.n_tokens_mean,
                               questions_per_id=args.questions_per_id)
        first = next(chunks, None)
        if first is None:
            out = write(schema(args.topk > 0).empty_table(), args.out)
        else:
            out = write(_chain(first, chunks), args.out)
    except ValueError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    print(f"wrote {args.n} trajectories to {out} in {time.perf_counter() - t0:.2f} s")
    return 0


def _chain(first: pa.Table, rest: Iterator[pa.Table]) -> Iterator[pa.Table]:
    yield first
    yield from rest
