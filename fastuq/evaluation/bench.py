"""``fastuq bench``: what every registered estimator costs on this machine.

Each chosen estimator (any entry of :data:`fastuq.engine.registry.ESTIMATORS`, a user's
included: it is reached through the registry alone) is timed on simulated inputs of each
shape ``(N, T rounds, A agents)``:

* **inputs** -- the simulator's debates (:func:`fastuq.synth.corpus`, every agent speaking
  in every round, with :func:`fastuq.synth.add_beliefs`'s ``belief`` column and a
  ``node_entropy`` column, minus each node's mean token log-probability), packed by the
  engine for that estimator (:func:`fastuq.engine.runner.prepare_estimator`: the inputs it
  declares, checked as ``fastuq score`` checks them). At most :data:`BASE_ROWS` distinct
  trajectories are simulated and packed; larger ``N`` repeats them along the batch axis (the
  kernels' cost per trajectory does not depend on the values). Parameters are the defaults,
  else the ``debate`` preset (else the estimator's first);
* **kernel** -- :func:`fastuq.engine.runner.call_kernel` with the JAX backend, the call
  ``fastuq score`` makes per chunk (pad to the bucket, place on every local device, kernel,
  copy back): the first call (compiling) apart, then the median of ``repeats`` calls;
* **floor** -- the bytes the call must read (every packed input and parameter array) and
  write (every output column), over the memory bandwidth measured in the same run
  (:func:`fastuq.evaluation.timing.copy_bandwidth` on CPU devices, one copying thread per
  XLA CPU device; :func:`~fastuq.evaluation.timing.device_copy_bandwidth` on a GPU);
  ``x floor`` is the median over the floor;
* **peak memory** -- the peak RSS during the timed calls over the RSS before them (on a
  GPU, also the device's ``peak_bytes_in_use`` where the backend reports it);
* **twin** -- the NumPy twin's median on the same inputs;
* **reference** -- the per-trajectory Python reference (the per-sample style of the papers)
  on the first ``subsample`` trajectories: its time per trajectory, the speed-up of the
  kernel over it extrapolated to ``N`` (``reference_s_per_traj * N / median_s``), and
  whether it agrees with the kernel's outputs on those trajectories (every output column,
  NaN where the other is NaN, ``|kernel - ref| <= tol * max(1, |ref|)`` with ``tol`` 1e-4
  in float32, 1e-9 in float64).

:func:`run_bench` returns the results file's dict (``machine``, ``bandwidth``, ``settings``,
``results``: one row per estimator and shape); :func:`bench_table` renders it;
:func:`load_bench` reads and checks a saved one (``fastuq report --bench``).
"""

from __future__ import annotations

import json
import math
import os
import sys
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from fastuq.evaluation.timing import (
    copy_bandwidth,
    device_copy_bandwidth,
    fmt_num,
    fmt_si,
    machine_info,
    markdown_table,
    median,
    peak_rss_bytes,
    reset_peak_rss,
    rss_bytes,
    time_calls,
)

__all__ = ["AGREE_TOL", "BASE_ROWS", "HEADERS", "bench_estimator", "bench_rows", "bench_table",
           "load_bench", "machine_line", "parse_counts", "run_bench", "simulated_batch",
           "simulated_inputs", "stderr_progress"]

#: Distinct trajectories simulated per shape; larger N repeats them.
BASE_ROWS = 1 << 16
#: Agreement tolerance of the reference against the kernel, per dtype (scaled by
#: ``max(1, |reference|)``).
AGREE_TOL = {"float32": 1e-4, "float64": 1e-9}
#: The fields every result row of a results file carries (:func:`load_bench` checks them).
ROW_FIELDS = ("method", "n", "rounds", "agents", "dtype", "median_s", "floor_s",
              "floor_ratio", "bytes_read", "bytes_written")


def parse_counts(text: str, name: str, *, low: int = 1) -> list[int]:
    """``"3,10"`` -> ``[3, 10]``; ``"1e6"`` -> ``[1000000]`` (whole numbers >= ``low``).
    ValueError naming the option otherwise."""
    out = []
    for item in str(text).split(","):
        item = item.strip()
        try:
            value = float(item)
        except ValueError:
            raise ValueError(f"{name}: expected whole numbers separated by commas, got "
                             f"{text!r}") from None
        if not math.isfinite(value) or value != int(value) or value < low:
            raise ValueError(f"{name}: each value must be a whole number >= {low}, got "
                             f"{item!r}")
        out.append(int(value))
    return out


