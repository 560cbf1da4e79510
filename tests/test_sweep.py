"""Tests of fastuq.sweeps (grid sweeps, CV selection, heatmap, CLI) and fastuq.metrics.rank.

Tolerances: rank metrics vs scikit-learn / plain stable-argsort loops 1e-12 (all exact up to
float64 rounding). A sweep point vs an independent ``sauce_batch`` + ``fastuq.metrics`` run:
1e-12 in float64; in float32 the two jitted programs may round a score differently in the
last bit, which can swap near-equal scores, so 1e-6.
"""

from __future__ import annotations

import subprocess
import sys

import numpy as np
import polars as pl
import pyarrow.parquet as pq
import pytest
from hypothesis import given
from hypothesis import strategies as st
from sklearn.metrics import roc_auc_score

import fastuq
import fastuq.evaluation.sweeps as sweep_mod
from fastuq import cli
from fastuq.engine.batch import Batch
from fastuq.metrics import auarc, auroc, prr
from fastuq.metrics import rank as rf
from fastuq.sweeps import load_sauce_data, parse_values, stratified_folds, sweep
from fastuq.synth import corpus


@pytest.fixture(scope="module")
def mixed():
    return corpus(3000, protocol="mixed", seed=11)


def _packed(table, dtype=np.float64):
    b = Batch(table, dtype=dtype)
    a, m = b.rounds("agreement")
    h, _ = b.rounds("token_entropy")
    return a, h, m, b.correct(), b.protocol()


def auarc_plain(y, u):
    order = np.argsort(u, kind="stable")
    ys = np.asarray(y, np.float64)[order]
    return float(np.mean(np.cumsum(ys) / np.arange(1, len(ys) + 1)))


# ---------------------------------------------------------------- rank core


@st.composite
def _scores_with_ties(draw):
    n = draw(st.integers(1, 300))
    seed = draw(st.integers(0, 2**32 - 1))
    rng = np.random.default_rng(seed)
    levels = draw(st.sampled_from([1, 2, 5, 40, 10_000]))
    x = rng.integers(-levels, levels + 1, n) / draw(st.sampled_from([1.0, 3.0, 7.5]))
    if draw(st.booleans()):
        x = x * 1e-30  # tiny magnitudes, denormals in float32
    x[rng.random(n) < 0.1] = -0.0
    y = rng.random(n) < draw(st.floats(0.05, 0.95))
    dtype = draw(st.sampled_from([np.float32, np.float64]))
    return y, x.astype(dtype)


@given(_scores_with_ties())
def test_rank_core_matches_sklearn_and_stable_argsort_with_many_ties(case):
    y, x = case
    order = rf.stable_argsort(x)
    np.testing.assert_array_equal(order, np.argsort(x + x.dtype.type(0), kind="stable"))
    got = rf.rank_metrics_1d(y, x)
    assert abs(got["auarc"] - auarc_plain(y, x)) < 1e-12
    if 0 < y.sum() < len(y):
        assert abs(got["auroc"] - roc_auc_score(y, -x.astype(np.float64))) < 1e-12
        assert abs(got["prr"] - prr(y, x)) < 1e-12
    else:
        assert np.isnan(got["auroc"]) and np.isnan(got["prr"])


def test_rank_core_float64_uses_all_digits():
    # Values equal in their high 32 bits, different below: float32 keys would tie them.
    base = np.float64(0.5)
    x = base + np.array([3, 1, 2, 0, 1]) * np.finfo(np.float64).eps
    assert np.unique(x.astype(np.float32)).size == 1
    np.testing.assert_array_equal(rf.stable_argsort(x), np.argsort(x, kind="stable"))


