"""``fastuq bench`` (:mod:`fastuq.evaluation.bench`) and the timing harness it shares with
``bench/`` (:mod:`fastuq.evaluation.timing`): every registered estimator and a toy one
registered here run on tiny sizes; the results file's fields are consistent (the floor is
the bytes worked out by hand over the measured bandwidth, the ratio is time over floor, the
reference agrees with the kernel, a kernel that disagrees is caught); ``fastuq report
--bench`` shows the table. No assertion is made on a time."""

from __future__ import annotations

import json
import math

import jax.numpy as jnp
import numpy as np
import pytest

import fastuq
from fastuq.cli import main
from fastuq.engine.registry import ESTIMATORS, Estimator, Param
from fastuq.evaluation.bench import (
    AGREE_TOL,
    bench_table,
    load_bench,
    parse_counts,
    run_bench,
)
from fastuq.evaluation.timing import copy_bandwidth, machine_info

N, T, A, SUB = 300, 2, 3, 40


def _toy_kernel(agreement, round_mask, *, margin):
    return -jnp.min(jnp.where(round_mask, agreement, jnp.inf), axis=0) + margin


def _toy_twin(agreement, round_mask, *, margin):
    return -np.min(np.where(round_mask, agreement, np.inf), axis=0) + margin


def _toy_reference(agreement, round_mask, *, margin):
    values = [float(x) for x, m in zip(agreement, round_mask, strict=True) if m]
    return -min(values) + margin if values else math.nan


def _wrong_reference(agreement, round_mask, *, margin):
    # the maximum where the kernel takes the minimum: differs wherever agreement moved
    values = [float(x) for x, m in zip(agreement, round_mask, strict=True) if m]
    return -max(values) + margin


TOY = Estimator(
    name="toy_bench_min", inputs=("agreement", "round_mask"),
    params=(Param("margin", default=0.25, low=0.0, doc="added to every score"),),
    kernel=_toy_kernel, twin=_toy_twin, reference=_toy_reference,
    description="minus the lowest agreement of any executed round",
)
WRONG = Estimator(
    name="toy_bench_wrong", inputs=("agreement", "round_mask"),
    params=(Param("margin", default=0.25, low=0.0, doc="added to every score"),),
    kernel=_toy_kernel, twin=_toy_twin, reference=_wrong_reference,
    description="a kernel that does not compute its reference",
)


@pytest.fixture
def toys():
    for est in (TOY, WRONG):
        fastuq.register_estimator(est)
    try:
        yield
    finally:
        for est in (TOY, WRONG):
            fastuq.unregister_estimator(est.name)


@pytest.fixture(scope="module")
def every_estimator():
    """One bench of every built-in estimator at a tiny shape, float64."""
    return run_bench("all", n=(N,), rounds=(T,), agents=(A,), dtype="float64", repeats=2,
                     subsample=SUB, bandwidth_bytes=8 << 20)


def _consistent(row: dict, sub: int = SUB) -> None:
    """The fields of one result row against each other (no time is asserted)."""
    assert "error" not in row, row
    assert row["floor_s"] > 0 and row["median_s"] > 0
    assert row["floor_ratio"] == pytest.approx(row["median_s"] / row["floor_s"], rel=1e-12)
    assert row["median_s"] == pytest.approx(float(np.median(row["times_s"])), rel=1e-12)
    assert row["traj_per_s"] == pytest.approx(row["n"] / row["median_s"], rel=1e-12)
    assert row["ns_per_traj_round"] == pytest.approx(
        row["median_s"] * 1e9 / (row["n"] * row["rounds"]), rel=1e-12)
    assert row["compile_s"] >= 0 and row["peak_bytes"] >= 0
    assert row["twin_median_s"] is not None and row["twin_median_s"] > 0
    assert row["reference_rows"] == min(sub, row["n"])
    assert row["reference_agrees"] is True, row["reference_mismatch"]
    assert row["reference_max_diff"] <= AGREE_TOL[row["dtype"]]
    assert row["reference_speedup"] == pytest.approx(
        row["reference_s_per_traj"] * row["n"] / row["median_s"], rel=1e-12)