def _with_node_entropy(table):
    """``table`` with a ``node_entropy`` column ``[round][agent]``: minus each node's mean
    token log-probability (``-seq_logprob / n_tokens``, >= 0), null where the node is."""
    import pyarrow as pa
    import pyarrow.compute as pc

    lp = table.column("seq_logprob").combine_chunks()
    nt = table.column("n_tokens").combine_chunks()
    inner_lp, inner_nt = lp.values, nt.values
    values = pc.divide(pc.negate(inner_lp.values.cast(pa.float64())),
                       inner_nt.values.cast(pa.float64()))
    inner = pa.ListArray.from_arrays(inner_lp.offsets, values,
                                     mask=inner_lp.is_null() if inner_lp.null_count else None)
    outer = pa.ListArray.from_arrays(lp.offsets, inner,
                                     mask=lp.is_null() if lp.null_count else None)
    return table.append_column("node_entropy", outer.cast(pa.list_(pa.list_(pa.float64()))))


def _with_texts(table):
    """``table`` with a ``texts`` column ``[round][agent]`` for the text-reading estimators:
    each node's text states its answer (``"... so the answer is A"``, with a per-round word),
    ``"no answer"`` where the answer did not parse, null where the node is."""
    import pyarrow as pa
    import pyarrow.compute as pc

    ans = table.column("answers").combine_chunks()
    inner = ans.values
    stated = pc.binary_join_element_wise(
        "we reason step by step so the answer is", pc.fill_null(inner.values, "unclear"), " ")
    nodes = pa.ListArray.from_arrays(inner.offsets, stated,
                                     mask=inner.is_null() if inner.null_count else None)
    outer = pa.ListArray.from_arrays(ans.offsets, nodes,
                                     mask=ans.is_null() if ans.null_count else None)
    return table.append_column("texts", outer.cast(pa.list_(pa.list_(pa.string()))))


def simulated_batch(n: int, rounds: int, agents: int, dtype: str | np.dtype, seed: int = 0):
    """A :class:`~fastuq.engine.batch.Batch` of ``n`` simulated debates (``rounds`` rounds,
    ``agents`` agents each, every agent answering every round), with ``belief``,
    ``node_entropy`` and ``texts`` columns, packing to ``dtype``."""
    from fastuq.engine.batch import Batch
    from fastuq.synth import add_beliefs, corpus

    if not 1 <= rounds <= 64 or not 1 <= agents <= 64:
        raise ValueError(f"bench: rounds and agents must be in 1..64, got {rounds} rounds, "
                         f"{agents} agents")
    table = corpus(n, protocol="debate", seed=seed, n_agents=agents, n_rounds=rounds)
    table = _with_texts(_with_node_entropy(add_beliefs(table, seed=seed)))
    return Batch(table, source="simulated", dtype=np.dtype(dtype))


def _protocol(est) -> str | None:
    """The preset the bench scores with: none where every kernel parameter has a default,
    else ``debate`` (else the first preset)."""
    if not est.lacking(None, {}):
        return None
    if "debate" in est.presets:
        return "debate"
    return next(iter(est.presets), None)