def test_rank_rows_threads_and_subsets_match_direct_metrics():
    rng = np.random.default_rng(3)
    n, g = 2000, 7
    y = rng.random(n) < 0.6
    x = (np.round(rng.standard_normal((g, n)) * 4) / 4 - 0.5 * y).astype(np.float32)
    subsets = [rng.random(n) < 0.7, np.arange(n) % 3 == 0]
    one, p1 = rf.rank_metrics_rows(y, x, subsets=subsets, threads=1)
    two, p2 = rf.rank_metrics_rows(y, x, subsets=subsets, threads=2)
    for m in rf.RANK_METRICS:
        np.testing.assert_array_equal(one[m], two[m])
        np.testing.assert_array_equal(p1[m], p2[m])
    ref = {"auroc": auroc, "auarc": auarc, "prr": prr}
    for m, fn in ref.items():
        np.testing.assert_allclose(one[m], fn(y, x.T), rtol=0, atol=1e-12)
        for s, mask in enumerate(subsets):
            np.testing.assert_allclose(p1[m][:, s], fn(y[mask], x[:, mask].T), rtol=0,
                                       atol=1e-12)


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("bad", [np.nan, np.inf, -np.inf, -np.nan])
def test_rank_rows_check_finite_names_the_row(dtype, bad):
    y = np.arange(50) % 3 == 0
    x = np.tile(np.linspace(-1, 1, 50), (4, 1)).astype(dtype)
    x[2, 17] = bad
    with pytest.raises(rf.NonFiniteScoreError, match="row 2") as err:
        rf.rank_metrics_rows(y, x, check_finite=True, threads=2)
    assert err.value.row == 2
    full, _ = rf.rank_metrics_rows(y, x[[0, 1, 3]], check_finite=True)
    assert np.isfinite(full["auroc"]).all()


def test_sweep_names_a_grid_point_with_non_finite_scores(mixed):
    # mu_0 = 3e38 fits float32, but the sum of three posterior means overflows to inf
    with pytest.raises(ValueError, match=r"grid point \(lam=1, mu_0=3e\+38\)"):
        sweep(mixed, {"lam": [1.0], "mu_0": [0.0, 3e38]}, dtype="float32")


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_metrics_fast_path_equals_block_path(monkeypatch, dtype):
    import fastuq.metrics.rank as rank_mod

    rng = np.random.default_rng(9)
    n = rank_mod.FAST_MIN_ROWS + 123
    y = rng.random(n) < 0.55
    x = np.round(rng.standard_normal((n, 3)) * 50) / 50 - 0.3 * y[:, None]
    x[:, 2] += 1e-12 * np.arange(n)  # float64: not float32-exact, the 4-pass radix
    x = x.astype(dtype)
    fast = rank_mod.rank_metrics(y, x)
    monkeypatch.setattr(rank_mod, "FAST_MIN_ROWS", 1 << 62)
    block = rank_mod.rank_metrics(y, x)
    for m in rank_mod.RANK_METRICS:
        np.testing.assert_allclose(fast[m], block[m], rtol=0, atol=1e-12)
    np.testing.assert_allclose(fast["auroc"], [roc_auc_score(y, -x[:, j]) for j in range(3)],
                               rtol=0, atol=1e-12)


# ---------------------------------------------------------------- sweep vs single runs


@pytest.mark.parametrize("dtype, atol", [("float64", 1e-12), ("float32", 1e-6)])
def test_sweep_point_equals_single_scoring_run(mixed, dtype, atol):
    a, h, m, y, protos = _packed(mixed)
    grid = {"lam": [0.6, 0.95], "q": [0.0, 0.05], "mu_0": [0.0, 0.3]}
    table = sweep(mixed, grid, ("auroc", "auarc", "prr"), dtype=dtype, chunk_points=3)
    assert table.columns == ["lam", "q", "mu_0", "auroc", "auarc", "prr"]
    assert table.height == 8
    assert table.row(0)[:3] == (0.6, 0.0, 0.0) and table.row(1)[:3] == (0.6, 0.0, 0.3)
    for i in (0, 3, 5, 7):  # several points; sigma2_0 comes from each trajectory's preset
        row = table.row(i, named=True)
        s = fastuq.sauce_batch(a, h, m, protocol=protos, lam=row["lam"], q=row["q"],
                               mu_0=row["mu_0"], dtype=dtype)["score"]
        assert abs(row["auroc"] - auroc(y, s)) <= atol
        assert abs(row["auarc"] - auarc(y, s)) <= atol
        assert abs(row["prr"] - prr(y, s)) <= atol
    pre = fastuq.sauce_batch(a, h, m, protocol=protos, dtype=dtype)["score"]
    assert abs(table.preset["auroc"] - auroc(y, pre)) <= atol
    assert table.cv is None