def test_every_registered_estimator_runs_and_its_fields_agree(every_estimator):
    data = every_estimator
    rows = {r["method"]: r for r in data["results"]}
    assert list(rows) == list(ESTIMATORS)
    bw = data["bandwidth"]
    assert bw["bytes_per_s"] == pytest.approx(2 * bw["array_bytes"] / bw["median_s"])
    for name, row in rows.items():
        assert (row["n"], row["rounds"], row["agents"], row["dtype"]) == (N, T, A, "float64")
        _consistent(row)
        assert row["floor_s"] == pytest.approx(
            (row["bytes_read"] + row["bytes_written"]) / bw["bytes_per_s"], rel=1e-12), name
        assert row["outputs"] == list(ESTIMATORS[name].outputs)
    # bytes worked out by hand. SAUCE reads agreement and token entropy [T, N] float64, the
    # round mask [T, N] bool and four scalar parameters, and writes one [N] float64 score
    assert rows["sauce"]["bytes_read"] == 2 * T * N * 8 + T * N + 4 * 8
    assert rows["sauce"]["bytes_written"] == N * 8
    # MSP reads seq_logprob [T, N, slots] float64 and the node mask (A = 3 agents pad to 4
    # slots); BCCS writes three [N] columns (score, first full round, leader slot)
    assert rows["msp_final"]["bytes_read"] == T * N * 4 * 8 + T * N * 4
    assert rows["bccs"]["bytes_written"] == 3 * N * 8
    # machine, versions, load and date recorded
    machine = data["machine"]
    for key in ("cpu_model", "cpu_count", "mem_total_bytes", "loadavg_start", "loadavg_end",
                "date", "numpy", "jax", "fastuq", "devices"):
        assert key in machine, key
    assert machine["devices"] and machine["devices"][0]["platform"]


def test_the_table_has_a_row_per_result_and_the_file_round_trips(every_estimator, tmp_path):
    data = every_estimator
    text = bench_table(data)
    for name in ESTIMATORS:
        assert sum(line.startswith(name + " ") for line in text.splitlines()) == 1, name
    md = bench_table(data, markdown=True)
    assert md.splitlines()[0].startswith("| method | N | T | A |")
    path = tmp_path / "b.json"
    from fastuq.io.writers import atomic_write_json

    atomic_write_json(path, data)
    back = load_bench(path)
    assert [r["method"] for r in back["results"]] == list(ESTIMATORS)


def test_a_registered_toy_estimator_through_the_command(toys, tmp_path, capsys):
    out = tmp_path / "toy.json"
    rc = main(["bench", "--method", "toy_bench_min", "--n", "500,1e3", "--rounds", "2,4",
               "--agents", "3", "--dtype", "float32", "--repeats", "2", "--subsample", "30",
               "--json", str(out)])
    assert rc == 0
    captured = capsys.readouterr()
    assert "toy_bench_min" in captured.out and "simulating" in captured.err
    data = json.loads(out.read_text())
    shapes = [(r["n"], r["rounds"]) for r in data["results"]]
    assert shapes == [(500, 2), (1000, 2), (500, 4), (1000, 4)]
    for row in data["results"]:
        _consistent(row, sub=30)
        n, t = row["n"], row["rounds"]
        # agreement [T, N] float32 + round mask [T, N] bool + margin (a float32 scalar)
        assert row["bytes_read"] == t * n * 4 + t * n + 4
        assert row["bytes_written"] == n * 4
        assert row["protocol"] is None  # its one parameter has a default


def test_a_kernel_that_disagrees_with_its_reference_fails_the_run(toys, tmp_path, capsys):
    out = tmp_path / "wrong.json"
    rc = main(["bench", "--method", "toy_bench_wrong,toy_bench_min", "--n", "400",
               "--rounds", "3", "--repeats", "1", "--subsample", "50", "--json", str(out)])
    assert rc == 1
    err = capsys.readouterr().err
    assert "disagree for toy_bench_wrong" in err and "toy_bench_min" not in err.split(
        "disagree")[1]
    rows = {r["method"]: r for r in json.loads(out.read_text())["results"]}
    assert rows["toy_bench_wrong"]["reference_agrees"] is False
    assert rows["toy_bench_min"]["reference_agrees"] is True


