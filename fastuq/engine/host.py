"""The host side of a scoring process: its allocators, and the CPUs it may use.

:func:`tune_allocator` and :func:`release_memory` set up and hand back the memory of glibc's
malloc and Arrow's pool (process-wide: the ``fastuq`` command calls them, not the library);
:func:`cgroup_cpu_limit` and :func:`available_cpus` find the CPUs this process may use
(affinity mask, cgroup v1/v2 quota); :func:`default_cpu_devices` and
:func:`use_cpu_devices` split the host CPU into that many XLA devices. Where the kernels run
on those devices (device scope, sharding, bucketed calls) is :mod:`fastuq.engine.runtime`.

JAX is imported lazily, only by :func:`use_cpu_devices`.
"""

from __future__ import annotations

import math
import os
import re
from pathlib import Path

__all__ = ["LEAN_THRESHOLD", "MMAP_THRESHOLD", "TRIM_THRESHOLD", "available_cpus",
           "cgroup_cpu_limit", "default_cpu_devices", "lean_allocator", "release_memory",
           "tune_allocator", "use_cpu_devices"]


#: glibc malloc settings of :func:`tune_allocator`: blocks up to 32 MiB come from the heap,
#: and up to 128 MiB of free memory stays at its top for reuse.
MMAP_THRESHOLD = 32 << 20
TRIM_THRESHOLD = 128 << 20
#: glibc malloc setting of :func:`lean_allocator`: blocks from 1 MiB are mappings of their
#: own, and at most 1 MiB of free memory stays at the heap's top.
LEAN_THRESHOLD = 1 << 20


def tune_allocator() -> bool:
    """Let a scoring process reuse the memory of its per-chunk arrays.

    glibc's malloc serves blocks above a threshold (128 KiB, raised as blocks are freed) as
    fresh ``mmap``s and returns free memory at the top of its heap to the system, so the
    NumPy temporaries of every chunk fault their pages in again: ~90,000 page faults per
    1e6 trajectories, about 60% of the time of packing a column and 10-15% of a whole
    ``fastuq score`` run. Fixing the threshold (:data:`MMAP_THRESHOLD`) and keeping up to
    :data:`TRIM_THRESHOLD` free (``mallopt``) keeps those pages; the peak RSS is about
    the same (a few percent more).

    Arrow's default pool (mimalloc in the wheels) is replaced by jemalloc (else the
    system allocator, tuned as above) unless ``ARROW_DEFAULT_MEMORY_POOL`` chooses: mimalloc
    returns the memory of large buffers (a chunk of a top-k column is hundreds of MB) to
    the system and faults it in again: ``--method all`` on 1e6 top-k trajectories spent 8.9
    s of 12 in the kernel; 3.7 s of 7.6 with jemalloc.

    Process-wide, so the ``fastuq`` command calls it, not the library. glibc only; left
    alone when ``MALLOC_MMAP_THRESHOLD_`` or ``MALLOC_TRIM_THRESHOLD_`` (or
    ``GLIBC_TUNABLES``) choose already. Returns whether it applied.
    """
    if "ARROW_DEFAULT_MEMORY_POOL" not in os.environ:
        import pyarrow as pa

        for pool in (pa.jemalloc_memory_pool, pa.system_memory_pool):
            try:
                pa.set_memory_pool(pool())
                break
            except (NotImplementedError, pa.ArrowException):
                continue
    return _malloc_thresholds(MMAP_THRESHOLD, TRIM_THRESHOLD)


def _malloc_thresholds(mmap: int, trim: int) -> bool:
    """glibc ``mallopt``: blocks of ``mmap`` bytes and more are their own mappings, and up
    to ``trim`` bytes stay free at the heap's top. glibc only; left alone when
    ``MALLOC_MMAP_THRESHOLD_`` or ``MALLOC_TRIM_THRESHOLD_`` (or ``GLIBC_TUNABLES``) choose.
    Returns whether it applied."""
    import platform

    if platform.libc_ver()[0] != "glibc" or any(
            k in os.environ for k in ("MALLOC_MMAP_THRESHOLD_", "MALLOC_TRIM_THRESHOLD_",
                                      "GLIBC_TUNABLES")):
        return False
    try:
        import ctypes

        libc = ctypes.CDLL("libc.so.6")
        m_trim_threshold, m_mmap_threshold = -1, -3
        return bool(libc.mallopt(m_mmap_threshold, mmap)
                    and libc.mallopt(m_trim_threshold, trim))
    except (OSError, AttributeError):
        return False


