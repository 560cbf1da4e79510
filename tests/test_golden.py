"""Golden scores: every registered estimator, on the bundled sample and on seeded simulated
corpora, in float64 and float32, JAX kernels and NumPy twins, under default and other
parameters, must reproduce the fixture in tests/golden/ (made by tests/golden/generate.py;
what it holds is defined in tests/_golden_spec.py).

Bit identity only means something in the environment that made the fixture, so the scores
are compared bit for bit (NaN positions and payloads included) when the manifest's recorded
environment (JAX, jaxlib and NumPy versions, platform and JAX backend, the CPU's vector
instructions, XLA_FLAGS, NPY_*_CPU_FEATURES, JAX_ENABLE_X64) matches this one, and otherwise
within a stated tolerance (float64: rel 1e-12, abs 1e-12; float32: rel 2e-6, abs 2e-6), with a
warning saying what differs. Nothing is skipped.

The simulated corpora are scored from their stored inputs (tests/golden/inputs/), which must
be exactly the tables the fixture was made from (their recorded digests) on any machine; that
``fastuq.synth`` still makes them is checked within ``spec.INPUT_TOLERANCE`` (its floats come
from NumPy's exp/log, whose last bits differ between CPUs with and without AVX-512).

After an intended change of scores, regenerate: ``python tests/golden/generate.py``.
"""

from __future__ import annotations

import hashlib
import json
import warnings

import _golden_spec as spec
import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

MANIFEST = spec.load_manifest()
_JOB_KEYS = ("name", "methods", "protocol", "params", "observation_noise")


@pytest.fixture(scope="module")
def exact() -> tuple[bool, dict]:
    """``(bit_for_bit, differences)``: whether this environment is the fixture's."""
    diffs = spec.fingerprint_differences(MANIFEST["environment"], spec.fingerprint())
    if diffs:
        warnings.warn(
            "golden scores compared within tolerance, not bit for bit: the environment "
            f"differs from the fixture's ({_describe(diffs)})", stacklevel=1)
    return not diffs, diffs


@pytest.fixture(scope="module")
def corpora(tmp_path_factory) -> tuple:
    """A folder for the corpus files and a cache of the corpus tables, shared by the tests."""
    return tmp_path_factory.mktemp("golden-corpora"), {}


def _describe(diffs: dict) -> str:
    return "; ".join(f"{k}: fixture {a!r}, here {b!r}" for k, (a, b) in diffs.items())


def _mode(exact) -> str:
    bits, diffs = exact
    if bits:
        return "compared bit for bit (the environment is the fixture's)"
    return f"compared within {spec.TOLERANCE} (environment differs: {_describe(diffs)})"


def _normal(value):
    return json.loads(json.dumps(value))


def _job(record: dict) -> dict:
    return {k: record[k] for k in _JOB_KEYS}


def test_manifest_describes_the_spec_and_the_files():
    assert MANIFEST["format"] == spec.FORMAT
    assert list(MANIFEST["corpora"]) == list(spec.CORPORA)
    covered = set()
    for name, entry in MANIFEST["corpora"].items():
        recorded = [(_job(j), j["dtype"], j["backend"]) for j in entry["jobs"]]
        assert _normal(recorded) == _normal(spec.runs(name)), f"{name}: regenerate the fixture"
        path = spec.fixture_path(name)
        assert hashlib.sha256(path.read_bytes()).hexdigest() == entry["sha256"], path
        columns = [spec.column_name(e, j, j["dtype"], j["backend"])
                   for j in entry["jobs"] for e in j["estimators"]]
        assert pq.read_schema(path).names == ["trajectory_id", *columns], path
        covered.update(e for j in entry["jobs"] for e in j["estimators"])
        if spec.has_input(name):
            record = entry["source"]["input"]
            stored = spec.input_path(name)
            assert record["file"] == stored.relative_to(spec.GOLDEN_DIR).as_posix()
            assert hashlib.sha256(stored.read_bytes()).hexdigest() == record["sha256"], stored
    # every estimator registered when the fixture was made is scored on some corpus
    assert covered == set(MANIFEST["code"]["estimators"])
    checks = [{k: v for k, v in c.items() if k != "estimators"} for c in MANIFEST["checks"]]
    assert checks == _normal(spec.CHECKS)


