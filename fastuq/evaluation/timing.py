"""The timing harness that ``fastuq bench`` and the scripts of ``bench/`` share.

* **timing** -- :func:`time_calls` (repeats after untimed warm-up calls) and :func:`median`;
* **memory** -- :func:`rss_bytes`, :func:`reset_peak_rss` and :func:`peak_rss_bytes`, so a
  phase's peak resident memory can be read without the phases before it;
* **the memory-bandwidth floor** -- :func:`copy_bandwidth` (a large ``np.copyto`` on the
  host) and :func:`device_copy_bandwidth` (a jitted copy on a JAX device), each measured in
  the same run as the kernels it bounds: a kernel that reads R bytes and writes W bytes
  cannot take less than ``(R + W) / bytes_per_s``;
* **the machine** -- :func:`machine_info`: CPU model, cores, memory, load average, library
  versions and the date, for a results file;
* **tables** -- :func:`markdown_table`, :func:`fmt_si`, :func:`fmt_num`.

Nothing here imports JAX at import time (:func:`device_copy_bandwidth` and
:func:`machine_info` with ``devices=True`` import it when called).
"""

from __future__ import annotations

import datetime as _dt
import os
import platform
import resource
import sys
import threading
import time
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

__all__ = ["copy_bandwidth", "device_copy_bandwidth", "fmt_num", "fmt_si", "machine_info",
           "markdown_table", "median", "peak_rss_bytes", "reset_peak_rss", "rss_bytes",
           "time_calls"]


# ----------------------------------------------------------------------------- timing


def time_calls(fn: Callable[[], Any], repeats: int, warmup: int = 1) -> list[float]:
    """Wall-clock seconds of ``repeats`` calls of ``fn()`` after ``warmup`` untimed calls.

    ``fn`` must finish its work before returning (``block_until_ready`` for JAX).
    """
    for _ in range(warmup):
        fn()
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return times


def median(values: Sequence[float]) -> float:
    """The median of ``values`` (NaN when empty)."""
    return float(np.median(np.asarray(values, dtype=float))) if len(values) else float("nan")


# ----------------------------------------------------------------------------- memory


def rss_bytes() -> int:
    """Current resident set size of this process, in bytes (Linux ``/proc``; else peak)."""
    try:
        with open("/proc/self/statm") as f:
            return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")
    except (OSError, ValueError, IndexError):
        return peak_rss_bytes()


