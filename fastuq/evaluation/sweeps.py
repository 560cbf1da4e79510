"""Hyperparameter sweeps of SAUCE: exact metrics for every point of a parameter grid.

>>> import numpy as np
>>> from fastuq.evaluation.sweeps import sweep
>>> table = sweep("rollouts.parquet",
...               grid={"lam": np.linspace(0.5, 1, 32),
...                     "q": np.geomspace(1e-3, 1, 32)},
...               metrics=("auroc", "auarc"), folds=5)
>>> table.sort("auroc", descending=True).head()      # one row per grid point
>>> table.cv.folds                                     # best point per fold, held-out metric

(``fastuq.sweep(...)`` is the same function.)

How it runs. The corpus (or the arrays) is packed once into time-major ``[T, N]`` arrays. The
grid, the Cartesian product of the given value lists, is cut into blocks of ``G <=
chunk_points`` points; the jitted SAUCE kernel scores a whole block at once (``jax.vmap``
over the swept parameters, the others broadcast per trajectory from the protocol presets),
giving ``[G, N]`` scores on the device; the block is pulled to the host, where every row is
sorted once (:mod:`fastuq.metrics.rank`: float32 scores as unique packed 64-bit integer keys
``score_key << 32 | row << 1 | label`` through Polars' integer sort; float64 by a 4-pass LSD
radix argsort; a thread pool over rows) and its exact metrics follow in O(N). The next block
is scored while the current one is ranked. Peak memory is about ``2 x chunk_points x N``
scores plus ``~40 N`` bytes per sorting thread, whatever the grid size.

Exactness. No binning: AUROC counts tied pairs one half (equal to scikit-learn's
``roc_auc_score``); AUARC sorts by uncertainty with a stable sort (ties keep file order);
PRR averages ties. Scores are computed and ranked in ``dtype``: float32 (the default) is
plenty to rank SAUCE scores (its rounding error is far below anything a ranking notices; see
``DESIGN.md``), but two scores that differ only past float32's precision tie there;
``dtype="float64"`` scores and ranks in float64 (a 4-pass radix argsort, about twice the
ranking time).

The corpus or arrays a sweep reads are packed by :mod:`fastuq.evaluation.sauce_data`. Why
one module over 600 lines: the grid's blocks, their scoring on the device, the ranking
overlapped with it and the cross-validated summary are one pipeline whose private pieces
(the vmapped scorer, the block iterators) exist only for :func:`sweep`.
"""

from __future__ import annotations

import functools
import itertools
import math
import os
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from fastuq.engine.registry import SAUCE_PARAMS
from fastuq.evaluation.sauce_data import PARAMS, SauceData, load_sauce_data
from fastuq.metrics.folds import stratified_folds

__all__ = ["PARAMS", "SWEEP_METRICS", "CVSummary", "SauceData", "heatmap", "load_sauce_data",
           "parse_values", "stratified_folds", "sweep"]


#: Metrics a sweep computes (all exact, higher is better).
SWEEP_METRICS = ("auroc", "auarc", "prr")
#: Default score elements per block: ``chunk_points = max(1, BLOCK_ELEMENTS // N)``.
BLOCK_ELEMENTS = 1 << 24
ArrayLike = Any
def parse_values(text: str, *, log: bool = False) -> list[float]:
    """Parse a command-line value spec into a list of floats.

    ``"start:stop:count"`` gives ``count`` values from ``start`` to ``stop`` inclusive,
    evenly spaced (``log=True``: evenly spaced in log, both ends > 0); ``"a,b,c"`` a list;
    ``"v"`` one value.
    """
    text = text.strip()
    try:
        if ":" in text:
            parts = text.split(":")
            if len(parts) != 3:
                raise ValueError
            start, stop, count = float(parts[0]), float(parts[1]), int(parts[2])
            if count < 1:
                raise ValueError
            if count == 1:
                values = [start]
            elif log:
                if start <= 0 or stop <= 0:
                    raise ValueError(f"log spacing needs start and stop > 0, got {text!r}")
                values = np.geomspace(start, stop, count).tolist()
            else:
                values = np.linspace(start, stop, count).tolist()
        else:
            values = [float(v) for v in text.split(",") if v.strip()]
    except ValueError as exc:
        if str(exc):
            raise
        raise ValueError(
            f"bad value spec {text!r}: expected start:stop:count, a,b,c or one number"
        ) from None
    if not values or not all(math.isfinite(v) for v in values):
        raise ValueError(f"bad value spec {text!r}: values must be finite numbers")
    return values


