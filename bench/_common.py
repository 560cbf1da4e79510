"""Shared helpers for fastuq's benchmark scripts (``bench/bench_*.py``).

Not a test module and not part of the package: each benchmark script runs as
``python bench/bench_NAME.py`` from the repository root and imports this file from its own
directory. What is here:

* **timing** -- :func:`time_calls` (median-friendly repeats after warm-up) and
  :func:`median`;
* **memory** -- :func:`rss_bytes`, :func:`reset_peak_rss` and :func:`peak_rss_bytes`, so a
  worker can report the peak RSS of one phase (``ru_maxrss`` reset through
  ``/proc/self/clear_refs`` on Linux) minus its RSS before that phase;
* **isolation** -- :func:`run_worker` / :func:`worker_main`: every configuration runs in a
  fresh Python subprocess (its own peak RSS, its own XLA device count) and hands back one
  JSON object;
* **the memory-bandwidth floor** -- :func:`copy_bandwidth`, the speed of a large
  ``np.copyto`` measured in the same run as the kernels it bounds;
* **reporting** -- :func:`machine_info`, :func:`markdown_table`, :func:`fmt_si`,
  :func:`write_json` and :func:`replace_section` (rewrite one marked section of
  ``bench/README.md``, leaving the other benchmarks' sections alone).
"""

from __future__ import annotations

import datetime as _dt
import json
import os
import platform
import resource
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import numpy as np

BENCH_DIR = Path(__file__).resolve().parent
REPO_ROOT = BENCH_DIR.parent
RESULTS_DIR = BENCH_DIR / "results"
README = BENCH_DIR / "README.md"

#: Prefix of the one stdout line on which a worker returns its JSON result.
RESULT_TAG = "@@BENCH_RESULT@@ "

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


# ----------------------------------------------------------------------------- isolation


def run_worker(
    script: str | Path,
    spec: dict[str, Any],
    *,
    env: dict[str, str] | None = None,
    timeout: float = 1800.0,
) -> dict[str, Any]:
    """Run ``python SCRIPT --worker JSON(spec)`` in a fresh process; return its result.

    The worker prints its result with :func:`emit_result`. On failure (non-zero exit,
    timeout, no result line) the returned dict has ``"error"`` set instead of raising, so
    one failed configuration does not lose a long run.
    """
    cmd = [sys.executable, str(script), "--worker", json.dumps(spec)]
    full_env = dict(os.environ)
    full_env.update(env or {})
    try:
        proc = subprocess.run(
            cmd, capture_output=True, text=True, env=full_env, timeout=timeout, cwd=REPO_ROOT
        )
    except subprocess.TimeoutExpired:
        return {**spec, "error": f"timed out after {timeout:.0f} s"}
    for line in reversed(proc.stdout.splitlines()):
        if line.startswith(RESULT_TAG):
            return json.loads(line[len(RESULT_TAG):])
    tail = (proc.stderr or proc.stdout).strip().splitlines()[-5:]
    return {**spec, "error": f"exit {proc.returncode}: " + " | ".join(tail)}


def emit_result(result: dict[str, Any]) -> None:
    """Print a worker's result for :func:`run_worker` (one tagged JSON line)."""
    print(RESULT_TAG + json.dumps(result, default=_plain), flush=True)


# ----------------------------------------------------------------------------- bandwidth


def copy_bandwidth(
    nbytes: int = 512 * 2**20, repeats: int = 7, threads: int = 1
) -> dict[str, Any]:
    """Memory bandwidth from a large ``np.copyto`` (median of ``repeats``).

    A copy of S bytes reads S and writes S, so ``bytes_per_s = 2 * S / median_time``: the
    same bookkeeping as a kernel's floor, ``(bytes read + bytes written) / bytes_per_s``.
    With ``threads > 1`` the copy is split into that many slices copied concurrently
    (``np.copyto`` releases the GIL), which shows what several cores can pull.
    """
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


# ----------------------------------------------------------------------------- reporting


def _cpu_model() -> str:
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown"