def _tile(x: np.ndarray, axis: int, n: int) -> np.ndarray:
    """``x`` repeated along ``axis`` to length ``n``."""
    reps = -(-n // x.shape[axis])
    if reps == 1:
        return np.ascontiguousarray(np.take(x, np.arange(n), axis=axis))
    tiles = [1] * x.ndim
    tiles[axis] = reps
    return np.ascontiguousarray(np.take(np.tile(x, tiles), np.arange(n), axis=axis))


def simulated_inputs(est, batch, n: int) -> tuple[list[np.ndarray], dict, dict]:
    """``est``'s packed inputs, optional inputs and kernel parameters for ``n`` trajectories:
    ``batch`` packed by the engine (:func:`~fastuq.engine.runner.prepare_estimator`) and
    repeated along each input's batch axis to ``n`` (``(inputs, optional, params)``, as
    :func:`~fastuq.engine.runner.call_kernel` takes them)."""
    from fastuq.engine.inputs import INPUTS
    from fastuq.engine.runner import prepare_estimator

    protocol = _protocol(est)
    missing = est.lacking(protocol, {})
    if missing:
        raise ValueError(est.no_preset_message(protocol, missing))
    inputs, optional, params = prepare_estimator(est, batch, params={}, protocol=protocol)
    inputs = [_tile(np.asarray(x), INPUTS[name].axis, n)
              for name, x in zip(est.inputs, inputs, strict=True)]
    optional = {k: None if v is None else _tile(np.asarray(v), INPUTS[k].axis, n)
                for k, v in optional.items()}
    params = {k: (np.asarray(v) if np.ndim(v) == 0 else _tile(np.asarray(v), 0, n))
              for k, v in params.items()}
    return inputs, optional, params


def _one(est, name: str, x: np.ndarray, k: int) -> np.ndarray:
    from fastuq.engine.inputs import INPUTS

    return x[k] if INPUTS[name].axis == 0 else x[:, k]


def _reference(est, inputs, optional, params, rows: int) -> tuple[dict[str, np.ndarray], float]:
    """The per-trajectory reference on the first ``rows`` trajectories: ``({output: [rows]
    float64}, seconds)``."""
    import time

    ref = est.reference_fn()
    present = {k: v for k, v in optional.items() if v is not None}
    out = []
    start = time.perf_counter()
    for k in range(rows):
        args = [_one(est, name, x, k) for name, x in zip(est.inputs, inputs, strict=True)]
        kw = {name: _one(est, name, x, k) for name, x in present.items()}
        kw.update({p: float(v) if v.ndim == 0 else float(v[k]) for p, v in params.items()})
        value = ref(*args, **kw)
        out.append(value if isinstance(value, Mapping) else {est.outputs[0]: value})
    seconds = time.perf_counter() - start
    return {o: np.asarray([r[o] for r in out], np.float64) for o in est.outputs}, seconds


def _agreement(kernel: Mapping[str, np.ndarray], ref: Mapping[str, np.ndarray], rows: int,
               dtype: str) -> tuple[bool, float, str | None]:
    """Whether the kernel's outputs agree with the reference's on the first ``rows``:
    ``(agrees, largest scaled difference, first disagreeing 'output row k')``."""
    tol = AGREE_TOL[dtype]
    worst, first = 0.0, None
    for name, want in ref.items():
        got = np.asarray(kernel[name][:rows], np.float64)
        nan_got, nan_want = np.isnan(got), np.isnan(want)
        with np.errstate(invalid="ignore"):
            diff = np.where(nan_got | nan_want, 0.0,
                            np.abs(got - want) / np.maximum(1.0, np.abs(want)))
        bad = (nan_got != nan_want) | (diff > tol)
        if diff.size:
            worst = max(worst, float(diff.max()))
        if bad.any() and first is None:
            k = int(np.argmax(bad))
            first = f"{name} of trajectory {k}: kernel {got[k]!r}, reference {want[k]!r}"
    return first is None, worst, first


def bench_estimator(
    est, inputs: Sequence[np.ndarray], optional: Mapping[str, np.ndarray | None],
    params: Mapping[str, np.ndarray], *, n: int, rounds: int, dtype: str,
    bytes_per_s: float, repeats: int = 5, subsample: int = 200, twin: bool = True,
) -> dict[str, Any]:
    """Time ``est`` on packed inputs (see the module docstring); one result row.

    Returns a dict with ``compile_s`` (first call minus the median), ``first_call_s``,
    ``times_s``, ``median_s``, ``traj_per_s``, ``ns_per_traj_round``, ``bytes_read``,
    ``bytes_written``, ``floor_s``, ``floor_ratio`` (``median_s / floor_s``),
    ``peak_bytes`` (host), ``device_peak_bytes`` (GPU, else ``None``), ``twin_median_s``,
    ``reference_rows``, ``reference_s_per_traj``, ``reference_speedup``,
    ``reference_agrees``, ``reference_max_diff`` and ``reference_mismatch``.
    """
    import time

    from fastuq.engine.runner import call_kernel

    if repeats < 1 or subsample < 0:
        raise ValueError(f"bench: repeats >= 1 and subsample >= 0, got {repeats}, {subsample}")
    dt = np.dtype(dtype)
    result: dict[str, np.ndarray] = {}

    def kernel() -> None:
        result.update(call_kernel(est, inputs, optional, params, n=n, dtype=dt, backend="jax"))

    start = time.perf_counter()
    kernel()
    first = time.perf_counter() - start
    base_rss = rss_bytes()
    reset_peak_rss()
    times = time_calls(kernel, repeats, warmup=0)
    peak = max(peak_rss_bytes() - base_rss, 0)
    med = median(times)
    present = [v for v in optional.values() if v is not None]
    read = sum(int(np.asarray(x).nbytes) for x in (*inputs, *present, *params.values()))
    written = sum(int(np.asarray(v).nbytes) for v in result.values())
    floor = (read + written) / bytes_per_s
    row: dict[str, Any] = {
        "first_call_s": first, "compile_s": max(first - med, 0.0), "times_s": times,
        "median_s": med, "traj_per_s": n / med, "ns_per_traj_round": med / (n * rounds) * 1e9,
        "bytes_read": read, "bytes_written": written, "floor_s": floor,
        "floor_ratio": med / floor, "peak_bytes": peak, "device_peak_bytes": _device_peak(),
        "outputs": list(est.outputs),
    }
    if twin:
        host = [np.asarray(x) for x in inputs]
        twin_times = time_calls(
            lambda: call_kernel(est, host, optional, params, n=n, dtype=dt, backend="numpy"),
            max(1, min(repeats, 3)), warmup=0)
        row["twin_median_s"] = median(twin_times)
    else:
        row["twin_median_s"] = None
    rows = min(subsample, n)
    if rows:
        ref, seconds = _reference(est, inputs, optional, params, rows)
        agrees, worst, first_bad = _agreement(result, ref, rows, dt.name)
        per = seconds / rows
        row.update(reference_rows=rows, reference_s_per_traj=per,
                   reference_speedup=per * n / med, reference_agrees=agrees,
                   reference_max_diff=worst, reference_mismatch=first_bad)
    else:
        row.update(reference_rows=0, reference_s_per_traj=None, reference_speedup=None,
                   reference_agrees=None, reference_max_diff=None, reference_mismatch=None)
    return row


def _device_peak() -> int | None:
    """The first local device's ``peak_bytes_in_use`` (GPUs; ``None`` on CPUs)."""
    from fastuq.engine.runtime import local_devices

    device = local_devices()[0]
    if device.platform == "cpu":
        return None
    try:
        stats = device.memory_stats() or {}
    except Exception:  # noqa: BLE001 - a backend without memory stats
        return None
    peak = stats.get("peak_bytes_in_use")
    return int(peak) if peak is not None else None


def _bandwidth(size: int) -> dict[str, Any]:
    """The copy bandwidth of the kernels' devices: host threads, one per XLA CPU device, or
    the GPU's own copy."""
    from fastuq.engine.runtime import local_devices

    devices = local_devices()
    if devices[0].platform == "cpu":
        out = copy_bandwidth(size, threads=len(devices))
        out["device"] = "cpu"
        return out
    return device_copy_bandwidth(size)


def run_bench(
    methods: str | Sequence[str] = "all",
    *,
    n: Sequence[int] = (1_000_000,),
    rounds: Sequence[int] = (3,),
    agents: Sequence[int] = (3,),
    dtype: str = "float32",
    repeats: int = 5,
    subsample: int = 200,
    twin: bool = True,
    bandwidth_bytes: int = 256 << 20,
    seed: int = 0,
    progress: Callable[[str], None] | None = None,
) -> dict[str, Any]:
    """Time every chosen estimator at every shape (see the module docstring).

    Args:
      methods: ``"all"`` (every registered estimator, in registry order) or names (a list or
        a comma-separated string).
      n, rounds, agents: the shapes: every combination is run.
      dtype: ``"float32"`` or ``"float64"``.
      repeats: timed calls of the kernel (the twin: up to 3).
      subsample: trajectories the per-trajectory reference scores (0: none).
      twin: also time the NumPy twin.
      bandwidth_bytes: the size of the copy that measures the bandwidth.
      progress: called with one line per step (default: nothing).

    Returns:
      ``{"machine", "bandwidth", "settings", "results"}``: ``results`` one row per estimator
      and shape (:func:`bench_estimator`'s fields plus ``method``, ``n``, ``rounds``,
      ``agents``, ``slots``, ``dtype``, ``protocol``, ``device``; a row that could not run
      has ``error`` instead of the times).
    """
    from fastuq.engine.registry import ESTIMATORS, get_estimator
    from fastuq.engine.runtime import local_devices

    if dtype not in AGREE_TOL:
        raise ValueError(f"bench: dtype must be float32 or float64, got {dtype!r}")
    if isinstance(methods, str):
        names = list(ESTIMATORS) if methods == "all" else [
            m.strip() for m in methods.split(",") if m.strip()]
    else:
        names = list(methods)
    if not names:
        raise ValueError("bench: no estimator given (--method NAMES or all)")
    estimators = [get_estimator(name) for name in names]  # unknown names raise here
    for label, values in (("--n", n), ("--rounds", rounds), ("--agents", agents)):
        if not values or any(int(v) < 1 for v in values):
            raise ValueError(f"bench: {label} needs whole numbers >= 1, got {list(values)}")
    say = progress or (lambda line: None)
    device = local_devices()[0]
    say(f"machine: {os.cpu_count()} CPUs, kernels on {len(local_devices())} "
        f"{device.platform} device(s)")
    bw = _bandwidth(bandwidth_bytes)
    say(f"copy bandwidth {bw['bytes_per_s'] / 1e9:.2f} GB/s ({bw['threads']} thread(s), "
        f"{bw['array_bytes'] >> 20} MiB)")
    results = []
    for t in rounds:
        for a in agents:
            say(f"simulating {min(max(n), BASE_ROWS):,} debates of {t} rounds x {a} agents")
            batch = simulated_batch(min(max(n), BASE_ROWS), t, a, dtype, seed)
            for size in n:
                for est in estimators:
                    shape = {"method": est.name, "n": int(size), "rounds": int(t),
                             "agents": int(a), "slots": int(batch.n_slots), "dtype": dtype,
                             "protocol": _protocol(est), "device": device.platform}
                    try:
                        packed = simulated_inputs(est, batch, size)
                        row = bench_estimator(
                            est, *packed, n=size, rounds=t, dtype=dtype,
                            bytes_per_s=bw["bytes_per_s"], repeats=repeats,
                            subsample=subsample, twin=twin)
                    except (ValueError, TypeError) as exc:
                        row = {"error": str(exc)}
                    packed = None  # free the inputs before the next estimator's
                    results.append({**shape, **row})
                    say(_progress_line(results[-1]))
    info = machine_info(devices=True)
    try:
        info["loadavg_end"] = list(os.getloadavg())
    except OSError:
        pass
    return {
        "kind": "fastuq bench",
        "machine": info,
        "bandwidth": bw,
        "settings": {"methods": names, "n": [int(v) for v in n],
                     "rounds": [int(v) for v in rounds], "agents": [int(v) for v in agents],
                     "dtype": dtype, "repeats": repeats, "subsample": subsample,
                     "device": device.platform, "devices": len(local_devices()),
                     "base_rows": BASE_ROWS, "seed": seed},
        "results": results,
    }


def _progress_line(row: Mapping[str, Any]) -> str:
    head = (f"{row['method']}: N={fmt_si(row['n'])} T={row['rounds']} A={row['agents']} "
            f"{row['dtype']}")
    if "error" in row:
        return f"{head}: not run ({row['error']})"
    ref = ""
    if row.get("reference_rows"):
        ref = (f", reference {row['reference_s_per_traj'] * 1e6:.1f} us/traj "
               f"({'agrees' if row['reference_agrees'] else 'DISAGREES'})")
    return (f"{head}: {row['median_s'] * 1e3:.2f} ms (compile {row['compile_s']:.2f} s), "
            f"{row['floor_ratio']:.1f}x floor{ref}")


HEADERS = ("method", "N", "T", "A", "dtype", "compile s", "median ms", "traj/s",
           "ns/traj-round", "floor ms", "× floor", "peak MB", "twin ms", "ref µs/traj",
           "× ref", "ref agrees")


def bench_rows(data: Mapping[str, Any]) -> list[list[str]]:
    """The table's cells, one row per result (:data:`HEADERS`)."""
    out = []
    for r in data["results"]:
        head = [r["method"], fmt_si(r["n"]), str(r["rounds"]), str(r["agents"]), r["dtype"]]
        if "error" in r:
            out.append(head + ["not run: " + str(r["error"])] + [""] * (len(HEADERS) - 6))
            continue

        def ms(v):
            return "—" if v is None else fmt_num(v * 1e3)

        agrees = r.get("reference_agrees")
        out.append(head + [
            fmt_num(r["compile_s"], 2), ms(r["median_s"]), fmt_si(r["traj_per_s"]),
            fmt_num(r["ns_per_traj_round"]), ms(r["floor_s"]), fmt_num(r["floor_ratio"]),
            fmt_num(r["peak_bytes"] / 1e6), ms(r.get("twin_median_s")),
            "—" if r.get("reference_s_per_traj") is None else
            fmt_num(r["reference_s_per_traj"] * 1e6),
            fmt_si(r.get("reference_speedup")),
            "—" if agrees is None else ("yes" if agrees else "NO"),
        ])
    return out


def machine_line(data: Mapping[str, Any]) -> str:
    """One line on where a results file was measured: CPU, cores in use, the kernels'
    devices, the copy bandwidth, the load average and the date."""
    m, bw, st = data.get("machine", {}), data.get("bandwidth", {}), data.get("settings", {})
    load = m.get("loadavg_start") or []
    return (f"{m.get('cpu_model', '?')}, {m.get('affinity_cpus', m.get('cpu_count'))} cores "
            f"in use, kernels on {st.get('devices')} {st.get('device')} device(s); copy "
            f"bandwidth {bw.get('bytes_per_s', float('nan')) / 1e9:.2f} GB/s; load "
            f"{', '.join(f'{x:.1f}' for x in load) or '?'}; {m.get('date')}")


def bench_table(data: Mapping[str, Any], markdown: bool = False) -> str:
    """The results as a table: aligned text, or GitHub markdown (``markdown``), with a line
    on the machine and the bandwidth under it (:func:`machine_line`)."""
    rows = bench_rows(data)
    note = machine_line(data)
    if markdown:
        return markdown_table(HEADERS, rows) + "\n\n" + note
    widths = [max(len(str(c)) for c in col) for col in zip(HEADERS, *rows, strict=True)]
    lines = ["  ".join(str(c).rjust(w) if i else str(c).ljust(w)
                       for i, (c, w) in enumerate(zip(row, widths, strict=True)))
             for row in [list(HEADERS), *rows]]
    return "\n".join(lines) + "\n" + note


def load_bench(source: str | os.PathLike | Mapping[str, Any]) -> dict[str, Any]:
    """A results file written by ``fastuq bench --json`` (a path, or its dict), checked:
    ValueError naming the file and the first missing field."""
    if isinstance(source, Mapping):
        path, data = Path("<bench results>"), dict(source)
    else:
        path = Path(source)
        try:
            data = json.loads(path.read_text(encoding="utf-8"))
        except json.JSONDecodeError as exc:
            raise ValueError(f"{path}: not a JSON file ({exc})") from None
    if not isinstance(data, dict) or data.get("kind") != "fastuq bench":
        raise ValueError(f"{path}: not a 'fastuq bench --json' results file")
    for key in ("machine", "bandwidth", "settings", "results"):
        if key not in data:
            raise ValueError(f"{path}: no field {key!r}")
    for k, row in enumerate(data["results"]):
        if "error" in row:
            continue
        missing = [f for f in ROW_FIELDS if f not in row]
        if missing:
            raise ValueError(f"{path}: result {k} ({row.get('method')}) has no field "
                             f"{missing[0]!r}")
    return data


def stderr_progress(line: str) -> None:
    """Print a progress line on stderr."""
    print(f"fastuq bench: {line}", file=sys.stderr, flush=True)