def _grid_points(grid: Mapping[str, Any]) -> tuple[tuple[str, ...], np.ndarray]:
    """``(names, points [G, S] float64)``: the Cartesian product, first name slowest."""
    if not isinstance(grid, Mapping) or not grid:
        raise ValueError(f"grid must be a non-empty mapping of parameter lists over {PARAMS}")
    names = tuple(grid)
    unknown = [k for k in names if k not in PARAMS]
    if unknown:
        raise ValueError(f"unknown grid parameter(s) {unknown}; known: {list(PARAMS)}")
    lists = []
    for k in names:
        v = np.atleast_1d(np.asarray(grid[k], np.float64))
        if v.ndim != 1 or v.size == 0:
            raise ValueError(f"grid[{k!r}] must be a non-empty list of numbers")
        if not np.isfinite(v).all():
            raise ValueError(f"grid[{k!r}] holds a value that is not finite")
        if k == "lam" and ((v < 0) | (v > 1)).any():
            raise ValueError("grid['lam'] values must be in [0, 1]")
        if k == "q" and (v < 0).any():
            raise ValueError("grid['q'] values must be >= 0")
        if k == "sigma2_0" and (v <= 0).any():
            raise ValueError("grid['sigma2_0'] values must be > 0")
        lists.append(v)
    points = np.array(list(itertools.product(*lists)), np.float64).reshape(-1, len(names))
    return names, points


# --------------------------------------------------------------------------- scoring


@dataclass
class _Scorer:
    """What the block scorer needs: device arrays, the fixed parameters and the jitted fn."""

    data: SauceData
    names: tuple[str, ...]
    fixed: dict[str, np.ndarray]
    dtype: np.dtype
    chunk: int
    device_arrays: tuple = ()
    fn: Callable | None = None


def _vmapped_scan(names: tuple[str, ...]) -> Callable:
    """The vmapped SAUCE scan of a block of grid points, compiled for the current platform
    (CPU code-generation options only on a CPU)."""
    from fastuq.kernels._compile import default_platform

    return _vmapped_scan_for(names, default_platform())


@functools.lru_cache(maxsize=32)
def _vmapped_scan_for(names: tuple[str, ...], platform: str) -> Callable:
    """The jitted block scorer for a set of swept parameters (cached, so that later sweeps
    of the same parameters and shapes reuse its compilations)."""
    import jax

    from fastuq.engine.registry import get_estimator
    from fastuq.kernels._compile import compiler_options

    kernel = get_estimator("sauce").kernel_fn("jax")

    def one(a, h, m, fixed, point):
        values = dict(zip(PARAMS, fixed, strict=True))
        for i, name in enumerate(names):
            values[name] = point[i]
        return kernel(a, h, m, **values)

    return jax.jit(jax.vmap(one, in_axes=(None, None, None, None, 0)),
                   compiler_options=compiler_options(platform))


def _make_scorer(
    data: SauceData, names: tuple[str, ...], dtype: np.dtype, chunk: int,
    base: Mapping[str, Mapping[str, float]] | None = None,
) -> _Scorer:
    import jax.numpy as jnp

    from fastuq.engine.runtime import x64_scope

    overrides = {k: 0.5 for k in names}  # placeholders, so presets resolve for every protocol
    fixed = data.presets(overrides, base)
    with x64_scope(dtype):
        arrays = tuple(jnp.asarray(x) for x in (data.agreement, data.token_entropy,
                                                data.round_mask))
        fixed_dev = tuple(jnp.asarray(fixed[p]) for p in PARAMS)
    return _Scorer(data, names, fixed, dtype, chunk, arrays + (fixed_dev,), _vmapped_scan(names))


