"""The labels of a corpus and a scores file (``trajectory_id`` + score columns), joined by
``trajectory_id`` in corpus order (:func:`read_labels`, :func:`read_scores`,
:func:`join_labels`), with an error naming the first id that is scored but unlabelled,
labelled but unscored, or duplicated; and the skipped records a scoring run listed
(:func:`read_skipped`, :func:`drop_skipped`). Nothing here imports JAX.
"""

from __future__ import annotations

import json
import os
from collections.abc import Sequence
from pathlib import Path

import polars as pl
import pyarrow as pa

from fastuq.evaluation.tables import NOT_SCORES

__all__ = ["drop_skipped", "join_labels", "read_labels", "read_scores", "read_skipped"]


def read_labels(corpus: str | os.PathLike, *, chunk_rows: int = 1 << 18) -> pl.DataFrame:
    """``trajectory_id`` (str), ``correct`` (bool) and, when the corpus has it, ``protocol``
    (str) of every record of a corpus, in input order, read by
    :func:`fastuq.io.readers.iter_chunks` as :func:`fastuq.score` reads it (the SAUCE release's
    ``record_uid`` is its ``trajectory_id``).

    Raises ValueError when the corpus has no ``correct`` labels at all (no such field, or
    every value null); rows with a null label are kept as null (see :func:`join_labels`).
    """
    from fastuq.io.readers import iter_chunks

    ids: list[pa.Array] = []
    correct: list[pa.Array] = []
    protocol: list[pa.Array] = []
    for chunk in iter_chunks(corpus, columns=[], optional_columns=["correct", "protocol"],
                             chunk_rows=chunk_rows, validate=False):
        table = chunk.table
        ids.append(table.column("trajectory_id").combine_chunks())
        if "correct" in table.column_names:
            correct.append(table.column("correct").combine_chunks().cast(pa.bool_()))
        else:
            correct.append(pa.nulls(table.num_rows, pa.bool_()))
        if "protocol" in table.column_names:
            protocol.append(table.column("protocol").combine_chunks().cast(pa.string()))
        else:
            protocol.append(pa.nulls(table.num_rows, pa.string()))
    columns = {
        "trajectory_id": pl.Series(pa.chunked_array(ids, pa.string())),
        "correct": pl.Series(pa.chunked_array(correct, pa.bool_())),
    }
    protocol_col = pa.chunked_array(protocol, pa.string())
    if protocol_col.null_count < len(protocol_col):
        columns["protocol"] = pl.Series(protocol_col)
    df = pl.DataFrame(columns)
    _require_labels(df, str(corpus))
    return df


def _require_labels(df: pl.DataFrame, source: str) -> None:
    if df.height and df["correct"].null_count() == df.height:
        raise ValueError(
            f"{source}: no labels: the corpus has no 'correct' values (field correct, bool, "
            f"True = correct); evaluation needs them"
        )
    if df.height == 0:
        raise ValueError(f"{source}: the corpus is empty; nothing to evaluate")


def read_scores(
    path: str | os.PathLike, methods: Sequence[str] | None = None
) -> pl.DataFrame:
    """A scores file (Parquet, CSV or Arrow IPC) as ``trajectory_id`` (str) + score columns.

    ``methods``: the score columns to keep, in that order (ValueError naming a missing one);
    ``None`` or ``["all"]``: every numeric column other than ``trajectory_id``,
    ``question_id``, ``protocol`` and ``correct``.
    """
    path = Path(path)
    if not path.exists():
        raise FileNotFoundError(f"{path}: no such file")
    name = path.name.lower()
    if name.endswith((".jsonl", ".json", ".jsonl.gz", ".json.gz", ".ndjson")):
        raise ValueError(f"{path}: a scores file is Parquet, CSV or Arrow IPC, not JSON lines "
                         "(fastuq score -o writes Parquet)")
    try:
        if name.endswith(".csv"):
            df = pl.read_csv(path, schema_overrides={"trajectory_id": pl.String})
        elif name.endswith((".arrow", ".feather", ".ipc")):
            df = pl.read_ipc(path, memory_map=False)
        else:
            df = pl.read_parquet(path)
    except (pl.exceptions.PolarsError, OSError) as exc:
        kind = ("CSV" if name.endswith(".csv") else "Arrow IPC"
                if name.endswith((".arrow", ".feather", ".ipc")) else "Parquet")
        raise ValueError(f"{path}: cannot read it as a {kind} scores file (a scores file is "
                         f"Parquet, CSV or Arrow IPC): {str(exc).splitlines()[0]}") from None
    if "trajectory_id" not in df.columns:
        raise ValueError(f"{path}: no trajectory_id column (columns: {', '.join(df.columns)})")
    numeric = [c for c in df.columns if c not in NOT_SCORES and df.schema[c].is_numeric()]
    if methods is None or list(methods) == ["all"]:
        if not numeric:
            raise ValueError(f"{path}: no numeric score column besides trajectory_id")
        keep = numeric
    else:
        keep = list(methods)
        for m in keep:
            if m not in df.columns:
                raise ValueError(
                    f"{path}: no score column {m!r} (score columns: {', '.join(numeric)})"
                )
            if m not in numeric:
                raise ValueError(f"{path}: column {m!r} is {df.schema[m]}, not a number")
    return df.select(pl.col("trajectory_id").cast(pl.String), *keep)


