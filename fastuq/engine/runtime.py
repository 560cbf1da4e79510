"""How fastuq runs its JAX kernels: dtype scoping, the device scope, bucketed batch sizes
and the per-device split of each batch.

JAX is imported lazily, only by the functions that need it. The host side of a process
(its allocators, the CPUs it may use, how many XLA CPU devices it splits them into) is
:mod:`fastuq.engine.host`; its public names are re-exported here, so that
``fastuq.engine.runtime.available_cpus`` (and the others) keeps working.

Runtime state is per context, not per process: the platform of :func:`device_scope` and the
logs of :func:`record_splits` live in ``contextvars``, so two threads (or asyncio tasks) in
different scopes do not see each other's, and a thread that fastuq's pipeline starts runs in
a copy of its caller's context (:func:`in_context`), so it sees the caller's scope. The
caches (meshes, compiled per-device wrappers) are keyed by everything they depend on and
filled under a lock.
"""

from __future__ import annotations

import contextlib
import contextvars
import math
import sys
import threading
import warnings
from collections.abc import Callable, Iterator, Sequence

import numpy as np

from fastuq.engine.device_array import DeviceArray, PlacedArray
from fastuq.engine.host import (
    MMAP_THRESHOLD,
    TRIM_THRESHOLD,
    available_cpus,
    cgroup_cpu_limit,
    default_cpu_devices,
    release_memory,
    tune_allocator,
    use_cpu_devices,
)

__all__ = ["DEVICES", "MMAP_THRESHOLD", "TRIM_THRESHOLD", "available_cpus", "bucket_size",
           "cgroup_cpu_limit", "default_cpu_devices", "device_scope", "device_split",
           "in_context", "local_devices", "place_batched", "record_splits", "release_memory",
           "scoped_platform", "tune_allocator", "use_cpu_devices", "x64_scope"]

#: What ``device=`` / ``--device`` accept: ``"auto"`` (JAX's default backend: a GPU when
#: there is one), ``"cpu"`` or ``"gpu"``.
DEVICES = ("auto", "cpu", "gpu")
#: The platform of the innermost :func:`device_scope` of this context (None: JAX's default).
_PLATFORM: contextvars.ContextVar[str | None] = contextvars.ContextVar("fastuq_platform",
                                                                      default=None)
#: Guards the module's caches (filled once per key, read from any thread).
_LOCK = threading.RLock()

#: Smallest padded batch of small trajectories: below this, padding costs nothing worth
#: saving.
MIN_BUCKET = 1024
#: The padded work (trajectories x elements per trajectory, e.g. rounds x agent slots) that
#: costs nothing worth saving: :data:`MIN_BUCKET` trajectories of up to 64 elements. Larger
#: trajectories get a smaller least bucket (:func:`min_bucket`), so that a handful of long
#: debates of large teams does not pay for 1,024.
MIN_BUCKET_ELEMENTS = MIN_BUCKET * 64


def _pow2(n: int) -> int:
    """The next power of two ``>= n`` (1 for ``n <= 1``)."""
    return 1 << max(0, int(n) - 1).bit_length()


