"""How fastuq runs its JAX kernels: dtype scoping, CPU devices, bucketed batch sizes.

JAX is imported lazily, only by the functions that need it.
"""

from __future__ import annotations

import contextlib
import os
import sys
from collections.abc import Iterator

import numpy as np

__all__ = ["DEVICES", "bucket_size", "device_scope", "local_devices", "tune_allocator",
           "use_cpu_devices", "x64_scope"]

#: What ``device=`` / ``--device`` accept: ``"auto"`` (JAX's default backend: a GPU when
#: there is one), ``"cpu"`` or ``"gpu"``.
DEVICES = ("auto", "cpu", "gpu")
_PLATFORM: list[str | None] = [None]  # the platform of device_scope (None: JAX's default)

#: Smallest padded batch: below this, padding costs nothing worth saving.
MIN_BUCKET = 1024


def bucket_size(n: int, chunk_size: int) -> int:
    """The padded batch size for ``n`` trajectories: the next power of two, at least
    ``MIN_BUCKET`` and at most ``chunk_size`` (a multiple of the device count)."""
    if n >= chunk_size:
        return chunk_size
    return max(MIN_BUCKET, 1 << max(0, int(n - 1).bit_length()))


#: glibc malloc settings of :func:`tune_allocator`: blocks up to 32 MiB come from the heap,
#: and up to 128 MiB of free memory stays at its top for reuse.
MMAP_THRESHOLD = 32 << 20
TRIM_THRESHOLD = 128 << 20


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
    import platform

    if "ARROW_DEFAULT_MEMORY_POOL" not in os.environ:
        import pyarrow as pa

        for pool in (pa.jemalloc_memory_pool, pa.system_memory_pool):
            try:
                pa.set_memory_pool(pool())
                break
            except (NotImplementedError, pa.ArrowException):
                continue
    if platform.libc_ver()[0] != "glibc" or any(
            k in os.environ for k in ("MALLOC_MMAP_THRESHOLD_", "MALLOC_TRIM_THRESHOLD_",
                                      "GLIBC_TUNABLES")):
        return False
    try:
        import ctypes

        libc = ctypes.CDLL("libc.so.6")
        m_trim_threshold, m_mmap_threshold = -1, -3
        return bool(libc.mallopt(m_mmap_threshold, MMAP_THRESHOLD)
                    and libc.mallopt(m_trim_threshold, TRIM_THRESHOLD))
    except (OSError, AttributeError):
        return False


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


def use_cpu_devices(n: int | None = None, *, strict: bool = True) -> int:
    """Split the host CPU into ``n`` XLA devices (default: one per core), so that fastuq's
    kernels shard each batch across them and use every core.

    XLA's CPU backend runs one fused loop on one thread; with several host devices and the
    batch sharded across them, each device runs on its own core. This must be called before
    JAX creates its CPU backend (before the first JAX computation in the process); it is the
    same as setting ``XLA_FLAGS=--xla_force_host_platform_device_count=n`` or
    ``jax.config.update("jax_num_cpu_devices", n)`` yourself.

    Returns:
      the number of CPU devices JAX will use.

    Raises:
      RuntimeError: JAX's backend already exists with a different device count (with
        ``strict=False`` the existing backend is kept and its device count returned).
    """
    n = int(n or os.cpu_count() or 1)
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


@contextlib.contextmanager
def x64_scope(dtype: np.dtype) -> Iterator[None]:
    """Enable JAX 64-bit types inside the block when ``dtype`` is float64, and only there;
    the caller's global JAX configuration is untouched."""
    if np.dtype(dtype) == np.float64:
        import jax

        with jax.enable_x64(True):
            yield
    else:
        yield


def local_devices() -> list:
    """The devices kernels run on: those of :func:`device_scope`'s platform, else of JAX's
    default backend."""
    import jax

    platform = _PLATFORM[0]
    return jax.local_devices(backend=platform) if platform else jax.local_devices()