@pytest.mark.parametrize("argv, message", [
    (["--method", "no_such_estimator"], "unknown estimator 'no_such_estimator'"),
    (["--n", "0"], "--n: each value must be a whole number >= 1"),
    (["--rounds", "2.5"], "--rounds: each value must be a whole number >= 1"),
    (["--agents", "three"], "--agents: expected whole numbers"),
    (["--subsample", "-1"], "--subsample must be >= 0"),
])
def test_usage_errors_exit_2(argv, message, capsys):
    assert main(["bench", *argv]) == 2
    assert message in capsys.readouterr().err


def test_json_path_refused_before_the_run(tmp_path, capsys):
    assert main(["bench", "--n", "10", "--json", str(tmp_path / "b.txt")]) == 2
    assert "b.txt" in capsys.readouterr().err


def test_parse_counts():
    assert parse_counts("1e6", "--n") == [1_000_000]
    assert parse_counts("3, 10", "--rounds") == [3, 10]
    with pytest.raises(ValueError, match="--n"):
        parse_counts("1e6,", "--n")


def test_load_bench_names_what_is_wrong(tmp_path):
    path = tmp_path / "x.json"
    path.write_text(json.dumps({"estimators": []}))
    with pytest.raises(ValueError, match="x.json: not a 'fastuq bench --json' results file"):
        load_bench(path)
    path.write_text(json.dumps({"kind": "fastuq bench", "machine": {}, "bandwidth": {},
                                "settings": {}, "results": [{"method": "sauce", "n": 1}]}))
    with pytest.raises(ValueError, match=r"result 0 \(sauce\) has no field 'rounds'"):
        load_bench(path)


def test_report_adds_the_bench_table(every_estimator, tmp_path, capsys):
    bench = tmp_path / "b.json"
    from fastuq.io.writers import atomic_write_json

    atomic_write_json(bench, every_estimator)
    page = tmp_path / "r.html"
    assert main(["report", "--method", "sauce", "--bench", str(bench), "-o", str(page)]) == 0
    html = page.read_text()
    assert '<section id="bench">' in html
    section = html.split('<section id="bench">', 1)[1].split("</section>", 1)[0]
    assert section.count("<tr>") == 1 + len(ESTIMATORS)  # header + one row per result
    for name in ESTIMATORS:
        assert f"<td>{name}</td>" in section
    # a file that is not a bench result: exit 2, no page
    bad = tmp_path / "bad.json"
    bad.write_text("{}")
    page2 = tmp_path / "r2.html"
    assert main(["report", "--method", "sauce", "--bench", str(bad), "-o", str(page2)]) == 2
    assert not page2.exists()
    assert "not a 'fastuq bench --json' results file" in capsys.readouterr().err


def test_copy_bandwidth_and_machine_info():
    bw = copy_bandwidth(4 << 20, repeats=3, threads=2)
    assert bw["array_bytes"] == 4 << 20 and len(bw["times_s"]) == 3
    assert bw["median_s"] == pytest.approx(float(np.median(bw["times_s"])))
    assert bw["bytes_per_s"] == pytest.approx(2 * (4 << 20) / bw["median_s"])
    with pytest.raises(ValueError, match="threads >= 1"):
        copy_bandwidth(1 << 20, threads=0)
    info = machine_info()
    assert info["cpu_count"] >= 1 and "devices" not in info and info["date"].endswith("+00:00")


