"""Shared helpers for fastuq's benchmark scripts (``bench/bench_*.py``).

Not a test module and not part of the package: each benchmark script runs as
``python bench/bench_NAME.py`` from the repository root and imports this file from its own
directory. What is here:

* **timing, memory, the floor** -- the package's harness, ``fastuq/evaluation/timing.py``
  (which ``fastuq bench`` uses), re-exported: :func:`time_calls` (repeats after warm-up),
  :func:`median`, :func:`rss_bytes` / :func:`reset_peak_rss` / :func:`peak_rss_bytes` (the
  peak RSS of one phase, ``VmHWM`` reset through ``/proc/self/clear_refs`` on Linux) and
  :func:`copy_bandwidth`, the speed of a large ``np.copyto`` measured in the same run as the
  kernels it bounds;
* **isolation** -- :func:`run_worker` / :func:`worker_main`: every configuration runs in a
  fresh Python subprocess (its own peak RSS, its own XLA device count) and hands back one
  JSON object;
* **reporting** -- :func:`machine_info`, :func:`markdown_table`, :func:`fmt_si`,
  :func:`write_json` and :func:`replace_section` (rewrite one marked section of
  ``bench/README.md``, leaving the other benchmarks' sections alone).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Callable
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


def _package_timing():
    """The package's timing harness, ``fastuq/evaluation/timing.py`` of this checkout, loaded
    from its file: the numbers of these scripts and of ``fastuq bench`` come from one harness,
    and a worker that runs an older fastuq under ``--baseline`` (``PYTHONPATH``) still gets
    it (the module imports only the standard library and NumPy)."""
    import importlib.util

    path = REPO_ROOT / "fastuq" / "evaluation" / "timing.py"
    spec = importlib.util.spec_from_file_location("_fastuq_bench_timing", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


_timing = _package_timing()
time_calls = _timing.time_calls
median = _timing.median
rss_bytes = _timing.rss_bytes
peak_rss_bytes = _timing.peak_rss_bytes
reset_peak_rss = _timing.reset_peak_rss
copy_bandwidth = _timing.copy_bandwidth
fmt_si = _timing.fmt_si
fmt_num = _timing.fmt_num
markdown_table = _timing.markdown_table


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


# ----------------------------------------------------------------------------- reporting


def machine_info() -> dict[str, Any]:
    """Machine, library versions, load average and date for a results file (the package's
    :func:`fastuq.evaluation.timing.machine_info`, without JAX), and this checkout's
    ``git_commit``."""
    info = _timing.machine_info()
    try:
        info["git_commit"] = subprocess.run(
            ["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True,
            cwd=REPO_ROOT, timeout=10,
        ).stdout.strip() or None
    except (OSError, subprocess.SubprocessError):
        info["git_commit"] = None
    return info


def fmt_count(n: int) -> str:
    """``10000000 -> '1e7'`` for powers of ten, else grouped digits."""
    exp = int(round(np.log10(n))) if n > 0 else 0
    return f"1e{exp}" if n == 10 ** exp else f"{n:,}"


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
