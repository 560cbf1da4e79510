"""What the golden-scores fixture (tests/golden/) holds and how each part of it is made.

Shared by ``tests/golden/generate.py`` (writes the fixture) and ``tests/test_golden.py``
(recomputes it and compares). Only stable, public entry points are used: ``fastuq.score``,
``fastuq.synth`` (``corpus``, ``write``), ``fastuq.ESTIMATORS`` and the ``fastuq score``
command, so that moving modules around inside the package changes nothing here.

A *corpus* is the bundled sample or a seeded ``fastuq.synth`` corpus (optionally with columns
dropped, so that signals are derived, or with a ``predecessors`` graph added), scored from a
Parquet file. The simulated corpora are stored in ``tests/golden/inputs/`` as they were when
the fixture was made, and the tests score those files instead of simulating again: the
simulator's floats go through NumPy's exp/log, whose last bits depend on the CPU's vector
instructions (``NPY_DISABLE_CPU_FEATURES="X86_V4 AVX512_ICL AVX512_SPR"`` changes about one
``seq_logprob`` in ten by an ulp), and scores of other inputs are not the fixture's scores.
That the stored inputs are still what ``fastuq.synth.corpus`` gives is checked separately
(:func:`input_differences`: discrete columns equal, floats within :data:`INPUT_TOLERANCE`).
A *job* is one ``fastuq.score`` call on a corpus; its scores go to the fixture as columns
``ESTIMATOR|JOB``. *Checks* are further runs (the ``fastuq score`` command, other chunk
sizes) that must reproduce columns already stored.
"""

from __future__ import annotations

import hashlib
import json
import os
import platform
import re
import subprocess
import sys
from importlib import resources
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

#: Folder of the fixture files (one Parquet per corpus, plus the manifest).
GOLDEN_DIR = Path(__file__).resolve().parent / "golden"
MANIFEST = GOLDEN_DIR / "manifest.json"
FORMAT = 1

#: Tolerances used when the environment differs from the one that made the fixture
#: (|got - want| <= abs + rel * |want|, NaN where the fixture has NaN).
TOLERANCE = {"float64": {"rel": 1e-12, "abs": 1e-12}, "float32": {"rel": 2e-6, "abs": 2e-6}}

#: Tolerance for the simulated corpus regenerated here against the stored input (per value,
#: |here - stored| <= abs + rel * |stored|, by the column's float type; everything that is not
#: a float must be equal, nulls and list lengths included). Measured without AVX-512
#: (``NPY_DISABLE_CPU_FEATURES="X86_V4 AVX512_ICL AVX512_SPR"``) on the fixture's corpora:
#: float64 at most 6e-16 relative (seq_logprob, token_entropy), float32 at most 8.4e-8 (one
#: ulp, 2 of 301,860 top-k log-probs).
INPUT_TOLERANCE = {"double": {"rel": 1e-13, "abs": 1e-13},
                   "float": {"rel": 1e-6, "abs": 1e-6}}

DTYPES = ("float64", "float32")
BACKENDS = ("jax", "numpy")
_SHORT = {"float64": "f64", "float32": "f32"}

# ------------------------------------------------------------------------------- corpora

