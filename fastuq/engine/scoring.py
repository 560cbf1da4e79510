"""The main job: score a corpus chunk by chunk, one output row per input trajectory.

The entry points, and where each part of the job lives:

* :func:`score` (here): a corpus scored in memory, into one table;
* :func:`~fastuq.engine.files.score_file` (:mod:`fastuq.engine.files`): a corpus scored
  into a Parquet file, with the skip list, the report and the progress bar;
* :func:`~fastuq.engine.pipeline.iter_scores` (:mod:`fastuq.engine.pipeline`): the
  streaming pipeline both run on, chunk by chunk, and its per-chunk seams
  (:func:`~fastuq.engine.pipeline.score_table`, ...);
* :mod:`fastuq.engine.methods`: which estimators run and which columns they read;
* :mod:`fastuq.engine.checks`: the checks of the options, of every chunk and of the ids.

The names these modules took from this one are re-exported here, so that
``from fastuq.engine.scoring import score_file`` (and the others) keeps working; code inside
the package imports them from their own modules.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import pyarrow as pa

from fastuq.engine.checks import (
    CHECKS,
    SeenIds,
    Skipped,
    check_chunk,
    check_mode,
    check_reading_options,
    check_skip_options,
    structural_problems,
)
from fastuq.engine.files import ProgressBar, ScoreReport, score_file
from fastuq.engine.methods import (
    CHECKED_NODE_COLUMNS,
    available_methods,
    corpus_columns,
    left_out_methods,
    method_list,
    no_preset_methods,
    resolve_once,
)
from fastuq.engine.pipeline import (
    iter_scores,
    make_batch,
    score_checked_chunk,
    score_table,
    skip_bad_rows,
)

__all__ = ["CHECKED_NODE_COLUMNS", "CHECKS", "ProgressBar", "ScoreReport", "SeenIds",
           "Skipped", "available_methods", "check_chunk", "check_mode",
           "check_reading_options", "check_skip_options", "corpus_columns", "iter_scores",
           "left_out_methods", "make_batch", "method_list", "no_preset_methods",
           "resolve_once", "score", "score_checked_chunk", "score_file", "score_table",
           "skip_bad_rows", "structural_problems"]


def score(
    source,
    methods: str | Sequence[str] = ("sauce",),
    *,
    protocol: str | None = None,
    dtype: str | np.dtype | None = None,
    backend: str = "jax",
    chunk_rows: int = 1 << 18,
    observation_noise: float | None = None,
    math: bool = False,
    check: str = "corpus",
    device: str | None = None,
    pack: str = "auto",
    per_round: bool = False,
    **params: object,
) -> pa.Table:
    """Score a corpus in memory: a table with ``trajectory_id``, one float64 column per
    method (uncertainty; higher = less likely correct), and ``question_id``, ``protocol`` and
    ``correct`` when the corpus has them. See :func:`score_file` for the arguments; ``params`` are
    estimator parameters (``lam=``, ``q=``, ``confidence=``, ...); ``device``: ``"cpu"``,
    ``"gpu"`` or ``"auto"``/``None`` (JAX's default backend) for the kernels; ``dtype``
    (default: float32 on a GPU, float64 on a CPU) and ``pack`` (``"auto"``: the per-round
    inputs packed and checked on the device on a GPU, on the host otherwise) as in
    :func:`iter_scores`; ``per_round``: also a ``list<double>`` column ``<score>_per_round``
    per estimator whose score is defined after each round (see :func:`iter_scores`)."""
    from fastuq.engine.runtime import device_scope

    tables = []
    with device_scope(device):
        for batch, scores in iter_scores(
            source, methods=methods, protocol=protocol, params=params, dtype=dtype,
            backend=backend, chunk_rows=chunk_rows, observation_noise=observation_noise,
            math=math, check=check, pack=pack, per_round=per_round,
        ):
            cols = {"trajectory_id": batch.ids, **scores}
            for extra in ("question_id", "protocol", "correct"):
                if extra in batch.table.column_names:
                    cols[extra] = batch.column(extra)
            tables.append(pa.table(cols))
    return pa.concat_tables(tables)