def test_the_bench_scripts_time_with_the_package_harness():
    """bench/_common.py (every bench/ script's helpers) takes its timing, memory and floor
    functions from fastuq/evaluation/timing.py, the file ``fastuq bench`` uses: one harness,
    so the scripts' medians and floors are the command's."""
    import importlib.util
    from pathlib import Path

    import fastuq.evaluation.timing as timing

    root = Path(__file__).resolve().parents[1]
    spec = importlib.util.spec_from_file_location("_bench_common", root / "bench" / "_common.py")
    common = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(common)
    for name in ("time_calls", "median", "rss_bytes", "peak_rss_bytes", "reset_peak_rss",
                 "copy_bandwidth", "fmt_si", "fmt_num", "markdown_table"):
        fn = getattr(common, name)
        # the checkout's timing.py (bench/ runs from the checkout), the same file as the
        # installed package's (an editable install: the same path; CI's wheel: a copy)
        src = Path(fn.__code__.co_filename).resolve()
        assert src.parts[-3:] == ("fastuq", "evaluation", "timing.py"), (name, src)
        assert src.read_bytes() == Path(timing.__file__).read_bytes(), name
    info = common.machine_info()
    assert "git_commit" in info and "loadavg_start" in info
    calls = []
    times = common.time_calls(lambda: calls.append(1), 3, warmup=2)
    assert len(times) == 3 and len(calls) == 5


def _bench_script(name: str):
    """bench/NAME.py imported as a module (its folder is on sys.path while it imports its
    _common helpers, then taken off again)."""
    import importlib.util
    import sys
    from pathlib import Path

    folder = Path(__file__).resolve().parents[1] / "bench"
    sys.path.insert(0, str(folder))
    try:
        spec = importlib.util.spec_from_file_location(f"_bench_{name}", folder / f"{name}.py")
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
    finally:
        while str(folder) in sys.path:
            sys.path.remove(str(folder))
        sys.modules.pop("_common", None)
    return module


BLACK_BOX = {"spectral": ("ESTIMATORS", "estimators",
                          {"eigval_laplacian", "degree_matrix", "eccentricity"}),
             "answer_sets": ("ANSWER_SETS", "answer_sets",
                             {"answer_entropy", "num_answer_sets", "cocoa"})}


def test_black_box_bench_is_one_script_whose_sections_are_its_results():
    """bench_estimators.py runs both black-box case sets with one runner (the answer-set
    script it replaced is gone, and nothing names it); each set's README section is what
    the script renders from that set's committed results file."""
    from pathlib import Path

    root = Path(__file__).resolve().parents[1]
    gone = "bench_" + "answer_sets.py"
    assert not (root / "bench" / gone).exists()
    for path in [root / "README.md", root / "bench" / "README.md",
                 *sorted((root / "bench").glob("*.py"))]:
        assert gone not in path.read_text(encoding="utf-8"), path
    script = _bench_script("bench_estimators")
    assert set(script.CASE_SETS) == set(BLACK_BOX)
    readme = (root / "bench" / "README.md").read_text(encoding="utf-8")
    for set_name, (section, results, names) in BLACK_BOX.items():
        case_set = script.CASE_SETS[set_name]
        assert (case_set.section, case_set.results, set(case_set.cases)) == (section, results,
                                                                             names)
        assert names <= set(ESTIMATORS)
        data = json.loads((root / "bench" / "results" / f"{results}.json").read_text())
        assert data["name"] == section == script.section_of(data)
        assert {r["estimator"] for r in data["rows"]} == names
        begin, end = f"<!-- BEGIN GENERATED: {section} -->", f"<!-- END GENERATED: {section} -->"
        shown = readme[readme.index(begin) + len(begin):readme.index(end)]
        assert shown.strip() == script.render(data).strip(), section