#: name -> how the corpus is made. ``synth``: keyword arguments of ``fastuq.synth.corpus``;
#: ``base``: another corpus's table; ``drop``: columns removed (their signals are then derived
#: or replaced by an observation noise); ``graph``: add a ``predecessors`` column (below).
CORPORA: dict[str, dict] = {
    "sample": {"sample": True,
               "note": "the bundled sample corpus (fastuq score --sample)"},
    "debate": {"synth": {"n": 1200, "protocol": "debate", "seed": 101, "n_agents": 5,
                         "n_rounds": 4},
               "note": "debate, 5 agents, 4 rounds"},
    "dylan": {"synth": {"n": 1200, "protocol": "dylan", "seed": 102},
              "note": "DyLAN (early stopping, ranker keeps 2 agents), default 4 agents"},
    "mixed": {"synth": {"n": 1500, "protocol": "mixed", "seed": 103, "questions_per_id": 4},
              "note": "debate and DyLAN alternating record by record"},
    "topk": {"synth": {"n": 1000, "protocol": "mixed", "seed": 104, "topk": 5},
             "note": "mixed, with token_logprobs and top-5 topk_logprobs"},
    "topk_derived": {"base": "topk", "drop": ["agreement", "token_entropy"],
                     "note": "topk without agreement and token_entropy: agreement derived "
                             "from the parsed answers, token entropy from topk_logprobs"},
    "dylan_noise": {"base": "dylan", "drop": ["token_entropy"],
                    "note": "dylan without token_entropy: SAUCE and weighted_agreement run "
                            "with a constant observation noise"},
    "mixed_graph": {"base": "mixed", "graph": True,
                    "note": "mixed with an explicit predecessors graph for UMAS (every 7th "
                            "trajectory from the 4th null; round 0 null nodes; later rounds: "
                            "slot%3==0 an empty list, slot%3==1 [slot, slot+1 mod A], "
                            "slot%3==2 null = protocol default)"},
}


def _job(name: str, methods, *, protocol=None, params=None, observation_noise=None) -> dict:
    return {"name": name, "methods": methods, "protocol": protocol, "params": params or {},
            "observation_noise": observation_noise}


_ALL = [_job("all", "all")]
_SAUCE_VARIANTS = [
    _job("lam=0.5", ["sauce"], params={"lam": 0.5}),
    _job("q=0.02", ["sauce"], params={"q": 0.02}),
    _job("lam=0.8,q=0.3,sigma2_0=1,mu_0=0.5", ["sauce"],
         params={"lam": 0.8, "q": 0.3, "sigma2_0": 1.0, "mu_0": 0.5}),
    _job("protocol=debate", ["sauce"], protocol="debate"),
    _job("protocol=dylan", ["sauce"], protocol="dylan"),
    _job("per-protocol", ["sauce"], params={"lam": {"debate": 0.9, "dylan": 0.6},
                                            "q": {"debate": 0.05, "dylan": 0.01}}),
]
_UMAS_MEAN_LOGPROB = [_job("confidence=mean_logprob", ["umas", "umas_fix"],
                           params={"confidence": "mean_logprob"})]
_UMAS_NEG_ENTROPY = [_job("confidence=neg_entropy", ["umas", "umas_fix"],
                          params={"confidence": "neg_entropy"})]
_AGREEMENT_METHODS = ["sauce", "last_agreement", "mean_agreement", "weighted_agreement"]

#: corpus -> jobs; every job runs in each dtype (float64, float32) and backend (jax, numpy).
JOBS: dict[str, list[dict]] = {
    "sample": _ALL + _SAUCE_VARIANTS + _UMAS_MEAN_LOGPROB,
    "debate": _ALL + _UMAS_MEAN_LOGPROB,
    "dylan": _ALL + _UMAS_MEAN_LOGPROB,
    "mixed": _ALL + _SAUCE_VARIANTS,
    "topk": _ALL + _UMAS_MEAN_LOGPROB + _UMAS_NEG_ENTROPY,
    "topk_derived": [_job("derived", _AGREEMENT_METHODS)],
    "dylan_noise": [_job("R=0.2", "all", observation_noise=0.2),
                    _job("R=0.05", ["sauce", "weighted_agreement"], observation_noise=0.05),
                    _job("R=0.05,lam=0.5", ["sauce"], params={"lam": 0.5},
                         observation_noise=0.05)],
    "mixed_graph": [_job("graph", ["umas"]),
                    _job("graph,confidence=mean_logprob", ["umas"],
                         params={"confidence": "mean_logprob"})],
}

