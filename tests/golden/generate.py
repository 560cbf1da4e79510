"""Regenerate the golden-scores fixture: every registered estimator's scores on the bundled
sample and on seeded simulated corpora, in float64 and float32, with the JAX kernels and the
NumPy twins, plus SAUCE and UMAS under non-default parameters.

    python tests/golden/generate.py            # from the repository root, fastuq installed

What is computed is defined in tests/_golden_spec.py; tests/test_golden.py recomputes it and
compares bit for bit (in another environment: within a tolerance). Writes, in this folder,
one Parquet file per corpus (``trajectory_id`` plus one float64 column
``ESTIMATOR|JOB|f64|jax`` per score) and ``manifest.json`` (how each file was made, the git
commit of the code, the environment).

The simulated corpora the scores are computed on are inputs of the fixture, stored in
``inputs/`` (their floats depend on the CPU's vector instructions, so simulating again
elsewhere would give other inputs). A regeneration scores the stored inputs; ``--new-inputs``
simulates them again first (after an intended change of ``fastuq.synth``). ``--inputs-only``
writes the missing input files of the current fixture from ``fastuq.synth`` and records them
in the manifest without touching any score; it refuses a simulated table whose digest is not
the ``corpus_digest`` the manifest recorded for it (that is, one that is not exactly the table
the stored scores were computed on). Only public entry points are used: ``fastuq.score``,
``fastuq.synth``, ``fastuq.ESTIMATORS`` and the ``fastuq score`` command.

The code that produces the fixture must be committed: the script stops when fastuq/,
kernels/ or pyproject.toml differ from HEAD (``--allow-dirty`` to override, recorded in the
manifest), or when the fastuq it imports is not this checkout's.
"""

from __future__ import annotations

import argparse
import datetime
import hashlib
import json
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "tests"))

import _golden_spec as spec  # noqa: E402
import numpy as np  # noqa: E402
import pyarrow as pa  # noqa: E402
import pyarrow.parquet as pq  # noqa: E402

CODE_PATHS = ("fastuq", "kernels", "pyproject.toml")


def _git(*args: str) -> str:
    return subprocess.run(["git", *args], cwd=ROOT, capture_output=True, text=True,
                          check=True).stdout.strip()


def _call(job: dict, dtype: str, backend: str, chunk_rows: int | None = None) -> str:
    """The ``fastuq.score`` call of a job, as text (for the manifest)."""
    parts = ["PATH", repr(job["methods"]), f"dtype={dtype!r}", f"backend={backend!r}"]
    if chunk_rows is not None:
        parts.append(f"chunk_rows={chunk_rows}")
    if job["protocol"] is not None:
        parts.append(f"protocol={job['protocol']!r}")
    if job["observation_noise"] is not None:
        parts.append(f"observation_noise={job['observation_noise']!r}")
    parts += [f"{k}={v!r}" for k, v in job["params"].items()]
    return f"fastuq.score({', '.join(parts)})"


def _write_fixture(path: Path, columns: dict[str, np.ndarray], ids: pa.Array) -> None:
    """Parquet, zstd: dictionary encoding for columns with few distinct values (the agreement
    baselines), byte-stream-split for the others; read back and checked bit for bit."""
    table = pa.table({"trajectory_id": ids, **{k: pa.array(v, pa.float64())
                                               for k, v in columns.items()}})
    few = [k for k, v in columns.items() if len(np.unique(v)) * 8 <= len(v)]
    split = [k for k in columns if k not in few]
    pq.write_table(table, path, compression="zstd", compression_level=19,
                   use_dictionary=few or False, use_byte_stream_split=split or False)
    back = pq.read_table(path)
    assert back.column("trajectory_id").equals(table.column("trajectory_id"))
    for k, v in columns.items():
        got = np.ascontiguousarray(back.column(k).to_numpy(), np.float64)
        assert np.array_equal(got.view(np.uint64), np.ascontiguousarray(v).view(np.uint64)), k


def _sha256(path: Path) -> str:
    return hashlib.sha256(Path(path).read_bytes()).hexdigest()


def _input_record(name: str, path: Path, out_dir: Path, commit: str, env: dict,
                  reused: dict | None = None) -> dict:
    """The manifest's record of a stored input (kept from ``reused`` when the file is the
    one it describes)."""
    sha = _sha256(path)
    if reused is not None and reused.get("sha256") == sha:
        return reused
    return {"file": path.relative_to(out_dir).as_posix(), "sha256": sha,
            "bytes": path.stat().st_size, "simulated_at_commit": commit,
            "simulated_on_cpu_flags": env["cpu_flags"],
            "simulated_with_NPY_DISABLE_CPU_FEATURES": env["NPY_DISABLE_CPU_FEATURES"]}


