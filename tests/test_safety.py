"""Nothing destroyed, nothing silent: output paths, write failures, temporary files, truncated
input, strict labels, options that would be ignored, and the strict Python API."""

import gzip
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

import fastuq
from fastuq.cli import main
from fastuq.io import temporaries

DATA = Path(__file__).parent / "data"


def _corpus(folder: Path, n: int = 40, name: str = "c.parquet", bad_row: int | None = None,
            seed: int = 0) -> tuple[Path, dict]:
    rng = np.random.default_rng(seed)
    lengths = rng.integers(1, 4, n)
    cols = {
        "trajectory_id": [f"t{k}" for k in range(n)],
        "protocol": ["dylan" if k % 3 else "debate" for k in range(n)],
        "agreement": [list(rng.integers(1, 5, t) / 4) for t in lengths],
        "token_entropy": [list(rng.exponential(0.3, t)) for t in lengths],
        "correct": list(rng.random(n) < 0.6),
    }
    if bad_row is not None:
        cols["agreement"][bad_row][0] = 1.5
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / name
    pq.write_table(pa.table(cols), path)
    return path, cols


def _one_error_line(err: str, prog: str = "fastuq score") -> str:
    lines = [x for x in err.splitlines() if x.strip()]
    assert len(lines) == 1, err
    assert lines[0].startswith(f"{prog}: error: ") and "Traceback" not in err
    return lines[0]


def _listing(folder: Path) -> list[str]:
    return sorted(p.name for p in folder.rglob("*"))


# --- 1. an output that resolves to an input is refused before any work ------------------------


@pytest.mark.parametrize("how", ["same", "relative", "symlink", "skipped", "inside_folder",
                                 "skipped_is_output"])
def test_output_resolving_to_an_input_is_refused_and_the_input_kept(tmp_path, monkeypatch,
                                                                     capsys, how):
    corpus, _ = _corpus(tmp_path / "data")
    before = corpus.read_bytes()
    monkeypatch.chdir(tmp_path)
    src, out, extra = str(corpus), str(tmp_path / "s.parquet"), []
    if how == "same":
        out = str(corpus)
    elif how == "relative":
        out = "data/../data/c.parquet"
    elif how == "symlink":
        (tmp_path / "link.parquet").symlink_to(corpus)
        out = "link.parquet"
    elif how == "skipped":
        extra = ["--on-error", "skip", "--skipped", str(corpus)]
    elif how == "inside_folder":  # the folder is the input: a new Parquet file there is read
        src, out = str(tmp_path / "data"), str(tmp_path / "data" / "scores.parquet")
    else:
        extra = ["--on-error", "skip", "--skipped", out]
    assert main(["score", src, "-o", out, *extra]) == 2
    line = _one_error_line(capsys.readouterr().err)
    assert "cannot write" in line
    assert corpus.read_bytes() == before
    assert _listing(tmp_path / "data") == ["c.parquet"]


def test_sweep_import_and_eval_refuse_to_overwrite_inputs(tmp_path, capsys):
    corpus, _ = _corpus(tmp_path)
    before = corpus.read_bytes()
    assert main(["sweep", str(corpus), "--lam", "0.5,0.9", "-o", str(corpus)]) == 2
    _one_error_line(capsys.readouterr().err, "fastuq sweep")
    assert main(["eval", str(corpus), "--json", str(corpus)]) == 2
    _one_error_line(capsys.readouterr().err, "fastuq eval")
    scores = tmp_path / "scores.json"
    scores.write_text("{}")
    assert main(["eval", str(corpus), "--scores", str(scores), "--json", str(scores)]) == 2
    assert "it is the input" in _one_error_line(capsys.readouterr().err, "fastuq eval")
    assert scores.read_text() == "{}" and corpus.read_bytes() == before
    log = tmp_path / "logs" / "du.json"
    log.parent.mkdir()
    log.write_bytes((DATA / "du_debate.json").read_bytes())
    log_before = log.read_bytes()
    assert main(["import", "du", str(log.parent), "-o", str(log)]) == 2
    _one_error_line(capsys.readouterr().err, "fastuq import")
    assert log.read_bytes() == log_before


@pytest.mark.parametrize("argv_out, kind", [
    (["-o", "out.csv"], "Parquet"), (["-o", "out.json"], "Parquet"),
    (["-o", "s.parquet", "--on-error", "skip", "--skipped", "bad.parquet"], "JSON Lines"),
])
def test_output_name_contradicting_its_format_is_refused(tmp_path, capsys, argv_out, kind):
    corpus, _ = _corpus(tmp_path)
    argv = ["score", str(corpus)] + [str(tmp_path / a) if a.endswith(("csv", "json", "parquet"))
                                     else a for a in argv_out]
    assert main(argv) == 2
    assert f"writes {kind}" in _one_error_line(capsys.readouterr().err)
    assert _listing(tmp_path) == ["c.parquet"]


def test_eval_json_name_must_say_json(tmp_path, capsys):
    corpus, _ = _corpus(tmp_path)
    assert main(["eval", str(corpus), "--json", str(tmp_path / "eval.parquet")]) == 2
    assert "writes JSON" in _one_error_line(capsys.readouterr().err, "fastuq eval")


# --- 2. output problems are found before the corpus is read ------------------------------------


