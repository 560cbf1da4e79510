"""Every registered estimator gives bit-identical scores whatever the chunk size, the team
size of the other trajectories in a chunk (the agent-slot bucket) and the number of XLA
host devices; and every estimator compiles in bounded time for long debates and large teams.

Bit identity is the point here (same machine, same code path), so scores are compared with
``array_equal``. The device counts run in subprocesses, since JAX fixes them at start-up;
they ask for CPU devices explicitly, so the test means the same on a GPU machine.
"""

import json
import os
import subprocess
import sys
import textwrap

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

import fastuq
from fastuq.engine.registry import get_estimator
from fastuq.synth import corpus_with_beliefs as corpus

#: Every estimator but those that read texts: the simulated corpora hold none (the text
#: estimators' own invariance tests draw texts: tests/test_spectral.py).
ESTIMATORS = tuple(n for n in fastuq.ESTIMATORS
                   if "text_similarity" not in get_estimator(n).inputs)


def test_cocoa_bit_identical_across_chunks():
    """CoCoA alone, in the default suite: chunks of 64 pad teams of four to 4 slots, the
    whole corpus to 8 (it holds 6-agent teams). Before the fix 13 of the 1,500 rows moved by
    2.2e-16 (XLA fused a product into the slot sum at one width and not the other)."""
    parts = [corpus(700, protocol="debate", seed=1, n_agents=2, topk=2),
             corpus(500, protocol="mixed", seed=2, topk=2),
             corpus(300, protocol="debate", seed=3, n_agents=6, n_rounds=4, topk=2)]
    table = pa.concat_tables(parts, promote_options="default")
    ids = pa.array([f"t{i}" for i in range(table.num_rows)])
    table = table.set_column(table.column_names.index("trajectory_id"), "trajectory_id", ids)
    whole = fastuq.score(table, "cocoa", chunk_rows=1 << 18, dtype="float64")["cocoa"]
    small = fastuq.score(table, "cocoa", chunk_rows=64, dtype="float64")["cocoa"]
    assert np.array_equal(whole.to_numpy(), small.to_numpy(), equal_nan=True)


def _mixed_team_corpus(path):
    """Chunks of one corpus see different largest teams: 2-agent debates first, then
    3- and 6-agent debates and 4-agent DyLAN runs, interleaved (with beliefs, so that every
    estimator, BCCS included, scores it)."""
    parts = [
        corpus(700, protocol="debate", seed=1, n_agents=2, topk=2),
        corpus(500, protocol="mixed", seed=2, topk=2),
        corpus(300, protocol="debate", seed=3, n_agents=6, n_rounds=4, topk=2),
    ]
    table = pa.concat_tables(parts, promote_options="default")
    ids = pa.array([f"t{i}" for i in range(table.num_rows)])
    table = table.set_column(table.column_names.index("trajectory_id"), "trajectory_id", ids)
    pq.write_table(table, path)
    return table.num_rows


_SCRIPT = textwrap.dedent(
    """
    import json, sys
    import numpy as np
    import fastuq
    path, devices, out, dtype = sys.argv[1], int(sys.argv[2]), sys.argv[3], sys.argv[4]
    assert fastuq.use_cpu_devices(devices) == devices
    import jax
    assert len(jax.devices("cpu")) == devices
    result = {}
    for chunk in (64, 1000, 1 << 18):
        table = fastuq.score(path, "all", chunk_rows=chunk, dtype=dtype)
        for name in json.loads(sys.argv[5]):
            col = table[name].to_numpy()
            result[f"{name}/{chunk}"] = col
    np.savez(out, **result)
    """
)


def _run(path, devices, out, dtype):
    env = dict(os.environ, JAX_PLATFORMS="cpu")
    env.pop("XLA_FLAGS", None)
    res = subprocess.run(
        [sys.executable, "-c", _SCRIPT, str(path), str(devices), str(out), dtype,
         json.dumps(ESTIMATORS)],
        capture_output=True, text=True, timeout=900, cwd=out.parent, env=env,
    )
    assert res.returncode == 0, res.stderr[-3000:]
    return np.load(out)


@pytest.mark.slow  # subprocesses with several host devices, every estimator
@pytest.mark.parametrize("dtype", ["float64", "float32"])
def test_every_estimator_bit_identical_across_chunks_and_devices(tmp_path, dtype):
    path = tmp_path / "c.parquet"
    n = _mixed_team_corpus(path)
    one = _run(path, 1, tmp_path / "one.npz", dtype)
    two = _run(path, 2, tmp_path / "two.npz", dtype)
    for name in ESTIMATORS:
        base = one[f"{name}/{1 << 18}"]
        assert base.shape == (n,) and np.isfinite(base).all(), name
        for chunk in (64, 1000, 1 << 18):
            for runs, label in ((one, "1 device"), (two, "2 devices")):
                got = runs[f"{name}/{chunk}"]
                assert np.array_equal(got.view(np.uint64), base.view(np.uint64)), (
                    f"{name}: chunk {chunk}, {label}: "
                    f"{int((got != base).sum())} rows differ, max {np.abs(got - base).max()}")


# ----------------------------------------------------------------------------------------
# Bounded compile time: long debates and large teams score with every estimator


def _long_corpus(n, t, a, seed):
    rng = np.random.default_rng(seed)
    rows = []
    for i in range(n):
        lp = (-rng.exponential(2.0, (t, a))).tolist()
        ntok = rng.integers(1, 50, (t, a)).tolist()
        topk = [[np.sort(-rng.exponential(1.0, (2, 3)))[:, ::-1].tolist() for _ in range(a)]
                for _ in range(t)]
        answers = rng.integers(0, 3, (t, a)).astype(str).tolist()
        rows.append({
            "trajectory_id": f"r{i}", "protocol": "debate", "n_agents": a,
            "agreement": (rng.integers(1, a + 1, t) / a).tolist(),
            "answers": answers, "belief": rng.random((t, a)).tolist(),
            "token_entropy": rng.exponential(0.5, t).tolist(),
            "seq_logprob": lp, "n_tokens": ntok, "topk_logprobs": topk,
        })
    return pa.Table.from_pylist(rows)


@pytest.mark.slow  # long guarantee: 1,000-round debates, 64-agent teams
@pytest.mark.parametrize(("t", "a"), [(1000, 2), (60, 64)])
def test_long_debates_and_large_teams_score_with_every_estimator(t, a):
    table = _long_corpus(3, t, a, seed=t + a)
    got = fastuq.score(table, "all")
    ref = fastuq.score(table, "all", backend="numpy")
    for name in ESTIMATORS:
        np.testing.assert_allclose(got[name].to_numpy(), ref[name].to_numpy(),
                                   rtol=1e-10, atol=1e-12, err_msg=name)