def test_sweep_arrays_input_and_callable_module(mixed):
    a, h, m, y, _ = _packed(mixed)
    grid = {"lam": [0.7, 0.9]}
    t1 = fastuq.sweep((a, h, m, y), grid, protocol="dylan", dtype="float64")
    t2 = sweep((a, h, m), grid, protocol="dylan", labels=y, dtype="float64")
    assert t1.equals(t2)
    s = fastuq.sauce_batch(a, h, m, protocol="dylan", lam=0.9, dtype="float64")["score"]
    assert abs(t1["auroc"][1] - auroc(y, s)) < 1e-12


def test_chunk_points_bounds_every_block(mixed, monkeypatch):
    seen = []
    real = sweep_mod._score_block

    def spy(scorer, points):
        seen.append(points.shape[0])
        return real(scorer, points)

    monkeypatch.setattr(sweep_mod, "_score_block", spy)
    grid = {"lam": np.linspace(0.5, 1, 5), "q": [0.01, 0.1]}
    full = sweep(mixed, grid, chunk_points=64)
    seen.clear()
    small = sweep(mixed, grid, chunk_points=3)
    assert seen and max(seen) <= 3 and len(seen) == 4  # ceil(10 / 3) blocks
    assert small.equals(full)


def test_blocks_compile_once(mixed, monkeypatch):
    made = []
    real = sweep_mod._make_scorer

    def keep(*args, **kwargs):
        made.append(real(*args, **kwargs))
        return made[-1]

    monkeypatch.setattr(sweep_mod, "_make_scorer", keep)
    before = sweep_mod._vmapped_scan(("lam",))._cache_size()
    sweep(mixed, {"lam": np.linspace(0.5, 1, 7)}, chunk_points=3)  # 3 + 3 + 1 (padded)
    assert made[0].fn is sweep_mod._vmapped_scan(("lam",))
    assert made[0].fn._cache_size() <= before + 1
    sweep(mixed, {"lam": np.linspace(0.6, 1, 8)}, chunk_points=3)  # same shapes: no compile
    assert made[0].fn._cache_size() <= before + 1


def test_float32_and_float64_sweeps_agree(mixed):
    grid = {"q": [0.001, 0.1, 1.0]}
    t32 = sweep(mixed, grid, dtype="float32")
    t64 = sweep(mixed, grid, dtype="float64")
    np.testing.assert_allclose(t32["auroc"], t64["auroc"], atol=1e-4)


# ---------------------------------------------------------------- grids


def test_parse_values_ranges_lists_and_log():
    v = parse_values("0.5:1.0:32")
    assert len(v) == 32 and v[0] == 0.5 and v[-1] == 1.0
    np.testing.assert_allclose(np.diff(v), 0.5 / 31)
    w = parse_values("1e-3:1:4", log=True)
    np.testing.assert_allclose(w, [1e-3, 1e-2, 1e-1, 1.0])
    assert parse_values("0.9") == [0.9]
    assert parse_values("0.1, 0.2,0.4") == [0.1, 0.2, 0.4]
    assert parse_values("2:2:1") == [2.0]
    for bad in ("1:2", "a:b:3", "0:1:0", "x", "", "1:nan:3"):
        with pytest.raises(ValueError):
            parse_values(bad)
    with pytest.raises(ValueError, match="log spacing"):
        parse_values("0:1:5", log=True)


def test_cli_grid_parsing():
    import argparse

    from fastuq.cli import sweep as _cli_sweep
    from fastuq.cli.sweep import _grid

    parser = argparse.ArgumentParser()
    _cli_sweep.add_parser(parser.add_subparsers(dest="command"))
    args = parser.parse_args(["sweep", "x.parquet", "--lam", "0.5:1.0:32", "--q", "1e-3:1:32",
                              "--log", "q", "--mu-0", "0.1"])
    grid = _grid(args)
    assert list(grid) == ["lam", "q", "mu_0"]
    assert len(grid["lam"]) == 32 and grid["mu_0"] == [0.1]
    np.testing.assert_allclose(grid["q"], np.geomspace(1e-3, 1, 32))
    args = parser.parse_args(["sweep", "x.parquet", "--lam", "0.9", "--log", "beta"])
    with pytest.raises(ValueError, match="unknown"):
        _grid(args)