def _unwritable_cases(tmp_path: Path) -> list[tuple[str, str]]:
    (tmp_path / "afile").write_text("x")
    (tmp_path / "afolder").mkdir()
    cases = [(str(tmp_path / "afolder"), "is a folder"),
             (str(tmp_path / "afile" / "s.parquet"), "is not a folder")]
    if Path("/proc/self").exists():  # a file system no file can be created in, as root too
        cases.append(("/proc/fastuq-test.parquet", "cannot create a file in /proc"))
    return cases


def test_unwritable_outputs_fail_before_reading_with_one_line(tmp_path, capsys):
    # The corpus has a bad record at row 3: an output problem must be reported first.
    corpus, _ = _corpus(tmp_path / "in", bad_row=3)
    for out, reason in _unwritable_cases(tmp_path):
        assert main(["score", str(corpus), "-o", out]) == 2, out
        line = _one_error_line(capsys.readouterr().err)
        assert line == f"fastuq score: error: cannot write {out}: {line.split(': ', 3)[3]}"
        assert reason in line and "row 3" not in line
    assert not any(p.name.endswith(".tmp") for p in tmp_path.rglob("*"))
    assert not any(p.name.startswith(".fastuq-probe") for p in tmp_path.rglob(".*"))


def test_read_only_folder_fails_before_reading(tmp_path, capsys):
    corpus, _ = _corpus(tmp_path / "in", bad_row=3)
    ro = tmp_path / "ro"
    ro.mkdir()
    ro.chmod(0o555)
    target = ro / "s.parquet"
    if os.geteuid() == 0:  # root writes into 0555 folders; sysfs refuses new files to root too
        if not Path("/sys/fs").is_dir():
            pytest.skip("running as root without /sys: no folder refuses root")
        target = Path("/sys/fs/s.parquet")
    try:
        assert main(["score", str(corpus), "-o", str(target)]) == 2
        assert "Permission denied" in _one_error_line(capsys.readouterr().err)
        assert not target.exists()
    finally:
        ro.chmod(0o755)


def test_other_commands_check_their_outputs_first(tmp_path, capsys):
    corpus, _ = _corpus(tmp_path)
    (tmp_path / "afile").write_text("x")
    bad = str(tmp_path / "afile" / "x.parquet")
    assert main(["sweep", str(corpus), "--lam", "0.5", "-o", bad]) == 2
    assert "is not a folder" in _one_error_line(capsys.readouterr().err, "fastuq sweep")
    assert main(["eval", str(corpus), "--plots", str(tmp_path / "afile")]) == 2
    assert "a file is in the way" in _one_error_line(capsys.readouterr().err, "fastuq eval")


def test_fit_and_select_check_their_outputs_first_and_write_atomically(tmp_path, capsys,
                                                                       monkeypatch):
    corpus, _ = _corpus(tmp_path)
    before = corpus.read_bytes()
    (tmp_path / "afile").write_text("x")
    # fit -o: the corpus itself, a path under a file, a name that is not JSON
    assert main(["fit", str(corpus), "-o", str(corpus)]) == 2
    assert "input" in _one_error_line(capsys.readouterr().err, "fastuq fit")
    assert main(["fit", str(corpus), "-o", str(tmp_path / "afile" / "p.json")]) == 2
    assert "is not a folder" in _one_error_line(capsys.readouterr().err, "fastuq fit")
    assert main(["fit", str(corpus), "-o", str(tmp_path / "p.parquet")]) == 2
    _one_error_line(capsys.readouterr().err, "fastuq fit")
    # select --json: the corpus itself
    assert main(["select", str(corpus), "--json", str(corpus)]) == 2
    _one_error_line(capsys.readouterr().err, "fastuq select")
    assert corpus.read_bytes() == before
    # A failing write of the JSON leaves neither the target nor a temporary file.
    from fastuq.fit import fit_sauce

    result = fit_sauce(corpus, steps=2, folds=2)

    def broken(self, *a, **k):
        raise OSError("disk full")

    monkeypatch.setattr(Path, "write_text", broken)
    with pytest.raises(OSError, match="disk full"):
        result.save(tmp_path / "out" / "p.json")
    monkeypatch.undo()
    assert _listing(tmp_path / "out") == []
    assert not temporaries.TEMPORARIES


def test_temporary_file_removed_when_writing_fails(tmp_path):
    from fastuq.io.writers import AtomicParquetWriter

    schema = pa.schema([("x", pa.int64())])
    with pytest.raises(ValueError, match="schema does not match"):
        with AtomicParquetWriter(tmp_path / "o.parquet", schema) as w:
            w.write(pa.table({"y": ["wrong schema"]}))
    assert _listing(tmp_path) == []


