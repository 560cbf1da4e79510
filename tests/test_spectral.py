"""The black-box similarity family (kernels/spectral.py, DESIGN.md "Black-box family"):
``lexical_similarity`` and Lin et al. 2023's ``eigval_laplacian``, ``degree_matrix`` and
``eccentricity`` on each round's graph, through ``fastuq.score``, against numbers worked by
hand from lm-polygraph's definitions and against tests/_references.py (lm-polygraph's
computation line by line, from the texts and answers)."""

from __future__ import annotations

import math

import numpy as np
import pyarrow as pa
import pytest
from _references import answer_matrix, jaccard_matrix, spectral_polygraph, spectral_trajectory
from hypothesis import given, settings
from hypothesis import strategies as st

import fastuq

SPECTRAL = ("eigval_laplacian", "degree_matrix", "eccentricity")


def _table(answers=None, texts=None, team=None):
    rows = answers if answers is not None else texts
    n = len(rows)
    cols = {"trajectory_id": [f"t{k}" for k in range(n)], "protocol": ["debate"] * n}
    if team is not None:
        cols["n_agents"] = pa.array(team if isinstance(team, list) else [team] * n, pa.int32())
    if answers is None:  # the rounds come from agreement (or answers): give votes
        answers = [[[None] * len(r) for r in traj] for traj in texts]
    cols["answers"] = pa.array(answers, pa.list_(pa.list_(pa.string())))
    if texts is not None:
        cols["texts"] = pa.array(texts, pa.list_(pa.list_(pa.string())))
    return pa.table(cols)


def _score(table, methods, **kw):
    out = fastuq.score(table, list(methods), **kw)
    return {c: out[c].to_numpy() for c in out.column_names if c not in ("trajectory_id",
                                                                       "protocol")}


# ---------------------------------------------------------------- worked by hand
#
# lm-polygraph: W the similarity (1 on the diagonal), D = diag(W 1), L = I - D^-1/2 W D^-1/2;
# EigValLaplacian = sum max(0, 1 - lambda(L)); DegMat = trace(m - D) / m^2 = 1 - sum W / m^2;
# Eccentricity = || [u - mean(u)] over the eigenvectors u of L with lambda < 0.9 ||.


def _check(got: dict, want: dict, rel=1e-12):
    for name, value in want.items():
        assert got[name] == pytest.approx(value, rel=rel, abs=1e-12), name


def test_three_agents_answer_sets_by_hand():
    # answers 2, 2, 5: W = [[1,1,0],[1,1,0],[0,0,1]], two blocks. L's eigenvalues: 0 (block
    # {0,1}), 1 (its difference vector), 0 ({2}): EigVal = 1 + 0 + 1 = 2; D = diag(2, 2, 1),
    # DegMat = (9 - 5) / 9 = 4/9; kept u: (1,1,0)/sqrt2 and (0,0,1), centred norms^2
    # 1 - (sqrt2)^2/3 = 1/3 and 1 - 1/3 = 2/3: Eccentricity = sqrt(1/3 + 2/3) = 1.
    want = {"eigval_laplacian": 2.0, "degree_matrix": 4 / 9, "eccentricity": 1.0}
    _check(spectral_polygraph(answer_matrix(["2", "2", "5"])), want)
    got = _score(_table(answers=[[["2", "2", "5"]]], team=3), SPECTRAL)
    _check({k: v[0] for k, v in got.items()}, want)


def test_five_agents_answer_sets_by_hand():
    # answers 7, 7, 7, 3 and one agent without an answer (a set of its own, as it stays in
    # agreement's denominator): blocks of 3, 1, 1. EigVal = 3 (one zero eigenvalue per block);
    # DegMat = 1 - (9 + 1 + 1) / 25 = 14/25; Eccentricity: the kept u are the block
    # indicators 1_c / sqrt(c), centred norms^2 1 - c/5, summed 3 - 1: sqrt(2).
    want = {"eigval_laplacian": 3.0, "degree_matrix": 14 / 25, "eccentricity": math.sqrt(2)}
    _check(spectral_polygraph(answer_matrix(["7", "7", "7", "3", None])), want)
    # a second trajectory: the same round after a unanimous one (mean over rounds)
    got = _score(_table(answers=[[["7", "7", "7", "3", None]],
                                 [["1", "1", "1", "1", "1"], ["7", "7", "7", "3", None]]],
                        team=5), SPECTRAL)
    for k in range(2):
        _check({name: got[name][k] for name in SPECTRAL}, want)
    # the unanimous round: EigVal 1, DegMat 0, Eccentricity 0
    _check({f"{n}_mean": got[f"{n}_mean"][1] for n in SPECTRAL},
           {"eigval_laplacian_mean": 2.0, "degree_matrix_mean": 7 / 25,
            "eccentricity_mean": math.sqrt(2) / 2})