def check_device(device: str | None) -> str | None:
    """The platform for ``device`` (``None`` for ``"auto"``/``None``); ValueError for an
    unknown name or a platform JAX does not have (``"gpu"`` on a machine without one)."""
    if device is None or device == "auto":
        return None
    if device not in DEVICES:
        raise ValueError(f"device must be one of {DEVICES}, got {device!r}")
    import jax

    try:
        jax.devices(device)
    except RuntimeError:
        have = sorted({d.platform for d in jax.devices()})
        raise ValueError(f"device {device!r}: JAX has no such backend here (it has "
                         f"{', '.join(have)}); install jax with CUDA for 'gpu'") from None
    return device


@contextlib.contextmanager
def device_scope(device: str | None) -> Iterator[None]:
    """Run fastuq's kernels on ``device`` (``"cpu"``, ``"gpu"``, or ``"auto"``/``None``: JAX's
    default backend) inside the block: batches are sharded over that platform's devices and
    unsharded arrays placed on its first. The numbers on a CPU are the same whichever way it
    is chosen."""
    platform = check_device(device)
    if platform is None:
        yield
        return
    import jax

    previous = _PLATFORM[0]
    _PLATFORM[0] = platform
    try:
        with jax.default_device(jax.devices(platform)[0]):
            yield
    finally:
        _PLATFORM[0] = previous


def batch_sharding(n_padded: int, ndim: int, axis: int):
    """A sharding that splits the batch axis over all local devices of the default backend,
    or ``None`` when there is one device or the batch does not divide evenly."""
    from jax.sharding import NamedSharding, PartitionSpec

    devices = local_devices()
    if len(devices) < 2 or n_padded % len(devices):
        return None
    mesh = _mesh(tuple(devices))
    spec = [None] * ndim
    spec[axis] = "batch"
    return NamedSharding(mesh, PartitionSpec(*spec))


_MESHES: dict = {}


def _mesh(devices: tuple):
    if devices not in _MESHES:
        from jax.sharding import Mesh

        _MESHES[devices] = Mesh(np.array(devices), ("batch",))
    return _MESHES[devices]


def _pad_axis(x: np.ndarray, axis: int, width: int, fill) -> np.ndarray:
    size = x.shape[axis]
    if size == width:
        return np.ascontiguousarray(x)
    shape = list(x.shape)
    shape[axis] = width
    padded = np.full(shape, fill, x.dtype)
    index = [slice(None)] * x.ndim
    index[axis] = slice(0, size)
    padded[tuple(index)] = x
    return padded


