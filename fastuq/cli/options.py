"""What the ``fastuq`` subcommands share, one definition each.

Parser side: :func:`subcommand` registers a subcommand; the ``add_*`` functions add the
options several subcommands take (``--protocol``, the SAUCE parameters, ``--dtype``,
``--backend``, ``--observation-noise``, ``--params``, ``--on-error`` and ``--skipped``,
``--check``, ``--progress``), and :func:`add_options` the scoring set of ``eval``,
``select``, ``fit`` and ``sweep``: ``--on-error skip`` (through
:func:`fastuq.engine.scoring.iter_scores`'s skip machinery), ``--observation-noise``,
``--params`` (per-protocol SAUCE parameters from ``fastuq fit -o``) and a progress bar.

Run side: :func:`fail` (``PROG: error: ...`` and the exit status), :func:`corpus_source`,
:func:`sauce_overrides`, :class:`Progress`, the skipped-list helpers, the loaders
(:func:`score_from_args`, :func:`load_data`, :func:`score_corpus`) and the label reader of
the commands that fit to labels (:func:`corpus_labels`).

Importing this module does not import JAX (``fastuq --help`` imports it)."""

from __future__ import annotations

import argparse
import json
import os
import sys
from collections.abc import Callable, Iterable, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from fastuq.engine.checks import Skipped
from fastuq.engine.files import ProgressBar
from fastuq.engine.registry import SAUCE_PARAMS as _REGISTRY_SAUCE_PARAMS

if TYPE_CHECKING:
    import pyarrow as pa

#: SAUCE's parameters and what each is, for the options that set them (from the registry:
#: its doc line and its bounds, e.g. "forgetting factor in [0, 1]").
SAUCE_PARAMS: tuple[tuple[str, str], ...] = tuple(
    (p.name, p.doc if p.describe() == "finite" else f"{p.doc} {p.describe()}")
    for p in _REGISTRY_SAUCE_PARAMS
)
SAUCE_NAMES: tuple[str, ...] = tuple(name for name, _ in SAUCE_PARAMS)


def flag(name: str) -> str:
    """The option of parameter ``name``: ``sigma2_0`` -> ``--sigma2-0``."""
    return f"--{name.replace('_', '-')}"


# --- parser side -------------------------------------------------------------------------------


def subcommand(sub: argparse._SubParsersAction, name: str, *, help: str, description: str,
               epilog: str | None = None) -> argparse.ArgumentParser:
    """Register subcommand ``name`` on the subparsers ``sub`` (``help``: its line in
    ``fastuq --help``; ``description`` and ``epilog``: above and below its options in
    ``fastuq NAME --help``); returns its parser."""
    return sub.add_parser(name, help=help, description=description, epilog=epilog)


def add_corpus(p: argparse.ArgumentParser, verb: str) -> None:
    """Add the optional ``CORPUS`` and ``--sample`` (``VERB the bundled sample corpus``),
    exactly one of which :func:`corpus_source` takes."""
    p.add_argument("input", nargs="?", metavar="CORPUS",
                   help="labelled corpus (Parquet, JSONL, JSONL.gz)")
    p.add_argument("--sample", action="store_true", help=f"{verb} the bundled sample corpus")


def add_source(p: argparse.ArgumentParser) -> None:
    """Add ``--source CORPUS``: when the command's corpus is a pack (``fastuq pack``), the
    corpus it was made from, checked by :func:`check_source`."""
    p.add_argument("--source", metavar="CORPUS",
                   help="when the corpus is a pack (fastuq pack): the corpus it was made "
                        "from; the pack is refused (exit 2, naming the file that changed) "
                        "unless every file of it has the size and SHA-256 the pack recorded")


def check_source(args: argparse.Namespace, corpus) -> None:
    """With ``--source`` (:func:`add_source`): ``corpus`` (a path, or a one-path list) must
    be a pack, and the source the one it was made from (sizes and SHA-256 of its files).

    Raises:
      PackError: the pack does not match its files or its source (which file changed, and
        how); ValueError: ``--source`` with a corpus that is not a pack.
    """
    source = getattr(args, "source", None)
    if source is None:
        return
    if isinstance(corpus, (list, tuple)):
        corpus = corpus[0] if len(corpus) == 1 else None
    from fastuq.io.packfile import is_pack

    if corpus is None or not is_pack(corpus):
        raise ValueError(f"--source names the corpus a pack was made from; {corpus} is not a "
                         "pack (fastuq pack CORPUS -o PACK makes one)")
    from fastuq.engine.packed import check_pack

    check_pack(corpus, source=source)