@pytest.mark.parametrize(
    "grid, match",
    [
        ({"alpha": [1]}, "unknown grid parameter"),
        ({"lam": [0.5, 1.5]}, r"\[0, 1\]"),
        ({"q": [-1]}, ">= 0"),
        ({"sigma2_0": [0]}, "> 0"),
        ({"lam": []}, "non-empty"),
        ({}, "non-empty"),
    ],
)
def test_bad_grids_raise(mixed, grid, match):
    with pytest.raises(ValueError, match=match):
        sweep(mixed, grid)


def test_bad_inputs_raise(mixed):
    with pytest.raises(ValueError, match="metrics"):
        sweep(mixed, {"lam": [0.9]}, ("brier",))
    with pytest.raises(ValueError, match="no complete correct"):
        sweep(mixed.drop_columns(["correct"]), {"lam": [0.9]})
    a, h, m, y, _ = _packed(mixed)
    a[1, 5] = 1.5
    with pytest.raises(ValueError, match="trajectory 5, round 1: agreement"):
        sweep((a, h, m, y), {"lam": [0.9]})
    with pytest.raises(ValueError, match="chunk_points"):
        sweep(mixed, {"lam": [0.9]}, chunk_points=0)


def test_loader_merges_chunks_with_different_round_counts(tmp_path):
    table = corpus(600, protocol="dylan", seed=2)
    path = tmp_path / "c.parquet"
    pq.write_table(table, path, row_group_size=50)
    whole = load_sauce_data(table)
    chunked = load_sauce_data(path, chunk_rows=50)
    np.testing.assert_array_equal(whole.round_mask, chunked.round_mask)
    np.testing.assert_array_equal(whole.agreement, chunked.agreement)
    assert list(np.asarray(whole.protocols)[whole.protocol_codes]) == \
        list(np.asarray(chunked.protocols)[chunked.protocol_codes])


# ---------------------------------------------------------------- cross-validation


def _known_best_case(n=400, seed=0):
    """One round, agreement 1 everywhere, correct iff entropy is small (with 10% noise).

    With lam = 1, q = 0: mu_1 = mu_0 + K (1 - mu_0), K = sigma2_0 / (sigma2_0 + h). For
    mu_0 < 1 low entropy gives a low score (the right ranking), mu_0 = 1 ties everything
    (AUROC 1/2) and mu_0 > 1 reverses the ranking. So mu_0 = 0 is best on every fold.
    """
    rng = np.random.default_rng(seed)
    h = rng.random((1, n)) * 2
    y = (h[0] < 1.0) ^ (rng.random(n) < 0.1)
    return np.ones((1, n)), h, np.ones((1, n), bool), y


def test_cv_selects_the_known_best_point():
    a, h, m, y = _known_best_case()
    grid = {"lam": [1.0], "q": [0.0], "mu_0": [2.0, 1.0, 0.0]}
    table = sweep((a, h, m, y), grid, ("auroc", "auarc"), folds=4, dtype="float64")
    np.testing.assert_allclose(table["auroc"][1], 0.5)
    assert table["auroc"][2] > 0.8 and table["auroc"][0] < 0.2
    cv = table.cv
    assert cv.metric == "auroc" and cv.folds.height == 4
    assert (cv.folds["mu_0"] == 0.0).all()
    assert cv.chosen == {"lam": 1.0, "q": 0.0, "mu_0": 0.0}
    assert cv.chosen_metric == table["auroc"][2]
    fold = stratified_folds(y, 4, 0)
    s = fastuq.sauce_batch(a, h, m, lam=1.0, q=0.0, mu_0=0.0, dtype="float64")["score"]
    expect = [auroc(y[fold == f], s[fold == f]) for f in range(4)]
    np.testing.assert_allclose(cv.folds["heldout_auroc"], expect, atol=1e-12)
    train = [auroc(y[fold != f], s[fold != f]) for f in range(4)]
    np.testing.assert_allclose(cv.folds["train_auroc"], train, atol=1e-12)
    assert cv.mean_heldout == pytest.approx(np.mean(expect))
    # presets (debate) on each held-out fold, for comparison
    pre = fastuq.sauce_batch(a, h, m, dtype="float64")["score"]
    np.testing.assert_allclose(cv.folds["preset_heldout_auroc"],
                               [auroc(y[fold == f], pre[fold == f]) for f in range(4)],
                               atol=1e-12)