def _score_block(scorer: _Scorer, points: np.ndarray):
    """Scores of the grid points ``points [G, S]`` (S = swept parameters): a device array
    ``[G, N]``, dispatched asynchronously (pull with ``np.asarray``)."""
    import jax.numpy as jnp

    from fastuq.engine.runtime import x64_scope

    a, h, m, fixed = scorer.device_arrays
    with x64_scope(scorer.dtype):
        return scorer.fn(a, h, m, fixed, jnp.asarray(points, scorer.dtype))


def _blocks(scorer: _Scorer, points: np.ndarray):
    """Score ``points [G_total, S]`` block by block: yields ``(start, block_points [g, S],
    scores [g, N] on the host)``. Each block is padded to ``scorer.chunk`` points (one
    compilation) and the next block is dispatched before the current one is pulled."""
    chunk = scorer.chunk

    def dispatch(start: int):
        block = points[start:start + chunk]
        g = block.shape[0]
        if g < chunk:
            block = np.concatenate([block, np.repeat(block[-1:], chunk - g, axis=0)])
        return _score_block(scorer, block), g

    starts = list(range(0, points.shape[0], chunk))
    pending = dispatch(starts[0]) if starts else None
    for b, start in enumerate(starts):
        nxt = dispatch(starts[b + 1]) if b + 1 < len(starts) else None
        block, g = pending
        yield start, points[start:start + g], _pull(block, g, scorer.dtype)
        pending = nxt


def _device_blocks(scorer: _Scorer, points: np.ndarray):
    """As :func:`_blocks`, but yields the ``[g, N]`` score blocks as device arrays (for
    ranking where they were computed)."""
    chunk = scorer.chunk
    for start in range(0, points.shape[0], chunk):
        block = points[start:start + chunk]
        g = block.shape[0]
        if g < chunk:
            block = np.concatenate([block, np.repeat(block[-1:], chunk - g, axis=0)])
        yield start, points[start:start + g], _score_block(scorer, block)[:g]


RANKS = ("auto", "host", "device")


def _rank_on_device(rank: str, dtype: np.dtype, folds: int | None) -> bool:
    """Where a sweep ranks: ``"host"`` (the NumPy/Polars engine, :mod:`fastuq.metrics.rank`),
    ``"device"`` (:mod:`fastuq.metrics.device_rank`, where the scores were computed) or
    ``"auto"``: the device when JAX's default backend is a GPU (sorts are fast there; XLA's
    CPU sort is several times slower than the host engine), the scores are float32 and no
    cross-validation is asked (fold metrics are ranked on the host)."""
    if rank not in RANKS:
        raise ValueError(f"rank must be one of {RANKS}, got {rank!r}")
    if rank == "host":
        return False
    usable = dtype == np.float32 and folds is None
    if rank == "device":
        if not usable:
            raise ValueError("rank='device' needs float32 scores and no folds")
        return True
    import jax

    return usable and jax.default_backend() == "gpu"


def _pull(block, g: int, dtype: np.dtype) -> np.ndarray:
    x = np.asarray(block)[:g]
    return x if x.dtype == dtype else x.astype(dtype)


def _rank_block(labels, x, metrics, points, names, **kwargs):
    """:func:`~fastuq.metrics.rank.rank_metrics_rows` of a block, finiteness checked on the
    way (a non-finite score names its grid point)."""
    from fastuq.metrics.rank import NonFiniteScoreError, rank_metrics_rows

    try:
        return rank_metrics_rows(labels, x, metrics, check_finite=True, **kwargs)
    except NonFiniteScoreError as exc:
        point = ", ".join(f"{k}={v:g}" for k, v in zip(names, points[exc.row], strict=True))
        raise ValueError(f"grid point ({point}) gives non-finite scores") from None


