"""The black-box similarity family on each debate round's graph: ``lexical_similarity`` and
the spectral scores of Lin, Trivedi and Sun (2023), "Generating with Confidence:
Uncertainty Quantification for Black-box Large Language Models" (arXiv:2305.19187):
``eigval_laplacian``, ``degree_matrix``, ``eccentricity`` (as lm-polygraph implements them:
``estimators/eig_val_laplacian.py``, ``deg_mat.py``, ``eccentricity.py``).

The graph of a round. Its nodes are the ``m`` agents of the team (every slot ``a < team``:
an agent that did not answer, or whose answer did not parse, stays a node, as it stays in
the denominator of agreement, DESIGN.md); ``W`` is its symmetric similarity matrix with
``W_aa = 1``, given in one of two forms (the ``similarity`` parameter of the registry):

* ``similarity="answer"``: ``classes [T, N, A]`` int (any width; the engine packs the vote
  classes agreement counts, :func:`fastuq.engine.similarity.answer_labels`) with the team
  ``n_agents [N]`` float: the slots ``a < n_agents`` are the nodes, ``W_ab = 1`` iff ``a ==
  b`` or ``classes_a == classes_b >= 0`` (an agent without a vote, ``-1``, is similar to
  itself only); the result has the float dtype of ``n_agents``;
* ``similarity="lexical"``: ``W [T, N, A, A]`` float, the token-set Jaccard index of the
  agents' texts (:mod:`fastuq.signals.lexical`), a slot with ``W_aa = 0`` being no node.

Per executed round, with ``d_a = sum_b W_ab`` (>= 1), the normalised Laplacian
``L = I - D^-1/2 W D^-1/2`` and its eigenpairs ``(lambda_j, u_j)``::

    eigval_laplacian   = sum_j max(0, 1 - lambda_j)        (a soft count of answer sets)
    degree_matrix      = trace(m I - D) / m^2 = 1 - sum_ab W_ab / m^2
    eccentricity       = || [u_j - mean(u_j)]_{j: lambda_j < thr} ||_F
                       = sqrt(k - sum_{j: lambda_j < thr} (1^T u_j)^2 / m)   (k such j)
                       = sqrt(k - 1 + sum_{j: lambda_j >= thr} (1^T u_j)^2 / m)
    lexical_similarity = -(mean over the m (m - 1) / 2 pairs a < b of W_ab)  (NaN if m < 2)

(eccentricity's second line is the first one summed: ``||u - mean(u)||^2 = 1 - (1^T u)^2 /
m`` for a unit ``u``; it depends on the eigenspace only, not on the basis an eigen-solver
picks within it; the third, computed, holds as the squares ``(1^T u_j)^2`` over the whole
basis sum to ``m``, and has no cancellation in float32 where the team is near-unanimous).
The threshold ``thr`` on the Laplacian's eigenvalues is the registry's ``threshold``
parameter of ``eccentricity`` (a scalar or one per trajectory), default lm-polygraph's 0.9
(``thres``), in (0, 2]: the eigenvalues of a normalised Laplacian lie in [0, 2). All four
are uncertainties: higher = less likely correct.

Each estimator writes two columns: ``<name>``, the score of the last executed round (the
final team's spread), and ``<name>_mean``, its mean over the executed rounds. SAUCE-style
filtering is not offered: the filter is defined for an agreement in [0, 1] observed with
token-entropy noise, and none of these scores is one.

How they are computed. With answer-class similarity ``W`` is block-diagonal of all-ones
blocks (one per set of equal labels, ``K`` blocks): ``D^-1/2 W D^-1/2`` has, per block of
size ``c``, the eigenvalue 1 once (eigenvector ``1_c / sqrt(c)``) and 0 ``c - 1`` times, so
exactly ``eigval_laplacian = K``, ``degree_matrix = 1 - sum_c c^2 / m^2`` and
``eccentricity = sqrt(K - 1)`` for ``0 < thr <= 1`` (the kept eigenvectors span the block
indicators, and ``sum_c c / m = 1``), ``sqrt(m - 1)`` for ``thr > 1`` (the whole basis).
The JAX kernel uses these closed forms from integer counts (exact in any float dtype): per
round one pass of pair compares of the classes (``A (A - 1) / 2``, unrolled into ``[T, N]``
vector code up to :data:`UNROLL_SLOTS` slots, int8/int16 classes read four or two
slots to a 32-bit word, fused ``[T, N, A, A]`` reductions past it)
gives ``K`` (the nodes whose class no lower slot holds), ``m`` and the equal pairs
(``sum_c c^2 = m + 2 pairs``); no float ``[A, A]`` matrix is built. The NumPy twin builds
``W`` and calls ``np.linalg.eigh`` like the lexical path, so the two check each other.
With lexical similarity both run batched symmetric eigendecompositions over ``[T N, A, A]``
(``jnp.linalg.eigh`` / ``np.linalg.eigh``); ``eigval_laplacian`` there is ``sum_j max(0,
mu_j)`` over the eigenvalues ``mu_j = 1 - lambda_j`` of ``D^-1/2 W D^-1/2``. Slots that are
no node get ``mu = -1`` on the diagonal of an otherwise zero row, hence ``lambda = 2``:
never kept by eccentricity (``thr <= 2``, strict ``<``), never counted by
``eigval_laplacian``, and apart from every node's eigenvalue.

Rounding: float64 gives the eigen-scores to about ``1e-12``; in float32 an eigenvalue moves
by about ``1e-6``, so ``eccentricity`` can jump where a Laplacian eigenvalue lies within that
of ``thr`` (a discontinuity of the definition, not of the code; with answer classes the
eigenvalues are exactly 0 and 1, so at ``thr = 1`` exactly the twin's ``eigh`` may keep an
eigenvalue ``1 - ulp`` that the closed form drops). Values in padding and in rounds
that did not execute may be anything (NaN included) and never change a score; a trajectory
without an executed round gets NaN.
"""

