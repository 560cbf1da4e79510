"""A packed input that lives on the device: the one type that the runtime
(:func:`fastuq.engine.runtime.run_bucketed`, which hands it to a kernel as it is) and the
device packer (:mod:`fastuq.engine.device_pack`, which builds it) share. It sits below both,
so that neither imports the other for it. :class:`PlacedArray` is a host input placed on the
devices ahead of its kernel, in the layout the kernel's bucket takes
(:func:`fastuq.engine.runtime.place_batched`: a pack's chunk, all its inputs in one
transfer)."""

from __future__ import annotations

import numpy as np

__all__ = ["DeviceArray", "PlacedArray"]


class DeviceArray:
    """A packed input on the device, padded on its batch axis to the kernel's bucket.

    ``padded`` is the device array (``[T, n_padded]`` for a per-round input); ``n`` the
    trajectories it holds, ``axis`` its batch axis. :func:`numpy.asarray` gives the
    unpadded host array (``[T, n]``), the one the host path builds; :attr:`shape` is that
    array's shape. :func:`~fastuq.engine.runtime.run_bucketed` hands ``padded`` to a kernel
    as it is.
    """

    __slots__ = ("axis", "n", "padded")

    def __init__(self, padded, n: int, axis: int = 1) -> None:
        self.padded, self.n, self.axis = padded, int(n), int(axis)

    @property
    def shape(self) -> tuple[int, ...]:
        shape = list(self.padded.shape)
        shape[self.axis] = self.n
        return tuple(shape)

    @property
    def ndim(self) -> int:
        return self.padded.ndim

    @property
    def dtype(self) -> np.dtype:
        return np.dtype(self.padded.dtype)

    def fits(self, n: int, width: int) -> bool:
        """Whether it is the ``n`` trajectories padded to ``width`` (one kernel bucket)."""
        return self.n == n and self.padded.shape[self.axis] == width

    def __array__(self, dtype=None, copy=None) -> np.ndarray:
        host = np.asarray(self.padded)
        index = [slice(None)] * host.ndim
        index[self.axis] = slice(0, self.n)
        out = host[tuple(index)]
        return out if dtype is None else out.astype(dtype)

    def __repr__(self) -> str:
        return f"DeviceArray(shape={self.shape}, dtype={self.dtype}, padded={self.padded.shape})"


class PlacedArray:
    """A host input placed on the devices ahead of its kernel, laid out as
    :func:`~fastuq.engine.runtime.run_bucketed` lays out one bucket: padded on its batch
    axis to ``width``, its trajectories dealt over ``devices`` devices
    (:func:`~fastuq.engine.runtime.device_split`) and sharded over them.

    ``host`` is the unpadded host array (``[T, n]`` for a per-round input; what
    :func:`numpy.asarray` gives and the NumPy kernels take), ``placed`` the device array;
    :meth:`fits` says whether a kernel call of ``n`` trajectories in a bucket of ``width``
    over ``devices`` devices takes it as it is.
    """

    __slots__ = ("devices", "host", "n", "placed", "width")

    def __init__(self, host: np.ndarray, placed, n: int, width: int, devices: int) -> None:
        self.host, self.placed = host, placed
        self.n, self.width, self.devices = int(n), int(width), int(devices)

    @property
    def shape(self) -> tuple[int, ...]:
        return tuple(self.host.shape)

    @property
    def ndim(self) -> int:
        return self.host.ndim

    @property
    def dtype(self) -> np.dtype:
        return np.dtype(self.host.dtype)

    def fits(self, n: int, width: int, devices: int) -> bool:
        """Whether it is ``n`` trajectories in a bucket of ``width`` over ``devices``."""
        return self.n == n and self.width == width and self.devices == devices

    def __array__(self, dtype=None, copy=None) -> np.ndarray:
        return self.host if dtype is None else self.host.astype(dtype)

    def __repr__(self) -> str:
        return (f"PlacedArray(shape={self.shape}, dtype={self.dtype}, width={self.width}, "
                f"devices={self.devices})")
