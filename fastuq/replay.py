"""Budget-policy replay, as before its move to :mod:`fastuq.decisions` (this module only
re-exports): the policies and the replay (:mod:`fastuq.decisions.replay`) and what stopping
after each round gives (:mod:`fastuq.decisions.outcomes`)."""

from fastuq.decisions.outcomes import (
    CALLS,
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

__all__ = ["CALLS", "POLICIES", "Outcomes", "Policy", "ReplayResult", "grid_sums",
           "pareto_front", "plot_replay", "replay", "round_answer_slots", "round_outcomes",
           "stop_rounds", "tie_counts", "uaad_grid_sums"]