@pytest.mark.parametrize("fail_on", ["write", "close", "prepare"])
def test_failure_on_a_pipeline_thread_leaves_nothing_behind(tmp_path, monkeypatch, fail_on):
    """score_file writes on a thread of its own and packs on another: an error there (the
    disk filling up, a bad record found while packing a later chunk) is raised by
    score_file, and neither the scores file nor a temporary file is left."""
    from fastuq.engine import runner
    from fastuq.io import writers as _io
    from fastuq.synth import corpus, write

    src = tmp_path / "in" / "c.parquet"
    src.parent.mkdir()
    write(corpus(5_000, protocol="mixed", seed=4, topk=0), src)
    out_dir = tmp_path / "out"
    out_dir.mkdir()
    calls = {"n": 0}
    if fail_on == "prepare":
        real = runner.prepare_estimator

        def broken(*a, **k):
            calls["n"] += 1
            if calls["n"] == 3:  # the third chunk
                raise OSError("disk full")
            return real(*a, **k)

        monkeypatch.setattr(runner, "prepare_estimator", broken)
    else:
        real = getattr(_io.AtomicParquetWriter, fail_on)

        def broken(self, *a, **k):
            calls["n"] += 1
            if fail_on == "close" or calls["n"] == 2:
                raise OSError("disk full")
            return real(self, *a, **k)

        monkeypatch.setattr(_io.AtomicParquetWriter, fail_on, broken)
    with pytest.raises(OSError, match="disk full"):
        fastuq.score_file(src, out_dir / "s.parquet", chunk_rows=1_000, backend="numpy")
    monkeypatch.undo()
    assert _listing(out_dir) == []
    assert not temporaries.TEMPORARIES


def test_sigterm_mid_run_leaves_nothing_behind(tmp_path):
    from fastuq.synth import corpus, write

    src = tmp_path / "in" / "big.parquet"
    src.parent.mkdir()
    write(corpus(60_000, protocol="mixed", seed=3, topk=0), src)
    out_dir = tmp_path / "out"
    out_dir.mkdir()
    proc = subprocess.Popen(
        [sys.executable, "-m", "fastuq", "score", str(src), "-o", str(out_dir / "s.parquet"),
         "--chunk-rows", "1024", "--backend", "numpy", "--method", "sauce,mean_agreement",
         "--cpu-devices", "1"],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, cwd=tmp_path,
    )
    deadline = time.monotonic() + 120
    while not any(p.name.startswith(".s.parquet.") for p in out_dir.iterdir()):  # mid-run
        assert proc.poll() is None, proc.communicate()
        assert time.monotonic() < deadline
        time.sleep(0.02)
    proc.send_signal(signal.SIGTERM)
    _, err = proc.communicate(timeout=60)
    assert proc.returncode != 0
    assert b"Traceback" not in err
    assert list(out_dir.iterdir()) == []


@pytest.mark.parametrize("cut", [7, 60, 0.3, 0.5, 0.8, -30, -5])
def test_truncated_jsonl_gz_gives_one_line(tmp_path, capsys, cut):
    rng = np.random.default_rng(0)
    records = [{"trajectory_id": f"t{k}", "protocol": "debate",
                "agreement": [1.0, 0.5], "token_entropy": list(rng.random(2))}
               for k in range(3000)]
    raw = gzip.compress("".join(json.dumps(r) + "\n" for r in records).encode())
    at = int(cut * len(raw)) if isinstance(cut, float) else cut
    path = tmp_path / "cut.jsonl.gz"
    path.write_bytes(raw[:at])
    assert main(["score", str(path), "-o", str(tmp_path / "s.parquet")]) == 2
    assert "cut.jsonl.gz" in _one_error_line(capsys.readouterr().err)
    assert _listing(tmp_path) == ["cut.jsonl.gz"]


@pytest.mark.parametrize("frac", [0.3, 0.6, 0.95])
def test_truncated_jsonl_gz_past_the_schema_sample_gives_a_value_error(tmp_path, frac):
    from fastuq.io.readers import read_corpus

    records = [{"trajectory_id": f"t{k}", "agreement": [1.0]} for k in range(20_000)]
    raw = gzip.compress("".join(json.dumps(r) + "\n" for r in records).encode())
    path = tmp_path / "cut.jsonl.gz"
    path.write_bytes(raw[: int(frac * len(raw))])
    with pytest.raises(ValueError, match=r"cut\.jsonl\.gz: .*cannot read"):
        for _ in read_corpus(path, sample_bytes=1 << 12, block_size=1 << 14):
            pass


# --- 3. labels and counts are checked, not coerced ------------------------------------------


@pytest.mark.parametrize("values, ok", [
    ([True, False, None], True), ([1, 0, 1], True), ([1.0, 0.0, None], True),
    ([1.0, 0.5, 0.0], False), ([2, 0, 1], False), (["true", "false", "1"], False),
])
def test_correct_must_be_bool_or_zero_one(values, ok):
    from fastuq.io.schema import conform

    t = pa.table({"trajectory_id": ["a", "b", "c"], "correct": values})
    if ok:
        got = conform(t)["correct"].to_pylist()
        assert got == [None if v is None else bool(v) for v in values]
    else:
        bad = next(i for i, v in enumerate(values) if v not in (0, 1, True, False, None)
                   or isinstance(v, str))
        with pytest.raises(ValueError, match=rf"row {bad} .*field correct: must be true/false "
                                             r"or 0/1"):
            conform(t)


@pytest.mark.parametrize("values, ok", [
    ([3, 2], True), ([3.0, 2.0], True), ([3.0, 2.5], False), ([True, True], False),
    (["3", "2"], False),
])
def test_n_agents_must_be_an_integer(values, ok):
    from fastuq.io.schema import conform

    t = pa.table({"trajectory_id": ["a", "b"], "n_agents": values})
    if ok:
        assert conform(t)["n_agents"].to_pylist() == [int(v) for v in values]
    else:
        with pytest.raises(ValueError, match=r"field n_agents: must be an integer"):
            conform(t)