def test_cv_select_by_second_metric_and_class_count_check():
    a, h, m, y = _known_best_case()
    grid = {"lam": [1.0], "q": [0.0], "mu_0": [1.0, 0.0]}
    t = sweep((a, h, m, y), grid, ("auroc", "auarc"), folds=2, select="auarc")
    assert t.cv.metric == "auarc" and (t.cv.folds["mu_0"] == 0.0).all()
    y_few = np.zeros_like(y)
    y_few[:2] = True
    with pytest.raises(ValueError, match="at least 3"):
        sweep((a, h, m, y_few), {"mu_0": [0.0]}, folds=3)


# ---------------------------------------------------------------- CLI and plots


@pytest.fixture
def fastuq_cli(monkeypatch):
    monkeypatch.setitem(cli.COMMANDS, "sweep", "fastuq.cli.sweep")
    return cli.main


def test_cli_writes_parquet_and_heatmap(tmp_path, fastuq_cli, capsys):
    path = tmp_path / "corpus.parquet"
    pq.write_table(corpus(1500, protocol="mixed", seed=4), path)
    out, png = tmp_path / "sweep.parquet", tmp_path / "heat.png"
    rc = fastuq_cli(["sweep", str(path), "--lam", "0.5:1.0:4", "--q", "1e-3:1:3", "--log", "q",
                     "--metric", "auroc,auarc", "--folds", "3", "-o", str(out),
                     "--plot", str(png)])
    text = capsys.readouterr().out
    assert rc == 0
    table = pl.read_parquet(out)
    assert table.columns == ["lam", "q", "auroc", "auarc"] and table.height == 12
    np.testing.assert_allclose(sorted(set(table["q"])), [1e-3, np.sqrt(1e-3), 1.0])
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert "best by auroc" in text and "presets" in text and "mean held-out" in text
    assert not list(tmp_path.glob(".*tmp"))  # atomic writes leave nothing behind


def test_cli_plot_without_matplotlib_is_a_clear_error(tmp_path, fastuq_cli, capsys,
                                                      monkeypatch):
    monkeypatch.setitem(sys.modules, "matplotlib", None)
    rc = fastuq_cli(["sweep", "--sample", "--lam", "0.9", "--plot", str(tmp_path / "h.png")])
    assert rc == 2  # a usage error, as in eval, replay and report
    assert "needs matplotlib" in capsys.readouterr().err


def test_cli_usage_errors(fastuq_cli, capsys):
    assert fastuq_cli(["sweep", "--sample"]) == 2
    assert "at least one of --lam" in capsys.readouterr().err
    assert fastuq_cli(["sweep", "--sample", "--lam", "0:1"]) == 2
    assert "--lam" in capsys.readouterr().err


def test_heatmap_single_parameter_draws_a_line(tmp_path, mixed):
    table = sweep(mixed, {"lam": [0.6, 0.8, 1.0], "mu_0": [0.0]})
    path = sweep_mod.heatmap(table, "auroc", tmp_path / "line.png")
    assert path.read_bytes()[:4] == b"\x89PNG"


def test_imports_do_not_load_jax():
    code = ("import sys, fastuq.sweeps, fastuq.fit, fastuq.cli.sweep, fastuq.cli.fit, "
            "fastuq.metrics.rank; assert 'jax' not in sys.modules, 'jax imported'")
    subprocess.run([sys.executable, "-c", code], check=True)


@pytest.mark.parametrize("params, needle", [
    ({"debate": {"lam": 2.0}}, "out of range"),
    ({"debate": {"q": float("nan")}}, "finite number"),
    ({"debate": {"lamda": 0.9}}, "unknown parameter"),
    ({"debate": 0.9}, "object of parameters"),
])
def test_sweep_base_params_are_checked_like_a_fit_file(params, needle):
    # One validator serves fastuq.fit.load_params and sweep(params=...): what a params file
    # may not hold, the Python argument may not hold either.
    from fastuq.sweeps import sweep

    agreement = [[1.0, 0.5], [0.5]]
    entropy = [[0.2, 0.1], [0.3]]
    with pytest.raises(ValueError, match=needle):
        sweep((agreement, entropy), {"lam": [0.5, 0.9]}, protocol="debate",
              labels=[True, False], params=params)
