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
      :class:`~fastuq.engine.batch.Batch`: ``run(batch, *, params, protocol, backend) -> [N]``.
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
        """Score ``batch`` (a :class:`~fastuq.engine.batch.Batch`): uncertainty ``[N]``."""
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

def _baseline(name: str, module_kernel: str, inputs: tuple[str, ...], description: str):
    return Estimator(
        name=name,
        inputs=inputs,
        params=(),
        presets=MappingProxyType({}),
        jax_kernel=f"baselines:{module_kernel}",
        numpy_kernel=f"baselines:{module_kernel}_numpy",
        runner=f"engine.estimators:run_{name}",
        description=description,
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
            runner="engine.estimators:run_sauce",
            description="SAUCE lambda-Kalman filter over agreement and token entropy",
        ),
        "umas": Estimator(
            name="umas",
            inputs=("seq_logprob", "node_mask"),
            params=("confidence",),
            presets=MappingProxyType({}),
            jax_kernel="umas:umas_scan",
            numpy_kernel="umas:umas_scan_numpy",
            runner="engine.estimators:run_umas",
            description="UMAS trust-weighted dynamic confidence over the interaction graph",
        ),
        "umas_fix": Estimator(
            name="umas_fix",
            inputs=("seq_logprob", "node_mask"),
            params=("confidence",),
            presets=MappingProxyType({}),
            jax_kernel="umas:umas_scan",
            numpy_kernel="umas:umas_scan_numpy",
            runner="engine.estimators:run_umas_fix",
            description="UMAS_FIX: minus the mean static node confidence",
        ),
        "msp_final": _baseline("msp_final", "node_baselines", ("seq_logprob", "node_mask"),
                               "minus the mean sequence log-probability of the final nodes"),
        "perplexity_final": _baseline(
            "perplexity_final", "node_baselines", ("seq_logprob", "n_tokens", "node_mask"),
            "mean perplexity exp(-seq_logprob / n_tokens) of the final nodes"),
        "mean_token_entropy": _baseline(
            "mean_token_entropy", "node_baselines", ("node_entropy",),
            "mean over all nodes of the node's mean token entropy (nats)"),
        "last_agreement": _baseline("last_agreement", "round_baselines",
                                    ("agreement", "round_mask"),
                                    "minus the agreement of the last executed round"),
        "mean_agreement": _baseline("mean_agreement", "round_baselines",
                                    ("agreement", "round_mask"),
                                    "minus the mean agreement over executed rounds"),
        "weighted_agreement": _baseline(
            "weighted_agreement", "round_baselines", ("agreement", "token_entropy", "round_mask"),
            "minus the static precision-weighted agreement (weights 1/R_t)"),
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


def takers(param: str) -> list[str]:
    """Estimators that take the parameter ``param``, in registry order."""
    return [name for name, est in ESTIMATORS.items() if param in est.params]


def check_params(params: Mapping[str, object], methods=None) -> None:
    """Refuse estimator parameters that would be ignored.

    Args:
      params: parameter name -> value (``None`` values are not given and not checked).
      methods: the estimators that will run (``None``: not known yet, only names are checked).

    Raises:
      TypeError: a name no estimator takes (naming it, a close match, and the known ones).
      ValueError: a parameter none of ``methods`` takes (naming the estimators that do).
    """
    import difflib

    known = sorted({p for est in ESTIMATORS.values() for p in est.params})
    for name, value in params.items():
        if value is None:
            continue
        if name not in known:
            close = difflib.get_close_matches(name, known, n=1)
            hint = f" (did you mean {close[0]!r}?)" if close else ""
            listing = "; ".join(f"{p} ({', '.join(takers(p))})" for p in known)
            raise TypeError(f"unknown estimator parameter {name!r}{hint}; known: {listing}")
        if methods is not None and not any(name in ESTIMATORS[m].params for m in methods
                                           if m in ESTIMATORS):
            raise ValueError(
                f"parameter {name!r} would be ignored: it is taken by "
                f"{', '.join(takers(name))}, none of which is among the methods "
                f"({', '.join(methods) or 'none'})"
            )
