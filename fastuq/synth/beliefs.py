"""Simulated agent beliefs: an opt-in ``belief`` column for :mod:`fastuq.synth` corpora.

>>> from fastuq.synth.beliefs import corpus_with_beliefs
>>> table = corpus_with_beliefs(10_000, protocol="mixed", seed=1)   # + belief [round][agent]

The default corpora (:func:`fastuq.synth.corpus`) are left exactly as they are: the beliefs
are drawn afterwards, from a random stream of their own, so a corpus with beliefs holds the
same values in every other column as the corpus without them.

The model, per node whose agent spoke (``belief`` is null where the agent did not speak,
like every node column; an agent whose answer did not parse still has a belief)::

    logit = B0 + B_RIGHT * right + B_SHARE * (share - 1/2) - B_NLL * log(nll / NLL_REF)
            + run noise (per trajectory) + node noise
    belief = sigmoid(logit)

``right``: the node's answer equals the reference; ``share``: the fraction of the round's
parsed answers equal to the node's own (0 when its answer did not parse); ``nll``: the node's
mean negative log-probability per token (``-seq_logprob / n_tokens``, when the table has
them), itself lower when the response is right and the question easy. Agents are
overconfident on average (mean belief about 0.8 when right, 0.6 when wrong) and the noise
keeps the signal real but imperfect: belief-weighted consensus ranks correctness somewhat
better than chance, not perfectly.

Determinism: :func:`add_beliefs` draws from ``numpy.random.SeedSequence([seed, chunk,
STREAM])``; :func:`corpus_chunks_with_beliefs` numbers the chunks of
:func:`fastuq.synth.corpus_chunks` (whose boundaries depend only on the arguments), so equal
arguments give equal tables. Vectorized over nodes: no loop runs over trajectories.
"""

from __future__ import annotations

from collections.abc import Iterator

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from fastuq.io.arrow_lists import combined, list_lengths, offsets
from fastuq.synth.rollouts import corpus, corpus_chunks

__all__ = ["STREAM", "add_beliefs", "corpus_chunks_with_beliefs", "corpus_with_beliefs"]

#: Third word of the beliefs' seed sequence (keeps their stream apart from the corpus's).
STREAM = 0xBE11EF

_B0 = 0.55  # logit of a wrong, unsupported (share 1/2), typical-NLL answer
_B_RIGHT = 0.9  # logit gained when the answer is right
_B_SHARE = 1.2  # logit gained per unit of the answer's vote share in its round
_B_NLL = 0.8  # logit lost per unit of log(nll / NLL_REF)
_NLL_REF = 0.3  # typical mean NLL per token (nats) of a response
_RUN_SD = 0.5  # per trajectory offset (a model's calibration varies by run)
_NODE_SD = 0.8  # per response noise