def add_protocol(p: argparse.ArgumentParser, when: str = "") -> None:
    """Add ``--protocol`` (``when``: e.g. ``" when scoring"``)."""
    p.add_argument("--protocol",
                   help=f"preset for every record{when} (default: each record's field)")


def add_sauce_params(p: argparse.ArgumentParser, when: str = "") -> None:
    """Add ``--lam``, ``--q``, ``--sigma2-0``, ``--mu-0`` (floats overriding the presets; read
    back with :func:`sauce_overrides`)."""
    for name, text in SAUCE_PARAMS:
        p.add_argument(flag(name), dest=name, type=float,
                       help=f"SAUCE {text}{when} (overrides the preset)")


def _default_first(choices: Sequence[str], default: str | None) -> tuple[str, ...]:
    return tuple(sorted(choices, key=lambda c: c != default))


def add_dtype(p: argparse.ArgumentParser, default: str | None,
              help: str | None = None) -> None:
    """Add ``--dtype {float64,float32}`` (the default listed first)."""
    p.add_argument("--dtype", choices=_default_first(("float64", "float32"), default),
                   default=default, help=help)


def add_backend(p: argparse.ArgumentParser, default: str | None,
                help: str | None = None) -> None:
    """Add ``--backend {jax,numpy}`` (the default listed first)."""
    p.add_argument("--backend", choices=_default_first(("jax", "numpy"), default),
                   default=default, help=help)
    add_device(p)


def add_device(p: argparse.ArgumentParser) -> None:
    """Add ``--device {auto,cpu,gpu}``: where the JAX kernels run (read by
    :func:`fastuq.cli.main`, which runs the command inside
    :func:`fastuq.engine.runtime.device_scope`)."""
    p.add_argument("--device", choices=("auto", "cpu", "gpu"), default="auto",
                   help="where the JAX kernels run: auto (default: JAX's default backend, a "
                        "GPU when there is one), cpu or gpu")


def add_noise(p: argparse.ArgumentParser) -> None:
    """Add ``--observation-noise R``."""
    p.add_argument("--observation-noise", type=float, metavar="R",
                   help="constant measurement noise R_t for corpora without token entropy "
                        "(SAUCE on agreement alone); without it missing entropy is an error")


def add_params(p: argparse.ArgumentParser) -> None:
    """Add ``--params PARAMS.json`` (read with :func:`load_params`)."""
    p.add_argument("--params", metavar="PARAMS.json",
                   help="per-protocol SAUCE parameters written by 'fastuq fit -o'; a "
                        "protocol the file does not name keeps its preset (printed)")


#: Where the skipped list goes without ``--skipped`` (:func:`skipped_path`), as its help says.
SKIPPED_DEFAULT = ("OUT.skipped.jsonl beside -o OUT, else CORPUS_NAME.skipped.jsonl in the "
                   "current folder")


def add_skip(p: argparse.ArgumentParser, default: str = SKIPPED_DEFAULT) -> None:
    """Add ``--on-error {raise,skip}`` and ``--skipped PATH`` (``default``: where the list
    goes without it)."""
    p.add_argument("--on-error", choices=("raise", "skip"), default="raise",
                   help="a bad record stops the run (raise, default) or is skipped, counted "
                        "and listed with its reason (skip; see --skipped)")
    p.add_argument("--skipped", metavar="PATH",
                   help=f"where --on-error skip lists the skipped records (JSON Lines; "
                        f"default: {default})")


def add_check(p: argparse.ArgumentParser) -> None:
    """Add ``--check {corpus,used}`` (which columns every record is checked against)."""
    p.add_argument("--check", choices=("corpus", "used"), default="corpus",
                   help="check every record against every column the corpus has (corpus, "
                        "default; the per-token columns and texts only when a method uses "
                        "them) or only against the columns the methods read (used: faster "
                        "when the corpus has node columns the methods do not use)")


def add_progress(p: argparse.ArgumentParser, what: str = "") -> None:
    """Add ``--progress/--no-progress`` (``what``: e.g. ``", per input file"``)."""
    p.add_argument("--progress", action=argparse.BooleanOptionalAction, default=None,
                   help=f"progress bar on stderr{what} (default: when stderr is a terminal)")


