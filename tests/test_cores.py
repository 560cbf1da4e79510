"""Every core, any count: the batch split over any number of XLA host devices, the default
device count from the CPUs this process may use, and padding bounded by the work.

- Bucket widths are checked against hand-worked values (multiples of the device count,
  least bucket from the element budget ``1024 * 64``).
- The cgroup quota is parsed from fake ``/sys/fs/cgroup`` trees under ``tmp_path``.
- Device counts run in subprocesses (JAX fixes them at start-up), on the CPU platform
  (``JAX_PLATFORMS=cpu``, so they mean the same on a GPU machine), with
  ``XLA_FLAGS=--xla_force_host_platform_device_count=N``. Bit identity is the point there
  (same machine, same code path), so scores are compared with ``array_equal`` on their bits.
"""

from __future__ import annotations

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
from fastuq.engine import runner, runtime

# ----------------------------------------------------------------------------- buckets


@pytest.mark.parametrize(("devices", "want"), [(1, 1024), (2, 1024), (3, 1026), (6, 1026),
                                               (12, 1032), (24, 1032)])
def test_bucket_is_a_multiple_of_any_device_count(devices, want):
    # 1000 trajectories: power-of-two bucket 1024, then up to a multiple of the devices:
    # ceil(1024 / 3) * 3 = 1026, ceil(1024 / 6) * 6 = 1026, ceil(1024 / 12) * 12 = 1032,
    # ceil(1024 / 24) * 24 = 1032.
    assert runtime.bucket_size(1000, 1 << 20, devices=devices) == want


def test_full_chunk_is_a_multiple_of_the_device_count():
    assert runtime.bucket_size(5000, 4096, devices=3) == 4098  # 1366 * 3
    assert runtime.bucket_size(4096, 4096, devices=6) == 4098  # 683 * 6
    assert runtime.bucket_size(4096, 4096, devices=4) == 4096


def test_least_bucket_is_bounded_by_the_work():
    # Element budget 1024 trajectories x 64 elements = 65536.
    assert runtime.bucket_size(1, 1 << 20) == 1024
    assert runtime.bucket_size(1, 1 << 20, elements=64) == 1024
    assert runtime.bucket_size(1, 1 << 20, elements=65) == 512  # 65536 // 65 = 1008 -> 512
    assert runtime.bucket_size(1, 1 << 20, elements=200 * 64) == 4  # 65536 // 12800 = 5 -> 4
    assert runtime.bucket_size(1, 1 << 20, elements=200 * 64 * 64) == 1
    assert runtime.bucket_size(3, 1 << 20, elements=200 * 64, devices=3) == 6  # 4 -> 6
    assert runtime.bucket_size(9, 1 << 20, elements=200 * 64) == 16  # next power of two
    with pytest.raises(ValueError, match="devices must be >= 1"):
        runtime.bucket_size(1, 1024, devices=0)


def test_device_split_deals_trajectories_out_evenly():
    offsets, s = runtime.device_split(10, 12, 3)
    assert s == 4 and offsets.tolist() == [0, 4, 7, 10]
    offsets, s = runtime.device_split(2, 6, 3)
    assert s == 2 and offsets.tolist() == [0, 1, 2, 2]
    with pytest.raises(ValueError, match="cannot split"):
        runtime.device_split(10, 13, 3)


def _long_team(t: int, a: int, seed: int) -> pa.Table:
    """One debate of ``t`` rounds by ``a`` agents, every node with a log-probability and
    an answer."""
    rng = np.random.default_rng(seed)
    return pa.Table.from_pylist([{
        "trajectory_id": "long", "protocol": "debate", "n_agents": a,
        "answers": rng.integers(0, 3, (t, a)).astype(str).tolist(),
        "token_entropy": rng.exponential(0.5, t).tolist(),
        "seq_logprob": (-rng.exponential(2.0, (t, a))).tolist(),
    }])


