"""The kernels' compile-time arrangement does not change a bit of their numbers.

``sauce_scan`` compiled as a top-level program with ``XLA_COMPILER_OPTIONS`` (512-bit vectors
on CPU: ``kernels._compile.top_level_jit``, what the engine's ``runtime.per_device`` does on
one device or several) and, for summaries, fully unrolled up to 32 rounds; before issue 12
it compiled with XLA's defaults and unrolled up to 16. The previous path is the kernel
itself (a plain jit since issue 20: what a call on its own or inside a caller's jit runs)
with the old unroll rule, and both must agree bit for bit (NaN sign included) on every
output field, float32 and float64, on ragged batches with masked garbage (NaN), holes in
the round mask, trajectories without rounds, scalar and per-trajectory parameters. The
sweep's vmapped scorer compiles with the same options, so UMAS is checked the same way.

Issue 20: the options are applied through public JAX API only (no ``jax._src``), at the
jit that is the top of the program.
"""

import functools
import re
from pathlib import Path

import jax
import numpy as np
import pytest

from fastuq.kernels._compile import top_level_jit
from fastuq.kernels.constants import XLA_COMPILER_OPTIONS
from fastuq.kernels.sauce import (
    SUMMARY_FIELDS,
    TRACE_FIELDS,
    SauceParams,
    sauce,
    sauce_scan,
    sauce_scan_numpy,
)
from fastuq.kernels.umas import SUMMARY_FIELDS as UMAS_SUMMARY
from fastuq.kernels.umas import TRACE_FIELDS as UMAS_TRACE
from fastuq.kernels.umas import pack_edges, umas_scan

ALL = SUMMARY_FIELDS + TRACE_FIELDS
TOL = {np.float64: 1e-12, np.float32: 1e-5}

#: The kernel as it was compiled before: XLA's default options, full unrolling up to T = 16.
_previous_scan = sauce_scan
#: The kernel as the engine compiles it: the top of the program, with the options (on CPU).
_engine_scan = top_level_jit(sauce_scan, static_argnames=("fields", "unroll", "block"))


def _previous_unroll(t_max):
    return True if t_max <= 16 else 1  # summaries or traces alike


def _bits(x):
    x = np.asarray(x)
    return x.view(np.uint64 if x.dtype == np.float64 else np.uint32)


def _assert_bit_equal(got, ref):
    assert got.keys() == ref.keys()
    for name in ref:
        g, r = np.asarray(got[name]), np.asarray(ref[name])
        assert g.dtype == r.dtype and g.shape == r.shape, name
        diff = _bits(g) != _bits(r)
        nan_only = np.isnan(g) & np.isnan(r)
        assert not diff.any(), (
            f"{name}: {np.sum(diff)} of {r.size} values differ, {np.sum(diff & ~nan_only)} "
            f"not NaN in both; e.g. {g[diff][:3]} vs {r[diff][:3]}")


def _batch(rng, n, t_max, dtype, holes):
    lengths = rng.integers(0, t_max + 1, n)  # some trajectories without rounds
    mask = np.arange(t_max)[:, None] < lengths[None, :]
    if holes:
        mask &= rng.random((t_max, n)) > 0.2  # masked rounds inside a trajectory
    a = rng.integers(0, 4, (t_max, n)) / 3.0
    a = np.where(rng.random((t_max, n)) < 0.5, rng.random((t_max, n)), a)
    h = rng.exponential(0.5, (t_max, n)) * (rng.random((t_max, n)) > 0.1)  # some zeros
    a[~mask] = np.nan
    h[~mask] = np.nan
    return a.astype(dtype), h.astype(dtype), mask


def _params(rng, n, per_trajectory, dtype):
    if per_trajectory:
        return SauceParams(
            rng.uniform(0, 1, n).astype(dtype), rng.uniform(0, 0.5, n).astype(dtype),
            rng.uniform(0.01, 1, n).astype(dtype), rng.uniform(-0.5, 0.5, n).astype(dtype),
        )
    lam, q, s2, mu = rng.uniform(0.5, 1), rng.uniform(0, 0.3), rng.uniform(0.05, 1), \
        rng.uniform(-0.5, 0.5)
    return SauceParams(*(np.asarray(x, dtype) for x in (lam, q, s2, mu)))