def test_fractional_label_in_jsonl_is_an_error_not_a_correct_answer(tmp_path, capsys):
    path = tmp_path / "c.jsonl"
    path.write_text("".join(json.dumps({
        "trajectory_id": f"t{k}", "protocol": "debate", "agreement": [1.0],
        "token_entropy": [0.1], "correct": [1, 0, 0.5][k]}) + "\n" for k in range(3)))
    assert main(["eval", str(path)]) == 2
    assert "row 2" in _one_error_line(capsys.readouterr().err, "fastuq eval")


def _short_node_column_corpus(tmp_path, column="seq_logprob"):
    """Two records; record 'a' has three rounds of agreement but one round of ``column``."""
    node = {"seq_logprob": ([[-1.0, -2.0]], [[-1.0, -1.5]]),
            "n_tokens": ([[3, 4]], [[5, 6]]),
            "belief": ([[0.5, 0.9]], [[0.7, 0.6]]),
            "answers": ([["1", "2"]], [["3", "3"]])}[column]
    cols = {
        "trajectory_id": ["a", "b"], "protocol": ["debate", "debate"], "n_agents": [2, 2],
        "correct": [True, False],
        "agreement": [[1.0, 0.5, 1.0], [1.0]], "token_entropy": [[0.1, 0.2, 0.1], [0.3]],
        column: list(node),
    }
    path = tmp_path / "c.parquet"
    pq.write_table(pa.table(cols), path)
    return path


@pytest.mark.parametrize("method", ["sauce", "mean_agreement", "umas", "msp_final",
                                    "umas_fix,mean_agreement"])
def test_round_count_mismatch_is_an_error_under_every_method(tmp_path, capsys, method):
    path = _short_node_column_corpus(tmp_path)
    assert main(["score", str(path), "-o", str(tmp_path / "s.parquet"), "--method",
                 method]) == 2
    line = _one_error_line(capsys.readouterr().err)
    assert "row 0" in line and "field seq_logprob: 1 rounds, but" in line
    assert not (tmp_path / "s.parquet").exists()


@pytest.mark.parametrize("column", ["n_tokens", "belief", "answers"])
def test_unused_node_column_is_checked_by_default(tmp_path, capsys, column):
    path = _short_node_column_corpus(tmp_path, column)
    assert main(["score", str(path), "-o", str(tmp_path / "s.parquet")]) == 2
    assert f"field {column}: 1 rounds, but" in _one_error_line(capsys.readouterr().err)
    with pytest.raises(ValueError, match=f"field {column}: 1 rounds, but"):
        fastuq.score(path, "sauce")


@pytest.mark.parametrize("command", [["eval"], ["sweep", "--lam", "0.5,0.9"], ["fit"]])
def test_unused_node_column_is_checked_by_eval_sweep_fit(tmp_path, capsys, command):
    path = _short_node_column_corpus(tmp_path)
    assert main([command[0], str(path), *command[1:]]) != 0
    assert "field seq_logprob: 1 rounds, but" in capsys.readouterr().err


def test_check_used_reads_only_the_methods_columns(tmp_path, capsys):
    """``--check used`` is the documented opt-out: SAUCE does not read seq_logprob, so the
    short column goes unnoticed and the scores equal those of the corpus without it."""
    path = _short_node_column_corpus(tmp_path)
    out = tmp_path / "s.parquet"
    assert main(["score", str(path), "-o", str(out), "--check", "used"]) == 0
    clean = pq.read_table(path).drop_columns(["seq_logprob"])
    expected = fastuq.score(clean, "sauce")
    assert pq.read_table(out)["sauce"].to_pylist() == expected["sauce"].to_pylist()
    with pytest.raises(ValueError, match="check must be one of"):
        fastuq.score(path, "sauce", check="none")


def test_round_mismatch_message_names_the_short_field():
    from fastuq.io.schema import validate

    t = pa.table({"trajectory_id": ["a"], "answers": [[["1"]]],
                  "seq_logprob": [[[-1.0], [-2.0]]]})
    with pytest.raises(ValueError, match=r"field answers: 1 rounds, but seq_logprob has 2"):
        validate(t)


# --- 5. options that would be ignored are errors --------------------------------------------


@pytest.mark.parametrize("extra, needle", [
    (["--observation-noise", "0.2"], "would be ignored"),
    (["--method", ""], "empty name"),
    (["--method", "sauce,sauce"], "named twice"),
    (["--method", "sauce,"], "empty name"),
    (["--skipped", "x.jsonl"], "--skipped only applies with --on-error skip"),
    (["--max-skip-fraction", "0.1"], "only applies with --on-error skip"),
    (["--method", "mean_agreement", "--lam", "0.5"], "taken by sauce"),
])
def test_ignored_options_are_errors(tmp_path, capsys, extra, needle):
    corpus, _ = _corpus(tmp_path)
    extra = [str(tmp_path / x) if x.endswith(".jsonl") else x for x in extra]
    assert main(["score", str(corpus), "-o", str(tmp_path / "s.parquet"), *extra]) in (1, 2)
    assert needle in _one_error_line(capsys.readouterr().err)
    assert not (tmp_path / "s.parquet").exists()


def test_zero_cpu_devices_is_an_argument_error(tmp_path, capsys):
    corpus, _ = _corpus(tmp_path)
    with pytest.raises(SystemExit) as exc:
        main(["score", str(corpus), "-o", str(tmp_path / "s.parquet"), "--cpu-devices", "0"])
    assert exc.value.code == 2
    assert "--cpu-devices: must be at least 1" in capsys.readouterr().err


