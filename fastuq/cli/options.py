"""What ``eval``, ``select``, ``fit`` and ``sweep`` share with ``score``: ``--on-error skip``
(through :func:`fastuq.engine.scoring.iter_scores`'s skip machinery), ``--observation-noise``,
``--params`` (per-protocol SAUCE parameters from ``fastuq fit -o``) and a progress bar."""

from __future__ import annotations

import argparse
import json
import os
import sys
from collections.abc import Callable, Iterable, Mapping, Sequence
from pathlib import Path

from fastuq.engine.scoring import ProgressBar, Skipped


def add_options(p, *, noise: bool = True, params: bool = False) -> None:
    """Add ``--on-error``, ``--skipped``, ``--progress`` (and ``--observation-noise``,
    ``--params``) to the subparser ``p``."""
    if noise:
        p.add_argument("--observation-noise", type=float, metavar="R",
                       help="constant measurement noise R_t for corpora without token entropy "
                            "(SAUCE on agreement alone); without it missing entropy is an error")
    if params:
        p.add_argument("--params", metavar="PARAMS.json",
                       help="per-protocol SAUCE parameters written by 'fastuq fit -o'; a "
                            "protocol the file does not name keeps its preset (printed)")
    p.add_argument("--on-error", choices=("raise", "skip"), default="raise",
                   help="a bad record stops the run (raise, default) or is skipped, counted "
                        "and listed with its reason (skip; see --skipped)")
    p.add_argument("--skipped", metavar="PATH",
                   help="where --on-error skip lists the skipped records (default: OUT."
                        "skipped.jsonl beside -o OUT, else CORPUS_NAME.skipped.jsonl in the "
                        "current folder)")
    add_check(p)
    p.add_argument("--progress", action=argparse.BooleanOptionalAction, default=None,
                   help="progress bar on stderr (default: when stderr is a terminal)")


def add_check(p) -> None:
    """Add ``--check {corpus,used}`` (which columns every record is checked against)."""
    p.add_argument("--check", choices=("corpus", "used"), default="corpus",
                   help="check every record against every column the corpus has (corpus, "
                        "default; the per-token columns and texts only when a method uses "
                        "them) or only against the columns the methods read (used: faster "
                        "when the corpus has node columns the methods do not use)")


class Progress(ProgressBar):
    """:class:`fastuq.engine.scoring.ProgressBar` counting ``unit`` (trajectories, grid
    points, fits)."""

    def __init__(self, enabled: bool | None = None, unit: str = "trajectories",
                 stream=None) -> None:
        # A rate is shown for trajectories only (grid points and fits come in bursts).
        super().__init__(enabled, sys.stderr if stream is None else stream, unit=unit,
                         show_rate=unit == "trajectories")
        self.drawn = False

    def __call__(self, done: int, total: int | None) -> None:
        if self.enabled:
            self.drawn = True
            super().__call__(done, total)

    def close(self) -> None:
        if self.drawn:
            super().close()
            self.drawn = False


def skipped_path(args, source: Path, output: str | None = None) -> Path:
    """Where the skipped list goes: ``--skipped``, else ``OUT.skipped.jsonl`` beside the
    command's output, else ``CORPUS_NAME.skipped.jsonl`` in the current folder."""
    if args.skipped:
        return Path(args.skipped)
    if output:
        out = Path(output)
        return out.with_name(out.name + ".skipped.jsonl")
    return Path(source.name + ".skipped.jsonl")


def write_skipped(skipped: Sequence[Skipped], path: str | os.PathLike) -> Path:
    """Write ``skipped`` as JSON lines (``source``, ``row``, ``trajectory_id``, ``reason``,
    the format of ``fastuq score``'s list), atomically."""
    path = Path(path)
    tmp = path.with_name(f".{path.name}.tmp")
    try:
        tmp.write_text("".join(json.dumps(vars(k)) + "\n" for k in skipped), encoding="utf-8")
        os.replace(tmp, path)
    finally:
        tmp.unlink(missing_ok=True)
    return path


