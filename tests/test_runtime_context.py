"""Runtime state is per context, and the pipeline's threads carry their caller's.

``device_scope`` and ``record_splits`` keep their state in ``contextvars``: a thread in one
scope does not see another thread's, and the threads that the scoring pipeline starts
(``pipeline._prefetch``: reading and preparing the next chunk) run in a copy of the caller's
context, under the caller's JAX default device (which JAX keeps per thread). Before issue
20 the scope was a module-level list (every thread saw the last one set) and the prefetch
thread lost JAX's default device and every context variable of its caller. The caches the
engine fills from several threads (meshes, per-device wrappers) give one object per key.
"""

from __future__ import annotations

import contextvars
import threading

import jax
import numpy as np
import pytest

from fastuq.engine import runtime
from fastuq.engine.pipeline import _prefetch

_PROBE: contextvars.ContextVar[str] = contextvars.ContextVar("probe", default="unset")


def _in_thread(fn):
    """``fn()`` on a fresh ``threading.Thread`` (no context carried): its result."""
    out = []
    thread = threading.Thread(target=lambda: out.append(fn()))
    thread.start()
    thread.join()
    return out[0]


def test_prefetch_thread_runs_in_a_copy_of_the_callers_context():
    def produce():
        yield _PROBE.get(), threading.current_thread().name

    token = _PROBE.set("caller's")
    try:
        got = list(_prefetch(produce(), name="probe-reader"))
    finally:
        _PROBE.reset(token)
    assert got == [("caller's", "probe-reader")]  # produced on the thread, seen there
    assert _in_thread(_PROBE.get) == "unset"  # a plain thread starts in an empty context


def test_jax_default_device_of_the_scope_reaches_the_prefetch_thread():
    def produce():
        yield jax.config.jax_default_device, runtime.local_devices()[0].platform

    with runtime.device_scope("cpu"):
        ((default, first),) = list(_prefetch(produce()))
    # JAX keeps its default device per thread: the prefetch thread enters it again
    assert default == jax.devices("cpu")[0] and first == "cpu"


def test_device_scope_reaches_the_prefetch_thread():
    def produce():
        yield runtime.scoped_platform()

    with runtime.device_scope("cpu"):
        assert list(_prefetch(produce())) == ["cpu"]
    assert runtime.scoped_platform() is None
    assert list(_prefetch(produce())) == [None]


def test_scopes_of_two_threads_are_their_own():
    both_inside = threading.Barrier(2, timeout=30)
    both_read = threading.Barrier(2, timeout=30)
    seen = {}

    def scoped():
        with runtime.device_scope("cpu"):
            both_inside.wait()
            seen["scoped"] = runtime.scoped_platform()
            both_read.wait()
        seen["scoped after"] = runtime.scoped_platform()

    def unscoped():
        both_inside.wait()  # the other thread is inside its scope now
        seen["unscoped"] = runtime.scoped_platform()
        seen["unscoped default"] = jax.config.jax_default_device
        both_read.wait()

    threads = [threading.Thread(target=f) for f in (scoped, unscoped)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert seen == {"scoped": "cpu", "scoped after": None, "unscoped": None,
                    "unscoped default": None}


@pytest.mark.skipif(jax.default_backend() == "cpu",
                    reason="needs a default backend other than the CPU to tell scopes apart")
def test_a_cpu_scope_does_not_move_another_threads_kernels():
    default = jax.default_backend()
    inside = threading.Event()
    done = threading.Event()

    def scoped():
        with runtime.device_scope("cpu"):
            inside.set()
            done.wait(30)

    thread = threading.Thread(target=scoped)
    thread.start()
    try:
        assert inside.wait(30)
        assert {d.platform for d in runtime.local_devices()} == {default}
    finally:
        done.set()
        thread.join()


def _small_batch(n=64, t=3):
    rng = np.random.default_rng(0)
    a = rng.random((t, n))
    h = rng.exponential(0.5, (t, n))
    return a, h, np.ones((t, n), bool)


def test_record_splits_records_its_own_threads_calls_only():
    import fastuq

    a, h, m = _small_batch()
    fastuq.sauce_batch(a, h, m, protocol="debate")  # compiled before the threads race
    recording = threading.Event()
    other_done = threading.Event()
    logs = {}

    def recorder():
        with runtime.record_splits() as log:
            recording.set()
            other_done.wait(60)
            logs["recorder"] = list(log)

    def other():
        recording.wait(60)
        with runtime.record_splits() as log:
            fastuq.sauce_batch(a, h, m, protocol="debate")
        logs["other"] = list(log)
        other_done.set()

    threads = [threading.Thread(target=f) for f in (recorder, other)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(logs["other"]) == 1 and logs["other"][0]["n"] == 64
    assert logs["recorder"] == []  # the other thread's kernel call is not in this log


def test_per_device_gives_one_wrapper_per_key_across_threads():
    def kernel(x, *, scale):
        return {"y": x * scale}

    start = threading.Barrier(6, timeout=30)
    got = []
    lock = threading.Lock()

    def ask():
        start.wait()
        wrapped = runtime.per_device(kernel, (0,), scale=2.0)
        with lock:
            got.append(wrapped)

    threads = [threading.Thread(target=ask) for _ in range(6)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(got) == 6 and all(w is got[0] for w in got)
    n = 4 * len(runtime.local_devices())
    out = runtime.run_bucketed(kernel, [(np.arange(n, dtype=np.float32), 0, 0.0)], n,
                               np.float32, scale=2.0)
    np.testing.assert_array_equal(out["y"], 2.0 * np.arange(n, dtype=np.float32))