def test_sweep_log_without_its_parameter_is_an_error(tmp_path, capsys):
    corpus, _ = _corpus(tmp_path)
    assert main(["sweep", str(corpus), "--lam", "0.5,0.9", "--log", "q"]) == 2
    assert "--log q without --q" in _one_error_line(capsys.readouterr().err, "fastuq sweep")


def test_method_all_says_what_it_left_out_and_why(tmp_path, capsys):
    corpus, _ = _corpus(tmp_path)
    out = tmp_path / "s.parquet"
    assert main(["score", str(corpus), "-o", str(out), "--method", "all"]) == 0
    err = capsys.readouterr().err
    written = set(pq.read_schema(out).names) - {"trajectory_id"}
    left = set(fastuq.ESTIMATORS) - written
    assert left  # the corpus has no node columns
    line = next(x for x in err.splitlines() if x.startswith("--method all: left out"))
    for name in left:
        assert f"{name} (needs " in line
    assert "umas (needs seq_logprob)" in line


# --- 6. a strict Python API -------------------------------------------------------------------


def test_unknown_parameter_raises_naming_it_and_the_known_ones(tmp_path):
    corpus, _ = _corpus(tmp_path)
    with pytest.raises(TypeError,
                       match=r"'lamda'.*did you mean 'lam'.*lam \(sauce, sauce_belief\)"):
        fastuq.score(corpus, "sauce", lamda=0.5)


def test_parameter_no_method_takes_raises_naming_its_estimators(tmp_path):
    corpus, _ = _corpus(tmp_path)
    with pytest.raises(ValueError, match=r"'lam' would be ignored: it is taken by sauce"):
        fastuq.score(corpus, "mean_agreement", lam=0.5)
    with pytest.raises(ValueError, match=r"'confidence' would be ignored: it is taken by umas, "
                                         r"umas_fix"):
        fastuq.score_file(corpus, tmp_path / "s.parquet", methods="sauce", confidence="msp")
    with pytest.raises(ValueError, match="only applies with on_error='skip'"):
        fastuq.score_file(corpus, tmp_path / "s.parquet", max_skip_fraction=0.1)
    assert not (tmp_path / "s.parquet").exists()
    # a parameter that is taken still works, and changes the score as the scalar API says
    got = fastuq.score(corpus, "sauce", lam=0.5)["sauce"].to_numpy()
    t = pq.read_table(corpus).to_pydict()
    want = [fastuq.sauce_score(a, h, p, lam=0.5) for a, h, p in
            zip(t["agreement"], t["token_entropy"], t["protocol"], strict=True)]
    np.testing.assert_allclose(got, want, atol=1e-12)


def test_score_file_refuses_to_overwrite_its_input(tmp_path):
    from fastuq.io.writers import OutputError

    corpus, _ = _corpus(tmp_path)
    before = corpus.read_bytes()
    with pytest.raises(OutputError, match="it is the input"):
        fastuq.score_file(corpus, corpus)
    assert corpus.read_bytes() == before


# --- 7. import shows progress --------------------------------------------------------------


def test_import_shows_progress_and_imports_the_same_table(tmp_path, capsys):
    from fastuq.importers import import_dylan

    src = DATA / "dylan_math"
    out = tmp_path / "d.parquet"
    assert main(["import", "dylan", str(src), "-o", str(out), "--progress"]) == 0
    err = capsys.readouterr().err
    n_files = len([p for p in src.rglob("*.json") if not p.name.startswith(".")])
    assert f"{n_files}/{n_files} files" in err
    assert pq.read_table(out).equals(import_dylan(src))


def _finishes(fn, seconds: float = 10.0) -> bool:
    """Whether ``fn()`` returns within ``seconds`` (run on a daemon thread)."""
    import threading

    done = threading.Event()
    threading.Thread(target=lambda: (fn(), done.set()), daemon=True).start()
    return done.wait(seconds)


@pytest.mark.parametrize("finish", ["close", "abort"])
def test_background_writer_survives_a_lost_wake_up(finish):
    """SIGTERM's SystemExit raised inside Queue.put's notify, just after it released the
    waiting writer thread's lock and before removing that lock from the waiter list, leaves
    the lock there; the woken thread re-acquires it, so the next notify releases that stale,
    locked waiter and wakes nobody. abort() then joined the writer for ever (a killed run
    hung about 1 time in 60 under load: tests/test_safety.py's SIGTERM test in CI). The
    stale waiter is made by hand here; the writer must still finish."""
    import threading

    from fastuq.io.writers import BackgroundWriter

    class Recorder:
        def __init__(self):
            self.written, self.closed, self.aborted = [], False, False

        def write(self, table):
            self.written.append(table)

        def close(self):
            self.closed = True

        def abort(self):
            self.aborted = True

    rec = Recorder()
    w = BackgroundWriter(rec)
    w.write("first")
    time.sleep(0.3)  # the thread has written it and waits on the empty queue
    stale = threading.Lock()
    stale.acquire()
    with w._queue.mutex:
        w._queue.not_empty._waiters.appendleft(stale)
    assert _finishes(getattr(w, finish)), f"{finish}() hung after a lost wake-up"
    assert rec.written == ["first"]
    assert (rec.closed, rec.aborted) == (finish == "close", finish == "abort")


# --- every command checks every path it writes against every path it reads -----------------