def lean_allocator() -> bool:
    """After scoring: let freed memory go back to the system at once (glibc ``mallopt``:
    blocks of :data:`LEAN_THRESHOLD` and more are their own mappings, returned when freed,
    and no more than that stays free at the heap's top), undoing :func:`tune_allocator`'s
    page keeping for a phase whose temporaries differ in size from step to step (``fastuq
    eval``'s metrics: at 1e7 rows its Platt stage held 0.2-0.3 GiB of freed heap). glibc
    only; left alone when ``MALLOC_MMAP_THRESHOLD_`` or ``MALLOC_TRIM_THRESHOLD_`` (or
    ``GLIBC_TUNABLES``) choose. Returns whether it applied."""
    return _malloc_thresholds(LEAN_THRESHOLD, LEAN_THRESHOLD)


def release_memory() -> None:
    """Hand the memory that Arrow's pool and glibc's malloc keep for reuse back to the
    system (between the phases of a command, e.g. after ``fastuq eval`` has scored)."""
    import pyarrow as pa

    pa.default_memory_pool().release_unused()
    import platform

    if platform.libc_ver()[0] == "glibc":
        try:
            import ctypes

            ctypes.CDLL("libc.so.6").malloc_trim(0)
        except (OSError, AttributeError):
            pass


def _read(path: Path) -> str | None:
    try:
        return path.read_text()
    except OSError:
        return None


def _cpu_max(directory: Path) -> float | None:
    """cgroup v2 ``cpu.max`` (``"QUOTA PERIOD"`` or ``"max PERIOD"``) in CPUs; ``None``
    where there is no limit, no file or it does not parse."""
    text = _read(directory / "cpu.max")
    parts = text.split() if text else []
    if len(parts) != 2 or parts[0] == "max":
        return None
    try:
        quota, period = int(parts[0]), int(parts[1])
    except ValueError:
        return None
    return quota / period if quota > 0 and period > 0 else None


def _cfs_quota(directory: Path) -> float | None:
    """cgroup v1 ``cpu.cfs_quota_us / cpu.cfs_period_us`` in CPUs; ``None`` where there is
    no limit (quota -1), no file or it does not parse."""
    quota, period = _read(directory / "cpu.cfs_quota_us"), _read(directory / "cpu.cfs_period_us")
    try:
        q, t = int((quota or "").strip()), int((period or "").strip())
    except ValueError:
        return None
    return q / t if q > 0 and t > 0 else None


def _walk_limits(base: Path, path: str, read) -> list[float]:
    """The limits ``read`` finds in the process's cgroup directory under the hierarchy
    mounted at ``base`` and in every ancestor up to ``base`` (a child cannot use more than
    its parents allow). Where the process's path is not visible under ``base`` (a
    container's own cgroup mounted as the root), ``base`` alone."""
    rel = [part for part in path.strip().split("/") if part and part not in (".", "..")]
    directory = base.joinpath(*rel)
    if not directory.is_dir():
        directory = base
    found = []
    while True:
        limit = read(directory)
        if limit is not None:
            found.append(limit)
        if directory == base:
            return found
        directory = directory.parent