def _compare(name: str, got: pa.Table, records: list[dict], exact) -> list[str]:
    """Problems found comparing a scores table with the fixture columns of ``records``."""
    stored = pq.read_table(spec.fixture_path(name))
    problems = []
    if not got.column("trajectory_id").cast(pa.string()).equals(
            stored.column("trajectory_id")):
        problems.append("trajectory ids differ (order or values)")
    for rec in records:
        for est in rec["estimators"]:
            col = spec.column_name(est, rec, rec["dtype"], rec["backend"])
            if est not in got.column_names:
                problems.append(f"{col}: {est} not scored (columns: {got.column_names})")
                continue
            why = spec.mismatch(got.column(est).to_numpy(), stored.column(col).to_numpy(),
                                rec["dtype"], exact[0])
            if why:
                problems.append(f"{col}: {why}")
    return problems


@pytest.mark.parametrize("name", list(spec.CORPORA))
def test_scores_reproduce_the_fixture(name, exact, corpora):
    folder, cache = corpora
    entry = MANIFEST["corpora"][name]
    table = spec.corpus_table(name, cache)
    assert table.num_rows == entry["n"]
    # read from stored files, so the same on every machine
    assert spec.table_digest(table) == entry["corpus_digest"], (
        f"{name}: the corpus differs from the one the fixture was made from "
        f"({entry['note']}; source {entry['source']})")
    path = spec.write_corpus(name, folder, cache)
    problems = []
    for rec in entry["jobs"]:
        got = spec.score_job(path, _job(rec), rec["dtype"], rec["backend"])
        problems += [f"[{rec['call']}] {p}"
                     for p in _compare(name, got, [rec], exact)]
    assert not problems, f"{name}: {_mode(exact)}:\n" + "\n".join(problems)


@pytest.mark.parametrize("check", spec.CHECKS, ids=[c["name"] for c in spec.CHECKS])
def test_other_paths_reproduce_the_fixture(check, exact, corpora, tmp_path):
    """The ``fastuq score`` command (one XLA device per core) and other chunk sizes give the
    stored scores."""
    folder, cache = corpora
    name = check["corpus"]
    entry = MANIFEST["corpora"][name]
    path = spec.write_corpus(name, folder, cache)
    got = spec.run_check(check, path, tmp_path)
    records = [j for j in entry["jobs"]
               if spec.job_key(j, j["dtype"], j["backend"]) == check["same_as"]]
    assert len(records) == 1, check
    problems = _compare(name, got, records, exact)
    assert not problems, f"{check['name']}: {_mode(exact)}:\n" + "\n".join(problems)


@pytest.mark.parametrize("name", [n for n in spec.CORPORA if spec.has_input(n)])
def test_stored_inputs_are_what_the_simulator_makes(name, exact):
    """``fastuq.synth.corpus`` with the recorded arguments gives the stored input: bit for bit
    in the fixture's environment, else equal but for floats within ``INPUT_TOLERANCE``."""
    stored = pq.read_table(spec.input_path(name))
    here = spec.simulate(name)
    if exact[0]:
        assert spec.table_digest(here) == spec.table_digest(stored), name
    problems = spec.input_differences(here, stored)
    assert not problems, (f"{name}: fastuq.synth no longer makes the stored input "
                          f"({spec.INPUT_TOLERANCE}):\n" + "\n".join(problems)
                          + "\n(after an intended change of the simulator: "
                          "python tests/golden/generate.py --new-inputs)")


def test_input_differences_sees_what_is_beyond_the_tolerance():
    """The input comparison passes last-bit float differences and nothing else."""
    ids = pa.array(["a", "b"])
    lp = pa.array([[[-1.0, None], [-2.5]], [[-0.25]]], pa.list_(pa.list_(pa.float64())))
    stored = pa.table({"trajectory_id": ids, "seq_logprob": lp})
    ulp = pa.array([[[np.nextafter(-1.0, 0), None], [-2.5]], [[-0.25]]],
                   pa.list_(pa.list_(pa.float64())))
    assert spec.input_differences(stored.set_column(1, "seq_logprob", ulp), stored) == []
    far = pa.array([[[-1.0 + 1e-9, None], [-2.5]], [[-0.25]]], pa.list_(pa.list_(pa.float64())))
    assert spec.input_differences(stored.set_column(1, "seq_logprob", far), stored)
    moved_null = pa.array([[[None, -1.0], [-2.5]], [[-0.25]]], pa.list_(pa.list_(pa.float64())))
    assert spec.input_differences(stored.set_column(1, "seq_logprob", moved_null), stored)
    longer = pa.array([[[-1.0, None], [-2.5, 0.0]], [[-0.25]]], pa.list_(pa.list_(pa.float64())))
    assert spec.input_differences(stored.set_column(1, "seq_logprob", longer), stored)
    assert spec.input_differences(stored.set_column(0, "trajectory_id", pa.array(["a", "c"])),
                                  stored)