def _cases():
    # (T, N, dtype, fields, per-trajectory parameters and holes in the round mask)
    for i, t_max in enumerate((1, 3, 15, 20, 40)):
        for j, dtype in enumerate((np.float32, np.float64)):
            for k, fields in enumerate((("score",), ALL)):
                yield t_max, 16_397, dtype, fields, bool((i + j + k) % 2)
    for t_max in (17, 24, 32, 33):  # summaries: unrolled now, rolled before
        yield t_max, 4_099, np.float32, SUMMARY_FIELDS, t_max % 2 == 0
    for n in (1, 5, 1000):
        yield 3, n, np.float32, ALL, True
        yield 17, n, np.float64, ("score",), False


@pytest.mark.parametrize(("t_max", "n", "dtype", "fields", "ragged"), list(_cases()))
def test_sauce_scan_bit_identical_to_previous_path(t_max, n, dtype, fields, ragged):
    rng = np.random.default_rng([t_max, n, len(fields), np.dtype(dtype).itemsize])
    for _ in range(2):
        a, h, m = _batch(rng, n, t_max, dtype, holes=ragged)
        p = _params(rng, n, ragged, dtype)
        with jax.enable_x64(dtype == np.float64):
            got = {k: np.asarray(v) for k, v in _engine_scan(a, h, m, p, fields=fields).items()}
            ref = {k: np.asarray(v) for k, v in _previous_scan(
                a, h, m, p, fields=fields, unroll=_previous_unroll(t_max)).items()}
            score = np.asarray(sauce(a, h, m, lam=p.lam, q=p.q, sigma2_0=p.sigma2_0,
                                     mu_0=p.mu_0))
        _assert_bit_equal(got, ref)
        _assert_bit_equal({"score": score}, {"score": ref["score"]})
        twin = sauce_scan_numpy(a, h, m, p, fields=fields)
        for name in fields:
            np.testing.assert_allclose(got[name], twin[name], rtol=TOL[dtype],
                                       atol=TOL[dtype], equal_nan=True, err_msg=name)


@pytest.mark.parametrize("block", [1024, 4096])
def test_sauce_scan_blocks_bit_identical(block):
    rng = np.random.default_rng(block)
    n = 4 * 4096
    a, h, m = _batch(rng, n, 7, np.float32, holes=True)
    p = _params(rng, n, True, np.float32)
    with pytest.raises(ValueError, match="does not divide"):
        sauce_scan(a[:, :-1], h[:, :-1], m[:, :-1], p, fields=ALL, block=block)
    got = _engine_scan(a, h, m, p, fields=ALL, block=block)
    ref = _previous_scan(a, h, m, p, fields=ALL, unroll=True)
    _assert_bit_equal({k: np.asarray(v) for k, v in got.items()},
                      {k: np.asarray(v) for k, v in ref.items()})


def _umas_batch(rng, t_max, n, a, dtype):
    n_tokens = rng.integers(20, 400, (t_max, n, a))
    conf = (-rng.exponential(0.3, (t_max, n, a)) * n_tokens).astype(dtype)
    conf[rng.random(conf.shape) < 0.05] = 0.0  # confidence exactly 0 (the ceiling's case)
    mask = np.ones((t_max, n, a), bool)
    mask[1:] = rng.random((t_max - 1, n, a)) > 0.15
    mask[0] &= rng.random((n, a)) > 0.05
    conf[~mask] = np.nan
    edges = pack_edges(rng.random((t_max, n, a, a)) > 0.4)
    return conf, mask, edges


@functools.cache
def _umas_jit(with_options, explicit, fields):
    def run(conf, mask, edges=None):
        return umas_scan(conf, mask, edges if explicit else None, fields=fields)

    options = XLA_COMPILER_OPTIONS if with_options else None
    return jax.jit(run, compiler_options=options)


@pytest.mark.parametrize(("t_max", "n_agents", "dtype", "explicit"), [
    (1, 3, np.float32, False), (3, 4, np.float32, False), (3, 4, np.float64, True),
    (4, 6, np.float32, True), (5, 3, np.float64, False), (20, 4, np.float32, True),
])
def test_umas_bit_identical_under_kernel_options(t_max, n_agents, dtype, explicit):
    rng = np.random.default_rng([t_max, n_agents, np.dtype(dtype).itemsize, explicit])
    conf, mask, edges = _umas_batch(rng, t_max, 5_003, n_agents, dtype)
    fields = UMAS_SUMMARY + UMAS_TRACE
    with jax.enable_x64(dtype == np.float64):
        got = _umas_jit(True, explicit, fields)(conf, mask, edges)
        ref = _umas_jit(False, explicit, fields)(conf, mask, edges)
        got = {k: np.asarray(v) for k, v in got.items()}
        ref = {k: np.asarray(v) for k, v in ref.items()}
    _assert_bit_equal(got, ref)