def _prepare_inputs(out_dir: Path, new: bool, commit: str, env: dict) -> dict[str, dict]:
    """Make sure every simulated corpus has its stored input in ``out_dir`` (simulated now
    when ``new`` or missing; copied from tests/golden when only that has it): their records."""
    old = {}
    if spec.MANIFEST.exists():
        old = {k: v.get("source", {}).get("input")
               for k, v in spec.load_manifest()["corpora"].items()}
    records = {}
    for name in spec.CORPORA:
        if not spec.has_input(name):
            continue
        path = spec.input_path(name, out_dir)
        here = spec.input_path(name)
        if new or not (path.exists() or here.exists()):
            spec.write_input(spec.simulate(name), path)
            old[name] = None
        elif not path.exists():
            path.parent.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(here, path)
        records[name] = _input_record(name, path, out_dir, commit, env, old.get(name))
    return records


def _inputs_only(out_dir: Path) -> int:
    """``--inputs-only``: store the inputs of the fixture in ``out_dir`` that are missing,
    refusing any whose simulated table is not the one the fixture's scores were made from."""
    manifest_path = out_dir / "manifest.json"
    manifest = json.loads(manifest_path.read_text())
    commit = _git("rev-parse", "HEAD")
    env = spec.fingerprint()
    for name, entry in manifest["corpora"].items():
        if not spec.has_input(name):
            continue
        path = spec.input_path(name, out_dir)
        if path.exists():
            table = pq.read_table(path)
        else:
            table = spec.simulate(name)
        digest = spec.table_digest(table)
        if digest != entry["corpus_digest"]:
            print(f"error: {name}: the corpus {'stored' if path.exists() else 'simulated here'}"
                  f" has digest {digest}, the fixture's scores were made from "
                  f"{entry['corpus_digest']}: not its input (simulate on a machine that "
                  "reproduces it, or regenerate the whole fixture)", file=sys.stderr)
            return 1
        if not path.exists():
            spec.write_input(table, path)
            print(f"{name}: wrote {path} ({path.stat().st_size:,} bytes; digest "
                  f"{digest[:12]}, the fixture's)")
        entry["source"]["input"] = _input_record(name, path, out_dir, commit, env,
                                                 entry["source"].get("input"))
        entry["source"]["written_with"] = ("stored as the input file above, scored from "
                                           "that file")
    manifest_path.write_text(json.dumps(manifest, indent=1) + "\n")
    return 0


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", type=Path, default=spec.GOLDEN_DIR,
                    help="folder to write the fixture to (default: tests/golden)")
    ap.add_argument("--allow-dirty", action="store_true",
                    help="generate although fastuq/, kernels/ or pyproject.toml have "
                         "uncommitted changes (recorded in the manifest)")
    ap.add_argument("--new-inputs", action="store_true",
                    help="simulate the corpora again (fastuq.synth) instead of scoring the "
                         "stored inputs, and store them")
    ap.add_argument("--inputs-only", action="store_true",
                    help="only write the missing inputs of the current fixture (checked "
                         "against its recorded corpus digests) and record them in its manifest")
    args = ap.parse_args(argv)
    if args.inputs_only:
        if args.new_inputs:
            ap.error("--inputs-only and --new-inputs exclude each other")
        return _inputs_only(args.out)

    import fastuq

    pkg = Path(fastuq.__file__).resolve()
    if not pkg.is_relative_to(ROOT):
        print(f"error: imported fastuq from {pkg}, not from this checkout {ROOT}: install it "
              "(pip install -e .) first", file=sys.stderr)
        return 2
    commit = _git("rev-parse", "HEAD")
    dirty = _git("status", "--porcelain", "--", *CODE_PATHS)
    if dirty and not args.allow_dirty:
        print(f"error: uncommitted changes to the code:\n{dirty}\ncommit them (or pass "
              "--allow-dirty)", file=sys.stderr)
        return 2
    env = spec.fingerprint()
    out_dir = args.out
    out_dir.mkdir(parents=True, exist_ok=True)
    manifest: dict = {
        "format": spec.FORMAT,
        "what": "scores of every registered fastuq estimator on fixed corpora; "
                "tests/test_golden.py recomputes them and compares bit for bit when the "
                "environment matches, else within the tolerance",
        "regenerate": "python tests/golden/generate.py",
        "generated_at": datetime.datetime.now(datetime.UTC).replace(microsecond=0).isoformat(),
        "code": {
            "commit": commit,
            "trees": {p: _git("rev-parse", f"HEAD:{p}") for p in CODE_PATHS},
            "dirty": bool(dirty),
            "fastuq_version": fastuq.__version__,
            "estimators": list(fastuq.ESTIMATORS),
        },
        "environment": env,
        "bit_keys": list(spec.BIT_KEYS),
        "tolerance": spec.TOLERANCE,
        "columns": "ESTIMATOR|JOB|DTYPE|BACKEND, float64 uncertainty as fastuq.score returns "
                   "it (float32 kernels: float32 values widened to float64)",
        "corpora": {},
        "checks": [],
    }
    inputs = _prepare_inputs(out_dir, args.new_inputs, commit, env)
    total = 0
    with tempfile.TemporaryDirectory(prefix="fastuq-golden-") as tmp:
        cache: dict = {}
        paths: dict[str, Path] = {}
        for name, source in spec.CORPORA.items():
            table = spec.corpus_table(name, cache, folder=out_dir)
            path = paths[name] = spec.write_corpus(name, Path(tmp), cache, golden=out_dir)
            digest = spec.table_digest(table)
            if spec.table_digest(pq.read_table(path)) != digest:
                raise AssertionError(f"{name}: the Parquet file does not hold the table")
            ids = table.column("trajectory_id").combine_chunks().cast(pa.string())
            columns: dict[str, np.ndarray] = {}
            jobs = []
            for job, dtype, backend in spec.runs(name):
                out = spec.score_job(path, job, dtype, backend)
                if not out.column("trajectory_id").combine_chunks().cast(pa.string()).equals(ids):
                    raise AssertionError(f"{name}: {job['name']}: ids out of order")
                cols = spec.job_columns(out, job, dtype, backend)
                if not cols:
                    raise AssertionError(f"{name}: {job['name']}: no estimator scored")
                columns.update(cols)
                jobs.append({**job, "dtype": dtype, "backend": backend,
                             "call": _call(job, dtype, backend),
                             "estimators": [c.split("|")[0] for c in cols]})
            covered = {e for j in jobs for e in j["estimators"]}
            not_run = {}
            for est in fastuq.ESTIMATORS:
                if est in covered:
                    continue
                try:
                    fastuq.score(str(path), [est])
                except ValueError as exc:
                    not_run[est] = f"impossible: {exc}".replace(str(path), name)
                    continue
                if "base" not in source:
                    raise AssertionError(f"{name}: {est} runs but no job covers it")
                not_run[est] = (f"not run: its inputs are those of corpus {source['base']!r}, "
                                "where it is covered")
            fixture = spec.fixture_path(name, out_dir)
            _write_fixture(fixture, columns, ids)
            total += fixture.stat().st_size
            entry = {
                "file": fixture.name,
                "note": source["note"],
                "n": table.num_rows,
                "corpus_digest": digest,
                "jobs": jobs,
                "not_run": not_run,
                "sha256": _sha256(fixture),
                "bytes": fixture.stat().st_size,
            }
            if source.get("sample"):
                entry["source"] = {"bundled_sample": "fastuq/data/sample.parquet",
                                   "sha256": _sha256(path)}
            elif "synth" in source:
                kw = dict(source["synth"])
                n = kw.pop("n")
                entry["source"] = {
                    "generator": "fastuq.synth.corpus",
                    "call": f"fastuq.synth.corpus({n}, "
                            + ", ".join(f"{k}={v!r}" for k, v in kw.items()) + ")",
                    "kwargs": source["synth"],
                    "input": inputs[name],
                    "written_with": "stored as the input file above, scored from that file",
                }
            else:
                entry["source"] = {k: source[k] for k in ("base", "drop", "graph")
                                   if k in source}
            manifest["corpora"][name] = entry
            print(f"{name}: {table.num_rows} trajectories, {len(columns)} columns, "
                  f"{fixture.stat().st_size:,} bytes", flush=True)
        for check in spec.CHECKS:
            name = check["corpus"]
            got = spec.run_check(check, paths[name], Path(tmp))
            job, dtype, backend = spec.find_job(name, check["same_as"])
            record = next(j for j in manifest["corpora"][name]["jobs"]
                          if spec.job_key(j, j["dtype"], j["backend"]) == check["same_as"])
            stored = pq.read_table(spec.fixture_path(name, out_dir))
            for est in record["estimators"]:
                col = spec.column_name(est, job, dtype, backend)
                why = spec.mismatch(got[est].to_numpy(), stored[col].to_numpy(), dtype, True)
                if why:
                    raise AssertionError(f"check {check['name']}: {est}: {why}")
            manifest["checks"].append({**check, "estimators": record["estimators"]})
            print(f"check {check['name']}: reproduces {name} {check['same_as']}", flush=True)
    (out_dir / "manifest.json").write_text(json.dumps(manifest, indent=1) + "\n")
    print(f"wrote {len(spec.CORPORA)} files ({total:,} bytes) and manifest.json to {out_dir} "
          f"(code at {commit[:12]}{', dirty' if dirty else ''})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
