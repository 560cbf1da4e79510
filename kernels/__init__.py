"""Pure array math for fastuq: one module per estimator family, each with its jitted JAX
kernel and its NumPy twin side by side. No I/O, no strings. Installed as ``fastuq.kernels``.

Importing this package does not import JAX; importing a kernel module does.
"""

import importlib as _importlib
import importlib.util as _importlib_util


def __getattr__(name: str):
    """``fastuq.kernels.sauce`` (any kernel module) loads on first attribute access."""
    if not name.startswith("_") and _importlib_util.find_spec(f"{__name__}.{name}"):
        return _importlib.import_module(f"{__name__}.{name}")
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
