"""Seeded simulated corpora of multi-agent reasoning rollouts (debate, DyLAN) in fastuq's
corpus schema: :mod:`fastuq.synth.rollouts` (the simulator, its model and ``main``, the
``python -m fastuq.synth`` command) and the opt-in ``belief`` column of
:mod:`fastuq.synth.beliefs`. This module only re-exports; it does not import jax.

>>> from fastuq.synth import corpus, write
>>> table = corpus(10_000, protocol="mixed", seed=1)        # pyarrow.Table, canonical columns
>>> write(table, "rollouts.parquet")                         # atomic Parquet write
"""

from fastuq._lazy import submodule_getattr
from fastuq.synth.beliefs import add_beliefs, corpus_with_beliefs
from fastuq.synth.rollouts import PROTOCOLS, corpus, corpus_chunks, main, schema, write

__all__ = ["PROTOCOLS", "add_beliefs", "corpus", "corpus_chunks", "corpus_with_beliefs",
           "main", "schema", "write"]

__getattr__ = submodule_getattr(__name__)  # its other modules load on first access
