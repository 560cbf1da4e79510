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

After an intended change of scores, regenerate: ``python tests/golden/generate.py``.
"""

from __future__ import annotations

import hashlib
import json
import warnings

import _golden_spec as spec
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
    same_corpus = spec.table_digest(table) == entry["corpus_digest"]
    differs = (f"{name}: the corpus itself differs from the one the fixture was made from "
               f"({entry['note']}; source {entry['source']})")
    if exact[0]:
        assert same_corpus, differs
    path = spec.write_corpus(name, folder, cache)
    problems = []
    for rec in entry["jobs"]:
        got = spec.score_job(path, _job(rec), rec["dtype"], rec["backend"])
        problems += [f"[{rec['call']}] {p}"
                     for p in _compare(name, got, [rec], exact)]
    if not same_corpus:
        problems.append(f"(note: {differs})")
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
