"""The score gate, as before its move to :mod:`fastuq.decisions` (this module only
re-exports): the risk-controlling threshold (:mod:`fastuq.decisions.threshold`) and the
consistency score (:mod:`fastuq.decisions.consistency`), and the calibrated gate as one object
and file (:class:`Gate`, :mod:`fastuq.decisions.gatefile`)."""

from fastuq.decisions.consistency import (
    WHITESPACE,
    WORD,
    consistency_scores,
    corpus_consistency,
)
from fastuq.decisions.gatefile import Gate
from fastuq.decisions.threshold import GateCalibration, calibrate_threshold, clopper_pearson_upper

__all__ = ["WHITESPACE", "WORD", "Gate", "GateCalibration", "calibrate_threshold",
           "clopper_pearson_upper", "consistency_scores", "corpus_consistency"]