from __future__ import annotations

import math
from functools import partial

import jax
import jax.numpy as jnp
import numpy as np

__all__ = [
    "ECCENTRICITY_THRESHOLD",
    "UNROLL_SLOTS",
    "degree_matrix",
    "degree_matrix_numpy",
    "degree_matrix_reference",
    "eccentricity",
    "eccentricity_numpy",
    "eccentricity_reference",
    "eigval_laplacian",
    "eigval_laplacian_numpy",
    "eigval_laplacian_reference",
    "lexical_similarity",
    "lexical_similarity_numpy",
    "lexical_similarity_reference",
    "round_score",
    "round_scores_numpy",
]

#: Eccentricity's default threshold: it keeps the eigenvectors of the normalised Laplacian
#: with eigenvalue below this (lm-polygraph's ``thres`` default; the registry's ``threshold``
#: parameter, in (0, 2]).
ECCENTRICITY_THRESHOLD = 0.9
#: The per-round scores of :func:`round_score`.
FIELDS = ("eigval_laplacian", "degree_matrix", "eccentricity", "lexical_similarity")
#: Answer classes of teams padded to at most this many slots are compared pair by pair in
#: unrolled ``[T, N]`` vector code; wider teams by ``[T, N, A, A]`` array code (XLA fuses the
#: compares into the reductions). Both give the same integer counts. Measured (2 CPU cores
#: at load 12-14, 262,144 trajectories, int8 classes, one device): A = 8, T = 3: 39 ms
#: unrolled against 442 ms array code; A = 16, T = 10: 0.7-0.8 s against 1.9 s, compiled in
#: about 3 s either way.
UNROLL_SLOTS = 16


# ----------------------------------------------------------------------------------------
# JAX


def _threshold(threshold, xp):
    """``threshold`` (a scalar or one value per trajectory ``[N]``) broadcastable against
    ``[T, N, A]``."""
    thr = xp.asarray(threshold)
    return thr[None, :, None] if thr.ndim == 1 else thr


def _team_nodes(classes, team, mask, xp):
    """``[T, N, A]`` bool: the slots of the team (``a < team``) in executed rounds."""
    slots = xp.arange(classes.shape[-1], dtype=team.dtype)
    return (slots[None, None, :] < team[None, :, None]) & mask[..., None]


def _graph(similarity, dtype, xp, team=None, mask=None):
    """``(W [T, N, A, A] in dtype, node [T, N, A] bool)`` of either form of the similarity
    (module docstring), zero outside the nodes and NaN-free."""
    if similarity.ndim == 3:  # answer classes of the team's slots
        node = _team_nodes(similarity, team, mask, xp)
        voted = similarity >= 0
        same = (similarity[..., :, None] == similarity[..., None, :]) & voted[..., :, None]
        same = same | xp.eye(similarity.shape[-1], dtype=bool)
    else:
        diag = xp.diagonal(similarity, axis1=-2, axis2=-1)
        node = (diag > 0) & mask[..., None]
        same = None
    both = node[..., :, None] & node[..., None, :]
    if same is not None:
        w = (same & both).astype(dtype)
    else:
        eye = xp.eye(similarity.shape[-1], dtype=bool)
        w = xp.where(both, xp.where(eye, 1, similarity), 0).astype(dtype)
    return w, node