_PARAMS = {"params": {"debate": {"lam": 0.9}, "dylan": {"lam": 0.7}}}


def _clash_case(case: str, tmp_path: Path) -> tuple[list[str], Path, str]:
    """``(argv, the input the command would overwrite, the flag that writes it)``."""
    corpus, cols = _corpus(tmp_path / "data")
    jsonl = tmp_path / "data" / "c.jsonl"
    rows = pq.read_table(corpus).to_pylist()
    jsonl.write_text("".join(json.dumps(r) + "\n" for r in rows))
    params = tmp_path / "p.json"
    params.write_text(json.dumps(_PARAMS))
    skip_jsonl = ["--on-error", "skip", "--skipped", str(jsonl)]
    if case == "score-skipped-params":
        return (["score", str(corpus), "-o", str(tmp_path / "s.parquet"), "--params",
                 str(params), "--on-error", "skip", "--skipped", str(params)], params,
                "--skipped")
    if case == "score-output-hardlink":
        link = tmp_path / "link.parquet"
        os.link(corpus, link)
        return ["score", str(corpus), "-o", str(link)], corpus, "-o"
    if case == "eval-skipped-corpus":
        return ["eval", str(jsonl), *skip_jsonl], jsonl, "--skipped"
    if case == "eval-json-params":
        return ["eval", str(corpus), "--params", str(params), "--json", str(params)], params, \
            "--json"
    if case == "select-skipped-corpus":
        return ["select", str(jsonl), *skip_jsonl], jsonl, "--skipped"
    if case == "sweep-skipped-corpus":
        return ["sweep", str(jsonl), "--lam", "0.5,0.9", *skip_jsonl], jsonl, "--skipped"
    if case == "sweep-plot-params":
        return (["sweep", str(corpus), "--lam", "0.5,0.9", "--params", str(params), "--plot",
                 str(params)], params, "--plot")
    if case == "fit-skipped-corpus":
        return ["fit", str(jsonl), "--steps", "2", *skip_jsonl], jsonl, "--skipped"
    if case == "gate-output-skipped-list":  # with --scores, --skipped is read
        scores = tmp_path / "s.parquet"
        pq.write_table(pa.table({"trajectory_id": cols["trajectory_id"],
                                 "sauce": np.linspace(0, 1, len(rows))}), scores)
        listing = tmp_path / "listed.parquet"
        listing.write_text("")
        return (["gate", str(corpus), "--scores", str(scores), "--score", "sauce", "--skipped",
                 str(listing), "-o", str(listing)], listing, "-o")
    if case == "replay-output-corpus":
        return ["replay", str(corpus), "-o", str(corpus)], corpus, "-o"
    if case == "report-output-params":
        page = tmp_path / "p.html"
        page.write_text(json.dumps(_PARAMS))
        return ["report", str(corpus), "--params", str(page), "-o", str(page)], page, "-o"
    if case == "import-output-references":
        refs = tmp_path / "refs.parquet"
        refs.write_text("[]")
        log = tmp_path / "logs" / "pair_comparison_results.json"
        log.parent.mkdir()
        log.write_text("[]")
        return (["import", "chateval", str(log), "--references", str(refs), "-o", str(refs)],
                refs, "-o")
    raise AssertionError(case)


@pytest.mark.parametrize("case", [
    "score-skipped-params", "score-output-hardlink", "eval-skipped-corpus", "eval-json-params",
    "select-skipped-corpus", "sweep-skipped-corpus", "sweep-plot-params", "fit-skipped-corpus",
    "gate-output-skipped-list", "replay-output-corpus", "report-output-params",
    "import-output-references"])
def test_every_command_refuses_to_write_over_any_of_its_inputs(tmp_path, capsys, case):
    argv, victim, flag = _clash_case(case, tmp_path)
    before = victim.read_bytes()
    files = _listing(tmp_path)
    assert main(argv) == 2
    line = _one_error_line(capsys.readouterr().err, f"fastuq {argv[0]}")
    assert "cannot write" in line and flag in line, line
    assert victim.read_bytes() == before
    assert _listing(tmp_path) == files  # refused before any work: nothing written


def test_default_skip_list_beside_the_corpus_is_not_read_as_corpus_next_time(
        tmp_path, monkeypatch, capsys):
    corpus, _ = _corpus(tmp_path / "data", bad_row=3)
    jsonl = tmp_path / "data" / "c.jsonl"
    jsonl.write_text("".join(json.dumps(r) + "\n" for r in pq.read_table(corpus).to_pylist()))
    corpus.unlink()
    monkeypatch.chdir(tmp_path / "data")  # the default list goes to the current folder
    assert main(["eval", "c.jsonl", "--on-error", "skip", "--json", "../first.json"]) == 0
    assert _listing(tmp_path / "data") == ["c.jsonl", "c.jsonl.skipped.jsonl"]
    monkeypatch.chdir(tmp_path)
    # the folder again: its corpus is c.jsonl alone, the skip list beside it is not read
    assert main(["eval", "data", "--on-error", "skip", "--json", "second.json"]) == 0
    capsys.readouterr()
    first = json.loads((tmp_path / "first.json").read_text())
    second = json.loads((tmp_path / "second.json").read_text())
    assert (first["n"], first["skipped"]) == (second["n"], second["skipped"]) == (39, 1)


