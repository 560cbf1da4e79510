"""The estimator registry: one entry per estimator, naming its packed inputs, its parameters
and presets, its JAX kernel and its NumPy reference.

Kernels are named by ``"module:function"`` strings inside ``fastuq.kernels`` and imported on
first use, so that ``import fastuq`` (and ``fastuq --help``) does not import JAX.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from types import MappingProxyType

__all__ = ["ESTIMATORS", "Estimator", "get_estimator"]


@dataclass(frozen=True)
class Estimator:
    """What the engine needs to know about one estimator.

    name: the output column name (``fastuq score --method NAME``).
    inputs: packed arrays it reads, e.g. ``("agreement", "token_entropy", "round_mask")``.
    params: parameter names with their defaults (``None``: taken from the protocol preset).
    presets: protocol -> parameter values.
    jax_kernel / numpy_kernel: ``"module:function"`` inside ``fastuq.kernels``.
    runner: ``"module:function"`` inside ``fastuq`` that scores a
      :class:`~fastuq._batch.Batch`: ``run(batch, *, params, protocol, backend) -> [N]``.
    description: one line for ``--help`` and tables.
    """

    name: str
    inputs: tuple[str, ...]
    params: tuple[str, ...]
    presets: Mapping[str, Mapping[str, float]]
    jax_kernel: str
    numpy_kernel: str
    runner: str
    description: str = ""
    _cache: dict = field(default_factory=dict, repr=False, compare=False)

    def kernel(self, backend: str) -> Callable:
        """The kernel function for ``backend`` ("jax" or "numpy"), imported on first use."""
        if backend not in ("jax", "numpy"):
            raise ValueError(f"backend must be 'jax' or 'numpy', got {backend!r}")
        if backend not in self._cache:
            target = self.jax_kernel if backend == "jax" else self.numpy_kernel
            module, func = target.split(":")
            mod = importlib.import_module(f"fastuq.kernels.{module}")
            self._cache[backend] = getattr(mod, func)
        return self._cache[backend]

    def run(self, batch, *, params: Mapping[str, object], protocol: str | None, backend: str):
        """Score ``batch`` (a :class:`~fastuq._batch.Batch`): uncertainty ``[N]``."""
        if "run" not in self._cache:
            module, func = self.runner.split(":")
            self._cache["run"] = getattr(importlib.import_module(f"fastuq.{module}"), func)
        return self._cache["run"](batch, params=params, protocol=protocol, backend=backend)

    def resolve(self, protocol: str, overrides: Mapping[str, object]) -> dict[str, object]:
        """Parameter values for ``protocol`` with non-``None`` ``overrides`` applied.

        Raises ValueError when the protocol has no preset and a parameter is not overridden.
        """
        preset = self.presets.get(protocol)
        values: dict[str, object] = {}
        for name in self.params:
            value = overrides.get(name)
            if value is None:
                if preset is None:
                    known = ", ".join(sorted(self.presets))
                    raise ValueError(
                        f"{self.name}: protocol {protocol!r} has no preset (known: {known}); "
                        f"give {name} explicitly"
                    )
                value = preset[name]
            values[name] = value
        return values


SAUCE_PRESETS: Mapping[str, Mapping[str, float]] = MappingProxyType(
    {
        "debate": MappingProxyType({"lam": 0.95, "q": 0.10, "sigma2_0": 0.25, "mu_0": 0.0}),
        "dylan": MappingProxyType({"lam": 0.70, "q": 0.001, "sigma2_0": 0.25, "mu_0": 0.0}),
    }
)

ESTIMATORS: Mapping[str, Estimator] = MappingProxyType(
    {
        "sauce": Estimator(
            name="sauce",
            inputs=("agreement", "token_entropy", "round_mask"),
            params=("lam", "q", "sigma2_0", "mu_0"),
            presets=SAUCE_PRESETS,
            jax_kernel="sauce:sauce_scan",
            numpy_kernel="sauce:sauce_scan_numpy",
            runner="_estimators:run_sauce",
            description="SAUCE lambda-Kalman filter over agreement and token entropy",
        ),
    }
)


def get_estimator(name: str) -> Estimator:
    """The registry entry called ``name``; ValueError listing the known names otherwise."""
    try:
        return ESTIMATORS[name]
    except KeyError:
        raise ValueError(
            f"unknown estimator {name!r}; known: {', '.join(sorted(ESTIMATORS))}"
        ) from None