def test_three_agents_lexical_by_hand():
    # texts "a b", "b c", "c d": Jaccard 1/3, 1/3 and 0. d = (4/3, 5/3, 4/3);
    # D^-1/2 W D^-1/2 = [[3/4, 1/sqrt20, 0], [1/sqrt20, 3/5, 1/sqrt20], [0, 1/sqrt20, 3/4]]:
    # (1, 0, -1) gives mu = 3/4; on (x, y, x) the 2x2 [[3/4, 1/sqrt20], [2/sqrt20, 3/5]]
    # has trace 27/20 and determinant 7/20, so mu = (27/20 +- 13/20) / 2 = 1 and 7/20.
    # lambda = 1 - mu = 0, 1/4, 13/20: EigVal = 1 + 3/4 + 7/20 = 21/10; all three below 0.9
    # are kept (a full basis), so Eccentricity^2 = 3 - |1|^2 / 3 = 2. DegMat = 1 - (3 + 4/3)
    # / 9 = 14/27. Lexical similarity: -(1/3 + 0 + 1/3) / 3 = -2/9.
    texts = ["a b", "B c.", "c d"]
    want = {"eigval_laplacian": 2.1, "degree_matrix": 14 / 27, "eccentricity": math.sqrt(2),
            "lexical_similarity": -2 / 9}
    _check(spectral_polygraph(jaccard_matrix(texts)), want)
    got = _score(_table(texts=[[texts]], team=3), (*SPECTRAL, "lexical_similarity"),
                 similarity="lexical")
    _check({k: v[0] for k, v in got.items() if not k.endswith("_mean")}, want)


def test_five_agents_lexical_by_hand():
    # "a b", "a b", "b c", "x" and a silent agent: block {0,1,2} with Jaccard 1, 1/3, 1/3;
    # {3}, {4} alone. In the block d = (7/3, 7/3, 5/3); (1,-1,0) gives mu = 0 (lambda = 1:
    # dropped by eccentricity, and its entries sum to 0); on (x, x, y) the 2x2
    # [[6/7, 1/sqrt35], [2/sqrt35, 3/5]] has trace 51/35 and determinant 16/35, so mu = 1
    # and 16/35. EigVal = 1 + 16/35 + 0 + 1 + 1 = 121/35. Kept: 4 eigenvectors whose span
    # holds the all-ones vector, so Eccentricity^2 = 4 - 5/5 = 3. sum W = 3 + 2(1 + 2/3) + 2
    # = 25/3: DegMat = 1 - 1/3 = 2/3. Lexical: the 10 pairs sum to 5/3: -1/6.
    texts = ["a b", "a b", "b c", "x", None]
    want = {"eigval_laplacian": 121 / 35, "degree_matrix": 2 / 3,
            "eccentricity": math.sqrt(3), "lexical_similarity": -1 / 6}
    _check(spectral_polygraph(jaccard_matrix(texts)), want)
    for backend in ("jax", "numpy"):
        got = _score(_table(texts=[[texts]], team=5), (*SPECTRAL, "lexical_similarity"),
                     similarity="lexical", backend=backend)
        _check({k: v[0] for k, v in got.items() if not k.endswith("_mean")}, want)


# ---------------------------------------------------------------- drawn trajectories

#: Words with the tokenizer's cases: ASCII, case, digits and ``_``, non-ASCII, and tokens of
#: 8, 9, 16 and more bytes (exact ids, then hashed ones).
WORDS = ("a", "b", "The", "the", "x_1", "42", "Москва", "ответ", "abcdefgh", "abcdefghi",
         "abcdefghijklmnop", "abcdefghijklmnopqrstuvwxyz", "ÄÖÜß", "naïve")
ANSWERS = ("1", "2", "17")


@st.composite
def _trajectories(draw):
    n = draw(st.integers(1, 4))
    team = draw(st.integers(2, 5))
    texts, answers = [], []
    for _ in range(n):
        rounds = draw(st.integers(1, 3))
        tr, ar = [], []
        for _ in range(rounds):
            width = draw(st.integers(1, team))
            tr.append([draw(st.none() | st.lists(st.sampled_from(WORDS), max_size=5)
                            .map(" ,".join)) for _ in range(width)])
            ar.append([draw(st.none() | st.sampled_from(ANSWERS)) for _ in range(width)])
        texts.append(tr)
        answers.append(ar)
    return texts, answers, team


def _near_threshold(rounds, team, kind) -> bool:
    """Whether some round's Laplacian has an eigenvalue within float32's reach of 0.9 (where
    eccentricity jumps by definition)."""
    for agents in rounds:
        agents = list(agents) + [None] * (team - len(agents))
        w = np.asarray(jaccard_matrix(agents) if kind == "lexical" else answer_matrix(agents))
        d = w.sum(axis=1)
        lam = np.linalg.eigvalsh(np.eye(len(d)) - w / np.sqrt(np.outer(d, d)))
        if np.any(np.abs(lam - 0.9) < 1e-4):
            return True
    return False


