"""Scoring on a Ray cluster: the single-process engine's chunk scorer mapped over Ray Data.

``pip install 'fastuq[ray]'`` (Ray Data). Three entry points:

* :func:`score_dataset` scores a corpus (files, a folder, a glob, or any ``ray.data.Dataset``)
  on the cluster and returns two datasets: the scores (one row per scored trajectory) and the
  skipped records (``on_error="skip"``: ``source``, ``row``, ``trajectory_id``, ``reason``).
* :func:`score_to_folder` (``fastuq score --engine ray SRC -o OUT_DIR``) writes both as
  Parquet dataset folders, atomically.
* :func:`rank_metrics` computes exact AUROC and AUARC of a scores dataset.

**Same scores, same errors.** Every batch goes through the single-process engine's own steps
(:mod:`fastuq.engine.scoring`: the corpus readers' chunks, ``conform`` and ``validate``, the
vectorized skip checks, ``score_table`` and the estimators' kernels), in an actor that
compiles the JAX kernels once per worker. The files are read by the same reader
(:func:`fastuq.io.readers.iter_chunks`, one read task per file) into the same chunks of
``chunk_rows`` rows, so scores are bit-identical to ``fastuq.score`` / ``score_file`` for
the same dtype and device kind, and every error or skip reason names the same file, row,
trajectory and field. The methods are resolved (``"all"``) and the options checked once, on
the driver, on the corpus's first chunk, as the single-process run does.

**Trajectory ids are checked over the whole dataset** by a distributed pass before scoring:
the ids (only that column is read) are hashed into buckets of about a million ids, grouped by
bucket (a Ray shuffle), and each bucket finds its repeated ids, ordered by (file, row). Only
the repeats come back to the driver (memory: the repeated records, not the corpus); each
record is then scored or skipped exactly as the single-process run would: the first
occurrence is kept, every later one is a bad record ("duplicate id (first at FILE row R)", or
"(first at row R)" within one chunk). With ``on_error="raise"`` a repeat stops the run before
any scoring. Every input row therefore gives exactly one score row or one skip record.

A ``ray.data.Dataset`` that fastuq did not read has no file or row numbers: its records are
named ``ray dataset`` and numbered within the Arrow batch a worker received (the
trajectory_id identifies them), and since it has no row order to keep a first occurrence by,
every occurrence of a repeated id is a bad record. Its pipeline runs twice (the id check, then
scoring; plus its first chunk on the driver): materialize it first if it is costly.

**Which error first.** With ``on_error="raise"`` the run stops at a bad record with the
single-process message for that record; when the corpus has several, the one reported may be
another than the single-process run's first (repeated ids are found first; the chunks are
checked in parallel).

**Order.** Results keep the input order (Ray Data's ``preserve_order``), so AUARC, which
breaks score ties by row order, equals the single-process value.

**Layout.** :mod:`fastuq.ray.corpus` reads the corpus files with their provenance columns
(and maps a foreign dataset's batches); :mod:`fastuq.ray.repeats` is the distributed id
check (:data:`~fastuq.ray.repeats.BUCKET_IDS` ids per bucket); :mod:`fastuq.ray.scorer` is
the scoring actor that runs on the workers; :mod:`fastuq.ray.driver` holds
:func:`score_dataset`, :class:`RayScores` and :func:`rank_metrics`;
:mod:`fastuq.ray.folders` writes the folders (:func:`score_to_folder`,
:class:`FolderReport`); :mod:`fastuq.ray.shared` holds what they all use (the provenance
column names, :data:`SKIPPED_SCHEMA`, :data:`DATASET_SOURCE`, a worker's exception carried
to the driver, the Ray Data settings). This module only re-exports; importing it imports
neither Ray nor JAX (the entry points import Ray when called).
"""

from fastuq.ray.corpus import corpus_files
from fastuq.ray.driver import EXTRAS as EXTRAS
from fastuq.ray.driver import RayScores, rank_metrics, score_dataset
from fastuq.ray.folders import FolderReport as FolderReport
from fastuq.ray.folders import score_to_folder
from fastuq.ray.shared import DATASET_SOURCE as DATASET_SOURCE
from fastuq.ray.shared import SKIPPED_SCHEMA as SKIPPED_SCHEMA

__all__ = [
    "RayScores",
    "corpus_files",
    "rank_metrics",
    "score_dataset",
    "score_to_folder",
]
