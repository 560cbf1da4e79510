"""How much memory a kernel call would take, checked before it is made.

A registry entry may declare ``memory`` (:class:`~fastuq.engine.registry.Estimator`): the
bytes of the largest array its kernel or twin allocates for given input shapes. The runner
calls :func:`check_memory` with the shapes the kernel actually gets (for JAX: padded, as one
device gets them), so a call that cannot fit is refused with the bytes it would need,
instead of ending in the allocator's RESOURCE_EXHAUSTED (or the host's OOM killer).
"""

from __future__ import annotations

import os
from collections.abc import Sequence

import numpy as np

__all__ = ["check_memory", "device_memory_bytes", "host_memory_bytes"]


def host_memory_bytes() -> int | None:
    """The host's physical memory in bytes (``None`` when the OS does not say)."""
    try:
        return int(os.sysconf("SC_PHYS_PAGES")) * int(os.sysconf("SC_PAGE_SIZE"))
    except (ValueError, OSError, AttributeError):
        return None


def device_memory_bytes() -> int | None:
    """The memory one kernel device may use: a GPU's allocator limit, or the host's
    physical memory for CPU devices (which share it); ``None`` when unknown."""
    from fastuq.engine.runtime import local_devices

    devices = local_devices()
    if devices and devices[0].platform != "cpu":
        try:
            stats = devices[0].memory_stats() or {}
        except Exception:  # noqa: BLE001 - a backend without memory stats
            stats = {}
        limit = stats.get("bytes_limit")
        return int(limit) if limit else None
    return host_memory_bytes()


def check_memory(est, shapes: Sequence[tuple[int, ...]], dtype, backend: str) -> None:
    """Refuse a kernel call whose largest array (``est``'s ``memory`` estimate) would not
    fit in the memory of the device that runs it (the host for ``backend="numpy"``).

    Args:
      est: the :class:`~fastuq.engine.registry.Estimator` (nothing is checked without a
        ``memory`` estimate).
      shapes: its inputs' shapes exactly as the kernel gets them (JAX: the chunk padded to
        its bucket, one device's share; NumPy: unpadded).
      dtype: the float dtype; backend: ``"jax"`` or ``"numpy"``.

    Raises:
      ValueError: naming the estimator, the shape and dtype of the array, the bytes it
        would need and the bytes the device has.
    """
    estimate = est.memory_fn()
    if estimate is None or not shapes:
        return
    dtype = np.dtype(dtype)
    need, what = estimate([tuple(int(d) for d in s) for s in shapes], dtype, backend)
    numpy = backend == "numpy"
    limit = host_memory_bytes() if numpy else device_memory_bytes()
    if limit is None or need <= limit:
        return
    gib = 1 << 30
    shape = shapes[0]
    rows = shape[1] if len(shape) > 1 else shape[0]
    where = "the host" if numpy else "one device"
    padded = "" if numpy else " (padded, one device's share)"
    hint = "" if numpy else ", or --backend numpy, which does not pad the chunk"
    raise ValueError(
        f"{est.name}: a chunk of {rows:,} trajectories{padded} with {shape[-1]:,} agent "
        f"slots needs about {need / gib:,.1f} GiB ({need:,} bytes) for the kernel's largest "
        f"array, {what} of {dtype.name}, more than the {limit / gib:,.1f} GiB of {where}; "
        f"refused before allocating it (it grows with the square of the team size, padded "
        f"to a power of two: score smaller teams{hint})")