def add_options(p: argparse.ArgumentParser, *, noise: bool = True,
                params: bool = False, output: bool = True) -> None:
    """Add ``--observation-noise`` (with ``noise``), ``--params`` (with ``params``),
    ``--on-error``, ``--skipped``, ``--check`` and ``--progress`` to the subparser ``p``
    (``output``: whether the command has ``-o``, which the skipped list's default sits
    beside)."""
    if noise:
        add_noise(p)
    if params:
        add_params(p)
    add_skip(p, SKIPPED_DEFAULT if output else
             "CORPUS_NAME.skipped.jsonl in the current folder")
    add_check(p)
    add_progress(p)


# --- run side ----------------------------------------------------------------------------------


def fail(prog: str, problem: object, status: int | None = None) -> int:
    """Print ``PROG: error: PROBLEM`` on stderr; return the exit status: ``status`` if given,
    else that of :func:`fastuq.cli.exit_status` for an exception (2 for a usage or input
    error, 1 for a run that failed) and 2 (a usage error) for a message."""
    print(f"{prog}: error: {problem}", file=sys.stderr)
    if status is not None:
        return status
    if isinstance(problem, BaseException):
        from fastuq.cli import exit_status

        return exit_status(problem)
    return 2


def corpus_source(prog: str, args: argparse.Namespace) -> Path | None:
    """The corpus of :func:`add_corpus`'s options: ``CORPUS``, or the bundled sample with
    ``--sample``; None (said on stderr) unless exactly one of them is given."""
    if args.sample == (args.input is not None):
        print(f"{prog}: give a CORPUS or --sample (one of them)", file=sys.stderr)
        return None
    if args.sample:
        from fastuq.cli import sample_corpus_path

        return sample_corpus_path()
    return Path(args.input)


def add_param(p: argparse.ArgumentParser) -> None:
    """Add ``--param NAME=VALUE`` (repeatable): a parameter of any registered estimator."""
    p.add_argument("--param", action="append", default=[], metavar="NAME=VALUE",
                   help="a parameter of any registered estimator, repeatable (e.g. --param "
                        "theta_s=0.7 for bccs; numbers are read as floats)")


def parse_params(items: Sequence[str]) -> dict[str, Any]:
    """``--param`` values as ``{name: float or str}``; ValueError for a malformed or repeated
    entry."""
    out: dict[str, Any] = {}
    for item in items:
        name, sep, text = item.partition("=")
        name = name.strip()
        if not sep or not name:
            raise ValueError(f"--param takes NAME=VALUE, got {item!r}")
        if name in out:
            raise ValueError(f"--param {name} is given twice")
        try:
            out[name] = float(text)
        except ValueError:
            out[name] = text.strip()
    return out


def sauce_overrides(args: argparse.Namespace
                    ) -> tuple[dict[str, Any], dict[str, dict[str, float]] | None]:
    """``(SAUCE parameters, per-protocol --params or None)`` of :func:`add_sauce_params`'s
    and :func:`add_params`'s options: ``{name: value}`` of the ``--lam``... given, or, with
    ``--params``, ``{name: {protocol: value}}`` of the file (:func:`fastuq.fit.per_parameter`).

    Raises:
      ValueError, FileNotFoundError: a bad ``--params`` file, or ``--params`` with ``--lam``...
    """
    params = {k: getattr(args, k) for k in SAUCE_NAMES if getattr(args, k) is not None}
    per_protocol = load_params(args)
    if per_protocol is not None:
        if params:
            raise ValueError(f"--params and {'/'.join(map(flag, SAUCE_NAMES))} exclude each "
                             "other")
        from fastuq.evaluation.fit import per_parameter

        params = per_parameter(per_protocol)
    extra = parse_params(getattr(args, "param", None) or [])
    both = sorted(set(extra) & set(params))
    if both:
        raise ValueError(f"{both[0]} is given by --param and by {flag(both[0])} or --params")
    return {**params, **extra}, per_protocol


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

    def __enter__(self) -> Progress:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()


