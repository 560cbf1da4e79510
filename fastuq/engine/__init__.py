"""The engine core: the estimator registry, the batch a kernel sees, the runtime (devices,
dtypes, bucketed calls) and the streaming scoring of a corpus."""

from fastuq._lazy import submodule_getattr

__getattr__ = submodule_getattr(__name__)  # its modules load on first access