#: Runs that must reproduce stored columns bit for bit (or within the tolerance): the
#: ``fastuq score`` command (its own process, one XLA device per core) and other chunk sizes.
#: ``same_as``: the job whose columns they reproduce.
CHECKS: list[dict] = [
    {"name": "cli-sample", "corpus": "sample", "same_as": "all|float64|jax",
     "cli": ["--sample", "--method", "all"]},
    {"name": "cli-topk-f32", "corpus": "topk", "same_as": "all|float32|jax",
     "cli": ["{corpus}", "--method", "all", "--dtype", "float32"]},
    {"name": "cli-mixed-lam", "corpus": "mixed", "same_as": "lam=0.5|float64|jax",
     "cli": ["{corpus}", "--method", "sauce", "--lam", "0.5"]},
    {"name": "chunked-mixed-f64", "corpus": "mixed", "same_as": "all|float64|jax",
     "chunk_rows": 333},
    {"name": "chunked-topk-f32-numpy", "corpus": "topk", "same_as": "all|float32|numpy",
     "chunk_rows": 300},
]


def job_key(job: dict, dtype: str, backend: str) -> str:
    return f"{job['name']}|{dtype}|{backend}"


def column_name(estimator: str, job: dict, dtype: str, backend: str) -> str:
    """Fixture column: ``ESTIMATOR|JOB|f64|jax`` (dtype and backend shortened)."""
    return f"{estimator}|{job['name']}|{_SHORT[dtype]}|{backend}"


def runs(corpus: str) -> list[tuple[dict, str, str]]:
    """``(job, dtype, backend)`` for every ``fastuq.score`` call on ``corpus``."""
    return [(job, dtype, backend) for job in JOBS[corpus] for dtype in DTYPES
            for backend in BACKENDS]


def fixture_path(corpus: str, folder: Path = GOLDEN_DIR) -> Path:
    return Path(folder) / f"{corpus}.parquet"


def has_input(corpus: str) -> bool:
    """Whether ``corpus`` is simulated, so that its input is stored in the fixture."""
    return "synth" in CORPORA[corpus]


def input_path(corpus: str, folder: Path = GOLDEN_DIR) -> Path:
    """The stored input of a simulated corpus: ``inputs/NAME.parquet`` in the fixture."""
    return Path(folder) / "inputs" / f"{corpus}.parquet"


# ---------------------------------------------------------------------------- making corpora

def sample_path() -> Path:
    """The bundled sample corpus (package data ``fastuq/data/sample.parquet``)."""
    return Path(str(resources.files("fastuq") / "data" / "sample.parquet"))


def _predecessors(table: pa.Table) -> pa.Array:
    """A ``predecessors`` column ``[round][slot] -> list`` aligned with ``seq_logprob``."""
    nodes = table.column("seq_logprob").to_pylist()
    out = []
    for r, rec in enumerate(nodes):
        if r % 7 == 3:  # a null trajectory: every node takes the protocol default
            out.append(None)
            continue
        rounds = []
        for t, row in enumerate(rec):
            width = len(row)
            if t == 0:  # nothing to read yet
                rounds.append([None] * width)
                continue
            slots = []
            for a, value in enumerate(row):
                if value is None or a % 3 == 2:
                    slots.append(None)
                elif a % 3 == 0:
                    slots.append([])
                else:
                    slots.append(sorted({a, (a + 1) % width}))
            rounds.append(slots)
        out.append(rounds)
    return pa.array(out, pa.list_(pa.list_(pa.list_(pa.int32()))))


def simulate(name: str) -> pa.Table:
    """A simulated corpus made again here by ``fastuq.synth.corpus`` (what its stored input
    was made with; the floats may differ from it in the last bits on another CPU)."""
    from fastuq import synth

    kw = dict(CORPORA[name]["synth"])
    return synth.corpus(kw.pop("n"), **kw)


def corpus_table(name: str, _cache: dict | None = None, *,
                 folder: Path = GOLDEN_DIR) -> pa.Table:
    """The corpus ``name`` as a table: the bundled sample and the stored inputs (in the
    fixture ``folder``) read from their files, the others derived from those."""
    if _cache is not None and name in _cache:
        return _cache[name]
    spec = CORPORA[name]
    if spec.get("sample"):
        table = pq.read_table(sample_path())
    elif "synth" in spec:
        table = pq.read_table(input_path(name, folder))
    else:
        table = corpus_table(spec["base"], _cache, folder=folder)
        if spec.get("drop"):
            table = table.drop_columns(spec["drop"])
        if spec.get("graph"):
            table = table.append_column("predecessors", _predecessors(table))
    if _cache is not None:
        _cache[name] = table
    return table


