"""fastuq: exact, fast uncertainty scoring of multi-agent LLM reasoning.

Scores are uncertainties: higher means less likely correct. Natural logarithms throughout.
Importing fastuq does not import JAX; the first kernel call does. Submodules such as
``fastuq.metrics`` and ``fastuq.synth`` load on first access.
"""

import importlib

from fastuq.engine.registry import ESTIMATORS, Estimator, Param, get_estimator
from fastuq.engine.registry import register as register_estimator
from fastuq.engine.registry import unregister as unregister_estimator
from fastuq.engine.runtime import use_cpu_devices
from fastuq.engine.sauce import (
    PRESETS,
    lambda_kalman_forward,
    sauce,
    sauce_batch,
    sauce_score,
)
from fastuq.engine.scoring import available_methods, score, score_file
from fastuq.signals.scalar import compute_token_entropy, majority_margin

__version__ = "0.1.0"

_SUBMODULES = (
    "answers", "cli", "engine", "evaluation", "importers", "io", "kernels", "metrics",
    "selection", "signals", "sweeps", "fit", "synth",
)
#: Functions of submodules, re-exported lazily (their modules import JAX on use only).
_LAZY = {"sweep": "sweeps", "fit_sauce": "fit", "FitResult": "fit"}

__all__ = [
    "ESTIMATORS",
    "Estimator",
    "PRESETS",
    "Param",
    "available_methods",
    "compute_token_entropy",
    "get_estimator",
    "lambda_kalman_forward",
    "majority_margin",
    "register_estimator",
    "sauce",
    "sauce_batch",
    "sauce_score",
    "score",
    "score_file",
    "unregister_estimator",
    "use_cpu_devices",
    "sweep",
    "fit_sauce",
    "FitResult",
    *_SUBMODULES,
]


def __getattr__(name: str):
    if name in _SUBMODULES:
        return importlib.import_module(f"fastuq.{name}")
    if name in _LAZY:
        return getattr(importlib.import_module(f"fastuq.{_LAZY[name]}"), name)
    raise AttributeError(f"module 'fastuq' has no attribute {name!r}")