@settings(max_examples=25, deadline=None)
@given(case=_trajectories())
def test_drawn_trajectories_match_the_polygraph_reference(case):
    texts, answers, team = case
    table = _table(answers=answers, texts=texts, team=team)
    for kind in ("answer", "lexical"):
        want = [spectral_trajectory(t if kind == "lexical" else a, team, kind)
                for t, a in zip(texts, answers, strict=True)]
        methods = (*SPECTRAL, "lexical_similarity") if kind == "lexical" else SPECTRAL
        for backend, dtype, tol in (("jax", "float64", 1e-9), ("numpy", "float64", 1e-9),
                                    ("jax", "float32", 2e-4), ("numpy", "float32", 2e-4)):
            got = _score(table, methods, similarity=kind, backend=backend, dtype=dtype)
            for k, ref in enumerate(want):
                rounds = texts[k] if kind == "lexical" else answers[k]
                skip_ecc = dtype == "float32" and _near_threshold(rounds, team, kind)
                for column in got:
                    if skip_ecc and column.startswith("eccentricity"):
                        continue
                    assert got[column][k] == pytest.approx(ref[column], rel=tol, abs=tol), (
                        kind, backend, dtype, column, k)


# ---------------------------------------------------------------- errors and options


def test_lexical_needs_texts_and_names_the_column():
    table = _table(answers=[[["1", "2"]]], team=2)
    with pytest.raises(ValueError, match="lexical_similarity needs texts"):
        fastuq.score(table, "lexical_similarity")
    with pytest.raises(ValueError, match="texts"):
        fastuq.score(table, "eccentricity", similarity="lexical")
    with pytest.raises(ValueError, match="similarity must be one of"):
        fastuq.score(table, "eccentricity", similarity="nli")
    # without texts, --method all runs the answer-based spectral scores only
    cols = fastuq.score(table, "all").column_names
    assert "eigval_laplacian" in cols and "lexical_similarity" not in cols


def test_text_rounds_must_match_the_answers_rounds():
    table = _table(answers=[[["1", "2"], ["1", "1"]]], team=2)
    table = table.append_column("texts", pa.array([[["a", "b"]]],
                                                  pa.list_(pa.list_(pa.string()))))
    with pytest.raises(ValueError, match=r"'t0'.*field texts: 1 rounds, but answers has 2"):
        fastuq.score(table, "lexical_similarity")


def test_a_team_of_one_has_no_pair():
    got = _score(_table(texts=[[["a b"]]], team=1), ("lexical_similarity", *SPECTRAL),
                 similarity="lexical")
    assert math.isnan(got["lexical_similarity"][0])
    assert got["eigval_laplacian"][0] == 1.0 and got["degree_matrix"][0] == 0.0
    assert got["eccentricity"][0] == 0.0


# ---------------------------------------------------------------- eccentricity's threshold


def test_eccentricity_threshold_by_hand_on_lexical_similarity():
    # texts "a b", "b c", "c d" (test_three_agents_lexical_by_hand): Laplacian eigenvalues
    # 0, 1/4 and 13/20 with unit eigenvectors u0 = (2, sqrt5, 2) / sqrt13 (D^1/2 1), u1 =
    # (1, 0, -1) / sqrt2 and a third. Each kept u adds 1 - (1^T u)^2 / 3 to Eccentricity^2:
    # (1^T u0)^2 = (4 + sqrt5)^2 / 13 = (21 + 8 sqrt5) / 13, so u0 adds (18 - 8 sqrt5) / 39
    # and u1 adds 1. threshold 0.5 keeps u0, u1: sqrt((57 - 8 sqrt5) / 39); 0.2 keeps u0
    # only: sqrt((18 - 8 sqrt5) / 39); 0.9 (default) and 2 keep all three: sqrt(3 - 1).
    texts = ["a b", "b c", "c d"]
    r5 = math.sqrt(5)
    cases = {0.2: math.sqrt((18 - 8 * r5) / 39), 0.5: math.sqrt((57 - 8 * r5) / 39),
             None: math.sqrt(2), 2.0: math.sqrt(2)}
    table = _table(texts=[[texts]], team=3)
    for thr, want in cases.items():
        kw = {} if thr is None else {"threshold": thr}
        for backend in ("jax", "numpy"):
            got = _score(table, ["eccentricity"], similarity="lexical", backend=backend,
                         dtype="float64", **kw)
            assert got["eccentricity"][0] == pytest.approx(want, rel=1e-12), (thr, backend)
            got32 = _score(table, ["eccentricity"], similarity="lexical", backend=backend,
                           dtype="float32", **kw)
            assert got32["eccentricity"][0] == pytest.approx(want, rel=1e-5), (thr, backend)


