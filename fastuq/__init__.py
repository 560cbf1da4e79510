"""fastuq: exact, fast uncertainty scoring of multi-agent LLM reasoning.

Scores are uncertainties: higher means less likely correct. Natural logarithms throughout.
Importing fastuq does not import JAX; the first kernel call does.
"""

from ._registry import ESTIMATORS, Estimator, get_estimator
from ._runtime import use_cpu_devices
from ._sauce import (
    PRESETS,
    lambda_kalman_forward,
    sauce,
    sauce_batch,
    sauce_score,
)
from ._signals import compute_token_entropy, majority_margin

__version__ = "0.1.0"

__all__ = [
    "ESTIMATORS",
    "Estimator",
    "PRESETS",
    "compute_token_entropy",
    "get_estimator",
    "lambda_kalman_forward",
    "majority_margin",
    "sauce",
    "sauce_batch",
    "sauce_score",
    "use_cpu_devices",
]
