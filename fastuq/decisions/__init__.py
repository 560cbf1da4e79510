"""Decisions made from scores: whether to pass an answer, and when to stop a debate.

* :mod:`fastuq.decisions.threshold` -- a risk-controlling threshold for a score gate
  (:func:`calibrate_threshold`, Clopper-Pearson fixed-sequence testing);
* :mod:`fastuq.decisions.calibration` -- probabilities of being correct: Platt and isotonic
  maps per estimator and protocol (:class:`Calibrator`; the isotonic fit is
  :mod:`fastuq.decisions.isotonic`'s);
* :mod:`fastuq.decisions.fileheader` -- the header check of the calibration and stack files
  (:func:`~fastuq.decisions.fileheader.check_file_header`);
* :mod:`fastuq.decisions.gatefile` -- a calibrated gate as one object and one file
  (:class:`Gate`: ``calibrate`` then ``apply``, per protocol if asked; ``save``/``load``);
* :mod:`fastuq.decisions.consistency` -- the consistency gate's own score
  (:func:`consistency_scores`, :func:`corpus_consistency`);
* :mod:`fastuq.decisions.outcomes` -- what stopping a saved debate after each round gives;
* :mod:`fastuq.decisions.replay` -- budget policies replayed over saved debates
  (:func:`replay`, :class:`Policy`, the Pareto front and its plot).

This module only re-exports; importing it imports NumPy and PyArrow, not JAX.
(``fastuq.gate`` and ``fastuq.replay`` re-export the same names, as before the move.)
"""

from fastuq.decisions.calibration import (
    CALIBRATION_METHODS,
    Calibrator,
    calibration_metrics,
    scoring_record,
)
from fastuq.decisions.consistency import consistency_scores, corpus_consistency
from fastuq.decisions.gatefile import Gate
from fastuq.decisions.isotonic import isotonic_fit, isotonic_predict
from fastuq.decisions.outcomes import (
    Outcomes,
    grid_sums,
    round_answer_slots,
    round_outcomes,
    stop_rounds,
    uaad_grid_sums,
)
from fastuq.decisions.replay import (
    POLICIES,
    Policy,
    ReplayResult,
    pareto_front,
    plot_replay,
    replay,
    tie_counts,
)
from fastuq.decisions.threshold import GateCalibration, calibrate_threshold, clopper_pearson_upper

__all__ = [
    "CALIBRATION_METHODS", "Calibrator", "calibration_metrics", "isotonic_fit",
    "isotonic_predict", "scoring_record",
    "POLICIES", "Gate", "GateCalibration", "Outcomes", "Policy", "ReplayResult",
    "calibrate_threshold",
    "clopper_pearson_upper", "consistency_scores", "corpus_consistency", "grid_sums",
    "pareto_front", "plot_replay", "replay", "round_answer_slots", "round_outcomes",
    "stop_rounds", "tie_counts", "uaad_grid_sums",
]