def _first_duplicate(ids: pl.Series, what: str) -> None:
    dup = ids.is_duplicated()
    if dup.any():
        first = ids.filter(dup)[0]
        rows = (ids == first).arg_true().to_list()
        raise ValueError(
            f"duplicate trajectory_id {first!r} in the {what} (rows {rows[0]} and {rows[1]}); "
            f"ids must be unique to join scores to labels"
        )


def read_skipped(path: str | os.PathLike) -> list[str | None]:
    """Trajectory ids of a skipped-records list (``fastuq score --on-error skip`` writes one
    JSON object per line with ``source``, ``row``, ``trajectory_id``, ``reason``), in file
    order; ``None`` for a record that had no id. Raises ValueError naming the line."""
    path = Path(path)
    if not path.exists():
        raise FileNotFoundError(f"{path}: no such file (the skipped list of a skip run)")
    ids: list[str | None] = []
    for k, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
        if not line.strip():
            continue
        try:
            rec = json.loads(line)
        except json.JSONDecodeError as exc:
            raise ValueError(f"{path}: line {k}: not valid JSON: {exc}") from None
        if not isinstance(rec, dict) or "trajectory_id" not in rec:
            raise ValueError(f"{path}: line {k}: expected an object with a trajectory_id "
                             "(a skipped list from --on-error skip)")
        tid = rec["trajectory_id"]
        ids.append(None if tid is None else str(tid))
    return ids


def drop_skipped(
    labels: pl.DataFrame, scores: pl.DataFrame, skipped_ids: Sequence[str | None]
) -> pl.DataFrame:
    """``labels`` without the records a skip run left out: rows whose id is in
    ``skipped_ids`` and not scored, repeats (after the first) of an id in ``skipped_ids``
    (a skipped duplicate), and null ids when the list holds a record without an id. Every
    other row stays, so a corpus id missing from ``scores`` and not in the list is still an
    error in :func:`join_labels`."""
    named = [s for s in skipped_ids if s is not None]
    ids = labels["trajectory_id"]
    in_list = ids.is_in(pl.Series(named, dtype=pl.String).implode()).fill_null(False)
    scored = ids.is_in(scores["trajectory_id"].implode()).fill_null(False)
    drop = in_list & (~scored | ~ids.is_first_distinct())
    if len(named) < len(skipped_ids):
        drop = drop | ids.is_null()
    return labels.filter(~drop)


def join_labels(labels: pl.DataFrame, scores: pl.DataFrame) -> pl.DataFrame:
    """Join ``scores`` (``trajectory_id`` + score columns) to ``labels`` (``trajectory_id``,
    ``correct``, optionally ``protocol``) by id: those columns and the score columns, one row per
    trajectory in the labels' (corpus) order, whatever the order of the scores -- so AUARC's
    stable tie order is the corpus file order, as when scoring the corpus directly. (For a
    skip run's scores, pass ``labels`` through :func:`drop_skipped` first.)

    Raises ValueError naming the first offending id when an id is null or duplicated (in
    either table), scored but absent from the labels, labelled but unscored, or scored with
    a null label.
    """
    for df, what in ((labels, "corpus"), (scores, "scores")):
        ids = df["trajectory_id"]
        if ids.null_count():
            row = int(ids.is_null().arg_true()[0])
            raise ValueError(f"row {row} of the {what} has no trajectory_id")
        _first_duplicate(ids, what)
    keep = [c for c in ("trajectory_id", "correct", "protocol") if c in labels.columns]
    lab = labels.select(keep).with_row_index("_row")
    extra = scores.join(lab, on="trajectory_id", how="anti")
    if extra.height:
        raise ValueError(
            f"trajectory {extra['trajectory_id'][0]!r} is scored but not in the corpus "
            f"({extra.height} scored id(s) without a label)"
        )
    unscored = lab.join(scores, on="trajectory_id", how="anti")
    if unscored.height:
        raise ValueError(
            f"trajectory {unscored['trajectory_id'][0]!r} of the corpus has no score "
            f"({unscored.height} of {lab.height} trajectories unscored)"
        )
    joined = lab.join(scores, on="trajectory_id", how="inner").sort("_row").drop("_row")
    nulls = joined["correct"].is_null()
    if nulls.any():
        raise ValueError(
            f"trajectory {joined.filter(nulls)['trajectory_id'][0]!r} has no label "
            f"(field correct is null; {int(nulls.sum())} unlabelled)"
        )
    return joined