def _preset_scores(
    data: SauceData, dtype: np.dtype, base: Mapping[str, Mapping[str, float]] | None = None
) -> np.ndarray | None:
    """SAUCE scores ``[N]`` with every trajectory's protocol preset, or ``base``'s values
    where it names the protocol (None: a protocol has neither)."""
    from fastuq.engine.registry import SAUCE_PRESETS
    from fastuq.engine.runtime import x64_scope

    base = base or {}
    if any(p not in SAUCE_PRESETS and set(base.get(p, {})) != set(PARAMS)
           for p in data.protocols):
        return None
    params = data.presets(None, base)
    from fastuq.kernels._compile import default_platform

    with x64_scope(dtype):
        out = _top_level_sauce(default_platform())(
            data.agreement, data.token_entropy, data.round_mask, **params)
        return np.asarray(out).astype(dtype, copy=False)


@functools.lru_cache(maxsize=4)
def _top_level_sauce(platform: str) -> Callable:
    """SAUCE's kernel compiled as a top-level program for ``platform`` (CPU code-generation
    options only on a CPU: the kernel itself is a plain jit)."""
    from fastuq.engine.registry import get_estimator
    from fastuq.kernels._compile import top_level_jit

    return top_level_jit(get_estimator("sauce").kernel_fn("jax"), platform)


# --------------------------------------------------------------------------- sweep


@dataclass(frozen=True)
class CVSummary:
    """Cross-validated selection of a grid point.

    metric: the selection metric (higher is better).
    folds: one row per fold: ``fold``, the swept parameters of the point best on the fold's
      training part, ``train_<metric>`` (its value there), ``heldout_<metric>`` (its value
      on the held-out fold) and ``preset_heldout_<metric>`` (the protocol presets on the
      same fold; null when a protocol has no preset).
    mean_heldout: mean of the held-out metric over folds (the cross-validated estimate of
      selecting by the sweep); mean_preset_heldout: the same for the presets (or None).
    chosen: the point best on all data (swept parameters); chosen_metric: its metric.
    """

    metric: str
    folds: Any
    mean_heldout: float
    mean_preset_heldout: float | None
    chosen: dict[str, float]
    chosen_metric: float


