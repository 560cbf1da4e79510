"""Sharding over several XLA host (CPU) devices changes no score and compiles once per bucket.

Runs in a subprocess, since the device count is fixed when JAX starts. The subprocess runs JAX
on its CPU platform (``JAX_PLATFORMS=cpu``), so that the two host devices are the ones used
even on a machine whose default JAX backend is a GPU. Scores are compared with the NumPy
twins to 1e-12 (float64 through different code paths)."""

import os
import subprocess
import sys
import textwrap

import numpy as np
import pytest


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


def test_device_choice_cpu_is_bit_identical_and_gpu_needs_a_gpu():
    """``device="cpu"`` runs the kernel on the CPU whatever the default backend is: on a CPU
    machine the same bits as ``"auto"``; ``"gpu"`` without a GPU is a clear error, with one
    it gives the CPU's numbers to float32 rounding."""
    import jax

    import fastuq

    rng = np.random.default_rng(5)
    a = rng.integers(0, 4, (3, 3000)) / 3
    h = rng.exponential(0.4, (3, 3000))
    cpu = fastuq.sauce_batch(a, h, device="cpu", dtype="float32")["score"]
    if jax.default_backend() == "cpu":
        auto = fastuq.sauce_batch(a, h, dtype="float32")["score"]
        np.testing.assert_array_equal(cpu, auto)
    has_gpu = any(d.platform == "gpu" for d in jax.devices())
    if has_gpu:
        gpu = fastuq.sauce_batch(a, h, device="gpu", dtype="float32")["score"]
        np.testing.assert_allclose(gpu, cpu, rtol=1e-5, atol=1e-6)
    else:
        with pytest.raises(ValueError, match="no such backend"):
            fastuq.sauce_batch(a, h, device="gpu")
    with pytest.raises(ValueError, match="device must be one of"):
        fastuq.sauce_batch(a, h, device="tpu")


def test_cli_device_option(tmp_path, capsys):
    import jax
    import pyarrow.parquet as pq

    from fastuq.cli import main, sample_corpus_path

    auto, cpu = tmp_path / "auto.parquet", tmp_path / "cpu.parquet"
    assert main(["score", str(sample_corpus_path()), "-o", str(auto), "--no-progress"]) == 0
    assert main(["score", str(sample_corpus_path()), "-o", str(cpu), "--no-progress",
                 "--device", "cpu"]) == 0
    if jax.default_backend() == "cpu":
        assert pq.read_table(cpu).equals(pq.read_table(auto))
    if not any(d.platform == "gpu" for d in jax.devices()):
        gpu = tmp_path / "gpu.parquet"
        assert main(["score", str(sample_corpus_path()), "-o", str(gpu), "--device",
                     "gpu"]) == 2
        assert "no such backend" in capsys.readouterr().err and not gpu.exists()


def test_api_device_argument(tmp_path):
    import jax
    import pyarrow.parquet as pq

    import fastuq
    from fastuq.cli import sample_corpus_path

    src = sample_corpus_path()
    auto = fastuq.score(src, "sauce,umas")
    cpu = fastuq.score(src, "sauce,umas", device="cpu")
    fastuq.score_file(src, tmp_path / "cpu.parquet", methods="sauce,umas", device="cpu")
    if jax.default_backend() == "cpu":
        assert cpu.equals(auto)
        assert pq.read_table(tmp_path / "cpu.parquet").column("umas").equals(
            auto.column("umas"))
    with pytest.raises(ValueError, match="device must be one of"):
        fastuq.score_file(src, tmp_path / "x.parquet", device="tpu")
    assert not (tmp_path / "x.parquet").exists()