def write_corpus(name: str, folder: Path, _cache: dict | None = None, *,
                 golden: Path = GOLDEN_DIR) -> Path:
    """The corpus as users hand it to fastuq: a Parquet file. The sample is its packaged file
    and a simulated corpus its stored input (in the fixture ``golden``), read where they lie;
    a derived corpus is written to ``folder`` (``fastuq.synth.write``)."""
    if CORPORA[name].get("sample"):
        return sample_path()
    if has_input(name):
        return input_path(name, golden)
    from fastuq import synth

    path = Path(folder) / f"{name}.parquet"
    if not path.exists():
        synth.write(corpus_table(name, _cache, folder=golden), path)
    return path


def write_input(table: pa.Table, path: Path) -> None:
    """Store a simulated corpus as a fixture input (Parquet, zstd level 19), atomically; read
    back and checked to hold the table."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.tmp")
    pq.write_table(table, tmp, compression="zstd", compression_level=19)
    if table_digest(pq.read_table(tmp)) != table_digest(table):
        tmp.unlink()
        raise AssertionError(f"{path}: the Parquet file does not hold the table")
    os.replace(tmp, path)


def _leaves(arr: pa.Array) -> tuple[list[np.ndarray], pa.Array]:
    """The validity and list lengths at every level of a (nested list) array, and its
    flattened values."""
    structure = []
    while True:
        structure.append(arr.is_valid().to_numpy(zero_copy_only=False))
        if not (pa.types.is_list(arr.type) or pa.types.is_large_list(arr.type)):
            return structure, arr
        structure.append(np.asarray(pc.fill_null(pc.list_value_length(arr), 0)
                                    .to_numpy(zero_copy_only=False), np.int64))
        arr = arr.flatten()


def input_differences(here: pa.Table, stored: pa.Table) -> list[str]:
    """How a corpus simulated here differs from its stored input beyond
    :data:`INPUT_TOLERANCE` (empty: it does not). Column names, types, nulls, list lengths
    and every non-float value must be equal; floats agree within the tolerance."""
    if here.column_names != stored.column_names:
        return [f"columns {here.column_names} != {stored.column_names}"]
    problems = []
    for name in here.column_names:
        a, b = here.column(name).combine_chunks(), stored.column(name).combine_chunks()
        if _type_name(a.type) != _type_name(b.type):
            problems.append(f"{name}: type {a.type} != {b.type}")
            continue
        (sa, va), (sb, vb) = _leaves(a), _leaves(b)
        if len(sa) != len(sb) or any(x.shape != y.shape or not np.array_equal(x, y)
                                     for x, y in zip(sa, sb, strict=True)):
            problems.append(f"{name}: nulls or list lengths differ")
            continue
        if not pa.types.is_floating(va.type):
            if not va.equals(vb):
                problems.append(f"{name}: values differ")
            continue
        tol = INPUT_TOLERANCE[str(va.type)]
        x = np.asarray(pc.fill_null(va, 0).to_numpy(zero_copy_only=False), np.float64)
        y = np.asarray(pc.fill_null(vb, 0).to_numpy(zero_copy_only=False), np.float64)
        with np.errstate(invalid="ignore"):
            bad = (np.isnan(x) != np.isnan(y)) | (
                ~np.isnan(y) & ~(np.abs(x - y) <= tol["abs"] + tol["rel"] * np.abs(y)))
        if bad.any():
            k = int(np.argmax(bad))
            problems.append(f"{name}: {int(bad.sum())} of {bad.size} values beyond {tol} "
                            f"(first: {x[k]!r} here, {y[k]!r} stored)")
    return problems


def _type_name(t: pa.DataType) -> str:
    """The type without list field names (Parquet round trips turn ``item`` to ``element``)."""
    if pa.types.is_list(t) or pa.types.is_large_list(t):
        return f"list<{_type_name(t.value_type)}>"
    return str(t)


def _digest_array(h, arr: pa.Array) -> None:
    h.update(_type_name(arr.type).encode() + b"\0" + len(arr).to_bytes(8, "little"))
    h.update(np.packbits(arr.is_valid().to_numpy(zero_copy_only=False)).tobytes())
    t = arr.type
    if pa.types.is_list(t) or pa.types.is_large_list(t):
        lengths = pc.fill_null(pc.list_value_length(arr), 0).to_numpy(zero_copy_only=False)
        h.update(np.asarray(lengths, np.int64).tobytes())
        _digest_array(h, arr.flatten())
    elif pa.types.is_string(t) or pa.types.is_large_string(t):
        h.update("\x1f".join("" if s is None else s for s in arr.to_pylist()).encode())
    elif pa.types.is_boolean(t):
        h.update(np.asarray(pc.fill_null(arr, False).to_numpy(zero_copy_only=False),
                            np.uint8).tobytes())
    else:
        h.update(np.ascontiguousarray(pc.fill_null(arr, 0).to_numpy(zero_copy_only=False))
                 .tobytes())


def table_digest(table: pa.Table) -> str:
    """SHA-256 of a table's content (names, types, values, nulls, list lengths), independent
    of chunking and of the file encoding."""
    h = hashlib.sha256()
    for name in table.column_names:
        h.update(name.encode() + b"\0")
        _digest_array(h, table.column(name).combine_chunks())
    return h.hexdigest()


# ------------------------------------------------------------------------------- scoring

def score_job(path: Path, job: dict, dtype: str, backend: str,
              chunk_rows: int | None = None) -> pa.Table:
    """One ``fastuq.score`` call, as a user makes it."""
    import fastuq

    kw = {}
    if chunk_rows is not None:
        kw["chunk_rows"] = chunk_rows
    if job["protocol"] is not None:
        kw["protocol"] = job["protocol"]
    if job["observation_noise"] is not None:
        kw["observation_noise"] = job["observation_noise"]
    return fastuq.score(str(path), job["methods"], dtype=dtype, backend=backend,
                        **kw, **job["params"])


def job_columns(table: pa.Table, job: dict, dtype: str, backend: str,
                estimators: list[str] | None = None) -> dict[str, np.ndarray]:
    """Fixture columns of one job's output (``estimators``: the ones to take; default: each
    registered estimator the output has)."""
    import fastuq

    names = estimators if estimators is not None else [
        e for e in fastuq.ESTIMATORS if e in table.column_names]
    return {column_name(e, job, dtype, backend): np.asarray(table[e].to_numpy(), np.float64)
            for e in names}


def find_job(corpus: str, key: str) -> tuple[dict, str, str]:
    for job, dtype, backend in runs(corpus):
        if job_key(job, dtype, backend) == key:
            return job, dtype, backend
    raise KeyError(f"{corpus}: no job {key}")


def run_check(check: dict, path: Path, workdir: Path) -> pa.Table:
    """Run one of :data:`CHECKS`: its scores as a table."""
    if "cli" in check:
        out = Path(workdir) / f"{check['name']}.scores.parquet"
        args = [a.replace("{corpus}", str(path)) for a in check["cli"]]
        cmd = [*fastuq_command(), "score", *args, "-o", str(out), "--no-progress"]
        env = dict(os.environ, PYTHONSAFEPATH="1")
        res = subprocess.run(cmd, capture_output=True, text=True, timeout=600, cwd=workdir,
                             env=env)
        if res.returncode != 0:
            raise RuntimeError(f"{' '.join(cmd)} failed ({res.returncode}):\n"
                               f"{res.stdout[-2000:]}\n{res.stderr[-3000:]}")
        return pq.read_table(out)
    job, dtype, backend = find_job(check["corpus"], check["same_as"])
    return score_job(path, job, dtype, backend, chunk_rows=check["chunk_rows"])


def fastuq_command() -> list[str]:
    """``fastuq`` as installed beside this Python (the console script), else ``python -m``."""
    script = Path(sys.executable).with_name("fastuq")
    return [str(script)] if script.exists() else [sys.executable, "-m", "fastuq"]


# --------------------------------------------------------------------------- environment

_SIMD = re.compile(r"^(sse\d?(_\d)?|ssse3|sse4a|avx.*|fma4?|f16c|amx.*|xop|bmi\d|popcnt"
                   r"|asimd.*|sve.*|neon|fp16|fphp)$")
_DEVICE_COUNT_FLAG = re.compile(r"--xla_force_host_platform_device_count=\S+")


def cpu_flags() -> list[str]:
    """SIMD-related CPU flags of the first processor in /proc/cpuinfo (x86 ``flags`` or Arm
    ``Features``); empty where there is no /proc/cpuinfo."""
    try:
        text = Path("/proc/cpuinfo").read_text()
    except OSError:
        return []
    for line in text.splitlines():
        key, _, value = line.partition(":")
        if key.strip() in ("flags", "Features"):
            return sorted(f for f in value.split() if _SIMD.match(f))
    return []


def fingerprint() -> dict:
    """What bit-identical scores depend on besides fastuq's code: library versions, the JAX
    backend, the CPU's vector instructions and the environment variables that change code
    generation. (The XLA host device count is left out of XLA_FLAGS: fastuq's scores do not
    depend on it.)"""
    import jax
    import jaxlib

    xla = _DEVICE_COUNT_FLAG.sub("", os.environ.get("XLA_FLAGS", "")).split()
    return {
        "python": platform.python_version(),
        "jax": jax.__version__,
        "jaxlib": jaxlib.__version__,
        "numpy": np.__version__,
        "pyarrow": pa.__version__,
        "machine": platform.machine(),
        "system": platform.system(),
        "jax_backend": jax.default_backend(),
        "jax_device_kind": jax.devices()[0].device_kind,
        "cpu_flags": cpu_flags(),
        "XLA_FLAGS": " ".join(sorted(xla)),
        "NPY_DISABLE_CPU_FEATURES": os.environ.get("NPY_DISABLE_CPU_FEATURES", ""),
        "NPY_ENABLE_CPU_FEATURES": os.environ.get("NPY_ENABLE_CPU_FEATURES", ""),
        "JAX_ENABLE_X64": os.environ.get("JAX_ENABLE_X64", ""),
    }


#: Fingerprint keys whose values must match for a bit-for-bit comparison (python and pyarrow
#: are recorded for information: they do not produce the floats).
BIT_KEYS = ("jax", "jaxlib", "numpy", "machine", "system", "jax_backend", "jax_device_kind",
            "cpu_flags", "XLA_FLAGS", "NPY_DISABLE_CPU_FEATURES", "NPY_ENABLE_CPU_FEATURES",
            "JAX_ENABLE_X64")


def fingerprint_differences(recorded: dict, current: dict) -> dict[str, tuple]:
    """``{key: (recorded, current)}`` for the bit-relevant keys that differ."""
    return {k: (recorded.get(k), current.get(k)) for k in BIT_KEYS
            if recorded.get(k) != current.get(k)}


# ---------------------------------------------------------------------------- comparison

def mismatch(got: np.ndarray, want: np.ndarray, dtype: str, bits: bool) -> str | None:
    """Why ``got`` differs from ``want`` (``None``: it does not). ``bits``: every float's
    64 bits, NaN included; else the dtype's tolerance with NaN at the same places."""
    got = np.ascontiguousarray(got, np.float64)
    want = np.ascontiguousarray(want, np.float64)
    if got.shape != want.shape:
        return f"shape {got.shape} != {want.shape}"
    nan_g, nan_w = np.isnan(got), np.isnan(want)
    if bits:
        bad = got.view(np.uint64) != want.view(np.uint64)
    else:
        tol = TOLERANCE[dtype]
        with np.errstate(invalid="ignore"):
            close = np.abs(got - want) <= tol["abs"] + tol["rel"] * np.abs(want)
        bad = (nan_g != nan_w) | (~nan_w & ~close)
    if not bad.any():
        return None
    k = int(np.argmax(bad))
    return (f"{int(bad.sum())} of {bad.size} values differ (first at row {k}: "
            f"{float(got[k])!r} != {float(want[k])!r}; NaN: {int(nan_g.sum())} here, "
            f"{int(nan_w.sum())} in the fixture)")


def load_manifest() -> dict:
    return json.loads(MANIFEST.read_text())