def _eigen_scores(w, node, dtype, xp, threshold=ECCENTRICITY_THRESHOLD):
    """``(eigval_laplacian, eccentricity)`` ``[T, N]`` by symmetric eigendecompositions of
    ``D^-1/2 W D^-1/2`` (batched over ``[T, N]``); a slot that is no node gets the eigenvalue
    ``-1`` (Laplacian eigenvalue 2: never kept, as ``threshold <= 2``; never counted)."""
    d = w.sum(axis=-1)
    inv = xp.where(node, 1 / xp.sqrt(xp.where(node, d, 1)), 0).astype(dtype)
    a = w * inv[..., :, None] * inv[..., None, :]
    eye = xp.eye(w.shape[-1], dtype=bool)
    a = xp.where(eye & ~node[..., :, None], xp.asarray(-1, dtype), a)
    mu, u = xp.linalg.eigh(a)  # L = I - a: lambda = 1 - mu
    eig = xp.sum(xp.maximum(mu, 0), axis=-1)
    kept = (1 - mu) < _threshold(threshold, xp).astype(dtype)  # [T, N, A]
    m = node.sum(axis=-1).astype(dtype)
    proj = xp.sum(xp.where(node[..., :, None], u, 0), axis=-2)  # 1^T u_j
    k = kept.sum(axis=-1).astype(dtype)
    # k - sum_kept (1^T u)^2 / m = (k - 1) + sum_dropped (1^T u)^2 / m, since the squares
    # over the whole basis sum to m: no cancellation where the team is nearly unanimous
    dropped = xp.sum(xp.where(kept, 0, proj * proj), axis=-1) / xp.where(m > 0, m, 1)
    return eig, xp.sqrt(xp.maximum((k - 1) + dropped, 0))


def _eigvals_score(w, node, dtype):
    """``eigval_laplacian`` ``[T, N]`` from the eigenvalues of ``D^-1/2 W D^-1/2`` alone
    (``jnp.linalg.eigvalsh``: :func:`_eigen_scores`' matrix, no eigenvectors)."""
    d = w.sum(axis=-1)
    inv = jnp.where(node, 1 / jnp.sqrt(jnp.where(node, d, 1)), 0).astype(dtype)
    a = w * inv[..., :, None] * inv[..., None, :]
    a = jnp.where(jnp.eye(w.shape[-1], dtype=bool) & ~node[..., :, None],
                  jnp.asarray(-1, dtype), a)
    return jnp.sum(jnp.maximum(jnp.linalg.eigvalsh(a), 0), axis=-1)