def add_beliefs(table: pa.Table, *, seed: int = 0, chunk: int = 0) -> pa.Table:
    """``table`` with a ``belief`` column (``list<list<float64>>``, ``[round][agent]`` in
    [0, 1], the slots of ``answers``), inserted before ``flags`` (else appended).

    Args:
      table: canonical columns with ``answers`` and ``reference``; ``seq_logprob`` and
        ``n_tokens`` are used when present (who spoke, and the NLL term).
      seed, chunk: the beliefs' random stream, ``SeedSequence([seed, chunk, STREAM])``.

    Raises:
      ValueError: ``table`` lacks ``answers`` or ``reference``, or already has ``belief``.
    """
    for name in ("answers", "reference"):
        if name not in table.column_names:
            raise ValueError(f"add_beliefs: the table has no {name} column")
    if "belief" in table.column_names:
        raise ValueError("add_beliefs: the table already has a belief column")
    rng = np.random.default_rng(np.random.SeedSequence([int(seed), int(chunk), STREAM]))
    answers = combined(table.column("answers"))
    traj_len, traj_valid = list_lengths(answers)
    rounds = pc.list_flatten(answers)
    round_len, _ = list_lengths(rounds)
    flat = pc.list_flatten(rounds).cast(pa.string())
    n = len(answers)
    record = np.repeat(np.repeat(np.arange(n), traj_len), round_len)  # [S] leaf -> record
    round_of = np.repeat(np.arange(len(rounds)), round_len)  # [S] leaf -> round

    parsed = flat.is_valid().to_numpy(zero_copy_only=False)
    spoke = parsed
    nll_term = np.zeros(len(flat))
    if "seq_logprob" in table.column_names:
        lp = pc.list_flatten(pc.list_flatten(combined(table.column("seq_logprob"))))
        spoke = lp.is_valid().to_numpy(zero_copy_only=False) | parsed
        if "n_tokens" in table.column_names:
            ntok = pc.list_flatten(pc.list_flatten(combined(table.column("n_tokens"))))
            lp_np = lp.fill_null(0.0).to_numpy(zero_copy_only=False).astype(np.float64)
            nt_np = ntok.fill_null(1).to_numpy(zero_copy_only=False).astype(np.float64)
            nll = np.maximum(-lp_np / np.maximum(nt_np, 1.0), 1e-6)
            nll_term = np.where(spoke, np.log(nll / _NLL_REF), 0.0)

    reference = combined(table.column("reference")).cast(pa.string())
    right = pc.equal(flat, pc.take(reference, pa.array(record))).fill_null(False)
    right = right.to_numpy(zero_copy_only=False)

    # each parsed answer's share of its round's parsed answers
    codes = pc.dictionary_encode(flat).indices.fill_null(-1).to_numpy(zero_copy_only=False)
    codes = codes.astype(np.int64)
    voters = np.bincount(round_of[parsed], minlength=len(rounds))
    key = round_of[parsed] * (int(codes.max(initial=-1)) + 2) + codes[parsed]
    _, inverse, counts = np.unique(key, return_inverse=True, return_counts=True)
    share = np.zeros(len(flat))
    share[parsed] = counts[inverse.ravel()] / voters[round_of[parsed]]

    run = rng.standard_normal(n)[record] * _RUN_SD
    logit = (_B0 + _B_RIGHT * right + _B_SHARE * (share - 0.5) - _B_NLL * nll_term + run
             + _NODE_SD * rng.standard_normal(len(flat)))
    belief = 1.0 / (1.0 + np.exp(-logit))

    inner = pa.ListArray.from_arrays(offsets(round_len, np.int32),
                                     pa.array(belief, pa.float64(), mask=~spoke))
    column = pa.ListArray.from_arrays(offsets(traj_len, np.int32), inner,
                                      mask=pa.array(~traj_valid))
    at = (table.column_names.index("flags") if "flags" in table.column_names
          else table.num_columns)
    return table.add_column(at, _field(), column.cast(_field().type))


def corpus_chunks_with_beliefs(n: int, *, seed: int = 0, **kwargs) -> Iterator[pa.Table]:
    """:func:`fastuq.synth.corpus_chunks` (the same arguments) with :func:`add_beliefs`
    applied to chunk ``c`` as ``add_beliefs(chunk, seed=seed, chunk=c)``."""
    for c, table in enumerate(corpus_chunks(n, seed=seed, **kwargs)):
        yield add_beliefs(table, seed=seed, chunk=c)


def corpus_with_beliefs(n: int, *, seed: int = 0, **kwargs) -> pa.Table:
    """:func:`fastuq.synth.corpus` (the same arguments and, column by column, the same
    values) with a ``belief`` column: see :func:`add_beliefs`."""
    chunks = list(corpus_chunks_with_beliefs(n, seed=seed, **kwargs))
    if not chunks:
        empty = corpus(0, seed=seed, **kwargs)
        return empty.add_column(empty.column_names.index("flags"), _field(),
                                pa.array([], _field().type))
    return pa.concat_tables(chunks)


def _field() -> pa.Field:
    from fastuq.io.schema import CANONICAL

    return CANONICAL.field("belief")
