"""A packed input that lives on the device: the one type that the runtime
(:func:`fastuq.engine.runtime.run_bucketed`, which hands it to a kernel as it is) and the
device packer (:mod:`fastuq.engine.device_pack`, which builds it) share. It sits below both,
so that neither imports the other for it."""

from __future__ import annotations

import numpy as np

__all__ = ["DeviceArray"]


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
