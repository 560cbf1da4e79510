"""Budget-policy replay, as before its move to :mod:`fastuq.decisions` (this module only
re-exports): the policies and the replay (:mod:`fastuq.decisions.replay`) and what stopping
after each round gives (:mod:`fastuq.decisions.outcomes`)."""

from fastuq.decisions.outcomes import *  # noqa: F403 (the old path re-exports the new home)
from fastuq.decisions.replay import *  # noqa: F403

__all__ = ["CALLS", "POLICIES", "Outcomes", "Policy", "ReplayResult", "grid_sums",  # noqa: F405
           "pareto_front", "plot_replay", "replay", "round_answer_slots", "round_outcomes",
           "stop_rounds", "tie_counts", "uaad_grid_sums"]