def min_bucket(elements: int = 1) -> int:
    """The least padded batch for trajectories of ``elements`` elements each (the largest
    per-trajectory size of a kernel's inputs: rounds x agent slots, ...): the largest power
    of two whose padded work stays within :data:`MIN_BUCKET_ELEMENTS`, at most
    :data:`MIN_BUCKET` and at least 1."""
    per = max(1, int(elements))
    if per > MIN_BUCKET_ELEMENTS:
        return 1
    return min(MIN_BUCKET, 1 << ((MIN_BUCKET_ELEMENTS // per).bit_length() - 1))


def bucket_size(n: int, chunk_size: int, *, devices: int = 1, elements: int = 1) -> int:
    """The padded batch size for a chunk of ``n`` trajectories.

    The next power of two ``>= n``, at least :func:`min_bucket` of ``elements`` (1,024 for
    small trajectories, fewer for long debates of large teams: padding is bounded by the
    work) and at most ``chunk_size``; then rounded up to a multiple of ``devices``, so that
    every device takes an equal slice. Each power of two gives one width per device count:
    a kernel compiles once per bucket.

    Args:
      n: trajectories in the chunk; chunk_size: the largest chunk.
      devices: devices the batch is split over (>= 1).
      elements: elements per trajectory of the largest input (e.g. ``T * A``).
    """
    devices = int(devices)
    if devices < 1:
        raise ValueError(f"devices must be >= 1, got {devices}")
    if n >= chunk_size:
        base = chunk_size
    else:
        base = min(chunk_size, max(min_bucket(elements), _pow2(n)))
    return -(-base // devices) * devices


def device_split(n: int, width: int, devices: int) -> tuple[np.ndarray, int]:
    """How :func:`run_bucketed` lays ``n`` trajectories out in a batch padded to ``width``
    (a multiple of ``devices``) split over ``devices``: device ``k`` scores the slice
    ``[k * s, (k + 1) * s)`` (``s = width // devices``), whose first rows are the
    trajectories ``offsets[k]:offsets[k + 1]`` and the rest padding. The trajectories are
    dealt out evenly (``n // devices`` or one more each), so every device scores some
    whenever ``n >= devices``.

    Returns:
      ``(offsets [devices + 1], s)``.
    """
    if devices < 1 or width % devices or n > width:
        raise ValueError(f"cannot split {n} trajectories padded to {width} over {devices} "
                         "devices")
    base, extra = divmod(n, devices)
    counts = np.full(devices, base, np.int64)
    counts[:extra] += 1
    offsets = np.zeros(devices + 1, np.int64)
    np.cumsum(counts, out=offsets[1:])
    return offsets, width // devices


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

    platform = _PLATFORM.get()
    return jax.local_devices(backend=platform) if platform else jax.local_devices()


def scoped_platform() -> str | None:
    """The platform of the innermost :func:`device_scope` of the current context (thread,
    asyncio task, or a thread started by :func:`in_context`); ``None`` outside any scope
    (JAX's default backend)."""
    return _PLATFORM.get()


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
    is chosen.

    The scope belongs to the current context (a ``contextvars`` variable; JAX's own
    ``jax.default_device`` is per thread): other threads do not see it, except those started
    through :func:`in_context`, which run in a copy of the caller's context."""
    platform = check_device(device)
    if platform is None:
        yield
        return
    import jax

    token = _PLATFORM.set(platform)
    try:
        with jax.default_device(jax.devices(platform)[0]):
            yield
    finally:
        _PLATFORM.reset(token)


def in_context(fn: Callable[[], object]) -> Callable[[], object]:
    """``fn`` to run on another thread as if in the calling one: in a copy of the caller's
    ``contextvars`` context (a new ``threading.Thread`` starts in an empty one), so it sees
    the caller's :func:`device_scope` and :func:`record_splits`, and under JAX's default
    device of that scope (which JAX keeps per thread). Call this in the caller's thread and
    pass the result as the thread's target."""
    context = contextvars.copy_context()
    platform = context.get(_PLATFORM)

    def run():
        if platform is None:
            return context.run(fn)
        import jax

        with jax.default_device(jax.devices(platform)[0]):
            return context.run(fn)

    return run


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
    mesh = _MESHES.get(devices)
    if mesh is None:
        from jax.sharding import Mesh

        with _LOCK:
            mesh = _MESHES.setdefault(devices, Mesh(np.array(devices), ("batch",)))
    return mesh


def _block(axis: int, ndim: int, lo: int, hi: int) -> tuple:
    index = [slice(None)] * ndim
    index[axis] = slice(lo, hi)
    return tuple(index)


def _contiguous(offsets: np.ndarray, s: int) -> bool:
    """Whether the layout of :func:`device_split` puts every trajectory at its own index
    (every device that scores some starts at its slice's start): padding only at the end."""
    counts = np.diff(offsets)
    return bool(np.all((counts == 0) | (offsets[:-1] == np.arange(len(counts)) * s)))


def _pad_split(x: np.ndarray, axis: int, start: int, offsets: np.ndarray, s: int,
               fill) -> np.ndarray:
    """Trajectories ``start + offsets[0] .. start + offsets[-1]`` of ``x`` laid out on
    ``axis`` as :func:`device_split` says (device ``k``'s slice: its trajectories, then
    ``fill``)."""
    devices = len(offsets) - 1
    width, size = devices * s, int(offsets[-1])
    part = x[_block(axis, x.ndim, start, start + size)]
    if size == width:
        return np.ascontiguousarray(part)
    shape = list(x.shape)
    shape[axis] = width
    padded = np.full(shape, fill, x.dtype)
    if _contiguous(offsets, s):
        padded[_block(axis, x.ndim, 0, size)] = part
        return padded
    for k in range(devices):  # one block copy per device
        lo, hi = int(offsets[k]), int(offsets[k + 1])
        padded[_block(axis, x.ndim, k * s, k * s + hi - lo)] = part[_block(axis, x.ndim, lo, hi)]
    return padded


def _split_device(padded, axis: int, offsets: np.ndarray, s: int):
    """A device-packed input (trajectories first, padding after: :mod:`device_pack`) laid
    out as :func:`device_split` says, by a gather on its device."""
    if _contiguous(offsets, s):
        return padded
    import jax.numpy as jnp

    n = int(offsets[-1])  # < width here, so row n is padding
    index = np.full(padded.shape[axis], n, np.int32)
    for k in range(len(offsets) - 1):
        lo, hi = int(offsets[k]), int(offsets[k + 1])
        index[k * s:k * s + hi - lo] = np.arange(lo, hi)
    return jnp.take(padded, index, axis=axis)


def _elements(batched) -> int:
    """Elements per trajectory of the largest batched input (rounds x agent slots, ...)."""
    most = 1
    for x, axis, _ in batched:
        shape = tuple(x.shape)
        if shape:
            most = max(most, math.prod(shape[:axis] + shape[axis + 1:]))
    return most


_UNSPLIT_WARNED = [False]


def _warn_unsplit(n: int, devices: int) -> None:
    """Say once per process that a chunk has fewer trajectories than devices."""
    with _LOCK:
        if _UNSPLIT_WARNED[0]:
            return
        _UNSPLIT_WARNED[0] = True
    warnings.warn(
        f"a chunk of {n} trajector{'y' if n == 1 else 'ies'} cannot be split over {devices} "
        f"devices: each trajectory is scored whole by one device, which leaves {devices - n} "
        "of them with padding only (the scores are the same; said once per process)",
        RuntimeWarning, stacklevel=3)


#: The logs of the enclosing :func:`record_splits` blocks of this context.
_RECORDERS: contextvars.ContextVar[tuple[list[dict], ...]] = contextvars.ContextVar(
    "fastuq_recorders", default=())


@contextlib.contextmanager
def record_splits() -> Iterator[list[dict]]:
    """Record how every kernel call inside the block is split over the devices (for tests
    and diagnostics; it reads the placed inputs back, so it costs a transfer per call).

    Yields a list that gets one dict per chunk: ``estimator`` (the registry's name, where
    the kernel is one), ``n`` (trajectories), ``width`` (the
    padded batch), ``devices`` (device ids, mesh order), ``trajectories`` (per device, the
    count :func:`device_split` dealt it) and ``scored`` (per device, the rows of its shard
    of the kernel's boolean inputs, the round and node masks, with any valid entry: read
    from the arrays as placed on the devices; ``None`` when the kernel takes no mask).
    Records the calls of the current context (and of threads started by :func:`in_context`
    inside the block).
    """
    log: list[dict] = []
    token = _RECORDERS.set(_RECORDERS.get() + (log,))
    try:
        yield log
    finally:
        _RECORDERS.reset(token)


def _record(args: list, axes: tuple, devices: list, size: int, width: int,
            offsets: np.ndarray, estimator: str | None) -> None:
    scored: dict[int, np.ndarray] = {}
    for x, axis in zip(args, axes, strict=True):
        if axis is None or np.dtype(x.dtype) != np.bool_:
            continue
        shards = (x.addressable_shards if hasattr(x, "addressable_shards")
                  else [type("Shard", (), {"device": devices[0], "data": x})()])
        for shard in shards:
            data = np.asarray(shard.data)
            other = tuple(i for i in range(data.ndim) if i != axis)
            rows = data.any(axis=other) if other else data
            key = shard.device.id
            scored[key] = rows if key not in scored else scored[key] | rows
    entry = {
        "estimator": estimator, "n": size, "width": width, "devices": [d.id for d in devices],
        "trajectories": np.diff(offsets).tolist(),
        "scored": [int(scored[d.id].sum()) for d in devices] if scored else None,
    }
    for log in _RECORDERS.get():
        log.append(entry)


def run_bucketed(
    fn,
    batched: list[tuple[np.ndarray, int, object]],
    n: int,
    dtype: np.dtype,
    chunk_size: int = 1 << 20,
    **kwargs,
) -> dict[str, np.ndarray]:
    """Run a jitted kernel over ``n`` trajectories in bucket-sized chunks, each split over
    every local device.

    Each chunk is padded to :func:`bucket_size` (a power of two bounded by the work,
    rounded up to a multiple of the device count) and its trajectories dealt out evenly
    over the devices (:func:`device_split`), every device scoring its own slice
    (:func:`per_device`). Each trajectory is scored whole, by the same code whatever its
    slice, so the chunking, the padding and the number of devices change no bit of a
    score. A chunk of fewer trajectories than devices leaves some devices with padding
    only; it runs all the same, with a warning (once per process).

    Args:
      fn: ``fn(*arrays, **kwargs) -> dict name -> array`` whose outputs carry the batch on
        axis 0 (``[N]``) or axis 1 (``[T, N, ...]``).
      batched: ``(array, batch_axis, pad_fill)`` per positional argument; a 0-d array (a
        scalar parameter) is passed as it is, and so is a
        :class:`~fastuq.engine.device_array.DeviceArray` already padded to the bucket (any
        other is brought to the host, unpadded, and padded as a NumPy array).
      n: trajectories; dtype: the float dtype (float64 runs under a scoped x64).
      chunk_size: largest chunk; smaller ones are padded to a power of two of at least
        :func:`min_bucket`, so ``fn`` compiles once per bucket.

    Returns:
      dict name -> NumPy array with the batch axis of length ``n``.
    """
    import jax


    devices = local_devices()
    ndev = len(devices)
    elements = _elements(batched)
    fixed = None
    if n <= chunk_size:  # one bucket: device-packed inputs of that width go as they are
        # The device packer (or place_batched) chose their bucket already: the other
        # inputs follow it.
        packed = {x.padded.shape[x.axis] for x, _, _ in batched
                  if isinstance(x, DeviceArray) and x.n == n}
        packed |= {x.width for x, _, _ in batched
                   if isinstance(x, PlacedArray) and x.n == n and x.devices == ndev}
        if len(packed) == 1 and (w := packed.pop()) >= n and w % ndev == 0:
            fixed = w
        width = fixed or bucket_size(n, chunk_size, devices=ndev, elements=elements)
        batched = [(x if not isinstance(x, (DeviceArray, PlacedArray))
                    or (x.fits(n, width) if isinstance(x, DeviceArray)
                        else x.fits(n, width, ndev)) else np.asarray(x),
                    axis, fill) for x, axis, fill in batched]
    else:
        batched = [(np.asarray(x) if isinstance(x, (DeviceArray, PlacedArray)) else x, axis,
                    fill) for x, axis, fill in batched]
    axes = tuple(None if x.ndim == 0 else axis for x, axis, _ in batched)
    out: dict[str, np.ndarray] = {}
    with x64_scope(dtype):
        for start in range(0, max(n, 1), chunk_size):
            stop = min(n, start + chunk_size)
            size = stop - start
            width = fixed or bucket_size(size, chunk_size, devices=ndev, elements=elements)
            offsets, s = device_split(size, width, ndev)
            if 0 < size < ndev:
                _warn_unsplit(size, ndev)
            args = []
            for x, axis, fill in batched:
                if isinstance(x, PlacedArray):  # in this bucket's layout already
                    args.append(x.placed)
                    continue
                if isinstance(x, DeviceArray):
                    part = _split_device(x.padded, axis, offsets, s)
                elif x.ndim == 0:
                    args.append(x)
                    continue
                else:
                    part = _pad_split(x, axis, start, offsets, s, fill)
                sharding = batch_sharding(width, part.ndim, axis)
                args.append(part if sharding is None else jax.device_put(part, sharding))
            if _RECORDERS.get():
                _record(args, axes, devices, size, width, offsets, kwargs.get("estimator"))
            res = per_device(fn, axes, **kwargs)(*args)
            for name, value in res.items():
                value = np.asarray(value)
                axis = 0 if value.ndim == 1 else 1
                if name not in out:
                    shape = list(value.shape)
                    shape[axis] = n
                    out[name] = np.empty(shape, value.dtype)
                if _contiguous(offsets, s):
                    out[name][_block(axis, value.ndim, start, stop)] = (
                        value[_block(axis, value.ndim, 0, size)])
                    continue
                for k in range(ndev):  # one block copy per device
                    lo, hi = int(offsets[k]), int(offsets[k + 1])
                    out[name][_block(axis, value.ndim, start + lo, start + hi)] = (
                        value[_block(axis, value.ndim, k * s, k * s + hi - lo)])
    return out


def place_batched(groups: Sequence[Sequence[tuple]], n: int, dtype: np.dtype,
                  chunk_size: int = 1 << 20) -> list[list[tuple]]:
    """Place the batched inputs of several kernel calls over the same ``n`` trajectories on
    the devices in **one** transfer (one ``jax.device_put`` of the list of them), each laid
    out as :func:`run_bucketed` lays out their common bucket, so that each call takes them
    as they are (a pack's chunk: every estimator's inputs at once).

    Args:
      groups: per kernel call, its ``(array, batch_axis, pad_fill)`` arguments as
        :func:`run_bucketed` takes them; a host array given to several calls (a round mask)
        is placed once.
      n, dtype: trajectories and the float dtype (placed under the kernels' x64 scope, so
        the arrays get the types the kernel call would give them); chunk_size: as
        :func:`run_bucketed` (more than one bucket: nothing is placed).

    Returns:
      ``groups`` with each host array of a batch axis replaced by a
      :class:`~fastuq.engine.device_array.PlacedArray` (0-d parameters and device arrays
      as they were). The bucket is that of the largest input (padding changes no score).
    """
    import jax

    if n > chunk_size or n < 1:
        return [list(g) for g in groups]
    devices = local_devices()
    ndev = len(devices)
    todo: dict[tuple, tuple] = {}
    for group in groups:
        for x, axis, fill in group:
            if isinstance(x, np.ndarray) and x.ndim:
                todo.setdefault((id(x), axis, repr(fill)), (x, axis, fill))
    if not todo:
        return [list(g) for g in groups]
    width = bucket_size(n, chunk_size, devices=ndev, elements=_elements(todo.values()))
    offsets, s = device_split(n, width, ndev)
    parts = [_pad_split(x, axis, 0, offsets, s, fill) for x, axis, fill in todo.values()]
    shardings = [batch_sharding(width, part.ndim, axis)
                 for part, (_, axis, _) in zip(parts, todo.values(), strict=True)]
    with x64_scope(dtype):
        if any(sh is None for sh in shardings):
            placed = jax.device_put(parts, devices[0])  # one device (or no even split)
        else:
            placed = jax.device_put(parts, shardings)
    done = {key: PlacedArray(x, dev, n, width, ndev)
            for (key, (x, _, _)), dev in zip(todo.items(), placed, strict=True)}
    return [[(done.get((id(x), axis, repr(fill)), x), axis, fill) for x, axis, fill in group]
            for group in groups]


_PER_DEVICE: dict = {}


def per_device(fn, axes: tuple[int | None, ...], **kwargs):
    """``fn(*args, **kwargs)`` run by every local device on its own slice of the batch
    (``jax.shard_map`` over a 1-d mesh; on one device, ``fn`` itself), jitted as a top-level
    program with the kernels' compile options for the devices' platform
    (``fastuq.kernels._compile.compiler_options``) and cached per (fn, axes, kwargs,
    devices).

    ``axes[k]`` is the batch axis of positional argument ``k`` (``None``: replicated, e.g. a
    scalar parameter). Outputs carry the batch on axis 0 (``[N]``) or 1 (``[T, N, ...]``).
    Each device then runs the kernel's single-device code (fusion, cache blocking) on its
    local block, instead of a GSPMD partitioning of the whole program. Call the result
    outside any JAX trace (it is the outermost jit: JAX takes compile options only there).
    """
    devices = tuple(local_devices())
    key = (fn, axes, tuple(sorted(kwargs.items())), devices)
    wrapped = _PER_DEVICE.get(key)
    if wrapped is None:
        with _LOCK:  # one wrapper per key, whichever thread asks first
            wrapped = _PER_DEVICE.get(key)
            if wrapped is None:
                wrapped = _PER_DEVICE[key] = _per_device(fn, axes, kwargs, devices)
    return wrapped


def _per_device(fn, axes: tuple[int | None, ...], kwargs: dict, devices: tuple):
    import jax
    from jax.sharding import PartitionSpec as P

    from fastuq.kernels._compile import top_level_jit

    def body(*args):
        return fn(*args, **kwargs)

    platform = devices[0].platform
    if len(devices) == 1:
        # The kernel traces inside this jit, which brings the options (JAX takes them only on
        # the outermost jit).
        return top_level_jit(body, platform)
    mesh = _mesh(devices)
    in_specs = tuple(P() if ax is None else P(*([None] * ax), "batch") for ax in axes)

    def run(*args):
        shapes = jax.eval_shape(body, *args)
        out_specs = {k: P("batch") if v.ndim == 1 else P(None, "batch")
                     for k, v in shapes.items()}
        return jax.shard_map(body, mesh=mesh, in_specs=in_specs, out_specs=out_specs,
                             check_vma=False)(*args)

    # The whole program compiles with the kernels' options (an enclosing jit's win).
    return top_level_jit(run, platform)


def compiled_count() -> int:
    """Number of compiled executables held by fastuq's per-device wrappers and kernels (for
    tests asserting that a second chunk of the same bucket shape does not recompile)."""
    with _LOCK:
        wrappers = list(_PER_DEVICE.values())
    total = sum(f._cache_size() for f in wrappers)

    for name in ("fastuq.kernels.sauce", "fastuq.kernels.umas", "fastuq.kernels.baselines",
                 "fastuq.kernels.bccs"):
        mod = sys.modules.get(name)
        if mod is None:
            continue
        for obj in vars(mod).values():
            if hasattr(obj, "_cache_size"):
                total += obj._cache_size()
    return total
