"""Sharding over several XLA host (CPU) devices changes no score and compiles once per bucket.

Runs in a subprocess, since the device count is fixed when JAX starts. The subprocess runs JAX
on its CPU platform (``JAX_PLATFORMS=cpu``), so that the two host devices are the ones used
even on a machine whose default JAX backend is a GPU. Scores are compared with the NumPy
twins to 1e-12 (float64 through different code paths)."""

import os
import subprocess
import sys
import textwrap


def test_two_host_devices_give_the_same_scores_and_do_not_recompile(tmp_path):
    code = textwrap.dedent(
        f"""
        import numpy as np
        import pyarrow.parquet as pq
        import fastuq
        assert fastuq.use_cpu_devices(2) == 2
        import jax
        assert jax.default_backend() == "cpu", jax.default_backend()
        assert len(jax.devices("cpu")) == 2, jax.devices("cpu")
        assert len(jax.local_devices()) == 2  # what fastuq shards over
        from fastuq.engine.runtime import compiled_count
        from fastuq.synth import corpus

        path = "{tmp_path}/c.parquet"
        pq.write_table(corpus(3000, protocol="mixed", seed=2, topk=2), path)
        ref = fastuq.score(path, "all", backend="numpy")
        got = fastuq.score(path, "all", chunk_rows=1024)
        for name in ref.column_names:
            if name in ("trajectory_id", "question_id", "protocol", "correct"):
                continue
            np.testing.assert_allclose(got[name].to_numpy(), ref[name].to_numpy(),
                                       rtol=1e-12, atol=1e-12, err_msg=name)
        before = compiled_count()
        again = fastuq.score(path, "all", chunk_rows=1024)  # same buckets: no compilation
        assert compiled_count() == before, (before, compiled_count())
        # Long debates, several chunks, each device scoring its slice.
        rng = np.random.default_rng(0)
        n, t = 70000, 9
        a = rng.integers(0, 4, (t, n)) / 3.0
        h = rng.exponential(0.3, (t, n))
        m = np.arange(t)[:, None] < rng.integers(1, t + 1, n)[None, :]
        out = fastuq.sauce_batch(a, h, m, chunk_size=1 << 16)["score"]
        ref = fastuq.sauce_batch(a, h, m, backend="numpy")["score"]
        np.testing.assert_allclose(out, ref, rtol=1e-12, atol=1e-12)
        print("ok")
        """
    )
    # Outside the checkout (and PYTHONSAFEPATH, see conftest.py): the installed package.
    env = dict(os.environ, JAX_PLATFORMS="cpu")
    res = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         timeout=600, cwd=tmp_path, env=env)
    assert res.returncode == 0, res.stderr[-3000:]
    assert res.stdout.strip().endswith("ok")