@pytest.mark.parametrize("a", [3, 5])
def test_black_box_bench_loops_agree_with_the_numpy_twins(a):
    """The per-trajectory Python loops the script times (written apart, in the
    single-model libraries' style) give the estimators' values on its drawn inputs: the
    answer sets' three and the spectral family's eigval_laplacian (whose loop stands in for
    all three spectral estimators' per-sample cost)."""
    from fastuq.engine.registry import get_estimator
    from fastuq.engine.runner import call_kernel

    script = _bench_script("bench_estimators")
    n, t = 60, 3
    for set_name, name in (("answer_sets", "answer_entropy"),
                           ("answer_sets", "num_answer_sets"), ("answer_sets", "cocoa"),
                           ("spectral", "eigval_laplacian")):
        case_set = script.CASE_SETS[set_name]
        x = case_set.draw(n, t, a, seed=a)
        est = get_estimator(name)
        inputs = [x[i].astype(np.float64) if x[i].dtype.kind == "f" else x[i]
                  for i in est.inputs]
        optional = {k: x[k].astype(np.float64) for k in est.optional_inputs if k in x}
        twin = call_kernel(est, inputs, optional, {}, n=n, dtype=np.dtype(np.float64),
                           backend="numpy")[name]
        loop = np.array([case_set.cases[name](x, a, k) for k in range(n)])
        np.testing.assert_allclose(loop, twin, rtol=1e-9, atol=1e-12, err_msg=name)


# ------------------------------------------------------------------- --corpus: the stages


def test_corpus_stages_add_up_and_cover_every_chunk(tmp_path):
    import pyarrow.parquet as pq

    from fastuq.evaluation.bench_corpus import STAGES, corpus_stages, stages_table
    from fastuq.synth import corpus

    path = tmp_path / "c.parquet"
    pq.write_table(corpus(2_500, protocol="mixed", seed=4), path)
    data = corpus_stages(path, "sauce,msp_final,last_agreement", dtype="float64",
                         chunk_rows=1_000)
    assert (data["n"], data["chunks"]) == (2_500, 3)
    assert data["methods"] == ["sauce", "msp_final", "last_agreement"]
    assert list(data["stages"]) == list(STAGES)
    assert all(v >= 0 for v in data["stages"].values()) and data["compile_s"] > 0
    assert data["total_s"] == pytest.approx(sum(data["stages"].values()), rel=1e-12)
    assert sum(data["share"].values()) == pytest.approx(1.0, rel=1e-12)
    assert data["traj_per_s"] == pytest.approx(2_500 / data["total_s"], rel=1e-12)
    assert list(data["kernel_s"]) == data["methods"]
    assert sum(data["kernel_s"].values()) == pytest.approx(data["stages"]["kernel"], rel=1e-9)
    text = stages_table(data)
    for stage in STAGES:
        assert any(line.split()[:1] == [stage] for line in text.splitlines()), stage


def test_corpus_option_through_the_command(tmp_path, capsys):
    import pyarrow as pa
    import pyarrow.parquet as pq

    rows = [{"trajectory_id": f"r{k}", "protocol": "debate", "n_agents": 3, "correct": True,
             "agreement": [1.5, 1.0] if k == 7 else [1 / 3, 2 / 3],
             "token_entropy": [0.2, 0.3]} for k in range(10)]
    bad = tmp_path / "bad.parquet"
    pq.write_table(pa.Table.from_pylist(rows), bad)
    assert main(["bench", "--corpus", str(bad), "--method", "sauce"]) == 2
    assert ("trajectory 'r7' (" in (err := capsys.readouterr().err)
            and "round 0: agreement = 1.5" in err)
    # options of the simulated run would be ignored: refused
    assert main(["bench", "--corpus", str(bad), "--rounds", "4"]) == 2
    assert "--rounds would be ignored" in capsys.readouterr().err
    assert main(["bench", "--corpus", str(tmp_path / "none.parquet")]) == 2
    good = tmp_path / "good.parquet"
    del rows[7]
    pq.write_table(pa.Table.from_pylist(rows), good)
    out = tmp_path / "stages.json"
    assert main(["bench", "--corpus", str(good), "--method", "sauce,mean_agreement",
                 "--json", str(out)]) == 0
    data = json.loads(out.read_text())
    assert data["kind"] == "fastuq bench --corpus" and data["n"] == 9
    assert "cpu_model" in data["machine"] and data["methods"] == ["sauce", "mean_agreement"]