def _slot_planes(classes):
    """The slots of ``classes [T, N, A]`` (int8 or int16) as ``A`` planes ``[T, N]`` uint32
    of their bits, read as 32-bit words (``4 / itemsize`` slots each), and the value from
    which a plane is negative (``2^(8 itemsize - 1)``); ``None`` for other widths or when
    ``A`` does not fill whole words.

    Why: reading slot ``a`` as ``classes[..., a]`` is a strided read of one byte per round
    (XLA keeps the slots minor even after a transpose), which dominated the kernel at
    ``A = 16``; one load per word and shifts in registers measured 2.2x less CPU (T = 10,
    A = 16, int8, 2^19 trajectories, one device). Which bits of a word hold which slot is
    the byte order of the device; it is read from a constant word, not assumed."""
    size = classes.dtype.itemsize
    per_word = 4 // size if size in (1, 2) else 0
    if not per_word or classes.shape[-1] % per_word:
        return None
    t_max, n, a_max = classes.shape
    words = jax.lax.bitcast_convert_type(
        classes.reshape(t_max, n, a_max // per_word, per_word), jnp.uint32)
    bits = 8 * size
    ones = jnp.uint32((1 << bits) - 1)
    # the slot j (< per_word) of a word sits at the shift where a word of the values
    # 0 .. per_word - 1 holds j: constants, folded by XLA
    probe = jax.lax.bitcast_convert_type(jnp.arange(per_word, dtype=classes.dtype), jnp.uint32)
    shifts = [sum(jnp.where(((probe >> jnp.uint32(bits * i)) & ones) == j,
                            jnp.uint32(bits * i), jnp.uint32(0)) for i in range(per_word))
              for j in range(per_word)]
    planes = [(words[..., a // per_word] >> shifts[a % per_word]) & ones
              for a in range(a_max)]
    return planes, jnp.uint32(1 << (bits - 1))


def _answer_counts(classes, team, mask):
    """``(k, m, pairs)`` int32 ``[T, N]`` of answer classes (module docstring): the answer
    sets, the nodes and the unordered pairs of nodes with one answer. A node opens a set
    when no lower slot holds its class (a node without a vote always does)."""
    a_max = classes.shape[-1]
    node = _team_nodes(classes, team, mask, jnp)
    voted = node & (classes >= 0)
    if a_max > UNROLL_SLOTS:  # [T, N, A, A] compares fused into the reductions
        lower = jnp.tril(jnp.ones((a_max, a_max), bool), -1)  # [a, b]: b < a
        same = (voted[..., :, None] & (classes[..., :, None] == classes[..., None, :])
                & lower)
        pairs = jnp.sum(same, axis=(-2, -1), dtype=jnp.int32)
        k = jnp.sum(node & ~jnp.any(same, axis=-1), axis=-1, dtype=jnp.int32)
        return k, jnp.sum(node, axis=-1, dtype=jnp.int32), pairs
    planes = _slot_planes(classes)
    if planes is None:
        # slot-major (one transpose: each slot's [T, N] plane contiguous); XLA may keep the
        # slots minor in memory and read each plane strided
        c = list(jnp.moveaxis(classes, -1, 0))
        votes = jnp.moveaxis(voted, -1, 0)
        nodes = jnp.moveaxis(node, -1, 0)
    else:  # the slots' values unpacked from 32-bit words: unsigned, "no vote" >= 2^(b-1)
        c, sign = planes
        nodes = [mask & (team > a)[None, :] for a in range(a_max)]  # _team_nodes per slot
        votes = [nodes[a] & (c[a] < sign) for a in range(a_max)]
    # per slot the count of lower slots with its class (< A <= UNROLL_SLOTS), unrolled
    count = jnp.int8 if planes is None else jnp.int32  # the planes' lane width
    k = m = pairs = jnp.zeros(mask.shape, jnp.int32)
    for a in range(a_max):
        lower = jnp.zeros(mask.shape, count)
        for b in range(a):
            lower = lower + (c[a] == c[b]).astype(count)
        lower = jnp.where(votes[a], lower, 0)
        pairs = pairs + lower.astype(jnp.int32)
        m = m + nodes[a].astype(jnp.int32)
        k = k + (nodes[a] & (lower == 0)).astype(jnp.int32)
    return k, m, pairs


def _answer_score(classes, team, mask, field: str, threshold):
    """``(score, m)`` ``[T, N]`` in closed form on answer classes (module docstring)."""
    dtype = team.dtype
    k, m, pairs = _answer_counts(classes, team, mask)
    if field == "eigval_laplacian":
        score = k.astype(dtype)
    elif field == "eccentricity":
        thr = jnp.asarray(threshold).astype(dtype)
        kept = jnp.where(thr > 1, m, k)  # eigenvalues 0 (k of them) and 1: kept below thr
        score = jnp.sqrt(jnp.maximum(kept - 1, 0).astype(dtype))
    else:
        score = _sum_scores(m.astype(dtype), (m + 2 * pairs).astype(dtype), field, jnp)
    return score, m


def _sum_scores(m, total, field: str, xp):
    """``degree_matrix`` or ``lexical_similarity`` from the node count ``m`` and ``sum W``."""
    safe = xp.where(m > 0, m, 1)
    if field == "degree_matrix":
        return (safe * safe - total) / (safe * safe)
    pairs = xp.where(m > 1, safe * (safe - 1), 1)
    return -xp.where(m > 1, (total - m) / pairs, xp.nan)


def _check_answer_form(similarity, n_agents) -> None:
    if similarity.ndim == 3 and n_agents is None:
        raise ValueError("spectral scores on answer classes (similarity [T, N, A]) need "
                         "n_agents [N], the team")


@partial(jax.jit, static_argnames=("field",))
def round_score(similarity: jax.Array, round_mask: jax.Array, field: str,
                n_agents: jax.Array | None = None,
                threshold: jax.Array | float = ECCENTRICITY_THRESHOLD) -> jax.Array:
    """The per-round score ``field`` (one of :data:`FIELDS`) ``[T, N]``, NaN in rounds that
    did not execute: ``similarity`` answer classes ``[T, N, A]`` int with the team
    ``n_agents [N]`` (the float dtype of the result), or a lexical matrix ``[T, N, A, A]``
    (its dtype). ``threshold``: eccentricity's (scalar or ``[N]``)."""
    _check_answer_form(similarity, n_agents)
    mask = round_mask.astype(bool)
    if similarity.ndim == 3:
        score, m = _answer_score(similarity, n_agents, mask, field, threshold)
    else:
        dtype = similarity.dtype
        w, node = _graph(similarity, dtype, jnp, mask=mask)
        w = jnp.where(node[..., :, None] & node[..., None, :], w, 0)
        m = node.sum(axis=-1).astype(dtype)
        if field in ("degree_matrix", "lexical_similarity"):
            score = _sum_scores(m, w.sum(axis=(-2, -1)), field, jnp)
        elif field == "eigval_laplacian":  # eigenvalues only: no eigenvectors to compute
            score = _eigvals_score(w, node, dtype)
        else:
            eig, ecc = _eigen_scores(w, node, dtype, jnp, threshold)
            score = eig if field == "eigval_laplacian" else ecc
    return jnp.where(mask & (m > 0), score, jnp.nan)


def _aggregate(values, round_mask, xp):
    """``(last, mean)`` ``[N]`` of per-round ``values [T, N]`` over the executed rounds."""
    mask = round_mask.astype(bool)
    t_max = mask.shape[0]
    last_t = t_max - 1 - xp.argmax(mask[::-1], axis=0)
    last = xp.take_along_axis(values, last_t[None, :], axis=0)[0]
    count = mask.sum(axis=0)
    total = xp.sum(xp.where(mask, values, 0), axis=0)
    has = count > 0
    nan = xp.asarray(xp.nan, values.dtype)
    return (xp.where(has, last, nan),
            xp.where(has, total / xp.where(has, count, 1).astype(values.dtype), nan))


def _estimator(name: str):
    if name == "eccentricity":
        @jax.jit
        def kernel(similarity: jax.Array, round_mask: jax.Array,
                   n_agents: jax.Array | None = None,
                   threshold: jax.Array | float = ECCENTRICITY_THRESHOLD,
                   ) -> dict[str, jax.Array]:
            values = round_score(similarity, round_mask, name, n_agents, threshold)
            last, mean = _aggregate(values, round_mask, jnp)
            return {name: last, f"{name}_mean": mean}
    else:
        @jax.jit
        def kernel(similarity: jax.Array, round_mask: jax.Array,
                   n_agents: jax.Array | None = None) -> dict[str, jax.Array]:
            values = round_score(similarity, round_mask, name, n_agents)
            last, mean = _aggregate(values, round_mask, jnp)
            return {name: last, f"{name}_mean": mean}

    kernel.__name__ = name
    kernel.__doc__ = (f"``{{{name}, {name}_mean}}`` ``[N]``: the last executed round's "
                      f"{name} and its mean over the executed rounds (module docstring).")
    return kernel


eigval_laplacian = _estimator("eigval_laplacian")
degree_matrix = _estimator("degree_matrix")
eccentricity = _estimator("eccentricity")
lexical_similarity = _estimator("lexical_similarity")


# ----------------------------------------------------------------------------------------
# NumPy twin


def round_scores_numpy(similarity: np.ndarray, round_mask: np.ndarray,
                       n_agents: np.ndarray | None = None,
                       threshold: np.ndarray | float = ECCENTRICITY_THRESHOLD,
                       ) -> dict[str, np.ndarray]:
    """The four per-round scores ``{name: [T, N]}``, NumPy twin of :func:`round_score`:
    ``W`` built from either form and decomposed by ``np.linalg.eigh`` (answer classes too:
    no closed form)."""
    similarity = np.asarray(similarity)
    _check_answer_form(similarity, n_agents)
    mask = np.asarray(round_mask, bool)
    team = None if n_agents is None else np.asarray(n_agents)
    dtype = similarity.dtype if similarity.ndim == 4 else team.dtype
    with np.errstate(invalid="ignore", divide="ignore"):
        w, node = _graph(similarity, dtype, np, team=team, mask=mask)
        w = np.where(node[..., :, None] & node[..., None, :], w, 0).astype(dtype)
        m = node.sum(axis=-1).astype(dtype)
        total = w.sum(axis=(-2, -1))
        degree = _sum_scores(m, total, "degree_matrix", np)
        lexical = _sum_scores(m, total, "lexical_similarity", np)
        eig, ecc = _eigen_scores(w, node, dtype, np, threshold)
    out = {"eigval_laplacian": eig, "degree_matrix": degree, "eccentricity": ecc,
           "lexical_similarity": lexical}
    return {k: np.where(mask & (m > 0), v, np.nan).astype(dtype) for k, v in out.items()}


def _estimator_numpy(name: str):
    def twin(similarity: np.ndarray, round_mask: np.ndarray,
             n_agents: np.ndarray | None = None,
             **threshold) -> dict[str, np.ndarray]:
        if set(threshold) - ({"threshold"} if name == "eccentricity" else set()):
            raise TypeError(f"{name}_numpy: unknown parameter(s) {sorted(threshold)}")
        values = round_scores_numpy(similarity, round_mask, n_agents, **threshold)[name]
        last, mean = _aggregate(values, np.asarray(round_mask, bool), np)
        return {name: last, f"{name}_mean": mean}

    twin.__name__ = f"{name}_numpy"
    twin.__doc__ = f"NumPy twin of :func:`{name}`."
    return twin


eigval_laplacian_numpy = _estimator_numpy("eigval_laplacian")
degree_matrix_numpy = _estimator_numpy("degree_matrix")
eccentricity_numpy = _estimator_numpy("eccentricity")
lexical_similarity_numpy = _estimator_numpy("lexical_similarity")


# ----------------------------------------------------------------------------------------
# Per-trajectory references: one trajectory (``[T, A]`` answer classes with the team, or
# ``[T, A, A]`` matrices; ``[T]`` mask), plain Python loops over rounds and agents; one
# ``np.linalg.eigh`` per round.


def round_reference(similarity, name: str, team: float | None = None,
                    threshold: float = ECCENTRICITY_THRESHOLD) -> float:
    """One round's score ``name`` from ``similarity``: ``[A]`` answer classes of a team of
    ``team`` (its slots ``a < team`` are the nodes; equal classes >= 0 are similar) or an
    ``[A, A]`` matrix."""
    s = np.asarray(similarity)
    if s.ndim == 1:
        nodes = [a for a in range(len(s)) if a < float(team)]
        w = [[1.0 if a == b or (int(s[a]) >= 0 and int(s[a]) == int(s[b])) else 0.0
              for b in nodes] for a in nodes]
    else:
        nodes = [a for a in range(len(s)) if float(s[a][a]) > 0]
        w = [[1.0 if a == b else float(s[a][b]) for b in nodes] for a in nodes]
    m = len(nodes)
    if m == 0:
        return math.nan
    if name == "degree_matrix":
        return 1.0 - math.fsum(math.fsum(row) for row in w) / (m * m)
    if name == "lexical_similarity":
        if m < 2:
            return math.nan
        pairs = [w[a][b] for a in range(m) for b in range(a + 1, m)]
        return -math.fsum(pairs) / len(pairs)
    d = [math.fsum(row) for row in w]
    lap = np.array([[(1.0 if a == b else 0.0) - w[a][b] / math.sqrt(d[a] * d[b])
                     for b in range(m)] for a in range(m)])
    lam, u = np.linalg.eigh(lap)
    if name == "eigval_laplacian":
        return math.fsum(max(0.0, 1.0 - float(x)) for x in lam)
    if name == "eccentricity":
        kept = [j for j in range(m) if lam[j] < threshold]
        sq = 0.0
        for j in kept:
            col = [float(u[a, j]) for a in range(m)]
            mean = math.fsum(col) / m
            sq += math.fsum((x - mean) ** 2 for x in col)
        return math.sqrt(sq)
    raise ValueError(f"unknown score {name!r}")


def _reference(name: str):
    def reference(similarity, round_mask, n_agents=None,
                  threshold: float = ECCENTRICITY_THRESHOLD) -> dict[str, float]:
        values = [round_reference(similarity[t], name, n_agents, threshold)
                  for t in range(len(round_mask)) if round_mask[t]]
        if not values:
            return {name: math.nan, f"{name}_mean": math.nan}
        return {name: values[-1], f"{name}_mean": math.fsum(values) / len(values)}

    reference.__name__ = f"{name}_reference"
    reference.__doc__ = f":func:`{name}` of one trajectory in plain Python."
    return reference


eigval_laplacian_reference = _reference("eigval_laplacian")
degree_matrix_reference = _reference("degree_matrix")
eccentricity_reference = _reference("eccentricity")
lexical_similarity_reference = _reference("lexical_similarity")