@pytest.mark.parametrize(("t_max", "n_agents", "explicit", "dtype"), [
    (13, 4, False, np.float32),  # rolled: more than FULL_UNROLL_ROUNDS
    (6, 8, True, np.float64),  # rolled: too many terms, explicit words
    (3, 20, False, np.float32),  # dense path (more than MAX_UNROLLED_AGENTS slots)
    (3, 4, False, np.float32),  # fully unrolled: one pass whatever block says
])
def test_umas_blocks_bit_identical(t_max, n_agents, explicit, dtype):
    rng = np.random.default_rng([t_max, n_agents, explicit])
    n = 2_500  # two whole blocks of 1,000 and a tail of 500
    conf, mask, edges = _umas_batch(rng, t_max, n, n_agents, dtype)
    edges = edges if explicit else None
    fields = UMAS_SUMMARY + UMAS_TRACE
    with jax.enable_x64(dtype == np.float64):
        ref = {k: np.asarray(v) for k, v in umas_scan(conf, mask, edges, fields=fields,
                                                       block=0).items()}
        for block in (1_000, 2_500, None):
            got = {k: np.asarray(v) for k, v in umas_scan(conf, mask, edges, fields=fields,
                                                           block=block).items()}
            _assert_bit_equal(got, ref)


def test_cpu_options_only_on_cpus():
    from fastuq.kernels._compile import compiler_options, default_platform

    assert compiler_options("cpu") == XLA_COMPILER_OPTIONS
    assert compiler_options("gpu") == {} and compiler_options("cuda") == {}
    assert compiler_options() == (XLA_COMPILER_OPTIONS if default_platform() == "cpu" else {})
    cpu = jax.devices("cpu")[0]
    with jax.default_device(cpu):
        assert default_platform() == "cpu"
        assert compiler_options() == XLA_COMPILER_OPTIONS


def test_kernel_jit_traces_anywhere_top_level_jit_only_at_the_top():
    from fastuq.kernels._compile import kernel_jit

    @kernel_jit
    def double(x):
        return 2 * x

    x = np.arange(4.0, dtype=np.float32)
    expect = 2 * np.arange(4.0)
    np.testing.assert_array_equal(np.asarray(double(x)), expect)
    # inside a caller's jit: on traced arguments, and on constants it closes over
    np.testing.assert_array_equal(np.asarray(jax.jit(lambda v: double(v) + 1)(x)), expect + 1)
    np.testing.assert_array_equal(np.asarray(jax.jit(lambda: double(x) + 1)()), expect + 1)
    np.testing.assert_array_equal(np.asarray(jax.vmap(double)(x)), expect)
    # the top-level program carries the options on a CPU (JAX refuses them on a nested jit:
    # the refusal shows they are there) and none elsewhere
    cpu_top = top_level_jit(double, "cpu")
    np.testing.assert_array_equal(np.asarray(cpu_top(x)), expect)
    with pytest.raises(ValueError, match="top-level"):
        jax.jit(lambda v: cpu_top(v))(x)
    gpu_top = top_level_jit(double, "gpu")
    np.testing.assert_array_equal(np.asarray(jax.jit(lambda v: gpu_top(v))(x)), expect)


def test_per_device_compiles_the_top_level_program_with_the_options():
    """One device or several, the engine's wrapper is the outermost jit and carries the
    options on a CPU (the kernel inside it is traced)."""
    from fastuq.engine.runtime import local_devices, per_device

    def kernel(x, *, scale):
        return {"y": double_plain(x) * scale}

    double_plain = jax.jit(lambda v: 2 * v)
    wrapped = per_device(kernel, (0,), scale=3.0)
    n = 2 * len(local_devices())
    x = np.arange(n, dtype=np.float32)
    np.testing.assert_array_equal(np.asarray(wrapped(x)["y"]), 6 * x)
    if local_devices()[0].platform == "cpu":
        with pytest.raises(ValueError, match="top-level"):
            jax.jit(lambda v: wrapped(v)["y"])(x)


def test_no_private_jax_api():
    """fastuq and its kernels use JAX's public API only: no ``jax._src`` anywhere."""
    import fastuq
    import fastuq.kernels

    roots = {Path(fastuq.__file__).parent, Path(fastuq.kernels.__file__).parent}
    pattern = re.compile(r"\bjax\._src\b|from\s+jax\s+import\s+_src\b")
    found = [f"{path}:{i}" for root in roots for path in sorted(root.rglob("*.py"))
             for i, line in enumerate(path.read_text().splitlines(), 1)
             if pattern.search(line)]
    assert found == []