def test_eccentricity_threshold_on_answer_classes_by_hand():
    # answers 2, 2, 5 (test_three_agents_answer_sets_by_hand): Laplacian eigenvalues 0, 0
    # and 1. A threshold in (0, 1] keeps the two block indicators: Eccentricity 1; above 1
    # it keeps the whole basis: sqrt(3 - 3/3) = sqrt(2).
    table = _table(answers=[[["2", "2", "5"]]], team=3)
    for thr, want in ((0.05, 1.0), (1.0, 1.0), (1.5, math.sqrt(2)), (2.0, math.sqrt(2))):
        for backend in ("jax", "numpy"):
            got = _score(table, ["eccentricity"], threshold=thr, backend=backend)
            assert got["eccentricity"][0] == pytest.approx(want, rel=1e-12, abs=1e-12), (
                thr, backend)


def test_eccentricity_threshold_is_validated_and_named():
    table = _table(answers=[[["1", "2"]]], team=2)
    for bad in (0.0, -0.5, 2.5, float("nan")):
        with pytest.raises(ValueError, match="threshold"):
            fastuq.score(table, "eccentricity", threshold=bad)
    with pytest.raises(ValueError, match="threshold.*eccentricity"):
        fastuq.score(table, "eigval_laplacian", threshold=0.5)  # would be ignored
    with pytest.raises(TypeError, match="thres"):
        fastuq.score(table, "eccentricity", thres=0.5)


# ---------------------------------------------------------------- the packed answer classes


def test_wide_teams_take_both_code_paths_and_match_the_reference():
    # teams padded to 16 slots run the unrolled compares, 32 slots the [T, N, A, A] array
    # code (kernels.spectral.UNROLL_SLOTS = 16): both against the per-trajectory reference
    from fastuq.kernels.spectral import UNROLL_SLOTS

    rng = np.random.default_rng(7)
    for team in (UNROLL_SLOTS, UNROLL_SLOTS + 4):
        answers = [[[None if rng.random() < 0.2 else str(rng.integers(0, 4))
                     for _ in range(team)] for _ in range(int(rng.integers(1, 4)))]
                   for _ in range(6)]
        want = [spectral_trajectory(a, team, "answer") for a in answers]
        for backend in ("jax", "numpy"):
            got = _score(_table(answers=answers, team=team), SPECTRAL, backend=backend,
                         dtype="float64")
            for k, ref in enumerate(want):
                for column in got:
                    assert got[column][k] == pytest.approx(ref[column], rel=1e-9, abs=1e-9), (
                        team, backend, column, k)


def test_answer_classes_are_packed_in_the_narrowest_int_type():
    from fastuq.engine.similarity import narrow_classes

    for top, dtype in ((-1, np.int8), (127, np.int8), (128, np.int16), (32767, np.int16),
                       (32768, np.int32)):
        x = np.array([[-1, top]], np.int32)
        got = narrow_classes(x)
        assert got.dtype == dtype and (got == x).all(), top


@settings(max_examples=30, deadline=None)
@given(width=st.sampled_from([1, 2, 3, 4, 6, 8, 12, 16]), t_max=st.integers(1, 4),
       n=st.integers(1, 9), dtype=st.sampled_from(["int8", "int16", "int32"]),
       seed=st.integers(0, 2**32 - 1))
def test_answer_kernels_read_every_class_width_alike(width, t_max, n, dtype, seed):
    # int8 and int16 classes of whole 32-bit words are read as words and unpacked
    # (kernels.spectral._slot_planes); every width must count the same sets, nodes and equal
    # pairs as the NumPy twin, with classes at the ends of the type's range, votes missing
    # (-1), slots past the team holding anything and rounds masked out
    from fastuq.kernels import spectral

    rng = np.random.default_rng(seed)
    top = np.iinfo(dtype).max
    pool = np.array([-1, 0, 1, top - 1, top], np.int64)
    classes = pool[rng.integers(0, len(pool), (t_max, n, width))].astype(dtype)
    team = rng.integers(1, width + 1, n).astype(np.float64)
    mask = np.arange(t_max)[:, None] < rng.integers(0, t_max + 1, n)[None, :]
    for name in SPECTRAL:
        want = getattr(spectral, f"{name}_numpy")(classes.astype(np.int64), mask, team)
        got = getattr(spectral, name)(classes, mask, n_agents=team.astype(np.float32))
        for column, ref in want.items():
            np.testing.assert_allclose(np.asarray(got[column], np.float64), ref, rtol=1e-6,
                                       atol=1e-6, err_msg=f"{name} {column} {dtype}")