def peak_rss_bytes() -> int:
    """Peak RSS of this process in bytes: ``VmHWM`` from ``/proc/self/status`` on Linux (the
    high-water mark that :func:`reset_peak_rss` resets), else ``ru_maxrss``. ``ru_maxrss``
    alone is not used on Linux: it carries over from the parent across fork and exec, so a
    small worker started by a large driver would report the driver's peak."""
    try:
        with open("/proc/self/status") as f:
            for line in f:
                if line.startswith("VmHWM:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return int(peak) * (1 if sys.platform == "darwin" else 1024)


def reset_peak_rss() -> bool:
    """Reset the peak RSS (``VmHWM``) to the current RSS; False if unsupported.

    Linux >= 4.0: writing ``5`` to ``/proc/self/clear_refs`` resets the high-water mark, so
    a phase's peak can be read without the spikes of the phases before it.
    """
    try:
        with open("/proc/self/clear_refs", "w") as f:
            f.write("5")
    except OSError:
        return False
    return True


# ----------------------------------------------------------------------------- bandwidth


def copy_bandwidth(
    nbytes: int = 512 * 2**20, repeats: int = 7, threads: int = 1
) -> dict[str, Any]:
    """Host memory bandwidth from a large ``np.copyto`` (median of ``repeats``).

    A copy of S bytes reads S and writes S, so ``bytes_per_s = 2 * S / median_time``: the
    same bookkeeping as a kernel's floor, ``(bytes read + bytes written) / bytes_per_s``.
    With ``threads > 1`` the copy is split into that many slices copied concurrently
    (``np.copyto`` releases the GIL), which shows what several cores can pull.

    Returns ``{"array_bytes", "threads", "times_s", "median_s", "bytes_per_s"}``.
    """
    if nbytes < 8 or repeats < 1 or threads < 1:
        raise ValueError(f"copy_bandwidth: nbytes >= 8, repeats >= 1 and threads >= 1, got "
                         f"{nbytes}, {repeats}, {threads}")
    n = nbytes // 8
    src = np.arange(n, dtype=np.float64)
    dst = np.empty_like(src)
    dst.fill(0.0)  # fault the pages in before timing
    bounds = np.linspace(0, n, threads + 1).astype(int)

    def copy_slice(k: int) -> None:
        np.copyto(dst[bounds[k]:bounds[k + 1]], src[bounds[k]:bounds[k + 1]])

    def copy_all() -> None:
        if threads == 1:
            np.copyto(dst, src)
            return
        workers = [threading.Thread(target=copy_slice, args=(k,)) for k in range(threads)]
        for w in workers:
            w.start()
        for w in workers:
            w.join()

    times = time_calls(copy_all, repeats, warmup=1)
    t = median(times)
    return {
        "array_bytes": n * 8,
        "threads": threads,
        "times_s": times,
        "median_s": t,
        "bytes_per_s": 2 * n * 8 / t,
    }


def device_copy_bandwidth(nbytes: int = 1 << 30, repeats: int = 7) -> dict[str, Any]:
    """A JAX device's memory bandwidth: the median time of a jitted ``a + 0`` over a float32
    array of ``nbytes`` on JAX's default device (one read and one write per element, counted
    ``2 * nbytes``). Same fields as :func:`copy_bandwidth`, with ``device``."""
    import jax
    import jax.numpy as jnp

    n = max(nbytes // 4, 1)
    x = jnp.arange(n, dtype=jnp.float32)
    copy = jax.jit(lambda a: a + jnp.float32(0))

    def run() -> None:
        copy(x).block_until_ready()

    times = time_calls(run, repeats, warmup=1)
    t = median(times)
    return {"array_bytes": n * 4, "threads": 1, "times_s": times, "median_s": t,
            "bytes_per_s": 2 * n * 4 / t, "device": str(x.devices().pop())}


# ----------------------------------------------------------------------------- machine


def _cpu_model() -> str:
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown"


def machine_info(devices: bool = False) -> dict[str, Any]:
    """The machine, library versions, load average and date, for a results file.

    Keys: ``date`` (UTC, ISO), ``platform``, ``python``, ``cpu_model``, ``cpu_count``,
    ``affinity_cpus`` (the cores this process may use), ``mem_total_bytes``,
    ``loadavg_start`` (1, 5 and 15 minutes), ``numpy``, ``jax``, ``jaxlib``, ``fastuq``
    (``None`` where not installed) and, with ``devices`` (imports JAX), ``devices``: the
    JAX devices' platform and kind.
    """
    info: dict[str, Any] = {
        "date": _dt.datetime.now(_dt.UTC).isoformat(timespec="seconds"),
        "platform": platform.platform(),
        "python": platform.python_version(),
        "cpu_count": os.cpu_count(),
        "cpu_model": _cpu_model(),
        "numpy": np.__version__,
    }
    try:
        info["affinity_cpus"] = len(os.sched_getaffinity(0))
    except AttributeError:
        pass
    try:
        info["mem_total_bytes"] = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    except (ValueError, OSError):
        pass
    try:
        info["loadavg_start"] = list(os.getloadavg())
    except OSError:
        pass
    from importlib import metadata

    for pkg in ("jax", "jaxlib", "fastuq"):
        try:
            info[pkg] = metadata.version(pkg)
        except metadata.PackageNotFoundError:
            info[pkg] = None
    if devices:
        import jax

        info["devices"] = [{"platform": d.platform, "kind": getattr(d, "device_kind", "")}
                           for d in jax.local_devices()]
    return info


# ----------------------------------------------------------------------------- tables


def fmt_si(value: float | None, digits: int = 3) -> str:
    """``12300000 -> '12.3M'``; NaN/None -> an em dash."""
    if value is None or not np.isfinite(value):
        return "—"
    for scale, suffix in ((1e12, "T"), (1e9, "G"), (1e6, "M"), (1e3, "k")):
        if abs(value) >= scale:
            return f"{value / scale:.{digits}g}{suffix}"
    return f"{value:.{digits}g}"


def fmt_num(value: float | None, digits: int = 3) -> str:
    """A number to ``digits`` significant figures without exponent clutter; None -> dash."""
    if value is None or not np.isfinite(value):
        return "—"
    if abs(value) >= 10 ** digits:
        return f"{value:,.0f}"
    return f"{value:.{digits}g}"


def markdown_table(headers: Sequence[str], rows: Sequence[Sequence[Any]],
                   align: Sequence[str] | None = None) -> str:
    """A GitHub markdown table; ``align`` per column: ``"l"`` or ``"r"`` (default ``"r"``
    except the first column)."""
    align = align or ["l"] + ["r"] * (len(headers) - 1)
    sep = ["---:" if a == "r" else ":---" for a in align]
    lines = ["| " + " | ".join(map(str, headers)) + " |", "| " + " | ".join(sep) + " |"]
    lines += ["| " + " | ".join(map(str, row)) + " |" for row in rows]
    return "\n".join(lines)
