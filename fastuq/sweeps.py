"""SAUCE hyperparameter sweeps, as before their move to :mod:`fastuq.evaluation` (this
module only re-exports :mod:`fastuq.evaluation.sweeps` and the inputs of
:mod:`fastuq.evaluation.sauce_data`)."""

from fastuq.evaluation.sauce_data import PARAMS, SauceData, load_sauce_data
from fastuq.evaluation.sweeps import (
    SWEEP_METRICS,
    CVSummary,
    check_protocol_params,
    heatmap,
    parse_values,
    stratified_folds,
    sweep,
)

__all__ = ["PARAMS", "SWEEP_METRICS", "CVSummary", "SauceData", "check_protocol_params",
           "heatmap", "load_sauce_data", "parse_values", "stratified_folds", "sweep"]
