"""Gradient fitting of SAUCE's parameters, as before its move to :mod:`fastuq.evaluation`
(this module only re-exports :mod:`fastuq.evaluation.fit`)."""

from fastuq.evaluation.fit import OBJECTIVES, FitResult, fit_sauce, load_params, per_parameter

__all__ = ["OBJECTIVES", "FitResult", "fit_sauce", "load_params", "per_parameter"]
