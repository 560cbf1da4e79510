"""fastuq: exact, fast uncertainty scoring of multi-agent LLM reasoning.

Scores are uncertainties: higher means less likely correct. Natural logarithms throughout.
Importing fastuq does not import JAX; the first kernel call does. Submodules such as
``fastuq.metrics``, ``fastuq.gate`` or ``fastuq.replay`` load on first attribute access
(``import fastuq; fastuq.gate.calibrate_threshold(...)``), as does every other submodule
(``fastuq.ray``, with the ``fastuq[ray]`` extra).
"""

import importlib

from fastuq._lazy import submodule_getattr
from fastuq.engine.files import score_file
from fastuq.engine.host import use_cpu_devices
from fastuq.engine.methods import available_methods
from fastuq.engine.registry import ESTIMATORS, Estimator, Param, get_estimator
from fastuq.engine.registry import register as register_estimator
from fastuq.engine.registry import unregister as unregister_estimator
from fastuq.engine.sauce import (
    PRESETS,
    lambda_kalman_forward,
    sauce,
    sauce_batch,
    sauce_score,
)
from fastuq.engine.scoring import score
from fastuq.signals.scalar import compute_token_entropy, majority_margin

__version__ = "0.1.0"

#: Submodules named in ``__all__`` (``from fastuq import *`` imports them; ``fastuq.ray``,
#: which needs the ``fastuq[ray]`` extra, is not among them but loads on access too).
_SUBMODULES = (
    "answers", "cli", "decisions", "engine", "evaluation", "importers", "io", "kernels",
    "metrics", "selection", "signals", "sweeps", "fit", "synth", "gate", "replay", "report",
)
#: Functions of submodules, re-exported lazily (their modules import JAX on use only).
_LAZY = {"sweep": "evaluation.sweeps", "fit_sauce": "evaluation.fit", "FitResult": "evaluation.fit",
         "Pack": "engine.packed"}

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
    "Pack",
    *_SUBMODULES,
]


_submodule = submodule_getattr(__name__)


def __getattr__(name: str):
    """The lazily loaded names: submodules (``fastuq.gate``, ...) and ``_LAZY``'s functions."""
    if name in _LAZY:
        return getattr(importlib.import_module(f"fastuq.{_LAZY[name]}"), name)
    return _submodule(name)


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(__all__))