def sweep(
    corpus_or_arrays: ArrayLike,
    grid: Mapping[str, Any],
    metrics: Sequence[str] = ("auroc", "auarc"),
    *,
    protocol: str | Sequence[str] | None = None,
    labels: ArrayLike | None = None,
    dtype: str | np.dtype = "float32",
    chunk_points: int | None = None,
    folds: int | None = None,
    select: str | None = None,
    threads: int | None = None,
    seed: int = 0,
    params: Mapping[str, Mapping[str, float]] | None = None,
    observation_noise: float | None = None,
    on_error: str = "raise",
    skipped: list | None = None,
    progress: Callable[[int, int | None], None] | None = None,
    rank: str = "auto",
):
    """Exact metrics of SAUCE for every point of a parameter grid.

    Args:
      corpus_or_arrays: a corpus file (Parquet/JSONL/JSONL.gz with ``agreement``,
        ``token_entropy``, ``correct`` and ``protocol``), a pyarrow Table / Polars DataFrame
        of those columns, arrays ``(agreement [T, N], token_entropy [T, N],
        round_mask [T, N], labels [N])``, or the :class:`SauceData` that
        :func:`load_sauce_data` returns (load once, sweep many times).
      grid: parameter name -> list of values, names from :data:`PARAMS`. The grid is the
        Cartesian product (first name varies slowest). Parameters not in the grid come from
        each trajectory's protocol preset (per trajectory for mixed corpora).
      metrics: names from :data:`SWEEP_METRICS` (``"auroc"``, ``"auarc"``, ``"prr"``).
      protocol: preset for every trajectory (default: the corpus' ``protocol`` column;
        ``"debate"`` for arrays).
      labels: ``[N]`` correctness labels overriding the corpus' ``correct``.
      dtype: ``"float32"`` (default; scores and ranks in float32, ample for ranking) or
        ``"float64"``.
      chunk_points: grid points scored per block (``G``); the ``[G, N]`` score block is the
        unit of memory. Default ``max(1, 2**24 // N)``.
      folds: ``k`` for cross-validated selection: trajectories are split into ``k``
        stratified folds (``seed``); on each fold's training part the best point by
        ``select`` is picked and its held-out metric reported (``result.cv``).
      select: the selection metric for ``folds`` (default ``metrics[0]``).
      threads: host threads ranking score rows (default: the usable cores, at most 8).
      seed: fold seed.
      params: protocol -> {name: value} (e.g. :func:`fastuq.fit.load_params` of a
        ``fastuq fit -o`` file): the values of parameters not in the grid, and of the
        reference row reported as ``preset``, for the protocols it names (others keep
        their preset). Unknown names raise ValueError.
      observation_noise, on_error, skipped: as :func:`load_sauce_data`.
      progress: called as ``progress(points_done, points_total)`` after each block.
      rank: where the scores are ranked: ``"auto"`` (default: on the device when it is a GPU,
        the scores float32 and no folds; else on the host), ``"host"`` or ``"device"``
        (:mod:`fastuq.metrics.device_rank`: AUROC bit-identical to the host's, AUARC and
        PRR to float64 rounding).

    Returns:
      a ``polars.DataFrame`` with one row per grid point, in grid order: the swept
      parameters (Float64) and one Float64 column per metric. Two attributes ride on the
      returned object (Polars keeps them on this object only, not on derived frames):
      ``preset`` -- dict metric -> value with every trajectory's protocol preset (``None``
      when a protocol has no preset) -- and ``cv`` -- a :class:`CVSummary` with ``folds``,
      else ``None``.

    Raises:
      ValueError: bad grid, metric or data (see :func:`load_sauce_data`).
    """
    import polars as pl

    from fastuq.metrics.inputs import warn_single_class
    from fastuq.metrics.rank import rank_metrics_rows

    metrics = tuple(metrics)
    unknown = [m for m in metrics if m not in SWEEP_METRICS]
    if not metrics or unknown:
        raise ValueError(f"metrics must be names from {SWEEP_METRICS}, got {list(metrics)}")
    select = metrics[0] if select is None else select
    if select not in metrics:
        raise ValueError(f"select={select!r} must be one of the metrics {list(metrics)}")
    names, points = _grid_points(grid)
    dtype = np.dtype(dtype)
    base = _check_base(params)
    data = load_sauce_data(corpus_or_arrays, protocol=protocol, labels=labels, dtype=dtype,
                           observation_noise=observation_noise, on_error=on_error,
                           skipped=skipped)
    n, g_total = data.n, points.shape[0]
    if chunk_points is None:
        chunk_points = max(1, BLOCK_ELEMENTS // n)
    if int(chunk_points) != chunk_points or chunk_points < 1:
        raise ValueError(f"chunk_points must be a positive integer, got {chunk_points!r}")
    chunk = int(min(chunk_points, g_total))
    n_pos = int(data.labels.sum())
    for m in metrics:
        if m != "auarc":
            warn_single_class(m.upper(), n_pos, n)

    fold = None if folds is None else stratified_folds(data.labels, folds, seed)
    train = None if fold is None else [fold != f for f in range(int(folds))]

    scorer = _make_scorer(data, names, dtype, chunk, base)
    results = {m: np.full(g_total, np.nan) for m in metrics}
    train_sel = None if fold is None else np.full((g_total, int(folds)), np.nan)
    on_device = _rank_on_device(rank, dtype, folds)
    for start, block_points, x in (_device_blocks if on_device else _blocks)(scorer, points):
        g = x.shape[0]
        if on_device:
            from fastuq.metrics.device_rank import rank_metrics_device

            full, finite = rank_metrics_device(data.labels, x, metrics)
            parts = None
            if not finite.all():
                bad = int(np.argmin(finite))
                point = ", ".join(f"{k}={v:g}" for k, v in zip(names, block_points[bad],
                                                               strict=True))
                raise ValueError(f"grid point ({point}) gives non-finite scores")
        else:
            full, parts = _rank_block(data.labels, x, metrics, block_points, names,
                                      subsets=train, threads=threads)
        for m in metrics:
            results[m][start:start + g] = full[m]
        if parts is not None:
            train_sel[start:start + g] = parts[select]
        del x
        if progress is not None:
            progress(start + g, g_total)

    preset_x = _preset_scores(data, dtype, base)
    preset = None
    if preset_x is not None:
        full, _ = rank_metrics_rows(data.labels, preset_x[None], metrics, threads=threads)
        preset = {m: float(full[m][0]) for m in metrics}

    table = pl.DataFrame(
        {**{k: points[:, i] for i, k in enumerate(names)},
         **{m: results[m] for m in metrics}},
        schema={k: pl.Float64 for k in (*names, *metrics)},
    )
    cv = None
    if fold is not None:
        cv = _cv_summary(scorer, data, names, points, fold, train_sel, results[select], select,
                         preset_x, threads)
    table.preset = preset
    table.cv = cv
    return table


def _check_base(params) -> dict[str, dict[str, float]] | None:
    """Validate per-protocol base parameters ``protocol -> {name: value}`` (None passes)."""
    if params is None:
        return None
    if isinstance(params, Mapping) and not params:
        return {}
    return check_protocol_params(params)


def check_protocol_params(params, where: str = "") -> dict[str, dict[str, float]]:
    """Per-protocol SAUCE parameters ``protocol -> {name: value}``, checked: a non-empty
    mapping of mappings, names from :data:`PARAMS`, finite numbers (not bools), lam in
    [0, 1], q >= 0, sigma2_0 > 0. ValueError (prefixed by ``where``, e.g. a file name)
    naming the protocol and key otherwise; returns plain dicts of floats."""
    if not isinstance(params, Mapping) or not params:
        raise ValueError(f"{where}'params' must map protocol names to parameter objects")
    out: dict[str, dict[str, float]] = {}
    for proto, values in params.items():
        if not isinstance(values, Mapping):
            raise ValueError(f"{where}params[{proto!r}] must be an object of parameters")
        bad = [k for k in values if k not in PARAMS]
        if bad:
            raise ValueError(f"{where}params[{proto!r}] has unknown parameter(s) {bad}; "
                             f"known: {list(PARAMS)}")
        one = {}
        for k, v in values.items():
            if isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v):
                raise ValueError(f"{where}params[{proto!r}][{k!r}] must be a finite number, "
                                 f"got {v!r}")
            spec = next(p for p in SAUCE_PARAMS if p.name == k)
            if not spec.inside(np.asarray(float(v))):
                raise ValueError(f"{where}params[{proto!r}][{k!r}] out of range: must be "
                                 f"{spec.describe()}, got {v!r}")
            one[k] = float(v)
        out[str(proto)] = one
    return out