def test_folder_reader_and_output_check_agree_on_skip_lists(tmp_path):
    from fastuq.io.readers import folder_files
    from fastuq.io.writers import OutputError, check_outputs

    data = tmp_path / "data"
    _corpus(data)
    (data / "scores.parquet.skipped.jsonl").write_text('{"row": 1}\n')
    (data / "sub").mkdir()
    (data / "sub" / "x.SKIPPED.JSONL").write_text('{"row": 2}\n')
    assert folder_files(data) == [data / "c.parquet"]
    check_outputs([data], [("--skipped", data / "new.skipped.jsonl", "jsonl")])  # not read
    with pytest.raises(OutputError, match="inside the input folder"):
        check_outputs([data], [("--skipped", data / "new.jsonl", "jsonl")])


def _plots_corpus(folder: Path) -> Path:
    corpus, _ = _corpus(folder, n=60)
    return corpus


_METHODS = "sauce,mean_agreement,last_agreement,weighted_agreement"


@pytest.mark.parametrize("existing", [False, True])
def test_eval_plots_failing_to_write_leave_none_of_the_set(tmp_path, capsys, monkeypatch,
                                                          existing):
    """A full disk while drawing: exit 1 with one line, no PNG of the new set in the
    folder, no temporary folder (an existing folder keeps what it had)."""
    import errno

    from matplotlib.figure import Figure


    corpus = _plots_corpus(tmp_path / "in")
    out = tmp_path / "plots"
    if existing:
        out.mkdir()
        (out / "risk_coverage.png").write_bytes(b"old")
    real = Figure.savefig
    calls = {"n": 0}

    def full_disk(self, fname, *a, **k):
        calls["n"] += 1
        if calls["n"] == 3:
            raise OSError(errno.ENOSPC, "No space left on device", str(fname))
        return real(self, fname, *a, **k)

    monkeypatch.setattr(Figure, "savefig", full_disk)
    assert main(["eval", str(corpus), "--method", _METHODS, "--backend", "numpy",
                 "--plots", str(out)]) == 1
    line = _one_error_line(capsys.readouterr().err, "fastuq eval")
    assert f"cannot write the plots to {out}" in line and "No space left" in line
    assert calls["n"] == 3
    assert _listing(tmp_path) == (["c.parquet", "in"] if not existing else
                                  ["c.parquet", "in", "plots", "risk_coverage.png"])
    if existing:
        assert (out / "risk_coverage.png").read_bytes() == b"old"
    assert not temporaries.TEMPORARIES