def machine_info() -> dict[str, Any]:
    """Machine, library versions and date for a results file (does not import JAX)."""
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
    try:
        info["git_commit"] = subprocess.run(
            ["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True,
            cwd=REPO_ROOT, timeout=10,
        ).stdout.strip() or None
    except (OSError, subprocess.SubprocessError):
        info["git_commit"] = None
    return info


def fmt_si(value: float, digits: int = 3) -> str:
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


def fmt_count(n: int) -> str:
    """``10000000 -> '1e7'`` for powers of ten, else grouped digits."""
    exp = int(round(np.log10(n))) if n > 0 else 0
    return f"1e{exp}" if n == 10 ** exp else f"{n:,}"


def markdown_table(headers: Sequence[str], rows: Sequence[Sequence[Any]],
                   align: Sequence[str] | None = None) -> str:
    """A GitHub markdown table; ``align`` per column: ``"l"`` or ``"r"`` (default ``"r"``
    except the first column)."""
    align = align or ["l"] + ["r"] * (len(headers) - 1)
    sep = ["---:" if a == "r" else ":---" for a in align]
    lines = ["| " + " | ".join(map(str, headers)) + " |", "| " + " | ".join(sep) + " |"]
    lines += ["| " + " | ".join(map(str, row)) + " |" for row in rows]
    return "\n".join(lines)


def _plain(value: Any) -> Any:
    """NumPy scalars and arrays as Python numbers and lists (a worker may run an older
    fastuq under ``--baseline``, so this module imports nothing of the package)."""
    return np.asarray(value).tolist()


def write_json(path: Path, data: dict[str, Any]) -> None:
    from fastuq.io.writers import atomic_write_json

    atomic_write_json(path, data)


def section_markers(name: str) -> tuple[str, str]:
    """The comment lines that bound benchmark ``name``'s generated part of the README."""
    return (f"<!-- BEGIN GENERATED: {name} -->", f"<!-- END GENERATED: {name} -->")


def replace_section(path: Path, name: str, body: str) -> bool:
    """Replace the text between ``name``'s markers in ``path`` with ``body``.

    Only that span changes. Returns False (and writes nothing) when the markers are absent,
    so a hand-edited README is never clobbered.
    """
    begin, end = section_markers(name)
    text = path.read_text() if path.exists() else ""
    i, j = text.find(begin), text.find(end)
    if i < 0 or j < i:
        return False
    new = text[: i + len(begin)] + "\n" + body.strip("\n") + "\n" + text[j:]
    path.write_text(new)
    return True


def publish(out: Path, data: dict[str, Any], render: Callable[[dict[str, Any]], str],
            name: str, readme: bool) -> None:
    """Write ``data`` to ``out``, print the section ``render`` makes of it and, when
    ``readme``, put that section into bench/README.md (between ``name``'s markers)."""
    write_json(out, data)
    text = render(data)
    print(text)
    print(f"wrote {out} ({data['wall_s']:.0f} s)")
    if readme and replace_section(README, name, text):
        print(f"rewrote the {name} section of {README}")


def add_output_args(p) -> None:
    """``--out``, ``--no-readme``, ``--from-json`` and the hidden ``--worker`` that the
    benchmarks with a README section share."""
    import argparse

    p.add_argument("--out", type=Path, default=None, help="results JSON path")
    p.add_argument("--no-readme", action="store_true", help="do not rewrite bench/README.md")
    p.add_argument("--from-json", type=Path, default=None,
                   help="measure nothing: re-render the table (and README section) from a "
                        "results JSON written by an earlier run")
    p.add_argument("--worker", help=argparse.SUPPRESS)


def handled(args, name: str, worker_main: Callable[[str], object],
            render: Callable[[dict[str, Any]], str]) -> bool:
    """Run the hidden ``--worker`` (``worker_main(spec)``) or ``--from-json``
    (:func:`rerender` with ``render``) that :func:`add_output_args` declares, if given:
    True when one ran and the benchmark's own measuring is to be skipped."""
    if args.worker:
        worker_main(args.worker)
        return True
    if args.from_json:
        rerender(args.from_json, name, render, args.no_readme)
        return True
    return False


def rerender(path: Path, name: str, render: Callable[[dict[str, Any]], str],
             no_readme: bool) -> None:
    """``--from-json``: print the section ``render`` makes of saved results and, unless
    ``no_readme``, put it into bench/README.md."""
    data = json.loads(Path(path).read_text())
    text = render(data)
    print(text)
    if not no_readme and replace_section(README, name, text):
        print(f"updated the {name} section of {README}", file=sys.stderr)