def report_skipped(prog: str, skipped: Sequence[Skipped], path: Path | None) -> None:
    """Print how many records were skipped and where the list went (stderr)."""
    if path is None:
        return
    print(f"{prog}: skipped {len(skipped):,} bad record(s), listed in {path}", file=sys.stderr)
    for k in skipped[:5]:
        print(f"  {k.reason}", file=sys.stderr)


def load_data(prog: str, args, source: Path, skipped: list):
    """``load_sauce_data`` for ``fit`` and ``sweep`` with their progress, skip and
    observation-noise options; with ``--on-error skip`` the skipped records are written and
    reported. Returns ``(data, path of the skipped list or None)``."""
    from fastuq.sweeps import load_sauce_data

    bar = Progress(args.progress)
    try:
        data = load_sauce_data(source, protocol=args.protocol, dtype=args.dtype,
                               observation_noise=args.observation_noise,
                               on_error=args.on_error, skipped=skipped, progress=bar,
                               check=args.check)
    finally:
        bar.close()
    skipped_to = None
    if args.on_error == "skip":
        skipped_to = write_skipped(skipped, skipped_path(args, source, args.output))
        report_skipped(prog, skipped, skipped_to)
    return data, skipped_to


def check_skip_args(args) -> None:
    """``--skipped`` only means something with ``--on-error skip``."""
    if args.skipped and args.on_error != "skip":
        raise ValueError("--skipped names the list of skipped records; it needs --on-error skip")


def load_params(args) -> dict[str, dict[str, float]] | None:
    """``--params`` read and checked (:func:`fastuq.fit.load_params`), or None."""
    if not getattr(args, "params", None):
        return None
    from fastuq.fit import load_params as load

    return load(args.params)


def report_params(prog: str, per_protocol: Mapping[str, Mapping[str, float]] | None,
                  protocols: Iterable[str], source: str | None) -> None:
    """Print which protocols take the ``--params`` file's values and which fall back to
    their preset (stdout)."""
    if per_protocol is None:
        return
    protocols = sorted(set(protocols))
    used = [p for p in protocols if p in per_protocol]
    fallback = [p for p in protocols if p not in per_protocol]
    if used:
        print(f"{prog}: parameters from {source} for " + ", ".join(
            f"{p} ({', '.join(f'{k} {v:.4g}' for k, v in per_protocol[p].items())})"
            for p in used))
    for p in fallback:
        print(f"{prog}: protocol {p!r} is not in {source}: its preset is used")


def score_corpus(
    source,
    methods,
    *,
    protocol: str | None = None,
    params: Mapping[str, object] | None = None,
    dtype: str = "float64",
    backend: str = "jax",
    chunk_rows: int = 1 << 18,
    observation_noise: float | None = None,
    on_error: str = "raise",
    progress: Callable[[int, int | None], None] | None = None,
    check: str = "corpus",
):
    """Score ``source`` in memory like :func:`fastuq.score` (same columns), through
    :func:`fastuq.engine.scoring.iter_scores` so that ``on_error="skip"`` and progress work:
    ``(table, skipped records)``."""
    import pyarrow as pa

    from fastuq.engine.scoring import iter_scores
    from fastuq.io.readers import count_rows

    total = count_rows(source) if progress is not None else None
    skipped: list[Skipped] = []
    tables = []
    done = 0
    for batch, scores in iter_scores(
        source, methods=methods, protocol=protocol, params=params, dtype=dtype,
        backend=backend, chunk_rows=chunk_rows, observation_noise=observation_noise,
        on_error=on_error, skipped=skipped if on_error == "skip" else None, check=check,
    ):
        cols = {"trajectory_id": batch.ids, **scores}
        for extra in ("question_id", "protocol", "correct"):
            if extra in batch.table.column_names:
                cols[extra] = batch.column(extra)
        tables.append(pa.table(cols))
        done += batch.n
        if progress is not None:
            progress(done + len(skipped), total)
    if not tables:
        raise ValueError(f"{source}: no record left to score ({len(skipped)} skipped)")
    return pa.concat_tables(tables), skipped