def test_eval_plots_are_moved_in_as_a_set(tmp_path, capsys):
    corpus = _plots_corpus(tmp_path / "in")
    out = tmp_path / "plots"
    out.mkdir()
    (out / "keep.txt").write_text("mine")
    assert main(["eval", str(corpus), "--method", _METHODS, "--backend", "numpy",
                 "--plots", str(out)]) == 0
    capsys.readouterr()
    names = sorted(p.name for p in out.iterdir())
    assert names == ["keep.txt", "reliability_last_agreement.png",
                     "reliability_mean_agreement.png", "reliability_sauce.png",
                     "reliability_weighted_agreement.png", "risk_coverage.png"]
    assert all((out / n).read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" for n in names if n != "keep.txt")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["in", "plots"]  # no staging left


@pytest.mark.parametrize("existing", [False, True])
def test_sigterm_while_eval_draws_its_plots_leaves_none_of_the_set(tmp_path, existing):
    corpus = _plots_corpus(tmp_path / "in")
    parent = tmp_path / "out"
    parent.mkdir()
    out = parent / "plots"
    if existing:
        out.mkdir()
        (out / "risk_coverage.png").write_bytes(b"old")
    # each figure takes a while to save, so SIGTERM lands after the first and before the last
    code = ("import sys, time; from matplotlib.figure import Figure; real = Figure.savefig\n"
            "def slow(self, *a, **k):\n    real(self, *a, **k); time.sleep(0.5)\n"
            "Figure.savefig = slow\n"
            "from fastuq.cli import main; sys.exit(main(sys.argv[1:]))")
    proc = subprocess.Popen(
        [sys.executable, "-c", code, "eval", str(corpus), "--method", _METHODS, "--backend",
         "numpy", "--plots", str(out)],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, cwd=tmp_path)
    deadline = time.monotonic() + 120
    while not any(p.name.endswith(".png") and p.read_bytes() != b"old"
                  for p in parent.rglob("*")):  # the first new PNG is written
        assert proc.poll() is None, proc.communicate()
        assert time.monotonic() < deadline
        time.sleep(0.02)
    proc.send_signal(signal.SIGTERM)
    _, err = proc.communicate(timeout=60)
    assert proc.returncode == 128 + signal.SIGTERM, err
    assert b"Traceback" not in err
    if existing:
        assert _listing(parent) == ["plots", "risk_coverage.png"]
        assert (out / "risk_coverage.png").read_bytes() == b"old"
    else:
        assert _listing(parent) == []


def test_sigterm_while_a_set_moves_in_is_held_until_the_set_is_in(tmp_path, monkeypatch):
    """SIGTERM arriving between two renames of the set waits for the last one."""
    from fastuq.io import writers as _io

    out = tmp_path / "plots"
    out.mkdir()
    real = os.replace
    calls = {"n": 0}

    def replace(src, dst):
        calls["n"] += 1
        if calls["n"] == 1:
            os.kill(os.getpid(), signal.SIGTERM)  # handled at the next bytecode: mid-move
        real(src, dst)

    def write(staging: Path) -> list[Path]:
        for k in range(3):
            (staging / f"f{k}.png").write_bytes(b"png")
        return [staging / f"f{k}.png" for k in range(3)]

    old = signal.getsignal(signal.SIGTERM)
    _io.remove_temporaries_on_sigterm()
    try:
        monkeypatch.setattr(os, "replace", replace)
        with pytest.raises(SystemExit) as exc:
            _io.atomic_write_files(out, write)
    finally:
        signal.signal(signal.SIGTERM, old)
        monkeypatch.undo()
    assert exc.value.code == 128 + signal.SIGTERM
    assert sorted(p.name for p in out.iterdir()) == ["f0.png", "f1.png", "f2.png"]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["plots"]
    assert not temporaries.TEMPORARIES


# --- a folder written whole: the Ray runner's Parquet dataset folders -------------------------


def _parts(staging: Path, names) -> None:
    for name in names:
        (staging / name).write_bytes(name.encode())


def test_atomic_write_folder_replaces_the_folder_whole(tmp_path):
    """A folder written whole (unlike atomic_write_files, which keeps other files): the
    previous folder's files are gone, the new ones in, nothing else left beside it."""
    from fastuq.io import writers as _io

    out = tmp_path / "sub" / "scores"  # its parent is created
    assert _io.atomic_write_folder(out, lambda s: _parts(s, ["a.parquet", "b.parquet"])) == out
    assert _listing(tmp_path) == ["a.parquet", "b.parquet", "scores", "sub"]
    _io.atomic_write_folder(out, lambda s: _parts(s, ["c.parquet"]))
    assert _listing(tmp_path) == ["c.parquet", "scores", "sub"]
    assert (out / "c.parquet").read_bytes() == b"c.parquet"
    assert not temporaries.TEMPORARIES


@pytest.mark.parametrize("existing", [False, True])
@pytest.mark.parametrize("fail", ["write", "rename"])
def test_atomic_write_folder_failing_leaves_the_previous_folder(tmp_path, monkeypatch,
                                                                existing, fail):
    """A write that fails (a full disk) or a rename into place that fails: the previous
    folder as it was (moved back when it had been moved aside), no temporary folder."""
    from fastuq.io import writers as _io

    out = tmp_path / "scores"
    if existing:
        out.mkdir()
        (out / "old.parquet").write_bytes(b"old")
    real = os.rename

    def rename(src, dst):
        if Path(dst) == out and Path(src).name.endswith(".tmp"):
            raise OSError("rename failed")
        return real(src, dst)

    def write(staging: Path) -> None:
        _parts(staging, ["new.parquet"])
        if fail == "write":
            raise OSError("disk full")

    monkeypatch.setattr(os, "rename", rename)
    with pytest.raises(OSError, match="disk full" if fail == "write" else "rename failed"):
        _io.atomic_write_folder(out, write)
    monkeypatch.undo()
    assert _listing(tmp_path) == (["old.parquet", "scores"] if existing else [])
    if existing:
        assert (out / "old.parquet").read_bytes() == b"old"
    assert not temporaries.TEMPORARIES


def test_sigterm_while_a_folder_is_written_removes_its_temporary_folder(tmp_path):
    """The temporary folder is registered: SIGTERM while it is written (with the fastuq
    command's handler) removes it and leaves the previous folder as it was."""
    from fastuq.io import writers as _io

    out = tmp_path / "scores"
    out.mkdir()
    (out / "old.parquet").write_bytes(b"old")

    def write(staging: Path) -> None:
        _parts(staging, ["new.parquet"])
        os.kill(os.getpid(), signal.SIGTERM)  # handled at the next bytecode: mid-write
        time.sleep(1)

    old = signal.getsignal(signal.SIGTERM)
    _io.remove_temporaries_on_sigterm()
    try:
        with pytest.raises(SystemExit) as exc:
            _io.atomic_write_folder(out, write)
    finally:
        signal.signal(signal.SIGTERM, old)
    assert exc.value.code == 128 + signal.SIGTERM
    assert _listing(tmp_path) == ["old.parquet", "scores"]
    assert not temporaries.TEMPORARIES


def test_sigterm_while_a_folder_moves_in_is_held_until_it_is_in(tmp_path, monkeypatch):
    """SIGTERM arriving after the previous folder was moved aside waits for the new one to
    be in place (and the previous one removed): never no folder at all."""
    from fastuq.io import writers as _io

    out = tmp_path / "scores"
    out.mkdir()
    (out / "old.parquet").write_bytes(b"old")
    real = os.rename
    calls = {"n": 0}

    def rename(src, dst):
        calls["n"] += 1
        real(src, dst)
        if calls["n"] == 1:  # the previous folder is aside
            os.kill(os.getpid(), signal.SIGTERM)

    old = signal.getsignal(signal.SIGTERM)
    _io.remove_temporaries_on_sigterm()
    try:
        monkeypatch.setattr(os, "rename", rename)
        with pytest.raises(SystemExit) as exc:
            _io.atomic_write_folder(out, lambda s: _parts(s, ["new.parquet"]))
    finally:
        signal.signal(signal.SIGTERM, old)
        monkeypatch.undo()
    assert exc.value.code == 128 + signal.SIGTERM and calls["n"] == 2
    assert _listing(tmp_path) == ["new.parquet", "scores"]
    assert not temporaries.TEMPORARIES