def _cv_summary(scorer, data, names, points, fold, train_sel, all_sel, select, preset_x,
                threads) -> CVSummary:
    import polars as pl

    from fastuq.metrics.rank import rank_metrics_rows

    k = train_sel.shape[1]
    if np.isnan(train_sel).all(axis=0).any():
        raise ValueError(f"{select} is undefined on a training part; cannot select")
    best = np.nanargmax(train_sel, axis=0)  # [k]; ties: first in grid order
    distinct, inverse = np.unique(best, return_inverse=True)
    x = np.concatenate([x for _, _, x in _blocks(scorer, points[distinct])])
    tests = [fold == f for f in range(k)]
    _, held = rank_metrics_rows(data.labels, x, (select,), subsets=tests, threads=threads)
    heldout = held[select][inverse, np.arange(k)]
    preset_held = [None] * k
    if preset_x is not None:
        _, ph = rank_metrics_rows(data.labels, preset_x[None], (select,), subsets=tests,
                                  threads=threads)
        preset_held = ph[select][0].tolist()
    rows = {"fold": np.arange(k)}
    for i, name in enumerate(names):
        rows[name] = points[best, i]
    rows[f"train_{select}"] = train_sel[best, np.arange(k)]
    rows[f"heldout_{select}"] = heldout
    rows[f"preset_heldout_{select}"] = preset_held
    folds_df = pl.DataFrame(rows, schema={"fold": pl.Int64, **{c: pl.Float64 for c in rows
                                                                 if c != "fold"}})
    i_all = int(np.nanargmax(all_sel)) if not np.isnan(all_sel).all() else 0
    return CVSummary(
        metric=select,
        folds=folds_df,
        mean_heldout=float(np.mean(heldout)),
        mean_preset_heldout=None if preset_x is None else float(np.mean(preset_held)),
        chosen={name: float(points[i_all, i]) for i, name in enumerate(names)},
        chosen_metric=float(all_sel[i_all]),
    )