def run_bucketed(
    fn,
    batched: list[tuple[np.ndarray, int, object]],
    n: int,
    dtype: np.dtype,
    chunk_size: int = 1 << 20,
    **kwargs,
) -> dict[str, np.ndarray]:
    """Run a jitted kernel over ``n`` trajectories in bucket-sized chunks.

    Args:
      fn: ``fn(*arrays, **kwargs) -> dict name -> array`` whose outputs carry the batch on
        axis 0 (``[N]``) or axis 1 (``[T, N, ...]``).
      batched: ``(array, batch_axis, pad_fill)`` per positional argument; a 0-d array (a
        scalar parameter) is passed as it is, and so is a
        :class:`~fastuq.engine.device_pack.DeviceArray` already padded to the bucket (any
        other is brought to the host, unpadded, and padded as a NumPy array).
      n: trajectories; dtype: the float dtype (float64 runs under a scoped x64).
      chunk_size: largest chunk (a power of two); smaller ones are padded to a power of two
        of at least ``MIN_BUCKET``, so ``fn`` compiles once per bucket.

    Returns:
      dict name -> NumPy array with the batch axis of length ``n``.
    """
    import jax

    from fastuq.engine.device_pack import DeviceArray

    if n <= chunk_size:  # one bucket: device-packed inputs of that width go as they are
        width = bucket_size(n, chunk_size)
        batched = [(x if not isinstance(x, DeviceArray) or x.fits(n, width) else np.asarray(x),
                    axis, fill) for x, axis, fill in batched]
    else:
        batched = [(np.asarray(x) if isinstance(x, DeviceArray) else x, axis, fill)
                   for x, axis, fill in batched]
    out: dict[str, np.ndarray] = {}
    with x64_scope(dtype):
        for start in range(0, max(n, 1), chunk_size):
            stop = min(n, start + chunk_size)
            size = stop - start
            width = bucket_size(size, chunk_size)
            args = []
            for x, axis, fill in batched:
                if isinstance(x, DeviceArray):
                    part = x.padded
                elif x.ndim == 0:
                    args.append(x)
                    continue
                else:
                    index = [slice(None)] * x.ndim
                    index[axis] = slice(start, stop)
                    part = _pad_axis(x[tuple(index)], axis, width, fill)
                sharding = batch_sharding(width, part.ndim, axis)
                args.append(part if sharding is None else jax.device_put(part, sharding))
            ndev = len(local_devices())
            if ndev > 1 and width % ndev == 0:
                axes = tuple(None if x.ndim == 0 else axis for x, axis, _ in batched)
                res = per_device(fn, axes, **kwargs)(*args)
            else:
                res = fn(*args, **kwargs)
            for name, value in res.items():
                value = np.asarray(value)
                axis = 0 if value.ndim == 1 else 1
                if name not in out:
                    shape = list(value.shape)
                    shape[axis] = n
                    out[name] = np.empty(shape, value.dtype)
                index = [slice(None)] * value.ndim
                index[axis] = slice(start, stop)
                take = [slice(None)] * value.ndim
                take[axis] = slice(0, size)
                out[name][tuple(index)] = value[tuple(take)]
    return out


_PER_DEVICE: dict = {}


def per_device(fn, axes: tuple[int | None, ...], **kwargs):
    """``fn(*args, **kwargs)`` run by every local device on its own slice of the batch
    (``jax.shard_map`` over a 1-d mesh), jitted and cached per (fn, axes, kwargs).

    ``axes[k]`` is the batch axis of positional argument ``k`` (``None``: replicated, e.g. a
    scalar parameter). Outputs carry the batch on axis 0 (``[N]``) or 1 (``[T, N, ...]``).
    Each device then runs the kernel's single-device code (fusion, cache blocking) on its
    local block, instead of a GSPMD partitioning of the whole program.
    """
    import jax
    from jax.sharding import PartitionSpec as P

    from fastuq.kernels._compile import compiler_options

    devices = tuple(local_devices())
    key = (fn, axes, tuple(sorted(kwargs.items())), devices)
    if key not in _PER_DEVICE:
        mesh = _mesh(devices)
        in_specs = tuple(P() if ax is None else P(*([None] * ax), "batch") for ax in axes)

        def body(*args):
            return fn(*args, **kwargs)

        def run(*args):
            shapes = jax.eval_shape(body, *args)
            out_specs = {k: P("batch") if v.ndim == 1 else P(None, "batch")
                         for k, v in shapes.items()}
            return jax.shard_map(body, mesh=mesh, in_specs=in_specs, out_specs=out_specs,
                                 check_vma=False)(*args)

        # The whole program compiles with the kernels' options (an enclosing jit's win).
        _PER_DEVICE[key] = jax.jit(run, compiler_options=compiler_options(devices[0].platform))
    return _PER_DEVICE[key]


def compiled_count() -> int:
    """Number of compiled executables held by fastuq's per-device wrappers and kernels (for
    tests asserting that a second chunk of the same bucket shape does not recompile)."""
    total = sum(f._cache_size() for f in _PER_DEVICE.values())

    for name in ("fastuq.kernels.sauce", "fastuq.kernels.umas", "fastuq.kernels.baselines",
                 "fastuq.kernels.bccs"):
        mod = sys.modules.get(name)
        if mod is None:
            continue
        for obj in vars(mod).values():
            if hasattr(obj, "_cache_size"):
                total += obj._cache_size()
    return total