def test_one_long_debate_of_a_large_team_is_not_padded_to_1024(monkeypatch):
    """1 trajectory of 200 rounds x 64 agents: the arrays the kernels receive are padded to
    the element budget 65536, not to 1,024 trajectories: UMAS's node arrays ``[200, N, 64]``
    to 65536 // 12800 = 5 -> 4 trajectories, SAUCE's ``[200, N]`` to 65536 // 200 = 327 ->
    256 (each then up to a multiple of the device count); the scores are the NumPy
    twins'."""
    seen: list[tuple[str, tuple[int, ...]]] = []
    apply = runner._apply

    def spy(*arrays, estimator, **kw):
        seen.extend((estimator, tuple(x.shape)) for x in arrays if np.ndim(x))
        return apply(*arrays, estimator=estimator, **kw)

    monkeypatch.setattr(runner, "_apply", spy)
    table = _long_team(200, 64, seed=3)
    got = fastuq.score(table, "sauce,umas", dtype="float64")
    ndev = len(runtime.local_devices())
    want = {"sauce": -(-256 // ndev) * ndev, "umas": -(-4 // ndev) * ndev}
    assert {name for name, _ in seen} == {"sauce", "umas"}
    node = [shape for name, shape in seen if name == "umas" and len(shape) == 3]
    assert node and all(shape[0] == 200 and shape[2] == 64 for shape in node), node
    for name, shape in seen:  # batch axis: 1 for [T, N, ...], 0 for [N] parameters
        width = shape[1] if len(shape) >= 2 else shape[0]
        # on several devices the kernel is traced on the padded batch and on one device's
        # slice of it
        assert want[name] in (width, width * ndev), (name, shape, ndev)
    ref = fastuq.score(table, "sauce,umas", backend="numpy")
    for name in ("sauce", "umas"):
        np.testing.assert_allclose(got[name].to_numpy(), ref[name].to_numpy(),
                                   rtol=1e-12, atol=1e-12, err_msg=name)


# ----------------------------------------------------------------------------- CPUs


def _cgroup(tmp_path, self_cgroup: str, files: dict[str, str]):
    root = tmp_path / "cgroup"
    for rel, text in files.items():
        path = root / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    root.mkdir(exist_ok=True)
    proc = tmp_path / "self_cgroup"
    proc.write_text(self_cgroup)
    return root, proc


def test_cgroup_v2_quota(tmp_path):
    root, proc = _cgroup(tmp_path, "0::/job\n", {
        "cgroup.controllers": "cpu memory\n",
        "cpu.max": "max 100000\n",
        "job/cpu.max": "150000 100000\n",  # 1.5 CPUs
    })
    assert runtime.cgroup_cpu_limit(root, proc) == pytest.approx(1.5)


def test_cgroup_v2_parent_limit_applies_to_its_children(tmp_path):
    root, proc = _cgroup(tmp_path, "0::/a/b\n", {
        "cgroup.controllers": "cpu\n",
        "a/cpu.max": "300000 100000\n",  # 3 CPUs for a
        "a/b/cpu.max": "max 100000\n",  # no limit of its own
    })
    assert runtime.cgroup_cpu_limit(root, proc) == pytest.approx(3.0)


def test_cgroup_v2_without_limit(tmp_path):
    root, proc = _cgroup(tmp_path, "0::/\n", {"cgroup.controllers": "cpu\n",
                                              "cpu.max": "max 100000\n"})
    assert runtime.cgroup_cpu_limit(root, proc) is None


def test_cgroup_v2_container_root(tmp_path):
    """A container sees its own cgroup as the root; /proc/self/cgroup names a path that does
    not exist under the mount: the root's limit holds."""
    root, proc = _cgroup(tmp_path, "0::/kubepods/pod1/abc\n", {
        "cgroup.controllers": "cpu\n", "cpu.max": "200000 100000\n"})
    assert runtime.cgroup_cpu_limit(root, proc) == pytest.approx(2.0)


def test_cgroup_v1_quota(tmp_path):
    root, proc = _cgroup(tmp_path, "4:memory:/x\n3:cpu,cpuacct:/docker/c1\n", {
        "cpu,cpuacct/cpu.cfs_quota_us": "-1\n", "cpu,cpuacct/cpu.cfs_period_us": "100000\n",
        "cpu,cpuacct/docker/c1/cpu.cfs_quota_us": "250000\n",
        "cpu,cpuacct/docker/c1/cpu.cfs_period_us": "100000\n",
    })
    assert runtime.cgroup_cpu_limit(root, proc) == pytest.approx(2.5)


def test_cgroup_v1_unlimited_and_hybrid(tmp_path):
    """A hybrid host (this one's layout): v2 mounted at ``unified`` without the cpu
    controller, v1 ``cpu`` with quota -1: no limit; with a v1 quota: that."""
    files = {"unified/cgroup.controllers": "\n", "cpu/cpu.cfs_quota_us": "-1\n",
             "cpu/cpu.cfs_period_us": "100000\n"}
    root, proc = _cgroup(tmp_path, "1:cpu:/\n0::/\n", files)
    assert runtime.cgroup_cpu_limit(root, proc) is None
    (root / "cpu/cpu.cfs_quota_us").write_text("100000\n")
    assert runtime.cgroup_cpu_limit(root, proc) == pytest.approx(1.0)


def test_cgroup_missing_or_malformed_is_no_limit(tmp_path):
    root, proc = _cgroup(tmp_path, "garbage\n", {})
    assert runtime.cgroup_cpu_limit(root, proc) is None
    root, proc = _cgroup(tmp_path, "0::/\n", {"cgroup.controllers": "cpu\n",
                                              "cpu.max": "lots\n"})
    assert runtime.cgroup_cpu_limit(root, proc) is None
    assert runtime.cgroup_cpu_limit(tmp_path / "nowhere", tmp_path / "nothing") is None


def test_available_cpus_is_the_least_of_affinity_and_quota(tmp_path, monkeypatch):
    monkeypatch.setattr(os, "sched_getaffinity", lambda pid: set(range(8)), raising=False)
    root, proc = _cgroup(tmp_path, "0::/\n", {"cgroup.controllers": "cpu\n",
                                              "cpu.max": "250000 100000\n"})
    assert runtime.available_cpus(root, proc) == 3  # 8 CPUs, quota 2.5 -> 3
    (root / "cpu.max").write_text("max 100000\n")
    assert runtime.available_cpus(root, proc) == 8
    (root / "cpu.max").write_text("5000 100000\n")  # 0.05 CPU: still one device
    assert runtime.available_cpus(root, proc) == 1
    monkeypatch.setattr(os, "sched_getaffinity", lambda pid: {3, 5}, raising=False)
    monkeypatch.setattr(os, "cpu_count", lambda: 64)
    (root / "cpu.max").write_text("max 100000\n")
    assert runtime.available_cpus(root, proc) == 2  # affinity, not the host's 64 cores


def test_default_device_count_honours_xla_flags(monkeypatch):
    from fastuq.engine import host  # default_cpu_devices looks available_cpus up there

    monkeypatch.setattr(host, "available_cpus", lambda: 5)
    monkeypatch.setenv("XLA_FLAGS", "--xla_cpu_foo=1 --xla_force_host_platform_device_count=3")
    assert runtime.default_cpu_devices() == 3
    monkeypatch.delenv("XLA_FLAGS")
    assert runtime.default_cpu_devices() == 5


def _env(**extra: str) -> dict[str, str]:
    env = dict(os.environ, JAX_PLATFORMS="cpu", **extra)
    if "XLA_FLAGS" not in extra:
        env.pop("XLA_FLAGS", None)
    return env


def test_cli_default_devices_are_the_cpus_this_process_may_use(tmp_path):
    """``fastuq score`` without ``--cpu-devices`` in a process pinned to one CPU makes one
    XLA device (the host's core count would make ``os.cpu_count()``)."""
    code = textwrap.dedent(
        """
        import os
        os.sched_setaffinity(0, {min(os.sched_getaffinity(0))})
        from fastuq.cli import main
        assert main(["score", "--sample", "--no-progress"]) == 0
        import jax
        print("devices", len(jax.devices("cpu")))
        """)
    if not hasattr(os, "sched_setaffinity"):
        pytest.skip("no sched_setaffinity on this platform")
    res = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         timeout=600, cwd=tmp_path, env=_env())
    assert res.returncode == 0, res.stderr[-3000:]
    assert res.stdout.strip().splitlines()[-1] == "devices 1", res.stdout


# ----------------------------------------------------------------------------- devices

_SCRIPT = textwrap.dedent(
    """
    import json, sys, warnings
    import numpy as np
    import fastuq
    from fastuq.engine.runtime import record_splits
    import jax
    path, out, methods, want = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4])
    assert len(jax.devices("cpu")) == want, jax.devices("cpu")
    result, logs = {}, {}
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        for dtype in ("float64", "float32"):
            for chunk in (1000, 64):
                with record_splits() as log:
                    table = fastuq.score(path, methods, chunk_rows=chunk, dtype=dtype)
                logs[f"{dtype}/{chunk}"] = log
                for name in table.column_names:
                    if name not in ("trajectory_id", "question_id", "protocol", "correct"):
                        result[f"{name}/{dtype}/{chunk}"] = table[name].to_numpy()
        device = fastuq.score(path, "sauce", chunk_rows=1000, pack="device")
        result["sauce/device_pack"] = device["sauce"].to_numpy()
        # Chunks of one and two trajectories: fewer than 3 or 6 devices.
        rng = np.random.default_rng(0)
        a = rng.integers(0, 4, (4, 5)) / 3.0
        h = rng.exponential(0.3, (4, 5))
        for size in (1, 2):
            result[f"small/{size}"] = fastuq.sauce_batch(a, h, chunk_size=size)["score"]
    np.savez(out, **result)
    unsplit = [str(w.message) for w in caught if "cannot be split" in str(w.message)]
    print(json.dumps({"logs": logs, "unsplit": unsplit}))
    """
)


def _ragged_corpus(path) -> int:
    """Debates of 2 and 6 agents and DyLAN runs of 4, of 1 to 4 rounds, interleaved, with
    nodes (UMAS) and beliefs: chunks of 64 see different rounds and teams."""
    from fastuq.synth import corpus_with_beliefs

    parts = [
        corpus_with_beliefs(60, protocol="debate", seed=1, n_agents=2, n_rounds=2, topk=2),
        corpus_with_beliefs(50, protocol="mixed", seed=2, topk=2),
        corpus_with_beliefs(40, protocol="debate", seed=3, n_agents=6, n_rounds=4, topk=2),
    ]
    table = pa.concat_tables(parts, promote_options="default")
    order = np.random.default_rng(7).permutation(table.num_rows)
    table = table.take(pa.array(order))
    ids = pa.array([f"t{i}" for i in range(table.num_rows)])
    table = table.set_column(table.column_names.index("trajectory_id"), "trajectory_id", ids)
    pq.write_table(table, path)
    return table.num_rows


def _run_devices(path, devices: int, methods: str, tmp_path):
    out = tmp_path / f"d{devices}.npz"
    env = _env(XLA_FLAGS=f"--xla_force_host_platform_device_count={devices}")
    res = subprocess.run(
        [sys.executable, "-c", _SCRIPT, str(path), str(out), methods, str(devices)],
        capture_output=True, text=True, timeout=900, cwd=tmp_path, env=env)
    assert res.returncode == 0, res.stderr[-3000:]
    return np.load(out), json.loads(res.stdout.strip().splitlines()[-1])


@pytest.fixture(scope="module")
def ragged(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("cores")
    path = tmp / "ragged.parquet"
    n = _ragged_corpus(path)
    one, info = _run_devices(path, 1, "all", tmp)
    assert info["unsplit"] == []  # one device: every chunk splits
    return path, n, one, tmp


def _bits(x: np.ndarray) -> np.ndarray:
    return x.view(np.uint64 if x.dtype == np.float64 else np.uint32)


@pytest.mark.slow  # subprocesses with 3 and 6 host devices
@pytest.mark.parametrize("devices", [3, 6])
def test_any_device_count_is_bit_identical_and_every_device_works(ragged, devices):
    """``fastuq.score(..., "all")`` on a ragged corpus (whole, and in chunks of 64), in
    float64 and float32, with 3 and 6 devices: the bits of 1 device, every chunk padded to a
    multiple of the device count, every device scoring real trajectories (read from its
    shard of the masks), and the chunks smaller than the device count said once."""
    path, n, one, tmp = ragged
    got, info = _run_devices(path, devices, "all", tmp)
    assert set(got.files) == set(one.files)
    for key in one.files:
        base = one[key]
        if key.startswith(("sauce/", "umas/", "bccs/")):
            assert base.shape == (n,) and np.isfinite(base).all(), key
        assert np.array_equal(_bits(got[key]), _bits(base)), (
            f"{key}, {devices} devices: {int((got[key] != base).sum())} rows differ")
    # pack="device" (inputs packed on the first device, redistributed) gives the host bits
    assert np.array_equal(_bits(got["sauce/device_pack"]), _bits(one["sauce/float64/1000"]))
    for label, log in info["logs"].items():
        names = {call["estimator"] for call in log}
        assert {"sauce", "umas", "bccs"} <= names, (label, names)
        for call in log:
            assert len(set(call["devices"])) == devices
            assert call["width"] % devices == 0 and call["width"] >= call["n"]
            assert sum(call["trajectories"]) == call["n"]
            assert min(call["trajectories"]) >= 1, (label, call)
            # every device holds real trajectories in its shard of the masks, as placed
            if call["estimator"] in ("sauce", "umas", "bccs"):
                assert call["scored"] == call["trajectories"], (label, call)
    # The chunks of 1 and 2 trajectories cannot use every device: said once, not per chunk
    assert len(info["unsplit"]) == 1, info["unsplit"]
    assert f"over {devices} devices" in info["unsplit"][0]


@pytest.mark.skipif(not sys.platform.startswith("linux") or any(
    k in os.environ for k in ("MALLOC_MMAP_THRESHOLD_", "MALLOC_TRIM_THRESHOLD_",
                              "GLIBC_TUNABLES")), reason="glibc's mallopt, as the process sets it")
def test_lean_allocator_returns_freed_blocks_to_the_system():
    """After ``tune_allocator`` a freed 16 MiB block stays in the process (its pages kept for
    reuse); after ``lean_allocator`` (what ``fastuq eval`` calls once it has scored) the
    same block goes back to the system when freed. Measured on the resident set of a fresh
    process."""
    code = textwrap.dedent("""
        import os, platform
        import numpy as np
        from fastuq.engine.host import lean_allocator, tune_allocator
        if platform.libc_ver()[0] != "glibc":
            print("skip"); raise SystemExit
        def rss():
            with open("/proc/self/statm") as f:
                return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")
        def kept():
            before = rss()
            a = np.ones(2 << 20)  # 16 MiB, every page touched
            del a
            return rss() - before
        assert tune_allocator()
        tuned = kept()
        assert lean_allocator()
        print(tuned, kept())
    """)
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         check=True).stdout.split()
    if out == ["skip"]:
        pytest.skip("not glibc")
    tuned, lean = (int(v) for v in out)
    assert tuned >= 15 << 20  # kept for reuse
    assert lean < 1 << 20  # handed back
