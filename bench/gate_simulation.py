"""Simulate the gate's threshold procedures (``fastuq.gate.calibrate_threshold``): how often
each passes nothing where every threshold is safe, how much of the safe part it passes where
the failure rate rises across scores, and how often its threshold breaks the guarantee.

Run from the repository root::

    python bench/gate_simulation.py             # 1,000 draws per scenario (about a minute)
    python bench/gate_simulation.py --quick     # 100 draws

Each draw is a calibration set of ``--n`` (2,000) items with uncertainty scores u ~ U(0, 1);
an item fails (``correct`` false) with probability p(u). Scenarios (alpha 0.1, delta 0.05):

* ``flat 5%``: p = 0.05: every threshold is safe; the ideal gate passes everything.
* ``rising``: p(u) = 0.02 + 0.6 u^2, so the failure rate among the items with u <= t is
  R(t) = 0.02 + 0.2 t^2, <= alpha iff t <= sqrt(0.4) = 0.632: the safe part is the 63.2% of
  items with the lowest scores.
* ``flat 11%``: p = 0.11: no threshold is safe; every draw that passes anything breaks the
  guarantee.

Per procedure and scenario: the share of draws that pass nothing, the mean pass rate on the
calibration set, and the share of draws whose threshold t breaks the guarantee: R(t) > alpha,
with R the failure rate among passed items on the population (an infinite test set; exact
from the formulas above). The guarantee says that share is <= delta; with D draws the
binomial slack is 3 sqrt(delta (1 - delta) / D) (0.021 at 1,000 draws). All procedures see the
same draws. ``before`` is the procedure of fastuq before the grid (every distinct score a
candidate, one fixed sequence from the strictest), which ``levels="distinct",
procedure="fixed_sequence"`` reproduces. Prints a markdown table; ``--json PATH`` also writes the
figures.
"""

from __future__ import annotations

import argparse
import json
import math
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from fastuq.decisions.threshold import calibrate_threshold  # noqa: E402

ALPHA, DELTA = 0.1, 0.05

#: scenario -> (failure probability p(u), population failure rate R(t) among u <= t)
SCENARIOS = {
    "flat 5%": (lambda u: np.full_like(u, 0.05), lambda t: 0.05),
    "rising": (lambda u: 0.02 + 0.6 * u**2, lambda t: 0.02 + 0.2 * t**2),
    "flat 11%": (lambda u: np.full_like(u, 0.11), lambda t: 0.11),
}

#: procedure -> calibrate_threshold's options
PROCEDURES = {
    "before: distinct scores, fixed sequence": dict(levels="distinct", procedure="fixed_sequence"),
    "20 levels, fixed sequence": dict(levels=20, procedure="fixed_sequence"),
    "50 levels, fixed sequence": dict(levels=50, procedure="fixed_sequence"),
    "20 levels, Bonferroni": dict(levels=20, procedure="bonferroni"),
    "50 levels, Bonferroni": dict(levels=50, procedure="bonferroni"),
    "20 levels, multi-start (4)": dict(levels=20, procedure="multi_start", starts=4),
    "50 levels, multi-start (2)": dict(levels=50, procedure="multi_start", starts=2),
    "50 levels, multi-start (4) [default]": dict(levels=50, procedure="multi_start", starts=4),
    "50 levels, multi-start (8)": dict(levels=50, procedure="multi_start", starts=8),
}


def simulate(draws: int, n: int, seed: int) -> list[dict]:
    """One row per (scenario, procedure): pass-nothing share, mean pass rate, violations."""
    rows = []
    for scenario, (p, rate) in SCENARIOS.items():
        rng = np.random.default_rng(seed)
        u = rng.random((draws, n))
        correct = rng.random((draws, n)) >= p(u)
        for name, options in PROCEDURES.items():
            nothing = violations = 0
            pass_rates = np.empty(draws)
            for d in range(draws):
                g = calibrate_threshold(u[d], correct[d], ALPHA, DELTA, **options)
                pass_rates[d] = g.pass_rate
                if g.passes_any:
                    violations += rate(min(g.threshold, 1.0)) > ALPHA
                else:
                    nothing += 1
            rows.append({"scenario": scenario, "procedure": name, "draws": draws, "n": n,
                         "passes_nothing": nothing / draws,
                         "mean_pass_rate": float(pass_rates.mean()),
                         "violations": violations / draws})
    return rows


def markdown(rows: list[dict]) -> str:
    """The rows as one markdown table per scenario."""
    out = []
    draws = rows[0]["draws"]
    slack = 3 * math.sqrt(DELTA * (1 - DELTA) / draws)
    for scenario in SCENARIOS:
        out += [f"**{scenario}** ({draws:,} draws of {rows[0]['n']:,} items; guarantee: "
                f"violations <= {DELTA} + {slack:.3f})", "",
                "| procedure | passes nothing | mean pass rate | violations |",
                "| :--- | ---: | ---: | ---: |"]
        out += [f"| {r['procedure']} | {r['passes_nothing']:.1%} | {r['mean_pass_rate']:.3f} | "
                f"{r['violations']:.1%} |" for r in rows if r["scenario"] == scenario]
        out.append("")
    return "\n".join(out)


def main(argv: list[str] | None = None) -> int:
    """Run the simulation and print its table."""
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--draws", type=int, default=1000)
    ap.add_argument("--n", type=int, default=2000)
    ap.add_argument("--seed", type=int, default=20261201)
    ap.add_argument("--quick", action="store_true", help="100 draws")
    ap.add_argument("--json", metavar="PATH", help="also write the rows as JSON")
    args = ap.parse_args(argv)
    draws = 100 if args.quick else args.draws
    t0 = time.perf_counter()
    rows = simulate(draws, args.n, args.seed)
    print(markdown(rows))
    print(f"({time.perf_counter() - t0:.1f} s)")
    if args.json:
        Path(args.json).write_text(json.dumps(rows, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