# --------------------------------------------------------------------------- plotting


def heatmap(
    table,
    metric: str,
    path: str | os.PathLike,
    *,
    x: str | None = None,
    y: str | None = None,
    log: Sequence[str] = (),
    title: str | None = None,
) -> Path:
    """Draw ``metric`` over two swept parameters as a heatmap PNG at ``path`` (atomically).

    ``x``/``y`` default to the first two parameter columns of ``table`` with more than one
    value; with more swept parameters each cell shows the best value over the others. With a
    single swept parameter a line plot is drawn instead. ``log`` names axes drawn in log
    scale. Needs matplotlib (ImportError with an install hint otherwise); uses the Agg
    canvas and leaves pyplot's global state alone.
    """
    try:
        from matplotlib.backends.backend_agg import FigureCanvasAgg
        from matplotlib.figure import Figure
    except ImportError as exc:  # pragma: no cover - depends on the environment
        raise ImportError("plotting needs matplotlib: pip install matplotlib") from exc
    import polars as pl

    params = [c for c in table.columns if c in PARAMS]
    varying = [c for c in params if table[c].n_unique() > 1]
    if metric not in table.columns:
        raise ValueError(f"table has no {metric!r} column")
    if x is None or y is None:
        free = [c for c in varying if c not in (x, y)]
        x = x or (free.pop(0) if free else None)
        y = y or (free.pop(0) if free else None)
    if x is None:
        raise ValueError("nothing to plot: no parameter takes more than one value")
    fig = Figure(figsize=(6.4, 4.8), dpi=100)
    FigureCanvasAgg(fig)
    ax = fig.add_subplot()
    others = [c for c in varying if c not in (x, y)]
    note = f" (best over {', '.join(others)})" if others else ""
    if y is None:
        line = table.group_by(x).agg(pl.col(metric).max()).sort(x)
        ax.plot(line[x].to_numpy(), line[metric].to_numpy(), marker="o")
        ax.set_xlabel(x)
        ax.set_ylabel(metric)
        if x in log:
            ax.set_xscale("log")
    else:
        cells = table.group_by([x, y]).agg(pl.col(metric).max())
        xs = np.unique(cells[x].to_numpy())
        ys = np.unique(cells[y].to_numpy())
        z = np.full((ys.size, xs.size), np.nan)
        z[np.searchsorted(ys, cells[y].to_numpy()), np.searchsorted(xs, cells[x].to_numpy())] = (
            cells[metric].to_numpy()
        )
        mesh = ax.pcolormesh(_edges(xs, x in log), _edges(ys, y in log), z, shading="flat",
                             cmap="viridis")
        fig.colorbar(mesh, ax=ax, label=metric)
        if np.isfinite(z).any():
            iy, ix = np.unravel_index(np.nanargmax(z), z.shape)
            ax.plot(xs[ix], ys[iy], marker="*", color="red", markersize=14, linestyle="none",
                    label=f"best {z[iy, ix]:.4f}")
            ax.legend(loc="best")
        ax.set_xlabel(x)
        ax.set_ylabel(y)
        if x in log:
            ax.set_xscale("log")
        if y in log:
            ax.set_yscale("log")
    ax.set_title(title or f"SAUCE {metric}{note}")
    fig.tight_layout()
    from fastuq.io.writers import atomic_write_with

    return atomic_write_with(path, lambda tmp: fig.savefig(tmp, format="png"))


def _edges(values: np.ndarray, log: bool) -> np.ndarray:
    """Cell edges around sorted centres ``values`` (midpoints; in log space when ``log``)."""
    v = np.log(values) if log and (values > 0).all() else values.astype(float)
    if v.size == 1:
        e = np.array([v[0] - 0.5, v[0] + 0.5])
    else:
        mid = (v[1:] + v[:-1]) / 2
        e = np.concatenate([[v[0] - (mid[0] - v[0])], mid, [v[-1] + (v[-1] - mid[-1])]])
    return np.exp(e) if log and (values > 0).all() else e