def skipped_path(args: argparse.Namespace, source: Path, output: str | None = None) -> Path:
    """Where the skipped list goes: ``--skipped``, else ``OUT.skipped.jsonl`` beside
    ``output`` (the command's output; for ``eval --scores``, the scores of the run that
    skipped), else ``CORPUS_NAME.skipped.jsonl`` in the current folder. The default names
    end in :data:`fastuq.io.readers.SKIPPED_SUFFIX`, which reading a folder leaves out: a
    list that lands beside a corpus is not read as corpus next time."""
    from fastuq.io.readers import SKIPPED_SUFFIX

    if args.skipped:
        return Path(args.skipped)
    if output:
        out = Path(output)
        return out.with_name(out.name + SKIPPED_SUFFIX)
    return Path((source.name or source.resolve().name) + SKIPPED_SUFFIX)


def skip_output(args: argparse.Namespace, source: Path,
                output: str | None = None) -> Path | None:
    """The skipped list a scoring command will write (:func:`skipped_path`) with
    ``--on-error skip``, else None: the path to check with the command's other outputs."""
    if getattr(args, "on_error", "raise") != "skip":
        return None
    return skipped_path(args, source, output)


def save_skipped(args: argparse.Namespace, skipped: Sequence[Skipped], source: Path,
                 output: str | None = None) -> Path | None:
    """With ``--on-error skip``, write ``skipped`` where :func:`skipped_path` says and return
    that path; else None."""
    if args.on_error != "skip":
        return None
    return write_skipped(skipped, skipped_path(args, source, output))


def write_skipped(skipped: Sequence[Skipped], path: str | os.PathLike) -> Path:
    """Write ``skipped`` as JSON lines (``source``, ``row``, ``trajectory_id``, ``reason``,
    the format of ``fastuq score``'s list), atomically."""
    from fastuq.io.writers import atomic_write_text

    path = Path(path)
    atomic_write_text(path, "".join(json.dumps(vars(k)) + "\n" for k in skipped))
    return path


def report_skipped(prog: str | None, skipped: Sequence[Skipped],
                   path: str | os.PathLike | None) -> None:
    """Print how many records were skipped and where the list went, and the first reasons
    (stderr; ``prog`` None: no ``PROG:`` in front, as ``fastuq score`` prints it)."""
    if path is None:
        return
    head = "" if prog is None else f"{prog}: "
    print(f"{head}skipped {len(skipped):,} bad record(s), listed in {path}", file=sys.stderr)
    for k in skipped[:5]:
        print(f"  {k.reason}", file=sys.stderr)


def load_data(prog: str, args: argparse.Namespace, source: Path, skipped: list[Skipped]):
    """``load_sauce_data`` for ``fit`` and ``sweep`` with their progress, skip and
    observation-noise options; with ``--on-error skip`` the skipped records are written and
    reported. Returns ``(data, path of the skipped list or None)``."""
    from fastuq.evaluation.sauce_data import load_sauce_data

    with Progress(args.progress) as bar:
        data = load_sauce_data(source, protocol=args.protocol, dtype=args.dtype,
                               observation_noise=args.observation_noise,
                               on_error=args.on_error, skipped=skipped, progress=bar,
                               check=args.check)
    skipped_to = save_skipped(args, skipped, source, args.output)
    report_skipped(prog, skipped, skipped_to)
    return data, skipped_to


def score_from_args(args: argparse.Namespace, source: Path, methods: str | Sequence[str],
                    **kwargs: Any) -> tuple[pa.Table, list[Skipped], Path | None]:
    """:func:`score_corpus` for ``eval`` and ``select`` with their progress, skip, check and
    observation-noise options (``kwargs``: more of its arguments); with ``--on-error skip``
    the skipped records are written (not reported). Returns ``(table, skipped records, path
    of the skipped list or None)``."""
    with Progress(args.progress) as bar:
        table, skipped = score_corpus(source, methods, observation_noise=args.observation_noise,
                                      on_error=args.on_error, progress=bar, check=args.check,
                                      **kwargs)
    return table, skipped, save_skipped(args, skipped, source)


def check_skip_args(args: argparse.Namespace) -> None:
    """``--skipped`` only means something with ``--on-error skip``."""
    if args.skipped and args.on_error != "skip":
        raise ValueError("--skipped names the list of skipped records; it needs --on-error skip")


def load_params(args: argparse.Namespace) -> dict[str, dict[str, float]] | None:
    """``--params`` read and checked (:func:`fastuq.fit.load_params`), or None."""
    if not getattr(args, "params", None):
        return None
    from fastuq.evaluation.fit import load_params as load

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


