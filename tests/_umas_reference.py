"""UMAS written from DESIGN.md's formulas in plain Python, apart from ``fastuq.kernels.umas``.

It imports nothing from fastuq, so the kernel, its NumPy twin, the kernel module's own
``umas_trajectory`` and the engine's packing of the ``predecessors`` column are all checked
against numbers that none of them produced. DESIGN.md (UMAS bullet), restated:

* node confidence ``c <= 0``; round 0: ``c_dyn = c``;
* later rounds, node ``i`` with predecessor set ``P`` (agents of round ``t-1`` it read, those
  that spoke at ``t-1``): ``w_ji = (c_dyn[t-1, j] - d) / d`` with
  ``d = min(c_dyn[t-1, i], -1e-12)``; ``w_i = 1 - mean_{j in P} sigmoid(w_ji)``;
  ``c_dyn = (1 - w_i) c_dyn[t-1, i] + w_i c``;
* no predecessors: ``w_i = 1`` (``c_dyn = c``); agent absent at ``t-1``: afresh (``c_dyn = c``);
* ``predecessors`` column: a null entry (trajectory, round, node, or a slot past the end of a
  round list) is the protocol default, every *other* agent active at ``t-1``; a list is the
  node's set (duplicates once), an empty list means none;
* score ``umas = -mean(c_dyn)``, ``umas_fix = -mean(c)`` over the valid nodes.

The arithmetic is done in 60-digit decimals (inputs converted exactly, the result rounded
once to a float), so the reference is the exact value of the formula as written, including
``w_i = 1 - mean sigmoid(w_ji)`` where that subtraction cancels: it is the yardstick for the
float64 and float32 errors of the kernels.
"""

from __future__ import annotations

from decimal import Context, Decimal, localcontext

CONTEXT = Context(prec=60, Emin=-10**9, Emax=10**9)
CEILING = Decimal("-1e-12")


def sigmoid(x: Decimal) -> Decimal:
    """The logistic function in decimals (no overflow: exp of the non-positive side)."""
    if x >= 0:
        return 1 / (1 + (-x).exp())
    z = x.exp()
    return z / (1 + z)


def node_predecessors(predecessors, t: int, i: int):
    """The explicit list of node ``(t, i)``, or ``None`` where the column gives none."""
    if predecessors is None or t >= len(predecessors):
        return None
    row = predecessors[t]
    if row is None or i >= len(row):
        return None
    return row[i]


def resolved_predecessors(predecessors, t: int, i: int, team: int) -> set[int]:
    """The predecessor set of node ``(t, i)`` before intersecting with who spoke at ``t-1``:
    the explicit list, else the default graph (every other agent of the team)."""
    given = node_predecessors(predecessors, t, i)
    if given is None:
        return {j for j in range(team) if j != i}
    return set(given)


def umas_reference(conf, predecessors=None, n_agents: int | None = None) -> dict:
    """UMAS of one trajectory.

    Args:
      conf: ``[round][agent]`` floats, ``None`` where the agent did not speak (rounds may be
        shorter than the team).
      predecessors: the ``predecessors`` entry of the trajectory (``None`` at any level).
      n_agents: team size (default: the longest round).

    Returns:
      ``{"umas", "umas_fix", "n_nodes", "c_dyn", "w"}``; ``c_dyn`` and ``w`` are
      ``[round][agent]`` lists with ``None`` at absent nodes.
    """
    with localcontext(CONTEXT):
        return _reference(conf, predecessors, n_agents)


def _reference(conf, predecessors, n_agents):
    team = n_agents if n_agents is not None else max((len(r) for r in conf), default=0)
    rows = [[None if i >= len(row) or row[i] is None else Decimal(float(row[i]))
             for i in range(team)] for row in conf]
    cd_out, w_out = [], []
    prev = [None] * team
    sum_dyn = sum_c = Decimal(0)
    count = 0
    for t, row in enumerate(rows):
        cd_row, w_row = [], []
        for i, c in enumerate(row):
            if c is None:
                cd_row.append(None)
                w_row.append(None)
                continue
            peers = sorted(j for j in resolved_predecessors(predecessors, t, i, team)
                           if t > 0 and prev[j] is not None)
            if t == 0 or prev[i] is None or not peers:
                w, cd = Decimal(1), c
            else:
                d = min(prev[i], CEILING)
                w = 1 - sum(sigmoid((prev[j] - d) / d) for j in peers) / len(peers)
                cd = (1 - w) * prev[i] + w * c
            cd_row.append(cd)
            w_row.append(w)
            sum_dyn += cd
            sum_c += c
            count += 1
        cd_out.append(cd_row)
        w_out.append(w_row)
        prev = cd_row
    nan = float("nan")

    def floats(nested):
        return [[None if x is None else float(x) for x in row] for row in nested]

    return {
        "umas": float(-sum_dyn / count) if count else nan,
        "umas_fix": float(-sum_c / count) if count else nan,
        "n_nodes": count,
        "c_dyn": floats(cd_out),
        "w": floats(w_out),
    }


def edge_mask_of(predecessors, conf, team: int, n_slots: int) -> list:
    """The explicit graph of one trajectory as nested bools ``[T][A][A]`` (receiver, source)
    with null entries resolved to the default graph, for feeding the kernels."""
    out = []
    for t in range(len(conf)):
        rnd = []
        for i in range(n_slots):
            preds = resolved_predecessors(predecessors, t, i, team) if i < team else set()
            rnd.append([j in preds for j in range(n_slots)])
        out.append(rnd)
    return out