def cgroup_cpu_limit(root: str | os.PathLike = "/sys/fs/cgroup",
                     self_cgroup: str | os.PathLike = "/proc/self/cgroup") -> float | None:
    """The CPU quota of this process's cgroup, in CPUs (e.g. 1.5), or ``None`` without one.

    Reads cgroup v2 ``cpu.max`` (a unified hierarchy at ``root``, or at ``root/unified`` on
    a hybrid system) and cgroup v1 ``cpu.cfs_quota_us`` / ``cpu.cfs_period_us`` (the ``cpu``
    controller's hierarchy under ``root``), in the process's cgroup (from ``self_cgroup``)
    and its ancestors, and returns the smallest. Unreadable or malformed files count as no
    limit.
    """
    root = Path(root)
    v2_path, v1_path = "/", "/"
    for line in (_read(Path(self_cgroup)) or "").splitlines():
        hierarchy, _, rest = line.partition(":")
        controllers, _, path = rest.partition(":")
        if hierarchy == "0" and controllers == "":
            v2_path = path
        elif "cpu" in controllers.split(","):
            v1_path = path
    limits: list[float] = []
    for base in (root, root / "unified"):
        if (base / "cgroup.controllers").is_file():
            limits += _walk_limits(base, v2_path, _cpu_max)
            break
    for name in ("cpu", "cpu,cpuacct", "cpuacct,cpu"):
        base = root / name
        if (base / "cpu.cfs_quota_us").is_file():
            limits += _walk_limits(base, v1_path, _cfs_quota)
            break
    return min(limits) if limits else None


def available_cpus(root: str | os.PathLike = "/sys/fs/cgroup",
                   self_cgroup: str | os.PathLike = "/proc/self/cgroup") -> int:
    """The CPUs this process may use: the CPUs of its affinity mask
    (``os.sched_getaffinity``; ``os.cpu_count()`` where the platform has none), capped by
    its cgroup CPU quota (:func:`cgroup_cpu_limit`, rounded up: a quota of 1.5 CPUs lets
    two threads run 75% of the time each); at least 1. Never the host's core count alone:
    a container limited to 2 CPUs on a 64-core host gets 2."""
    try:
        cpus = len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        cpus = os.cpu_count() or 1
    quota = cgroup_cpu_limit(root, self_cgroup)
    if quota is not None:
        cpus = min(cpus, math.ceil(quota))
    return max(1, cpus)


_DEVICE_COUNT_FLAG = re.compile(r"--xla_force_host_platform_device_count=(\d+)")


def default_cpu_devices() -> int:
    """The XLA host devices fastuq uses when not told: the count of
    ``--xla_force_host_platform_device_count`` in ``XLA_FLAGS`` where set (the user chose),
    else :func:`available_cpus`."""
    match = _DEVICE_COUNT_FLAG.findall(os.environ.get("XLA_FLAGS", ""))
    if match and int(match[-1]) >= 1:
        return int(match[-1])
    return available_cpus()


def use_cpu_devices(n: int | None = None, *, strict: bool = True) -> int:
    """Split the host CPU into ``n`` XLA devices (default: :func:`default_cpu_devices`, one
    per CPU this process may use), so that fastuq's kernels shard each batch across them and
    use every core.

    XLA's CPU backend runs one fused loop on one thread; with several host devices and the
    batch sharded across them, each device runs on its own core. Any count works: each
    batch is padded to a multiple of it. This must be called before JAX creates its CPU
    backend (before the first JAX computation in the process); it is the same as setting
    ``XLA_FLAGS=--xla_force_host_platform_device_count=n`` or
    ``jax.config.update("jax_num_cpu_devices", n)`` yourself.

    Returns:
      the number of CPU devices JAX will use.

    Raises:
      ValueError: ``n < 1``.
      RuntimeError: JAX's backend already exists with a different device count (with
        ``strict=False`` the existing backend is kept and its device count returned).
    """
    n = default_cpu_devices() if n is None else int(n)
    if n < 1:
        raise ValueError(f"n must be >= 1, got {n}")
    import jax

    try:
        jax.config.update("jax_num_cpu_devices", n)
    except RuntimeError as exc:  # backend already initialised
        have = len(jax.devices("cpu"))
        if have != n and not strict:
            return have
        if have != n:
            raise RuntimeError(
                f"JAX's CPU backend is already running with {have} device(s); call "
                "fastuq.use_cpu_devices before any JAX computation"
            ) from exc
    return n