def corpus_labels(table: pa.Table, source: str | os.PathLike, purpose: str) -> Any:
    """The ``correct`` column of a scored corpus ``table`` (:func:`score_corpus`, with
    ``trajectory_id`` kept) as bool NumPy ``[N]``, for the commands that fit to labels
    (``fastuq calibrate``, ``fastuq fit --stack``).

    Raises:
      ValueError: no ``correct`` column ("{source}: no labels: ...; {purpose}", ``purpose``
        saying what needs them), or a null label: the message names the first unlabelled
        trajectory by id, the field and how many are unlabelled.
    """
    import numpy as np

    if "correct" not in table.column_names:
        raise ValueError(f"{source}: no labels: the corpus has no 'correct' field (bool, True "
                         f"= correct); {purpose}")
    col = table.column("correct")
    if col.null_count:
        k = int(np.flatnonzero(col.is_null().to_numpy(zero_copy_only=False))[0])
        raise ValueError(f"{source}: trajectory {table.column('trajectory_id')[k].as_py()!r} "
                         f"has no label (field correct is null; {col.null_count} unlabelled)")
    return col.to_numpy(zero_copy_only=False).astype(bool)


#: Schema metadata key of :func:`score_corpus`'s table: the id of the first trajectory
#: whose ``correct`` is null, when the ids themselves are not kept.
UNLABELLED_KEY = "fastuq.first_unlabelled"


def _owned(array: Any, copy: Callable | None) -> Any:
    """``array`` in memory of its own (``copy([array])``) when ``copy`` is given and it is
    an Arrow array, else ``array``."""
    import pyarrow as pa

    if copy is None or not isinstance(array, pa.Array):
        return array
    return copy([array])


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
    keep: Sequence[str] = ("trajectory_id", "question_id", "protocol", "correct"),
):
    """Score ``source`` in memory like :func:`fastuq.score` (same columns), through
    :func:`fastuq.engine.scoring.iter_scores` so that ``on_error="skip"`` and progress work:
    ``(table, skipped records)``. ``keep``: the corpus columns kept beside the scores (those
    present; ``fastuq eval`` keeps only ``protocol``, dictionary-encoded, and ``correct``,
    so 1e7 scored trajectories hold no id strings)."""
    import numpy as np
    import pyarrow as pa
    import pyarrow.compute as pc

    from fastuq.engine.pipeline import iter_scores
    from fastuq.io.readers import count_rows

    total = count_rows(source) if progress is not None else None
    skipped: list[Skipped] = []
    tables = []
    done = 0
    first_unlabelled = None  # id of the first null label, when ids are not kept
    for batch, scores in iter_scores(
        source, methods=methods, protocol=protocol, params=params, dtype=dtype,
        backend=backend, chunk_rows=chunk_rows, observation_noise=observation_noise,
        on_error=on_error, skipped=skipped if on_error == "skip" else None, check=check,
    ):
        # a pack's chunk columns are slices of its memory-mapped file: a kept one is
        # copied, or it would keep the whole mapping (every page the kernels read) alive
        own = pa.concat_arrays if getattr(batch, "packed", None) is not None else None
        cols = {"trajectory_id": _owned(batch.ids, own)} if "trajectory_id" in keep else {}
        cols.update(scores)
        for extra in ("question_id", "protocol", "correct"):
            if extra in keep and extra in batch.table.column_names:
                cols[extra] = batch.column(extra)
                if extra == "protocol" and "trajectory_id" not in keep:
                    cols[extra] = pc.dictionary_encode(cols[extra])
                else:
                    cols[extra] = _owned(cols[extra], own)
                if (extra == "correct" and "trajectory_id" not in keep
                        and first_unlabelled is None and cols[extra].null_count):
                    k = int(np.flatnonzero(cols[extra].is_null().to_numpy(
                        zero_copy_only=False))[0])
                    first_unlabelled = str(batch.ids[k].as_py())
        tables.append(pa.table(cols))
        done += batch.n
        if progress is not None:
            progress(done + len(skipped), total)
    if not tables:
        raise ValueError(f"{source}: no record left to score ({len(skipped)} skipped)")
    table = pa.concat_tables(tables)
    if first_unlabelled is not None:
        table = table.replace_schema_metadata({UNLABELLED_KEY: first_unlabelled})
    return table, skipped
