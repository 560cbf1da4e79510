"""Lazy submodule attributes for fastuq's packages (no dependencies, imports nothing heavy).

``import fastuq`` loads neither JAX nor the heavier submodules; ``fastuq.gate``,
``fastuq.io.readers`` or ``fastuq.metrics.device_rank`` load on first attribute access, as
after an explicit ``import fastuq.gate``.
"""

from __future__ import annotations

import importlib
import importlib.util
from collections.abc import Callable
from types import ModuleType

__all__ = ["submodule_getattr"]


def submodule_getattr(package: str) -> Callable[[str], ModuleType]:
    """A module ``__getattr__`` for ``package`` that imports its submodule ``name`` on first
    access (public names only: not ``_private`` or dunder names) and raises AttributeError,
    as Python does, for a name that is no submodule."""

    def __getattr__(name: str) -> ModuleType:
        if not name.startswith("_") and importlib.util.find_spec(f"{package}.{name}"):
            return importlib.import_module(f"{package}.{name}")
        raise AttributeError(f"module {package!r} has no attribute {name!r}")

    return __getattr__
